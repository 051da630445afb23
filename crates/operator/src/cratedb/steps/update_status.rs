//! UpdateStatus — runs first and last. It records the node sets (the StatefulSets' replicas
//! and ready Pods), the selector, and what `ObserveCluster` read: the nodes in the cluster,
//! the elected master and the health. `Available` is true once bootstrap is done and the
//! cluster answers with a master and a health other than RED. Never writes; the runtime
//! writes status once per pass.

use async_trait::async_trait;
use steward_api::common::condition_types;
use steward_api::cratedb::NodeSetStatus;

use crate::conditions::Status;
use crate::cratedb::CratePass;
use crate::cratedb::names::ENGINE;
use crate::cratedb::steps::apply_statefulsets::{cached, current_replicas};
use crate::error::Error;
use crate::pipeline::{Outcome, SubReconciler};
use crate::resources::Labels;

/// See the module documentation.
pub struct UpdateStatus;

#[async_trait]
impl SubReconciler<CratePass> for UpdateStatus {
    fn name(&self) -> &'static str {
        "UpdateStatus"
    }

    async fn reconcile(&self, pass: &mut CratePass) -> Result<Outcome, Error> {
        pass.status.selector = Labels::cluster_selector(ENGINE, &pass.core.name);
        pass.status.replicas = 0;
        if !pass.observe_done {
            return Ok(Outcome::Continue);
        }
        if let Some(valid) = pass.validated.clone() {
            pass.status.node_sets = valid
                .sets
                .iter()
                .map(|s| {
                    let sts = cached(pass, &pass.names.statefulset(&s.name));
                    NodeSetStatus {
                        name: s.name.clone(),
                        replicas: sts.as_deref().map_or(0, current_replicas),
                        ready: sts
                            .as_ref()
                            .and_then(|x| x.status.as_ref())
                            .and_then(|x| x.ready_replicas)
                            .unwrap_or(0),
                    }
                })
                .collect();
        }
        match pass.observed.clone() {
            Some(observed) => {
                pass.status.ready_nodes = i32::try_from(observed.nodes.len()).unwrap_or(i32::MAX);
                pass.status.master_node = observed.master.clone();
                pass.status.health = Some(observed.health.clone());
                let message = format!(
                    "{} nodes, master {}, health {}",
                    observed.nodes.len(),
                    observed.master.as_deref().unwrap_or("none"),
                    observed.health
                );
                if observed.master.is_some() && observed.health != "RED" {
                    pass.core.set_condition(
                        condition_types::AVAILABLE,
                        Status::True,
                        "Healthy",
                        message,
                    );
                } else {
                    let reason = if observed.master.is_none() {
                        "NoMaster"
                    } else {
                        "HealthRed"
                    };
                    pass.core.set_condition(
                        condition_types::AVAILABLE,
                        Status::False,
                        reason,
                        message,
                    );
                }
            }
            None => {
                let why = pass
                    .observe_error
                    .clone()
                    .unwrap_or_else(|| "the cluster did not answer".into());
                pass.status.health = None;
                pass.status.master_node = None;
                // `Unschedulable` also backs the resync off (runtime::context): nothing
                // changes until the scheduler can place a Pod, and a Pod event wakes it then.
                let reason = if let Some(why) = pass.unschedulable.clone() {
                    pass.core.degrade(
                        "Unschedulable",
                        format!("node Pods cannot be scheduled: {why}"),
                    );
                    "Unschedulable"
                } else if pass.status.bootstrap.system_user {
                    "Unreachable"
                } else {
                    "Bootstrapping"
                };
                pass.core
                    .set_condition(condition_types::AVAILABLE, Status::False, reason, why);
            }
        }
        Ok(Outcome::Continue)
    }
}
