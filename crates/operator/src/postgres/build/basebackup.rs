//! (pure) `pg_basebackup` backups (seed 004, "pgBaseBackup Schedules"): a `PostgresBackup` of
//! method `pgbasebackup` runs a Job with the cluster's PostgreSQL image that streams a base
//! backup of the primary (through the `-primary` Service, as the replication user, WAL
//! included: `-X stream`) into `/pgbackup/<backup>` on the cluster's backup claim
//! `<cluster>-backup`. It writes into `<backup>.partial` and renames it when complete, so a
//! directory named after a backup is always a whole one. A new cluster's
//! `dataSource.pgbasebackup` copies such a directory into its first primary's claim (the
//! clone Job), and the primary starts on it: crash recovery from the backup's own WAL.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec,
    Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use steward_api::pgbackrest::PostgresBackup;
use steward_api::postgres::PostgresCluster;

use crate::postgres::build::instance::{claim_spec, mount, postgres_security_context, secret_env};
use crate::postgres::build::pgbackrest::{BACKUP_COMPONENT, backup_job_name, with_backup_label};
use crate::postgres::build::secrets::PASSWORD_KEY;
use crate::postgres::names::{ClusterNames, DATA_MOUNT, ENGINE, PGDATA, PORT, REPLICATION_USER};
use crate::postgres::validate::ValidatedPostgresCluster;
use crate::resources::{Labels, child_meta};

/// Where the backup claim is mounted.
pub const BACKUP_MOUNT: &str = "/pgbackup";
/// The component label of the backup claim.
pub const BACKUP_CLAIM_COMPONENT: &str = "basebackups";
const BACKUP_VOLUME: &str = "pgbackup";
const DATA_VOLUME: &str = "pgdata";

/// The backup claim `<cluster>-backup`: the size and class of the instances' storage. No
/// owner: like the data claims it outlives the cluster (a `dataSource` reads it).
pub fn claim(cluster: &ValidatedPostgresCluster) -> PersistentVolumeClaim {
    let names = cluster.names();
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(names.backup_claim()),
            namespace: Some(cluster.namespace.clone()),
            labels: Some(Labels::new(ENGINE, &cluster.name, BACKUP_CLAIM_COMPONENT).to_map()),
            ..ObjectMeta::default()
        },
        spec: Some(claim_spec(&cluster.storage)),
        status: None,
    }
}

fn claim_volume(name: &str, claim: String, read_only: bool) -> Volume {
    Volume {
        name: name.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim,
            read_only: read_only.then_some(true),
        }),
        ..Default::default()
    }
}

/// What a script Job runs, with what.
struct ScriptJob {
    name: String,
    labels: Labels,
    script: String,
    volumes: Vec<Volume>,
    mounts: Vec<k8s_openapi::api::core::v1::VolumeMount>,
    env: Vec<k8s_openapi::api::core::v1::EnvVar>,
}

/// A one-container Job with the cluster's PostgreSQL image running a script as the postgres
/// user; one attempt (a failure is reported, not retried).
fn job<K: Resource<DynamicType = ()>>(
    owner: &K,
    cluster: &ValidatedPostgresCluster,
    what: ScriptJob,
) -> Option<Job> {
    let ScriptJob {
        name,
        labels,
        script,
        volumes,
        mounts,
        env,
    } = what;
    let labels = &labels;
    let metadata = child_meta(owner, name, labels, &BTreeMap::new())?;
    owner.meta().uid.as_ref()?;
    let node_selector = cluster.pod_template.node_selector.clone();
    Some(Job {
        metadata,
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels.to_map()),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "postgres".into(),
                        image: Some(cluster.image.clone()),
                        command: Some(vec!["sh".into(), "-c".into(), script]),
                        env: Some(env),
                        volume_mounts: Some(mounts),
                        termination_message_policy: Some("FallbackToLogsOnError".into()),
                        ..Default::default()
                    }],
                    node_selector: (!node_selector.is_empty()).then_some(node_selector),
                    tolerations: (!cluster.pod_template.tolerations.is_empty())
                        .then(|| cluster.pod_template.tolerations.clone()),
                    volumes: Some(volumes),
                    security_context: Some(postgres_security_context()),
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

/// The Job `<backup>-job` of a `pgbasebackup` backup (owned by the `PostgresBackup`).
pub fn backup_job(backup: &PostgresBackup, cluster: &ValidatedPostgresCluster) -> Option<Job> {
    let name = backup.metadata.name.clone()?;
    let names = cluster.names();
    let dir = format!("{BACKUP_MOUNT}/{name}");
    let script = format!(
        "set -eu\n\
         rm -rf '{dir}.partial'\n\
         pg_basebackup --host={host} --port={PORT} --username={REPLICATION_USER} --no-password \
         --pgdata='{dir}.partial' --wal-method=stream --checkpoint=fast\n\
         rm -rf '{dir}'\n\
         mv '{dir}.partial' '{dir}'\n\
         echo 'pg_basebackup complete: {dir}'\n",
        host = names.primary_host(),
    );
    let job = job(
        backup,
        cluster,
        ScriptJob {
            name: backup_job_name(&name),
            labels: Labels::new(ENGINE, &cluster.name, BACKUP_COMPONENT),
            script,
            volumes: vec![claim_volume(BACKUP_VOLUME, names.backup_claim(), false)],
            mounts: vec![mount(BACKUP_VOLUME, BACKUP_MOUNT, false)],
            env: vec![secret_env(
                "PGPASSWORD",
                &names.replication_secret(),
                PASSWORD_KEY,
            )],
        },
    )?;
    Some(with_backup_label(job, &name))
}

/// The clone Job of a cluster with `dataSource.pgbasebackup`: copies the source's backup
/// directory into the first primary's claim (owned by the cluster).
pub fn clone_job(owner: &PostgresCluster, cluster: &ValidatedPostgresCluster) -> Option<Job> {
    let source = cluster.base_backup_source.as_ref()?;
    let names = cluster.names();
    let source_names = ClusterNames::new(&source.cluster, &cluster.namespace);
    let dir = format!("{BACKUP_MOUNT}/{}", source.backup);
    let script = format!(
        "set -eu\n\
         test -f '{dir}/PG_VERSION' || {{ echo \"ERROR: {dir} holds no base backup\" >&2; exit 1; }}\n\
         rm -rf '{PGDATA}'\n\
         mkdir -p '{PGDATA}'\n\
         chmod 700 '{PGDATA}'\n\
         cp -a '{dir}/.' '{PGDATA}/'\n\
         echo 'copied {dir}'\n"
    );
    job(
        owner,
        cluster,
        ScriptJob {
            name: names.clone_job(),
            labels: Labels::new(
                ENGINE,
                &cluster.name,
                crate::postgres::build::pgbackrest::RESTORE_COMPONENT,
            ),
            script,
            volumes: vec![
                claim_volume(BACKUP_VOLUME, source_names.backup_claim(), true),
                claim_volume(DATA_VOLUME, names.claim(&names.instance(0)), false),
            ],
            mounts: vec![
                mount(BACKUP_VOLUME, BACKUP_MOUNT, true),
                mount(DATA_VOLUME, DATA_MOUNT, false),
            ],
            env: Vec::new(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::validate::validate;
    use steward_api::pgbackrest::PostgresBackupSpec;
    use steward_api::postgres::PostgresClusterSpec;

    fn stored<K: Resource<DynamicType = ()>>(mut o: K) -> K {
        o.meta_mut().namespace = Some("ns".into());
        o.meta_mut().uid = Some("uid-1".into());
        o
    }

    #[test]
    fn a_base_backup_streams_into_a_partial_directory_named_after_the_backup() {
        let cluster = stored(PostgresCluster::new(
            "prod",
            PostgresClusterSpec::new(1, "15"),
        ));
        let valid = validate(&cluster).unwrap();
        let backup = stored(PostgresBackup::new(
            "nightly-1",
            serde_json::from_value::<PostgresBackupSpec>(
                serde_json::json!({"cluster": "prod", "method": "pgbasebackup"}),
            )
            .unwrap(),
        ));
        let job = backup_job(&backup, &valid).unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("nightly-1-job"));
        let pod = job.spec.unwrap().template.spec.unwrap();
        let script = &pod.containers[0].command.as_ref().unwrap()[2];
        assert!(
            script.contains("--pgdata='/pgbackup/nightly-1.partial'"),
            "{script}"
        );
        assert!(script.contains("--wal-method=stream"), "{script}");
        assert!(script.contains("mv '/pgbackup/nightly-1.partial' '/pgbackup/nightly-1'"));
        assert!(script.contains("--host=prod-primary"), "{script}");
        let volumes = pod.volumes.unwrap();
        let claim = volumes[0].persistent_volume_claim.as_ref().unwrap();
        assert_eq!(claim.claim_name, "prod-backup");
        // The password comes from the replication Secret, never the spec.
        let env = &pod.containers[0].env.as_ref().unwrap()[0];
        assert_eq!(env.name, "PGPASSWORD");
        assert!(env.value.is_none());
        assert_eq!(claim_of(&valid), "prod-backup");
    }

    fn claim_of(valid: &ValidatedPostgresCluster) -> String {
        claim(valid).metadata.name.unwrap()
    }
}
