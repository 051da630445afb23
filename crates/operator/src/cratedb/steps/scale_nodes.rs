//! ScaleNodes — seed 000's scaling algorithm as the `Scale` operation (deadline
//! `SCALING_TIMEOUT`, 3600 s, or `spec.timeouts.scalingSeconds`), one action per pass as the
//! pure planner (`plan::scale`) decides: (1) masters, (2) data sets that grow, (3) data sets that
//! shrink — refused with the `ScaleRefused` condition while a table wants more copies than the
//! remaining data nodes hold, else their nodes are excluded from allocation, emptied, and only
//! then removed by lowering the StatefulSet's replicas — and (4) the allocation exclusion reset
//! and node check 1 acknowledged. `status.scale` records the step, so an operator that restarts
//! continues; the finished operation sends the seed's `scale` webhook.

use async_trait::async_trait;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use steward_api::common::{GroupReplicas, OperationChange, OperationKind, OperationPhase};
use steward_api::cratedb::ScaleProgress;

use crate::cratedb::CratePass;
use crate::cratedb::admin::ops;
use crate::cratedb::names::MASTER_SET;
use crate::cratedb::plan::scale::{DbView, ScaleAction, SetReplicas, plan};
use crate::cratedb::steps::apply_statefulsets::{cached, current_replicas};
use crate::cratedb::steps::observe_cluster::node_pods;
use crate::cratedb::steps::{SOON, database, validated};
use crate::error::Error;
use crate::operation::{OperationRequest, Started};
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct ScaleNodes;

/// Wanted and current replicas of every node set, with Pods and joined nodes.
fn sets(pass: &CratePass) -> Result<Vec<SetReplicas>, Error> {
    let valid = validated(pass)?;
    let pods = node_pods(pass);
    let joined = pass
        .observed
        .as_ref()
        .map(|o| o.nodes.clone())
        .unwrap_or_default();
    Ok(valid
        .sets
        .iter()
        .map(|s| {
            let sts = pass.names.statefulset(&s.name);
            let prefix = format!("{sts}-");
            let ours = |name: &str| {
                name.strip_prefix(&prefix)
                    .is_some_and(|o| o.parse::<i32>().is_ok())
            };
            SetReplicas {
                name: s.name.clone(),
                master: s.name == MASTER_SET,
                wanted: s.replicas,
                current: cached(pass, &sts).map_or(0, |x| current_replicas(&x)),
                pods: i32::try_from(pods.iter().filter(|p| ours(&p.name_any())).count())
                    .unwrap_or(i32::MAX),
                joined: i32::try_from(joined.iter().filter(|n| ours(n)).count())
                    .unwrap_or(i32::MAX),
            }
        })
        .collect())
}

/// The webhook's old and new replicas.
fn change(sets: &[SetReplicas]) -> OperationChange {
    let data = |f: fn(&SetReplicas) -> i32| {
        sets.iter()
            .filter(|s| !s.master)
            .map(|s| GroupReplicas {
                name: s.name.clone(),
                replicas: f(s),
            })
            .collect()
    };
    let master = sets.iter().find(|s| s.master);
    OperationChange {
        old_replicas: data(|s| s.current),
        new_replicas: data(|s| s.wanted),
        old_master_replicas: master.map(|m| m.current),
        new_master_replicas: master.map(|m| m.wanted),
        ..OperationChange::default()
    }
}

#[async_trait]
impl SubReconciler<CratePass> for ScaleNodes {
    fn name(&self) -> &'static str {
        "ScaleNodes"
    }

    fn destructive(&self) -> bool {
        true
    }

    async fn reconcile(&self, pass: &mut CratePass) -> Result<Outcome, Error> {
        if !pass.status.bootstrap.done {
            return Ok(Outcome::Continue);
        }
        let sets = sets(pass)?;
        let running = pass
            .core
            .status
            .operation
            .as_ref()
            .is_some_and(|op| op.kind == OperationKind::Scale);
        if !running && pass.status.scale.is_none() && sets.iter().all(|s| s.wanted == s.current) {
            return Ok(Outcome::Continue);
        }
        let Some(observed) = pass.observed.clone() else {
            let why = pass.observe_error.clone().unwrap_or_default();
            return Ok(Outcome::requeue(
                SOON,
                format!("scaling waits for the cluster: {why}"),
            ));
        };
        if !running {
            let started = pass.core.start_operation(OperationRequest {
                kind: OperationKind::Scale,
                step: "Masters".into(),
                total: 4,
                change: change(&sets),
                message: sets
                    .iter()
                    .filter(|s| s.wanted != s.current)
                    .map(|s| format!("{} {} → {}", s.name, s.current, s.wanted))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
            match started {
                Started::New | Started::Resumed => {}
                Started::Busy(kind) => {
                    return Ok(Outcome::requeue(
                        SOON,
                        format!("scaling waits for {kind:?}"),
                    ));
                }
                Started::Blocked(why) => return Ok(Outcome::stop(SOON * 30, why)),
            }
            if pass.status.scale.is_none() {
                pass.status.scale = Some(ScaleProgress {
                    step: 1,
                    excluded: Vec::new(),
                });
            }
        }
        let db = DbView {
            nodes: observed.nodes.clone(),
            shards_by_node: observed.shards_by_node.clone(),
            copies: observed.copies.clone(),
            max_table_replicas: observed.max_table_replicas,
            excluded: observed.excluded.clone(),
        };
        let names = pass.names.clone();
        let action = plan(&sets, &db, true, |set, i| names.pod(set, i));
        let step = action.step();
        if let Some(progress) = pass.status.scale.as_mut() {
            progress.step = progress.step.max(step);
        }
        let system = pass.system.clone();
        let channels = pass.channels()?;
        let nodes = pass.nodes.clone();
        let step_name = |n: u32| match n {
            1 => "Masters",
            2 => "GrowDataSets",
            3 => "ShrinkDataSets",
            _ => "ResetAllocation",
        };
        match action {
            ScaleAction::SetReplicas {
                step,
                set,
                replicas,
            } => {
                let name = pass.names.statefulset(&set);
                let api: Api<k8s_openapi::api::apps::v1::StatefulSet> =
                    pass.ctx.api(&pass.core.namespace);
                let body = serde_json::json!({"spec": {"replicas": replicas}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&body))
                    .await
                    .map_err(|source| {
                        Error::kube(
                            "scale StatefulSet",
                            format!("{}/{name}", pass.core.namespace),
                            source,
                        )
                    })?;
                let note = format!("step {step}: node set {set} to {replicas} nodes");
                // One reason per step: Events of one reason and action are aggregated into a
                // series that keeps the first note.
                let reason = match step {
                    1 => "ScaleMasters",
                    2 => "ScaleUpDataNodes",
                    _ => "ScaleDownDataNodes",
                };
                pass.core
                    .event(EventType::Normal, reason, "Scale", note.clone());
                pass.core.advance_operation(
                    OperationKind::Scale,
                    step_name(step),
                    step - 1,
                    note.clone(),
                );
                Ok(Outcome::requeue(SOON, note))
            }
            ScaleAction::Wait { step, reason } => {
                pass.core.advance_operation(
                    OperationKind::Scale,
                    step_name(step),
                    step - 1,
                    reason.clone(),
                );
                Ok(Outcome::requeue(SOON, reason))
            }
            ScaleAction::Refuse { reason } => {
                let repeated = pass
                    .core
                    .status
                    .operation
                    .as_ref()
                    .is_some_and(|op| op.message == reason);
                if !repeated {
                    pass.core
                        .event(EventType::Warning, "ScaleRefused", "Scale", reason.clone());
                }
                pass.core.degrade("ScaleRefused", reason.clone());
                pass.core.advance_operation(
                    OperationKind::Scale,
                    "ShrinkDataSets",
                    2,
                    reason.clone(),
                );
                Ok(Outcome::requeue(SOON * 5, reason))
            }
            ScaleAction::Exclude { nodes: leaving } => {
                let Some(system) = system else {
                    return Ok(Outcome::requeue(SOON, "no system login"));
                };
                if let Err(e) = ops::exclude(channels.as_ref(), &nodes, &system, &leaving).await {
                    return Err(database(pass, &e));
                }
                if let Some(progress) = pass.status.scale.as_mut() {
                    progress.excluded = leaving.clone();
                }
                let note = format!(
                    "step 3: moving every shard off {} (allocation exclusion)",
                    leaving.join(", ")
                );
                pass.core
                    .event(EventType::Normal, "DrainNodes", "Scale", note.clone());
                pass.core.advance_operation(
                    OperationKind::Scale,
                    "ShrinkDataSets",
                    2,
                    note.clone(),
                );
                Ok(Outcome::requeue(SOON, note))
            }
            ScaleAction::Reset => {
                let Some(system) = system else {
                    return Ok(Outcome::requeue(SOON, "no system login"));
                };
                if let Err(e) = ops::reset_after_scaling(channels.as_ref(), &nodes, &system).await {
                    return Err(database(pass, &e));
                }
                pass.core.event(
                    EventType::Normal,
                    "ResetAllocation",
                    "Scale",
                    "step 4: reset the allocation exclusion and acknowledged node check 1 \
                     (gateway.expected_data_nodes)",
                );
                pass.status.scale = None;
                pass.core.finish_operation(
                    OperationKind::Scale,
                    OperationPhase::Succeeded,
                    sets.iter()
                        .map(|s| format!("{} {}", s.name, s.wanted))
                        .collect::<Vec<_>>()
                        .join(", "),
                );
                Ok(Outcome::Continue)
            }
            ScaleAction::Done => {
                pass.status.scale = None;
                pass.core.finish_operation(
                    OperationKind::Scale,
                    OperationPhase::Succeeded,
                    "nothing left to scale",
                );
                Ok(Outcome::Continue)
            }
        }
    }
}
