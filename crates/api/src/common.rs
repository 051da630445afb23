//! Status and spec types shared by every engine: conditions, generations, the operation record,
//! per-cluster timeout overrides and pod overrides.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements, Toleration};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Standard condition types every Steward kind reports.
pub mod condition_types {
    /// The database serves clients.
    pub const AVAILABLE: &str = "Available";
    /// The operator is moving the cluster towards its spec.
    pub const PROGRESSING: &str = "Progressing";
    /// Something needs attention: invalid spec, failed operation, unreachable database.
    pub const DEGRADED: &str = "Degraded";
}

/// A status condition, shaped like `metav1.Condition`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type, e.g. `Available`, `Progressing`, `Degraded`, `Quorate`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// A machine-readable CamelCase reason.
    pub reason: String,
    /// A human-readable message.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed (RFC 3339). Kept when only the reason or message changes.
    pub last_transition_time: String,
    /// The `metadata.generation` this condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// How far reconciliation of each spec generation has got (the FoundationDB model). Each field
/// holds the `metadata.generation` it refers to; a rollout is complete when `reconciled` equals
/// `metadata.generation`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Generations {
    /// The last generation for which every step converged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciled: Option<i64>,
    /// Set while the cluster is being bootstrapped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_bootstrap: Option<i64>,
    /// Set while the member count differs from the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_scale: Option<i64>,
    /// Set while members run another version than the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_upgrade: Option<i64>,
    /// Set while members run with a stale configuration and must be restarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_restart: Option<i64>,
    /// Set while children (Services, Pods, PVCs...) differ from the desired state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_child_update: Option<i64>,
    /// Set while members are unhealthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_unhealthy_members: Option<i64>,
    /// Set while removed members' resources are still being torn down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_pending_removal: Option<i64>,
    /// Set when the spec is invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_invalid_spec: Option<i64>,
    /// FoundationDB: processes must be bounced (incorrect command line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_bounce: Option<i64>,
    /// FoundationDB: process groups must be removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_shrink: Option<i64>,
    /// FoundationDB: process groups must be added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_grow: Option<i64>,
    /// FoundationDB: the database configuration differs from the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_configuration_change: Option<i64>,
    /// FoundationDB: the coordinators must change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_coordinator_change: Option<i64>,
    /// FoundationDB: Pods must be recreated (incorrect Pod spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_pod_deletion: Option<i64>,
    /// FoundationDB: a process group has a failure condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_unhealthy_process: Option<i64>,
    /// FoundationDB: the machine-readable status could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_database_status: Option<i64>,
    /// FoundationDB: a step waits for the global lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_lock: Option<i64>,
    /// FoundationDB backups: the agents' Deployment must change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_backup_agent_update: Option<i64>,
    /// FoundationDB backups: the backup must be started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_backup_start: Option<i64>,
    /// FoundationDB backups: the backup must be stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_backup_stop: Option<i64>,
    /// FoundationDB backups: the backup must be paused or resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_backup_pause_toggle: Option<i64>,
    /// FoundationDB backups: the snapshot period must change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_backup_modification: Option<i64>,
}

/// The kind of long-running operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum OperationKind {
    /// First start of a cluster.
    Bootstrap,
    /// Adding or removing members.
    Scale,
    /// Rolling restart.
    Restart,
    /// Version or image change.
    Upgrade,
    /// Automatic or manual promotion of a new primary.
    Failover,
    /// Taking a backup.
    Backup,
    /// Restoring from a backup.
    Restore,
    /// Replacing members that lost their data: each is removed and a new member is added in
    /// its place.
    Recover,
}

impl OperationKind {
    /// Every kind, in declaration order.
    pub const ALL: [OperationKind; 8] = [
        Self::Bootstrap,
        Self::Scale,
        Self::Restart,
        Self::Upgrade,
        Self::Failover,
        Self::Backup,
        Self::Restore,
        Self::Recover,
    ];

    /// The lowercase name used in metric labels and webhooks.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bootstrap => "bootstrap",
            Self::Scale => "scale",
            Self::Restart => "restart",
            Self::Upgrade => "upgrade",
            Self::Failover => "failover",
            Self::Backup => "backup",
            Self::Restore => "restore",
            Self::Recover => "recover",
        }
    }
}

/// Where an operation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum OperationPhase {
    /// In progress.
    Running,
    /// Finished successfully.
    Succeeded,
    /// Failed or timed out; destructive steps stay blocked until the spec changes.
    Failed,
}

/// What an operation changes, kept so that its notifications report old and new values.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationChange {
    /// Member counts before, by node group (e.g. `members`, `instances`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub old_replicas: Vec<GroupReplicas>,
    /// Member counts after, by node group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub new_replicas: Vec<GroupReplicas>,
    /// Master (voting, data-less) count before, for engines that have masters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_master_replicas: Option<i32>,
    /// Master count after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_master_replicas: Option<i32>,
    /// Image registry before an upgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_registry: Option<String>,
    /// Image registry after an upgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_registry: Option<String>,
    /// Version before an upgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_version: Option<String>,
    /// Version after an upgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_version: Option<String>,
    /// The primary a fail-over or switchover replaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_primary: Option<String>,
    /// The primary it promotes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_primary: Option<String>,
    /// Set on a failed operation that was undone (the cluster runs as before it started): it
    /// does not block later operations of the same spec generation, as a failure that left
    /// something changed does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back: Option<bool>,
    /// Whether it is a graceful switchover (the old primary was healthy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switchover: Option<bool>,
    /// The `PostgresBackup` a backup operation runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
    /// Its type (`full`, `diff`, `incr`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_type: Option<String>,
    /// The label pgBackRest gave it, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_label: Option<String>,
}

/// A node group and its replica count.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GroupReplicas {
    /// Group name.
    pub name: String,
    /// Replica count.
    pub replicas: i32,
}

/// A long-running operation, recorded in status so that a restarted operator continues where it
/// left off and enforces the deadline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    /// What kind of operation this is.
    pub kind: OperationKind,
    /// Running, Succeeded or Failed.
    pub phase: OperationPhase,
    /// The `metadata.generation` that started it.
    pub generation: i64,
    /// The current step, e.g. `AddMember`.
    #[serde(default)]
    pub step: String,
    /// Units of work done.
    pub done: u32,
    /// Units of work in total.
    pub total: u32,
    /// `done/total`, for printer columns.
    pub progress: String,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// When it fails if not finished (RFC 3339).
    pub deadline: String,
    /// When it finished (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// The last thing that happened.
    #[serde(default)]
    pub message: String,
    /// Old and new values, for notifications.
    #[serde(default)]
    pub change: OperationChange,
}

/// The status fields every Steward cluster kind shares. Engines flatten it into their status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommonStatus {
    /// The `metadata.generation` the status was last computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard and engine-specific conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Reconciliation progress by generation.
    #[serde(default)]
    pub generations: Generations,
    /// The operation in progress, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<Operation>,
    /// The last finished operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<Operation>,
}

/// Per-cluster overrides of the operator's operation deadlines, in seconds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeoutOverrides {
    /// Bootstrap deadline (operator default: `BOOTSTRAP_TIMEOUT`, 1800 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub bootstrap_seconds: Option<u64>,
    /// Scale deadline, also for replacing a member that lost its data (operator default:
    /// `SCALING_TIMEOUT`, 3600 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub scaling_seconds: Option<u64>,
    /// Rolling restart deadline (operator default: `RESTART_TIMEOUT`, 3600 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub restart_seconds: Option<u64>,
    /// Upgrade deadline (operator default: `UPGRADE_TIMEOUT`, 3600 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub upgrade_seconds: Option<u64>,
    /// Fail-over deadline (operator default: `FAILOVER_TIMEOUT`, 600 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub failover_seconds: Option<u64>,
    /// Backup and restore deadline (operator default: `BACKUP_TIMEOUT`, 3600 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub backup_seconds: Option<u64>,
}

/// What happens to a member's PersistentVolumeClaim when the member goes away.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RetentionPolicy {
    /// Keep the claim (and its data); a later member with the same name reuses it.
    #[default]
    Retain,
    /// Delete the claim once the member is gone.
    Delete,
}

/// Storage of each member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// Requested size of each member's volume, e.g. `1Gi`.
    #[serde(default = "default_storage_size")]
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"))]
    pub size: String,
    /// StorageClass of the claims; the cluster default when empty. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// What happens to a removed member's claim on scale-down.
    #[serde(default)]
    pub retain_on_scale_down: RetentionPolicy,
    /// What happens to the claims when the cluster is deleted.
    #[serde(default)]
    pub retain_on_delete: RetentionPolicy,
}

fn default_storage_size() -> String {
    "1Gi".to_owned()
}

impl Default for StorageSpec {
    fn default() -> Self {
        Self {
            size: default_storage_size(),
            storage_class_name: None,
            retain_on_scale_down: RetentionPolicy::Retain,
            retain_on_delete: RetentionPolicy::Retain,
        }
    }
}

/// Overrides applied to every member Pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodOverrides {
    /// Compute resources of the database container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Scheduling affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Tolerations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Node selector.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Extra annotations on member Pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Extra labels on member Pods (Steward's own labels win on conflict).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// One database user of a cluster (PostgreSQL role, CrateDB user).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserStatus {
    /// Role name.
    pub name: String,
    /// The Secret holding its password.
    pub secret: String,
    /// The role exists and its password matches the Secret.
    #[serde(default)]
    pub ready: bool,
    /// The Secret's `resourceVersion` last handled: its password is in the database (`ready`),
    /// or applying it failed for the reason in `message` and is not retried until the Secret
    /// changes again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_version: Option<String>,
    /// Why the user is not ready.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}
