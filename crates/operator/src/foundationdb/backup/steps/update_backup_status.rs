//! UpdateBackupStatus — runs first and last (seed 002). The first run finds the cluster (a
//! missing one is `ClusterNotFound`, and the pass stops) and reads `fdbbackup status --json`
//! in one of its Pods (the last run again only when something was left to do). Both runs record the agents ready and whether their
//! Deployment is as the spec asks, the backup's details, the generations of what is left
//! (`needsBackupAgentUpdate`, `needsBackupStart`, `needsBackupStop`, `needsBackupPauseToggle`,
//! `needsBackupModification`) and `Available` (the backup runs and is restorable, or is
//! stopped as asked); the pass requeues while anything is left.

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use steward_api::common::condition_types;
use steward_api::foundationdb::{BackupDetails, BackupState, FoundationDBCluster};

use super::SOON;
use crate::conditions::Status;
use crate::error::Error;
use crate::foundationdb::backup::build::{SPEC_HASH, deployment, deployment_name};
use crate::foundationdb::backup::plan::{Action, LiveStatus, actions};
use crate::foundationdb::backup::{BackupPass, TAG};
use crate::pipeline::{Outcome, SubReconciler};

/// See the module documentation.
pub struct UpdateBackupStatus;

#[async_trait]
impl SubReconciler<BackupPass> for UpdateBackupStatus {
    fn name(&self) -> &'static str {
        "UpdateBackupStatus"
    }

    async fn reconcile(&self, pass: &mut BackupPass) -> Result<Outcome, Error> {
        let first = pass.cluster.is_none();
        if first {
            let api: Api<FoundationDBCluster> =
                Api::namespaced(pass.ctx.client.clone(), &pass.core.namespace);
            let name = pass.backup.spec.cluster_name.clone();
            match api.get_opt(&name).await.map_err(|source| {
                Error::kube(
                    "get",
                    format!("FoundationDBCluster {}/{name}", pass.core.namespace),
                    source,
                )
            })? {
                Some(c) => pass.cluster = Some(c),
                None => {
                    let message = format!(
                        "FoundationDBCluster {name} does not exist in namespace {}",
                        pass.core.namespace
                    );
                    pass.core.degrade("ClusterNotFound", message.clone());
                    pass.core.set_condition(
                        condition_types::AVAILABLE,
                        Status::False,
                        "ClusterNotFound",
                        message.clone(),
                    );
                    return Ok(Outcome::stop(std::time::Duration::from_secs(30), message));
                }
            }
        }
        let deployments: Api<Deployment> =
            Api::namespaced(pass.ctx.client.clone(), &pass.core.namespace);
        let live_deployment = deployments
            .get_opt(&deployment_name(&pass.core.name))
            .await
            .map_err(|source| {
                Error::kube(
                    "get",
                    format!("Deployment {}", deployment_name(&pass.core.name)),
                    source,
                )
            })?;
        let want = pass
            .cluster
            .as_ref()
            .and_then(|c| deployment(&pass.backup, c))
            .and_then(|d| d.metadata.annotations)
            .and_then(|a| a.get(SPEC_HASH).cloned());
        pass.status.deployment_configured = live_deployment.as_ref().is_some_and(|d| {
            d.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SPEC_HASH))
                == want.as_ref()
        });
        pass.status.agent_count = live_deployment
            .as_ref()
            .and_then(|d| d.status.as_ref())
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        // The last run reads again only when the first found something to do (a step may
        // have acted); a settled backup costs one `fdbbackup status` per pass.
        let g = &pass.core.status.generations;
        let acted = [
            g.needs_backup_agent_update,
            g.needs_backup_start,
            g.needs_backup_stop,
            g.needs_backup_pause_toggle,
            g.needs_backup_modification,
        ]
        .iter()
        .any(Option::is_some);
        if first || (pass.live.is_some() && acted) {
            let args = vec![
                "status".to_owned(),
                "-t".to_owned(),
                TAG.to_owned(),
                "--json".to_owned(),
            ];
            match pass.fdbbackup(&args).await {
                Ok(out) => match LiveStatus::parse(&out) {
                    Ok(live) => pass.live = Some(live),
                    Err(e) => pass.core.set_condition(
                        condition_types::AVAILABLE,
                        Status::Unknown,
                        "StatusUnreadable",
                        e.to_string(),
                    ),
                },
                Err(e) => {
                    pass.live = None;
                    pass.core.set_condition(
                        condition_types::AVAILABLE,
                        Status::Unknown,
                        "StatusUnreadable",
                        e.to_string(),
                    );
                }
            }
        }
        let generation = pass.core.generation;
        let spec = pass.backup.spec.clone();
        let pending = pass
            .live
            .as_ref()
            .map(|l| actions(spec.backup_state, spec.snapshot_period_seconds, l))
            .unwrap_or_default();
        let has = |f: fn(&Action) -> bool| pending.iter().any(f).then_some(generation);
        let agents_ok = pass.status.deployment_configured
            && pass.status.agent_count == i32::try_from(spec.agent_count).unwrap_or(0);
        let g = &mut pass.core.status.generations;
        g.needs_backup_agent_update = (!agents_ok).then_some(generation);
        g.needs_backup_start = has(|a| *a == Action::Start);
        g.needs_backup_stop = has(|a| *a == Action::Stop);
        g.needs_backup_pause_toggle = has(|a| matches!(a, Action::Pause | Action::Resume));
        g.needs_backup_modification = has(|a| matches!(a, Action::Modify(_)));
        if let Some(live) = &pass.live {
            let restorable = live.restorable.unwrap_or(false);
            pass.status.backup_details = Some(BackupDetails {
                url: live.destination_url.clone(),
                running: live.status.running,
                paused: live.paused,
                snapshot_time: live.snapshot_interval_seconds,
                restorable,
                latest_restorable_version: live.latest.as_ref().and_then(|l| l.version),
                state: live.status.name.clone(),
            });
            let (ok, reason, message) = match spec.backup_state {
                BackupState::Stopped if !live.status.running => (
                    true,
                    "Stopped",
                    "no backup runs, as the spec asks".to_owned(),
                ),
                BackupState::Stopped => (
                    false,
                    "Stopping",
                    format!("the backup {}", live.status.name),
                ),
                _ if live.status.running && restorable => (
                    true,
                    "Restorable",
                    format!(
                        "the backup {}; restorable to version {}",
                        live.status.name,
                        live.latest
                            .as_ref()
                            .and_then(|l| l.version)
                            .unwrap_or_default()
                    ),
                ),
                _ => (
                    false,
                    "NotRestorable",
                    format!("the backup {} and is not restorable yet", live.status.name),
                ),
            };
            pass.core.set_condition(
                condition_types::AVAILABLE,
                if ok { Status::True } else { Status::False },
                reason,
                message,
            );
        }
        let g = &pass.core.status.generations;
        let left = [
            g.needs_backup_agent_update,
            g.needs_backup_start,
            g.needs_backup_stop,
            g.needs_backup_pause_toggle,
            g.needs_backup_modification,
        ]
        .iter()
        .any(Option::is_some);
        if left || pass.live.is_none() {
            return Ok(Outcome::requeue(
                SOON,
                "the backup is not as the spec asks yet",
            ));
        }
        Ok(Outcome::Continue)
    }
}
