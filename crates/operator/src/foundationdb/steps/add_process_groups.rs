//! AddProcessGroups — marks the process groups of `processGroupsToRemove` (and
//! `processGroupsToRemoveWithoutExclusion`, whose exclusion is skipped) for removal, then adds
//! process groups to the status until each class has its desired count of groups not being
//! removed (seed 002). New groups take the lowest free number of their class and start with
//! `MissingPod`, `MissingPVC` (stateful classes) and `MissingProcesses`; nothing is created
//! here.

use std::collections::BTreeSet;

use async_trait::async_trait;
use steward_api::foundationdb::{ProcessClass, ProcessGroupStatus};

use super::{class_of, conditions as c, desired, now_text, set_condition};
use crate::error::Error;
use crate::foundationdb::FdbPass;
use crate::foundationdb::build::{group_id, parse_group_id};
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct AddProcessGroups;

#[async_trait]
impl SubReconciler<FdbPass> for AddProcessGroups {
    fn name(&self) -> &'static str {
        "AddProcessGroups"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let now = pass.core.now.as_second();
        let stamp = now_text(pass);
        let spec = pass.cluster.spec.clone();
        let mut marked = Vec::new();
        for g in &mut pass.status.process_groups {
            let listed = spec.process_groups_to_remove.contains(&g.process_group_id);
            let unexcluded = spec
                .process_groups_to_remove_without_exclusion
                .contains(&g.process_group_id);
            if (listed || unexcluded) && g.removal_timestamp.is_none() {
                g.removal_timestamp = Some(stamp.clone());
                g.exclusion_skipped = unexcluded;
                marked.push(g.process_group_id.clone());
            }
        }
        if !marked.is_empty() {
            pass.core.event(
                EventType::Normal,
                "RemovalRequested",
                "AddProcessGroups",
                format!("marked for removal as the spec asks: {}", marked.join(", ")),
            );
        }
        let mut added = Vec::new();
        for class in ProcessClass::ALL {
            let active = pass
                .status
                .process_groups
                .iter()
                .filter(|g| class_of(pass, g) == Some(class) && g.removal_timestamp.is_none())
                .count();
            let mut used: BTreeSet<u32> = pass
                .status
                .process_groups
                .iter()
                .filter_map(|g| parse_group_id(&pass.prefix, &g.process_group_id))
                .filter(|(c, _)| *c == class)
                .map(|(_, n)| n)
                .collect();
            for _ in active..desired(pass, class) {
                let n = (1..).find(|n| !used.contains(n)).unwrap_or(1);
                used.insert(n);
                let mut g = ProcessGroupStatus {
                    process_group_id: group_id(&pass.prefix, class, n),
                    process_class: Some(class),
                    ..ProcessGroupStatus::default()
                };
                set_condition(&mut g, c::MISSING_POD, true, now);
                set_condition(&mut g, c::MISSING_PVC, class.is_stateful(), now);
                set_condition(&mut g, c::MISSING_PROCESSES, true, now);
                added.push(g.process_group_id.clone());
                pass.status.process_groups.push(g);
            }
        }
        if !added.is_empty() {
            pass.core.event(
                EventType::Normal,
                "ProcessGroupsAdded",
                "AddProcessGroups",
                format!("added {}", added.join(", ")),
            );
        }
        Ok(Outcome::Continue)
    }
}
