//! ScaleMembers — with a quorate cluster, changes membership by exactly one step per pass
//! toward `replicas` (seed step 3): a new member joins as a learner and is promoted once etcd
//! says it caught up; a member leaves only if the remaining healthy voters still form a quorum,
//! the highest ordinal first and never the leader (leadership moves away first). The whole run
//! is a `Scale` operation with progress and the `SCALING_TIMEOUT` deadline; removals stop
//! while a failed operation blocks destructive work. While a `Recover` operation runs (a member
//! that lost its data was removed by `RecoverMembers`), the new member is added under that
//! operation instead, which this step finishes once membership matches `replicas` again.
//! A new member never takes a name whose Pod or claim is stranded on a lost Node (the Pod
//! stays Terminating there, the volume lives there): it takes the next free ordinal.

use std::time::Duration;

use async_trait::async_trait;
use steward_api::common::{GroupReplicas, OperationChange, OperationKind, OperationPhase};

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::error::Error;
use crate::etcd::EtcdPass;
use crate::etcd::admin::AdminError;
use crate::etcd::names::peer_of_claim;
use crate::etcd::topology::{MemberAction, plan_members};
use crate::operation::{OperationRequest, Started};
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::resources::nodes::{self, NodeState, SELECTED_NODE, state as node_state};

/// See the module documentation.
pub struct ScaleMembers;

const SOON: Duration = Duration::from_secs(2);

/// The operation record's member count (group `members`).
pub(crate) fn group(replicas: usize) -> Vec<GroupReplicas> {
    vec![GroupReplicas {
        name: "members".into(),
        replicas: i32::try_from(replicas).unwrap_or(i32::MAX),
    }]
}

/// Member names whose Pod is bound to, or whose claim's volume lives on, a lost Node.
fn stranded(pass: &EtcdPass) -> Vec<String> {
    let (ns, cluster) = (&pass.core.namespace, &pass.core.name);
    let nodes = &pass.stores.nodes;
    let lost = |node: &str| {
        nodes
            .get(&ObjectRef::new(node))
            .is_some_and(|n| node_state(&n) == NodeState::Lost)
    };
    let mut names: Vec<String> = pass
        .stores
        .pods
        .of_instance(ns, cluster)
        .iter()
        .filter(|p| nodes::of_pod(nodes, p).1 == NodeState::Lost)
        .map(|p| p.name_any())
        .collect();
    for claim in pass.stores.claims.of_instance(ns, cluster) {
        let on_lost = claim.annotations().get(SELECTED_NODE).is_some_and(&lost);
        if on_lost && let Some(member) = peer_of_claim(&claim.name_any()) {
            names.push(member.to_owned());
        }
    }
    names.sort();
    names.dedup();
    names
}

/// A database error on this cluster.
pub(crate) fn database(pass: &EtcdPass, err: &AdminError) -> Error {
    Error::Database {
        cluster: format!("{}/{}", pass.core.namespace, pass.core.name),
        message: err.to_string(),
    }
}

#[async_trait]
impl SubReconciler<EtcdPass> for ScaleMembers {
    fn name(&self) -> &'static str {
        "ScaleMembers"
    }

    async fn reconcile(&self, pass: &mut EtcdPass) -> Result<Outcome, Error> {
        let Some(observed) = pass.observed.clone().filter(|o| o.quorate()) else {
            return Ok(Outcome::Continue);
        };
        let replicas = usize::try_from(pass.cluster.spec.replicas.max(1)).unwrap_or(1);
        let voters = observed.voters().count();
        let action = plan_members(&observed, replicas, &pass.names, &stranded(pass));
        let running = pass
            .core
            .status
            .operation
            .as_ref()
            .map(|op| (op.kind, op.done));
        if action == MemberAction::Converged {
            match running {
                Some((OperationKind::Scale, _)) => pass.core.finish_operation(
                    OperationKind::Scale,
                    OperationPhase::Succeeded,
                    format!("{voters} voting members"),
                ),
                Some((OperationKind::Recover, _)) => pass.core.finish_operation(
                    OperationKind::Recover,
                    OperationPhase::Succeeded,
                    format!("{voters} voting members; the replacement members joined"),
                ),
                _ => {}
            }
            return Ok(Outcome::Continue);
        }
        if let Some((OperationKind::Recover, done)) = running {
            // Re-adding replaced members is part of the recovery.
            let Some(admin) = pass.admin.take() else {
                return Ok(Outcome::requeue(SOON, "no admin session"));
            };
            let result = execute(pass, admin.as_ref(), action, OperationKind::Recover, done).await;
            pass.admin = Some(admin);
            return result;
        }
        let started = pass.core.start_operation(OperationRequest {
            kind: OperationKind::Scale,
            step: "PlanMembers".into(),
            total: u32::try_from(voters.abs_diff(replicas)).unwrap_or(1).max(1),
            change: OperationChange {
                old_replicas: group(voters),
                new_replicas: group(replicas),
                ..OperationChange::default()
            },
            message: format!("scaling from {voters} to {replicas} voting members"),
        });
        match started {
            Started::New | Started::Resumed => {}
            Started::Busy(kind) => {
                return Ok(Outcome::requeue(
                    Duration::from_secs(5),
                    format!("scaling waits for the running {} operation", kind.as_str()),
                ));
            }
            Started::Blocked(why) => {
                pass.core.degrade("OperationFailed", why);
                return Ok(Outcome::Continue);
            }
        }
        let old = pass
            .core
            .status
            .operation
            .as_ref()
            .and_then(|op| op.change.old_replicas.first())
            .map_or(voters, |g| usize::try_from(g.replicas).unwrap_or(voters));
        let done = u32::try_from(old.abs_diff(voters)).unwrap_or(0);
        let Some(admin) = pass.admin.take() else {
            return Ok(Outcome::requeue(SOON, "no admin session"));
        };
        let result = execute(pass, admin.as_ref(), action, OperationKind::Scale, done).await;
        pass.admin = Some(admin);
        result
    }
}

/// Makes the change, recording progress in the running operation of `kind`.
async fn execute(
    pass: &mut EtcdPass,
    admin: &dyn crate::etcd::admin::EtcdAdmin,
    action: MemberAction,
    kind: OperationKind,
    done: u32,
) -> Result<Outcome, Error> {
    let step = |a: &MemberAction| match a {
        MemberAction::WaitForStart { .. } => "WaitForMember",
        MemberAction::Promote { .. } => "PromoteLearner",
        MemberAction::Add { .. } => "AddMember",
        MemberAction::MoveLeader { .. } => "MoveLeader",
        MemberAction::Remove { .. } => "RemoveMember",
        MemberAction::Wait(_) | MemberAction::Converged => "Wait",
    };
    let name = step(&action);
    match action {
        MemberAction::Converged => Ok(Outcome::Continue),
        MemberAction::WaitForStart { name: member } => {
            pass.core.advance_operation(
                kind,
                name,
                done,
                format!("waiting for new member {member} to start"),
            );
            Ok(Outcome::requeue(
                SOON,
                format!("waiting for {member} to start"),
            ))
        }
        MemberAction::Wait(why) => {
            pass.core.advance_operation(kind, name, done, why.clone());
            Ok(Outcome::requeue(Duration::from_secs(5), why))
        }
        MemberAction::Promote { id, name: member } => match admin.member_promote(id).await {
            Ok(()) => {
                pass.core.event(
                    EventType::Normal,
                    "MemberPromoted",
                    "ScaleMembers",
                    format!("learner {member} caught up and became a voting member"),
                );
                pass.core
                    .advance_operation(kind, name, done + 1, format!("promoted {member}"));
                if let Some(m) = pass
                    .observed
                    .as_mut()
                    .and_then(|o| o.members.iter_mut().find(|m| m.id == id))
                {
                    m.is_learner = false;
                }
                Ok(Outcome::requeue(SOON, "member promoted"))
            }
            Err(AdminError::LearnerNotReady(_)) => {
                pass.core.advance_operation(
                    kind,
                    name,
                    done,
                    format!("learner {member} is catching up"),
                );
                Ok(Outcome::requeue(SOON, "learner catching up"))
            }
            Err(err) if err.is_transient() => Ok(Outcome::requeue(SOON, err.to_string())),
            Err(err) => Err(database(pass, &err)),
        },
        MemberAction::Add {
            name: member,
            peer_url,
        } => match admin
            .member_add(std::slice::from_ref(&peer_url), true)
            .await
        {
            Ok(added) => {
                pass.core.event(
                    EventType::Normal,
                    "MemberAdded",
                    "ScaleMembers",
                    format!("added {member} as a learner"),
                );
                pass.core.advance_operation(
                    kind,
                    name,
                    done,
                    format!("added {member} as a learner; waiting for it to start"),
                );
                // The peer is created from this member list later in the same pass.
                if let Some(obs) = pass.observed.as_mut() {
                    obs.members = added.members;
                }
                Ok(Outcome::requeue(SOON, format!("{member} added")))
            }
            Err(err) if err.is_transient() || err == AdminError::TooManyLearners => {
                Ok(Outcome::requeue(SOON, err.to_string()))
            }
            Err(err) => Err(database(pass, &err)),
        },
        MemberAction::MoveLeader { from, to } => {
            if let Some(why) = pass.core.destructive_block() {
                return Ok(Outcome::requeue(Duration::from_secs(30), why));
            }
            let from_name = member_name(pass, from);
            let Some(url) = pass.endpoints.get(&from_name).cloned() else {
                return Ok(Outcome::requeue(SOON, "leader has no endpoint"));
            };
            match admin.move_leader(&url, to).await {
                Ok(()) => {
                    let to_name = member_name(pass, to);
                    pass.core.event(
                        EventType::Normal,
                        "LeaderMoved",
                        "ScaleMembers",
                        format!("moved leadership from {from_name} to {to_name} before removing {from_name}"),
                    );
                    pass.core.advance_operation(
                        kind,
                        name,
                        done,
                        format!("leadership moved to {to_name}"),
                    );
                    Ok(Outcome::requeue(SOON, "leader moved"))
                }
                Err(err) if err.is_transient() => Ok(Outcome::requeue(SOON, err.to_string())),
                Err(err) => Err(database(pass, &err)),
            }
        }
        MemberAction::Remove { id, name: member } => {
            if let Some(why) = pass.core.destructive_block() {
                return Ok(Outcome::requeue(Duration::from_secs(30), why));
            }
            match admin.member_remove(id).await {
                Ok(()) | Err(AdminError::MemberNotFound(_)) => {
                    pass.core.event(
                        EventType::Normal,
                        "MemberRemoved",
                        "ScaleMembers",
                        format!("removed {member} from the cluster"),
                    );
                    pass.core
                        .advance_operation(kind, name, done + 1, format!("removed {member}"));
                    // Its peer is deleted from this member list later in the same pass.
                    if let Some(obs) = pass.observed.as_mut() {
                        obs.members.retain(|m| m.id != id);
                        obs.statuses.remove(&id);
                    }
                    Ok(Outcome::requeue(SOON, format!("{member} removed")))
                }
                Err(err) if err.is_transient() => Ok(Outcome::requeue(SOON, err.to_string())),
                Err(err) => Err(database(pass, &err)),
            }
        }
    }
}

fn member_name(pass: &EtcdPass, id: u64) -> String {
    pass.observed
        .as_ref()
        .and_then(|o| o.members.iter().find(|m| m.id == id))
        .map_or_else(|| format!("{id:x}"), |m| m.name.clone())
}
