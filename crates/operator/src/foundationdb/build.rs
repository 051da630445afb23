//! (pure) The children of a `FoundationDBCluster`: the ConfigMap with each class's monitor
//! configuration and the cluster file, and for each process group its Pod (the unified image,
//! `fdb-kubernetes-monitor`) and, for stateful classes, its claim. Names: a process group's ID is
//! `<prefix>-<class>-<n>` and its Pod has that name; its claim is `<id>-data`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, ConfigMap, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, KeyToPath, ObjectFieldSelector, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, Pod, PodAffinityTerm, PodAntiAffinity, PodSpec, Service,
    ServicePort, ServiceSpec, Volume, VolumeMount, VolumeResourceRequirements,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::ResourceExt;
use serde_json::{Value, json};
use steward_api::foundationdb::{FoundationDBCluster, ProcessClass};

use crate::resources::{Labels, child_meta};

/// The engine's name in labels.
pub const ENGINE: &str = "foundationdb";
/// The main container.
pub const CONTAINER: &str = "foundationdb";
/// The sidecar container: the unified image in sidecar mode, providing the spec's version's
/// binaries in [`SHARED_BINARIES`] for an upgrade (seed 002, "UpdateSidecarVersions").
pub const SIDECAR: &str = "foundationdb-kubernetes-sidecar";
/// The process group's data directory (its claim, or an emptyDir for stateless classes).
pub const DATA_MOUNT: &str = "/var/fdb/data";
/// The cluster file the servers (and fdbcli in the Pod) use.
pub const CLUSTER_FILE: &str = "/var/fdb/data/fdb.cluster";
/// Where the ConfigMap is mounted (the monitor's input directory).
pub const CONFIG_MOUNT: &str = "/var/dynamic-conf";
/// Where an upgrade's sidecar puts new binaries.
pub const SHARED_BINARIES: &str = "/var/fdb/shared-binaries";
/// The port of process 1 (`ProcessNumber` offset 4499, multiplier 2, as FoundationDB's
/// operator).
pub const PORT: u16 = 4501;
/// The ConfigMap key of the cluster file.
pub const CLUSTER_FILE_KEY: &str = "fdb.cluster";
/// Label: the process group ID.
pub const GROUP_LABEL: &str = "foundationdb.org/fdb-process-group-id";
/// Label: the process class.
pub const CLASS_LABEL: &str = "foundationdb.org/fdb-process-class";
/// Annotation: a hash of what Steward put in the Pod; another hash means the Pod must be
/// recreated (`IncorrectPodSpec`).
pub const SPEC_HASH: &str = "steward.dev/spec-hash";
/// Annotation: the buggification a Pod was built with (`crash-loop`, `no-schedule`, or both,
/// comma-separated); absent for none. Not part of the spec hash: DeletePodsForBuggification
/// recreates a Pod whose value is not the spec's, without UpdatePods' zone-by-zone care.
pub const BUGGIFY: &str = "steward.dev/buggify";
/// The Node label a no-schedule Pod requires (`true`); no Node should carry it
/// (FoundationDB's operator's label).
pub const NO_SCHEDULE_LABEL: &str = "foundationdb.org/no-schedule-allowed";
/// The command a crash-looping Pod's main container runs instead of the monitor: it starts no
/// process and waits (FoundationDB's operator replaces the command the same way).
pub const CRASH_LOOP: &str = "crash-loop";
/// Annotation on a process group's claim: the size and StorageClass it was created with
/// (`<size>|<class>`); another value than the spec's makes ReplaceMisconfiguredProcessGroups
/// replace the group (a claim cannot be shrunk or moved to another class).
pub const CLAIM_SPEC: &str = "steward.dev/claim-spec";
/// Annotation: the monitor's active configuration (seed 002, "Unified Image").
pub const CURRENT_CONFIGURATION: &str = "foundationdb.org/launcher-current-configuration";
/// Annotation: the monitor's environment.
pub const ENVIRONMENT: &str = "foundationdb.org/launcher-environment";
/// Annotation of `spec.podTemplate`: the REST API's restart trigger. The one template label or
/// annotation in the spec hash: a new value recreates the Pods (UpdatePods).
pub use crate::api::engine::RESTARTED_AT;
/// The headless Service's component label.
pub const HEADLESS_COMPONENT: &str = "headless";

/// The process group ID prefix (and lock ID): `spec.processGroupIDPrefix` or the name.
pub fn prefix(cluster: &FoundationDBCluster) -> String {
    cluster
        .spec
        .process_group_id_prefix
        .clone()
        .unwrap_or_else(|| cluster.name_any())
}

/// Process group `n` of `class`.
pub fn group_id(prefix: &str, class: ProcessClass, n: u32) -> String {
    format!("{prefix}-{}-{n}", class.as_str())
}

/// (class, n) of a process group ID with this prefix.
pub fn parse_group_id(prefix: &str, id: &str) -> Option<(ProcessClass, u32)> {
    let rest = id.strip_prefix(prefix)?.strip_prefix('-')?;
    let (class, n) = rest.rsplit_once('-')?;
    let class = ProcessClass::ALL
        .into_iter()
        .find(|c| c.as_str() == class)?;
    Some((class, n.parse().ok()?))
}

/// The claim of process group `id`.
pub fn claim_name(id: &str) -> String {
    format!("{id}-data")
}

/// The cluster's ConfigMap.
pub fn config_map_name(cluster: &str) -> String {
    format!("{cluster}-config")
}

/// The ConfigMap key of `class`'s monitor configuration.
pub fn monitor_key(class: ProcessClass) -> String {
    format!("config.json-{}", class.as_str())
}

fn plain(value: impl Into<String>) -> Value {
    json!({"value": value.into()})
}

fn env(source: &str) -> Value {
    json!({"type": "Environment", "source": source})
}

/// The monitor configuration of `class`: FoundationDB's `fdb-kubernetes-monitor` JSON
/// (`version`, `serverCount`, `arguments`).
pub fn monitor_config(cluster: &FoundationDBCluster, class: ProcessClass) -> Value {
    let mut args = vec![
        plain("--cluster_file"),
        plain(CLUSTER_FILE),
        plain("--public_address"),
        json!({"type": "Concatenate", "values": [
            env("FDB_PUBLIC_IP"), plain(":"),
            {"type": "ProcessNumber", "offset": i32::from(PORT) - 2, "multiplier": 2}
        ]}),
        plain("--class"),
        plain(class.as_str()),
        plain("--datadir"),
        plain(DATA_MOUNT),
        plain("--locality_instance_id"),
        env("FDB_INSTANCE_ID"),
        plain("--locality_machineid"),
        env("FDB_MACHINE_ID"),
        plain("--locality_zoneid"),
        env("FDB_ZONE_ID"),
    ];
    args.extend(
        cluster
            .spec
            .custom_parameters
            .iter()
            .map(|p| plain(format!("--{}", p.trim_start_matches('-')))),
    );
    json!({"version": cluster.spec.version, "serverCount": 1, "arguments": args})
}

/// (pure) The command line a process runs with `config` in an environment: the arguments,
/// rendered (process number 1), joined by spaces. `None` when a variable is missing.
pub fn command_line(config: &Value, environment: &BTreeMap<String, String>) -> Option<String> {
    fn render(arg: &Value, environment: &BTreeMap<String, String>) -> Option<String> {
        match arg.get("type").and_then(Value::as_str).unwrap_or("") {
            "Concatenate" => arg
                .get("values")?
                .as_array()?
                .iter()
                .map(|v| render(v, environment))
                .collect(),
            "Environment" => environment.get(arg.get("source")?.as_str()?).cloned(),
            "ProcessNumber" => {
                let offset = arg.get("offset").and_then(Value::as_i64).unwrap_or(0);
                let multiplier = arg.get("multiplier").and_then(Value::as_i64).unwrap_or(1);
                Some((offset + multiplier).to_string())
            }
            _ => arg.get("value")?.as_str().map(str::to_owned),
        }
    }
    let args: Option<Vec<String>> = config
        .get("arguments")?
        .as_array()?
        .iter()
        .map(|a| render(a, environment))
        .collect();
    Some(args?.join(" "))
}

/// The cluster's ConfigMap: each class's monitor configuration and, once known, the cluster
/// file. `None` when the cluster was never stored.
pub fn config_map(
    cluster: &FoundationDBCluster,
    connection_string: Option<&str>,
) -> Option<ConfigMap> {
    let labels = Labels::new(ENGINE, cluster.name_any(), "config");
    let metadata = child_meta(
        cluster,
        config_map_name(&cluster.name_any()),
        &labels,
        &BTreeMap::new(),
    )?;
    let mut data: BTreeMap<String, String> = ProcessClass::ALL
        .into_iter()
        .map(|c| (monitor_key(c), monitor_config(cluster, c).to_string()))
        .collect();
    if let Some(cs) = connection_string {
        data.insert(CLUSTER_FILE_KEY.to_owned(), cs.to_owned());
    }
    Some(ConfigMap {
        metadata,
        data: Some(data),
        ..ConfigMap::default()
    })
}

/// The buggification `spec.buggify` asks for process group `id` (`*` names every group), as
/// the [`BUGGIFY`] annotation writes it; empty for none.
pub fn buggify_state(cluster: &FoundationDBCluster, id: &str) -> String {
    let listed = |ids: &[String]| ids.iter().any(|x| x == id || x == "*");
    let b = &cluster.spec.buggify;
    let mut parts = Vec::new();
    if listed(&b.crash_loop) {
        parts.push(CRASH_LOOP);
    }
    if listed(&b.no_schedule) {
        parts.push("no-schedule");
    }
    parts.join(",")
}

/// The [`CLAIM_SPEC`] value of `storage`.
pub fn claim_spec_text(storage: &steward_api::common::StorageSpec) -> String {
    format!(
        "{}|{}",
        storage.size,
        storage.storage_class_name.as_deref().unwrap_or("")
    )
}

/// The labels of process group `id`'s Pod and claim.
pub fn group_labels(cluster: &str, id: &str, class: ProcessClass) -> BTreeMap<String, String> {
    let mut labels = Labels::new(ENGINE, cluster, class.as_str()).to_map();
    labels.insert(GROUP_LABEL.to_owned(), id.to_owned());
    labels.insert(CLASS_LABEL.to_owned(), class.as_str().to_owned());
    labels
}

/// The labels process group `id`'s Pod carries: `spec.podTemplate.labels` with Steward's own
/// ([`group_labels`]) over them. Kept in place by UpdateLabels; not in the spec hash.
pub fn pod_labels(
    cluster: &FoundationDBCluster,
    id: &str,
    class: ProcessClass,
) -> BTreeMap<String, String> {
    let mut labels = cluster.spec.pod_template.labels.clone();
    labels.extend(group_labels(&cluster.name_any(), id, class));
    labels
}

/// Whether Steward sets annotation `key` on a Pod itself (the spec hash, the monitor's two, the
/// buggification), or it belongs to the spec hash (the restart trigger): template values of
/// these keys are not kept in place by UpdateLabels.
pub fn reserved_annotation(key: &str) -> bool {
    [
        SPEC_HASH,
        CURRENT_CONFIGURATION,
        ENVIRONMENT,
        BUGGIFY,
        RESTARTED_AT,
    ]
    .contains(&key)
}

/// The template annotations UpdateLabels keeps on every Pod: `spec.podTemplate.annotations`
/// but the [reserved](reserved_annotation) ones.
pub fn pod_annotations(cluster: &FoundationDBCluster) -> BTreeMap<String, String> {
    cluster
        .spec
        .pod_template
        .annotations
        .iter()
        .filter(|(k, _)| !reserved_annotation(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The cluster's headless Service (`spec.routing.headlessService`): named like the cluster,
/// selecting all its Pods, ready or not, owned by it. `None` when the cluster was never stored.
pub fn headless_service(cluster: &FoundationDBCluster) -> Option<Service> {
    let name = cluster.name_any();
    let metadata = child_meta(
        cluster,
        name.clone(),
        &Labels::new(ENGINE, &name, HEADLESS_COMPONENT),
        &BTreeMap::new(),
    )?;
    let selector = BTreeMap::from([
        (crate::resources::labels::NAME.to_owned(), ENGINE.to_owned()),
        (crate::resources::labels::INSTANCE.to_owned(), name),
    ]);
    Some(Service {
        metadata,
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            // A process is reachable before it is ready (and a coordinator must be).
            publish_not_ready_addresses: Some(true),
            selector: Some(selector),
            ports: Some(vec![ServicePort {
                name: Some("fdb".into()),
                port: i32::from(PORT),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    })
}

/// Whether Service metadata (`labels`, `owners`) is the headless Service Steward made for
/// `cluster`: Steward's labels for it and a controller reference to the cluster's UID.
pub fn is_own_headless_service(
    cluster: &FoundationDBCluster,
    labels: &crate::resources::packed::PackedMap,
    owners: Option<&[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference]>,
) -> bool {
    let wanted = Labels::new(ENGINE, cluster.name_any(), HEADLESS_COMPONENT).to_map();
    let owned = cluster.uid().is_some_and(|uid| {
        owners
            .unwrap_or_default()
            .iter()
            .any(|o| o.uid == uid && o.controller == Some(true))
    });
    owned && labels.has_all(&wanted)
}

/// Process group `id`'s claim (stateful classes). No owner: the claim is deleted by
/// `RemoveProcessGroups` once the process group is excluded, never by garbage collection.
pub fn claim(
    cluster: &FoundationDBCluster,
    id: &str,
    class: ProcessClass,
) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(id)),
            namespace: cluster.namespace(),
            labels: Some(group_labels(&cluster.name_any(), id, class)),
            annotations: Some(BTreeMap::from([(
                CLAIM_SPEC.to_owned(),
                claim_spec_text(&cluster.spec.storage),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(claim_spec(&cluster.spec.storage)),
        status: None,
    }
}

/// A ReadWriteOnce claim's spec of `storage`'s size and class (process groups, backups).
pub fn claim_spec(storage: &steward_api::common::StorageSpec) -> PersistentVolumeClaimSpec {
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

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Whether two versions speak the same protocol (same major and minor: patch releases are
/// protocol-compatible; FoundationDB's "Upgrades" documentation).
pub fn protocol_compatible(a: &str, b: &str) -> bool {
    crate::foundationdb::validate::minor_of(a) == crate::foundationdb::validate::minor_of(b)
}

/// The version the main container runs: the spec's, except while a protocol-changing upgrade
/// has not been bounced yet (`running` speaks another protocol): then the running one, so that
/// no Pod is recreated onto the new protocol alone. The new binaries reach the processes
/// through the sidecar and the bounce; the main container follows once the cluster runs them.
pub fn main_version<'a>(cluster: &'a FoundationDBCluster, running: Option<&'a str>) -> &'a str {
    match running {
        Some(r) if !protocol_compatible(r, &cluster.spec.version) => r,
        _ => &cluster.spec.version,
    }
}

/// The image of the sidecar container: the spec's version.
pub fn sidecar_image(cluster: &FoundationDBCluster) -> String {
    format!("{}:{}", cluster.spec.image, cluster.spec.version)
}

/// Process group `id`'s Pod, owned by the cluster, for a cluster that runs `running` (the
/// status's running version). `None` when the cluster was never stored. The spec hash leaves
/// out what is changed in place: the sidecar's image (UpdateSidecarVersions) and the template's
/// labels and annotations but the restart trigger (UpdateLabels).
pub fn pod(
    cluster: &FoundationDBCluster,
    id: &str,
    class: ProcessClass,
    running: Option<&str>,
) -> Option<Pod> {
    let main = main_version(cluster, running).to_owned();
    let name = cluster.name_any();
    let overrides = &cluster.spec.pod_template;
    let mut metadata = child_meta(
        cluster,
        id,
        &Labels::new(ENGINE, &name, class.as_str()),
        &pod_labels(cluster, id, class),
    )?;
    let container = Container {
        name: CONTAINER.into(),
        image: Some(format!("{}:{main}", cluster.spec.image)),
        command: Some(vec!["fdb-kubernetes-monitor".into()]),
        args: Some(vec![
            "--input-dir".into(),
            CONFIG_MOUNT.into(),
            "--input-monitor-conf".into(),
            "config.json".into(),
            "--data-dir".into(),
            DATA_MOUNT.into(),
            "--shared-binary-dir".into(),
            SHARED_BINARIES.into(),
            "--main-container-version".into(),
            main.clone(),
        ]),
        env: Some(vec![
            field_env("FDB_PUBLIC_IP", "status.podIP"),
            field_env("FDB_POD_IP", "status.podIP"),
            field_env("FDB_MACHINE_ID", "metadata.name"),
            field_env("FDB_ZONE_ID", "spec.nodeName"),
            EnvVar {
                name: "FDB_INSTANCE_ID".into(),
                value: Some(id.to_owned()),
                ..Default::default()
            },
            // The tools run in this container (fdbcli, fdbbackup) load the client libraries of
            // the versions the sidecar provides: a multi-version client, so they reach the
            // cluster before and after an upgrade's bounce.
            EnvVar {
                name: "FDB_NETWORK_OPTION_EXTERNAL_CLIENT_DIRECTORY".into(),
                value: Some(SHARED_BINARIES.to_owned()),
                ..Default::default()
            },
        ]),
        resources: overrides.resources.clone(),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "data".into(),
                mount_path: DATA_MOUNT.into(),
                ..Default::default()
            },
            VolumeMount {
                name: "config".into(),
                mount_path: CONFIG_MOUNT.into(),
                read_only: Some(true),
                ..Default::default()
            },
            VolumeMount {
                name: "shared-binaries".into(),
                mount_path: SHARED_BINARIES.into(),
                ..Default::default()
            },
        ]),
        ..Default::default()
    };
    let sidecar = Container {
        name: SIDECAR.into(),
        image: Some(sidecar_image(cluster)),
        command: Some(vec!["fdb-kubernetes-monitor".into()]),
        args: Some(vec![
            "--mode".into(),
            "sidecar".into(),
            "--output-dir".into(),
            SHARED_BINARIES.into(),
            "--main-container-version".into(),
            main.clone(),
        ]),
        volume_mounts: Some(vec![VolumeMount {
            name: "shared-binaries".into(),
            mount_path: SHARED_BINARIES.into(),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let data = if class.is_stateful() {
        Volume {
            name: "data".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(id),
                read_only: None,
            }),
            ..Default::default()
        }
    } else {
        Volume {
            name: "data".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        }
    };
    let config = Volume {
        name: "config".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map_name(&name),
            items: Some(vec![
                KeyToPath {
                    key: monitor_key(class),
                    path: "config.json".into(),
                    mode: None,
                },
                KeyToPath {
                    key: CLUSTER_FILE_KEY.into(),
                    path: CLUSTER_FILE_KEY.into(),
                    mode: None,
                },
            ]),
            // The cluster file is not there until coordinators are chosen.
            optional: Some(true),
            default_mode: None,
        }),
        ..Default::default()
    };
    let shared = Volume {
        name: "shared-binaries".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    };
    // Prefer spreading a class's Pods over fault domains (FoundationDB's operator does the same).
    let spread = Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: 1,
                    pod_affinity_term: PodAffinityTerm {
                        topology_key: cluster.spec.fault_domain.key.clone(),
                        label_selector: Some(LabelSelector {
                            match_labels: Some(BTreeMap::from([
                                (crate::resources::labels::INSTANCE.to_owned(), name.clone()),
                                (CLASS_LABEL.to_owned(), class.as_str().to_owned()),
                            ])),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                },
            ]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut spec = PodSpec {
        containers: vec![container, sidecar],
        volumes: Some(vec![data, config, shared]),
        affinity: Some(overrides.affinity.clone().unwrap_or(spread)),
        tolerations: (!overrides.tolerations.is_empty()).then(|| overrides.tolerations.clone()),
        node_selector: (!overrides.node_selector.is_empty())
            .then(|| overrides.node_selector.clone()),
        restart_policy: Some("Always".into()),
        termination_grace_period_seconds: Some(30),
        enable_service_links: Some(false),
        ..Default::default()
    };
    let mut annotations = overrides.annotations.clone();
    let mut hashed = spec.clone();
    if let Some(s) = hashed.containers.iter_mut().find(|c| c.name == SIDECAR) {
        s.image = None;
    }
    // The template's labels and annotations are kept in place (UpdateLabels): of them only
    // Steward's own labels and the restart trigger are hashed.
    let restart: BTreeMap<String, String> = annotations
        .get_key_value(RESTARTED_AT)
        .map(|(k, v)| (k.clone(), v.clone()))
        .into_iter()
        .collect();
    annotations.insert(
        SPEC_HASH.to_owned(),
        crate::etcd::build::member::spec_hash(&hashed, &group_labels(&name, id, class), &restart),
    );
    // Buggification is applied after the hash: DeletePodsForBuggification, not UpdatePods,
    // recreates the Pods whose buggification changes.
    let buggify = buggify_state(cluster, id);
    if buggify.split(',').any(|b| b == CRASH_LOOP)
        && let Some(main) = spec.containers.iter_mut().find(|c| c.name == CONTAINER)
    {
        main.command = Some(vec![CRASH_LOOP.into()]);
        main.args = None;
    }
    if buggify.split(',').any(|b| b == "no-schedule") {
        spec.node_selector
            .get_or_insert_with(BTreeMap::new)
            .insert(NO_SCHEDULE_LABEL.to_owned(), "true".to_owned());
    }
    if !buggify.is_empty() {
        annotations.insert(BUGGIFY.to_owned(), buggify);
    }
    metadata.annotations = Some(annotations);
    Some(Pod {
        metadata,
        spec: Some(spec),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_api::foundationdb::FoundationDBClusterSpec;

    pub fn cluster() -> FoundationDBCluster {
        let spec: FoundationDBClusterSpec =
            serde_json::from_value(json!({"version": "7.1.57"})).unwrap();
        let mut c = FoundationDBCluster::new("demo", spec);
        c.metadata.namespace = Some("db".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    #[test]
    fn group_ids_round_trip() {
        let id = group_id("demo", ProcessClass::Storage, 3);
        assert_eq!(id, "demo-storage-3");
        assert_eq!(
            parse_group_id("demo", &id),
            Some((ProcessClass::Storage, 3))
        );
        assert_eq!(parse_group_id("other", &id), None);
        assert_eq!(parse_group_id("demo", "demo-proxy-1"), None);
    }

    #[test]
    fn the_command_line_is_rendered_from_the_monitor_configuration() {
        let mut c = cluster();
        c.spec.custom_parameters = vec!["knob_max_trace_lines=1000".into()];
        let config = monitor_config(&c, ProcessClass::Log);
        let env = BTreeMap::from([
            ("FDB_PUBLIC_IP".to_owned(), "10.0.0.5".to_owned()),
            ("FDB_INSTANCE_ID".to_owned(), "demo-log-1".to_owned()),
            ("FDB_MACHINE_ID".to_owned(), "demo-log-1".to_owned()),
            ("FDB_ZONE_ID".to_owned(), "node-a".to_owned()),
        ]);
        assert_eq!(
            command_line(&config, &env).unwrap(),
            "--cluster_file /var/fdb/data/fdb.cluster --public_address 10.0.0.5:4501 --class log \
             --datadir /var/fdb/data --locality_instance_id demo-log-1 --locality_machineid demo-log-1 \
             --locality_zoneid node-a --knob_max_trace_lines=1000"
        );
        assert_eq!(command_line(&config, &BTreeMap::new()), None);
    }

    #[test]
    fn a_pod_runs_the_monitor_on_its_claim_and_the_hash_follows_the_spec() {
        let c = cluster();
        let p = pod(&c, "demo-storage-1", ProcessClass::Storage, None).unwrap();
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(
            spec.containers[0].image.as_deref(),
            Some("foundationdb/fdb-kubernetes-monitor:7.1.57")
        );
        let volumes = spec.volumes.as_ref().unwrap();
        assert_eq!(
            volumes[0]
                .persistent_volume_claim
                .as_ref()
                .unwrap()
                .claim_name,
            "demo-storage-1-data"
        );
        let stateless = pod(&c, "demo-stateless-1", ProcessClass::Stateless, None).unwrap();
        assert!(
            stateless.spec.unwrap().volumes.unwrap()[0]
                .empty_dir
                .is_some()
        );
        let mut changed = c.clone();
        changed.spec.version = "7.1.61".into();
        let hash = |p: &Pod| p.metadata.annotations.as_ref().unwrap()[SPEC_HASH].clone();
        assert_ne!(
            hash(&p),
            hash(&pod(&changed, "demo-storage-1", ProcessClass::Storage, None).unwrap())
        );
        // Template labels and annotations are kept in place (UpdateLabels), not hashed; the
        // restart trigger is.
        let mut labelled = c.clone();
        labelled.spec.pod_template.labels = BTreeMap::from([("team".into(), "a".into())]);
        labelled.spec.pod_template.annotations = BTreeMap::from([("note".into(), "x".into())]);
        let p2 = pod(&labelled, "demo-storage-1", ProcessClass::Storage, None).unwrap();
        assert_eq!(hash(&p), hash(&p2));
        assert_eq!(p2.metadata.labels.as_ref().unwrap()["team"], "a");
        assert_eq!(p2.metadata.annotations.as_ref().unwrap()["note"], "x");
        let mut restarted = c.clone();
        restarted
            .spec
            .pod_template
            .annotations
            .insert(RESTARTED_AT.into(), "2026-01-01T00:00:00Z".into());
        assert_ne!(
            hash(&p),
            hash(&pod(&restarted, "demo-storage-1", ProcessClass::Storage, None).unwrap())
        );
        assert!(pod_annotations(&restarted).is_empty());
        // Steward's labels win over the template's.
        let mut clash = c.clone();
        clash.spec.pod_template.labels = BTreeMap::from([(GROUP_LABEL.into(), "other".into())]);
        assert_eq!(
            pod_labels(&clash, "demo-storage-1", ProcessClass::Storage)[GROUP_LABEL],
            "demo-storage-1"
        );
        // A knob is not a Pod spec change: it reaches the processes through the ConfigMap.
        let mut knob = c.clone();
        knob.spec.custom_parameters = vec!["knob_a=1".into()];
        assert_eq!(
            hash(&p),
            hash(&pod(&knob, "demo-storage-1", ProcessClass::Storage, None).unwrap())
        );
    }

    #[test]
    fn an_upgrade_changes_the_sidecar_first_and_the_main_container_once_running() {
        let mut c = cluster();
        c.spec.version = "7.3.43".into();
        let hash = |p: &Pod| p.metadata.annotations.as_ref().unwrap()[SPEC_HASH].clone();
        let image = |p: &Pod, i: usize| {
            p.spec.as_ref().unwrap().containers[i]
                .image
                .clone()
                .unwrap()
        };
        // Still running 7.1: the main container stays on it, the sidecar brings 7.3.
        let during = pod(&c, "demo-storage-1", ProcessClass::Storage, Some("7.1.57")).unwrap();
        assert_eq!(
            image(&during, 0),
            "foundationdb/fdb-kubernetes-monitor:7.1.57"
        );
        assert_eq!(
            image(&during, 1),
            "foundationdb/fdb-kubernetes-monitor:7.3.43"
        );
        let before = pod(
            &cluster(),
            "demo-storage-1",
            ProcessClass::Storage,
            Some("7.1.57"),
        )
        .unwrap();
        assert_eq!(
            hash(&during),
            hash(&before),
            "the sidecar's image is not in the hash"
        );
        // Running 7.3 after the bounce: the main container follows (a new Pod).
        let after = pod(&c, "demo-storage-1", ProcessClass::Storage, Some("7.3.43")).unwrap();
        assert_eq!(
            image(&after, 0),
            "foundationdb/fdb-kubernetes-monitor:7.3.43"
        );
        assert_ne!(hash(&after), hash(&during));
        // A patch release is protocol-compatible: the Pods move to it directly.
        let mut patch = cluster();
        patch.spec.version = "7.1.61".into();
        let p = pod(
            &patch,
            "demo-storage-1",
            ProcessClass::Storage,
            Some("7.1.57"),
        )
        .unwrap();
        assert_eq!(image(&p, 0), "foundationdb/fdb-kubernetes-monitor:7.1.61");
    }

    #[test]
    fn the_headless_service_selects_every_pod_of_the_cluster_and_is_owned_by_it() {
        let c = cluster();
        let svc = headless_service(&c).unwrap();
        assert_eq!(svc.metadata.name.as_deref(), Some("demo"));
        let spec = svc.spec.as_ref().unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        let p = pod(&c, "demo-log-1", ProcessClass::Log, None).unwrap();
        let pod_labels = p.metadata.labels.unwrap();
        for (k, v) in spec.selector.as_ref().unwrap() {
            assert_eq!(pod_labels.get(k), Some(v), "{k}");
        }
        let packed =
            crate::resources::packed::PackedMap::new(svc.metadata.labels.as_ref().unwrap());
        let owners = svc.metadata.owner_references.as_deref();
        assert!(is_own_headless_service(&c, &packed, owners));
        assert!(!is_own_headless_service(&c, &packed, None));
        let empty = crate::resources::packed::PackedMap::default();
        assert!(!is_own_headless_service(&c, &empty, owners));
    }

    #[test]
    fn the_config_map_has_every_class_and_the_cluster_file_once_known() {
        let c = cluster();
        let cm = config_map(&c, None).unwrap();
        let data = cm.data.unwrap();
        assert!(data.contains_key("config.json-storage"));
        assert!(!data.contains_key(CLUSTER_FILE_KEY));
        let cm = config_map(&c, Some("demo:abc@10.0.0.1:4501")).unwrap();
        assert_eq!(cm.data.unwrap()[CLUSTER_FILE_KEY], "demo:abc@10.0.0.1:4501");
    }
}
