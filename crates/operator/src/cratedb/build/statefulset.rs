//! (pure) One StatefulSet per node set: masters (`node.master`, no data), then each data set.
//!
//! - `podManagementPolicy: Parallel`: the first masters must start together to elect a master
//!   (`cluster.initial_master_nodes`); ordered start would wait for a Pod that cannot be ready
//!   alone.
//! - `updateStrategy: OnDelete`: a template change (a new version, settings, the expected data
//!   node count after scaling) never restarts Pods by itself; the rolling restart deletes them
//!   one at a time, in the seed's order, behind the health gate.
//! - Every node gets CrateDB's `-C` flags for its identity (`node.name` from the Pod name), its
//!   address (`network.host` = the Pod IP), discovery (the first three masters' stable DNS
//!   names) and the gateway expectations; the spec's settings follow, the set's winning over the
//!   cluster's. Host-based authentication is on: `crate` is trusted from the node itself only
//!   (for `crash` over exec), everyone else needs a password.
//! - Claims follow the disk's retention policies (`persistentVolumeClaimRetentionPolicy`).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PodAffinityTerm, PodAntiAffinity, PodSpec,
    PodTemplateSpec, Probe, VolumeMount, VolumeResourceRequirements, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use steward_api::common::{PodOverrides, RetentionPolicy};
use steward_api::cratedb::CrateCluster;

use crate::cratedb::names::{
    CONTAINER, ClusterNames, DATA_COMPONENT, ENGINE, HTTP_PORT, MASTER_COMPONENT, NODE_SET_LABEL,
    PSQL_PORT, TRANSPORT_PORT,
};
use crate::cratedb::validate::{NodeSet, ValidatedCrateCluster};
use crate::resources::{Labels, child_meta};

/// The Pod annotation a restart sets to force a new Pod template hash (`kubectl rollout
/// restart` style) — used by the REST API's restart.
pub const RESTARTED_AT: &str = "steward.dev/restarted-at";

/// The labels selecting a node set's Pods.
pub fn selector_labels(cluster: &str, set: &NodeSet) -> BTreeMap<String, String> {
    let component = if set.master {
        MASTER_COMPONENT
    } else {
        DATA_COMPONENT
    };
    let mut labels = Labels::new(ENGINE, cluster, component).to_map();
    labels.insert(NODE_SET_LABEL.to_owned(), set.name.clone());
    labels
}

/// Bytes of a Kubernetes quantity such as `4Gi`, `512Mi`, `2G` or `1000`; `None` when it is
/// not one of these forms.
pub fn quantity_bytes(q: &str) -> Option<u64> {
    let q = q.trim();
    let split = q.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor: f64 = match suffix {
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let bytes = number * factor;
    (bytes.is_finite() && bytes >= 0.0).then_some(bytes as u64)
}

/// `CRATE_HEAP_SIZE`: the heap ratio of the memory limit, when a limit is set.
pub fn heap_size(set: &NodeSet) -> Option<String> {
    let limit = set
        .resources
        .as_ref()?
        .limits
        .as_ref()?
        .get("memory")
        .and_then(|q| quantity_bytes(&q.0))?;
    let heap = (limit as f64 * set.heap_ratio) as u64;
    Some(format!("{}m", heap / (1024 * 1024)))
}

/// The `-C` flags of one node set's nodes.
pub fn args(cluster: &ValidatedCrateCluster, names: &ClusterNames, set: &NodeSet) -> Vec<String> {
    let data_paths = (0..set.disk.count)
        .map(|i| format!("/data/data{i}"))
        .collect::<Vec<_>>()
        .join(",");
    let expected = cluster.data_nodes();
    let mut flags: Vec<(String, String)> = vec![
        ("cluster.name".into(), cluster.cluster_name.clone()),
        ("node.name".into(), "$(POD_NAME)".into()),
        ("node.master".into(), set.master.to_string()),
        ("node.data".into(), (!set.master).to_string()),
        ("node.attr.node_name".into(), set.name.clone()),
        ("path.data".into(), data_paths),
        ("network.host".into(), "$(POD_IP)".into()),
        ("http.port".into(), HTTP_PORT.to_string()),
        ("psql.port".into(), PSQL_PORT.to_string()),
        ("transport.tcp.port".into(), TRANSPORT_PORT.to_string()),
        ("discovery.seed_hosts".into(), names.seed_hosts()),
        (
            "cluster.initial_master_nodes".into(),
            names.initial_master_nodes(),
        ),
        ("gateway.expected_data_nodes".into(), expected.to_string()),
        (
            "gateway.recover_after_data_nodes".into(),
            (expected / 2 + 1).to_string(),
        ),
        ("auth.host_based.enabled".into(), "true".into()),
        ("auth.host_based.config.0.user".into(), "crate".into()),
        (
            "auth.host_based.config.0.address".into(),
            "$(POD_IP)".into(),
        ),
        ("auth.host_based.config.0.method".into(), "trust".into()),
        ("auth.host_based.config.99.method".into(), "password".into()),
    ];
    for (k, v) in &set.settings {
        flags.retain(|(key, _)| key != k);
        flags.push((k.clone(), v.clone()));
    }
    flags
        .into_iter()
        .map(|(k, v)| format!("-C{k}={v}"))
        .collect()
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_owned()),
        container_port: port,
        protocol: Some("TCP".to_owned()),
        ..Default::default()
    }
}

/// Nodes of one cluster prefer different Kubernetes nodes.
fn spread(cluster: &str) -> Affinity {
    Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: 100,
                    pod_affinity_term: PodAffinityTerm {
                        label_selector: Some(LabelSelector {
                            match_labels: Some(Labels::cluster_labels(ENGINE, cluster)),
                            ..Default::default()
                        }),
                        topology_key: "kubernetes.io/hostname".to_owned(),
                        ..Default::default()
                    },
                },
            ]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn retention(policy: RetentionPolicy) -> String {
    match policy {
        RetentionPolicy::Retain => "Retain",
        RetentionPolicy::Delete => "Delete",
    }
    .to_owned()
}

fn claim_templates(set: &NodeSet) -> Vec<PersistentVolumeClaim> {
    (0..set.disk.count)
        .map(|i| PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(format!("data{i}")),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
                storage_class_name: set.disk.storage_class.clone(),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_owned(),
                        Quantity(set.disk.size.clone()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: None,
        })
        .collect()
}

fn pod_template(
    cluster: &ValidatedCrateCluster,
    names: &ClusterNames,
    set: &NodeSet,
    overrides: &PodOverrides,
    selector: &BTreeMap<String, String>,
) -> PodTemplateSpec {
    let mut labels = overrides.labels.clone();
    labels.extend(selector.clone());
    let mut env = vec![
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_IP", "status.podIP"),
    ];
    if let Some(heap) = heap_size(set) {
        env.push(EnvVar {
            name: "CRATE_HEAP_SIZE".to_owned(),
            value: Some(heap),
            ..Default::default()
        });
    }
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(cluster.image()),
        command: Some(vec!["crate".to_owned()]),
        args: Some(args(cluster, names, set)),
        env: Some(env),
        ports: Some(vec![
            port("http", HTTP_PORT),
            port("postgres", PSQL_PORT),
            port("transport", TRANSPORT_PORT),
        ]),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/".to_owned()),
                port: IntOrString::Int(HTTP_PORT),
                ..Default::default()
            }),
            period_seconds: Some(2),
            failure_threshold: Some(3),
            ..Default::default()
        }),
        resources: set.resources.clone().or(overrides.resources.clone()),
        volume_mounts: Some(
            (0..set.disk.count)
                .map(|i| VolumeMount {
                    name: format!("data{i}"),
                    mount_path: format!("/data/data{i}"),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    };
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels),
            annotations: (!overrides.annotations.is_empty()).then(|| overrides.annotations.clone()),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![container],
            affinity: Some(
                overrides
                    .affinity
                    .clone()
                    .unwrap_or_else(|| spread(&cluster.name)),
            ),
            tolerations: (!overrides.tolerations.is_empty()).then(|| overrides.tolerations.clone()),
            node_selector: (!overrides.node_selector.is_empty())
                .then(|| overrides.node_selector.clone()),
            termination_grace_period_seconds: Some(30),
            ..Default::default()
        }),
    }
}

/// The StatefulSet of node set `set` with `replicas` Pods (the scale step decides the count; the
/// spec's is the goal). `None` when the owner was never stored.
pub fn statefulset(
    owner: &CrateCluster,
    cluster: &ValidatedCrateCluster,
    names: &ClusterNames,
    set: &NodeSet,
    replicas: i32,
) -> Option<StatefulSet> {
    let component = if set.master {
        MASTER_COMPONENT
    } else {
        DATA_COMPONENT
    };
    let labels = Labels::new(ENGINE, &cluster.name, component);
    let mut metadata = child_meta(
        owner,
        names.statefulset(&set.name),
        &labels,
        &BTreeMap::new(),
    )?;
    let selector = selector_labels(&cluster.name, set);
    metadata.labels = Some(selector.clone());
    Some(StatefulSet {
        metadata,
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some(names.discovery_service()),
            pod_management_policy: Some("Parallel".to_owned()),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".to_owned()),
                rolling_update: None,
            }),
            selector: LabelSelector {
                match_labels: Some(selector.clone()),
                ..Default::default()
            },
            template: pod_template(cluster, names, set, &owner.spec.pod_template, &selector),
            volume_claim_templates: Some(claim_templates(set)),
            persistent_volume_claim_retention_policy: Some(
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_scaled: Some(retention(set.disk.retain_on_scale_down)),
                    when_deleted: Some(retention(set.disk.retain_on_delete)),
                },
            ),
            ..Default::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cratedb::validate::{tests::cluster, validate};

    fn built(set: &str) -> StatefulSet {
        let owner = cluster();
        let v = validate(&owner).unwrap();
        let names = ClusterNames::new("c1", "db", "cluster.local");
        statefulset(&owner, &v, &names, v.set(set).unwrap(), 2).unwrap()
    }

    fn flags(s: &StatefulSet) -> Vec<String> {
        s.spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .args
            .clone()
            .unwrap()
    }

    #[test]
    fn masters_hold_no_data_and_data_sets_carry_their_name_and_disks() {
        let m = built("master");
        assert_eq!(m.metadata.name.as_deref(), Some("crate-master-c1"));
        let f = flags(&m);
        assert!(f.contains(&"-Cnode.master=true".to_owned()));
        assert!(f.contains(&"-Cnode.data=false".to_owned()));
        assert!(f.contains(&"-Cnode.name=$(POD_NAME)".to_owned()));
        assert!(f.contains(&"-Cnetwork.host=$(POD_IP)".to_owned()));
        assert!(f.contains(&"-Cgateway.expected_data_nodes=4".to_owned()));
        assert!(f.contains(&"-Cgateway.recover_after_data_nodes=3".to_owned()));
        let hot = built("hot");
        let spec = hot.spec.as_ref().unwrap();
        assert_eq!(spec.service_name.as_deref(), Some("crate-discovery-c1"));
        assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
        assert_eq!(
            spec.update_strategy.as_ref().unwrap().type_.as_deref(),
            Some("OnDelete")
        );
        assert_eq!(spec.volume_claim_templates.as_ref().unwrap().len(), 2);
        let f = flags(&hot);
        assert!(f.contains(&"-Cpath.data=/data/data0,/data/data1".to_owned()));
        assert!(f.contains(&"-Cnode.attr.node_name=hot".to_owned()));
        assert_eq!(
            spec.selector.match_labels.as_ref().unwrap()[NODE_SET_LABEL],
            "hot"
        );
        // A set's settings come after Steward's flags.
        let cold = flags(&built("cold"));
        assert_eq!(cold.last().unwrap(), "-Cnode.attr.zone=b");
    }

    #[test]
    fn heap_is_the_ratio_of_the_memory_limit() {
        assert_eq!(quantity_bytes("4Gi"), Some(4 << 30));
        assert_eq!(quantity_bytes("2G"), Some(2_000_000_000));
        assert_eq!(quantity_bytes("12x"), None);
        let owner = cluster();
        let mut v = validate(&owner).unwrap();
        assert_eq!(heap_size(&v.sets[1]), None);
        v.sets[1].resources = Some(k8s_openapi::api::core::v1::ResourceRequirements {
            limits: Some(BTreeMap::from([("memory".into(), Quantity("4Gi".into()))])),
            ..Default::default()
        });
        assert_eq!(heap_size(&v.sets[1]).as_deref(), Some("1024m"));
    }
}
