//! (pure) The children of one instance `<cluster>-<ordinal>`: its data claim and its Pod.
//!
//! Steward manages instance Pods directly, one per instance, as it does etcd members: the
//! operator, not a StatefulSet, decides which Pod is replaced and when, and which one is the
//! primary. The role is the Pod label `steward.dev/role`, which the Services and the budget
//! select on and which only the operator changes; it is left out of the spec hash, so a
//! fail-over relabels Pods without restarting them. The entrypoint reads the role at start
//! (`PGROLE`, from the label through the downward API).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, ExecAction,
    NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, ObjectFieldSelector,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, Pod,
    PodAffinityTerm, PodAntiAffinity, PodSecurityContext, PodSpec, PreferredSchedulingTerm, Probe,
    SecretKeySelector, SecretVolumeSource, Volume, VolumeMount, VolumeResourceRequirements,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::Resource;
use steward_api::postgres::{AntiAffinity, InstanceRole, MetricsSpec, PostgresCluster};

use crate::postgres::build::config::stable_hash;
use crate::postgres::build::script;
use crate::postgres::build::secrets::{PASSWORD_KEY, USERNAME_KEY};
use crate::postgres::build::service::PORT_NAME;
use crate::postgres::names::{
    CONFIG_MOUNT, ClusterNames, DATA_MOUNT, ENGINE, INSTANCE_COMPONENT, INSTANCE_LABEL, PGDATA,
    PORT, REPLICATION_MOUNT, ROLE_LABEL, SUPERUSER_MOUNT, role_value,
};
use crate::postgres::validate::ValidatedPostgresCluster;
use crate::resources::{Labels, child_meta};

/// Annotation with a hash of everything in the Pod that needs a restart to change (image,
/// resources, scheduling, the configuration through [`CONFIG_HASH`]...), but not the role.
/// A Pod whose hash differs from the desired one is replaced by the rolling update.
pub const SPEC_HASH: &str = "steward.dev/spec-hash";
/// Annotation with the [`config_hash`](super::config::config_hash) the Pod was built with.
pub const CONFIG_HASH: &str = "steward.dev/config-hash";
/// The database container.
pub const CONTAINER: &str = "postgres";
/// The metrics sidecar.
pub const METRICS_CONTAINER: &str = "metrics";
/// Component label value of the data claims.
pub const DATA_COMPONENT: &str = "data";
/// The `postgres` user and group of the official image; the Pod runs as it.
pub const POSTGRES_UID: i64 = 999;
/// The topology key instances are spread over.
pub const HOSTNAME_TOPOLOGY: &str = "kubernetes.io/hostname";
/// Weight of the preferred scheduling terms Steward adds.
pub const PREFERRED_WEIGHT: i32 = 100;

const PGDATA_VOLUME: &str = "pgdata";
const CONFIG_VOLUME: &str = "config";
const SUPERUSER_VOLUME: &str = "superuser";
const REPLICATION_VOLUME: &str = "replication";

/// The data claim `<instance>-pgdata`, sized from the instance's resolved storage. It has no
/// owner: it outlives the Pod and the cluster; the engine deletes it only when the retention
/// policy (`retainOnScaleDown`, `retainOnDelete`) says so. `None` when the owner was never
/// stored.
pub fn claim(
    owner: &PostgresCluster,
    cluster: &ValidatedPostgresCluster,
    ordinal: u32,
) -> Option<PersistentVolumeClaim> {
    claim_of_epoch(owner, cluster, ordinal, cluster.data_epoch)
}

/// A `ReadWriteOnce` claim's spec of this size and class (every claim Steward makes for
/// PostgreSQL: instances, repository, backups, scratch).
pub(crate) fn claim_spec(storage: &steward_api::common::StorageSpec) -> PersistentVolumeClaimSpec {
    PersistentVolumeClaimSpec {
        access_modes: Some(vec!["ReadWriteOnce".into()]),
        storage_class_name: storage.storage_class_name.clone(),
        resources: Some(VolumeResourceRequirements {
            requests: Some(BTreeMap::from([(
                "storage".to_owned(),
                Quantity(storage.size.clone()),
            )])),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Every PostgreSQL Pod (instances, repository host, Jobs, scratch) runs as the postgres user.
pub(crate) fn postgres_security_context() -> PodSecurityContext {
    PodSecurityContext {
        run_as_user: Some(POSTGRES_UID),
        run_as_group: Some(POSTGRES_UID),
        fs_group: Some(POSTGRES_UID),
        run_as_non_root: Some(true),
        ..Default::default()
    }
}

/// [`claim`] of generation `epoch` (a restore creates the next generation's claim before the
/// cluster moves to it).
pub fn claim_of_epoch(
    owner: &PostgresCluster,
    cluster: &ValidatedPostgresCluster,
    ordinal: u32,
    epoch: u32,
) -> Option<PersistentVolumeClaim> {
    owner.meta().uid.as_ref()?;
    let names = cluster.names().with_epoch(epoch);
    let instance = names.instance(ordinal);
    let storage = cluster.storage_for(ordinal);
    let mut labels = Labels::new(ENGINE, &cluster.name, DATA_COMPONENT).to_map();
    labels.insert(INSTANCE_LABEL.to_owned(), instance.clone());
    Some(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(names.claim(&instance)),
            namespace: Some(cluster.namespace.clone()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: Some(claim_spec(storage)),
        status: None,
    })
}

pub(crate) fn value_env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

pub(crate) fn field_env(name: &str, field_path: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: field_path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

pub(crate) fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: None,
            }),
            ..Default::default()
        }),
    }
}

pub(crate) fn mount(volume: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: volume.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

pub(crate) fn secret_volume(volume: &str, secret: String) -> Volume {
    Volume {
        name: volume.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret),
            // Readable by the postgres group (fsGroup), nobody else.
            default_mode: Some(0o440),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn postgres_container(
    cluster: &ValidatedPostgresCluster,
    names: &ClusterNames,
    instance: &str,
) -> Container {
    Container {
        name: CONTAINER.into(),
        image: Some(cluster.image.clone()),
        command: Some(vec!["sh".into(), format!("{CONFIG_MOUNT}/entrypoint.sh")]),
        env: Some(vec![
            field_env("POD_IP", "status.podIP"),
            field_env("PGROLE", format!("metadata.labels['{ROLE_LABEL}']")),
            value_env("INSTANCE", instance),
            value_env("PRIMARY_HOST", names.primary_host()),
            value_env("PGDATA", PGDATA),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some(PORT_NAME.into()),
            container_port: PORT,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        readiness_probe: Some(Probe {
            exec: Some(ExecAction {
                command: Some(script::readiness_command()),
            }),
            period_seconds: Some(2),
            timeout_seconds: Some(2),
            failure_threshold: Some(3),
            ..Default::default()
        }),
        resources: cluster.pod_template.resources.clone(),
        // The end of the log becomes the termination message of a failed run, so the
        // operator can quote PostgreSQL's FATAL line (`resources::pods::last_fatal`).
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        volume_mounts: Some(vec![
            mount(PGDATA_VOLUME, DATA_MOUNT, false),
            mount(CONFIG_VOLUME, CONFIG_MOUNT, true),
            mount(SUPERUSER_VOLUME, SUPERUSER_MOUNT, true),
            mount(REPLICATION_VOLUME, REPLICATION_MOUNT, true),
        ]),
        ..Default::default()
    }
}

/// The metrics sidecar: the exporter logs in as the superuser over the Pod's address and
/// listens on that address only (Pods of the local node agent share one network).
fn metrics_container(metrics: &MetricsSpec, names: &ClusterNames) -> Container {
    let secret = names.superuser_secret();
    Container {
        name: METRICS_CONTAINER.into(),
        image: Some(metrics.image.clone()),
        args: Some(vec![format!(
            "--web.listen-address=$(POD_IP):{}",
            metrics.port
        )]),
        env: Some(vec![
            field_env("POD_IP", "status.podIP"),
            value_env(
                "DATA_SOURCE_URI",
                format!("$(POD_IP):{PORT}/postgres?sslmode=disable"),
            ),
            secret_env("DATA_SOURCE_USER", &secret, USERNAME_KEY),
            secret_env("DATA_SOURCE_PASS", &secret, PASSWORD_KEY),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("metrics".into()),
            container_port: metrics.port,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// The Pods' affinity: `podTemplate.affinity`, plus a preferred node affinity term for
/// `nodeLabel` (seed: a node that is down must not stop the Pod from scheduling elsewhere),
/// plus pod anti-affinity between this cluster's instances on `kubernetes.io/hostname`,
/// preferred or required as `antiAffinity` says. `None` when all of these are empty.
pub fn affinity(cluster: &ValidatedPostgresCluster) -> Option<Affinity> {
    let mut affinity = cluster.pod_template.affinity.clone().unwrap_or_default();
    if let Some(label) = &cluster.node_label {
        affinity
            .node_affinity
            .get_or_insert_with(NodeAffinity::default)
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(PreferredSchedulingTerm {
                weight: PREFERRED_WEIGHT,
                preference: NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: label.key.clone(),
                        operator: "In".into(),
                        values: Some(vec![label.value.clone()]),
                    }]),
                    match_fields: None,
                },
            });
    }
    let spread = PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: Some(cluster.names().instances_selector()),
            ..Default::default()
        }),
        topology_key: HOSTNAME_TOPOLOGY.into(),
        ..Default::default()
    };
    match cluster.anti_affinity {
        AntiAffinity::Preferred => affinity
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default)
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(WeightedPodAffinityTerm {
                weight: PREFERRED_WEIGHT,
                pod_affinity_term: spread,
            }),
        AntiAffinity::Required => affinity
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(spread),
        AntiAffinity::None => {}
    }
    (affinity != Affinity::default()).then_some(affinity)
}

/// The Pod of instance `ordinal` in `role`, built with the ConfigMap whose
/// [`config_hash`](super::config::config_hash) is `config_hash`. `None` when the owner was
/// never stored.
pub fn pod(
    owner: &PostgresCluster,
    cluster: &ValidatedPostgresCluster,
    ordinal: u32,
    role: InstanceRole,
    config_hash: &str,
) -> Option<Pod> {
    let names = cluster.names();
    let instance = names.instance(ordinal);
    let overrides = &cluster.pod_template;

    let mut containers = vec![postgres_container(cluster, &names, &instance)];
    if let Some(metrics) = &cluster.metrics {
        containers.push(metrics_container(metrics, &names));
    }
    let mut volumes = vec![
        Volume {
            name: PGDATA_VOLUME.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: names.claim(&instance),
                read_only: None,
            }),
            ..Default::default()
        },
        Volume {
            name: CONFIG_VOLUME.into(),
            config_map: Some(ConfigMapVolumeSource {
                name: names.config_map(),
                default_mode: Some(0o444),
                ..Default::default()
            }),
            ..Default::default()
        },
        secret_volume(SUPERUSER_VOLUME, names.superuser_secret()),
        secret_volume(REPLICATION_VOLUME, names.replication_secret()),
    ];
    if let Some(pgbackrest) = &cluster.pgbackrest {
        if let Some(mounts) = containers[0].volume_mounts.as_mut() {
            mounts.extend(super::pgbackrest::instance_mounts());
        }
        containers.push(super::pgbackrest::sidecar(
            pgbackrest,
            &names,
            PGDATA_VOLUME,
        ));
        volumes.extend(super::pgbackrest::instance_volumes(&names));
    }
    // A clone's first primary recovers with the `restore_command` its restore wrote, which
    // reads the source's repository with `source.conf`.
    if let Some(source) = super::pgbackrest::source_volumes(cluster) {
        if let Some(mounts) = containers[0].volume_mounts.as_mut() {
            mounts.extend(super::pgbackrest::source_mounts());
        }
        volumes.extend(source);
    }
    let spec = PodSpec {
        hostname: Some(instance.clone()),
        containers,
        volumes: Some(volumes),
        security_context: Some(postgres_security_context()),
        affinity: affinity(cluster),
        tolerations: (!overrides.tolerations.is_empty()).then(|| overrides.tolerations.clone()),
        node_selector: (!overrides.node_selector.is_empty())
            .then(|| overrides.node_selector.clone()),
        restart_policy: Some("Always".into()),
        termination_grace_period_seconds: Some(30),
        enable_service_links: Some(false),
        ..Default::default()
    };

    // Labels without the role: the template's, then ours (ours win).
    let mut labels = overrides.labels.clone();
    labels.remove(ROLE_LABEL);
    labels.extend(names.instance_labels(&instance));
    let mut annotations = overrides.annotations.clone();
    annotations.insert(CONFIG_HASH.to_owned(), config_hash.to_owned());
    let text = serde_json::to_string(&(&spec, &labels, &annotations)).unwrap_or_default();
    annotations.insert(SPEC_HASH.to_owned(), stable_hash(&text));
    labels.insert(ROLE_LABEL.to_owned(), role_value(role).to_owned());

    let component = Labels::new(ENGINE, &cluster.name, INSTANCE_COMPONENT);
    let mut metadata = child_meta(owner, instance, &component, &labels)?;
    metadata.annotations = Some(annotations);
    Some(Pod {
        metadata,
        spec: Some(spec),
        status: None,
    })
}

/// The spec hash a Pod was built with.
pub fn spec_hash(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(SPEC_HASH)
        .map(String::as_str)
}

/// The role a Pod is labelled with; `None` without a (known) role label.
pub fn role_of(pod: &Pod) -> Option<InstanceRole> {
    let value = pod.metadata.labels.as_ref()?.get(ROLE_LABEL)?;
    [InstanceRole::Primary, InstanceRole::Replica]
        .into_iter()
        .find(|role| role_value(*role) == value)
}

#[cfg(test)]
mod tests;
