//! `PostgresCluster`: one primary and N−1 streaming replicas, after the Crunchy PostgreSQL
//! Operator design (seed 004), with the user/password and restart concepts of seed 000.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::common::UserStatus;
use crate::common::{CommonStatus, PodOverrides, StorageSpec, TimeoutOverrides};

/// A PostgreSQL cluster managed by Steward: a primary, streaming replicas, Services that follow
/// the primary, users from Secrets, automatic fail-over.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "steward.dev",
    version = "v1alpha1",
    kind = "PostgresCluster",
    plural = "postgresclusters",
    shortname = "pg",
    shortname = "pgc",
    namespaced,
    status = "PostgresClusterStatus",
    scale(
        spec_replicas_path = ".spec.instances",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn = r#"{"name":"Instances","type":"integer","jsonPath":".spec.instances"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyInstances"}"#,
    printcolumn = r#"{"name":"Primary","type":"string","jsonPath":".status.currentPrimary"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"Available\")].status"}"#,
    printcolumn = r#"{"name":"Operation","type":"string","jsonPath":".status.operation.kind"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(oldSelf.storage) || !has(oldSelf.storage.storageClassName) || (has(self.storage) && has(self.storage.storageClassName) && self.storage.storageClassName == oldSelf.storage.storageClassName)",
     "message": "storage.storageClassName is immutable"},
    {"rule": "!has(self.instanceStorage) || self.instanceStorage.all(s, s.ordinal < self.instances)",
     "message": "instanceStorage ordinals must be between 0 and instances - 1"},
    {"rule": "!has(self.instanceStorage) || self.instanceStorage.all(a, self.instanceStorage.exists_one(b, b.ordinal == a.ordinal))",
     "message": "instanceStorage lists an ordinal more than once"},
    {"rule": "has(self.dataSource) == has(oldSelf.dataSource) && (!has(self.dataSource) || self.dataSource == oldSelf.dataSource)",
     "message": "dataSource is read when the cluster is created and cannot change"}
]))]
pub struct PostgresClusterSpec {
    /// PostgreSQL major version, e.g. `15`. The image tag is the version unless `image` is set.
    #[schemars(regex(pattern = r"^(1[0-9]|[2-9][0-9])$"))]
    pub version: String,
    /// Container image; default `postgres:<version>` (the image must contain `initdb`,
    /// `pg_basebackup`, `pg_rewind` and `postgres` on its PATH, and `sh`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Number of instances: one primary and `instances − 1` streaming replicas.
    #[schemars(range(min = 1, max = 9))]
    pub instances: i32,
    /// Storage of every instance (one claim each).
    #[serde(default)]
    pub storage: StorageSpec,
    /// Per-instance storage overrides, by instance ordinal (e.g. a larger volume or another
    /// StorageClass for one instance). Each ordinal at most once, below `instances`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 9))]
    pub instance_storage: Vec<InstanceStorage>,
    /// Overrides applied to every instance Pod: resources, affinity, tolerations, node
    /// selector, annotations, labels.
    #[serde(default)]
    pub pod_template: PodOverrides,
    /// Prefer nodes with this label (seed: "node label"): a *preferred* node affinity rule,
    /// so Pods still schedule elsewhere when no such node is available. Replicas added later
    /// inherit it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_label: Option<NodeLabel>,
    /// Spread instances over nodes: `Preferred` (default), `Required` or `None`.
    #[serde(default)]
    pub anti_affinity: AntiAffinity,
    /// `postgresql.conf` parameters. Settings Steward owns (`listen_addresses`, `port`,
    /// `hba_file`, `data_directory`, `primary_conninfo`, ...) are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
    /// Database users, each with its password in a Secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<PostgresUser>,
    /// Fail-over settings.
    #[serde(default)]
    pub failover: FailoverSpec,
    /// A manual switchover or fail-over request; acted on once per `id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switchover: Option<SwitchoverRequest>,
    /// When a restarted instance counts as back: ready and streaming on this many consecutive
    /// checks, this far apart (seed 001: 3 checks, 30 s apart).
    #[serde(default)]
    pub health_gate: HealthGate,
    /// Stop changing the cluster: no Pods created or deleted, no fail-over, no user changes.
    /// Status is still reported.
    #[serde(default)]
    pub paused: bool,
    /// The optional metrics sidecar (seed: "the metrics container").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<MetricsSpec>,
    /// Per-cluster overrides of the operator's operation deadlines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<TimeoutOverrides>,
    /// Backups and WAL archiving (seed: "pgbackrest Integration").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backups: Option<BackupsSpec>,
    /// Where a new cluster's data comes from instead of `initdb`: a restore of another
    /// cluster's pgBackRest repository (a clone, e.g. to rehearse a restore without touching
    /// the source). Read once, when the cluster is created; immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_source: Option<DataSource>,
    /// SQL policies (`PostgresPolicy`) to run on the primary, in order, each once per
    /// version of its SQL (`status.policies` records what ran).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<crate::policy::PolicyRef>,
}

/// A new cluster's initial data: exactly one of `pgbackrest` and `pgbasebackup`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.pgbackrest) != has(self.pgbasebackup)",
     "message": "dataSource has exactly one of pgbackrest and pgbasebackup"}
]))]
pub struct DataSource {
    /// Restore from this cluster's repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgbackrest: Option<PgBackRestSource>,
    /// Copy a `pg_basebackup` (a `PostgresBackup` of method `pgbasebackup`) of another
    /// cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgbasebackup: Option<PgBaseBackupSource>,
}

/// A `pg_basebackup` of another cluster, in that cluster's backup claim `<cluster>-backup`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PgBaseBackupSource {
    /// The `PostgresCluster` (in this namespace) the backup is of; same major version.
    #[schemars(length(min = 1, max = 63))]
    pub cluster: String,
    /// The completed `PostgresBackup` (method `pgbasebackup`) to copy.
    #[schemars(length(min = 1, max = 253))]
    pub backup: String,
}

/// Another cluster's repository, and where to stop.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PgBackRestSource {
    /// A `PostgresCluster` in this namespace with `spec.backups.pgbackrest` (it must be of the
    /// same PostgreSQL major version).
    #[schemars(length(min = 1, max = 63))]
    pub cluster: String,
    /// Where recovery stops. Unset: the end of the source's archived WAL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<crate::pgbackrest::RestoreTarget>,
    /// The backup set to restore (a label). Unset: pgBackRest picks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_set: Option<String>,
}

/// Backups of a cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupsSpec {
    /// A pgBackRest repository for this cluster alone: its own Pod and claim
    /// (`<cluster>-repo`), reached over TLS (`pgbackrest server`), and WAL archiving to it
    /// from every instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgbackrest: Option<PgBackRestSpec>,
}

/// The pgBackRest repository of a cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PgBackRestSpec {
    /// Image of the repository host and of the instances' pgBackRest sidecar; it must contain
    /// `pgbackrest` (2.45 or later; 2.46 or later for PostgreSQL 16, 2.53 for 17). The
    /// PostgreSQL image must contain it too (its `archive_command` runs `pgbackrest
    /// archive-push`), the same version.
    #[serde(default = "default_pgbackrest_image")]
    pub image: String,
    /// Full backups to keep (`repo1-retention-full`); older ones, and the WAL only they need,
    /// are expired after each backup.
    #[serde(default = "default_retention_full")]
    #[schemars(range(min = 1, max = 9_999_999))]
    pub retention_full: u32,
    /// Differential backups to keep (`repo1-retention-diff`); unset: pgBackRest's default
    /// (as many as the full backups they depend on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 9_999_999))]
    pub retention_diff: Option<u32>,
    /// Compression of backups and archived WAL (`compress-type`).
    #[serde(default)]
    pub compression: Compression,
    /// The repository's volume (one claim, `<cluster>-repo`).
    #[serde(default)]
    pub storage: StorageSpec,
}

/// The pgBackRest image when `backups.pgbackrest.image` is not set.
pub const DEFAULT_PGBACKREST_IMAGE: &str = "pgbackrest:2.55";

fn default_pgbackrest_image() -> String {
    DEFAULT_PGBACKREST_IMAGE.to_owned()
}

fn default_retention_full() -> u32 {
    2
}

/// pgBackRest's `compress-type`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Compression {
    /// No compression.
    None,
    /// gzip.
    Gz,
    /// LZ4: fast, the default.
    #[default]
    Lz4,
    /// Zstandard.
    Zst,
    /// bzip2.
    Bz2,
}

impl Compression {
    /// The `compress-type` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gz => "gz",
            Self::Lz4 => "lz4",
            Self::Zst => "zst",
            Self::Bz2 => "bz2",
        }
    }
}

impl PostgresClusterSpec {
    /// A spec with `instances` instances of PostgreSQL `version`, everything else defaulted.
    pub fn new(instances: i32, version: impl Into<String>) -> Self {
        Self {
            version: version.into(),
            image: None,
            instances,
            storage: StorageSpec::default(),
            instance_storage: Vec::new(),
            pod_template: PodOverrides::default(),
            node_label: None,
            anti_affinity: AntiAffinity::default(),
            parameters: BTreeMap::new(),
            users: Vec::new(),
            failover: FailoverSpec::default(),
            switchover: None,
            health_gate: HealthGate::default(),
            paused: false,
            metrics: None,
            backups: None,
            data_source: None,
            policies: Vec::new(),
            timeouts: None,
        }
    }

    /// The image instances run.
    pub fn image(&self) -> String {
        self.image
            .clone()
            .unwrap_or_else(|| format!("postgres:{}", self.version))
    }
}

/// Storage for one instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStorage {
    /// Instance ordinal (`0` is `<cluster>-0`).
    #[schemars(range(min = 0, max = 8))]
    pub ordinal: i32,
    /// Its storage.
    pub storage: StorageSpec,
}

/// A node label the instances prefer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NodeLabel {
    /// Label key, e.g. `kubernetes.io/hostname`.
    pub key: String,
    /// Label value, e.g. `node-2`.
    pub value: String,
}

/// How instances are spread over nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AntiAffinity {
    /// Try to place instances on different nodes.
    #[default]
    Preferred,
    /// Never place two instances on one node.
    Required,
    /// No rule.
    None,
}

/// A database user, created and kept in step with its Secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PostgresUser {
    /// Role name.
    #[schemars(regex(pattern = r"^[a-z_][a-z0-9_]{0,62}$"))]
    pub name: String,
    /// Databases created (owned by this user) if missing, with all privileges granted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub databases: Vec<String>,
    /// The Secret key holding the password. Steward labels the Secret
    /// `steward.dev/user-password` and follows changes to it.
    pub password_secret: SecretKeyRef,
    /// Role attributes.
    #[serde(default)]
    pub options: UserOptions,
}

/// A key in a Secret of the cluster's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecretKeyRef {
    /// Secret name.
    pub name: String,
    /// Key; default `password`.
    #[serde(default = "default_password_key")]
    pub key: String,
}

fn default_password_key() -> String {
    "password".to_owned()
}

/// Role attributes of a user.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserOptions {
    /// `SUPERUSER`.
    #[serde(default)]
    pub superuser: bool,
    /// `CREATEDB`.
    #[serde(default)]
    pub createdb: bool,
    /// `CONNECTION LIMIT`; unlimited when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub connection_limit: Option<u32>,
}

/// Fail-over settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverSpec {
    /// Promote a replica automatically when the primary stays not ready for
    /// `detectionDelaySeconds` (seed: "autofail").
    #[serde(default = "default_true")]
    pub automatic: bool,
    /// How long the primary must stay not ready before an automatic fail-over.
    #[serde(default = "default_detection_delay")]
    #[schemars(range(min = 1, max = 3600))]
    pub detection_delay_seconds: u32,
}

fn default_true() -> bool {
    true
}

fn default_detection_delay() -> u32 {
    10
}

impl Default for FailoverSpec {
    fn default() -> Self {
        Self {
            automatic: true,
            detection_delay_seconds: default_detection_delay(),
        }
    }
}

/// A manual switchover (graceful, when the primary is healthy) or fail-over (when it is not).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SwitchoverRequest {
    /// Identifies the request: a new value asks for a new switchover. The last handled one is
    /// `status.lastSwitchover`.
    #[schemars(length(min = 1, max = 63))]
    pub id: String,
    /// The instance to promote, e.g. `demo-2`; the operator picks the most up-to-date replica
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// When a restarted instance counts as back in service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthGate {
    /// Consecutive healthy checks required.
    #[serde(default = "default_checks")]
    #[schemars(range(min = 1, max = 20))]
    pub checks: u32,
    /// Seconds between checks.
    #[serde(default = "default_interval")]
    #[schemars(range(min = 1, max = 600))]
    pub interval_seconds: u32,
}

fn default_checks() -> u32 {
    3
}

fn default_interval() -> u32 {
    30
}

impl Default for HealthGate {
    fn default() -> Self {
        Self {
            checks: default_checks(),
            interval_seconds: default_interval(),
        }
    }
}

/// The metrics sidecar.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricsSpec {
    /// Exporter image; default `quay.io/prometheuscommunity/postgres-exporter:v0.15.0`.
    #[serde(default = "default_metrics_image")]
    pub image: String,
    /// Port the exporter listens on.
    #[serde(default = "default_metrics_port")]
    pub port: i32,
}

fn default_metrics_image() -> String {
    "quay.io/prometheuscommunity/postgres-exporter:v0.15.0".to_owned()
}

fn default_metrics_port() -> i32 {
    9187
}

/// Observed state of a `PostgresCluster`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PostgresClusterStatus {
    /// Conditions, generations and the operation record.
    #[serde(flatten)]
    pub common: CommonStatus,
    /// The instance the `-primary` Service selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_primary: Option<String>,
    /// Instances, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<InstanceStatus>,
    /// Users and whether their password is in step with their Secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<UserStatus>,
    /// Ready instances.
    #[serde(default)]
    pub ready_instances: i32,
    /// Instances that exist (for the scale subresource).
    #[serde(default)]
    pub replicas: i32,
    /// Label selector of instance Pods (for the scale subresource).
    #[serde(default)]
    pub selector: String,
    /// When the primary was first seen not ready (RFC 3339); cleared when it is ready again.
    /// Kept in status so that the detection delay survives an operator restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_unready_since: Option<String>,
    /// The last switchover request handled (its `id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_switchover: Option<String>,
    /// The system identifier shared by every instance (from `initdb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_identifier: Option<String>,
    /// A fail-over or switchover in progress: kept in status so that a restarted operator
    /// continues it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_failover: Option<FailoverProgress>,
    /// The health gate of the instance a rolling restart is waiting for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_gate: Option<GateProgress>,
    /// The pgBackRest repository, when backups are on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backups: Option<BackupsStatus>,
    /// Which generation of data claims the instances run on: 0 (unset) is `<instance>-pgdata`,
    /// `n` is `<instance>-pgdata-r<n>`, after the `n`th restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_epoch: Option<u32>,
    /// Set once a cluster created with `spec.dataSource` has its data: the source cluster
    /// and what was restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloned_from: Option<String>,
    /// A restore in progress: kept in status so that a restarted operator continues it.
    /// Automatic fail-over is off while it is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreProgress>,
    /// The major-version upgrade in progress (a `PostgresUpgrade`), so that a restarted
    /// operator continues it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<crate::pgupgrade::UpgradeProgress>,
    /// The policies of `spec.policies` as they ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<crate::policy::AppliedPolicy>,
    /// The last restore of a backup into a scratch instance (a `verify` schedule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verified_restore: Option<VerifiedRestore>,
}

/// A backup restored into a scratch instance and checked (a `verify` schedule's run).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifiedRestore {
    /// The `Schedule` and its run (the Job).
    pub schedule: String,
    /// The run.
    pub run: String,
    /// The backup restored (its label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
    /// `Succeeded` (restored, recovered, the check passed) or `Failed`.
    pub phase: String,
    /// The time recovery reached (the last transaction replayed), RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_to: Option<String>,
    /// Seconds from the start of the restore to the end of recovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_seconds: Option<u64>,
    /// The check query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    /// What it returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the run ended (RFC 3339).
    pub finished_at: String,
}

/// A restore in progress (a `PostgresRestore` being run).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreProgress {
    /// The `PostgresRestore`.
    pub name: String,
    /// Its step (see `PostgresRestore.status.step`).
    pub step: String,
    /// The claims' generation before the restore.
    pub from_epoch: u32,
    /// The claims' generation the restored data is on.
    pub epoch: u32,
    /// The instance that becomes the restored primary.
    pub primary: String,
    /// The claims the cluster ran on before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_claims: Vec<String>,
    /// The WAL segment switched on the old primary before it stopped, waited for in the
    /// archive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_segment: Option<String>,
    /// Until when that segment is waited for (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_deadline: Option<String>,
    /// Set once the restore failed: the cluster stays stopped until a new `PostgresRestore`
    /// re-runs it (from the restore Job, deleting nothing again) or this one is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// What Steward knows of a cluster's pgBackRest repository.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupsStatus {
    /// The repository host (its Pod, claim and Service).
    pub repository: String,
    /// The stanza, once `stanza-create` succeeded for this cluster's database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stanza: Option<String>,
    /// The backups in the repository, newest first (at most ten; `pgbackrest info`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backups: Vec<BackupSummary>,
    /// How many backups the repository holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_count: Option<u32>,
    /// The earliest time the cluster can be restored to: the end of the oldest backup
    /// (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_recoverability_point: Option<String>,
    /// The latest time the cluster can be restored to: when the primary last archived a WAL
    /// segment (RFC 3339; `pg_stat_archiver`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_recoverability_point: Option<String>,
    /// When the newest backup completed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_backup: Option<String>,
    /// The oldest archived WAL segment the repository holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_min: Option<String>,
    /// The newest archived WAL segment the repository holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_max: Option<String>,
    /// When Steward last read the repository (`pgbackrest info`, RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info_time: Option<String>,
}

/// One backup in a cluster's repository.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupSummary {
    /// pgBackRest's label.
    pub label: String,
    /// `full`, `diff` or `incr`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The `PostgresBackup` that took it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
    /// When it started (RFC 3339).
    pub start_time: String,
    /// When it finished (RFC 3339).
    pub stop_time: String,
    /// Size of the database it restores (bytes).
    pub size: i64,
    /// Bytes the backup set takes in the repository.
    pub repository_size: i64,
}

/// A fail-over or switchover in progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverProgress {
    /// The primary being replaced.
    pub from: String,
    /// The replica being promoted.
    pub target: String,
    /// `true` for a graceful switchover (the old primary was healthy), `false` for a fail-over.
    pub switchover: bool,
    /// The old primary's WAL position when it was demoted (switchover); the target is promoted
    /// once it has replayed this far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demoted_at_lsn: Option<String>,
    /// The switchover request being handled, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// Why: `automatic`, `request`, `restart` or `nodeCordoned` (the primary's Node was
    /// cordoned: a drain is coming).
    pub reason: String,
}

/// The health gate of one restarted instance (seed 001: healthy N times, an interval apart).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateProgress {
    /// The instance.
    pub instance: String,
    /// Consecutive healthy checks so far.
    pub passed: u32,
    /// When it was last checked (RFC 3339).
    pub last_check: String,
}

/// The role of an instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InstanceRole {
    /// Accepts writes.
    Primary,
    /// Streams from the primary; read-only.
    Replica,
}

/// One instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    /// Instance (and Pod) name.
    pub name: String,
    /// Its role.
    pub role: InstanceRole,
    /// Pod ready and the server answered.
    #[serde(default)]
    pub ready: bool,
    /// Timeline it writes or replays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<u32>,
    /// Current LSN (primary) or replay LSN (replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lsn: Option<String>,
    /// Bytes of WAL a replica has not replayed yet, compared with the primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_bytes: Option<u64>,
    /// Whether a replica is streaming from the primary.
    #[serde(default)]
    pub streaming: bool,
}
