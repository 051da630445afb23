//! `EtcdCluster` (the cluster resource) and `EtcdPeer` (one member), after the etcd cluster
//! operator design: the etcd member list is the canonical view of membership.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CommonStatus, PodOverrides, StorageSpec, TimeoutOverrides};

/// An etcd cluster managed by Steward.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "steward.dev",
    version = "v1alpha1",
    kind = "EtcdCluster",
    plural = "etcdclusters",
    shortname = "etcd",
    shortname = "ec",
    namespaced,
    status = "EtcdClusterStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyMembers"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"Available\")].status"}"#,
    printcolumn = r#"{"name":"Operation","type":"string","jsonPath":".status.operation.kind"}"#,
    printcolumn = r#"{"name":"Progress","type":"string","jsonPath":".status.operation.progress"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(oldSelf.storage) || !has(oldSelf.storage.storageClassName) || (has(self.storage) && has(self.storage.storageClassName) && self.storage.storageClassName == oldSelf.storage.storageClassName)",
     "message": "storage.storageClassName is immutable"}
]))]
pub struct EtcdClusterSpec {
    /// Number of voting members. Odd numbers tolerate the most failures per member
    /// (3 tolerates 1, 5 tolerates 2).
    #[schemars(range(min = 1, max = 9))]
    pub replicas: i32,
    /// etcd version, `MAJOR.MINOR.PATCH`, e.g. `3.5.17`. Upgrades move one minor version at a
    /// time.
    #[schemars(regex(pattern = r"^3\.[0-9]+\.[0-9]+$"))]
    pub version: String,
    /// Container image repository; the tag is `v<version>`.
    #[serde(default = "default_etcd_repository")]
    pub repository: String,
    /// Storage of each member.
    #[serde(default)]
    pub storage: StorageSpec,
    /// Overrides applied to every member Pod.
    #[serde(default)]
    pub pod_template: PodOverrides,
    /// Per-cluster overrides of the operator's operation deadlines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<TimeoutOverrides>,
    /// Bootstrap the new cluster from a snapshot instead of empty: its first member restores
    /// the `EtcdBackup`'s snapshot (new cluster ID, same keys), the other members then join it.
    /// Only at creation; it never touches a running cluster. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "dataSource is immutable"}]))]
    pub data_source: Option<EtcdDataSource>,
}

/// Where a new etcd cluster's data comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdDataSource {
    /// A `Completed` `EtcdBackup` in the cluster's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub backup: String,
}

impl EtcdClusterSpec {
    /// A spec with `replicas` members of `version` and every other field defaulted.
    pub fn new(replicas: i32, version: impl Into<String>) -> Self {
        Self {
            replicas,
            version: version.into(),
            repository: default_etcd_repository(),
            storage: StorageSpec::default(),
            pod_template: PodOverrides::default(),
            timeouts: None,
            data_source: None,
        }
    }
}

/// The default etcd image repository.
pub fn default_etcd_repository() -> String {
    "quay.io/coreos/etcd".to_owned()
}

/// Observed state of an `EtcdCluster`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterStatus {
    /// Conditions, generations and the operation record.
    #[serde(flatten)]
    pub common: CommonStatus,
    /// Members as reported by the etcd member list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<EtcdMemberStatus>,
    /// Whether a majority of voting members is healthy. Absent when the cluster could not be
    /// reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorate: Option<bool>,
    /// Healthy voting members.
    #[serde(default)]
    pub ready_members: i32,
    /// Members in the member list (for the scale subresource).
    #[serde(default)]
    pub replicas: i32,
    /// Label selector of member Pods (for the scale subresource).
    #[serde(default)]
    pub selector: String,
    /// Cluster version reported by etcd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_version: Option<String>,
}

/// One etcd member.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdMemberStatus {
    /// Member name (equals its `EtcdPeer` name).
    pub name: String,
    /// Member ID in hex.
    pub id: String,
    /// Advertised peer URL.
    #[serde(default)]
    pub peer_url: String,
    /// Whether its endpoint answered a status request.
    #[serde(default)]
    pub healthy: bool,
    /// Whether it is a non-voting learner.
    #[serde(default)]
    pub learner: bool,
    /// Whether it is the leader.
    #[serde(default)]
    pub leader: bool,
    /// Server version it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// `new` for members that bootstrap the cluster together; `existing` for members that join it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InitialClusterState {
    /// Bootstrap a new cluster.
    New,
    /// Join an existing cluster.
    Existing,
}

/// A member of the initial cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitialMember {
    /// Member name.
    pub name: String,
    /// Its peer URL.
    pub peer_url: String,
}

/// How a peer bootstraps; always passed to etcd, which ignores it once a data dir exists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap {
    /// The members etcd should expect when it starts.
    pub initial_cluster: Vec<InitialMember>,
    /// `new` or `existing`.
    pub initial_cluster_state: InitialClusterState,
    /// Cluster token, so that two clusters never merge by mistake. Immutable.
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "initialClusterToken is immutable"}]))]
    pub initial_cluster_token: String,
}

/// One etcd member: its Pod, its storage and its network identity. Created and owned by an
/// `EtcdCluster`.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "steward.dev",
    version = "v1alpha1",
    kind = "EtcdPeer",
    plural = "etcdpeers",
    shortname = "etcdpeer",
    shortname = "ep",
    namespaced,
    status = "EtcdPeerStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterName"}"#,
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Member","type":"string","jsonPath":".status.memberId"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.version"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdPeerSpec {
    /// The `EtcdCluster` this peer belongs to. Immutable.
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "clusterName is immutable"}]))]
    pub cluster_name: String,
    /// Bootstrap instructions.
    pub bootstrap: Bootstrap,
    /// etcd version.
    pub version: String,
    /// Container image repository; the tag is `v<version>`.
    #[serde(default = "default_etcd_repository")]
    pub repository: String,
    /// Storage of this member.
    #[serde(default)]
    pub storage: StorageSpec,
    /// Pod overrides.
    #[serde(default)]
    pub pod_template: PodOverrides,
    /// The etcd member ID (hex) this peer runs, decided when the peer is created: the ID etcd
    /// assigned when the member was added, or for the members that bootstrap the cluster the
    /// ID etcd derives from the peer URL and the cluster token. The member keeps its data in
    /// `/var/lib/etcd/<memberId>` on its claim, so a later member of the same name on a
    /// retained claim never starts from a removed member's data. Absent on peers created by
    /// older Steward versions, which use `/var/lib/etcd/data`. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9a-f]{1,16}$"))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "memberId is immutable"}]))]
    pub member_id: Option<String>,
    /// The snapshot this member's data is restored from on its first start (the first member
    /// of a cluster with `spec.dataSource`). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "restore is immutable"}]))]
    pub restore: Option<SnapshotFile>,
}

/// A snapshot file on a claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotFile {
    /// The claim holding the snapshot.
    pub claim: String,
    /// The file's name in the claim's root.
    pub file: String,
}

/// A point-in-time snapshot of an etcd cluster's keyspace, taken once from a healthy member
/// with etcd's snapshot API and kept on a claim. Restore it with `spec.dataSource` on a new
/// `EtcdCluster`.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "steward.dev",
    version = "v1alpha1",
    kind = "EtcdBackup",
    plural = "etcdbackups",
    shortname = "etcdbackup",
    shortname = "eb",
    namespaced,
    status = "EtcdBackupStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.cluster"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Revision","type":"integer","jsonPath":".status.revision"}"#,
    printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".status.sizeBytes"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupSpec {
    /// The `EtcdCluster` to snapshot, in the same namespace. Immutable.
    #[schemars(length(min = 1, max = 63))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "cluster is immutable"}]))]
    pub cluster: String,
    /// Where the snapshot is kept.
    #[serde(default)]
    pub destination: SnapshotDestination,
    /// Completed snapshots of this cluster to keep, counting this one. When this backup
    /// completes, the cluster's older `Completed` `EtcdBackup`s beyond the count are deleted
    /// and their files removed from the claim. Absent: every snapshot is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub retain: Option<u32>,
}

/// Where a snapshot is written. Only a claim today (an S3-compatible bucket is not
/// implemented: `docs/technical_design.md`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotDestination {
    /// A PersistentVolumeClaim shared by the cluster's snapshots.
    #[serde(default)]
    pub claim: SnapshotClaim,
}

/// The claim snapshots are written to; created when missing, never deleted by Steward.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotClaim {
    /// The claim's name; `<cluster>-snapshots` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub name: Option<String>,
    /// Size requested when Steward creates the claim.
    #[serde(default = "default_snapshot_claim_size")]
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"))]
    pub size: String,
    /// StorageClass when Steward creates the claim; the cluster default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

fn default_snapshot_claim_size() -> String {
    "1Gi".to_owned()
}

impl Default for SnapshotClaim {
    fn default() -> Self {
        Self {
            name: None,
            size: default_snapshot_claim_size(),
            storage_class_name: None,
        }
    }
}

/// Where a snapshot is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SnapshotPhase {
    /// Waiting: for the cluster, a healthy member, or another snapshot of the cluster
    /// (`status.message` says which).
    Pending,
    /// The snapshot Job runs.
    Running,
    /// The snapshot is on the claim and was checked.
    Completed,
    /// The snapshot was not taken (`status.error` says why). A new snapshot is a new object.
    Failed,
}

/// What happened to a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupStatus {
    /// Conditions and generations.
    #[serde(flatten)]
    pub common: CommonStatus,
    /// Where the snapshot is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<SnapshotPhase>,
    /// What it waits for, or what it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The claim and file holding the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<SnapshotFile>,
    /// The member the snapshot was taken from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// The keyspace revision the snapshot holds (`etcdctl snapshot status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// The snapshot's hash (`etcdctl snapshot status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<i64>,
    /// Keys in the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_keys: Option<i64>,
    /// The snapshot's size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,
    /// When the Job was created (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// When the snapshot was taken or failed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    /// How long it took, e.g. `3s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// When a running snapshot is given up (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
}

/// Observed state of an `EtcdPeer`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdPeerStatus {
    /// The generation last reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Stable DNS name of the member.
    #[serde(default)]
    pub hostname: String,
    /// Member ID in hex, as the member last answered (kept while it does not answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_id: Option<String>,
    /// Whether the Pod is ready and the member answered.
    #[serde(default)]
    pub ready: bool,
    /// Server version it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// UID of the claim the member answered ready on. If that claim later disappears, is
    /// being deleted or is replaced by another claim of the same name, the member's data is
    /// gone: the peer reports `DataLost=True` and the member is replaced by a new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_uid: Option<String>,
    /// Conditions: `DataLost=True` once the member's data is known to be gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<crate::common::Condition>,
}
