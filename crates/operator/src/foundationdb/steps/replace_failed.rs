//! ReplaceFailedProcessGroups — with automatic replacements enabled, marks for removal a
//! process group whose process has been missing (`MissingProcesses`), or whose Pod has been
//! failing (`PodFailing`) or missing (`MissingPod`), for `failureDetectionTimeSeconds`, while
//! fewer than `maxConcurrentReplacements` groups are being removed (seed 002). Only on a pass
//! that read the database status: when the database cannot be asked, no process looks failed.
//! AddProcessGroups adds the replacement on the next pass; the later steps exclude and remove
//! the failed group.

use async_trait::async_trait;

use super::{condition, conditions as c, now_text};
use crate::error::Error;
use crate::foundationdb::FdbPass;
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct ReplaceFailedProcessGroups;

#[async_trait]
impl SubReconciler<FdbPass> for ReplaceFailedProcessGroups {
    fn name(&self) -> &'static str {
        "ReplaceFailedProcessGroups"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let replacements = pass.cluster.spec.automation_options.replacements.clone();
        if !replacements.enabled || pass.db.is_none() || !pass.status.configured {
            return Ok(Outcome::Continue);
        }
        let now = pass.core.now.as_second();
        let limit = i64::from(replacements.failure_detection_time_seconds);
        let removing = pass
            .status
            .process_groups
            .iter()
            .filter(|g| g.removal_timestamp.is_some())
            .count();
        let mut room = usize::try_from(replacements.max_concurrent_replacements)
            .unwrap_or(0)
            .saturating_sub(removing);
        let stamp = now_text(pass);
        let mut replaced = Vec::new();
        for g in &mut pass.status.process_groups {
            if room == 0 {
                break;
            }
            if g.removal_timestamp.is_some() {
                continue;
            }
            let failed = [c::MISSING_PROCESSES, c::POD_FAILING, c::MISSING_POD]
                .into_iter()
                .filter_map(|t| condition(g, t).map(|x| (t, now - x.timestamp)))
                .find(|(_, age)| *age >= limit);
            if let Some((why, age)) = failed {
                g.removal_timestamp = Some(stamp.clone());
                replaced.push(format!("{} ({why} for {age}s)", g.process_group_id));
                room -= 1;
            }
        }
        if !replaced.is_empty() {
            pass.core.event(
                EventType::Warning,
                "ReplacingFailedProcessGroups",
                "ReplaceFailedProcessGroups",
                format!("replacing {}", replaced.join(", ")),
            );
        }
        Ok(Outcome::Continue)
    }
}
