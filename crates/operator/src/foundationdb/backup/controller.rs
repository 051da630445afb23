//! Wires the backup and restore pipelines into kube-runtime `Controller`s. Neither kind owns a
//! cached child that wakes it: both look again while work is left (the pipelines requeue) and
//! every [`RESYNC`] after.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::{Api, ResourceExt};
use steward_api::common::CommonStatus;
use steward_api::foundationdb::{
    FoundationDBBackup, FoundationDBBackupStatus, FoundationDBRestore, FoundationDBRestoreStatus,
};
use tokio_util::sync::CancellationToken;

use super::restore;
use super::{BackupPass, CONTROLLER, pipeline};
use crate::error::Error;
use crate::resources::pods::CachedPod;
use crate::runtime::context::{ClusterStatus, Context, error_policy};
use crate::runtime::engine::{EngineState, reconcile};
use crate::runtime::stores::Indexed;

/// How often a settled backup or restore is looked at again.
pub const RESYNC: Duration = Duration::from_secs(30);

impl ClusterStatus for FoundationDBBackupStatus {
    fn common(&self) -> &CommonStatus {
        &self.common
    }
}

impl ClusterStatus for FoundationDBRestoreStatus {
    fn common(&self) -> &CommonStatus {
        &self.common
    }
}

struct BackupState {
    ctx: Arc<Context>,
    pods: Indexed<CachedPod>,
    pipeline: crate::pipeline::Pipeline<BackupPass>,
}

#[async_trait]
impl EngineState for BackupState {
    type Cluster = FoundationDBBackup;

    fn ctx(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The agents' Deployment is owned (garbage-collected); the backup's claim is kept. The
    /// backup itself is left running in the database: stop it first with `backupState:
    /// Stopped`.
    async fn cleanup(&self, backup: Arc<FoundationDBBackup>) -> Result<Action, Error> {
        if let Some(uid) = backup.uid() {
            self.ctx.forget_version(&uid);
        }
        Ok(Action::await_change())
    }

    async fn apply(&self, backup: Arc<FoundationDBBackup>) -> Result<Action, Error> {
        let ctx = &self.ctx;
        let stored = backup.status.clone();
        let mut pass = BackupPass {
            core: ctx.pass_core(
                CONTROLLER,
                backup.as_ref(),
                stored
                    .as_ref()
                    .map(|s| s.common.clone())
                    .unwrap_or_default(),
                None,
            ),
            status: stored.clone().unwrap_or_default(),
            backup: backup.clone(),
            cluster: None,
            pods: self.pods.clone(),
            live: None,
            ctx: ctx.clone(),
        };
        let report = self.pipeline.run(&mut pass, &ctx.metrics).await;
        let mut status = pass.status;
        status.common = std::mem::take(&mut pass.core.status);
        ctx.conclude_pass(
            backup.as_ref(),
            stored.as_ref(),
            &status,
            &mut pass.core,
            &report,
            RESYNC,
        )
        .await
    }
}

struct RestoreState {
    ctx: Arc<Context>,
    pods: Indexed<CachedPod>,
    pipeline: crate::pipeline::Pipeline<restore::RestorePass>,
}

#[async_trait]
impl EngineState for RestoreState {
    type Cluster = FoundationDBRestore;

    fn ctx(&self) -> &Arc<Context> {
        &self.ctx
    }

    async fn cleanup(&self, r: Arc<FoundationDBRestore>) -> Result<Action, Error> {
        if let Some(uid) = r.uid() {
            self.ctx.forget_version(&uid);
        }
        Ok(Action::await_change())
    }

    async fn apply(&self, r: Arc<FoundationDBRestore>) -> Result<Action, Error> {
        let ctx = &self.ctx;
        let stored = r.status.clone();
        let mut pass = restore::new_pass(ctx, self.pods.clone(), r.clone());
        let report = self.pipeline.run(&mut pass, &ctx.metrics).await;
        let mut status = pass.status;
        status.common = std::mem::take(&mut pass.core.status);
        ctx.conclude_pass(
            r.as_ref(),
            stored.as_ref(),
            &status,
            &mut pass.core,
            &report,
            RESYNC,
        )
        .await
    }
}

/// Runs the backup and the restore controllers until `stop` is cancelled.
pub async fn run(ctx: Arc<Context>, pods: Indexed<CachedPod>, stop: CancellationToken) {
    let backups: Api<FoundationDBBackup> = ctx.watched_api();
    let restores: Api<FoundationDBRestore> = ctx.watched_api();
    let backup_state = Arc::new(BackupState {
        ctx: ctx.clone(),
        pods: pods.clone(),
        pipeline: pipeline(),
    });
    let restore_state = Arc::new(RestoreState {
        ctx: ctx.clone(),
        pods,
        pipeline: restore::pipeline(),
    });
    let (cache, trigger) = crate::runtime::stores::primary(backups, stop.clone());
    let stop_b = stop.clone();
    let backups = Controller::for_shared_stream(trigger, cache)
        .with_config(ctx.controller_config())
        .graceful_shutdown_on(async move { stop_b.cancelled().await })
        .run(
            reconcile::<BackupState>,
            |obj, err, state: Arc<BackupState>| error_policy(obj, err, state.ctx.clone()),
            backup_state,
        )
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(controller = CONTROLLER, error = %err, "controller event");
            }
        });
    let (cache, trigger) = crate::runtime::stores::primary(restores, stop.clone());
    let restores = Controller::for_shared_stream(trigger, cache)
        .with_config(ctx.controller_config())
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(
            reconcile::<RestoreState>,
            |obj, err, state: Arc<RestoreState>| error_policy(obj, err, state.ctx.clone()),
            restore_state,
        )
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(controller = restore::CONTROLLER, error = %err, "controller event");
            }
        });
    futures::join!(backups, restores);
}
