//! Failover — keeps exactly one writable primary. Watches the primary: when it has not been
//! ready and writable for `failover.detectionDelaySeconds` (the time is kept in status, so an
//! operator restart does not reset it) and automatic fail-over is on, or when a switchover is
//! requested (`spec.switchover` with a new `id`), it runs the seed's steps, resumable from
//! `status.pendingFailover`:
//!
//! 1. **Fence / demote**: delete the old primary's Pod (PostgreSQL gets a fast shutdown) and
//!    wait until the Pod object is gone — the API server removes it only once the node
//!    confirmed its containers stopped. For a switchover the old primary's WAL position is
//!    recorded first.
//! 2. **Catch up** (switchover only): wait until the target replayed that position.
//! 3. **Relabel** the target `steward.dev/role=primary`, so the `-primary` Service selects it,
//!    and record it as `status.currentPrimary`.
//! 4. **Promote** it (`pg_promote`). The other replicas stream through the `-primary` Service
//!    and follow the new timeline (`recovery_target_timeline=latest`); the old primary's Pod
//!    is recreated by `ProvisionInstances` as a replica and rejoins with `pg_rewind`.
//!
//! The fencing rule: a replica is promoted only after the old primary's Pod is gone from the
//! API, and an instance Pod starts writable only if its data is already a primary's; so two
//! writable primaries never run at once. Every step is an Event; the run is a `Failover`
//! operation whose end fires the webhook (`event: "failover"`, old and new primary).
//!
//! Before the primary has ever answered (no system identifier in status) nothing here runs:
//! no `PrimaryNotReady` Warning, no fail-over — the cluster is still bootstrapping.

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use steward_api::common::{OperationChange, OperationKind, OperationPhase};
use steward_api::postgres::FailoverProgress;

use crate::clock::{format_time, parse_time};
use crate::error::Error;
use crate::operation::{OperationRequest, Started};
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::postgres::PostgresPass;
use crate::postgres::admin::{Lsn, PgAdminError};
use crate::postgres::names::ROLE_LABEL;
use crate::postgres::steps::observe_instances::cluster_pods;
use crate::postgres::steps::{SOON, database, validated};
use crate::postgres::topology::{NodeState, choose_target, failover_due, maintenance_target};

/// See the module documentation.
pub struct Failover;

/// How long a promotion may take before the pass looks again.
const PROMOTE_WAIT: Duration = Duration::from_secs(30);

#[async_trait]
impl SubReconciler<PostgresPass> for Failover {
    fn name(&self) -> &'static str {
        "Failover"
    }

    async fn reconcile(&self, pass: &mut PostgresPass) -> Result<Outcome, Error> {
        let valid = validated(pass)?;
        let Some(primary) = pass.primary() else {
            return Ok(Outcome::Continue);
        };
        if valid.paused {
            return Ok(Outcome::Continue);
        }
        if let Some(progress) = pass.status.pending_failover.clone() {
            return advance(pass, progress).await;
        }
        // A restore (or a major upgrade) stops the instances on purpose and starts the new
        // primary alone: fail-over is off until it is done (seed: "turn off autofail").
        if pass.status.restore.is_some() || pass.status.upgrade.is_some() {
            pass.status.primary_unready_since = None;
            return Ok(Outcome::Continue);
        }
        // A primary that never answered (no system identifier recorded yet) is still being
        // bootstrapped: there is nothing to fail over from, and UpdateStatus says why it is not
        // up (for instance a Pod the scheduler cannot place).
        if pass.status.system_identifier.is_none() {
            return Ok(Outcome::Continue);
        }
        let healthy = pass.instance(&primary).is_some_and(|v| v.writable());
        if healthy {
            pass.status.primary_unready_since = None;
        } else if pass.status.primary_unready_since.is_none() {
            pass.status.primary_unready_since = Some(format_time(pass.core.now));
            pass.core.event(
                EventType::Warning,
                "PrimaryNotReady",
                "Failover",
                format!("primary {primary} is not ready"),
            );
        }
        // A manual request, once per id.
        if let Some(request) = pass.cluster.spec.switchover.clone()
            && pass.status.last_switchover.as_deref() != Some(request.id.as_str())
        {
            match choose_target(&pass.instances, &primary, request.target.as_deref()) {
                Ok(target) => {
                    let progress = FailoverProgress {
                        from: primary.clone(),
                        target,
                        switchover: healthy,
                        demoted_at_lsn: None,
                        request: Some(request.id.clone()),
                        reason: "request".into(),
                    };
                    return start(pass, progress).await;
                }
                Err(why) => {
                    pass.core.event(
                        EventType::Warning,
                        "SwitchoverRefused",
                        "Failover",
                        format!("switchover request {}: {why}", request.id),
                    );
                    pass.status.last_switchover = Some(request.id);
                }
            }
        }
        if healthy {
            return move_off_a_cordoned_node(pass, &primary).await;
        }
        let since = pass
            .status
            .primary_unready_since
            .as_deref()
            .and_then(parse_time);
        if !valid.failover.automatic {
            pass.core.degrade(
                "PrimaryNotReady",
                format!("primary {primary} is not ready and automatic fail-over is off"),
            );
            return Ok(Outcome::requeue(SOON * 5, "primary not ready"));
        }
        if !failover_due(since, pass.core.now, valid.failover.detection_delay_seconds) {
            return Ok(Outcome::requeue(
                SOON,
                "primary not ready; within the detection delay",
            ));
        }
        match choose_target(&pass.instances, &primary, None) {
            Ok(target) => {
                let progress = FailoverProgress {
                    from: primary,
                    target,
                    switchover: false,
                    demoted_at_lsn: None,
                    request: None,
                    reason: "automatic".into(),
                };
                start(pass, progress).await
            }
            Err(why) => {
                pass.core.degrade(
                    "NoFailoverTarget",
                    format!("primary {primary} is down and cannot be replaced: {why}"),
                );
                Ok(Outcome::requeue(SOON * 2, why))
            }
        }
    }
}

/// A healthy primary whose Node is cordoned (a drain is coming: the primary's disruption
/// budget refuses to evict it) hands over to the best replica on a usable Node, so the drain
/// goes on with a switchover's short write gap instead of a fail-over's. When no replica can
/// take over, the cluster says so and the drain waits. A single instance has no budget to
/// hold the drain and nothing to hand over to: it is evicted like any Pod.
async fn move_off_a_cordoned_node(
    pass: &mut PostgresPass,
    primary: &str,
) -> Result<Outcome, Error> {
    if pass.validated.as_ref().is_some_and(|v| v.instances < 2) {
        // Nothing to hand over to; the primary's budget lets the drain evict the instance.
        return Ok(Outcome::Continue);
    }
    match maintenance_target(&pass.instances, primary) {
        Ok(None) => Ok(Outcome::Continue),
        Ok(Some(target)) => {
            let progress = FailoverProgress {
                from: primary.to_owned(),
                target,
                switchover: true,
                demoted_at_lsn: None,
                request: None,
                reason: "nodeCordoned".into(),
            };
            start(pass, progress).await
        }
        Err(why) => {
            pass.core.degrade("PrimaryNodeCordoned", why);
            Ok(Outcome::requeue(SOON * 5, "primary's Node cordoned"))
        }
    }
}

/// Starts a fail-over or switchover (not for the restart-driven switchover, which runs under
/// the `Restart` operation) and takes its first step.
pub(crate) async fn start(
    pass: &mut PostgresPass,
    progress: FailoverProgress,
) -> Result<Outcome, Error> {
    if progress.reason != "restart" {
        // A fail-over takes the slot of a running backup: the backup reads from the primary
        // being replaced and cannot finish (`RunBackups` fails it and deletes its Job).
        if !progress.switchover
            && pass
                .core
                .status
                .operation
                .as_ref()
                .is_some_and(|op| op.kind == OperationKind::Backup)
        {
            pass.core.finish_operation(
                OperationKind::Backup,
                OperationPhase::Failed,
                format!(
                    "interrupted by the fail-over from {} to {}",
                    progress.from, progress.target
                ),
            );
        }
        let started = pass.core.start_operation(OperationRequest {
            kind: OperationKind::Failover,
            step: "FencePrimary".into(),
            total: 3,
            change: OperationChange {
                old_primary: Some(progress.from.clone()),
                new_primary: Some(progress.target.clone()),
                switchover: Some(progress.switchover),
                ..OperationChange::default()
            },
            message: format!(
                "{} from {} to {} ({})",
                if progress.switchover {
                    "switchover"
                } else {
                    "fail-over"
                },
                progress.from,
                progress.target,
                progress.reason
            ),
        });
        match started {
            Started::New | Started::Resumed => {}
            Started::Busy(kind) if progress.switchover => {
                return Ok(Outcome::requeue(
                    Duration::from_secs(5),
                    format!(
                        "switchover waits for the running {} operation",
                        kind.as_str()
                    ),
                ));
            }
            // A fail-over never waits for another operation: the primary is down.
            Started::Busy(_) | Started::Blocked(_) => {}
        }
    }
    pass.core.event(
        EventType::Warning,
        if progress.switchover {
            "SwitchoverStarted"
        } else {
            "FailoverStarted"
        },
        "Failover",
        format!(
            "replacing primary {} with {} ({})",
            progress.from, progress.target, progress.reason
        ),
    );
    pass.status.pending_failover = Some(progress.clone());
    advance(pass, progress).await
}

fn op_kind(progress: &FailoverProgress) -> OperationKind {
    if progress.reason == "restart" {
        OperationKind::Restart
    } else {
        OperationKind::Failover
    }
}

/// Takes the next step of a pending fail-over or switchover.
async fn advance(
    pass: &mut PostgresPass,
    mut progress: FailoverProgress,
) -> Result<Outcome, Error> {
    let kind = op_kind(&progress);
    // 1. Fence: the old primary's Pod must be gone.
    let old_pod = cluster_pods(pass)
        .into_iter()
        .find(|p| p.name_any() == progress.from);
    if pass.status.current_primary.as_deref() == Some(progress.from.as_str()) {
        if let Some(pod) = old_pod {
            if pod.metadata.deletion_timestamp.is_none() {
                if progress.switchover && progress.demoted_at_lsn.is_none() {
                    let lsn = pass
                        .instance(&progress.from)
                        .and_then(|v| v.position())
                        .map(|l| l.to_string());
                    progress.demoted_at_lsn = lsn;
                    pass.status.pending_failover = Some(progress.clone());
                }
                let api: Api<Pod> = pass.ctx.api(&pass.core.namespace);
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: pod.uid(),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                match api.delete(&progress.from, &params).await {
                    Ok(_) | Err(kube::Error::Api(_)) => {}
                    Err(source) => {
                        return Err(Error::kube("delete Pod", pass.object(), source));
                    }
                }
                pass.core.event(
                    EventType::Normal,
                    if progress.switchover {
                        "PrimaryDemoted"
                    } else {
                        "PrimaryFenced"
                    },
                    "Failover",
                    format!("deleted the Pod of primary {}", progress.from),
                );
            }
            if let Some(node) = pass
                .instance(&progress.from)
                .filter(|v| v.node_state == NodeState::Lost)
                .and_then(|v| v.node.clone())
            {
                // Nobody can confirm that the old primary stopped: its Node stopped reporting,
                // and the Pod stays Terminating until it does. Promoting now could leave two
                // writable primaries, so a person decides.
                let why = format!(
                    "the Node {node} of primary {} is not ready, so nothing confirms that the \
                     old primary stopped and no replica is promoted; once the machine is known \
                     to be off, confirm with `kubectl delete pod {} --force --grace-period=0` \
                     (or delete the Node) and the fail-over to {} goes on",
                    progress.from, progress.from, progress.target
                );
                pass.core.degrade("PrimaryNodeLost", why.clone());
                pass.core.advance_operation(kind, "FencePrimary", 0, why);
                return Ok(Outcome::stop(SOON * 5, "the old primary's Node is lost"));
            }
            pass.core.advance_operation(
                kind,
                "FencePrimary",
                0,
                format!("waiting for the Pod of {} to be gone", progress.from),
            );
            return Ok(Outcome::stop(SOON, "waiting for the old primary to stop"));
        }
        // 2. Catch up (switchover).
        if let Some(lsn) = progress
            .demoted_at_lsn
            .as_deref()
            .and_then(|l| l.parse::<Lsn>().ok())
        {
            let replayed = pass.instance(&progress.target).and_then(|v| v.replayed());
            if replayed.is_none_or(|r| r < lsn) {
                pass.core.advance_operation(
                    kind,
                    "CatchUp",
                    1,
                    format!("waiting for {} to replay up to {lsn}", progress.target),
                );
                return Ok(Outcome::stop(SOON, "waiting for the target to catch up"));
            }
        }
        // 3. Relabel.
        let api: Api<Pod> = pass.ctx.api(&pass.core.namespace);
        let body = serde_json::json!({"metadata": {"labels": {ROLE_LABEL: "primary"}}});
        match api
            .patch(
                &progress.target,
                &PatchParams::default(),
                &Patch::Merge(&body),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {
                pass.core.degrade(
                    "FailoverTargetGone",
                    format!("fail-over target {} disappeared", progress.target),
                );
                pass.status.pending_failover = None;
                return Ok(Outcome::stop(SOON, "target gone; choosing again"));
            }
            Err(source) => return Err(Error::kube("label Pod", pass.object(), source)),
        }
        pass.status.current_primary = Some(progress.target.clone());
        pass.core.event(
            EventType::Normal,
            "PrimaryChanged",
            "Failover",
            format!(
                "{} is labelled primary; the -primary Service now selects it",
                progress.target
            ),
        );
    }
    // 4. Promote.
    let admin = match pass.admin(&progress.target).await {
        Ok(a) => a,
        Err(e) => {
            pass.core.advance_operation(
                kind,
                "Promote",
                2,
                format!("waiting for {} to answer: {e}", progress.target),
            );
            return Ok(Outcome::stop(SOON, "waiting for the target to answer"));
        }
    };
    match admin.promote(PROMOTE_WAIT).await {
        Ok(true) | Err(PgAdminError::NotInRecovery(_)) => {}
        Ok(false) => return Ok(Outcome::stop(SOON, "promotion still running")),
        Err(e) if e.is_transient() => return Ok(Outcome::stop(SOON, e.to_string())),
        Err(e) => return Err(database(pass, &e)),
    }
    pass.core.event(
        EventType::Normal,
        "Promoted",
        "Failover",
        format!("{} was promoted and accepts writes", progress.target),
    );
    pass.status.pending_failover = None;
    pass.status.primary_unready_since = None;
    if let Some(id) = &progress.request {
        pass.status.last_switchover = Some(id.clone());
    }
    if progress.reason == "restart" {
        pass.status.restart_gate = Some(steward_api::postgres::GateProgress {
            instance: progress.from.clone(),
            passed: 0,
            last_check: format_time(pass.core.now),
        });
    } else {
        pass.core.finish_operation(
            OperationKind::Failover,
            OperationPhase::Succeeded,
            format!("{} is the primary (was {})", progress.target, progress.from),
        );
    }
    Ok(Outcome::stop(SOON, "new primary promoted"))
}
