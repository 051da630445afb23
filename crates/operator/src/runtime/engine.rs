//! What every engine's cluster controller shares: the reconcile entry point that re-reads a
//! stale cached object ([`Context::fresh`]), puts Steward's finalizer on the cluster, and hands
//! the cluster to the engine's `apply` (one pipeline pass) or, on deletion, its `cleanup`.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::runtime::context::Context;

/// Steward's finalizer on cluster resources: deletion waits for the engine's cleanup.
pub const FINALIZER: &str = "steward.dev/cleanup";

/// One engine's controller state.
#[async_trait]
pub trait EngineState: Send + Sync + 'static {
    /// The cluster kind.
    type Cluster: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static;

    /// The shared context.
    fn ctx(&self) -> &Arc<Context>;

    /// One pass over a live cluster.
    async fn apply(&self, cluster: Arc<Self::Cluster>) -> Result<Action, Error>;

    /// Runs before the cluster disappears.
    async fn cleanup(&self, cluster: Arc<Self::Cluster>) -> Result<Action, Error>;
}

/// The controller's reconcile function for any engine.
pub async fn reconcile<S: EngineState>(
    cluster: Arc<S::Cluster>,
    state: Arc<S>,
) -> Result<Action, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let object = format!("{namespace}/{}", cluster.name_any());
    let Some(cluster) = state.ctx().fresh(cluster).await? else {
        return Ok(Action::await_change());
    };
    let api: Api<S::Cluster> = Api::namespaced(state.ctx().client.clone(), &namespace);
    finalizer(&api, FINALIZER, cluster, |event| async {
        match event {
            FinalizerEvent::Apply(cluster) => state.apply(cluster).await,
            FinalizerEvent::Cleanup(cluster) => state.cleanup(cluster).await,
        }
    })
    .await
    .map_err(|err| Error::from_finalizer(object, err))
}
