//! BounceProcesses — restarts the processes of process groups with `IncorrectCommandLine` (their
//! monitor already runs the new configuration: another command line, or another version) with
//! one `kill`, under the global lock, once every process has been up
//! `minimumUptimeSecondsForBounce` (seed 002). Groups marked for removal are not bounced; a
//! process that must be bounced but does not report is an error.
//!
//! A protocol-changing upgrade restarts every process at once (processes of two protocols
//! cannot form one cluster): the bounce waits until the monitor of every process group not
//! being removed runs the new version's configuration (its binary provided by the sidecar),
//! then kills them all in one command. The seed's list of processes prepared for the upgrade,
//! shared through the lock system between operator instances that each manage a part of one
//! cluster, is not implemented: one Steward manages a whole cluster.

use async_trait::async_trait;

use steward_api::foundationdb::ProcessGroupStatus;

use super::{SOON, condition, conditions as c};
use crate::error::Error;
use crate::foundationdb::admin::ops;
use crate::foundationdb::build::protocol_compatible;
use crate::foundationdb::{FdbPass, lock};
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct BounceProcesses;

/// (pure) The process groups (not being removed) not ready for an upgrade's bounce: their
/// monitor does not run the new configuration yet, or their process is not there to restart.
pub fn unready_for_upgrade(groups: &[ProcessGroupStatus]) -> Vec<String> {
    groups
        .iter()
        .filter(|g| g.removal_timestamp.is_none())
        .filter(|g| {
            condition(g, c::INCORRECT_CONFIG_MAP).is_some()
                || condition(g, c::MISSING_PROCESSES).is_some()
        })
        .map(|g| g.process_group_id.clone())
        .collect()
}

#[async_trait]
impl SubReconciler<FdbPass> for BounceProcesses {
    fn name(&self) -> &'static str {
        "BounceProcesses"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let groups: Vec<String> = pass
            .status
            .process_groups
            .iter()
            .filter(|g| {
                g.removal_timestamp.is_none() && condition(g, c::INCORRECT_COMMAND_LINE).is_some()
            })
            .map(|g| g.process_group_id.clone())
            .collect();
        if groups.is_empty() {
            return Ok(Outcome::Continue);
        }
        let Some(db) = pass.db.clone() else {
            return Ok(Outcome::Continue);
        };
        let version = pass.cluster.spec.version.clone();
        let upgrade = db
            .cluster
            .processes
            .values()
            .any(|p| !p.version.is_empty() && !protocol_compatible(&p.version, &version));
        if upgrade {
            let unready = unready_for_upgrade(&pass.status.process_groups);
            if !unready.is_empty() {
                return Ok(Outcome::requeue(
                    SOON,
                    format!(
                        "the upgrade to {version} restarts every process at once; it waits for {} to run the new configuration",
                        unready.join(", ")
                    ),
                ));
            }
        }
        let minimum = f64::from(pass.cluster.spec.minimum_uptime_seconds_for_bounce);
        if let Some(young) = db
            .cluster
            .processes
            .values()
            .filter(|p| p.uptime_seconds < minimum)
            .min_by(|a, b| a.uptime_seconds.total_cmp(&b.uptime_seconds))
        {
            return Ok(Outcome::requeue(
                SOON.max(std::time::Duration::from_secs_f64(
                    (minimum - young.uptime_seconds).clamp(1.0, 60.0),
                )),
                format!(
                    "bounce of {} waits: {} has been up {:.0}s of minimumUptimeSecondsForBounce {minimum:.0}",
                    groups.join(", "),
                    young.address,
                    young.uptime_seconds
                ),
            ));
        }
        let mut addresses = Vec::new();
        for id in &groups {
            let of: Vec<String> = db.processes_of(id).map(|p| p.address.clone()).collect();
            if of.is_empty() {
                return Err(Error::Database {
                    cluster: format!("{}/{}", pass.core.namespace, pass.core.name),
                    message: format!(
                        "{id} must be bounced but its process does not report to the database"
                    ),
                });
            }
            addresses.extend(of);
        }
        if let Some(wait) = lock::acquire(pass, self.name()).await? {
            return Ok(wait);
        }
        let admin = pass.admin()?;
        ops::kill(admin.as_ref(), &pass.targets(), &addresses)
            .await
            .map_err(|e| pass.database_error(&e))?;
        let message = if upgrade {
            format!(
                "upgrade to {version}: restarted every process at once ({})",
                groups.join(", ")
            )
        } else {
            format!(
                "restarted {} with their new command line",
                groups.join(", ")
            )
        };
        pass.core.event(
            EventType::Normal,
            if upgrade {
                "UpgradeBounced"
            } else {
                "ProcessesBounced"
            },
            "BounceProcesses",
            message,
        );
        Ok(Outcome::requeue(SOON, "processes bounced"))
    }
}
