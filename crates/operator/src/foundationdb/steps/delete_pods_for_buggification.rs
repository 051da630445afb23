//! DeletePodsForBuggification — deletes the Pods whose buggification is not the one
//! `spec.buggify` asks for, so that AddPods recreates them with it (seed 002): `crashLoop`
//! process groups run `crash-loop` instead of the monitor (no process starts), `noSchedule`
//! ones require a Node label no Node has (they stay Pending); `*` names every group. The
//! buggification a Pod has is its `steward.dev/buggify` annotation, which the spec hash leaves
//! out, so UpdatePods never acts on it. As the seed says, fewer safety checks apply: every such
//! Pod is deleted at once, without the lock (the seed asks none for this step) or UpdatePods'
//! one-zone rule; buggification is fault injection and often leaves the cluster unhealthy. The
//! pass stops after a deletion and looks again. Groups marked for removal are left alone, as
//! are Pods already terminating.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

use super::{SOON, delete, group_pods};
use crate::error::Error;
use crate::foundationdb::{FdbPass, build};
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct DeletePodsForBuggification;

/// (pure) Of `(id, the Pod's buggification, the spec's)`, the groups whose Pod must be
/// recreated.
pub fn to_recreate<'a>(pods: impl IntoIterator<Item = (&'a str, &'a str, String)>) -> Vec<String> {
    pods.into_iter()
        .filter(|(_, has, wants)| *has != wants.as_str())
        .map(|(id, ..)| id.to_owned())
        .collect()
}

#[async_trait]
impl SubReconciler<FdbPass> for DeletePodsForBuggification {
    fn name(&self) -> &'static str {
        "DeletePodsForBuggification"
    }

    fn destructive(&self) -> bool {
        true
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let pods = group_pods(pass);
        let rows: Vec<(&str, &str, String)> = pass
            .status
            .process_groups
            .iter()
            .filter(|g| g.removal_timestamp.is_none())
            .filter_map(|g| {
                let pod = pods.get(&g.process_group_id)?;
                if pod.metadata.deletion_timestamp.is_some() {
                    return None;
                }
                let has = pod.annotations().get(build::BUGGIFY).unwrap_or("");
                Some((
                    g.process_group_id.as_str(),
                    has,
                    build::buggify_state(&pass.cluster, &g.process_group_id),
                ))
            })
            .collect();
        let ids = to_recreate(rows);
        if ids.is_empty() {
            return Ok(Outcome::Continue);
        }
        let api: Api<Pod> = Api::namespaced(pass.ctx.client.clone(), &pass.core.namespace);
        for id in &ids {
            delete(&api, id, "Pod", &pass.core.namespace).await?;
        }
        pass.core.event(
            EventType::Warning,
            "PodsDeletedForBuggification",
            "DeletePodsForBuggification",
            format!(
                "recreating with spec.buggify's settings: {}",
                ids.join(", ")
            ),
        );
        // The later steps would judge the cluster from Pods that are going away: look again.
        Ok(Outcome::stop(
            SOON,
            format!("recreating Pods for buggification: {}", ids.join(", ")),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pods_whose_buggification_differs_are_recreated() {
        let rows = vec![
            ("demo-storage-1", "", String::new()),
            ("demo-storage-2", "", "crash-loop".to_owned()),
            ("demo-storage-3", "crash-loop", String::new()),
            ("demo-log-1", "crash-loop", "crash-loop".to_owned()),
            (
                "demo-log-2",
                "crash-loop",
                "crash-loop,no-schedule".to_owned(),
            ),
        ];
        assert_eq!(
            to_recreate(rows),
            ["demo-storage-2", "demo-storage-3", "demo-log-2"]
        );
    }
}
