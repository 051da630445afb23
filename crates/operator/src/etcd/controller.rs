//! Wires the etcd pipeline into a kube-runtime `Controller`: the cluster kind is the trigger,
//! Services come from the shared reflector store, and each pass ends with one status write.

use std::sync::Arc;
use std::time::Duration;

use crate::runtime::stores::Subscription;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::controller::{Action, Controller};
use kube::{Api, ResourceExt};
use steward_api::common::RetentionPolicy;
use steward_api::etcd::{EtcdCluster, EtcdPeer};
use tokio_util::sync::CancellationToken;

use super::names::ClusterNames;
use super::{CONTROLLER, EtcdPass, EtcdStores, pipeline};
use crate::error::Error;
use crate::resources::{AppliedSet, Applier};
use crate::runtime::context::{Context, error_policy};
use crate::runtime::engine::{EngineState, reconcile};

/// How often a converged cluster is looked at again (the database can change without an API
/// event).
pub const RESYNC: Duration = Duration::from_secs(60);

struct State {
    ctx: Arc<Context>,
    stores: EtcdStores,
    pipeline: crate::pipeline::Pipeline<EtcdPass>,
}

#[async_trait::async_trait]
impl EngineState for State {
    type Cluster = EtcdCluster;

    fn ctx(&self) -> &Arc<Context> {
        &self.ctx
    }

    async fn apply(&self, cluster: Arc<EtcdCluster>) -> Result<Action, Error> {
        apply(cluster, self).await
    }

    async fn cleanup(&self, cluster: Arc<EtcdCluster>) -> Result<Action, Error> {
        cleanup(cluster, self).await
    }
}

/// Runs before the cluster disappears. Children with owner references (Services, peers, Pods)
/// are garbage-collected by Kubernetes; PersistentVolumeClaims are deleted only when
/// `storage.retainOnDelete` is `Delete` — by default they are kept, as the etcd seed says.
async fn cleanup(cluster: Arc<EtcdCluster>, state: &State) -> Result<Action, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    if cluster.spec.storage.retain_on_delete == RetentionPolicy::Delete {
        crate::resources::sweep::delete_cluster_claims(
            &state.ctx.client,
            "etcd",
            &namespace,
            &cluster.name_any(),
            None,
        )
        .await?;
        tracing::info!(namespace, name = %cluster.name_any(), "deleted member claims (retainOnDelete: Delete)");
    }
    if let Some(uid) = cluster.uid() {
        state.ctx.forget_version(&uid);
    }
    Ok(Action::await_change())
}

async fn apply(cluster: Arc<EtcdCluster>, state: &State) -> Result<Action, Error> {
    let ctx = &state.ctx;
    let stored = cluster.status.clone();
    let stored_common = stored
        .as_ref()
        .map(|s| s.common.clone())
        .unwrap_or_default();
    let core = ctx.pass_core(
        CONTROLLER,
        cluster.as_ref(),
        stored_common,
        cluster.spec.timeouts.clone(),
    );
    let mut pass = EtcdPass {
        core,
        cluster: cluster.clone(),
        validated: None,
        status: stored.clone().unwrap_or_default(),
        stores: state.stores.clone(),
        names: ClusterNames::new(
            cluster.name_any(),
            cluster.namespace().unwrap_or_default(),
            ctx.cluster_domain.clone(),
        ),
        observed: None,
        admin: None,
        observe_done: false,
        observe_error: None,
        unschedulable: None,
        endpoints: std::collections::BTreeMap::new(),
        applier: Applier::new(ctx.client.clone(), CONTROLLER).with_memo(ctx.applied.clone()),
        applied: AppliedSet::default(),
        ctx: ctx.clone(),
    };
    let report = state.pipeline.run(&mut pass, &ctx.metrics).await;
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

/// Runs the etcd cluster controller until `stop` is cancelled. It is triggered by its
/// clusters, their Services and their peers (whose status follows member Pods).
pub async fn run(
    ctx: Arc<Context>,
    stores: EtcdStores,
    service_events: Subscription<crate::resources::packed::CachedMeta<Service>>,
    peer_events: Subscription<EtcdPeer>,
    stop: CancellationToken,
) {
    let clusters: Api<EtcdCluster> = ctx.watched_api();
    let state = Arc::new(State {
        ctx: ctx.clone(),
        stores,
        pipeline: pipeline(),
    });
    let (cache, trigger) = crate::runtime::stores::primary(clusters, stop.clone());
    Controller::for_shared_stream(trigger, cache)
        .with_config(ctx.controller_config())
        .owns_shared_stream(service_events)
        .owns_shared_stream(peer_events)
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
