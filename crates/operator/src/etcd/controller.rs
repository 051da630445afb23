//! Wires the etcd pipeline into a kube-runtime `Controller`: the cluster kind is the trigger,
//! Services come from the shared reflector store, and each pass ends with one status write.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::reflector::ReflectHandle;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use steward_api::etcd::EtcdCluster;
use tokio_util::sync::CancellationToken;

use super::{CONTROLLER, EtcdPass, pipeline};
use crate::error::Error;
use crate::pipeline::{Pass, PassCore};
use crate::resources::{AppliedSet, Applier};
use crate::runtime::context::{Context, error_policy};

/// How often a converged cluster is looked at again (the database can change without an API
/// event).
pub const RESYNC: Duration = Duration::from_secs(60);

struct State {
    ctx: Arc<Context>,
    services: Store<Service>,
    pipeline: crate::pipeline::Pipeline<EtcdPass>,
}

async fn reconcile(cluster: Arc<EtcdCluster>, state: Arc<State>) -> Result<Action, Error> {
    let ctx = &state.ctx;
    let stored = cluster.status.clone();
    let stored_common = stored.as_ref().map(|s| s.common.clone()).unwrap_or_default();
    let mut core = PassCore::new(
        CONTROLLER,
        cluster.namespace().unwrap_or_default(),
        cluster.name_any(),
        cluster.metadata.generation.unwrap_or_default(),
        ctx.clock.now(),
        stored_common,
    );
    core.timeouts = ctx.timeouts.clone();
    core.timeout_overrides = cluster.spec.timeouts.clone();
    let mut pass = EtcdPass {
        core,
        cluster: cluster.clone(),
        validated: None,
        status: stored.clone().unwrap_or_default(),
        services: state.services.clone(),
        applier: Applier::new(ctx.client.clone(), CONTROLLER),
        applied: AppliedSet::default(),
        ctx: ctx.clone(),
    };
    let report = state.pipeline.run(&mut pass, &ctx.metrics).await;
    tracing::info!(
        controller = CONTROLLER, namespace = %pass.core().namespace, name = %pass.core().name,
        result = report.result.label(), "reconcile pass finished"
    );
    let mut status = pass.status;
    status.common = pass.core.status;
    let effects = std::mem::take(&mut pass.core.effects);
    ctx.finish_pass(cluster.as_ref(), stored.as_ref(), &status, effects, &report, RESYNC).await
}

/// Runs the etcd controller until `stop` is cancelled.
pub async fn run(
    ctx: Arc<Context>,
    services: Store<Service>,
    service_events: ReflectHandle<Service>,
    stop: CancellationToken,
) {
    let clusters: Api<EtcdCluster> = match &ctx.namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let state = Arc::new(State { ctx: ctx.clone(), services, pipeline: pipeline() });
    Controller::new(clusters, watcher::Config::default())
        .owns_shared_stream(service_events)
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(reconcile, |obj, err, state: Arc<State>| error_policy(obj, err, state.ctx.clone()), state)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(controller = CONTROLLER, error = %err, "controller event");
            }
        })
        .await;
}
