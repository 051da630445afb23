//! Wires the CrateDB pipeline into a kube-runtime `Controller`: the cluster kind is the
//! trigger; its Services and StatefulSets (owned) and its node Pods (by their instance label)
//! wake it, and so does a change of a Secret labelled `steward.dev/user-password` that one of
//! its users references (that is how a password rotation starts within seconds).

use crate::resources::pods::CachedPod;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::stores::Subscription;
use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use steward_api::cratedb::CrateCluster;
use tokio_util::sync::CancellationToken;

use super::names::{ClusterNames, ENGINE};
use super::{CONTROLLER, CratePass, CrateStores, pipeline};
use crate::error::Error;
use crate::resources::{AppliedSet, Applier, labels};
use crate::runtime::context::{Context, error_policy};
use crate::runtime::engine::{EngineState, reconcile};

/// How often a converged cluster is looked at again (health and nodes change without API
/// events).
pub const RESYNC: Duration = Duration::from_secs(30);

struct State {
    ctx: Arc<Context>,
    stores: CrateStores,
    pipeline: crate::pipeline::Pipeline<CratePass>,
}

#[async_trait]
impl EngineState for State {
    type Cluster = CrateCluster;

    fn ctx(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Children are owned and garbage-collected; the StatefulSets' claims follow each disk's
    /// `retainOnDelete` (`persistentVolumeClaimRetentionPolicy.whenDeleted`).
    async fn cleanup(&self, cluster: Arc<CrateCluster>) -> Result<Action, Error> {
        if let Some(uid) = cluster.uid() {
            self.ctx.forget_version(&uid);
        }
        Ok(Action::await_change())
    }

    async fn apply(&self, cluster: Arc<CrateCluster>) -> Result<Action, Error> {
        let ctx = &self.ctx;
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
        let mut pass = CratePass {
            core,
            cluster: cluster.clone(),
            validated: None,
            status: stored.clone().unwrap_or_default(),
            stores: self.stores.clone(),
            names: ClusterNames::new(
                cluster.name_any(),
                cluster.namespace().unwrap_or_default(),
                ctx.cluster_domain.clone(),
            ),
            system: None,
            nodes: Vec::new(),
            masters: Vec::new(),
            observed: None,
            observe_error: None,
            observe_done: false,
            unschedulable: None,
            applier: Applier::new(ctx.client.clone(), CONTROLLER).with_memo(ctx.applied.clone()),
            applied: AppliedSet::default(),
            ctx: ctx.clone(),
        };
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

/// Whether `cluster` takes a user's password from `secret`.
fn references(cluster: &CrateCluster, secret: &Secret) -> bool {
    cluster.namespace() == secret.namespace()
        && cluster
            .spec
            .users
            .iter()
            .any(|u| u.password.secret_key_ref.name == secret.name_any())
}

/// The event streams the controller follows besides its clusters.
pub struct Streams {
    /// Services (owned).
    pub services: Subscription<crate::resources::packed::CachedMeta<Service>>,
    /// StatefulSets (owned).
    pub statefulsets: Subscription<StatefulSet>,
    /// Pods (owned by the StatefulSets; mapped by their instance label).
    pub pods: Subscription<crate::resources::pods::CachedPod>,
    /// Users' password Secrets.
    pub user_secrets: Subscription<Secret>,
}

/// Runs the CrateDB controller until `stop` is cancelled.
pub async fn run(
    ctx: Arc<Context>,
    stores: CrateStores,
    streams: Streams,
    stop: CancellationToken,
) {
    let clusters: Api<CrateCluster> = ctx.watched_api();
    let state = Arc::new(State {
        ctx: ctx.clone(),
        stores,
        pipeline: pipeline(),
    });
    let (cache, trigger) = crate::runtime::stores::primary(clusters, stop.clone());
    Controller::for_shared_stream(trigger, cache.clone())
        .with_config(ctx.controller_config())
        .owns_shared_stream(streams.services)
        .owns_shared_stream(streams.statefulsets)
        .watches_shared_stream(streams.pods, |pod: Arc<CachedPod>| {
            let l = pod.labels();
            if l.get(labels::NAME) != Some(ENGINE) {
                return None;
            }
            let cluster = l.get(labels::INSTANCE)?;
            Some(ObjectRef::new(cluster).within(&pod.namespace()?))
        })
        .watches_shared_stream(streams.user_secrets, move |secret: Arc<Secret>| {
            cache
                .state()
                .into_iter()
                .filter(|c| references(c, &secret))
                .map(|c| ObjectRef::from_obj(c.as_ref()))
                .collect::<Vec<_>>()
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
