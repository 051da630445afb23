//! `PostgresBackup`: one pgBackRest backup of a `PostgresCluster` with
//! `spec.backups.pgbackrest` (seed 004, "pgbackrest Integration": `pgo backup mycluster`).
//! Creating the object is what starts the backup; the cluster's controller runs it as the
//! cluster's `Backup` operation and writes the outcome here.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A backup of a PostgreSQL cluster into its pgBackRest repository. The spec is immutable:
/// a new backup is a new object.
#[derive(CustomResource, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "steward.dev",
    version = "v1alpha1",
    kind = "PostgresBackup",
    plural = "postgresbackups",
    shortname = "pgbackup",
    namespaced,
    status = "PostgresBackupStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.cluster"}"#,
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.type"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Label","type":"string","jsonPath":".status.label"}"#,
    printcolumn = r#"{"name":"Repository Size","type":"integer","jsonPath":".status.repositorySize"}"#,
    printcolumn = r#"{"name":"Duration","type":"string","jsonPath":".status.duration"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self == oldSelf", "message": "a PostgresBackup's spec is immutable: create a new PostgresBackup"}
]))]
pub struct PostgresBackupSpec {
    /// The `PostgresCluster` (in this namespace) to back up; it must have
    /// `spec.backups.pgbackrest`.
    #[schemars(length(min = 1, max = 63))]
    pub cluster: String,
    /// `full` (every file), `diff` (files changed since the last full backup) or `incr`
    /// (files changed since the last backup of any type). As in pgBackRest, a `diff` or
    /// `incr` backup with no full backup to build on is taken as a full one
    /// (`status.type` says which).
    #[serde(rename = "type", default)]
    pub type_: BackupType,
    /// `pgbackrest` (into the cluster's repository) or `pgbasebackup` (seed: "pgBaseBackup
    /// Schedules": `pg_basebackup` into the cluster's backup claim `<cluster>-backup`, which
    /// is created if missing and kept after the cluster; a full copy whose `type` is ignored,
    /// usable as a new cluster's `dataSource.pgbasebackup`).
    #[serde(default)]
    pub method: BackupMethod,
}

/// How a backup is taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BackupMethod {
    /// pgBackRest, into the cluster's repository.
    #[default]
    Pgbackrest,
    /// `pg_basebackup`, into the cluster's backup claim.
    Pgbasebackup,
}

/// pgBackRest's backup types.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BackupType {
    /// Every file of the database.
    #[default]
    Full,
    /// Files changed since the last full backup.
    Diff,
    /// Files changed since the last backup.
    Incr,
}

impl BackupType {
    /// The `--type` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Diff => "diff",
            Self::Incr => "incr",
        }
    }

    /// Parses pgBackRest's type name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "full" => Some(Self::Full),
            "diff" => Some(Self::Diff),
            "incr" => Some(Self::Incr),
            _ => None,
        }
    }
}

/// Where a backup is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum BackupPhase {
    /// Waiting: for the cluster's repository and stanza, or for another operation to finish
    /// (`status.message` says which).
    Pending,
    /// The backup Job runs.
    Running,
    /// The backup is in the repository.
    Completed,
    /// The backup did not complete (`status.error` says why). A new backup is a new object.
    Failed,
}

/// What happened to a backup.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PostgresBackupStatus {
    /// `Pending`, `Running`, `Completed` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BackupPhase>,
    /// The last thing that happened, or what the backup waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Why the backup failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The Job that runs `pgbackrest backup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The backup's label in the repository (pgBackRest's `--set`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The type taken (`full` when pgBackRest had no full backup to build on).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<BackupType>,
    /// When pgBackRest started the backup (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// When it finished (RFC 3339): the earliest point this backup can restore to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_time: Option<String>,
    /// The first WAL segment the backup needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_start: Option<String>,
    /// The last WAL segment the backup needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_stop: Option<String>,
    /// The LSN where the backup started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lsn_start: Option<String>,
    /// The LSN where it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lsn_stop: Option<String>,
    /// Size of the database the backup restores (bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    /// Bytes of the database this backup copied (for `diff`/`incr`: the changed files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_size: Option<i64>,
    /// Bytes the backup set (with the backups it builds on) takes in the repository,
    /// compressed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository_size: Option<i64>,
    /// Bytes this backup added to the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository_delta_size: Option<i64>,
    /// How long pgBackRest took, e.g. `1m5s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// When the backup Job was created (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When Steward saw it end (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Set once the repository no longer holds the backup (retention expired it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired: Option<bool>,
}

/// A restore of a `PostgresCluster` from its pgBackRest repository (seed 004, "pgbackrest
/// Restore": `pgo restore mycluster`), to the end of the archive or to a point in time.
/// Creating the object starts it; the cluster's controller runs it as the cluster's `Restore`
/// operation. The cluster's current data is not deleted: it stays on its claims, which the
/// status names. The spec is immutable: a re-run (after a failure) is a new object.
#[derive(CustomResource, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "steward.dev",
    version = "v1alpha1",
    kind = "PostgresRestore",
    plural = "postgresrestores",
    shortname = "pgrestore",
    namespaced,
    status = "PostgresRestoreStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.cluster"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Step","type":"string","jsonPath":".status.step"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self == oldSelf", "message": "a PostgresRestore's spec is immutable: create a new PostgresRestore"}
]))]
pub struct PostgresRestoreSpec {
    /// The `PostgresCluster` (in this namespace) to restore; it must have
    /// `spec.backups.pgbackrest`.
    #[schemars(length(min = 1, max = 63))]
    pub cluster: String,
    /// Where recovery stops. Unset: the end of the archived WAL (latest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<RestoreTarget>,
    /// The backup set to restore from (a label from `status.backups` of the cluster). Unset:
    /// pgBackRest picks the newest one (for a time target: the newest that ended before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_set: Option<String>,
    /// A node label the restore Job must run on (seed: `--node-label`). Unset: the cluster's
    /// own `nodeLabel` preference. The restored primary runs where its new claim is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_label: Option<crate::postgres::NodeLabel>,
}

/// A recovery target: exactly one of `time`, `lsn`, `xid` or `name`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "[has(self.time), has(self.lsn), has(self.xid), has(self.name)].filter(x, x).size() == 1",
     "message": "a target names exactly one of time, lsn, xid or name"}
]))]
pub struct RestoreTarget {
    /// A time (RFC 3339, e.g. `2026-11-26T07:20:34Z`): transactions committed after it are
    /// not restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$"
    ))]
    pub time: Option<String>,
    /// A WAL position, e.g. `0/3000060`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$"))]
    pub lsn: Option<String>,
    /// A transaction id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+$"))]
    pub xid: Option<String>,
    /// A restore point made with `pg_create_restore_point(name)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub name: Option<String>,
}

/// Where a restore is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RestorePhase {
    /// Not started yet.
    Pending,
    /// The cluster's `Restore` operation runs it (`status.step` says where).
    Running,
    /// The cluster runs on the restored data, its replicas stream, fail-over is back.
    Completed,
    /// Refused (nothing changed), or failed (`error` says why; the cluster stays stopped on
    /// the new claim until a new `PostgresRestore` re-runs the restore, or this one is deleted,
    /// which brings the cluster back on its previous claims).
    Failed,
}

/// What happened to a restore.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PostgresRestoreStatus {
    /// `Pending`, `Running`, `Completed` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RestorePhase>,
    /// The step: `ArchiveWal`, `StopInstances`, `RestoreJob`, `StartPrimary`,
    /// `RecloneReplicas`, `Finish`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The last thing that happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Why it was refused or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The instance that runs the restored data as the primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
    /// The new claim the restored data is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    /// The claims the cluster ran on before: kept, labelled `steward.dev/restored-by`, never
    /// deleted by Steward.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_claims: Vec<String>,
    /// The Job that runs `pgbackrest restore`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The full backup taken after the restore (a `PostgresBackup`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
    /// When it started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When it ended (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
}
