//! Wires the FoundationDB pipeline into a kube-runtime `Controller`: the cluster kind is the
//! trigger; its Pods (by their instance label) wake it. Claims are read from the cache; a pass
//! that waits on them requeues.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use steward_api::foundationdb::FoundationDBCluster;
use tokio_util::sync::CancellationToken;

use super::build::ENGINE;
use super::{CONTROLLER, FdbPass, FdbStores, Settings, build, pipeline};
use crate::error::Error;
use crate::resources::pods::CachedPod;
use crate::resources::{AppliedSet, Applier, labels};
use crate::runtime::context::{Context, error_policy};
use crate::runtime::engine::{EngineState, reconcile};
use crate::runtime::stores::Subscription;

/// How often a converged cluster is looked at again (processes change without API events).
pub const RESYNC: Duration = Duration::from_secs(30);

struct State {
    ctx: Arc<Context>,
    stores: FdbStores,
    pipeline: crate::pipeline::Pipeline<FdbPass>,
}

/// A pass over `cluster` with the stored status (the pipeline's starting point).
pub fn new_pass(
    ctx: &Arc<Context>,
    stores: FdbStores,
    cluster: Arc<FoundationDBCluster>,
) -> FdbPass {
    let stored = cluster.status.clone().unwrap_or_default();
    let core = ctx.pass_core(
        CONTROLLER,
        cluster.as_ref(),
        stored.common.clone(),
        cluster.spec.timeouts.clone(),
    );
    FdbPass {
        core,
        prefix: build::prefix(&cluster),
        cluster,
        valid: false,
        status: stored,
        stores,
        db: None,
        db_error: None,
        observed: false,
        pod_hashes: Default::default(),
        created_pods: Vec::new(),
        locked: false,
        applier: Applier::new(ctx.client.clone(), CONTROLLER).with_memo(ctx.applied.clone()),
        applied: AppliedSet::default(),
        settings: ctx.seam::<Settings>().unwrap_or_else(|_| {
            Settings::from_settings(
                &ctx.seam::<crate::config::EngineSettings>()
                    .unwrap_or_default(),
            )
        }),
        ctx: ctx.clone(),
    }
}

#[async_trait]
impl EngineState for State {
    type Cluster = FoundationDBCluster;

    fn ctx(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Pods, the ConfigMap and the headless Service are owned and garbage-collected; claims are
    /// kept (they have no owner), as FoundationDB's operator keeps them.
    async fn cleanup(&self, cluster: Arc<FoundationDBCluster>) -> Result<Action, Error> {
        if let Some(uid) = cluster.uid() {
            self.ctx.forget_version(&uid);
        }
        Ok(Action::await_change())
    }

    async fn apply(&self, cluster: Arc<FoundationDBCluster>) -> Result<Action, Error> {
        let ctx = &self.ctx;
        let stored = cluster.status.clone();
        let mut pass = new_pass(ctx, self.stores.clone(), cluster.clone());
        let report = self.pipeline.run(&mut pass, &ctx.metrics).await;
        let mut status = pass.status;
        status.common = std::mem::take(&mut pass.core.status);
        ctx.conclude_pass(
            cluster.as_ref(),
            stored.as_ref(),
            &status,
            &mut pass.core,
            &report,
            RESYNC,
        )
        .await
    }
}

/// Runs the FoundationDB controller until `stop` is cancelled.
pub async fn run(
    ctx: Arc<Context>,
    stores: FdbStores,
    pods: Subscription<CachedPod>,
    stop: CancellationToken,
) {
    let clusters: Api<FoundationDBCluster> = ctx.watched_api();
    let state = Arc::new(State {
        ctx: ctx.clone(),
        stores,
        pipeline: pipeline(),
    });
    let (cache, trigger) = crate::runtime::stores::primary(clusters, stop.clone());
    Controller::for_shared_stream(trigger, cache)
        .with_config(ctx.controller_config())
        .watches_shared_stream(pods, |pod: Arc<CachedPod>| {
            let l = pod.labels();
            if l.get(labels::NAME) != Some(ENGINE) {
                return None;
            }
            let cluster = l.get(labels::INSTANCE)?;
            Some(ObjectRef::new(cluster).within(&pod.namespace()?))
        })
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
