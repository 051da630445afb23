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
