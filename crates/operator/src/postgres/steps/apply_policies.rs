//! ApplyPolicies — with a writable primary: runs each `spec.policies` entry (a
//! `PostgresPolicy`, seed 004 "pgpolicies") once per version of its SQL, in spec order, as
//! Steward's superuser in the entry's database, and records the result in `status.policies`
//! (version, phase, rows affected or PostgreSQL's error, duration) with an Event
//! (`PolicyApplied` / `PolicyFailed`). A version that ran is never run again, whatever its
//! result: a failed policy is fixed by changing its SQL (a new version), not retried in a loop.
//! A policy that cannot be read (missing object, ConfigMap or key) is reported in its entry's
//! `waiting` and the cluster is `Degraded` until it can; it runs as soon as it can.
//!
//! The policy's `status.version` is set to the version read (once per version, whichever
//! cluster reads it first). On a converged cluster it reads the policies' SQL (the
//! `PostgresPolicy` cache; a `GET` per ConfigMap-held policy) and writes nothing.

use std::time::Duration;

use async_trait::async_trait;
use steward_api::policy::{AppliedPolicy, PostgresPolicy, PostgresPolicyStatus};

use crate::error::Error;
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::postgres::PostgresPass;
use crate::postgres::policy;
use crate::postgres::steps::run_backups::patch_status;
use crate::postgres::steps::validated;

/// How long one policy may run.
pub const POLICY_TIMEOUT: Duration = Duration::from_secs(300);

/// See the module documentation.
pub struct ApplyPolicies;

#[async_trait]
impl SubReconciler<PostgresPass> for ApplyPolicies {
    fn name(&self) -> &'static str {
        "ApplyPolicies"
    }

    async fn reconcile(&self, pass: &mut PostgresPass) -> Result<Outcome, Error> {
        let valid = validated(pass)?;
        let refs = pass.cluster.spec.policies.clone();
        if refs.is_empty() {
            pass.status.policies.clear();
            return Ok(Outcome::Continue);
        }
        let Some(primary) = pass.primary() else {
            return Ok(Outcome::Continue);
        };
        let ip = pass
            .instance(&primary)
            .filter(|v| v.writable())
            .and_then(|v| v.ip.clone());
        let (Some(ip), false) = (ip, valid.paused) else {
            return Ok(Outcome::Continue);
        };
        let Some(superuser) = pass.target(&ip) else {
            return Ok(Outcome::Continue);
        };
        let mut applied = Vec::new();
        let mut waiting = Vec::new();
        for r in &refs {
            let previous = pass
                .status
                .policies
                .iter()
                .find(|p| p.name == r.name && p.database == r.database)
                .cloned();
            let mut entry = previous.clone().unwrap_or_else(|| AppliedPolicy {
                name: r.name.clone(),
                database: r.database.clone(),
                ..AppliedPolicy::default()
            });
            entry.waiting = None;
            let found = policy::cached(&pass.stores.policies, &pass.core.namespace, &r.name);
            let sql =
                policy::resolve(&pass.ctx, found.as_deref(), &pass.core.namespace, &r.name).await?;
            if let (Some(found), Ok(sql)) = (&found, &sql)
                && found.status.as_ref().and_then(|s| s.version.as_ref()) != Some(&sql.version)
            {
                let status = PostgresPolicyStatus {
                    version: Some(sql.version.clone()),
                };
                patch_status::<PostgresPolicy>(pass, &r.name, &status).await?;
            }
            match sql {
                Err(why) => {
                    waiting.push(why.clone());
                    entry.waiting = Some(why);
                }
                Ok(sql) if entry.version.as_deref() == Some(sql.version.as_str()) => {}
                Ok(sql) => {
                    let target = superuser.on_database(&r.database);
                    let connector = pass.connector()?;
                    let result = policy::run(
                        connector.as_ref(),
                        &target,
                        &sql.sql,
                        POLICY_TIMEOUT,
                        pass.ctx.clock.now(),
                    )
                    .await;
                    let (type_, reason, note) = match &result.error {
                        None => (
                            EventType::Normal,
                            "PolicyApplied",
                            format!(
                                "policy {} (version {}) ran in database {}: {} rows in {} ms",
                                r.name,
                                sql.version,
                                r.database,
                                result.rows_affected.unwrap_or(0),
                                result.duration_ms
                            ),
                        ),
                        Some(e) => (
                            EventType::Warning,
                            "PolicyFailed",
                            format!(
                                "policy {} (version {}) failed in database {}: {e}",
                                r.name, sql.version, r.database
                            ),
                        ),
                    };
                    pass.core.event(type_, reason, "ApplyPolicies", note);
                    entry.version = Some(sql.version);
                    entry.result = Some(result);
                }
            }
            applied.push(entry);
        }
        pass.status.policies = applied;
        if !waiting.is_empty() {
            pass.core.degrade("PolicyUnavailable", waiting.join("; "));
        }
        Ok(Outcome::Continue)
    }
}
