//! ExcludeProcesses — excludes the process groups marked for removal that are not excluded yet,
//! all at once in one `exclude` (one recovery at most), under the global lock (seed 002). It
//! does not wait for the data to move. It only runs when it is safe: the database is available,
//! few transaction-system generations are alive, and the last recovery is at least
//! `minimum recovery time for exclusion` old. Per class it excludes at most the budget
//! (`plan::exclusion_budget`: groups with their process, less the desired count, less the
//! exclusions under way), and nothing of a class while one of its groups has been missing its
//! process for under 5 minutes. Groups removed without exclusion are skipped.

use std::time::Duration;

use async_trait::async_trait;
use steward_api::foundationdb::ProcessClass;

use super::{class_of, condition, conditions as c, desired, exclusion_targets, plan_groups};
use crate::error::Error;
use crate::foundationdb::admin::ops;
use crate::foundationdb::{FdbPass, lock, plan};
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// How soon to look again when an exclusion is not safe yet.
const WAIT: Duration = Duration::from_secs(10);

/// See the module documentation.
pub struct ExcludeProcesses;

#[async_trait]
impl SubReconciler<FdbPass> for ExcludeProcesses {
    fn name(&self) -> &'static str {
        "ExcludeProcesses"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let pending: Vec<_> = pass
            .status
            .process_groups
            .iter()
            .filter(|g| {
                g.removal_timestamp.is_some()
                    && !g.exclusion_skipped
                    && g.exclusion_timestamp.is_none()
                    && condition(g, c::EXCLUDED).is_none()
            })
            .cloned()
            .collect();
        if pending.is_empty() {
            return Ok(Outcome::Continue);
        }
        let Some(db) = pass.db.clone() else {
            return Ok(Outcome::requeue(
                WAIT,
                "exclusions wait for the database status",
            ));
        };
        let settings = pass.settings;
        let recovery = &db.cluster.recovery_state;
        let unsafe_because = if !db.available() {
            Some("the database is unavailable".to_owned())
        } else if recovery.active_generations > settings.max_active_generations {
            Some(format!(
                "{} transaction-system generations are alive",
                recovery.active_generations
            ))
        } else if recovery.seconds_since_last_recovered
            < settings.min_recovery_seconds_for_exclusion
        {
            Some(format!(
                "the last recovery was {:.0}s ago (at least {:.0}s wanted)",
                recovery.seconds_since_last_recovered, settings.min_recovery_seconds_for_exclusion
            ))
        } else {
            None
        };
        if let Some(why) = unsafe_because {
            return Ok(Outcome::requeue(WAIT, format!("no exclusion now: {why}")));
        }
        let mut targets = Vec::new();
        let mut excluded = Vec::new();
        let mut held = Vec::new();
        for class in ProcessClass::ALL {
            let of_class: Vec<_> = pending
                .iter()
                .filter(|g| class_of(pass, g) == Some(class))
                .collect();
            if of_class.is_empty() {
                continue;
            }
            let groups = plan_groups(pass, class);
            let ongoing = groups
                .iter()
                .filter(|g| g.removing && g.excluded)
                .filter(|g| {
                    pass.status
                        .process_groups
                        .iter()
                        .any(|s| s.process_group_id == g.id && s.exclusion_timestamp.is_none())
                })
                .count();
            match plan::exclusion_budget(&groups, desired(pass, class), ongoing) {
                Err(why) => held.push(format!("{}: {why}", class.as_str())),
                Ok(0) => held.push(format!(
                    "{}: no budget (waiting for new processes to come up)",
                    class.as_str()
                )),
                Ok(budget) => {
                    for g in of_class.into_iter().take(budget) {
                        let t = exclusion_targets(pass, g);
                        if t.is_empty() {
                            held.push(format!("{}: no address to exclude yet", g.process_group_id));
                            continue;
                        }
                        targets.extend(t);
                        excluded.push(g.process_group_id.clone());
                    }
                }
            }
        }
        if targets.is_empty() {
            return Ok(Outcome::requeue(
                WAIT,
                format!("no exclusion now: {}", held.join("; ")),
            ));
        }
        if let Some(wait) = lock::acquire(pass, self.name()).await? {
            return Ok(wait);
        }
        let admin = pass.admin()?;
        ops::exclude(admin.as_ref(), &pass.targets(), &targets)
            .await
            .map_err(|e| pass.database_error(&e))?;
        pass.core.event(
            EventType::Normal,
            "ProcessesExcluded",
            "ExcludeProcesses",
            format!("excluded {} ({})", excluded.join(", "), targets.join(" ")),
        );
        let now = pass.core.now.as_second();
        for g in &mut pass.status.process_groups {
            if excluded.contains(&g.process_group_id) {
                super::set_condition(g, c::EXCLUDED, true, now);
            }
        }
        Ok(Outcome::requeue(
            WAIT,
            "waiting for excluded processes to drain",
        ))
    }
}
