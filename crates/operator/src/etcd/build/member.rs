//! (pure) The children of one member: its `EtcdPeer` (built by the cluster), and the Pod and
//! PersistentVolumeClaim built from the peer (by the peer controller). Steward manages member
//! Pods directly — one Pod per peer, like CloudNativePG and the FoundationDB operator — rather
//! than through a one-replica ReplicaSet as the seed does: the operator, not a controller in
//! between, decides when a member's Pod is replaced.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, Pod,
    PodSpec, Probe, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use steward_api::etcd::{
    Bootstrap, EtcdCluster, EtcdPeer, EtcdPeerSpec, InitialClusterState, SnapshotFile,
};

use crate::etcd::build::service::{CLIENT_PORT, MEMBER_COMPONENT, PEER_PORT};
use crate::etcd::names::{ClusterNames, PEER_LABEL, claim_name};
use crate::resources::{Labels, child_meta};

/// Annotation holding a hash of the Pod spec Steward built; a different hash means the Pod
/// must be replaced (Pod specs are mostly immutable).
pub const SPEC_HASH: &str = "steward.dev/spec-hash";
/// Where the data volume is mounted.
pub const DATA_MOUNT: &str = "/var/lib/etcd";
/// etcd's data directory inside the volume for peers without a member ID (created by Steward
/// versions before member-scoped data directories).
pub const LEGACY_DATA_DIR: &str = "/var/lib/etcd/data";

/// etcd's data directory: `/var/lib/etcd/<memberId>`, so that a member only ever starts from
/// its own data — a later member of the same name on a retained claim gets a new, empty
/// directory next to the old one. Peers without a (valid, hex) member ID use
/// [`LEGACY_DATA_DIR`].
pub fn data_dir(member_id: Option<&str>) -> String {
    match member_id {
        Some(id)
            if !id.is_empty() && id.len() <= 16 && id.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            format!("{DATA_MOUNT}/{id}")
        }
        _ => LEGACY_DATA_DIR.to_owned(),
    }
}

/// The `EtcdPeer` for member `name` of `cluster`, running member `member_id` (hex). `None`
/// when the cluster was never stored.
pub fn peer(
    cluster: &EtcdCluster,
    name: &str,
    bootstrap: Bootstrap,
    member_id: Option<String>,
    restore: Option<SnapshotFile>,
) -> Option<EtcdPeer> {
    let labels = Labels::new("etcd", cluster.name_any(), "peer");
    let metadata = child_meta(cluster, name, &labels, &BTreeMap::new())?;
    let spec = EtcdPeerSpec {
        cluster_name: cluster.name_any(),
        bootstrap,
        version: cluster.spec.version.clone(),
        repository: cluster.spec.repository.clone(),
        storage: cluster.spec.storage.clone(),
        pod_template: cluster.spec.pod_template.clone(),
        member_id,
        restore,
    };
    Some(EtcdPeer {
        metadata,
        spec,
        status: None,
    })
}

/// The labels of a member's Pod (selected by the headless Service, the budget and status).
pub fn pod_labels(cluster: &str, peer: &str) -> BTreeMap<String, String> {
    let mut labels = Labels::new("etcd", cluster, MEMBER_COMPONENT).to_map();
    labels.insert(PEER_LABEL.to_owned(), peer.to_owned());
    labels
}

/// The member's data claim. It has no owner: it outlives the peer and the cluster unless the
/// retention policy says otherwise (seed: claims are never deleted automatically by default).
pub fn claim(peer: &EtcdPeer) -> PersistentVolumeClaim {
    let name = peer.name_any();
    let mut labels = Labels::new("etcd", &peer.spec.cluster_name, "data").to_map();
    labels.insert(PEER_LABEL.to_owned(), name.clone());
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(&name)),
            namespace: peer.namespace(),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: peer.spec.storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(peer.spec.storage.size.clone()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// etcd's command line for a member (`member_id`: see [`data_dir`]).
pub fn etcd_args(
    peer: &str,
    names: &ClusterNames,
    bootstrap: &Bootstrap,
    member_id: Option<&str>,
) -> Vec<String> {
    let initial = bootstrap
        .initial_cluster
        .iter()
        .map(|m| format!("{}={}", m.name, m.peer_url))
        .collect::<Vec<_>>()
        .join(",");
    let state = match bootstrap.initial_cluster_state {
        InitialClusterState::New => "new",
        InitialClusterState::Existing => "existing",
    };
    vec![
        format!("--name={peer}"),
        format!("--data-dir={}", data_dir(member_id)),
        // Listen on the Pod's own address (from the downward API): no wildcard, so members
        // sharing a host network (the embedded node agent) never collide.
        format!("--listen-peer-urls=http://$(POD_IP):{PEER_PORT}"),
        format!("--listen-client-urls=http://$(POD_IP):{CLIENT_PORT}"),
        format!("--advertise-client-urls={}", names.client_url(peer)),
        format!("--initial-advertise-peer-urls={}", names.peer_url(peer)),
        format!("--initial-cluster={initial}"),
        format!("--initial-cluster-state={state}"),
        format!(
            "--initial-cluster-token={}",
            bootstrap.initial_cluster_token
        ),
        "--logger=zap".to_owned(),
    ]
}

/// The member's Pod, owned by its peer. `None` when the peer was never stored. A peer with
/// `spec.restore` that has not answered ready on its claim yet gets the restore's init
/// containers (`snapshot::restore_parts`); they are not part of the spec hash, so the Pod is
/// not replaced when the member no longer needs them.
pub fn pod(peer: &EtcdPeer, names: &ClusterNames) -> Option<Pod> {
    let name = peer.name_any();
    let overrides = &peer.spec.pod_template;
    let mut labels = overrides.labels.clone();
    labels.extend(pod_labels(&peer.spec.cluster_name, &name));
    let owner = peer.controller_owner_ref(&())?;
    let container = Container {
        name: "etcd".into(),
        image: Some(format!("{}:v{}", peer.spec.repository, peer.spec.version)),
        command: Some(vec!["etcd".into()]),
        args: Some(etcd_args(
            &name,
            names,
            &peer.spec.bootstrap,
            peer.spec.member_id.as_deref(),
        )),
        env: Some(vec![EnvVar {
            name: "POD_IP".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "status.podIP".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ports: Some(vec![
            ContainerPort {
                name: Some("client".into()),
                container_port: CLIENT_PORT,
                ..Default::default()
            },
            ContainerPort {
                name: Some("peer".into()),
                container_port: PEER_PORT,
                ..Default::default()
            },
        ]),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/health".into()),
                port: IntOrString::Int(CLIENT_PORT),
                ..Default::default()
            }),
            period_seconds: Some(2),
            timeout_seconds: Some(2),
            failure_threshold: Some(3),
            ..Default::default()
        }),
        resources: overrides.resources.clone(),
        volume_mounts: Some(vec![VolumeMount {
            name: "data".into(),
            mount_path: DATA_MOUNT.into(),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let spec = PodSpec {
        hostname: Some(name.clone()),
        subdomain: Some(peer.spec.cluster_name.clone()),
        containers: vec![container],
        volumes: Some(vec![Volume {
            name: "data".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(&name),
                read_only: None,
            }),
            ..Default::default()
        }]),
        affinity: overrides.affinity.clone(),
        tolerations: (!overrides.tolerations.is_empty()).then(|| overrides.tolerations.clone()),
        node_selector: (!overrides.node_selector.is_empty())
            .then(|| overrides.node_selector.clone()),
        restart_policy: Some("Always".into()),
        termination_grace_period_seconds: Some(30),
        enable_service_links: Some(false),
        ..Default::default()
    };
    let mut annotations = overrides.annotations.clone();
    let hash = spec_hash(&spec, &labels, &annotations);
    annotations.insert(SPEC_HASH.to_owned(), hash);
    let mut spec = spec;
    let answered = peer.status.as_ref().is_some_and(|s| s.claim_uid.is_some());
    if let Some(from) = peer.spec.restore.as_ref().filter(|_| !answered) {
        let (init, volumes) = crate::etcd::build::snapshot::restore_parts(peer, from, names);
        spec.init_containers = Some(init);
        spec.volumes.get_or_insert_with(Vec::new).extend(volumes);
    }
    Some(Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: peer.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// A stable hash (FNV-1a over the JSON form) of what Steward puts in a Pod: spec, labels and
/// annotations.
pub fn spec_hash(
    spec: &PodSpec,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> String {
    let text = serde_json::to_string(&(spec, labels, annotations)).unwrap_or_default();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_api::etcd::{EtcdClusterSpec, InitialMember};

    fn cluster() -> EtcdCluster {
        let mut c = EtcdCluster::new("demo", EtcdClusterSpec::new(3, "3.4.23"));
        c.metadata.namespace = Some("db".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    fn bootstrap() -> Bootstrap {
        let n = ClusterNames::new("demo", "db", "cluster.local");
        Bootstrap {
            initial_cluster: ["demo-0", "demo-1"]
                .iter()
                .map(|p| InitialMember {
                    name: (*p).into(),
                    peer_url: n.peer_url(p),
                })
                .collect(),
            initial_cluster_state: InitialClusterState::Existing,
            initial_cluster_token: "uid-1".into(),
        }
    }

    fn stored_peer() -> EtcdPeer {
        let mut p = peer(&cluster(), "demo-1", bootstrap(), Some("9".into()), None).unwrap();
        p.metadata.uid = Some("peer-uid".into());
        p
    }

    #[test]
    fn a_pod_runs_etcd_with_its_bootstrap_and_its_claim() {
        let names = ClusterNames::new("demo", "db", "cluster.local");
        let pod = pod(&stored_peer(), &names).unwrap();
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("demo-1"));
        assert_eq!(spec.subdomain.as_deref(), Some("demo"));
        let c = &spec.containers[0];
        assert_eq!(c.image.as_deref(), Some("quay.io/coreos/etcd:v3.4.23"));
        let args = c.args.clone().unwrap();
        assert!(args.contains(&"--initial-cluster-state=existing".to_owned()));
        assert!(args.contains(&"--initial-cluster=demo-0=http://demo-0.demo.db.svc.cluster.local:2380,demo-1=http://demo-1.demo.db.svc.cluster.local:2380".to_owned()));
        assert!(args.contains(&"--listen-client-urls=http://$(POD_IP):2379".to_owned()));
        assert!(args.contains(&"--data-dir=/var/lib/etcd/9".to_owned()));
        let claim_ref = spec.volumes.as_ref().unwrap()[0]
            .persistent_volume_claim
            .as_ref()
            .unwrap();
        assert_eq!(claim_ref.claim_name, "demo-1-data");
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["app.kubernetes.io/component"], "member");
        assert_eq!(labels[PEER_LABEL], "demo-1");
        assert_eq!(pod.metadata.owner_references.unwrap()[0].kind, "EtcdPeer");
    }

    #[test]
    fn the_hash_follows_the_spec_and_the_template() {
        let names = ClusterNames::new("demo", "db", "cluster.local");
        let a = pod(&stored_peer(), &names).unwrap();
        let b = pod(&stored_peer(), &names).unwrap();
        let hash = |p: &Pod| p.metadata.annotations.as_ref().unwrap()[SPEC_HASH].clone();
        assert_eq!(hash(&a), hash(&b));
        let mut newer = stored_peer();
        newer.spec.version = "3.4.24".into();
        assert_ne!(hash(&a), hash(&pod(&newer, &names).unwrap()));
        let mut annotated = stored_peer();
        annotated
            .spec
            .pod_template
            .annotations
            .insert("rollout".into(), "1".into());
        assert_ne!(hash(&a), hash(&pod(&annotated, &names).unwrap()));
    }

    #[test]
    fn a_restored_member_restores_only_until_it_answered_and_keeps_its_hash() {
        let names = ClusterNames::new("demo", "db", "cluster.local");
        let plain = pod(&stored_peer(), &names).unwrap();
        let mut restoring = stored_peer();
        restoring.spec.restore = Some(SnapshotFile {
            claim: "src-snapshots".into(),
            file: "nightly.db".into(),
        });
        let first = pod(&restoring, &names).unwrap();
        let spec = first.spec.as_ref().unwrap();
        let init = spec.init_containers.as_ref().unwrap();
        assert_eq!(init[0].name, "restore");
        let args = init[0].command.clone().unwrap();
        assert_eq!(
            args[..4],
            ["etcdctl", "snapshot", "restore", "/snapshot/nightly.db"]
        );
        assert!(args.contains(&"--name=demo-1".to_owned()));
        assert!(args.contains(&"--initial-cluster-token=uid-1".to_owned()));
        let script = init[1].command.clone().unwrap()[2].clone();
        assert!(script.contains("if [ -d '/var/lib/etcd/9' ]"), "{script}");
        assert!(spec.volumes.as_ref().unwrap().iter().any(|v| {
            v.persistent_volume_claim
                .as_ref()
                .is_some_and(|c| c.claim_name == "src-snapshots" && c.read_only == Some(true))
        }));
        let hash = |p: &Pod| p.metadata.annotations.as_ref().unwrap()[SPEC_HASH].clone();
        assert_eq!(
            hash(&first),
            hash(&plain),
            "the restore is not the member's identity"
        );
        restoring.status = Some(steward_api::etcd::EtcdPeerStatus {
            claim_uid: Some("claim-uid".into()),
            ..Default::default()
        });
        let later = pod(&restoring, &names).unwrap();
        assert!(later.spec.as_ref().unwrap().init_containers.is_none());
        assert_eq!(later.spec.unwrap().volumes.unwrap().len(), 1);
    }

    #[test]
    fn the_claim_has_no_owner_and_the_requested_size() {
        let c = claim(&stored_peer());
        assert_eq!(c.metadata.name.as_deref(), Some("demo-1-data"));
        assert!(c.metadata.owner_references.is_none());
        let req = c.spec.unwrap().resources.unwrap().requests.unwrap();
        assert_eq!(req["storage"].0, "1Gi");
    }

    #[test]
    fn the_data_dir_is_scoped_to_the_member() {
        assert_eq!(
            data_dir(Some("c41b8eafb6f5e8ba")),
            "/var/lib/etcd/c41b8eafb6f5e8ba"
        );
        assert_eq!(
            data_dir(None),
            "/var/lib/etcd/data",
            "peers of older versions"
        );
        assert_eq!(data_dir(Some("../x")), "/var/lib/etcd/data", "never a path");
        // A peer without a member ID keeps the command line (so the Pod spec) it had.
        let names = ClusterNames::new("demo", "db", "cluster.local");
        let mut old = stored_peer();
        old.spec.member_id = None;
        let args = pod(&old, &names).unwrap().spec.unwrap().containers[0]
            .args
            .clone()
            .unwrap();
        assert!(args.contains(&"--data-dir=/var/lib/etcd/data".to_owned()));
    }
}
