//! ChooseRemovals — when a class has more process groups than it should, marks the ones to
//! remove so that the rest stay spread over as many fault domains as possible
//! (`plan::choose_removals`), by setting their `removalTimestamp` (seed 002). Later steps do
//! the removal.

use async_trait::async_trait;
use steward_api::foundationdb::ProcessClass;

use super::{desired, now_text, plan_groups};
use crate::error::Error;
use crate::foundationdb::{FdbPass, plan};
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct ChooseRemovals;

#[async_trait]
impl SubReconciler<FdbPass> for ChooseRemovals {
    fn name(&self) -> &'static str {
        "ChooseRemovals"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let stamp = now_text(pass);
        let mut chosen = Vec::new();
        for class in ProcessClass::ALL {
            chosen.extend(plan::choose_removals(
                &plan_groups(pass, class),
                desired(pass, class),
            ));
        }
        if chosen.is_empty() {
            return Ok(Outcome::Continue);
        }
        for g in &mut pass.status.process_groups {
            if chosen.contains(&g.process_group_id) {
                g.removal_timestamp = Some(stamp.clone());
            }
        }
        pass.core.event(
            EventType::Normal,
            "RemovalsChosen",
            "ChooseRemovals",
            format!("to remove: {}", chosen.join(", ")),
        );
        Ok(Outcome::Continue)
    }
}
