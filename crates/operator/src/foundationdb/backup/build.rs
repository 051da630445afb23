//! (pure) A backup's children: the agents' Deployment, the claim the backup is written to, and
//! the ConfigMap of the cluster files of other clusters its restores write into.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, KeyToPath, PersistentVolumeClaim,
    PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::ResourceExt;
use steward_api::foundationdb::{FoundationDBBackup, FoundationDBCluster};

use crate::foundationdb::build::{
    CLUSTER_FILE_KEY, CONFIG_MOUNT, ENGINE, claim_spec, config_map_name,
};
use crate::resources::{Labels, child_meta};

/// The agents' component label.
pub const AGENT_COMPONENT: &str = "backup-agent";
/// Where the backup's claim is mounted in the agents.
pub const BACKUP_MOUNT: &str = "/var/fdb/backup";
/// The image the agents run (FoundationDB's image with `backup_agent`).
pub const AGENT_IMAGE: &str = "foundationdb/foundationdb";
/// Annotation: a hash of the Deployment Steward built.
pub const SPEC_HASH: &str = "steward.dev/spec-hash";

/// Where the agents see the cluster files of the other clusters a restore of this backup
/// writes into (`<cluster>.cluster`), from [`destinations_name`]'s ConfigMap.
pub const DESTINATIONS_MOUNT: &str = "/var/restore-destinations";

/// The ConfigMap of the restore destinations' cluster files.
pub fn destinations_name(backup: &str) -> String {
    format!("{backup}-restore-destinations")
}

/// The key (and file name) of `cluster`'s cluster file in [`destinations_name`]'s ConfigMap.
pub fn destination_key(cluster: &str) -> String {
    format!("{cluster}.cluster")
}

/// The restore destinations' ConfigMap with `cluster`'s connection string, owned by the backup
/// (each restore applies its own key); `None` when the backup was never stored.
pub fn destinations(
    backup: &FoundationDBBackup,
    cluster: &str,
    connection_string: &str,
) -> Option<ConfigMap> {
    let name = backup.name_any();
    let labels = Labels::new(ENGINE, &name, "restore-destinations");
    let metadata = child_meta(backup, destinations_name(&name), &labels, &BTreeMap::new())?;
    Some(ConfigMap {
        metadata,
        data: Some(BTreeMap::from([(
            destination_key(cluster),
            connection_string.to_owned(),
        )])),
        ..Default::default()
    })
}

/// The agents' Deployment.
pub fn deployment_name(backup: &str) -> String {
    format!("{backup}-backup-agents")
}

/// The backup's claim.
pub fn claim_name(backup: &str) -> String {
    format!("{backup}-backup-data")
}

/// The backup URL: a directory on the claim, as the agents see it.
pub fn backup_url(backup: &str) -> String {
    format!("file://{BACKUP_MOUNT}/{backup}")
}

/// The agents' version: the backup's, else the cluster's.
pub fn version(backup: &FoundationDBBackup, cluster: &FoundationDBCluster) -> String {
    backup
        .spec
        .version
        .clone()
        .unwrap_or_else(|| cluster.spec.version.clone())
}

/// The claim (no owner: a backup's data outlives the resource; deleted by hand).
pub fn claim(backup: &FoundationDBBackup) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(&backup.name_any())),
            namespace: backup.namespace(),
            labels: Some(Labels::new(ENGINE, backup.name_any(), "backup-data").to_map()),
            ..ObjectMeta::default()
        },
        spec: Some(claim_spec(&backup.spec.storage)),
        status: None,
    }
}

/// The agents' Deployment, owned by the backup; `None` when the backup was never stored.
pub fn deployment(
    backup: &FoundationDBBackup,
    cluster: &FoundationDBCluster,
) -> Option<Deployment> {
    let name = backup.name_any();
    let labels = Labels::new(ENGINE, &name, AGENT_COMPONENT);
    let mut metadata = child_meta(backup, deployment_name(&name), &labels, &BTreeMap::new())?;
    let pod_labels = labels.to_map();
    let container = Container {
        name: "foundationdb".into(),
        image: Some(format!("{AGENT_IMAGE}:{}", version(backup, cluster))),
        command: Some(vec!["backup_agent".into()]),
        args: Some(vec![
            "-C".into(),
            format!("{CONFIG_MOUNT}/{CLUSTER_FILE_KEY}"),
        ]),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "config".into(),
                mount_path: CONFIG_MOUNT.into(),
                read_only: Some(true),
                ..Default::default()
            },
            VolumeMount {
                name: "backup".into(),
                mount_path: BACKUP_MOUNT.into(),
                ..Default::default()
            },
            VolumeMount {
                name: "restore-destinations".into(),
                mount_path: DESTINATIONS_MOUNT.into(),
                read_only: Some(true),
                ..Default::default()
            },
        ]),
        ..Default::default()
    };
    let spec = DeploymentSpec {
        replicas: Some(i32::try_from(backup.spec.agent_count).unwrap_or(1)),
        selector: LabelSelector {
            match_labels: Some(pod_labels.clone()),
            ..Default::default()
        },
        strategy: Some(DeploymentStrategy {
            type_: Some("Recreate".into()),
            ..Default::default()
        }),
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(pod_labels),
                ..Default::default()
            }),
            spec: Some(PodSpec {
                containers: vec![container],
                volumes: Some(vec![
                    Volume {
                        name: "config".into(),
                        config_map: Some(ConfigMapVolumeSource {
                            name: config_map_name(&cluster.name_any()),
                            items: Some(vec![KeyToPath {
                                key: CLUSTER_FILE_KEY.into(),
                                path: CLUSTER_FILE_KEY.into(),
                                mode: None,
                            }]),
                            optional: Some(true),
                            default_mode: None,
                        }),
                        ..Default::default()
                    },
                    Volume {
                        name: "backup".into(),
                        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                            claim_name: claim_name(&name),
                            read_only: None,
                        }),
                        ..Default::default()
                    },
                    // Absent until a restore into another cluster writes it.
                    Volume {
                        name: "restore-destinations".into(),
                        config_map: Some(ConfigMapVolumeSource {
                            name: destinations_name(&name),
                            optional: Some(true),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                ]),
                enable_service_links: Some(false),
                ..Default::default()
            }),
        },
        ..Default::default()
    };
    let hash = crate::etcd::build::member::spec_hash(
        spec.template.spec.as_ref()?,
        &BTreeMap::from([("replicas".to_owned(), backup.spec.agent_count.to_string())]),
        &BTreeMap::new(),
    );
    metadata.annotations = Some(BTreeMap::from([(SPEC_HASH.to_owned(), hash)]));
    Some(Deployment {
        metadata,
        spec: Some(spec),
        status: None,
    })
}
