//! Wires the snapshot pipeline into a kube-runtime `Controller`. An `EtcdBackup` owns its Job,
//! whose changes wake it (a watch of the Jobs labelled with a backup's name, nothing cached
//! beyond what the controller needs to map them); a running backup also looks again every few
//! seconds (the steps requeue), a finished one every [`RESYNC`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::{Api, ResourceExt};
use steward_api::common::CommonStatus;
use steward_api::etcd::{EtcdBackup, EtcdBackupStatus};
use tokio_util::sync::CancellationToken;

use super::{CONTROLLER, SnapshotPass, pipeline};
use crate::error::Error;
use crate::runtime::context::{ClusterStatus, Context, error_policy};
use crate::runtime::engine::{EngineState, reconcile};

/// How often a settled backup is looked at again.
pub const RESYNC: Duration = Duration::from_secs(300);

impl ClusterStatus for EtcdBackupStatus {
    fn common(&self) -> &CommonStatus {
        &self.common
    }
}

struct State {
    ctx: Arc<Context>,
    pipeline: crate::pipeline::Pipeline<SnapshotPass>,
}

#[async_trait]
impl EngineState for State {
    type Cluster = EtcdBackup;

    fn ctx(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The Job is owned (garbage-collected); the snapshot file and its claim are kept.
    async fn cleanup(&self, backup: Arc<EtcdBackup>) -> Result<Action, Error> {
        if let Some(uid) = backup.uid() {
            self.ctx.forget_version(&uid);
        }
        Ok(Action::await_change())
    }

    async fn apply(&self, backup: Arc<EtcdBackup>) -> Result<Action, Error> {
        let ctx = &self.ctx;
        let stored = backup.status.clone();
        let mut pass = SnapshotPass {
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
            looked: false,
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

/// Runs the `EtcdBackup` controller until `stop` is cancelled.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let backups: Api<EtcdBackup> = ctx.watched_api();
    let state = Arc::new(State {
        ctx: ctx.clone(),
        pipeline: pipeline(),
    });
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = ctx.watched_api();
    let (cache, trigger) = crate::runtime::stores::primary(backups, stop.clone());
    Controller::for_shared_stream(trigger, cache)
        .with_config(ctx.controller_config())
        .owns(
            jobs,
            kube::runtime::watcher::Config::default()
                .labels(crate::etcd::build::snapshot::BACKUP_LABEL),
        )
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(
            reconcile::<State>,
            |obj, err, state: Arc<State>| error_policy(obj, err, state.ctx.clone()),
            state,
        )
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(controller = CONTROLLER, error = %err, "controller event");
            }
        })
        .await;
}
