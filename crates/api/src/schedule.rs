//! `Schedule`: scheduled work on a cluster (seed 004, "PGO Scheduler"): a 6-field cron
//! expression in UTC and what to run at each slot. Each run is the object a person would
//! create (for `pgbackrest`: a `PostgresBackup`), named after the slot.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::Condition;
use crate::pgbackrest::BackupType;

/// A cron schedule of work on one cluster.
#[derive(CustomResource, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "steward.dev",
    version = "v1alpha1",
    kind = "Schedule",
    plural = "schedules",
    shortname = "sched",
    namespaced,
    status = "ScheduleStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.cluster"}"#,
    printcolumn = r#"{"name":"Schedule","type":"string","jsonPath":".spec.schedule"}"#,
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.type"}"#,
    printcolumn = r#"{"name":"Suspend","type":"boolean","jsonPath":".spec.suspend"}"#,
    printcolumn = r#"{"name":"Last Schedule","type":"date","jsonPath":".status.lastScheduleTime"}"#,
    printcolumn = r#"{"name":"Next","type":"string","jsonPath":".status.nextScheduleTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.type != 'pgbackrest' || has(self.pgbackrest)",
     "message": "a pgbackrest schedule needs spec.pgbackrest (its backup type)"},
    {"rule": "self.type != 'policy' || has(self.policy)",
     "message": "a policy schedule needs spec.policy (the PostgresPolicy to run)"}
]))]
pub struct ScheduleSpec {
    /// The cluster (in this namespace) the work is for.
    #[schemars(length(min = 1, max = 63))]
    pub cluster: String,
    /// When, as the seed's 6-field cron expression in UTC: seconds, minutes, hours, day of
    /// month, month, day of week; `*`, `/`, `,`, `-`, `?` (day fields), `JAN`–`DEC`,
    /// `SUN`–`SAT`. E.g. `0 0 1 * * *` is every day at 01:00:00 UTC.
    #[schemars(regex(pattern = r"^\s*\S+(\s+\S+){5}\s*$"))]
    pub schedule: String,
    /// What runs at each slot.
    #[serde(rename = "type")]
    pub type_: ScheduleType,
    /// Options of a `pgbackrest` schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgbackrest: Option<PgBackRestSchedule>,
    /// Options of a `policy` schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicySchedule>,
    /// Options of a `verify` schedule (all optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<VerifySchedule>,
    /// Options of an `etcd-snapshot` schedule (all optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_snapshot: Option<EtcdSnapshotSchedule>,
    /// No new runs while true (running ones finish).
    #[serde(default)]
    pub suspend: bool,
    /// A slot missed (the operator was down) still runs when it is at most this late; unset:
    /// however late (once: only the newest missed slot runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub starting_deadline_seconds: Option<i64>,
    /// What a slot does while the previous run is still going.
    #[serde(default)]
    pub concurrency_policy: ConcurrencyPolicy,
    /// Completed runs kept (their objects); older ones are deleted.
    #[serde(default = "default_successful_history")]
    #[schemars(range(min = 0, max = 100))]
    pub successful_runs_history_limit: u32,
    /// Failed runs kept.
    #[serde(default = "default_failed_history")]
    #[schemars(range(min = 0, max = 100))]
    pub failed_runs_history_limit: u32,
}

fn default_successful_history() -> u32 {
    3
}

fn default_failed_history() -> u32 {
    1
}

/// What a schedule runs (seed: "Type of task").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleType {
    /// A pgBackRest backup: a `PostgresBackup` of `pgbackrest.type`.
    Pgbackrest,
    /// A `pg_basebackup` into the cluster's backup claim (not implemented yet: refused).
    Pgbasebackup,
    /// A SQL policy (`policy.name`), run on the primary.
    Policy,
    /// A restore of the newest backup into a scratch instance, checked by a query.
    Verify,
    /// An etcd snapshot: an `EtcdBackup` of an `EtcdCluster`, keeping
    /// `successfulRunsHistoryLimit` snapshots (its `retain`).
    #[serde(rename = "etcd-snapshot")]
    EtcdSnapshot,
}

impl ScheduleType {
    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pgbackrest => "pgbackrest",
            Self::Pgbasebackup => "pgbasebackup",
            Self::Policy => "policy",
            Self::Verify => "verify",
            Self::EtcdSnapshot => "etcd-snapshot",
        }
    }
}

/// Options of a `pgbackrest` schedule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PgBackRestSchedule {
    /// `full`, `diff` or `incr`.
    #[serde(rename = "type", default)]
    pub type_: BackupType,
}

/// Options of a `policy` schedule (seed: "Policy Schedules").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicySchedule {
    /// The `PostgresPolicy` (in this namespace).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The database it runs in.
    #[serde(default = "crate::policy::default_database")]
    #[schemars(length(min = 1, max = 63))]
    pub database: String,
    /// A Secret (in this namespace) with `username` and `password`: the role that runs the
    /// SQL. Unset: the cluster's replication user (the seed's default), which holds only what
    /// `PUBLIC` is granted — grant it what the policy needs, or name a role here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// The run fails (and its transaction rolls back) after this many seconds.
    #[serde(default = "default_policy_timeout")]
    #[schemars(range(min = 1, max = 86400))]
    pub timeout_seconds: u32,
}

fn default_policy_timeout() -> u32 {
    300
}

/// Options of a `verify` schedule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifySchedule {
    /// The check run on the restored instance (in database `database`); its first column of
    /// its first row is the result. Unset: `SELECT count(*) FROM pg_class`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub query: Option<String>,
    /// The result the check must return (as text); unset: any result passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    /// The database the check connects to.
    #[serde(default = "crate::policy::default_database")]
    #[schemars(length(min = 1, max = 63))]
    pub database: String,
    /// The verification fails after this many seconds (restore, recovery and check).
    #[serde(default = "default_verify_timeout")]
    #[schemars(range(min = 60, max = 86400))]
    pub timeout_seconds: u32,
}

fn default_verify_timeout() -> u32 {
    1800
}

/// Options of an `etcd-snapshot` schedule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdSnapshotSchedule {
    /// Where the snapshots go (default: the claim `<cluster>-snapshots`).
    #[serde(default)]
    pub destination: crate::etcd::SnapshotDestination,
}

/// A slot while a run is active.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConcurrencyPolicy {
    /// Skip the slot (reported).
    #[default]
    Forbid,
    /// Run anyway.
    Allow,
}

/// One run of a schedule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleRun {
    /// The object the run created (e.g. the `PostgresBackup` or the `EtcdBackup`).
    pub name: String,
    /// The slot (RFC 3339).
    pub slot: String,
    /// `Running`, `Succeeded` or `Failed`.
    pub phase: String,
    /// When it ended (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// What it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A `policy` run: rows its statements affected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_affected: Option<u64>,
    /// A `policy` or `verify` run: how long it took, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// A `verify` run: the backup it restores (its label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
}

/// What a schedule did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleStatus {
    /// `Valid` (the expression and the type), `Ready` (the cluster can take the work).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The last slot handled — run, skipped or missed (RFC 3339); a slot is handled once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_slot: Option<String>,
    /// The last slot that started a run (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<String>,
    /// When the last successful run ended (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<String>,
    /// The next slot (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<String>,
    /// Runs still going.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub active: Vec<String>,
    /// The last problem: a failed run, a skipped or missed slot, a cluster not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The value of the `steward.dev/run-now` annotation last honoured (a one-off run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_now: Option<String>,
    /// Recent runs, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<ScheduleRun>,
}
