//! RollingRestart — when instance Pods run an older spec than wanted (their spec hash differs:
//! image, resources, scheduling, PostgreSQL parameters), restarts them one at a time as a
//! `Restart` operation (seed 000, "Cluster Restart", with the health gate of seed 001):
//! replicas in ordinal order — delete the Pod, `ProvisionInstances` recreates it with the new
//! spec, and it must then be ready and streaming on `healthGate.checks` consecutive checks
//! `healthGate.intervalSeconds` apart before the next one — then a switchover to the most
//! up-to-date replica, so the old primary restarts last, as a replica, behind the same gate.
//! A single-instance cluster restarts its primary in place (a short outage). Progress (the
//! gate) is in `status.restartGate`, so a restarted operator continues where it left off.

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use steward_api::common::{OperationChange, OperationKind, OperationPhase};
use steward_api::postgres::{FailoverProgress, GateProgress};

use crate::clock::{format_time, parse_time};
use crate::error::Error;
use crate::operation::{OperationRequest, Started};
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::postgres::PostgresPass;
use crate::postgres::steps::failover::start as start_failover;
use crate::postgres::steps::{SOON, validated};
use crate::postgres::topology::{RestartAction, choose_target, plan_restart};
use crate::resources::sweep;

/// See the module documentation.
pub struct RollingRestart;

#[async_trait]
impl SubReconciler<PostgresPass> for RollingRestart {
    fn name(&self) -> &'static str {
        "RollingRestart"
    }

    fn destructive(&self) -> bool {
        true
    }

    async fn reconcile(&self, pass: &mut PostgresPass) -> Result<Outcome, Error> {
        let valid = validated(pass)?;
        let Some(primary) = pass.primary() else {
            return Ok(Outcome::Continue);
        };
        if valid.paused
            || pass.status.pending_failover.is_some()
            || !pass.instance(&primary).is_some_and(|v| v.writable())
        {
            return Ok(Outcome::Continue);
        }
        let restarting = pass
            .core
            .status
            .operation
            .as_ref()
            .is_some_and(|op| op.kind == OperationKind::Restart);
        let stale: Vec<String> = pass
            .instances
            .iter()
            .filter(|i| i.stale)
            .map(|i| i.name.clone())
            .collect();
        if stale.is_empty() && pass.status.restart_gate.is_none() {
            if restarting {
                pass.core.finish_operation(
                    OperationKind::Restart,
                    OperationPhase::Succeeded,
                    format!("{} instances run the current spec", pass.instances.len()),
                );
            }
            pass.core.status.generations.needs_restart = None;
            return Ok(Outcome::Continue);
        }
        pass.core.status.generations.needs_restart = Some(pass.core.generation);
        let total = u32::try_from(pass.instances.len()).unwrap_or(1);
        match pass.core.start_operation(OperationRequest {
            kind: OperationKind::Restart,
            step: "RestartInstances".into(),
            total,
            change: OperationChange::default(),
            message: format!("rolling restart of {} instances", stale.len()),
        }) {
            Started::New | Started::Resumed => {}
            Started::Busy(kind) => {
                return Ok(Outcome::requeue(
                    Duration::from_secs(5),
                    format!("restart waits for the running {} operation", kind.as_str()),
                ));
            }
            Started::Blocked(why) => {
                pass.core.degrade("OperationFailed", why);
                return Ok(Outcome::Continue);
            }
        }
        let done = total.saturating_sub(u32::try_from(stale.len()).unwrap_or(0));
        // The health gate of the last restarted instance.
        if let Some(mut gate) = pass.status.restart_gate.clone() {
            let interval = i64::from(valid.health_gate.interval_seconds);
            let last = parse_time(&gate.last_check).unwrap_or(pass.core.now);
            let healthy = pass
                .instance(&gate.instance)
                .is_some_and(|v| !v.stale && (v.writable() || (v.standby() && v.streaming)));
            if !healthy {
                gate.passed = 0;
                gate.last_check = format_time(pass.core.now);
                pass.core.advance_operation(
                    OperationKind::Restart,
                    "HealthGate",
                    done,
                    format!("waiting for {} to be back and streaming", gate.instance),
                );
                pass.status.restart_gate = Some(gate);
                return Ok(Outcome::requeue(
                    SOON * 2,
                    "restarted instance not back yet",
                ));
            }
            if gate.passed == 0 || pass.core.now.as_second() - last.as_second() >= interval {
                gate.passed += 1;
                gate.last_check = format_time(pass.core.now);
            }
            if gate.passed < valid.health_gate.checks {
                let message = format!(
                    "{} healthy {}/{} times",
                    gate.instance, gate.passed, valid.health_gate.checks
                );
                pass.core.advance_operation(
                    OperationKind::Restart,
                    "HealthGate",
                    done,
                    message.clone(),
                );
                pass.status.restart_gate = Some(gate);
                let wait = u64::from(valid.health_gate.interval_seconds);
                return Ok(Outcome::requeue(Duration::from_secs(wait), message));
            }
            pass.core.event(
                EventType::Normal,
                "InstanceRestarted",
                "RollingRestart",
                format!("{} is back and healthy", gate.instance),
            );
            pass.status.restart_gate = None;
        }
        match plan_restart(&pass.instances, &primary) {
            RestartAction::Done => Ok(Outcome::requeue(SOON, "restart finished")),
            RestartAction::Wait(why) => {
                pass.core
                    .advance_operation(OperationKind::Restart, "Wait", done, why.clone());
                Ok(Outcome::requeue(SOON * 2, why))
            }
            RestartAction::RestartReplica(name) | RestartAction::RestartPrimary(name) => {
                sweep::delete_named::<Pod>(
                    &pass.ctx.client,
                    &pass.core.namespace,
                    vec![name.clone()],
                )
                .await?;
                pass.core.event(
                    EventType::Normal,
                    "InstanceRestarting",
                    "RollingRestart",
                    format!("restarting {name} with the new spec"),
                );
                pass.core.advance_operation(
                    OperationKind::Restart,
                    "RestartInstance",
                    done,
                    format!("restarting {name}"),
                );
                pass.status.restart_gate = Some(GateProgress {
                    instance: name,
                    passed: 0,
                    last_check: format_time(pass.core.now),
                });
                Ok(Outcome::requeue(SOON * 2, "instance restarting"))
            }
            RestartAction::Switchover => match choose_target(&pass.instances, &primary, None) {
                Ok(target) => {
                    pass.core.advance_operation(
                        OperationKind::Restart,
                        "Switchover",
                        done,
                        format!("switching over to {target} to restart {primary}"),
                    );
                    start_failover(
                        pass,
                        FailoverProgress {
                            from: primary,
                            target,
                            switchover: true,
                            demoted_at_lsn: None,
                            request: None,
                            reason: "restart".into(),
                        },
                    )
                    .await
                }
                Err(why) => Ok(Outcome::requeue(SOON * 2, why)),
            },
        }
    }
}
