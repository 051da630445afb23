//! BounceProcesses — restarts the processes of process groups with `IncorrectCommandLine` (their
//! monitor already runs the new configuration: another command line, or another version) with
//! one `kill`, under the global lock, once every process has been up
//! `minimumUptimeSecondsForBounce` (seed 002). Groups marked for removal are not bounced; a
//! process that must be bounced but does not report is an error.
//!
//! A protocol-changing upgrade restarts every process at once (processes of two protocols
//! cannot form one cluster): the bounce waits until the monitor of every process group not
//! being removed runs the new version's configuration (its binary provided by the sidecar),
//! then, under the lock, records them as prepared in the database — the seed's list shared
//! between operator instances that each manage a part of one database (`…/upgrades/<version>/
//! <processGroupID>`) — and reads the list back: once every process reporting to the database is
//! on it (this instance's and the others'), it kills them all in one command (every instance's
//! processes: the first instance to see the list complete bounces the whole database) and clears
//! the list. Until then it waits, naming the processes no instance has prepared. The processes of
//! this instance's groups being removed are neither recorded nor killed.

use async_trait::async_trait;

use steward_api::foundationdb::ProcessGroupStatus;

use super::{SOON, condition, conditions as c};
use crate::error::Error;
use std::collections::BTreeSet;

use crate::foundationdb::admin::{cli, ops};
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

/// (pure) An upgrade's bounce across operator instances: of the processes reporting (address,
/// instance ID), the addresses to kill when every one is prepared (its instance ID `recorded`),
/// else `Err` with the addresses of those that are not. Processes of `skipped` groups (this
/// instance's, being removed) play no part.
pub fn upgrade_bounce(
    processes: &[(String, Option<String>)],
    recorded: &std::collections::BTreeSet<String>,
    skipped: &std::collections::BTreeSet<String>,
) -> Result<Vec<String>, Vec<String>> {
    let playing: Vec<&(String, Option<String>)> = processes
        .iter()
        .filter(|(_, id)| !id.as_ref().is_some_and(|i| skipped.contains(i)))
        .collect();
    let unprepared: Vec<String> = playing
        .iter()
        .filter(|(_, id)| !id.as_ref().is_some_and(|i| recorded.contains(i)))
        .map(|(a, id)| format!("{a} ({})", id.as_deref().unwrap_or("no instance ID")))
        .collect();
    if unprepared.is_empty() {
        Ok(playing.iter().map(|(a, _)| a.clone()).collect())
    } else {
        Err(unprepared)
    }
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
        let targets = pass.targets();
        let prefix = cli::upgrades_prefix(&version);
        if upgrade {
            let own: Vec<(Vec<u8>, Vec<u8>)> = pass
                .status
                .process_groups
                .iter()
                .filter(|g| g.removal_timestamp.is_none())
                .map(|g| {
                    (
                        cli::upgrade_key(&version, &g.process_group_id),
                        g.process_group_id.clone().into_bytes(),
                    )
                })
                .collect();
            ops::set_all(admin.as_ref(), &targets, &own)
                .await
                .map_err(|e| pass.database_error(&e))?;
            let recorded: BTreeSet<String> = ops::get_range(
                admin.as_ref(),
                &targets,
                &prefix,
                &cli::prefix_end(&prefix),
                100_000,
            )
            .await
            .map_err(|e| pass.database_error(&e))?
            .into_iter()
            .map(|(_, v)| String::from_utf8_lossy(&v).into_owned())
            .collect();
            let skipped: BTreeSet<String> = pass
                .status
                .process_groups
                .iter()
                .filter(|g| g.removal_timestamp.is_some())
                .map(|g| g.process_group_id.clone())
                .collect();
            let processes: Vec<(String, Option<String>)> = db
                .cluster
                .processes
                .values()
                .map(|p| (p.address.clone(), p.instance_id().map(str::to_owned)))
                .collect();
            match upgrade_bounce(&processes, &recorded, &skipped) {
                Ok(all) => addresses = all,
                Err(unprepared) => {
                    return Ok(Outcome::requeue(
                        SOON,
                        format!(
                            "the upgrade to {version} restarts every process of the database at once; it waits for operator instances to prepare {}",
                            unprepared.join(", ")
                        ),
                    ));
                }
            }
        }
        ops::kill(admin.as_ref(), &targets, &addresses)
            .await
            .map_err(|e| pass.database_error(&e))?;
        if upgrade {
            ops::clear_range(admin.as_ref(), &targets, &prefix, &cli::prefix_end(&prefix))
                .await
                .map_err(|e| pass.database_error(&e))?;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upgrade_bounce_waits_for_every_instances_processes_and_then_takes_them_all() {
        let p = |a: &str, id: Option<&str>| (a.to_owned(), id.map(str::to_owned));
        let set = |ids: &[&str]| ids.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
        let processes = vec![
            p("10.0.0.1:4501", Some("dc1-storage-1")),
            p("10.0.0.2:4501", Some("dc1-storage-2")),
            p("10.0.1.1:4501", Some("dc2-storage-1")),
            p("10.0.0.9:4501", Some("dc1-storage-9")),
        ];
        // dc2's instance has not prepared its process yet; dc1-storage-9 is being removed here.
        let skipped = set(&["dc1-storage-9"]);
        assert_eq!(
            upgrade_bounce(
                &processes,
                &set(&["dc1-storage-1", "dc1-storage-2"]),
                &skipped
            ),
            Err(vec!["10.0.1.1:4501 (dc2-storage-1)".to_owned()])
        );
        assert_eq!(
            upgrade_bounce(
                &processes,
                &set(&["dc1-storage-1", "dc1-storage-2", "dc2-storage-1"]),
                &skipped
            ),
            Ok(vec![
                "10.0.0.1:4501".to_owned(),
                "10.0.0.2:4501".to_owned(),
                "10.0.1.1:4501".to_owned()
            ])
        );
        // A process without an instance ID is nobody's: it holds the bounce.
        let anonymous = vec![p("10.0.0.7:4501", None)];
        assert!(upgrade_bounce(&anonymous, &set(&[]), &set(&[])).is_err());
    }
}
