//! RollingRestart — seed 001's rolling restart as the `Restart` operation (or `Upgrade` when
//! the image changed; deadlines `RESTART_TIMEOUT` / `UPGRADE_TIMEOUT`, 3600 s): masters in
//! ordinal order, then each data set in spec order, each in ordinal order. A node is restarted
//! by deleting its Pod (UID precondition); the StatefulSet (`OnDelete`) brings it back with the
//! current template; the restart waits for the new Pod to be ready and join the cluster, then
//! for the health gate — GREEN `spec.restart.greenReadings` times in a row,
//! `greenIntervalSeconds` apart (3 and 30 s by default) — before the next node. The pure
//! planner (`plan::restart`) decides; `status.restart` records the Pod, the old UID and the
//! readings, so an operator that restarts continues exactly there.
//!
//! Triggers: a new image (`spec.cluster.imageRegistry` / `version`) — the seed's upgrade,
//! with its `upgrade` webhook — or a new `steward.dev/restarted-at` annotation in
//! `spec.podTemplate.annotations` (the REST API's and `steward restart`'s way).

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Preconditions};
use steward_api::common::{OperationChange, OperationKind, OperationPhase};
use steward_api::cratedb::RestartProgress;

use crate::cratedb::CratePass;
use crate::cratedb::build::statefulset::RESTARTED_AT;
use crate::cratedb::plan::restart::{Gate, PodView, RestartAction, advance, plan};
use crate::cratedb::steps::apply_statefulsets::{cached, current_replicas};
use crate::cratedb::steps::observe_cluster::node_pods;
use crate::cratedb::steps::{SOON, validated};
use crate::error::Error;
use crate::operation::{OperationRequest, Started};
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::resources::pods::is_ready;

/// See the module documentation.
pub struct RollingRestart;

/// `registry:version` → (registry, version).
fn split_image(image: &str) -> (String, String) {
    match image.rsplit_once(':') {
        Some((r, v)) => (r.to_owned(), v.to_owned()),
        None => (image.to_owned(), String::new()),
    }
}

#[async_trait]
impl SubReconciler<CratePass> for RollingRestart {
    fn name(&self) -> &'static str {
        "RollingRestart"
    }

    fn destructive(&self) -> bool {
        true
    }

    async fn reconcile(&self, pass: &mut CratePass) -> Result<Outcome, Error> {
        if !pass.status.bootstrap.done {
            return Ok(Outcome::Continue);
        }
        let valid = validated(pass)?;
        let image = valid.image();
        let restarted_at = pass
            .cluster
            .spec
            .pod_template
            .annotations
            .get(RESTARTED_AT)
            .cloned();
        let Some(rolled) = pass.status.image.clone() else {
            // The nodes were created with this image and annotation.
            pass.status.image = Some(image);
            pass.status.restarted_at = restarted_at;
            return Ok(Outcome::Continue);
        };
        let upgrade = rolled != image;
        let restart = pass.status.restarted_at != restarted_at;
        let running =
            pass.core.status.operation.as_ref().is_some_and(|op| {
                matches!(op.kind, OperationKind::Restart | OperationKind::Upgrade)
            });
        if !upgrade && !restart && pass.status.restart.is_none() {
            return Ok(Outcome::Continue);
        }
        let kind = if upgrade {
            OperationKind::Upgrade
        } else {
            OperationKind::Restart
        };
        if !running {
            let (old_registry, old_version) = split_image(&rolled);
            let (new_registry, new_version) = split_image(&image);
            let change = if upgrade {
                OperationChange {
                    old_registry: Some(old_registry),
                    new_registry: Some(new_registry),
                    old_version: Some(old_version),
                    new_version: Some(new_version),
                    ..OperationChange::default()
                }
            } else {
                OperationChange::default()
            };
            let started = pass.core.start_operation(OperationRequest {
                kind,
                step: "RestartNodes".into(),
                total: u32::try_from(valid.sets.iter().map(|s| s.replicas).sum::<i32>())
                    .unwrap_or(0),
                change,
                message: if upgrade {
                    format!("rolling restart to {image}")
                } else {
                    "rolling restart".to_owned()
                },
            });
            match started {
                Started::New | Started::Resumed => {}
                Started::Busy(other) => {
                    return Ok(Outcome::requeue(
                        SOON,
                        format!("restart waits for {other:?}"),
                    ));
                }
                Started::Blocked(why) => return Ok(Outcome::stop(SOON * 30, why)),
            }
        }
        let mut progress = pass
            .status
            .restart
            .clone()
            .unwrap_or_else(|| RestartProgress {
                image: Some(image.clone()),
                restarted_at: restarted_at.clone(),
                ..RestartProgress::default()
            });
        let kind = pass
            .core
            .status
            .operation
            .as_ref()
            .map_or(kind, |op| op.kind);
        let order: Vec<String> = valid
            .sets
            .iter()
            .flat_map(|s| {
                let replicas = cached(pass, &pass.names.statefulset(&s.name))
                    .map_or(0, |x| current_replicas(&x));
                (0..replicas)
                    .map(|i| pass.names.pod(&s.name, i))
                    .collect::<Vec<_>>()
            })
            .collect();
        let joined = pass
            .observed
            .as_ref()
            .map(|o| o.nodes.clone())
            .unwrap_or_default();
        let pods: Vec<PodView> = node_pods(pass)
            .iter()
            .map(|p| PodView {
                name: p.name_any(),
                uid: p.uid().unwrap_or_default(),
                terminating: p.metadata.deletion_timestamp.is_some(),
                ready: is_ready(p),
                joined: joined.contains(&p.name_any()),
            })
            .collect();
        let gate = Gate {
            readings: valid.gate.green_readings,
            interval: Duration::from_secs(valid.gate.green_interval_seconds),
        };
        let health = pass.observed.as_ref().map(|o| o.health.clone());
        let now = pass.core.now;
        let action = plan(&order, &pods, &progress, gate, health.as_deref(), now);
        advance(&mut progress, &action, now);
        let done = u32::try_from(progress.restarted.len()).unwrap_or(0);
        let outcome = match &action {
            RestartAction::Done => {
                // What this restart was started for: a request or an image that came later
                // (and reached only some nodes) gets a restart of its own.
                pass.status.image = progress.image.clone().or(Some(image.clone()));
                pass.status.restarted_at = progress.restarted_at.clone();
                pass.status.restart = None;
                pass.core.finish_operation(
                    kind,
                    OperationPhase::Succeeded,
                    format!(
                        "restarted {} nodes in order ({}), running {image}",
                        progress.restarted.len(),
                        progress.restarted.join(", ")
                    ),
                );
                return Ok(Outcome::Continue);
            }
            RestartAction::Delete { pod, uid } => {
                let api: Api<Pod> = pass.ctx.api(&pass.core.namespace);
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                match api.delete(pod, &params).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                    Err(source) => {
                        return Err(Error::kube(
                            "delete Pod",
                            format!("{}/{pod}", pass.core.namespace),
                            source,
                        ));
                    }
                }
                let note = format!("restarting node {pod}");
                pass.core
                    .event(EventType::Normal, "NodeRestarting", "Restart", note.clone());
                Outcome::requeue(SOON, note)
            }
            RestartAction::Wait { reason, after } => Outcome::requeue(*after, reason.clone()),
            RestartAction::Reading { green } => {
                let note = format!(
                    "{}: health {} ({} of {} GREEN readings)",
                    progress.pod.clone().unwrap_or_default(),
                    health.as_deref().unwrap_or("unknown"),
                    progress.green_readings,
                    gate.readings
                );
                if !green {
                    pass.core
                        .event(EventType::Normal, "HealthGate", "Restart", note.clone());
                }
                Outcome::requeue(gate.interval.max(Duration::from_millis(500)), note)
            }
            RestartAction::Restarted { pod } => {
                let note = format!(
                    "node {pod} is back: {} GREEN readings, {}s apart",
                    gate.readings,
                    gate.interval.as_secs()
                );
                pass.core
                    .event(EventType::Normal, "NodeRestarted", "Restart", note.clone());
                Outcome::requeue(Duration::from_millis(200), note)
            }
        };
        let message = match &outcome {
            Outcome::ContinueThenRequeue { reason, .. } | Outcome::Stop { reason, .. } => {
                reason.clone()
            }
            Outcome::Continue => String::new(),
        };
        pass.core
            .advance_operation(kind, "RestartNodes", done, message);
        pass.status.restart = Some(progress);
        Ok(outcome)
    }
}
