//! `PostgresPolicy`: SQL kept as an object (seed 004, "Policy - pgpolicies"), run on a cluster
//! once per version when the cluster lists it in `spec.policies`, or on a cron by a `policy`
//! `Schedule`.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// SQL to run on PostgreSQL clusters: inline, or a key of a ConfigMap in this namespace.
#[derive(CustomResource, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "steward.dev",
    version = "v1alpha1",
    kind = "PostgresPolicy",
    plural = "postgrespolicies",
    shortname = "pgpolicy",
    namespaced,
    status = "PostgresPolicyStatus",
    printcolumn = r#"{"name":"ConfigMap","type":"string","jsonPath":".spec.configMap.name"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.version"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.sql) != has(self.configMap)",
     "message": "a PostgresPolicy has exactly one of spec.sql and spec.configMap"}
]))]
pub struct PostgresPolicySpec {
    /// The SQL: one or more statements, run in one implicit transaction (a failing statement
    /// rolls back the ones before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub sql: Option<String>,
    /// The SQL in a ConfigMap of this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapKey>,
}

/// What Steward last read of a policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PostgresPolicyStatus {
    /// The version of its SQL (a stable 64-bit hash, 16 hex digits) when a cluster last read
    /// it: compare with a cluster's `status.policies[].version` to see whether the cluster ran
    /// the current SQL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// A key of a ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKey {
    /// The ConfigMap.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Its key holding the SQL.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// A policy a cluster applies (`spec.policies`): run once per version of its SQL.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRef {
    /// The `PostgresPolicy` (in the cluster's namespace).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The database it runs in.
    #[serde(default = "default_database")]
    #[schemars(length(min = 1, max = 63))]
    pub database: String,
}

/// `postgres`.
pub fn default_database() -> String {
    "postgres".to_owned()
}

/// How the last run of a policy went.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyResult {
    /// `Succeeded` or `Failed`.
    pub phase: String,
    /// Rows the statements inserted, updated, deleted or returned, summed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_affected: Option<u64>,
    /// Why it failed (PostgreSQL's message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How long it ran, in milliseconds.
    #[serde(default)]
    pub duration_ms: u64,
    /// When it ended (RFC 3339).
    pub finished_at: String,
}

/// A policy as a cluster applied it (`status.policies`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedPolicy {
    /// The `PostgresPolicy`.
    pub name: String,
    /// The database it ran in.
    pub database: String,
    /// The version of its SQL that ran (a stable 64-bit hash, 16 hex digits): a new version
    /// runs once; the same version never again, whatever its result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The result of that run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<PolicyResult>,
    /// Why the policy cannot run (the object or its ConfigMap is missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}
