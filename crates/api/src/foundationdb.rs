//! `FoundationDBCluster`: a FoundationDB cluster of process groups (one Pod each), after the
//! FoundationDB Kubernetes Operator's technical design (seed 002): the cluster reconciler's
//! subreconcilers in order, status generations, the global lock and its deny list, exclusions
//! before removal, coordinators spread over fault domains. Steward runs the unified image
//! (`fdb-kubernetes-monitor`); on these machines a stand-in answers for it
//! (`docs/foundationdb-standin.md`).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CommonStatus, PodOverrides, StorageSpec, TimeoutOverrides};

/// A FoundationDB cluster managed by Steward.
///
/// It has several process classes, so it has no scale subresource: scale a class with
/// `spec.processCounts.<class>`.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "steward.dev",
    version = "v1alpha1",
    kind = "FoundationDBCluster",
    plural = "foundationdbclusters",
    shortname = "fdb",
    namespaced,
    status = "FoundationDBClusterStatus",
    printcolumn = r#"{"name":"Generation","type":"integer","jsonPath":".metadata.generation"}"#,
    printcolumn = r#"{"name":"Reconciled","type":"integer","jsonPath":".status.generations.reconciled"}"#,
    printcolumn = r#"{"name":"Available","type":"boolean","jsonPath":".status.health.available"}"#,
    printcolumn = r#"{"name":"FullReplication","type":"boolean","jsonPath":".status.health.fullReplication"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.runningVersion"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.databaseConfiguration.redundancyMode != 'double' || self.processCounts.storage >= 2",
     "message": "redundancyMode double needs processCounts.storage of at least 2"},
    {"rule": "self.databaseConfiguration.redundancyMode != 'triple' || self.processCounts.storage >= 3",
     "message": "redundancyMode triple needs processCounts.storage of at least 3"},
    {"rule": "!has(self.processGroupIDPrefix) || !has(oldSelf.processGroupIDPrefix) || self.processGroupIDPrefix == oldSelf.processGroupIDPrefix",
     "message": "spec.processGroupIDPrefix is immutable"}
]))]
pub struct FoundationDBClusterSpec {
    /// FoundationDB version the processes run, e.g. `7.1.57`. A change with another major or
    /// minor version is an upgrade that restarts every process together.
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]+\.[0-9]+$"))]
    pub version: String,
    /// Image repository of the unified image; the image is `<image>:<version>`.
    #[serde(default = "default_image")]
    pub image: String,
    /// The database configuration set with `configure`.
    #[serde(default)]
    pub database_configuration: DatabaseConfiguration,
    /// Process groups (Pods) per process class.
    #[serde(default)]
    pub process_counts: ProcessCounts,
    /// The fault domain: each process group's zone is the value of this Node label of its
    /// Node (`kubernetes.io/hostname` by default).
    #[serde(default)]
    pub fault_domain: FaultDomain,
    /// Process groups to remove (excluded first, then their resources deleted); a
    /// replacement is added for each.
    #[serde(
        default,
        rename = "processGroupsToRemove",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub process_groups_to_remove: Vec<String>,
    /// Process groups to remove without excluding them first (their data is lost to the
    /// cluster; use only for processes that are already gone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub process_groups_to_remove_without_exclusion: Vec<String>,
    /// The global lock (seed 002, "Locking Operations").
    #[serde(default)]
    pub lock_options: LockOptions,
    /// Automatic replacement of failed process groups.
    #[serde(default)]
    pub automation_options: AutomationOptions,
    /// A process is bounced only once every process has been up this long.
    #[serde(default = "default_minimum_uptime")]
    #[schemars(range(min = 0, max = 86400))]
    pub minimum_uptime_seconds_for_bounce: u32,
    /// Exclude by `locality_instance_id` instead of by address.
    #[serde(default)]
    pub use_localities_for_exclusion: bool,
    /// The connection string to start from, instead of choosing coordinators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_connection_string: Option<String>,
    /// Skip the client compatibility check before an upgrade.
    #[serde(default)]
    pub ignore_upgradability_checks: bool,
    /// Buggification (fault injection) options.
    #[serde(default)]
    pub buggify: Buggify,
    /// Prefix of process group IDs and the lock ID (default: the cluster's name). Immutable.
    #[serde(
        default,
        rename = "processGroupIDPrefix",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$"))]
    pub process_group_id_prefix: Option<String>,
    /// Extra `fdbserver` parameters for every process, e.g. `knob_max_trace_lines=1000`
    /// (`--` is added). A change bounces the processes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub custom_parameters: Vec<String>,
    /// Each stateful process group's claim.
    #[serde(default)]
    pub storage: StorageSpec,
    /// Overrides applied to every Pod. Its `labels` and `annotations` are kept up to date on
    /// the existing Pods in place (UpdateLabels), without recreating them; a key removed from
    /// the spec stays on the Pods until removed by hand (seed 002). The other fields, and the
    /// restart trigger `steward.dev/restarted-at`, recreate the Pods one fault domain at a time.
    #[serde(default)]
    pub pod_template: PodOverrides,
    /// How the processes are reached: the optional headless Service.
    #[serde(default)]
    pub routing: Routing,
    /// Per-cluster overrides of the operator's operation deadlines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<TimeoutOverrides>,
}

/// The default image repository of the unified image.
pub fn default_image() -> String {
    "foundationdb/fdb-kubernetes-monitor".to_owned()
}

fn default_minimum_uptime() -> u32 {
    600
}

/// `spec.routing`: which Services the cluster has (seed 002, "AddServices"). By default none:
/// clients and processes reach each process at its Pod's IP, which the cluster file carries.
/// FoundationDB's `publicIPSource: service` (a Service per process group, its address the
/// process's public address) is not implemented.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Routing {
    /// Create a headless Service named like the cluster that selects all its Pods, ready or
    /// not (DNS names for the Pods, e.g. for monitoring). Set back to `false`, the Service is
    /// deleted. A Service of that name that Steward did not create is never taken over or
    /// deleted: the cluster is marked degraded instead.
    #[serde(default)]
    pub headless_service: bool,
}

/// `spec.databaseConfiguration`: what `configure` sets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseConfiguration {
    /// Replication of data and of the transaction logs.
    #[serde(default)]
    pub redundancy_mode: RedundancyMode,
    /// The storage engine.
    #[serde(default)]
    pub storage_engine: StorageEngine,
    /// Transaction logs wanted (`logs=`); FoundationDB's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 32))]
    pub logs: Option<u32>,
    /// Commit proxies (`commit_proxies=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 32))]
    pub commit_proxies: Option<u32>,
    /// GRV proxies (`grv_proxies=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 32))]
    pub grv_proxies: Option<u32>,
    /// Resolvers (`resolvers=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 32))]
    pub resolvers: Option<u32>,
}

impl Default for DatabaseConfiguration {
    fn default() -> Self {
        Self {
            redundancy_mode: RedundancyMode::Double,
            storage_engine: StorageEngine::Ssd2,
            logs: None,
            commit_proxies: None,
            grv_proxies: None,
            resolvers: None,
        }
    }
}

/// Redundancy modes (FoundationDB "Configuration": single, double, triple).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RedundancyMode {
    /// One copy.
    Single,
    /// Two copies in two zones.
    #[default]
    Double,
    /// Three copies in three zones.
    Triple,
}

impl RedundancyMode {
    /// The replication factor R.
    pub fn replication(self) -> usize {
        match self {
            Self::Single => 1,
            Self::Double => 2,
            Self::Triple => 3,
        }
    }

    /// The name `configure` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Double => "double",
            Self::Triple => "triple",
        }
    }
}

/// Storage engines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StorageEngine {
    /// `ssd-2` (the B-tree engine).
    #[default]
    #[serde(rename = "ssd-2")]
    Ssd2,
    /// `ssd` (an alias of ssd-2 in older versions).
    #[serde(rename = "ssd")]
    Ssd,
    /// `memory`.
    #[serde(rename = "memory")]
    Memory,
    /// `ssd-redwood-1`.
    #[serde(rename = "ssd-redwood-1")]
    Redwood,
}

impl StorageEngine {
    /// The name `configure` takes and status reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ssd2 => "ssd-2",
            Self::Ssd => "ssd",
            Self::Memory => "memory",
            Self::Redwood => "ssd-redwood-1",
        }
    }
}

/// `spec.processCounts`: process groups (Pods) per process class.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessCounts {
    /// Storage processes (stateful: a claim each).
    #[serde(default = "default_storage")]
    #[schemars(range(min = 1, max = 1000))]
    pub storage: u32,
    /// Log processes (stateful); at least the redundancy mode's copies.
    #[serde(default = "default_log")]
    #[schemars(range(min = 1, max = 1000))]
    pub log: u32,
    /// Stateless processes (proxies, resolvers, cluster controller).
    #[serde(default = "default_stateless")]
    #[schemars(range(min = 0, max = 1000))]
    pub stateless: u32,
}

fn default_storage() -> u32 {
    3
}
fn default_log() -> u32 {
    2
}
fn default_stateless() -> u32 {
    1
}

impl Default for ProcessCounts {
    fn default() -> Self {
        Self {
            storage: default_storage(),
            log: default_log(),
            stateless: default_stateless(),
        }
    }
}

/// `spec.faultDomain`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FaultDomain {
    /// The Node label whose value is a process group's zone (`locality_zoneid`).
    #[serde(default = "default_zone_key")]
    pub key: String,
}

fn default_zone_key() -> String {
    "kubernetes.io/hostname".to_owned()
}

impl Default for FaultDomain {
    fn default() -> Self {
        Self {
            key: default_zone_key(),
        }
    }
}

/// `spec.lockOptions`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LockOptions {
    /// Take no lock (for a database that is unavailable; most locked steps are then unsafe).
    #[serde(default)]
    pub disable_locks: bool,
    /// How long a lock lasts before it expires.
    #[serde(default = "default_lock_minutes")]
    #[schemars(range(min = 1, max = 1440))]
    pub lock_duration_minutes: u32,
    /// Operator instances (lock IDs) refused the lock, or allowed again with `allow: true`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_list: Vec<LockDenyListEntry>,
}

fn default_lock_minutes() -> u32 {
    10
}

impl Default for LockOptions {
    fn default() -> Self {
        Self {
            disable_locks: false,
            lock_duration_minutes: default_lock_minutes(),
            deny_list: Vec::new(),
        }
    }
}

/// One entry of the deny list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LockDenyListEntry {
    /// The lock ID (an instance's `processGroupIDPrefix`).
    pub id: String,
    /// `true` removes the entry from the database's deny list.
    #[serde(default)]
    pub allow: bool,
}

/// `spec.automationOptions`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutomationOptions {
    /// Automatic replacements of failed process groups.
    #[serde(default)]
    pub replacements: Replacements,
}

/// `spec.automationOptions.replacements`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Replacements {
    /// Replace process groups that have failed for `failureDetectionTimeSeconds`.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// How long a process group must have failed before it is replaced.
    #[serde(default = "default_failure_detection")]
    #[schemars(range(min = 1))]
    pub failure_detection_time_seconds: u32,
    /// At most this many process groups are being replaced at once.
    #[serde(default = "default_max_replacements")]
    #[schemars(range(min = 0, max = 100))]
    pub max_concurrent_replacements: u32,
}

fn yes() -> bool {
    true
}
fn default_failure_detection() -> u32 {
    7200
}
fn default_max_replacements() -> u32 {
    1
}

impl Default for Replacements {
    fn default() -> Self {
        Self {
            enabled: true,
            failure_detection_time_seconds: default_failure_detection(),
            max_concurrent_replacements: default_max_replacements(),
        }
    }
}

/// `spec.buggify`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Buggify {
    /// Process groups whose processes are not started (their Pods wait instead).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crash_loop: Vec<String>,
    /// Process groups whose Pods are not scheduled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub no_schedule: Vec<String>,
}

/// Process classes.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ProcessClass {
    /// Storage servers.
    Storage,
    /// Transaction logs.
    Log,
    /// Stateless roles.
    Stateless,
}

impl ProcessClass {
    /// Every class, in the order process groups are listed.
    pub const ALL: [ProcessClass; 3] = [Self::Storage, Self::Log, Self::Stateless];

    /// The name `--class` takes and status reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Storage => "storage",
            Self::Log => "log",
            Self::Stateless => "stateless",
        }
    }

    /// Whether its processes keep data on a claim.
    pub fn is_stateful(self) -> bool {
        matches!(self, Self::Storage | Self::Log)
    }
}

/// Observed state of a `FoundationDBCluster`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FoundationDBClusterStatus {
    /// Conditions, generations and the operation record.
    #[serde(flatten)]
    pub common: CommonStatus,
    /// Every process group, with its conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub process_groups: Vec<ProcessGroupStatus>,
    /// The cluster file's content (`description:id@coordinators`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_string: Option<String>,
    /// `configure new` has been run (or a configuration was found); never run again.
    #[serde(default)]
    pub configured: bool,
    /// The version the processes run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_version: Option<String>,
    /// The live database configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database_configuration: Option<DatabaseConfiguration>,
    /// Health from the machine-readable status.
    #[serde(default)]
    pub health: ClusterHealth,
    /// The lock ID holding the global lock, and until when (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_holder: Option<String>,
    /// The lock's expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_expires: Option<String>,
}

/// `status.health`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterHealth {
    /// The database is available to clients.
    #[serde(default)]
    pub available: bool,
    /// The database reports itself healthy.
    #[serde(default)]
    pub healthy: bool,
    /// Every piece of data has all its replicas.
    #[serde(default)]
    pub full_replication: bool,
    /// Bytes of data being moved.
    #[serde(default)]
    pub data_moving_bytes: u64,
}

/// One process group: one Pod (and claim) with one `fdbserver` process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessGroupStatus {
    /// `<prefix>-<class>-<n>`.
    #[serde(rename = "processGroupID")]
    pub process_group_id: String,
    /// The process class.
    pub process_class: Option<ProcessClass>,
    /// Its process's addresses (`IP`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// Its zone (`locality_zoneid`), once its Pod was placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_domain: Option<String>,
    /// When it was marked for removal (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removal_timestamp: Option<String>,
    /// When its exclusion was seen complete (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusion_timestamp: Option<String>,
    /// Removed without exclusion.
    #[serde(default)]
    pub exclusion_skipped: bool,
    /// Its conditions, each since when.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ProcessGroupCondition>,
}

/// A process group condition (FoundationDB's `ProcessGroupConditionType`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessGroupCondition {
    /// `MissingProcesses`, `MissingPod`, `MissingPVC`, `IncorrectCommandLine`,
    /// `IncorrectPodSpec`, `IncorrectConfigMap`, `PodFailing`, `PodPending`,
    /// `ProcessIsMarkedAsExcluded`, `ResourcesTerminating`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Unix seconds since when.
    pub timestamp: i64,
}

/// A continuous backup of a `FoundationDBCluster` (seed 002, "Backup Reconciliation"): backup
/// agents in a Deployment write it to a directory on a claim (`file://` backup URL), and the
/// backup is started, paused, resumed, modified and stopped as `backupState` says.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "steward.dev",
    version = "v1alpha1",
    kind = "FoundationDBBackup",
    plural = "foundationdbbackups",
    shortname = "fdbbackup",
    namespaced,
    status = "FoundationDBBackupStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterName"}"#,
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".spec.backupState"}"#,
    printcolumn = r#"{"name":"Running","type":"boolean","jsonPath":".status.backupDetails.running"}"#,
    printcolumn = r#"{"name":"Restorable","type":"boolean","jsonPath":".status.backupDetails.restorable"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.clusterName == oldSelf.clusterName", "message": "spec.clusterName is immutable"}
]))]
pub struct FoundationDBBackupSpec {
    /// The `FoundationDBCluster` (same namespace) to back up.
    pub cluster_name: String,
    /// The version of the backup agents (default: the cluster's `spec.version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]+\.[0-9]+$"))]
    pub version: Option<String>,
    /// `Running` (the default), `Paused` (configured, agents idle) or `Stopped`.
    #[serde(default)]
    pub backup_state: BackupState,
    /// Backup agents to run.
    #[serde(default = "default_agents")]
    #[schemars(range(min = 0, max = 10))]
    pub agent_count: u32,
    /// Seconds between snapshots (default 864,000: ten days, as FoundationDB's).
    #[serde(default = "default_snapshot_period")]
    #[schemars(range(min = 1))]
    pub snapshot_period_seconds: u32,
    /// The claim the backup is written to (mounted by every agent; on a cluster with
    /// node-local volumes the agents run on its Node).
    #[serde(default)]
    pub storage: StorageSpec,
}

fn default_agents() -> u32 {
    1
}
fn default_snapshot_period() -> u32 {
    864_000
}

/// `spec.backupState`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum BackupState {
    /// The backup runs.
    #[default]
    Running,
    /// The backup is configured; its agents do no work.
    Paused,
    /// No backup runs.
    Stopped,
}

/// Observed state of a `FoundationDBBackup`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FoundationDBBackupStatus {
    /// Conditions, generations and the operation record.
    #[serde(flatten)]
    pub common: CommonStatus,
    /// Backup agents ready and up to date.
    #[serde(default)]
    pub agent_count: i32,
    /// The agents' Deployment is as the spec asks.
    #[serde(default)]
    pub deployment_configured: bool,
    /// The backup as `fdbbackup status` reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_details: Option<BackupDetails>,
}

/// `status.backupDetails`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupDetails {
    /// The backup URL (`file://…`).
    #[serde(default)]
    pub url: String,
    /// The backup runs.
    #[serde(default)]
    pub running: bool,
    /// The backup agents are paused.
    #[serde(default)]
    pub paused: bool,
    /// Seconds between snapshots.
    #[serde(default)]
    pub snapshot_time: i64,
    /// The backup can be restored.
    #[serde(default)]
    pub restorable: bool,
    /// The newest version a restore can reach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_restorable_version: Option<u64>,
    /// FoundationDB's name of the backup's state.
    #[serde(default)]
    pub state: String,
}

/// A restore of a `FoundationDBBackup` into its cluster (seed 002, "Restore Reconciliation"):
/// started once with `fdbrestore start`; the destination's normal key range must be empty.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "steward.dev",
    version = "v1alpha1",
    kind = "FoundationDBRestore",
    plural = "foundationdbrestores",
    shortname = "fdbrestore",
    namespaced,
    status = "FoundationDBRestoreStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.destinationClusterName"}"#,
    printcolumn = r#"{"name":"Backup","type":"string","jsonPath":".spec.backupName"}"#,
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self == oldSelf", "message": "a FoundationDBRestore's spec is immutable: create another"}
]))]
pub struct FoundationDBRestoreSpec {
    /// The `FoundationDBCluster` to restore into (same namespace).
    pub destination_cluster_name: String,
    /// The `FoundationDBBackup` to restore from (same namespace).
    pub backup_name: String,
    /// The version to restore to (default: the backup's latest restorable version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
}

/// Where a restore is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RestoreState {
    /// Not started.
    #[default]
    Pending,
    /// `fdbrestore start` was run; waiting for it to finish.
    Running,
    /// Restored.
    Completed,
    /// Refused or failed (the message says why); never retried.
    Failed,
}

/// Observed state of a `FoundationDBRestore`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FoundationDBRestoreStatus {
    /// Conditions, generations and the operation record.
    #[serde(flatten)]
    pub common: CommonStatus,
    /// Where the restore is.
    #[serde(default)]
    pub state: RestoreState,
    /// The version restored to, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// Why it failed, or what it waits for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// What `fdbrestore status` said before this restore was started: the same answer later is
    /// an earlier restore's, not this one's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prior_restore_status: Option<String>,
}
