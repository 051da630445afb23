//! (pure, except [`TlsMaterial::generate`]) The pgBackRest children of a cluster with
//! `spec.backups.pgbackrest` (seed 004, "pgbackrest Integration"):
//!
//! - the repository host `<cluster>-repo`: a claim, a Pod running `pgbackrest server` (TLS,
//!   no SSH) over it, and a Service;
//! - a `pgbackrest` sidecar in every instance Pod, also `pgbackrest server`, which the
//!   repository side reaches through the `-primary` Service to read the primary's files;
//! - WAL archiving: every instance's `archive_command` pushes to the repository;
//! - the ConfigMap `<cluster>-pgbackrest` with both sides' configuration, and the Secret
//!   `<cluster>-pgbackrest-tls` with a CA, the two server certificates and the client
//!   certificate both sides present (`tls-server-auth` admits only that client);
//! - the Job `<cluster>-stanza-create`, which creates the stanza once the primary answers;
//! - a Job `<backup>-job` per `PostgresBackup`, which runs `pgbackrest backup`.
//!
//! Commands that need the repository locally (stanza-create; later backup, expire) run in Jobs
//! that mount the repository's claim, with the repository host's configuration; pgBackRest's
//! locks live on that volume, so the server and a Job never work on the repository at once.
//!
//! pgBackRest 2.45 matches a server's certificate against the host name it was given (DNS
//! names only), so every certificate names the Service it is reached through.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Affinity, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, PersistentVolumeClaim,
    PersistentVolumeClaimVolumeSource, Pod, PodAffinity, PodAffinityTerm, PodSecurityContext,
    PodSpec, PodTemplateSpec, Secret, Service, ServicePort, ServiceSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use steward_api::pgbackrest::{PostgresBackup, PostgresRestore, RestoreTarget};
use steward_api::postgres::{PgBackRestSpec, PostgresCluster};

use crate::postgres::repository::BACKUP_ANNOTATION;

use crate::postgres::build::config::stable_hash;
use crate::postgres::build::instance::{
    SPEC_HASH, field_env, mount, secret_env, secret_volume, value_env,
};
use crate::postgres::build::secrets::{PASSWORD_KEY, USERNAME_KEY};
use crate::postgres::names::{ClusterNames, DATA_MOUNT, ENGINE, PGDATA, PORT};
use crate::postgres::validate::ValidatedPostgresCluster;
use crate::resources::{Labels, child_meta};

/// The stanza every cluster's repository holds (one cluster per repository).
pub const STANZA: &str = "db";
/// The port `pgbackrest server` listens on (pgBackRest's default).
pub const PGBACKREST_PORT: i32 = 8432;
/// The name of that port on containers and Services.
pub const PGBACKREST_PORT_NAME: &str = "pgbackrest";
/// The sidecar's name in instance Pods, and the repository Pod's container.
pub const CONTAINER: &str = "pgbackrest";
/// Where the configuration files are mounted.
pub const CONFIG_MOUNT: &str = "/etc/pgbackrest";
/// Where the TLS Secret is mounted.
pub const TLS_MOUNT: &str = "/etc/steward/pgbackrest-tls";
/// Where the repository's claim is mounted.
pub const REPO_MOUNT: &str = "/pgbackrest";
/// The repository inside it.
pub const REPO_PATH: &str = "/pgbackrest/repo";
/// The configuration file of the instances' side (archive-push, the sidecar).
pub const INSTANCE_CONF: &str = "instance.conf";
/// The configuration file of the repository's side (the server, Jobs).
pub const REPO_CONF: &str = "repo.conf";
/// The common name of the client certificate both sides present.
pub const CLIENT_CN: &str = "pgbackrest-client";
/// Component label of the repository's Pod, claim and Service.
pub const REPO_COMPONENT: &str = "repo";

/// Keys of the TLS Secret.
pub const CA_CRT: &str = "ca.crt";
/// The repository server's certificate and key.
pub const REPO_CRT: &str = "repo.crt";
/// See [`REPO_CRT`].
pub const REPO_KEY: &str = "repo.key";
/// The instances' server certificate and key.
pub const INSTANCE_CRT: &str = "instance.crt";
/// See [`INSTANCE_CRT`].
pub const INSTANCE_KEY: &str = "instance.key";
/// The client certificate and key.
pub const CLIENT_CRT: &str = "client.crt";
/// See [`CLIENT_CRT`].
pub const CLIENT_KEY: &str = "client.key";

const CONFIG_VOLUME: &str = "pgbackrest-config";
const TLS_VOLUME: &str = "pgbackrest-tls";
const REPO_VOLUME: &str = "repo";

/// The certificates of a cluster's pgBackRest, PEM. `Debug` shows no key.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsMaterial {
    files: BTreeMap<&'static str, String>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("files", &self.files.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The DNS names a Service answers to from inside the cluster.
fn service_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

impl TlsMaterial {
    /// A fresh CA (its key is not kept: nothing is signed later) and the three certificates.
    pub fn generate(names: &ClusterNames) -> Result<Self, rcgen::Error> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        };
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.distinguished_name.push(
            DnType::CommonName,
            format!("{} pgBackRest CA", names.cluster),
        );
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key)?;
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let leaf = |cn: &str, dns: Vec<String>| -> Result<(String, String), rcgen::Error> {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(dns)?;
            params.distinguished_name.push(DnType::CommonName, cn);
            params.extended_key_usages = vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ];
            let cert = params.signed_by(&key, &issuer)?;
            Ok((cert.pem(), key.serialize_pem()))
        };
        let (repo_crt, repo_key) = leaf(
            &names.repo(),
            service_names(&names.repo(), &names.namespace),
        )?;
        let (instance_crt, instance_key) = leaf(
            &names.primary_service(),
            service_names(&names.primary_service(), &names.namespace),
        )?;
        let (client_crt, client_key) = leaf(CLIENT_CN, vec![CLIENT_CN.to_owned()])?;
        Ok(Self {
            files: BTreeMap::from([
                (CA_CRT, ca.pem()),
                (REPO_CRT, repo_crt),
                (REPO_KEY, repo_key),
                (INSTANCE_CRT, instance_crt),
                (INSTANCE_KEY, instance_key),
                (CLIENT_CRT, client_crt),
                (CLIENT_KEY, client_key),
            ]),
        })
    }

    /// The PEM file under `key`.
    pub fn file(&self, key: &str) -> Option<&str> {
        self.files.get(key).map(String::as_str)
    }
}

/// The Secret `<cluster>-pgbackrest-tls`: created once, immutable (like the credential
/// Secrets), so the certificates both sides trust never change under them. `None` when the
/// owner was never stored.
pub fn tls_secret(
    owner: &PostgresCluster,
    cluster: &ValidatedPostgresCluster,
    material: &TlsMaterial,
) -> Option<Secret> {
    let names = cluster.names();
    let labels = Labels::new(ENGINE, &cluster.name, "pgbackrest-tls");
    let metadata = child_meta(
        owner,
        names.pgbackrest_tls_secret(),
        &labels,
        &BTreeMap::new(),
    )?;
    let data = material
        .files
        .iter()
        .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
        .collect();
    Some(Secret {
        metadata,
        data: Some(data),
        immutable: Some(true),
        type_: Some("Opaque".into()),
        ..Secret::default()
    })
}

fn tls_file(key: &str) -> String {
    format!("{TLS_MOUNT}/{key}")
}

/// Options both sides share.
fn common_options(spec: &PgBackRestSpec) -> String {
    format!(
        "compress-type={}\n\
         log-level-console=info\n\
         log-level-file=off\n\
         tls-server-ca-file={}\n\
         tls-server-auth={CLIENT_CN}={STANZA}\n",
        spec.compression.as_str(),
        tls_file(CA_CRT),
    )
}

/// The instances' side: the repository is remote (TLS), PostgreSQL is local.
pub fn instance_conf(names: &ClusterNames, spec: &PgBackRestSpec) -> String {
    format!(
        "# Generated by Steward; edits are overwritten.\n\
         [global]\n\
         repo1-host={repo}\n\
         repo1-host-type=tls\n\
         repo1-host-port={PGBACKREST_PORT}\n\
         repo1-host-ca-file={ca}\n\
         repo1-host-cert-file={client_crt}\n\
         repo1-host-key-file={client_key}\n\
         repo1-path={REPO_PATH}\n\
         tls-server-cert-file={crt}\n\
         tls-server-key-file={key}\n\
         lock-path={DATA_MOUNT}/pgbackrest-lock\n\
         spool-path={DATA_MOUNT}/pgbackrest-spool\n\
         {common}\
         \n\
         [{STANZA}]\n\
         pg1-path={PGDATA}\n\
         pg1-port={PORT}\n\
         pg1-socket-path={DATA_MOUNT}/run\n\
         pg1-user={user}\n",
        repo = names.repo_host(),
        ca = tls_file(CA_CRT),
        client_crt = tls_file(CLIENT_CRT),
        client_key = tls_file(CLIENT_KEY),
        crt = tls_file(INSTANCE_CRT),
        key = tls_file(INSTANCE_KEY),
        common = common_options(spec),
        user = crate::postgres::names::SUPERUSER,
    )
}

/// The repository's side: the repository is local, PostgreSQL is the primary, reached through
/// the `-primary` Service's pgBackRest port.
pub fn repo_conf(names: &ClusterNames, spec: &PgBackRestSpec) -> String {
    let diff = spec
        .retention_diff
        .map(|d| format!("repo1-retention-diff={d}\n"))
        .unwrap_or_default();
    format!(
        "# Generated by Steward; edits are overwritten.\n\
         [global]\n\
         repo1-path={REPO_PATH}\n\
         repo1-retention-full={full}\n\
         {diff}\
         start-fast=y\n\
         tls-server-cert-file={crt}\n\
         tls-server-key-file={key}\n\
         lock-path={REPO_MOUNT}/lock\n\
         {common}\
         \n\
         [{STANZA}]\n\
         pg1-host={primary}\n\
         pg1-host-type=tls\n\
         pg1-host-port={PGBACKREST_PORT}\n\
         pg1-host-ca-file={ca}\n\
         pg1-host-cert-file={client_crt}\n\
         pg1-host-key-file={client_key}\n\
         pg1-path={PGDATA}\n\
         pg1-port={PORT}\n\
         pg1-socket-path={DATA_MOUNT}/run\n\
         pg1-user={user}\n",
        full = spec.retention_full,
        crt = tls_file(REPO_CRT),
        key = tls_file(REPO_KEY),
        common = common_options(spec),
        primary = names.primary_host(),
        ca = tls_file(CA_CRT),
        client_crt = tls_file(CLIENT_CRT),
        client_key = tls_file(CLIENT_KEY),
        user = crate::postgres::names::SUPERUSER,
    )
}

/// The `postgresql.conf` settings of archiving to the repository, and of fetching from it: a
/// standby that fell behind what the primary keeps (`wal_keep_size`), for instance a replica
/// re-added on an old claim, catches up from the archive before it streams again.
pub fn archive_parameters() -> Vec<(&'static str, String)> {
    let pgbackrest =
        format!("pgbackrest --config={CONFIG_MOUNT}/{INSTANCE_CONF} --stanza={STANZA}");
    vec![
        ("archive_mode", "on".to_owned()),
        (
            "archive_command",
            format!("{pgbackrest} archive-push \"%p\""),
        ),
        (
            "restore_command",
            format!("{pgbackrest} archive-get %f \"%p\""),
        ),
    ]
}

/// The ConfigMap `<cluster>-pgbackrest`. `None` when the owner was never stored or backups
/// are off.
pub fn config_map(
    owner: &PostgresCluster,
    cluster: &ValidatedPostgresCluster,
) -> Option<ConfigMap> {
    let spec = cluster.pgbackrest.as_ref()?;
    let names = cluster.names();
    let labels = Labels::new(ENGINE, &cluster.name, "pgbackrest-config");
    let metadata = child_meta(owner, names.pgbackrest_config(), &labels, &BTreeMap::new())?;
    Some(ConfigMap {
        metadata,
        data: Some(BTreeMap::from([
            (INSTANCE_CONF.to_owned(), instance_conf(&names, spec)),
            (REPO_CONF.to_owned(), repo_conf(&names, spec)),
        ])),
        ..ConfigMap::default()
    })
}

fn config_volume(names: &ClusterNames) -> Volume {
    Volume {
        name: CONFIG_VOLUME.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: names.pgbackrest_config(),
            default_mode: Some(0o444),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The volumes an instance Pod adds for pgBackRest (configuration and certificates).
pub fn instance_volumes(names: &ClusterNames) -> Vec<Volume> {
    vec![
        config_volume(names),
        secret_volume(TLS_VOLUME, names.pgbackrest_tls_secret()),
    ]
}

/// The mounts the `postgres` container adds (its `archive_command` runs pgBackRest).
pub fn instance_mounts() -> Vec<k8s_openapi::api::core::v1::VolumeMount> {
    vec![
        mount(CONFIG_VOLUME, CONFIG_MOUNT, true),
        mount(TLS_VOLUME, TLS_MOUNT, true),
    ]
}

fn server_port() -> ContainerPort {
    ContainerPort {
        name: Some(PGBACKREST_PORT_NAME.into()),
        container_port: PGBACKREST_PORT,
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

/// The sidecar of an instance Pod: `pgbackrest server` on the Pod's address, reading the
/// instance's data volume (`pgdata_volume`) and logging in to PostgreSQL as the superuser.
pub fn sidecar(spec: &PgBackRestSpec, names: &ClusterNames, pgdata_volume: &str) -> Container {
    let secret = names.superuser_secret();
    Container {
        name: CONTAINER.into(),
        image: Some(spec.image.clone()),
        command: Some(vec![
            "pgbackrest".into(),
            format!("--config={CONFIG_MOUNT}/{INSTANCE_CONF}"),
            "server".into(),
        ]),
        env: Some(vec![
            field_env("POD_IP", "status.podIP"),
            value_env("PGBACKREST_TLS_SERVER_ADDRESS", "$(POD_IP)"),
            // The server's remote commands read the default configuration file, not the
            // server's `--config`: point them at ours.
            value_env(
                "PGBACKREST_CONFIG",
                format!("{CONFIG_MOUNT}/{INSTANCE_CONF}"),
            ),
            secret_env("PGUSER", &secret, USERNAME_KEY),
            secret_env("PGPASSWORD", &secret, PASSWORD_KEY),
        ]),
        ports: Some(vec![server_port()]),
        volume_mounts: Some(vec![
            mount(pgdata_volume, DATA_MOUNT, false),
            mount(CONFIG_VOLUME, CONFIG_MOUNT, true),
            mount(TLS_VOLUME, TLS_MOUNT, true),
        ]),
        ..Default::default()
    }
}

/// The repository's claim `<cluster>-repo`. Like the instances' claims it has no owner: it
/// outlives the cluster unless `storage.retainOnDelete` says `Delete`.
pub fn repo_claim(cluster: &ValidatedPostgresCluster) -> Option<PersistentVolumeClaim> {
    let spec = cluster.pgbackrest.as_ref()?;
    let names = cluster.names();
    Some(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(names.repo()),
            namespace: Some(cluster.namespace.clone()),
            labels: Some(Labels::new(ENGINE, &cluster.name, REPO_COMPONENT).to_map()),
            ..ObjectMeta::default()
        },
        spec: Some(super::instance::claim_spec(&spec.storage)),
        status: None,
    })
}

/// Volumes of Pods working on the repository: its claim, the configuration, the certificates.
fn repo_volumes(names: &ClusterNames) -> Vec<Volume> {
    vec![
        Volume {
            name: REPO_VOLUME.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: names.repo(),
                read_only: None,
            }),
            ..Default::default()
        },
        config_volume(names),
        secret_volume(TLS_VOLUME, names.pgbackrest_tls_secret()),
    ]
}

fn repo_mounts() -> Vec<k8s_openapi::api::core::v1::VolumeMount> {
    vec![
        mount(REPO_VOLUME, REPO_MOUNT, false),
        mount(CONFIG_VOLUME, CONFIG_MOUNT, true),
        mount(TLS_VOLUME, TLS_MOUNT, true),
    ]
}

fn security_context() -> PodSecurityContext {
    super::instance::postgres_security_context()
}

/// The repository host's Pod `<cluster>-repo`, with a spec hash like the instances' (a change
/// replaces it). `None` when the owner was never stored or backups are off.
pub fn repo_pod(owner: &PostgresCluster, cluster: &ValidatedPostgresCluster) -> Option<Pod> {
    let spec = cluster.pgbackrest.as_ref()?;
    let names = cluster.names();
    let pod_spec = PodSpec {
        containers: vec![Container {
            name: CONTAINER.into(),
            image: Some(spec.image.clone()),
            command: Some(vec![
                "sh".into(),
                "-c".into(),
                format!(
                    "mkdir -p {REPO_PATH} {REPO_MOUNT}/lock && exec pgbackrest --config={CONFIG_MOUNT}/{REPO_CONF} server"
                ),
            ]),
            env: Some(vec![
                field_env("POD_IP", "status.podIP"),
                value_env("PGBACKREST_TLS_SERVER_ADDRESS", "$(POD_IP)"),
                value_env("PGBACKREST_CONFIG", format!("{CONFIG_MOUNT}/{REPO_CONF}")),
            ]),
            ports: Some(vec![server_port()]),
            volume_mounts: Some(repo_mounts()),
            ..Default::default()
        }],
        volumes: Some(repo_volumes(&names)),
        security_context: Some(security_context()),
        node_selector: (!cluster.pod_template.node_selector.is_empty())
            .then(|| cluster.pod_template.node_selector.clone()),
        tolerations: (!cluster.pod_template.tolerations.is_empty())
            .then(|| cluster.pod_template.tolerations.clone()),
        restart_policy: Some("Always".into()),
        enable_service_links: Some(false),
        ..Default::default()
    };
    let labels = Labels::new(ENGINE, &cluster.name, REPO_COMPONENT);
    let mut metadata = child_meta(owner, names.repo(), &labels, &BTreeMap::new())?;
    let text = serde_json::to_string(&pod_spec).unwrap_or_default();
    metadata.annotations = Some(BTreeMap::from([(SPEC_HASH.to_owned(), stable_hash(&text))]));
    Some(Pod {
        metadata,
        spec: Some(pod_spec),
        status: None,
    })
}

/// The repository's Service `<cluster>-repo` (the instances' `archive-push` goes there).
pub fn repo_service(
    owner: &PostgresCluster,
    cluster: &ValidatedPostgresCluster,
) -> Option<Service> {
    cluster.pgbackrest.as_ref()?;
    let names = cluster.names();
    let labels = Labels::new(ENGINE, &cluster.name, REPO_COMPONENT);
    let metadata = child_meta(owner, names.repo(), &labels, &BTreeMap::new())?;
    Some(Service {
        metadata,
        spec: Some(ServiceSpec {
            selector: Some(labels.to_map()),
            ports: Some(vec![service_port()]),
            ..Default::default()
        }),
        status: None,
    })
}

/// The pgBackRest port of a Service (the repository's, and the `-primary` one's).
pub fn service_port() -> ServicePort {
    ServicePort {
        name: Some(PGBACKREST_PORT_NAME.into()),
        port: PGBACKREST_PORT,
        target_port: Some(IntOrString::String(PGBACKREST_PORT_NAME.into())),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

/// The Job `<cluster>-stanza-create`: `pgbackrest stanza-create` on the repository's volume,
/// idempotent (it succeeds on a stanza that matches the database). `None` when the owner was
/// never stored or backups are off.
pub fn stanza_job(owner: &PostgresCluster, cluster: &ValidatedPostgresCluster) -> Option<Job> {
    let names = cluster.names();
    repo_job(
        owner,
        cluster,
        names.stanza_job(),
        Labels::new(ENGINE, &cluster.name, "stanza-create"),
        vec!["stanza-create".into()],
        20,
    )
}

/// The Job `<upgrade>-stanza-upgrade`: `pgbackrest stanza-upgrade` on the repository's volume
/// after a major-version upgrade, so that the stanza knows the new version and system
/// identifier and archiving resumes. Owned by the `PostgresUpgrade`; a few attempts (it needs
/// the upgraded primary up).
pub fn stanza_upgrade_job(
    upgrade: &steward_api::pgupgrade::PostgresUpgrade,
    cluster: &ValidatedPostgresCluster,
) -> Option<Job> {
    let name = upgrade.metadata.name.clone()?;
    repo_job(
        upgrade,
        cluster,
        stanza_upgrade_job_name(&name),
        Labels::new(ENGINE, &cluster.name, "stanza-upgrade"),
        vec!["stanza-upgrade".into()],
        5,
    )
}

/// The name of upgrade `upgrade`'s stanza-upgrade Job.
pub fn stanza_upgrade_job_name(upgrade: &str) -> String {
    format!("{upgrade}-stanza-upgrade")
}

/// The component label of backup Jobs and their Pods.
pub const BACKUP_COMPONENT: &str = "backup";

/// The label naming the `PostgresBackup` a backup Job runs.
pub const BACKUP_LABEL: &str = "steward.dev/backup";

/// The Job that runs `PostgresBackup` `backup`.
pub fn backup_job_name(backup: &str) -> String {
    format!("{backup}-job")
}

/// The Job running one `PostgresBackup`: `pgbackrest backup --type=<type>` on the
/// repository's volume, annotated with the backup's name so that `pgbackrest info` tells which
/// set it took. Owned by the `PostgresBackup` (deleting it deletes the Job); one attempt (a
/// failed backup is reported, and a new one is a new object). Expiry by the retention settings
/// follows each backup (pgBackRest's `expire`, run by `backup`).
pub fn backup_job(backup: &PostgresBackup, cluster: &ValidatedPostgresCluster) -> Option<Job> {
    let name = backup.metadata.name.clone()?;
    let job = repo_job(
        backup,
        cluster,
        backup_job_name(&name),
        Labels::new(ENGINE, &cluster.name, BACKUP_COMPONENT),
        vec![
            format!("--type={}", backup.spec.type_.as_str()),
            format!("--annotation={BACKUP_ANNOTATION}={name}"),
            "backup".into(),
        ],
        0,
    )?;
    Some(with_backup_label(job, &name))
}

/// A backup's Job, and its Pods, labelled [`BACKUP_LABEL`] with the backup's name.
pub(crate) fn with_backup_label(mut job: Job, backup: &str) -> Job {
    for meta in [
        Some(&mut job.metadata),
        job.spec.as_mut().and_then(|s| s.template.metadata.as_mut()),
    ]
    .into_iter()
    .flatten()
    {
        meta.labels
            .get_or_insert_with(BTreeMap::new)
            .insert(BACKUP_LABEL.into(), backup.to_owned());
    }
    job
}

/// A Job running `pgbackrest <args>` with the repository host's configuration on the
/// repository's volume. The claim is `ReadWriteOnce`: the Job's Pod must run on the repository
/// host's Node (required pod affinity); pgBackRest's locks on that volume keep the server and
/// the Job from working on the repository at once.
fn repo_job<K>(
    owner: &K,
    cluster: &ValidatedPostgresCluster,
    name: String,
    labels: Labels,
    args: Vec<String>,
    backoff_limit: i32,
) -> Option<Job>
where
    K: Resource<DynamicType = ()>,
{
    cluster.pgbackrest.as_ref()?;
    let config = format!("{CONFIG_MOUNT}/{REPO_CONF}");
    let mut command = vec![
        "pgbackrest".to_owned(),
        format!("--config={config}"),
        format!("--stanza={STANZA}"),
    ];
    command.extend(args);
    pgbackrest_job(
        owner,
        cluster,
        PgBackRestJob {
            name,
            labels,
            command,
            config,
            volumes: repo_volumes(&cluster.names()),
            mounts: repo_mounts(),
            node_selector: cluster.pod_template.node_selector.clone(),
            affinity: Some(beside_repository_host(&cluster.name)),
            backoff_limit,
        },
    )
}

/// One `pgbackrest` container in a Job: the pgBackRest image, `PGBACKREST_CONFIG`, the
/// termination message from the log on error, the postgres user, the cluster's node selector
/// and tolerations, `restartPolicy: Never`.
struct PgBackRestJob {
    name: String,
    labels: Labels,
    command: Vec<String>,
    config: String,
    volumes: Vec<Volume>,
    mounts: Vec<k8s_openapi::api::core::v1::VolumeMount>,
    node_selector: BTreeMap<String, String>,
    affinity: Option<Affinity>,
    backoff_limit: i32,
}

fn pgbackrest_job<K>(
    owner: &K,
    cluster: &ValidatedPostgresCluster,
    job: PgBackRestJob,
) -> Option<Job>
where
    K: Resource<DynamicType = ()>,
{
    let image = cluster.pgbackrest.as_ref().map_or_else(
        || steward_api::postgres::DEFAULT_PGBACKREST_IMAGE.to_owned(),
        |p| p.image.clone(),
    );
    let metadata = child_meta(owner, job.name, &job.labels, &BTreeMap::new())?;
    owner.meta().uid.as_ref()?;
    let node_selector = job.node_selector;
    Some(Job {
        metadata,
        spec: Some(JobSpec {
            backoff_limit: Some(job.backoff_limit),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(job.labels.to_map()),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: CONTAINER.into(),
                        image: Some(image),
                        command: Some(job.command),
                        env: Some(vec![value_env("PGBACKREST_CONFIG", job.config)]),
                        volume_mounts: Some(job.mounts),
                        termination_message_policy: Some("FallbackToLogsOnError".into()),
                        ..Default::default()
                    }],
                    node_selector: (!node_selector.is_empty()).then_some(node_selector),
                    affinity: job.affinity,
                    tolerations: (!cluster.pod_template.tolerations.is_empty())
                        .then(|| cluster.pod_template.tolerations.clone()),
                    volumes: Some(job.volumes),
                    security_context: Some(security_context()),
                    restart_policy: Some("Never".into()),
                    enable_service_links: Some(false),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    })
}

/// The Job that runs `PostgresRestore` `restore`.
pub fn restore_job_name(restore: &str) -> String {
    format!("{restore}-restore")
}

/// (pure) pgBackRest's recovery target options for a restore: none for the end of the
/// archive; `--type=time|lsn|xid|name --target=… --target-action=promote` otherwise, so that
/// recovery completes by itself; `--set=<label>` when a backup set is named. A time is written
/// the way pgBackRest parses it for its backup-set selection (`YYYY-MM-DD HH:MM:SS+00`, UTC).
pub fn restore_target_args(
    target: Option<&RestoreTarget>,
    backup_set: Option<&str>,
) -> Result<Vec<String>, String> {
    let mut args = Vec::new();
    if let Some(t) = target {
        let (kind, value) = match (&t.time, &t.lsn, &t.xid, &t.name) {
            (Some(time), None, None, None) => {
                let at: jiff::Timestamp = time
                    .parse()
                    .map_err(|e| format!("target.time {time:?} is not an RFC 3339 time: {e}"))?;
                ("time", at.strftime("%Y-%m-%d %H:%M:%S+00").to_string())
            }
            (None, Some(lsn), None, None) => ("lsn", lsn.clone()),
            (None, None, Some(xid), None) => ("xid", xid.clone()),
            (None, None, None, Some(name)) => ("name", name.clone()),
            _ => return Err("a target names exactly one of time, lsn, xid or name".into()),
        };
        args.push(format!("--type={kind}"));
        args.push(format!("--target={value}"));
        args.push("--target-action=promote".into());
    }
    if let Some(set) = backup_set {
        args.push(format!("--set={set}"));
    }
    Ok(args)
}

/// The Job restoring the cluster's repository into the claim `claim` (instance side of the
/// configuration: the repository is reached over TLS): `pgbackrest restore --delta` with the
/// target options, into `PGDATA` on that claim. `--delta` makes a re-run after a failed
/// attempt reuse what is there; on an empty claim it is a plain restore. pgBackRest writes
/// `recovery.signal` and the recovery settings, so the primary started on the claim recovers
/// to the target and promotes. The restore's `nodeLabel` (required; else the instances' node
/// preferences) and the cluster's node selector decide where it runs; the claim, created for
/// it, binds there.
pub fn restore_job(
    restore: &PostgresRestore,
    cluster: &ValidatedPostgresCluster,
    claim: &str,
    target_args: Vec<String>,
) -> Option<Job> {
    cluster.pgbackrest.as_ref()?;
    let names = cluster.names();
    let name = restore.metadata.name.clone()?;
    let mut node_selector = cluster.pod_template.node_selector.clone();
    if let Some(label) = &restore.spec.node_label {
        node_selector.insert(label.key.clone(), label.value.clone());
    }
    // Without a node label of its own, the Job goes where the cluster's instances prefer.
    let affinity = restore
        .spec
        .node_label
        .is_none()
        .then(|| node_affinity_of(cluster))
        .flatten();
    restore_into(
        restore,
        cluster,
        RestoreInto {
            job: restore_job_name(&name),
            claim: claim.to_owned(),
            config: format!("{CONFIG_MOUNT}/{INSTANCE_CONF}"),
            volumes: instance_volumes(&names),
            mounts: instance_mounts(),
            node_selector,
            affinity,
            target_args,
            delta: true,
        },
    )
}

/// The Job of a `verify` run: restores backup set `label` of the cluster's repository into the
/// scratch claim `claim` with archiving off (`--archive-mode=off`: the scratch instance must
/// never push WAL into the cluster's repository); recovery then replays the archive to its end.
/// Named after the run, labelled `labels` (not the cluster's instance label: nothing of the
/// cluster's own pipeline counts it), one attempt.
pub fn verify_restore_job<K>(
    owner: &K,
    cluster: &ValidatedPostgresCluster,
    run: &str,
    claim: &str,
    label: &str,
    labels: &BTreeMap<String, String>,
) -> Option<Job>
where
    K: Resource<DynamicType = ()>,
{
    let names = cluster.names();
    let mut job = restore_into(
        owner,
        cluster,
        RestoreInto {
            job: run.to_owned(),
            claim: claim.to_owned(),
            config: format!("{CONFIG_MOUNT}/{INSTANCE_CONF}"),
            volumes: instance_volumes(&names),
            mounts: instance_mounts(),
            node_selector: cluster.pod_template.node_selector.clone(),
            affinity: node_affinity_of(cluster),
            target_args: vec![format!("--set={label}"), "--archive-mode=off".into()],
            delta: false,
        },
    )?;
    job.metadata.labels = Some(labels.clone());
    let template = job.spec.as_mut()?.template.metadata.as_mut()?;
    template.labels = Some(labels.clone());
    Some(job)
}

/// The Job that restores the `dataSource` cluster's repository into the first primary's claim
/// (`<cluster>-0-pgdata`), with `source.conf` and the source's certificates. A couple of
/// attempts (a source repository host being replaced); then the failure is reported.
pub fn clone_job(owner: &PostgresCluster, cluster: &ValidatedPostgresCluster) -> Option<Job> {
    let source = cluster.data_source.as_ref()?;
    let names = cluster.names();
    let args = restore_target_args(source.target.as_ref(), source.backup_set.as_deref()).ok()?;
    let mut job = restore_into(
        owner,
        cluster,
        RestoreInto {
            job: names.clone_job(),
            claim: names.claim(&names.instance(0)),
            config: format!("{SOURCE_CONFIG_MOUNT}/{SOURCE_CONF}"),
            volumes: source_volumes(cluster)?,
            mounts: source_mounts(),
            node_selector: cluster.pod_template.node_selector.clone(),
            affinity: node_affinity_of(cluster),
            target_args: args,
            delta: true,
        },
    )?;
    if let Some(spec) = job.spec.as_mut() {
        spec.backoff_limit = Some(2);
    }
    Some(job)
}

/// What a restore Job restores, where, with which configuration.
struct RestoreInto {
    job: String,
    claim: String,
    config: String,
    volumes: Vec<Volume>,
    mounts: Vec<k8s_openapi::api::core::v1::VolumeMount>,
    node_selector: BTreeMap<String, String>,
    affinity: Option<Affinity>,
    target_args: Vec<String>,
    /// `--delta`: keep what a claim already holds where its checksum matches (a re-run restore
    /// on the cluster's own claims). A verify restores into a new, empty claim without it, so
    /// pgBackRest reads every file of the backup from the repository (and refuses a claim
    /// that is not empty): a proof that cannot pass on files that did not come from the backup.
    delta: bool,
}

/// The node part of the instances' affinity (`nodeLabel`, the template's node affinity).
fn node_affinity_of(cluster: &ValidatedPostgresCluster) -> Option<Affinity> {
    let node_affinity = super::instance::affinity(cluster)?.node_affinity?;
    Some(Affinity {
        node_affinity: Some(node_affinity),
        ..Affinity::default()
    })
}

fn restore_into<K>(owner: &K, cluster: &ValidatedPostgresCluster, what: RestoreInto) -> Option<Job>
where
    K: Resource<DynamicType = ()>,
{
    let mut command = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        format!("mkdir -p {PGDATA} && chmod 700 {PGDATA} && exec \"$@\""),
        "restore".to_owned(),
        "pgbackrest".to_owned(),
        format!("--config={}", what.config),
        format!("--stanza={STANZA}"),
    ];
    if what.delta {
        command.push("--delta".to_owned());
    }
    command.extend(what.target_args);
    command.push("restore".into());
    let mut volumes = what.volumes;
    volumes.push(Volume {
        name: DATA_VOLUME.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: what.claim,
            read_only: None,
        }),
        ..Default::default()
    });
    let mut mounts = what.mounts;
    mounts.push(mount(DATA_VOLUME, DATA_MOUNT, false));
    pgbackrest_job(
        owner,
        cluster,
        PgBackRestJob {
            name: what.job,
            labels: Labels::new(ENGINE, &cluster.name, RESTORE_COMPONENT),
            command,
            config: what.config,
            volumes,
            mounts,
            node_selector: what.node_selector,
            affinity: what.affinity,
            backoff_limit: 0,
        },
    )
}

/// The `dataSource` side: `source.conf` reads the source cluster's repository (TLS, with the
/// source's client certificate mounted at [`SOURCE_TLS_MOUNT`]) for a restore into this
/// cluster's data volume. The restore writes a `restore_command` naming this file, so the
/// first primary mounts it too while it recovers.
pub const SOURCE_CONF: &str = "source.conf";
/// Where `source.conf` is mounted.
pub const SOURCE_CONFIG_MOUNT: &str = "/etc/pgbackrest-source";
/// Where the source cluster's TLS Secret is mounted.
pub const SOURCE_TLS_MOUNT: &str = "/etc/steward/pgbackrest-source-tls";
const SOURCE_CONFIG_VOLUME: &str = "pgbackrest-source";
const SOURCE_TLS_VOLUME: &str = "pgbackrest-source-tls";

/// (pure) `source.conf` for restoring `source`'s repository into this cluster.
pub fn source_conf(source: &ClusterNames) -> String {
    let tls = |key: &str| format!("{SOURCE_TLS_MOUNT}/{key}");
    format!(
        "# Generated by Steward; edits are overwritten.\n\
         [global]\n\
         repo1-host={repo}\n\
         repo1-host-type=tls\n\
         repo1-host-port={PGBACKREST_PORT}\n\
         repo1-host-ca-file={ca}\n\
         repo1-host-cert-file={crt}\n\
         repo1-host-key-file={key}\n\
         repo1-path={REPO_PATH}\n\
         lock-path={DATA_MOUNT}/pgbackrest-lock\n\
         spool-path={DATA_MOUNT}/pgbackrest-spool\n\
         log-level-console=info\n\
         log-level-file=off\n\
         \n\
         [{STANZA}]\n\
         pg1-path={PGDATA}\n",
        repo = source.repo_host(),
        ca = tls(CA_CRT),
        crt = tls(CLIENT_CRT),
        key = tls(CLIENT_KEY),
    )
}

/// The ConfigMap `<cluster>-pgbackrest-source` with `source.conf`, while `dataSource` is set.
pub fn source_config_map(
    owner: &PostgresCluster,
    cluster: &ValidatedPostgresCluster,
) -> Option<ConfigMap> {
    let source = cluster.data_source.as_ref()?;
    let names = cluster.names();
    let source_names = ClusterNames::new(&source.cluster, &cluster.namespace);
    let labels = Labels::new(ENGINE, &cluster.name, "pgbackrest-source");
    let metadata = child_meta(
        owner,
        names.pgbackrest_source_config(),
        &labels,
        &BTreeMap::new(),
    )?;
    Some(ConfigMap {
        metadata,
        data: Some(BTreeMap::from([(
            SOURCE_CONF.to_owned(),
            source_conf(&source_names),
        )])),
        ..ConfigMap::default()
    })
}

/// The volumes with `source.conf` and the source's certificates. Optional: an instance still
/// starts once the source (or its Secret) is gone, long after the clone.
pub fn source_volumes(cluster: &ValidatedPostgresCluster) -> Option<Vec<Volume>> {
    let source = cluster.data_source.as_ref()?;
    let names = cluster.names();
    let source_names = ClusterNames::new(&source.cluster, &cluster.namespace);
    let mut tls = secret_volume(SOURCE_TLS_VOLUME, source_names.pgbackrest_tls_secret());
    if let Some(s) = tls.secret.as_mut() {
        s.optional = Some(true);
    }
    Some(vec![
        Volume {
            name: SOURCE_CONFIG_VOLUME.into(),
            config_map: Some(ConfigMapVolumeSource {
                name: names.pgbackrest_source_config(),
                default_mode: Some(0o444),
                optional: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        },
        tls,
    ])
}

/// The mounts of [`source_volumes`].
pub fn source_mounts() -> Vec<k8s_openapi::api::core::v1::VolumeMount> {
    vec![
        mount(SOURCE_CONFIG_VOLUME, SOURCE_CONFIG_MOUNT, true),
        mount(SOURCE_TLS_VOLUME, SOURCE_TLS_MOUNT, true),
    ]
}

/// The component label of restore Jobs and their Pods.
pub const RESTORE_COMPONENT: &str = "restore";

/// The volume name of the data claim in the restore Job.
const DATA_VOLUME: &str = "pgdata";

/// Required pod affinity to the cluster's repository host (same Node).
fn beside_repository_host(cluster: &str) -> Affinity {
    Affinity {
        pod_affinity: Some(PodAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                label_selector: Some(LabelSelector {
                    match_labels: Some(Labels::new(ENGINE, cluster, REPO_COMPONENT).to_map()),
                    ..LabelSelector::default()
                }),
                topology_key: "kubernetes.io/hostname".into(),
                ..PodAffinityTerm::default()
            }]),
            ..PodAffinity::default()
        }),
        ..Affinity::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::validate::tests::{cluster, validated};

    fn with_backups() -> PostgresCluster {
        let mut owner = cluster("demo", 3, "16");
        owner.spec.backups = Some(steward_api::postgres::BackupsSpec {
            pgbackrest: Some(
                serde_json::from_value(serde_json::json!({"retentionFull": 3, "retentionDiff": 2}))
                    .unwrap(),
            ),
        });
        owner
    }

    #[test]
    fn certificates_name_the_services_they_are_reached_through() {
        let owner = with_backups();
        let v = validated(&owner);
        let tls = TlsMaterial::generate(&v.names()).unwrap();
        for key in [
            CA_CRT,
            REPO_CRT,
            REPO_KEY,
            INSTANCE_CRT,
            INSTANCE_KEY,
            CLIENT_CRT,
            CLIENT_KEY,
        ] {
            assert!(
                tls.file(key).is_some_and(|f| f.contains("-----BEGIN")),
                "{key}"
            );
        }
        assert!(!format!("{tls:?}").contains("BEGIN"), "Debug shows no key");
        let secret = tls_secret(&owner, &v, &tls).unwrap();
        assert_eq!(secret.metadata.name.as_deref(), Some("demo-pgbackrest-tls"));
        assert_eq!(secret.immutable, Some(true));
        assert_eq!(secret.data.unwrap().len(), 7);
        assert_eq!(
            service_names("demo-repo", "db"),
            [
                "demo-repo",
                "demo-repo.db",
                "demo-repo.db.svc",
                "demo-repo.db.svc.cluster.local"
            ]
        );
    }

    #[test]
    fn both_sides_agree_on_the_repository_and_the_stanza() {
        let owner = with_backups();
        let v = validated(&owner);
        let spec = v.pgbackrest.clone().unwrap();
        let names = v.names();
        let instance = instance_conf(&names, &spec);
        let repo = repo_conf(&names, &spec);
        for conf in [&instance, &repo] {
            assert!(
                conf.contains(&format!("repo1-path={REPO_PATH}\n")),
                "{conf}"
            );
            assert!(conf.contains("\n[db]\n"));
            assert!(conf.contains("\npg1-path=/var/lib/postgresql/data/pgdata\n"));
            assert!(conf.contains("compress-type=lz4\n"));
            assert!(conf.contains("tls-server-auth=pgbackrest-client=db\n"));
        }
        assert!(instance.contains(&format!("repo1-host={}\n", names.repo_host())));
        assert!(repo.contains(&format!("pg1-host={}\n", names.primary_host())));
        assert!(repo.contains("repo1-retention-full=3\nrepo1-retention-diff=2\n"));
        let cm = config_map(&owner, &v).unwrap();
        assert_eq!(cm.data.unwrap().len(), 2);
        let archive = archive_parameters();
        assert_eq!(archive[0], ("archive_mode", "on".to_owned()));
        assert!(archive[1].1.contains("--stanza=db archive-push \"%p\""));
        assert_eq!(archive[2].0, "restore_command");
        assert!(archive[2].1.contains("--stanza=db archive-get %f \"%p\""));
    }

    #[test]
    fn steward_owns_archiving_while_backups_are_on() {
        let mut owner = with_backups();
        let v = validated(&owner);
        assert_eq!(v.parameters["archive_mode"], "on");
        assert!(v.parameters["archive_command"].contains("archive-push"));
        owner
            .spec
            .parameters
            .insert("archive_command".into(), "cp %p /elsewhere/%f".into());
        let why = crate::postgres::validate::validate(&owner).unwrap_err();
        assert!(
            why.contains("parameters.archive_command is set by Steward"),
            "{why}"
        );
        let without = cluster("demo", 3, "16");
        let v = validated(&without);
        assert!(!v.parameters.contains_key("archive_command"));
    }

    #[test]
    fn the_repository_host_and_the_stanza_job_share_the_volume() {
        let owner = with_backups();
        let v = validated(&owner);
        let pod = repo_pod(&owner, &v).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("demo-repo"));
        assert!(pod.metadata.annotations.unwrap().contains_key(SPEC_HASH));
        let claim = repo_claim(&v).unwrap();
        assert_eq!(claim.metadata.name.as_deref(), Some("demo-repo"));
        assert!(
            claim.metadata.owner_references.is_none(),
            "the claim outlives the cluster"
        );
        let job = stanza_job(&owner, &v).unwrap();
        let job_spec = job.spec.unwrap().template.spec.unwrap();
        let claim_of = |volumes: &[Volume]| {
            volumes.iter().find_map(|v| {
                v.persistent_volume_claim
                    .as_ref()
                    .map(|c| c.claim_name.clone())
            })
        };
        assert_eq!(
            claim_of(&job_spec.volumes.unwrap()).as_deref(),
            Some("demo-repo")
        );
        let svc = repo_service(&owner, &v).unwrap();
        assert_eq!(svc.spec.unwrap().ports.unwrap()[0].port, PGBACKREST_PORT);
        let without = cluster("demo", 3, "16");
        let v = validated(&without);
        assert!(repo_pod(&without, &v).is_none() && config_map(&without, &v).is_none());
    }

    #[test]
    fn restore_targets_become_pgbackrest_options() {
        let t =
            |json: serde_json::Value| -> RestoreTarget { serde_json::from_value(json).unwrap() };
        assert_eq!(
            restore_target_args(None, None).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(
            restore_target_args(
                Some(&t(serde_json::json!({"time": "2026-11-26T08:20:34+01:00"}))),
                None
            )
            .unwrap(),
            [
                "--type=time",
                "--target=2026-11-26 07:20:34+00",
                "--target-action=promote"
            ]
        );
        assert_eq!(
            restore_target_args(
                Some(&t(serde_json::json!({"lsn": "0/3000060"}))),
                Some("20261126-070424F")
            )
            .unwrap(),
            [
                "--type=lsn",
                "--target=0/3000060",
                "--target-action=promote",
                "--set=20261126-070424F"
            ]
        );
        assert_eq!(
            restore_target_args(
                Some(&t(serde_json::json!({"name": "before-migration"}))),
                None
            )
            .unwrap()[..2],
            ["--type=name", "--target=before-migration"]
        );
        assert!(
            restore_target_args(
                Some(&t(serde_json::json!({"xid": "7", "lsn": "0/1"}))),
                None
            )
            .is_err()
        );
        assert!(
            restore_target_args(Some(&t(serde_json::json!({"time": "yesterday"}))), None).is_err()
        );
    }

    #[test]
    fn the_restore_job_restores_into_the_new_claim_on_the_asked_node() {
        let owner = with_backups();
        let v = validated(&owner);
        let mut restore: PostgresRestore = serde_json::from_value(serde_json::json!({
            "apiVersion": "steward.dev/v1alpha1", "kind": "PostgresRestore",
            "metadata": {"name": "r1", "namespace": "db", "uid": "u-1"},
            "spec": {"cluster": "demo", "nodeLabel": {"key": "zone", "value": "b"}}}))
        .unwrap();
        let job = restore_job(
            &restore,
            &v,
            "demo-0-pgdata-r1",
            vec!["--type=xid".into(), "--target=7".into()],
        )
        .unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("r1-restore"));
        assert_eq!(job.metadata.owner_references.unwrap()[0].name, "r1");
        let pod = job.spec.unwrap().template.spec.unwrap();
        assert_eq!(pod.node_selector.unwrap()["zone"], "b");
        assert!(pod.affinity.is_none(), "the asked node label decides");
        let command = pod.containers[0].command.clone().unwrap();
        assert!(
            command[2].starts_with("mkdir -p /var/lib/postgresql/data/pgdata"),
            "{command:?}"
        );
        assert_eq!(
            command[4..],
            [
                "pgbackrest",
                "--config=/etc/pgbackrest/instance.conf",
                "--stanza=db",
                "--delta",
                "--type=xid",
                "--target=7",
                "restore"
            ]
        );
        let claim = pod
            .volumes
            .unwrap()
            .into_iter()
            .find_map(|v| v.persistent_volume_claim)
            .unwrap();
        assert_eq!(claim.claim_name, "demo-0-pgdata-r1");
        restore.metadata.uid = None;
        assert!(restore_job(&restore, &v, "x", Vec::new()).is_none());
    }
}
