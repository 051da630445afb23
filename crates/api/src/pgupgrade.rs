//! `PostgresUpgrade`: a major-version upgrade of a `PostgresCluster` with `pg_upgrade` (seed
//! 004, "Upgrade - pgupgrades"). Creating the object starts it; the cluster's controller runs it
//! as the cluster's `Upgrade` operation and writes its progress here and in the cluster's
//! `status.upgrade`.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A major-version upgrade of a PostgreSQL cluster (e.g. 15 → 16). The instances stop, the
/// primary's data is upgraded with `pg_upgrade` into a new claim (the old claims are kept,
/// labelled, never deleted by Steward), the primary starts on the new version, the replicas are
/// cloned from it again, statistics are rebuilt, the pgBackRest stanza is upgraded and a full
/// backup taken; then the cluster's `spec.version` says the new version. The spec is immutable:
/// a retry is a new object. Deleting a failed upgrade brings the cluster back on its old claims
/// and version.
#[derive(CustomResource, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "steward.dev",
    version = "v1alpha1",
    kind = "PostgresUpgrade",
    plural = "postgresupgrades",
    shortname = "pgupgrade",
    namespaced,
    status = "PostgresUpgradeStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.cluster"}"#,
    printcolumn = r#"{"name":"To","type":"string","jsonPath":".spec.toVersion"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Step","type":"string","jsonPath":".status.step"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self == oldSelf", "message": "a PostgresUpgrade's spec is immutable: create a new PostgresUpgrade"}
]))]
pub struct PostgresUpgradeSpec {
    /// The `PostgresCluster` (in this namespace) to upgrade.
    #[schemars(length(min = 1, max = 63))]
    pub cluster: String,
    /// The PostgreSQL major version to move to; newer than the cluster's `spec.version`.
    #[schemars(regex(pattern = r"^[0-9]{2}$"))]
    pub to_version: String,
    /// The image the instances run after the upgrade. Unset: `postgres:<toVersion>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub image: Option<String>,
    /// The image of the `pg_upgrade` Job: it must hold both versions' binaries under
    /// `/usr/lib/postgresql/<version>/bin`, as `tianon/postgres-upgrade` does. Unset:
    /// `tianon/postgres-upgrade:<from>-to-<to>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub upgrade_image: Option<String>,
    /// Upgrade even though the cluster's repository holds no backup taken since its last
    /// operation. Unset: such an upgrade is refused (a backup is the way back if the new
    /// version misbehaves after the old claims are gone).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub without_backup: bool,
}

/// Where an upgrade is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum UpgradePhase {
    /// Not started yet.
    Pending,
    /// The cluster's `Upgrade` operation runs it (`status.step` says where).
    Running,
    /// The cluster runs the new version, its replicas stream, the full backup is requested.
    Completed,
    /// Refused (nothing changed), or failed (`error` says why). A failure before the cluster
    /// moved to the new claims brings it back on its old claims and version by itself; a
    /// failure after holds it stopped until this object is deleted (then it comes back on the
    /// old claims and version).
    Failed,
}

/// What happened to an upgrade.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PostgresUpgradeStatus {
    /// `Pending`, `Running`, `Completed` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<UpgradePhase>,
    /// The step: `StopInstances`, `UpgradeJob`, `StartPrimary`, `RecloneReplicas`,
    /// `UpgradeStanza`, `Analyze`, `Finish`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The last thing that happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Why it was refused or failed (for a failed `pg_upgrade --check`, its report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The major version the cluster ran before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_version: Option<String>,
    /// The instance whose data is upgraded; it is the primary afterwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
    /// The new claim the upgraded data is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    /// The claims the cluster ran on before: kept, labelled `steward.dev/upgraded-by`, never
    /// deleted by Steward.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_claims: Vec<String>,
    /// The Job that runs `pg_upgrade`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The full backup taken after the upgrade (a `PostgresBackup`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
    /// When it started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When it ended (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
}

/// A running upgrade as the cluster records it (`status.upgrade`), so that a restarted
/// operator continues it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeProgress {
    /// The `PostgresUpgrade`.
    pub name: String,
    /// Its step (see `PostgresUpgrade.status.step`).
    pub step: String,
    /// The major version before.
    pub from_version: String,
    /// The major version after.
    pub to_version: String,
    /// The image the instances run from `StartPrimary` on.
    pub image: String,
    /// The claims' generation before the upgrade.
    pub from_epoch: u32,
    /// The claims' generation the upgraded data is on.
    pub epoch: u32,
    /// The instance whose data is upgraded.
    pub primary: String,
    /// The claims the cluster ran on before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_claims: Vec<String>,
    /// Why `pgbackrest stanza-upgrade` failed, if it did: the upgrade goes on (the cluster
    /// runs), no full backup is requested, and the completion says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stanza_error: Option<String>,
    /// Set once the upgrade failed after the cluster moved to the new claims: it stays stopped
    /// until the `PostgresUpgrade` is deleted (then it comes back on the old claims).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}
