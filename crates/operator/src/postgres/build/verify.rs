//! (pure) The scratch objects of a `verify` schedule's run `<schedule>-<slot>`: a claim, the
//! restore Job ([`super::pgbackrest::verify_restore_job`]) and a Pod running PostgreSQL on the
//! restored data. They carry the schedule's labels, never the cluster's instance label, and
//! are owned by the `Schedule`: the cluster's own pipeline does not see them, and deleting the
//! schedule deletes them.
//!
//! The Pod starts PostgreSQL with the cluster's `postgresql.conf` (recovery needs settings
//! such as `max_connections` at least as high as the primary's), its own `pg_hba.conf`
//! (password logins over TCP only), archiving off and no synchronous standby: the restored
//! data recovers to the end of the archive, promotes, and never writes into the cluster's
//! repository. The operator then connects as its superuser to check it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, PersistentVolumeClaim, PersistentVolumeClaimVolumeSource,
    Pod, PodSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

use crate::postgres::build::instance::{claim_spec, field_env, mount, postgres_security_context};
use crate::postgres::build::pgbackrest::{instance_mounts, instance_volumes};
use crate::postgres::names::{CONFIG_MOUNT, DATA_MOUNT, PGDATA, PORT};
use crate::postgres::validate::ValidatedPostgresCluster;

const DATA_VOLUME: &str = "data";
const CONFIG_VOLUME: &str = "config";

/// `metadata` of a scratch object: named after the run, owned by `owner` (the schedule).
fn meta<K: Resource<DynamicType = ()>>(
    owner: &K,
    name: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Option<ObjectMeta> {
    Some(ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        labels: Some(labels.clone()),
        owner_references: Some(vec![owner.controller_owner_ref(&())?]),
        ..ObjectMeta::default()
    })
}

/// The scratch claim: the size and class of the cluster's first instance's.
pub fn claim<K: Resource<DynamicType = ()>>(
    owner: &K,
    cluster: &ValidatedPostgresCluster,
    run: &str,
    labels: &BTreeMap<String, String>,
) -> Option<PersistentVolumeClaim> {
    let storage = cluster.storage_for(0);
    Some(PersistentVolumeClaim {
        metadata: meta(owner, run, &cluster.namespace, labels)?,
        spec: Some(claim_spec(storage)),
        status: None,
    })
}

/// The scratch instance's script: its own `pg_hba.conf` on the scratch volume, then
/// PostgreSQL in the foreground.
fn script() -> String {
    format!(
        "set -eu\n\
         umask 077\n\
         printf 'host all all 0.0.0.0/0 scram-sha-256\\nhost all all ::/0 scram-sha-256\\n' \
         > {DATA_MOUNT}/verify-hba.conf\n\
         exec postgres -D {PGDATA} \
         -c config_file={CONFIG_MOUNT}/postgresql.conf \
         -c hba_file={DATA_MOUNT}/verify-hba.conf \
         -c listen_addresses=\"$POD_IP\" -c port={PORT} \
         -c unix_socket_directories= \
         -c archive_mode=off -c synchronous_standby_names= \
         -c cluster_name=verify\n"
    )
}

/// The scratch Pod running PostgreSQL on the restored claim.
pub fn pod<K: Resource<DynamicType = ()>>(
    owner: &K,
    cluster: &ValidatedPostgresCluster,
    run: &str,
    labels: &BTreeMap<String, String>,
) -> Option<Pod> {
    let names = cluster.names();
    let mut volumes = instance_volumes(&names);
    volumes.push(Volume {
        name: DATA_VOLUME.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: run.to_owned(),
            read_only: None,
        }),
        ..Default::default()
    });
    volumes.push(Volume {
        name: CONFIG_VOLUME.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: names.config_map(),
            default_mode: Some(0o444),
            ..Default::default()
        }),
        ..Default::default()
    });
    let mut mounts = instance_mounts();
    mounts.push(mount(DATA_VOLUME, DATA_MOUNT, false));
    mounts.push(mount(CONFIG_VOLUME, CONFIG_MOUNT, true));
    let node_selector = cluster.pod_template.node_selector.clone();
    Some(Pod {
        metadata: meta(owner, run, &cluster.namespace, labels)?,
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "postgres".into(),
                image: Some(cluster.image.clone()),
                command: Some(vec!["sh".into(), "-c".into(), script()]),
                env: Some(vec![field_env("POD_IP", "status.podIP")]),
                volume_mounts: Some(mounts),
                termination_message_policy: Some("FallbackToLogsOnError".into()),
                ..Default::default()
            }],
            volumes: Some(volumes),
            node_selector: (!node_selector.is_empty()).then_some(node_selector),
            tolerations: (!cluster.pod_template.tolerations.is_empty())
                .then(|| cluster.pod_template.tolerations.clone()),
            security_context: Some(postgres_security_context()),
            restart_policy: Some("Never".into()),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(10),
            ..Default::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::build::pgbackrest::verify_restore_job;
    use crate::postgres::validate::validate;
    use steward_api::postgres::{PostgresCluster, PostgresClusterSpec};

    #[test]
    fn scratch_objects_never_archive_and_never_look_like_the_clusters_own() {
        let mut cluster: PostgresCluster = PostgresCluster::new("prod", {
            let mut s = PostgresClusterSpec::new(1, "15");
            s.backups =
                Some(serde_json::from_value(serde_json::json!({"pgbackrest": {}})).unwrap());
            s
        });
        cluster.metadata.namespace = Some("ns".into());
        cluster.metadata.uid = Some("uid-1".into());
        let valid = validate(&cluster).unwrap();
        let labels = BTreeMap::from([("steward.dev/schedule".to_owned(), "prove".to_owned())]);
        let job = verify_restore_job(
            &cluster,
            &valid,
            "prove-1",
            "prove-1",
            "20261126-101430F",
            &labels,
        )
        .unwrap();
        assert_eq!(job.metadata.labels.as_ref(), Some(&labels));
        let pod_spec = job.spec.unwrap().template;
        assert_eq!(pod_spec.metadata.unwrap().labels.as_ref(), Some(&labels));
        let command = pod_spec.spec.unwrap().containers[0]
            .command
            .clone()
            .unwrap();
        assert!(
            command.contains(&"--set=20261126-101430F".to_owned()),
            "{command:?}"
        );
        assert!(
            command.contains(&"--archive-mode=off".to_owned()),
            "{command:?}"
        );
        // Every file of the set is read from the repository: no delta restore, which would
        // keep whatever a claim already held where its checksum matched.
        assert!(!command.contains(&"--delta".to_owned()), "{command:?}");

        let pod = pod(&cluster, &valid, "prove-1", &labels).unwrap();
        assert_eq!(pod.metadata.labels.as_ref(), Some(&labels));
        let spec = pod.spec.unwrap();
        let script = &spec.containers[0].command.as_ref().unwrap()[2];
        assert!(script.contains("-c archive_mode=off"), "{script}");
        assert!(script.contains("-c synchronous_standby_names="), "{script}");
        assert!(script.contains("hba_file=/var/lib/postgresql/data/verify-hba.conf"));
        let claims: Vec<String> = spec
            .volumes
            .unwrap()
            .iter()
            .filter_map(|v| {
                v.persistent_volume_claim
                    .as_ref()
                    .map(|c| c.claim_name.clone())
            })
            .collect();
        assert_eq!(claims, ["prove-1"]);
        assert_eq!(
            claim(&cluster, &valid, "prove-1", &labels)
                .unwrap()
                .metadata
                .name
                .as_deref(),
            Some("prove-1")
        );
    }
}
