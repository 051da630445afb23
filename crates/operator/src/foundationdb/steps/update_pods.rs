//! UpdatePods — recreates the Pods built from an old spec (`IncorrectPodSpec`), the Pods of one
//! zone at a time, under the global lock (seed 002). It waits while any Pod of a group is
//! terminating, and — so that two zones are never down together — while any group misses its
//! Pod or its process (a group marked for removal counts until its exclusion is complete: its
//! storage may still hold data; it never gets a new Pod), and until the database is available,
//! fully replicated and has its coordinators on healthy processes (a recreated Pod gets a new
//! address: its coordinator is replaced before the next zone goes). AddPods creates the new
//! Pods on the next pass.

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use steward_api::foundationdb::ProcessGroupStatus;

use super::{SOON, condition, conditions as c, delete, group_pods};
use crate::error::Error;
use crate::foundationdb::{FdbPass, lock};
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct UpdatePods;

/// (pure) The zone to update now and its groups: the first zone (by name) with a group that
/// needs a new Pod; `Err` says why nothing may be deleted now.
pub fn next_zone(
    groups: &[(String, Option<String>, bool, bool)],
) -> Result<Option<(String, Vec<String>)>, String> {
    // (id, zone, needs a new Pod, is down or terminating)
    if let Some((id, ..)) = groups.iter().find(|g| g.3) {
        return Err(format!("{id} is down or terminating"));
    }
    let mut by_zone: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (id, zone, needs, _) in groups {
        if *needs {
            by_zone
                .entry(zone.clone().unwrap_or_default())
                .or_default()
                .push(id.clone());
        }
    }
    Ok(by_zone.into_iter().next())
}

/// (pure) Of a zone's groups to recreate, `(id, hosts a coordinator)`, those that may go now and
/// those held back: a recreated Pod comes back at another address, so the coordinator it hosted
/// is lost with it, and a majority of the `coordinators` must stay up — at most (n−1)/2 of the
/// coordinator hosts go in one batch (none when there is one coordinator). The held ones wait
/// until ChangeCoordinators has moved their coordinators to Pods already recreated.
pub fn quorum_safe(groups: &[(String, bool)], coordinators: usize) -> (Vec<String>, Vec<String>) {
    let mut room = coordinators.saturating_sub(1) / 2;
    let (mut go, mut held) = (Vec::new(), Vec::new());
    for (id, hosts) in groups {
        if !hosts {
            go.push(id.clone());
        } else if room > 0 {
            room -= 1;
            go.push(id.clone());
        } else {
            held.push(id.clone());
        }
    }
    (go, held)
}

/// (pure) A process group's row for [`next_zone`]: (id, zone, needs a new Pod, is down or
/// terminating); `None` for a group that plays no part. A group marked for removal gets no new
/// Pod, but until its exclusion is complete its storage may still hold data: its being down
/// holds the update back as any other group's (otherwise the update takes a second zone
/// down). Once its exclusion is complete it is left alone.
pub fn row(
    g: &ProcessGroupStatus,
    pod_terminating: bool,
) -> Option<(String, Option<String>, bool, bool)> {
    let removing = g.removal_timestamp.is_some();
    if removing && (g.exclusion_timestamp.is_some() || g.exclusion_skipped) {
        return None;
    }
    let down = [
        c::MISSING_POD,
        c::MISSING_PROCESSES,
        c::TERMINATING,
        c::POD_PENDING,
    ]
    .iter()
    .any(|t| condition(g, t).is_some())
        || pod_terminating;
    Some((
        g.process_group_id.clone(),
        g.fault_domain.clone(),
        !removing && condition(g, c::INCORRECT_POD_SPEC).is_some(),
        down,
    ))
}

#[async_trait]
impl SubReconciler<FdbPass> for UpdatePods {
    fn name(&self) -> &'static str {
        "UpdatePods"
    }

    fn destructive(&self) -> bool {
        true
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let pods = group_pods(pass);
        let groups: Vec<_> = pass
            .status
            .process_groups
            .iter()
            .filter_map(|g| {
                let terminating = pods
                    .get(&g.process_group_id)
                    .is_some_and(|p| p.metadata.deletion_timestamp.is_some());
                row(g, terminating)
            })
            .collect();
        if !groups.iter().any(|g| g.2) {
            return Ok(Outcome::Continue);
        }
        // The cluster must be whole before a zone goes down: available, fully replicated, and
        // its coordinators on healthy processes (a recreated Pod has a new address, so a zone's
        // coordinator is lost with it; the next zone waits for ChangeCoordinators to replace it
        // and for the database to report the new set).
        let Some(db) = pass.db.clone() else {
            return Ok(Outcome::requeue(
                SOON,
                "Pod updates wait for the database status",
            ));
        };
        let want = pass.coordinators_wanted();
        let candidates = super::change_coordinators::preferred(pass, &db);
        let unsafe_because = if !db.available() {
            Some("the database is unavailable".to_owned())
        } else if !db.cluster.data.state.healthy {
            Some(format!(
                "data is not fully replicated ({})",
                db.cluster.data.state.name
            ))
        } else {
            crate::foundationdb::plan::coordinators_need_change(
                &db.coordinator_addresses(),
                &candidates,
                want,
            )
            .map(|why| format!("the coordinators must change first: {why}"))
        };
        if let Some(why) = unsafe_because {
            return Ok(Outcome::requeue(SOON, format!("Pod updates wait: {why}")));
        }
        let (zone, ids) = match next_zone(&groups) {
            Ok(Some(z)) => z,
            Ok(None) => return Ok(Outcome::Continue),
            Err(why) => {
                return Ok(Outcome::requeue(SOON, format!("Pod updates wait: {why}")));
            }
        };
        let coordinators = db.coordinator_addresses();
        let coordinator_ips: Vec<&str> = coordinators
            .iter()
            .map(|a| crate::foundationdb::admin::status::address_ip(a))
            .collect();
        let rows: Vec<(String, bool)> = ids
            .iter()
            .map(|id| {
                let hosts = pass
                    .status
                    .process_groups
                    .iter()
                    .find(|g| &g.process_group_id == id)
                    .is_some_and(|g| {
                        g.addresses
                            .iter()
                            .any(|a| coordinator_ips.contains(&a.as_str()))
                    });
                (id.clone(), hosts)
            })
            .collect();
        let (ids, held) = quorum_safe(&rows, coordinators.len());
        if ids.is_empty() {
            return Ok(Outcome::requeue(
                SOON,
                format!(
                    "Pod updates wait: recreating {} would lose the coordinators' majority; their coordinators move first",
                    held.join(", ")
                ),
            ));
        }
        if let Some(wait) = lock::acquire(pass, self.name()).await? {
            return Ok(wait);
        }
        let api: Api<Pod> = Api::namespaced(pass.ctx.client.clone(), &pass.core.namespace);
        for id in &ids {
            delete(&api, id, "Pod", &pass.core.namespace).await?;
        }
        pass.core.event(
            EventType::Normal,
            "PodsUpdating",
            "UpdatePods",
            format!("recreating the Pods of zone {zone}: {}", ids.join(", ")),
        );
        Ok(Outcome::requeue(
            SOON,
            format!("recreating the Pods of zone {zone}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_api::foundationdb::ProcessGroupCondition;

    fn group(id: &str, zone: &str, conditions: &[&str]) -> ProcessGroupStatus {
        let mut g: ProcessGroupStatus =
            serde_json::from_value(serde_json::json!({"processGroupID": id})).unwrap();
        g.fault_domain = Some(zone.into());
        g.conditions = conditions
            .iter()
            .map(|t| ProcessGroupCondition {
                type_: (*t).to_owned(),
                timestamp: 0,
            })
            .collect();
        g
    }

    #[test]
    fn a_batch_never_takes_a_majority_of_the_coordinators() {
        let rows = |v: &[(&str, bool)]| -> Vec<(String, bool)> {
            v.iter().map(|(i, h)| ((*i).to_owned(), *h)).collect()
        };
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        // One zone with the only coordinator (single mode on one Node): the others first.
        assert_eq!(
            quorum_safe(
                &rows(&[("s1", true), ("s2", false), ("l1", false), ("x1", false)]),
                1
            ),
            (s(&["s2", "l1", "x1"]), s(&["s1"]))
        );
        assert_eq!(quorum_safe(&rows(&[("s1", true)]), 1), (s(&[]), s(&["s1"])));
        // Three coordinators: one of them may go with its zone; five: two.
        assert_eq!(
            quorum_safe(&rows(&[("a", true), ("b", true), ("c", false)]), 3),
            (s(&["a", "c"]), s(&["b"]))
        );
        assert_eq!(
            quorum_safe(&rows(&[("a", true), ("b", true), ("c", true)]), 5),
            (s(&["a", "b"]), s(&["c"]))
        );
    }

    #[test]
    fn a_down_group_being_removed_holds_the_update_back_until_its_exclusion_completed() {
        // Found by the simulation (FDB_SIM_SEED=39): storage-6 (zone n3) was marked for
        // removal with its process gone and its data not moved; UpdatePods deleted zone n1's
        // Pods, so storage holding data was down in two zones.
        let update = group("demo-storage-1", "n1", &[c::INCORRECT_POD_SPEC]);
        let mut removing = group("demo-storage-6", "n3", &[c::MISSING_PROCESSES]);
        removing.removal_timestamp = Some("2027-01-15T08:00:00Z".into());
        let rows: Vec<_> = [&update, &removing]
            .into_iter()
            .filter_map(|g| row(g, false))
            .collect();
        assert_eq!(
            next_zone(&rows),
            Err("demo-storage-6 is down or terminating".to_owned())
        );
        // Excluded and drained: it no longer counts, and it never needs a new Pod.
        removing.exclusion_timestamp = Some("2027-01-15T08:05:00Z".into());
        let rows: Vec<_> = [&update, &removing]
            .into_iter()
            .filter_map(|g| row(g, false))
            .collect();
        assert_eq!(
            next_zone(&rows),
            Ok(Some(("n1".to_owned(), vec!["demo-storage-1".to_owned()])))
        );
        let mut stale = group("demo-storage-2", "n2", &[c::INCORRECT_POD_SPEC]);
        stale.removal_timestamp = Some("2027-01-15T08:00:00Z".into());
        assert_eq!(row(&stale, false).map(|r| r.2), Some(false));
    }
}
