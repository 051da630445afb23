//! RemoveProcessGroups — for every process group marked for removal, as far as it can get
//! (seed 002): 1. confirm the exclusion is complete (the group is excluded and none of its
//! processes has a role; a group whose process does not report is confirmed with a waiting
//! `exclude`, which returns once nothing is left on it), recorded as `exclusionTimestamp`;
//! 2. delete the Pod; 3. wait until it is gone; 4. delete the claim; 5. wait until it is gone;
//! (6–7: Steward creates no per-group Services); 8. include the groups whose resources are all
//! gone — batched into one `include`, once the last recovery is `minimum recovery time for
//! inclusion` old; 9. drop them from the status. One stuck Pod never holds the others back. A
//! coordinator's Pod is never deleted: it waits for ChangeCoordinators. Groups removed without
//! exclusion skip step 1 and step 8.

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::Api;

use super::{SOON, class_of, delete, exclusion_targets, group_claim, group_pods, now_text};
use crate::error::Error;
use crate::foundationdb::FdbPass;
use crate::foundationdb::admin::ops;
use crate::foundationdb::admin::status::address_ip;
use crate::foundationdb::build::claim_name;
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct RemoveProcessGroups;

#[async_trait]
impl SubReconciler<FdbPass> for RemoveProcessGroups {
    fn name(&self) -> &'static str {
        "RemoveProcessGroups"
    }

    fn destructive(&self) -> bool {
        true
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let removing: Vec<_> = pass
            .status
            .process_groups
            .iter()
            .filter(|g| g.removal_timestamp.is_some())
            .cloned()
            .collect();
        if removing.is_empty() {
            return Ok(Outcome::Continue);
        }
        let ns = pass.core.namespace.clone();
        let pods_api: Api<Pod> = Api::namespaced(pass.ctx.client.clone(), &ns);
        let claims_api: Api<PersistentVolumeClaim> = Api::namespaced(pass.ctx.client.clone(), &ns);
        let pods = group_pods(pass);
        let admin = pass.admin()?;
        let targets = pass.targets();
        let db = pass.db.clone();
        let coordinators: Vec<String> = db
            .as_ref()
            .map(|d| d.coordinator_addresses())
            .unwrap_or_else(|| {
                pass.status
                    .connection_string
                    .as_deref()
                    .map(crate::foundationdb::admin::status::coordinators_of)
                    .unwrap_or_default()
            });
        let stamp = now_text(pass);
        let mut waiting: Vec<String> = Vec::new();
        let mut gone: Vec<String> = Vec::new();
        for g in removing {
            let id = g.process_group_id.clone();
            // 1. The exclusion.
            if g.exclusion_timestamp.is_none() && !g.exclusion_skipped {
                // Its Pod came back on this pass (AddPods): not in the cache yet, its process
                // (perhaps at a new address) not up yet — nothing can be confirmed about it.
                if pass.created_pods.contains(&id) {
                    waiting.push(format!("{id}: its Pod was just created again"));
                    continue;
                }
                let Some(db) = &db else {
                    waiting.push(format!("{id}: no database status to confirm its exclusion"));
                    continue;
                };
                // Every address it has had, or its locality.
                let excluded = (!g.addresses.is_empty()
                    && g.addresses.iter().all(|a| db.is_excluded(a, &id)))
                    || (pass.cluster.spec.use_localities_for_exclusion
                        && db.is_locality_excluded(&id));
                if !excluded {
                    waiting.push(format!("{id}: not excluded yet"));
                    continue;
                }
                let processes: Vec<_> = db.processes_of(&id).collect();
                let done = if processes.is_empty() {
                    // The missing-process rule: a waiting exclude confirms nothing is on it.
                    let what = exclusion_targets(pass, &g);
                    let command = format!("exclude {}", what.join(" "));
                    match ops::cli_any(admin.as_ref(), &targets, &command).await {
                        Ok(out) => out.contains("safe to remove"),
                        Err(e) => {
                            waiting.push(format!("{id}: {e}"));
                            false
                        }
                    }
                } else {
                    processes.iter().all(|p| p.roles.is_empty())
                };
                if !done {
                    waiting.push(format!("{id}: its data is still moving away"));
                    continue;
                }
                if let Some(s) = pass
                    .status
                    .process_groups
                    .iter_mut()
                    .find(|s| s.process_group_id == id)
                {
                    s.exclusion_timestamp = Some(stamp.clone());
                }
            }
            // Never a coordinator's Pod.
            if g.addresses
                .iter()
                .any(|ip| coordinators.iter().any(|c| address_ip(c) == ip))
            {
                waiting.push(format!(
                    "{id}: it is a coordinator (waiting for ChangeCoordinators)"
                ));
                continue;
            }
            // 2–3. The Pod.
            if let Some(pod) = pods.get(&id) {
                if pod.metadata.deletion_timestamp.is_none() {
                    delete(&pods_api, &id, "Pod", &ns).await?;
                    pass.core.event(
                        EventType::Normal,
                        "ProcessGroupRemoving",
                        "RemoveProcessGroups",
                        format!("deleted the Pod of {id}"),
                    );
                }
                waiting.push(format!("{id}: its Pod is terminating"));
                continue;
            }
            // 4–5. The claim.
            let stateful = class_of(pass, &g).is_some_and(|c| c.is_stateful());
            if stateful && let Some(claim) = group_claim(pass, &id) {
                if claim.metadata.deletion_timestamp.is_none() {
                    delete(&claims_api, &claim_name(&id), "PersistentVolumeClaim", &ns).await?;
                }
                waiting.push(format!("{id}: its claim is terminating"));
                continue;
            }
            gone.push(id);
        }
        // 8. Include what was excluded, in one batch, when it is safe.
        if !gone.is_empty() {
            let include: Vec<String> = pass
                .status
                .process_groups
                .iter()
                .filter(|g| gone.contains(&g.process_group_id) && !g.exclusion_skipped)
                .flat_map(|g| exclusion_targets(pass, g))
                .collect();
            let recovered = db.as_ref().map_or(0.0, |d| {
                d.cluster.recovery_state.seconds_since_last_recovered
            });
            if !include.is_empty() {
                if !db.as_ref().is_some_and(|d| d.available())
                    || recovered < pass.settings.min_recovery_seconds_for_inclusion
                {
                    return Ok(Outcome::requeue(
                        Duration::from_secs(10),
                        format!(
                            "{} removed; their inclusion waits until the database is available and the last recovery is {:.0}s old ({recovered:.0}s now)",
                            gone.join(", "),
                            pass.settings.min_recovery_seconds_for_inclusion
                        ),
                    ));
                }
                ops::include(admin.as_ref(), &targets, &include)
                    .await
                    .map_err(|e| pass.database_error(&e))?;
            }
            // 9. Forget them.
            pass.status
                .process_groups
                .retain(|g| !gone.contains(&g.process_group_id));
            pass.core.event(
                EventType::Normal,
                "ProcessGroupsRemoved",
                "RemoveProcessGroups",
                format!("removed {}", gone.join(", ")),
            );
        }
        if waiting.is_empty() {
            Ok(Outcome::Continue)
        } else {
            Ok(Outcome::requeue(SOON, waiting.join("; ")))
        }
    }
}
