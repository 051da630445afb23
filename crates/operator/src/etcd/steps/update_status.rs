//! UpdateStatus — runs first and last (seed step 5). Computes the engine's status from what
//! `ObserveCluster` saw: the member list (name, ID, peer URL, healthy, learner, leader,
//! version), `quorate`, `readyMembers`, `replicas` (voting members, for the scale
//! subresource), the cluster version, and the `Quorate` and `Available` conditions. An
//! unreachable cluster is reported as not available with the reason (`Unschedulable` with the
//! scheduler's message when no member Pod can be placed, and `Degraded=Unschedulable` while any
//! cannot); a cluster that answers
//! without a majority as `Quorate=False`. Finishes the `Bootstrap` operation once the initial
//! members formed a quorate cluster. Never writes; the runtime writes status once per pass.

use async_trait::async_trait;
use steward_api::common::{OperationKind, OperationPhase, condition_types};
use steward_api::etcd::EtcdMemberStatus;

use crate::conditions::Status;
use crate::error::Error;
use crate::etcd::EtcdPass;
use crate::etcd::topology::quorum;
use crate::pipeline::{Outcome, SubReconciler};
use crate::resources::Labels;

/// See the module documentation.
pub struct UpdateStatus;

#[async_trait]
impl SubReconciler<EtcdPass> for UpdateStatus {
    fn name(&self) -> &'static str {
        "UpdateStatus"
    }

    async fn reconcile(&self, pass: &mut EtcdPass) -> Result<Outcome, Error> {
        let name = pass.core.name.clone();
        pass.status.selector = format!(
            "{},{}",
            Labels::cluster_selector("etcd", &name),
            "app.kubernetes.io/component=member"
        );
        let generation = pass.core.generation;
        let wanted = pass.cluster.spec.replicas;
        if !pass.observe_done {
            // First run: nothing observed yet on this pass; keep the stored view.
            pass.core.status.generations.needs_scale =
                (pass.status.replicas != wanted).then_some(generation);
            return Ok(Outcome::Continue);
        }
        if let Some(why) = pass.unschedulable.clone() {
            pass.core.degrade(
                "Unschedulable",
                format!("member Pods cannot be scheduled: {why}"),
            );
        }
        match pass.observed.clone() {
            Some(observed) => {
                let leader = observed.leader();
                let mut members: Vec<EtcdMemberStatus> = observed
                    .members
                    .iter()
                    .map(|m| EtcdMemberStatus {
                        name: observed.name_of(m, &pass.names).unwrap_or_default(),
                        id: format!("{:x}", m.id),
                        peer_url: m.peer_urls.first().cloned().unwrap_or_default(),
                        healthy: observed.healthy(m.id),
                        learner: m.is_learner,
                        leader: leader == Some(m.id),
                        version: observed.statuses.get(&m.id).map(|s| s.version.clone()),
                    })
                    .collect();
                members.sort_by(|a, b| a.name.cmp(&b.name));
                let voters = observed.voters().count();
                let healthy = observed.healthy_voters();
                let quorate = observed.quorate();
                pass.status.members = members;
                pass.status.quorate = Some(quorate);
                pass.status.ready_members = i32::try_from(healthy).unwrap_or(i32::MAX);
                pass.status.replicas = i32::try_from(voters).unwrap_or(i32::MAX);
                pass.status.cluster_version = observed.min_version();
                if quorate {
                    // A quorum the linearizable member list proved, while fewer members answered
                    // their status call: said as it is, never as a lost majority (issue 33).
                    let (reason, why) = if healthy >= quorum(voters) {
                        (
                            "MajorityHealthy",
                            format!("{healthy} of {voters} voting members healthy"),
                        )
                    } else {
                        (
                            "QuorumConfirmed",
                            format!(
                                "the member list was read through the leader (a quorum answered); \
                                 {healthy} of {voters} voting members answered their status call \
                                 in time"
                            ),
                        )
                    };
                    pass.core
                        .set_condition("Quorate", Status::True, reason, why.clone());
                    pass.core.set_condition(
                        condition_types::AVAILABLE,
                        Status::True,
                        "Quorate",
                        format!("{why}; leader elected"),
                    );
                    let bootstrapping = pass
                        .core
                        .status
                        .operation
                        .as_ref()
                        .is_some_and(|op| op.kind == OperationKind::Bootstrap);
                    if bootstrapping && healthy == voters {
                        pass.core.finish_operation(
                            OperationKind::Bootstrap,
                            OperationPhase::Succeeded,
                            format!("{voters} members formed a cluster"),
                        );
                    }
                } else {
                    let why = format!(
                        "{healthy} of {voters} voting members healthy{}",
                        if leader.is_none() { ", no leader" } else { "" }
                    );
                    pass.core.set_condition(
                        "Quorate",
                        Status::False,
                        "MajorityUnhealthy",
                        why.clone(),
                    );
                    pass.core.set_condition(
                        condition_types::AVAILABLE,
                        Status::False,
                        "NotQuorate",
                        why,
                    );
                }
                pass.core.status.generations.needs_scale =
                    (i32::try_from(voters).unwrap_or(0) != wanted).then_some(generation);
            }
            None => {
                let why = pass
                    .observe_error
                    .clone()
                    .unwrap_or_else(|| "the cluster did not answer".into());
                pass.status.quorate = None;
                pass.status.ready_members = 0;
                for m in &mut pass.status.members {
                    m.healthy = false;
                    m.leader = false;
                }
                let reason = if pass.unschedulable.is_some() {
                    "Unschedulable"
                } else {
                    "Unreachable"
                };
                pass.core
                    .set_condition("Quorate", Status::Unknown, reason, why.clone());
                pass.core
                    .set_condition(condition_types::AVAILABLE, Status::False, reason, why);
                pass.core.status.generations.needs_scale =
                    (pass.status.replicas != wanted).then_some(generation);
            }
        }
        Ok(Outcome::Continue)
    }
}
