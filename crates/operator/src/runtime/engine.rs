//! The seam between the runtime and the engines. [`Engine`] is what the runtime runs without
//! naming an engine: what each engine's controllers take from the shared caches ([`Wakes`],
//! [`SharedCaches`], [`Subscriptions`]), its admin seams, and its controllers. And what every
//! engine's cluster controller shares: the reconcile entry point that re-reads a stale cached
//! object ([`Context::fresh`]), puts Steward's finalizer on the cluster, and hands the cluster
//! to the engine's `apply` (one pipeline pass) or, on deletion, its `cleanup`.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, PersistentVolumeClaim, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::resources::packed::CachedMeta;
use crate::resources::pods::CachedPod;
use crate::runtime::context::Context;
use crate::runtime::stores::{Indexed, MetaStore, Subscription};

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

/// How many subscriptions to each shared cache an engine's controllers take: one per
/// controller that the kind wakes (a controller that only reads a kind takes none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wakes {
    /// Services (owned by clusters).
    pub services: usize,
    /// Pods.
    pub pods: usize,
    /// StatefulSets.
    pub statefulsets: usize,
    /// The users' password Secrets (labelled `steward.dev/user-password`).
    pub user_secrets: usize,
    /// Nodes (cordons, lost Nodes).
    pub nodes: usize,
}

/// The caches of Kubernetes kinds that engines share, started once per leadership term by
/// the runtime before any engine runs (objects labelled `managed-by=steward`, slimmed; see
/// `runtime::stores`).
#[derive(Clone)]
pub struct SharedCaches {
    /// Services, metadata only.
    pub services: Indexed<CachedMeta<Service>>,
    /// Pods.
    pub pods: Indexed<CachedPod>,
    /// Claims, metadata only (read from the cache; no controller is woken by them).
    pub claims: Indexed<CachedMeta<PersistentVolumeClaim>>,
    /// StatefulSets.
    pub statefulsets: Indexed<StatefulSet>,
    /// Disruption budgets, metadata only (to skip applies that would change nothing).
    pub budgets: MetaStore<PodDisruptionBudget>,
    /// ConfigMaps, metadata only (to skip applies that would change nothing).
    pub config_maps: MetaStore<ConfigMap>,
    /// Steward's own Secrets, read by name for their data.
    pub secrets: Indexed<Secret>,
    /// The users' password Secrets.
    pub user_secrets: Store<Secret>,
    /// Every Node, slimmed (`resources::nodes`).
    pub nodes: Store<Node>,
}

/// One engine's subscriptions to the shared caches, as many of each as its [`Wakes`] asked.
#[derive(Default)]
pub struct Subscriptions {
    /// Services.
    pub services: Vec<Subscription<CachedMeta<Service>>>,
    /// Pods.
    pub pods: Vec<Subscription<CachedPod>>,
    /// StatefulSets.
    pub statefulsets: Vec<Subscription<StatefulSet>>,
    /// The users' password Secrets.
    pub user_secrets: Vec<Subscription<Secret>>,
    /// Nodes.
    pub nodes: Vec<Subscription<Node>>,
}

/// A database engine: what the runtime needs to run it without naming it (style.md §11). The
/// list of engines is `crate::engines::all`; a new engine adds itself there in one line.
pub trait Engine: Send + Sync + 'static {
    /// How many of its controllers each shared kind wakes.
    fn wakes(&self) -> Wakes;

    /// Puts the engine's production admin seams (database clients) into `seams`; tests replace
    /// them with models.
    fn install_seams(&self, client: &kube::Client, seams: &mut http::Extensions);

    /// Starts the engine's own caches and runs its controllers until `stop` is cancelled.
    fn run(
        &self,
        ctx: Arc<Context>,
        shared: SharedCaches,
        subscriptions: Subscriptions,
        stop: CancellationToken,
    ) -> BoxFuture<'static, ()>;
}
