//! `CrateCluster`: a CrateDB cluster of master nodes and named data node sets, after the CrateDB
//! Kubernetes Operator's concepts (seeds 000 and 001): bootstrap (license, `system` user, users
//! over the PostgreSQL protocol), user passwords from labelled Secrets, a rolling restart with a
//! GREEN-health gate, and scaling in four ordered steps.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CommonStatus, PodOverrides, RetentionPolicy, TimeoutOverrides, UserStatus};

/// A CrateDB cluster managed by Steward.
///
/// It has several node sets (masters and each data set), so it has no scale subresource of its
/// own: `.spec.replicas` exists only so that `kubectl scale` gets a clear refusal naming
/// `spec.nodes`.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "steward.dev",
    version = "v1alpha1",
    kind = "CrateCluster",
    plural = "crateclusters",
    shortname = "crate",
    shortname = "cc",
    namespaced,
    status = "CrateClusterStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn = r#"{"name":"Masters","type":"integer","jsonPath":".spec.nodes.master.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyNodes"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.cluster.version"}"#,
    printcolumn = r#"{"name":"Health","type":"string","jsonPath":".status.health"}"#,
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"Available\")].status"}"#,
    printcolumn = r#"{"name":"Operation","type":"string","jsonPath":".status.operation.kind"}"#,
    printcolumn = r#"{"name":"Progress","type":"string","jsonPath":".status.operation.progress"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.replicas)",
     "message": "a CrateCluster has several node sets and cannot be scaled as one: set spec.nodes.master.replicas or spec.nodes.data[].replicas instead (kubectl edit or kubectl patch)"},
    {"rule": "self.cluster.name == oldSelf.cluster.name", "message": "spec.cluster.name is immutable"}
]))]
pub struct CrateClusterSpec {
    /// The cluster: name, version, image, license and settings for every node.
    pub cluster: CrateClusterConfig,
    /// The node sets: masters, then each data set.
    pub nodes: CrateNodes,
    /// CrateDB users, each created with `ALL` privileges and its password from a Secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<CrateUser>,
    /// The rolling restart's health gate (seed 001: GREEN three times, 30 s apart).
    #[serde(default)]
    pub restart: RestartGate,
    /// Overrides applied to every node Pod.
    #[serde(default)]
    pub pod_template: PodOverrides,
    /// Per-cluster overrides of the operator's operation deadlines (`bootstrapSeconds`,
    /// `scalingSeconds`, `restartSeconds`, `upgradeSeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<TimeoutOverrides>,
    /// Not a field to set: `kubectl scale` writes it, and validation refuses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

/// `spec.cluster`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CrateClusterConfig {
    /// `cluster.name` of every node. Immutable.
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$"))]
    pub name: String,
    /// CrateDB version, the image tag, e.g. `4.8.4`.
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]+\.[0-9]+$"))]
    pub version: String,
    /// Image repository; the image is `<imageRegistry>:<version>`.
    #[serde(default = "default_image_registry")]
    pub image_registry: String,
    /// The Enterprise license, set before the `system` user is created (CrateDB 4.x).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<SecretValue>,
    /// Settings passed to every node as `-C<key>=<value>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, String>,
}

/// The default image repository, `crate` (Docker Hub's official CrateDB image).
pub fn default_image_registry() -> String {
    "crate".to_owned()
}

/// A value held in a Secret of the cluster's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretValue {
    /// The Secret key.
    pub secret_key_ref: SecretKeySelector,
}

/// A key of a Secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecretKeySelector {
    /// Secret name.
    pub name: String,
    /// Key.
    pub key: String,
}

/// `spec.nodes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CrateNodes {
    /// Dedicated master nodes (master-eligible, no data). At least 3.
    pub master: MasterNodes,
    /// Data node sets, in order: scaling grows and shrinks them in this order, a rolling
    /// restart restarts them in this order.
    #[schemars(length(min = 1, max = 16))]
    pub data: Vec<DataNodes>,
}

/// The master node set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MasterNodes {
    /// Number of master nodes, at least 3 (seed 000: "with a minimum of 3 master nodes").
    #[schemars(range(min = 3, max = 9))]
    pub replicas: i32,
    /// Compute resources of each master.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Fraction of the memory limit given to the JVM heap (`CRATE_HEAP_SIZE`).
    #[serde(default = "default_heap_ratio")]
    pub heap_ratio: f64,
    /// The master's disk (cluster state only).
    #[serde(default = "default_master_disk")]
    pub disk: Disk,
    /// Settings for masters only, as `-C<key>=<value>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, String>,
}

/// One data node set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataNodes {
    /// Set name, e.g. `hot`; the StatefulSet is `crate-data-<name>-<cluster>` and each node
    /// carries the attribute `node.attr.node_name=<name>`.
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]{0,14}[a-z0-9])?$"))]
    pub name: String,
    /// Number of data nodes of the set.
    #[schemars(range(min = 1, max = 64))]
    pub replicas: i32,
    /// Compute resources of each node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Fraction of the memory limit given to the JVM heap (`CRATE_HEAP_SIZE`).
    #[serde(default = "default_heap_ratio")]
    pub heap_ratio: f64,
    /// Disks of each node.
    #[serde(default = "default_data_disk")]
    pub disk: Disk,
    /// Settings for this set only, as `-C<key>=<value>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, String>,
}

/// Disks of each node: `count` claims of `size`, mounted at `/data/data<i>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disk {
    /// Number of disks.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 8))]
    pub count: i32,
    /// Size of each, e.g. `16Gi`.
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"))]
    pub size: String,
    /// StorageClass; the cluster default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
    /// What happens to a removed node's claims on scale-down (`Retain` by default).
    #[serde(default)]
    pub retain_on_scale_down: RetentionPolicy,
    /// What happens to the claims when the cluster is deleted (`Retain` by default).
    #[serde(default)]
    pub retain_on_delete: RetentionPolicy,
}

fn one() -> i32 {
    1
}

fn default_heap_ratio() -> f64 {
    0.25
}

fn default_master_disk() -> Disk {
    Disk {
        count: 1,
        size: "1Gi".to_owned(),
        storage_class: None,
        retain_on_scale_down: RetentionPolicy::Retain,
        retain_on_delete: RetentionPolicy::Retain,
    }
}

fn default_data_disk() -> Disk {
    Disk {
        size: "16Gi".to_owned(),
        ..default_master_disk()
    }
}

/// A CrateDB user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CrateUser {
    /// User name. `crate` and `system` are reserved.
    #[schemars(regex(pattern = r"^[a-zA-Z_][a-zA-Z0-9_]{0,62}$"))]
    pub name: String,
    /// Its password. Steward labels the Secret `steward.dev/user-password` and follows it.
    pub password: SecretValue,
}

/// The rolling restart's gate: a restarted node is back once the cluster reports GREEN health
/// `greenReadings` times in a row, `greenIntervalSeconds` apart (seed 001's 3 and 30 s).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestartGate {
    /// GREEN readings in a row.
    #[serde(default = "default_green_readings")]
    #[schemars(range(min = 1, max = 10))]
    pub green_readings: u32,
    /// Seconds between readings.
    #[serde(default = "default_green_interval")]
    #[schemars(range(min = 0, max = 600))]
    pub green_interval_seconds: u64,
}

fn default_green_readings() -> u32 {
    3
}

fn default_green_interval() -> u64 {
    30
}

impl Default for RestartGate {
    fn default() -> Self {
        Self {
            green_readings: default_green_readings(),
            green_interval_seconds: default_green_interval(),
        }
    }
}

/// Observed state of a `CrateCluster`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CrateClusterStatus {
    /// Conditions, generations and the operation record.
    #[serde(flatten)]
    pub common: CommonStatus,
    /// Cluster health as CrateDB reports it (`GREEN`, `YELLOW`, `RED`); absent when the cluster
    /// could not be reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// The elected master node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master_node: Option<String>,
    /// Nodes in the CrateDB cluster.
    #[serde(default)]
    pub ready_nodes: i32,
    /// Node sets: wanted and ready nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_sets: Vec<NodeSetStatus>,
    /// What bootstrap has done; kept so that a restarted operator continues.
    #[serde(default)]
    pub bootstrap: BootstrapStatus,
    /// Users and whether their password is in step with their Secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<UserStatus>,
    /// Scale progress, while a scale operation runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<ScaleProgress>,
    /// Restart progress, while a restart or upgrade runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartProgress>,
    /// The image the nodes run (`<registry>:<version>`), once rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The `steward.dev/restarted-at` annotation of `spec.podTemplate` last rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarted_at: Option<String>,
    /// Always 0; for the refusing scale subresource.
    #[serde(default)]
    pub replicas: i32,
    /// Label selector of node Pods.
    #[serde(default)]
    pub selector: String,
}

/// One node set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSetStatus {
    /// `master` or the data set's name.
    pub name: String,
    /// The StatefulSet's replicas.
    pub replicas: i32,
    /// Ready Pods.
    pub ready: i32,
}

/// Bootstrap progress (seed 000's order: license, `system` user, users).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapStatus {
    /// The license was set (or none is configured).
    #[serde(default)]
    pub license: bool,
    /// The `system` user exists with `ALL` privileges.
    #[serde(default)]
    pub system_user: bool,
    /// Bootstrap finished: every user of the spec was created.
    #[serde(default)]
    pub done: bool,
}

/// Where a scale operation is (seed 000's four steps).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleProgress {
    /// 1 masters, 2 growing data sets, 3 shrinking data sets, 4 reset allocations and
    /// acknowledge node check 1.
    pub step: u32,
    /// Nodes whose shards are being moved away (`cluster.routing.allocation.exclude._name`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<String>,
}

/// Where a rolling restart is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestartProgress {
    /// Pods restarted so far, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restarted: Vec<String>,
    /// The Pod being restarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// UID of the Pod that was deleted; the restart waits for a Pod with another UID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_uid: Option<String>,
    /// GREEN readings in a row since the new Pod joined.
    #[serde(default)]
    pub green_readings: u32,
    /// When the last GREEN reading was taken (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reading: Option<String>,
    /// The image this restart rolls out (recorded when it started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The `steward.dev/restarted-at` request this restart carries out (recorded when it
    /// started); a newer request made meanwhile gets a restart of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarted_at: Option<String>,
}
