//! ProvisionInstances — makes the instances exist (seed: "what does the operator deploy").
//! A new cluster designates `<cluster>-0` its primary (a `Bootstrap` operation): its Pod runs
//! `initdb`. Every instance gets its claim (created when missing, never modified) and its Pod
//! (created when missing): labelled `primary` if it is `status.currentPrimary`, else `replica`
//! — a replica Pod clones the primary with `pg_basebackup`, or rejoins with `pg_rewind` if its
//! data was a primary's. Replicas are created only once the primary accepts writes. The
//! old primary of a pending fail-over is left alone until the new one is promoted (fencing).
//! Scaling `instances` adds the lowest free ordinal or removes the highest-ordinal replica
//! (never the primary), one per pass, as a `Scale` operation; a removed instance's claim is
//! deleted only when `storage.retainOnScaleDown` is `Delete`. While a restore runs
//! (`status.restore`), or a major upgrade (`status.upgrade`), the instances it stopped are not
//! recreated, then only the new primary is, and nothing is scaled.

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, PostParams};
use steward_api::common::{
    GroupReplicas, OperationChange, OperationKind, OperationPhase, RetentionPolicy,
};
use steward_api::postgres::{InstanceRole, InstanceStatus};

use crate::error::Error;
use crate::operation::{OperationRequest, Started};
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::postgres::PostgresPass;
use crate::postgres::build::instance;
use crate::postgres::steps::{SOON, validated};
use crate::postgres::topology::{InstanceView, ScaleAction, plan_scale};
use crate::resources::sweep;

/// See the module documentation.
pub struct ProvisionInstances;

fn group(n: usize) -> Vec<GroupReplicas> {
    vec![GroupReplicas {
        name: "instances".into(),
        replicas: i32::try_from(n).unwrap_or(i32::MAX),
    }]
}

fn new_member(name: &str, role: InstanceRole) -> InstanceStatus {
    InstanceStatus {
        name: name.to_owned(),
        role,
        ready: false,
        timeline: None,
        lsn: None,
        lag_bytes: None,
        streaming: false,
    }
}

#[async_trait]
impl SubReconciler<PostgresPass> for ProvisionInstances {
    fn name(&self) -> &'static str {
        "ProvisionInstances"
    }

    async fn reconcile(&self, pass: &mut PostgresPass) -> Result<Outcome, Error> {
        let valid = validated(pass)?;
        if valid.paused {
            return Ok(Outcome::Continue);
        }
        // A clone's first primary waits for its data (CloneFromSource).
        if valid.source_cluster().is_some()
            && pass.status.cloned_from.is_none()
            && pass.status.system_identifier.is_none()
        {
            return Ok(Outcome::Continue);
        }
        let wanted = valid.instances.max(1);
        // A new cluster: instance 0 is the primary.
        let primary = match pass.primary() {
            Some(p) => p,
            None => {
                let first = pass.names.instance(0);
                pass.core.start_operation(OperationRequest {
                    kind: OperationKind::Bootstrap,
                    step: "InitPrimary".into(),
                    total: wanted,
                    change: OperationChange {
                        new_replicas: group(wanted as usize),
                        ..OperationChange::default()
                    },
                    message: format!("initialising primary {first}"),
                });
                pass.status.current_primary = Some(first.clone());
                pass.status.instances = vec![new_member(&first, InstanceRole::Primary)];
                pass.instances.push(InstanceView {
                    name: first.clone(),
                    ordinal: 0,
                    ..InstanceView::default()
                });
                first
            }
        };
        if !pass.status.instances.iter().any(|i| i.name == primary) {
            pass.status
                .instances
                .push(new_member(&primary, InstanceRole::Primary));
        }
        let fenced = pass
            .status
            .pending_failover
            .as_ref()
            .map(|p| p.from.clone());
        let primary_writable = pass.instance(&primary).is_some_and(|v| v.writable());
        let hash = pass.config_hash.clone().unwrap_or_default();
        let epoch = pass.names.epoch;
        // A restore or a major upgrade holds the instances it stopped, then starts the new
        // primary alone.
        let moving = pass
            .status
            .restore
            .as_ref()
            .map(|r| {
                (
                    r.step.clone(),
                    r.primary.clone(),
                    r.epoch,
                    r.failed.is_some(),
                )
            })
            .or_else(|| {
                pass.status.upgrade.as_ref().map(|u| {
                    (
                        u.step.clone(),
                        u.primary.clone(),
                        u.epoch,
                        u.failed.is_some(),
                    )
                })
            });
        let held = |name: &str| match &moving {
            None => false,
            Some((_, _, _, true)) => true,
            Some((step, primary, to, false)) => match step.as_str() {
                "StopInstances" | "RestoreJob" | "UpgradeJob" => true,
                "StartPrimary" => name != primary || epoch != *to,
                _ => false,
            },
        };
        let mut created = 0;
        let views = pass.instances.clone();
        for view in &views {
            if view.pod
                || view.terminating
                || fenced.as_deref() == Some(view.name.as_str())
                || held(&view.name)
            {
                continue;
            }
            let role = if view.name == primary {
                InstanceRole::Primary
            } else {
                InstanceRole::Replica
            };
            if role == InstanceRole::Replica && !primary_writable {
                continue;
            }
            if !view.claim {
                let Some(claim) = instance::claim(&pass.cluster, &valid, view.ordinal) else {
                    return Err(missing_owner());
                };
                let api: Api<PersistentVolumeClaim> = pass.ctx.api(&pass.core.namespace);
                match api.create(&PostParams::default(), &claim).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(source) => {
                        return Err(Error::kube(
                            "create PersistentVolumeClaim",
                            pass.object(),
                            source,
                        ));
                    }
                }
            }
            let Some(pod) = instance::pod(&pass.cluster, &valid, view.ordinal, role, &hash) else {
                return Err(missing_owner());
            };
            let api: Api<Pod> = pass.ctx.api(&pass.core.namespace);
            match api.create(&PostParams::default(), &pod).await {
                Ok(_) => {
                    created += 1;
                    pass.core.event(
                        EventType::Normal,
                        "InstanceCreated",
                        "ProvisionInstances",
                        format!(
                            "created {} as {}",
                            view.name,
                            crate::postgres::names::role_value(role)
                        ),
                    );
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(source) => return Err(Error::kube("create Pod", pass.object(), source)),
            }
        }
        if created > 0 {
            return Ok(Outcome::requeue(SOON * 2, "instances created"));
        }
        if fenced.is_some() || !primary_writable || moving.is_some() {
            return Ok(Outcome::Continue);
        }
        // Scale, one instance per pass, once every instance is up.
        let ordinals: Vec<u32> = pass
            .status
            .instances
            .iter()
            .filter_map(|i| pass.names.ordinal(&i.name))
            .collect();
        let count = ordinals.len();
        let action = plan_scale(
            &ordinals,
            pass.names.ordinal(&primary),
            wanted,
            &pass.names.cluster,
        );
        if action == ScaleAction::Converged {
            if pass
                .core
                .status
                .operation
                .as_ref()
                .is_some_and(|op| op.kind == OperationKind::Scale)
            {
                pass.core.finish_operation(
                    OperationKind::Scale,
                    OperationPhase::Succeeded,
                    format!("{count} instances"),
                );
            }
            return Ok(Outcome::Continue);
        }
        let bootstrapping = pass
            .core
            .status
            .operation
            .as_ref()
            .is_some_and(|op| op.kind == OperationKind::Bootstrap);
        if !bootstrapping {
            match pass.core.start_operation(OperationRequest {
                kind: OperationKind::Scale,
                step: "PlanInstances".into(),
                total: u32::try_from(count.abs_diff(wanted as usize))
                    .unwrap_or(1)
                    .max(1),
                change: OperationChange {
                    old_replicas: group(count),
                    new_replicas: group(wanted as usize),
                    ..OperationChange::default()
                },
                message: format!("scaling from {count} to {wanted} instances"),
            }) {
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
        }
        match action {
            ScaleAction::Converged => Ok(Outcome::Continue),
            ScaleAction::Add(ordinal) => {
                if !bootstrapping
                    && pass
                        .instances
                        .iter()
                        .any(|v| !v.standby() && v.name != primary)
                {
                    return Ok(Outcome::requeue(
                        SOON * 2,
                        "waiting for every replica to be up before adding one",
                    ));
                }
                let name = pass.names.instance(ordinal);
                pass.status
                    .instances
                    .push(new_member(&name, InstanceRole::Replica));
                pass.core.advance_operation(
                    OperationKind::Scale,
                    "AddInstance",
                    0,
                    format!("adding {name}"),
                );
                if !bootstrapping {
                    pass.core.event(
                        EventType::Normal,
                        "InstanceAdded",
                        "ProvisionInstances",
                        format!("adding replica {name}"),
                    );
                }
                Ok(Outcome::requeue(SOON, format!("{name} added")))
            }
            ScaleAction::Remove(name) => {
                if let Some(why) = pass.core.destructive_block() {
                    return Ok(Outcome::requeue(Duration::from_secs(30), why));
                }
                sweep::delete_named::<Pod>(
                    &pass.ctx.client,
                    &pass.core.namespace,
                    vec![name.clone()],
                )
                .await?;
                if valid
                    .storage_for(pass.names.ordinal(&name).unwrap_or(0))
                    .retain_on_scale_down
                    == RetentionPolicy::Delete
                {
                    sweep::delete_named::<PersistentVolumeClaim>(
                        &pass.ctx.client,
                        &pass.core.namespace,
                        vec![pass.names.claim(&name)],
                    )
                    .await?;
                }
                pass.status.instances.retain(|i| i.name != name);
                pass.instances.retain(|i| i.name != name);
                pass.core.event(
                    EventType::Normal,
                    "InstanceRemoved",
                    "ProvisionInstances",
                    format!("removed replica {name}"),
                );
                pass.core.advance_operation(
                    OperationKind::Scale,
                    "RemoveInstance",
                    1,
                    format!("removed {name}"),
                );
                Ok(Outcome::requeue(SOON, format!("{name} removed")))
            }
        }
    }
}

fn missing_owner() -> Error {
    Error::Internal {
        message: "cluster has no UID or namespace".into(),
    }
}
