//! ChangeCoordinators — keeps `2R - 1` coordinators on healthy processes, each in its own zone:
//! when a coordinator is gone, excluded or in a process group being removed, or the count or the
//! spread is wrong, it chooses new ones from the processes the database reports (storage first,
//! then log, then stateless; current ones kept where they qualify) and runs `coordinators`
//! under the global lock (seed 002). The new connection string is read on the next pass.

use async_trait::async_trait;
use steward_api::foundationdb::ProcessClass;

use super::SOON;
use crate::error::Error;
use crate::foundationdb::admin::ops;
use crate::foundationdb::admin::status::DbStatus;
use crate::foundationdb::plan::{self, Candidate};
use crate::foundationdb::{FdbPass, lock};
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct ChangeCoordinators;

/// The processes that may be coordinators: reporting, not excluded, of a process group that is
/// known and not being removed, at its Pod's current address, with a zone.
pub fn candidates(pass: &FdbPass, db: &DbStatus) -> Vec<Candidate> {
    db.cluster
        .processes
        .values()
        .filter(|p| !p.excluded && !db.is_excluded(p.ip(), p.instance_id().unwrap_or_default()))
        .filter_map(|p| {
            let id = p.instance_id()?;
            let g = pass
                .status
                .process_groups
                .iter()
                .find(|g| g.process_group_id == id)?;
            // A process at another address than its group's Pod is a recreated Pod's old
            // process, still listed until the database notices it is gone.
            if g.removal_timestamp.is_some() || !g.addresses.iter().any(|a| a == p.ip()) {
                return None;
            }
            let class = ProcessClass::ALL
                .into_iter()
                .find(|c| c.as_str() == p.class_type)?;
            Some(Candidate {
                address: p.address.clone(),
                class,
                zone: p.locality.get("zoneid")?.clone(),
            })
        })
        .collect()
}

/// The candidates coordinators are chosen from: [`candidates`] without the processes whose Pod
/// UpdatePods is about to recreate (`IncorrectPodSpec`) when the others can hold a full set —
/// a recreated Pod comes back at another address, so its coordinator would be lost with it.
/// When they cannot (a rolling update of several zones: every zone's Pods need it), all of them:
/// UpdatePods then takes one zone, so one coordinator, at a time.
pub fn preferred(pass: &FdbPass, db: &DbStatus) -> Vec<Candidate> {
    let all = candidates(pass, db);
    let stale: std::collections::BTreeSet<&str> = pass
        .status
        .process_groups
        .iter()
        .filter(|g| super::condition(g, super::conditions::INCORRECT_POD_SPEC).is_some())
        .flat_map(|g| g.addresses.iter().map(String::as_str))
        .collect();
    if stale.is_empty() {
        return all;
    }
    let fresh: Vec<Candidate> = all
        .iter()
        .filter(|c| !stale.contains(crate::foundationdb::admin::status::address_ip(&c.address)))
        .cloned()
        .collect();
    let want = pass.coordinators_wanted();
    if plan::choose_coordinators(&fresh, &[], want).is_ok() {
        fresh
    } else {
        all
    }
}

#[async_trait]
impl SubReconciler<FdbPass> for ChangeCoordinators {
    fn name(&self) -> &'static str {
        "ChangeCoordinators"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let Some(db) = pass.db.clone() else {
            return Ok(Outcome::Continue);
        };
        if !db.available() || !pass.status.configured {
            return Ok(Outcome::Continue);
        }
        let current = db.coordinator_addresses();
        let candidates = preferred(pass, &db);
        let want = pass.coordinators_wanted();
        let Some(why) = plan::coordinators_need_change(&current, &candidates, want) else {
            return Ok(Outcome::Continue);
        };
        let chosen = match plan::choose_coordinators(&candidates, &current, want) {
            Ok(c) => c,
            Err(e) => {
                return Ok(Outcome::requeue(
                    SOON,
                    format!("coordinators must change ({why}) but {e}"),
                ));
            }
        };
        if let Some(wait) = lock::acquire(pass, self.name()).await? {
            return Ok(wait);
        }
        let admin = pass.admin()?;
        ops::coordinators(admin.as_ref(), &pass.targets(), &chosen)
            .await
            .map_err(|e| pass.database_error(&e))?;
        pass.core.event(
            EventType::Normal,
            "CoordinatorsChanged",
            "ChangeCoordinators",
            format!("{why}: coordinators are now {}", chosen.join(", ")),
        );
        Ok(Outcome::requeue(SOON, "coordinators changed"))
    }
}
