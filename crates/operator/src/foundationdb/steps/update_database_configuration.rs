//! UpdateDatabaseConfiguration — `configure new` exactly once: when the database has no
//! configuration and `status.configured` is false, and enough storage and log processes report
//! for the redundancy mode; `configured` is then true for good (also when a configuration is
//! found). Afterwards, a live configuration that differs from the spec is changed with one
//! `configure` under the global lock. An unavailable database is left alone and the pass goes
//! on (seed 002).

use async_trait::async_trait;
use steward_api::foundationdb::{DatabaseConfiguration, ProcessClass};

use super::SOON;
use crate::error::Error;
use crate::foundationdb::admin::ops;
use crate::foundationdb::{FdbPass, lock};
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct UpdateDatabaseConfiguration;

/// (pure) `configure`'s arguments for `spec`.
pub fn arguments(spec: &DatabaseConfiguration) -> String {
    let mut args = vec![
        spec.redundancy_mode.as_str().to_owned(),
        spec.storage_engine.as_str().to_owned(),
    ];
    for (name, value) in [
        ("logs", spec.logs),
        ("commit_proxies", spec.commit_proxies),
        ("grv_proxies", spec.grv_proxies),
        ("resolvers", spec.resolvers),
    ] {
        if let Some(v) = value {
            args.push(format!("{name}={v}"));
        }
    }
    args.join(" ")
}

/// (pure) Whether the live configuration is what the spec asks (fields the spec leaves unset
/// may be anything).
pub fn matches(spec: &DatabaseConfiguration, live: Option<&DatabaseConfiguration>) -> bool {
    let Some(live) = live else { return false };
    let same = |s: Option<u32>, l: Option<u32>| s.is_none() || s == l;
    spec.redundancy_mode == live.redundancy_mode
        && spec.storage_engine == live.storage_engine
        && same(spec.logs, live.logs)
        && same(spec.commit_proxies, live.commit_proxies)
        && same(spec.grv_proxies, live.grv_proxies)
        && same(spec.resolvers, live.resolvers)
}

#[async_trait]
impl SubReconciler<FdbPass> for UpdateDatabaseConfiguration {
    fn name(&self) -> &'static str {
        "UpdateDatabaseConfiguration"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let Some(db) = pass.db.clone() else {
            return Ok(Outcome::Continue);
        };
        let spec = pass.cluster.spec.database_configuration.clone();
        let admin = pass.admin()?;
        let targets = pass.targets();
        if db.configured() {
            pass.status.configured = true;
        }
        if !pass.status.configured {
            let replication = spec.redundancy_mode.replication();
            let reporting = |class: ProcessClass| {
                db.cluster
                    .processes
                    .values()
                    .filter(|p| p.class_type == class.as_str())
                    .count()
            };
            let (storage, log) = (
                reporting(ProcessClass::Storage),
                reporting(ProcessClass::Log),
            );
            if storage < replication || log < replication {
                return Ok(Outcome::requeue(
                    SOON,
                    format!(
                        "configure new waits for {replication} storage and {replication} log processes ({storage} and {log} report)"
                    ),
                ));
            }
            let args = arguments(&spec);
            ops::configure(admin.as_ref(), &targets, true, &args)
                .await
                .map_err(|e| pass.database_error(&e))?;
            pass.status.configured = true;
            pass.core.event(
                EventType::Normal,
                "DatabaseCreated",
                "UpdateDatabaseConfiguration",
                format!("configure new {args}"),
            );
            return Ok(Outcome::requeue(SOON, "database created"));
        }
        if !db.available() || matches(&spec, pass.status.database_configuration.as_ref()) {
            return Ok(Outcome::Continue);
        }
        if let Some(wait) = lock::acquire(pass, self.name()).await? {
            return Ok(wait);
        }
        let args = arguments(&spec);
        ops::configure(admin.as_ref(), &targets, false, &args)
            .await
            .map_err(|e| pass.database_error(&e))?;
        pass.core.event(
            EventType::Normal,
            "ConfigurationChanged",
            "UpdateDatabaseConfiguration",
            format!("configure {args}"),
        );
        Ok(Outcome::requeue(SOON, "database configuration changed"))
    }
}
