//! SQL policies (`PostgresPolicy`, seed 004 "pgpolicies"): reading a policy's SQL (inline or
//! from a ConfigMap) and running it through the admin seam. Used by the cluster's
//! `ApplyPolicies` step and by `policy` schedules.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use steward_api::policy::{PolicyResult, PostgresPolicy};

use crate::clock::format_time;
use crate::error::Error;
use crate::postgres::admin::{ConnectionTarget, PostgresConnector};
use crate::postgres::build::config::stable_hash;
use crate::runtime::context::Context;

/// A policy's SQL as it is now, and its version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicySql {
    /// The text.
    pub sql: String,
    /// Its stable hash (16 hex digits).
    pub version: String,
}

/// The policy `name` in `namespace` from a cache.
pub fn cached(
    policies: &Store<PostgresPolicy>,
    namespace: &str,
    name: &str,
) -> Option<std::sync::Arc<PostgresPolicy>> {
    policies.get(&ObjectRef::new(name).within(namespace))
}

/// The SQL of `policy` (named `name`, in `namespace`): `Ok(Err(why))` when it cannot be read
/// (the policy, its ConfigMap or the key is missing, the text is empty); `Err` on an API
/// failure.
pub async fn resolve(
    ctx: &Context,
    policy: Option<&PostgresPolicy>,
    namespace: &str,
    name: &str,
) -> Result<Result<PolicySql, String>, Error> {
    let Some(policy) = policy else {
        return Ok(Err(format!("PostgresPolicy {name} does not exist")));
    };
    let sql = match (&policy.spec.sql, &policy.spec.config_map) {
        (Some(sql), _) => sql.clone(),
        (None, Some(key)) => {
            let api: Api<ConfigMap> = ctx.api(namespace);
            let map = api.get_opt(&key.name).await.map_err(|s| {
                Error::kube("get ConfigMap", format!("{namespace}/{}", key.name), s)
            })?;
            let Some(map) = map else {
                return Ok(Err(format!(
                    "PostgresPolicy {name}: ConfigMap {} does not exist",
                    key.name
                )));
            };
            match map.data.as_ref().and_then(|d| d.get(&key.key)) {
                Some(sql) => sql.clone(),
                None => {
                    return Ok(Err(format!(
                        "PostgresPolicy {name}: ConfigMap {} has no key {:?}",
                        key.name, key.key
                    )));
                }
            }
        }
        (None, None) => return Ok(Err(format!("PostgresPolicy {name} has no SQL"))),
    };
    if sql.trim().is_empty() {
        return Ok(Err(format!("PostgresPolicy {name}: the SQL is empty")));
    }
    let version = stable_hash(&sql);
    Ok(Ok(PolicySql { sql, version }))
}

/// Runs `sql` at `target` (its user, its database) within `timeout`; a SQL error is a failed
/// result, never an error of the caller.
pub async fn run(
    connector: &dyn PostgresConnector,
    target: &ConnectionTarget,
    sql: &str,
    timeout: Duration,
    now: jiff::Timestamp,
) -> PolicyResult {
    let started = Instant::now();
    let outcome = match connector.connect(target, timeout).await {
        Ok(admin) => admin.run_sql(sql, timeout).await,
        Err(e) => Err(e),
    };
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let finished_at = format_time(now.checked_add(started.elapsed()).unwrap_or(now));
    match outcome {
        Ok(outcome) => PolicyResult {
            phase: "Succeeded".into(),
            rows_affected: Some(outcome.rows),
            error: None,
            duration_ms,
            finished_at,
        },
        Err(e) => PolicyResult {
            phase: "Failed".into(),
            rows_affected: None,
            error: Some(e.to_string()),
            duration_ms,
            finished_at,
        },
    }
}
