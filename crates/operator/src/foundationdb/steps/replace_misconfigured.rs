//! ReplaceMisconfiguredProcessGroups — marks for removal (`removalTimestamp`) a stateful process
//! group whose claim was created with another size or StorageClass than `spec.storage` asks for
//! (its `steward.dev/claim-spec` annotation): a claim cannot be shrunk or moved to another
//! class, so the group is brought up anew on a new claim, as the seed's "Replacements and
//! Deletions" do for a changed volume claim template. AddProcessGroups adds the replacement on
//! the next pass; ExcludeProcesses moves the data away and RemoveProcessGroups removes the old
//! group, so no copy is lost. At most `maxConcurrentReplacements` groups are being removed at
//! once (the budget ReplaceFailedProcessGroups shares). A claim without the annotation (created
//! before Steward wrote it) is never judged. Groups already marked are left alone.

use async_trait::async_trait;

use super::{class_of, group_claim, now_text};
use crate::error::Error;
use crate::foundationdb::{FdbPass, build};
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct ReplaceMisconfiguredProcessGroups;

/// (pure) Of `(id, its claim's recorded spec)` of the groups not marked for removal, the ones to
/// replace now: those whose claim differs from `wanted`, first by ID, at most `room`.
pub fn choose(claims: &[(String, Option<String>)], wanted: &str, room: usize) -> Vec<String> {
    claims
        .iter()
        .filter(|(_, has)| has.as_deref().is_some_and(|h| h != wanted))
        .map(|(id, _)| id.clone())
        .take(room)
        .collect()
}

#[async_trait]
impl SubReconciler<FdbPass> for ReplaceMisconfiguredProcessGroups {
    fn name(&self) -> &'static str {
        "ReplaceMisconfiguredProcessGroups"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        if !pass.status.configured {
            return Ok(Outcome::Continue);
        }
        let wanted = build::claim_spec_text(&pass.cluster.spec.storage);
        let claims: Vec<(String, Option<String>)> = pass
            .status
            .process_groups
            .iter()
            .filter(|g| g.removal_timestamp.is_none())
            .filter(|g| class_of(pass, g).is_some_and(|c| c.is_stateful()))
            .filter_map(|g| {
                let claim = group_claim(pass, &g.process_group_id)?;
                let has = claim
                    .annotations()
                    .get(build::CLAIM_SPEC)
                    .map(str::to_owned);
                Some((g.process_group_id.clone(), has))
            })
            .collect();
        let removing = pass
            .status
            .process_groups
            .iter()
            .filter(|g| g.removal_timestamp.is_some())
            .count();
        let room = usize::try_from(
            pass.cluster
                .spec
                .automation_options
                .replacements
                .max_concurrent_replacements,
        )
        .unwrap_or(0)
        .saturating_sub(removing);
        let ids = choose(&claims, &wanted, room);
        let waiting = claims
            .iter()
            .filter(|(_, has)| has.as_deref().is_some_and(|h| h != wanted))
            .count()
            .saturating_sub(ids.len());
        if ids.is_empty() {
            return Ok(if waiting > 0 {
                Outcome::requeue(
                    super::SOON,
                    format!(
                        "{waiting} process groups wait to be replaced for spec.storage (maxConcurrentReplacements)"
                    ),
                )
            } else {
                Outcome::Continue
            });
        }
        let stamp = now_text(pass);
        for g in &mut pass.status.process_groups {
            if ids.contains(&g.process_group_id) {
                g.removal_timestamp = Some(stamp.clone());
            }
        }
        pass.core.event(
            EventType::Normal,
            "ReplacingMisconfiguredProcessGroups",
            "ReplaceMisconfiguredProcessGroups",
            format!(
                "replacing {} (their claims are not spec.storage's {})",
                ids.join(", "),
                wanted.trim_end_matches('|')
            ),
        );
        Ok(Outcome::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_of_another_spec_are_replaced_within_the_budget_and_unknown_ones_never() {
        let claims = vec![
            ("demo-log-1".to_owned(), Some("1Gi|".to_owned())),
            ("demo-storage-1".to_owned(), Some("2Gi|".to_owned())),
            ("demo-storage-2".to_owned(), Some("1Gi|".to_owned())),
            ("demo-storage-3".to_owned(), None),
        ];
        assert_eq!(choose(&claims, "2Gi|", 1), ["demo-log-1"]);
        assert_eq!(choose(&claims, "2Gi|", 5), ["demo-log-1", "demo-storage-2"]);
        assert!(choose(&claims, "2Gi|", 0).is_empty());
        assert!(choose(&claims[..1], "1Gi|", 5).is_empty());
    }
}
