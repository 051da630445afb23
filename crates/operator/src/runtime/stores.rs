//! Shared reflector stores: one watch per child kind for all controllers, filtered to objects
//! Steward manages. Steps read children from these caches, never with fresh GETs.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::runtime::reflector::{self, ReflectHandle, Store};

use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use super::context::Context;
use crate::resources::labels::{INSTANCE, MANAGED_BY, MANAGER};

/// A cache with an index by (namespace, `app.kubernetes.io/instance`): the children of one
/// cluster without scanning every cluster's. Every child Steward makes carries the instance
/// label. The index is rebuilt lazily, on the first lookup after the watch changed the cache
/// (a counter moved by the stream that feeds the store), so a pass over a converged cluster
/// costs a hash lookup, not a walk over 1,000 clusters' Pods. `Deref`s to the plain store.
#[derive(Clone)]
pub struct Indexed<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    /// Moved after each event the store applied; `None`: unknown (rebuild on every lookup).
    changes: Option<Arc<AtomicU64>>,
    index: Arc<Mutex<Index<K>>>,
}

type InstanceKey = (String, String);

struct Index<K> {
    built_at: Option<u64>,
    by_instance: HashMap<InstanceKey, Vec<Arc<K>>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Indexed<K> {
    fn new(store: Store<K>, changes: Option<Arc<AtomicU64>>) -> Self {
        Self {
            store,
            changes,
            index: Arc::new(Mutex::new(Index {
                built_at: None,
                by_instance: HashMap::new(),
            })),
        }
    }

    /// The cached objects of cluster `instance` in `namespace`.
    pub fn of_instance(&self, namespace: &str, instance: &str) -> Vec<Arc<K>> {
        let version = self.changes.as_ref().map(|c| c.load(Ordering::Acquire));
        // The index is rebuilt from the store whenever in doubt, so a poisoned lock is harmless.
        let mut index = self
            .index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if version.is_none() || index.built_at != version {
            let mut by_instance: HashMap<InstanceKey, Vec<Arc<K>>> = HashMap::new();
            for obj in self.store.state() {
                let meta = obj.meta();
                if let (Some(ns), Some(inst)) = (
                    meta.namespace.as_ref(),
                    meta.labels.as_ref().and_then(|l| l.get(INSTANCE)),
                ) {
                    by_instance
                        .entry((ns.clone(), inst.clone()))
                        .or_default()
                        .push(obj);
                }
            }
            index.by_instance = by_instance;
            index.built_at = version;
        }
        index
            .by_instance
            .get(&(namespace.to_owned(), instance.to_owned()))
            .cloned()
            .unwrap_or_default()
    }
}

/// A store no counter follows (tests that fill a store by hand): the index is rebuilt on every
/// lookup.
impl<K: Resource<DynamicType = ()> + Clone + 'static> From<Store<K>> for Indexed<K> {
    fn from(store: Store<K>) -> Self {
        Self::new(store, None)
    }
}

impl<K: Resource<DynamicType = ()> + 'static> std::ops::Deref for Indexed<K> {
    type Target = Store<K>;

    fn deref(&self) -> &Store<K> {
        &self.store
    }
}

/// Events a shared cache buffers for each subscriber.
pub const BUFFER: usize = 1024;

/// The watch of Steward's objects of `K`, each slimmed by `trim` before it enters a cache.
fn managed_watch<K>(
    api: Api<K>,
    trim: fn(&mut K),
) -> impl futures::Stream<Item = watcher::Result<watcher::Event<K>>>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + 'static,
{
    let config = watcher::Config::default().labels(&format!("{MANAGED_BY}={MANAGER}"));
    watcher(api, config).default_backoff().modify(trim)
}

/// Drops what no step reads before an object enters a cache: `managedFields` (often the
/// largest part of a child: one entry per field manager, every field listed) and kubectl's
/// last-applied annotation. Steps compare desired state with the fields they set, never with
/// managed fields, and server-side apply does not need them on the client.
pub fn slim<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// Keeps what the applier reads of a child no step reads (disruption budgets, ConfigMaps):
/// its name, namespace, UID, `resourceVersion`, owner references and deletion. Labels and
/// annotations go: each is a map of its own (a node of eleven slots and two strings per entry,
/// ~1 KiB for a child's six labels), and nothing looks these children up by label. Not for a
/// kind a step finds by label (Services: the etcd orphan sweep reads them through
/// [`Indexed::of_instance`]).
pub fn version_only<K: Resource>(obj: &mut K) {
    unlabelled(obj);
    let meta = obj.meta_mut();
    meta.finalizers = None;
    meta.generate_name = None;
}

/// [`slim`], and the labels and annotations go too: for a kind steps find by name only and
/// whose labels and annotations they never read (Steward's generated Secrets: steps read
/// their data). A label map costs ~800 bytes however few its labels. The cache's
/// [`Indexed::of_instance`] finds nothing in such a cache.
pub fn unlabelled<K: Resource>(obj: &mut K) {
    slim(obj);
    let meta = obj.meta_mut();
    meta.labels = None;
    meta.annotations = None;
}

/// The cache and trigger stream of a controller's own kind (every object of `K` it watches),
/// slimmed like the child caches: for `Controller::for_stream`.
pub fn primary<K>(
    api: Api<K>,
) -> (
    Store<K>,
    impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(slim),
    )
    .applied_objects();
    (store, stream)
}

/// Drives a cache's watch stream until `stop`, logging watch errors.
fn drive<K, S>(stream: S, changes: Arc<AtomicU64>, stop: CancellationToken)
where
    K: Resource<DynamicType = ()> + Send + 'static,
    S: futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
{
    tokio::spawn(async move {
        let drive = stream.for_each(|event| {
            // The reflector applied the event to the store before passing it on.
            changes.fetch_add(1, Ordering::Release);
            async move {
                if let Err(err) = event {
                    tracing::warn!(kind = %K::kind(&()), error = %err, "shared cache watch error");
                }
            }
        });
        tokio::select! {
            () = drive => {}
            () = stop.cancelled() => {}
        }
    });
}

/// Starts a cache of `K` (objects labelled `managed-by=steward`) that steps read and no
/// controller subscribes to, driven until `stop`.
pub fn cached<K>(api: Api<K>, stop: CancellationToken) -> Indexed<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    cached_with(api, slim, stop)
}

/// [`cached`], each object slimmed by `trim` ([`slim`], or [`unlabelled`] for a kind read by
/// name only) before it enters the cache.
pub fn cached_with<K>(api: Api<K>, trim: fn(&mut K), stop: CancellationToken) -> Indexed<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let changes = Arc::new(AtomicU64::new(0));
    drive(
        reflector::reflector(writer, managed_watch(api, trim)),
        changes.clone(),
        stop,
    );
    Indexed::new(store, Some(changes))
}

/// A cache of objects' metadata only ([`metadata`]).
pub type MetaStore<K> = Store<PartialObjectMeta<K>>;

/// Starts a cache of the metadata only (name, `resourceVersion`: [`version_only`]) of Steward's `K`s,
/// driven until `stop`: what [`crate::resources::apply::Applier::apply_unless_current`] needs
/// to know a child is still as the operator last applied it, for kinds no step reads
/// (ConfigMaps holding scripts, disruption budgets) — a few hundred bytes per object instead
/// of the object.
pub fn metadata<K>(api: Api<PartialObjectMeta<K>>, stop: CancellationToken) -> MetaStore<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let (store, writer) = reflector::store::<PartialObjectMeta<K>>();
    let config = watcher::Config::default().labels(&format!("{MANAGED_BY}={MANAGER}"));
    drive(
        reflector::reflector(
            writer,
            watcher(api, config).default_backoff().modify(version_only),
        ),
        Arc::new(AtomicU64::new(0)),
        stop,
    );
    store
}

/// Starts a shared cache of `K` (objects labelled `managed-by=steward`, each slimmed by `trim`
/// — [`slim`], or a kind's own that also drops the fields no step reads), driven until `stop`.
/// Returns the store and a subscription for a controller's `owns_shared_stream`. Every
/// subscription must be read: a subscriber that falls `BUFFER` events behind stops the watch
/// (the shared reflector waits for it), so kinds only read from the cache use [`cached`].
/// With `K` a `PartialObjectMeta` the watch is metadata-only, and so is the cache (for kinds
/// whose steps read only metadata: a typed object's empty spec and status structs are most of
/// its size).
pub fn shared<K>(
    ctx: &Arc<Context>,
    trim: fn(&mut K),
    stop: CancellationToken,
) -> Option<(Indexed<K>, ReflectHandle<K>)>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let api: Api<K> = ctx.watched_api();
    let (store, writer) = reflector::store_shared::<K>(BUFFER);
    let subscriber = writer.subscribe()?;
    let changes = Arc::new(AtomicU64::new(0));
    drive(
        managed_watch(api, trim).reflect_shared(writer),
        changes.clone(),
        stop,
    );
    Some((Indexed::new(store, Some(changes)), subscriber))
}

/// Starts a shared cache of every `K` in the watched namespaces (user-created objects such as
/// `PostgresBackup`, which carry no Steward label), driven until `stop`, with a subscription
/// for the controller that maps them to their cluster.
pub fn watched<K>(
    ctx: &Arc<Context>,
    stop: CancellationToken,
) -> Option<(Store<K>, ReflectHandle<K>)>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    labelled_with(ctx, watcher::Config::default(), stop)
}

/// Starts a shared cache of the `K`s carrying `label` (a selector) in the watched namespaces,
/// slimmed, driven until `stop`, with a subscription for the controller those objects wake.
/// The store holds an event's object before the subscription sees it, so a pass woken by a
/// change reads the changed object from the store.
pub fn labelled<K>(
    ctx: &Arc<Context>,
    label: &str,
    stop: CancellationToken,
) -> Option<(Store<K>, ReflectHandle<K>)>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    labelled_with(ctx, watcher::Config::default().labels(label), stop)
}

/// [`watched`] and [`labelled`]: a shared, slimmed cache of the `K`s `config` selects in the
/// watched namespaces, with a subscription.
fn labelled_with<K>(
    ctx: &Arc<Context>,
    config: watcher::Config,
    stop: CancellationToken,
) -> Option<(Store<K>, ReflectHandle<K>)>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let api: Api<K> = ctx.watched_api();
    let (store, writer) = reflector::store_shared::<K>(BUFFER);
    let subscriber = writer.subscribe()?;
    drive(
        watcher(api, config)
            .default_backoff()
            .modify(slim)
            .reflect_shared(writer),
        Arc::new(AtomicU64::new(0)),
        stop,
    );
    Some((store, subscriber))
}

/// The object `namespace/name` from `cache`, or, when the cache does not hold it (not
/// labelled yet, just created, a cache still filling), from the API server.
pub async fn cached_or_get<K>(
    cache: &Store<K>,
    api: &Api<K>,
    namespace: &str,
    name: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + 'static,
{
    let key = reflector::ObjectRef::<K>::new(name).within(namespace);
    match cache.get(&key) {
        Some(obj) => Ok(Some(obj.as_ref().clone())),
        None => api.get_opt(name).await,
    }
}

/// Starts the cluster-wide cache of Nodes (slimmed to what `resources::nodes::state` reads),
/// driven until `stop`, with a subscription for a controller that reacts to cordons and lost
/// Nodes. Needs `list`/`watch` on Nodes (the `steward-operator-nodes` ClusterRole); without
/// it the watch logs the 403 and every Node counts as usable.
pub fn nodes(
    client: kube::Client,
    stop: CancellationToken,
) -> Option<(
    Store<k8s_openapi::api::core::v1::Node>,
    ReflectHandle<k8s_openapi::api::core::v1::Node>,
)> {
    use k8s_openapi::api::core::v1::Node;
    let api: Api<Node> = Api::all(client);
    let (store, writer) = reflector::store_shared::<Node>(BUFFER);
    let subscriber = writer.subscribe()?;
    drive(
        watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(crate::resources::nodes::slim)
            .reflect_shared(writer),
        Arc::new(AtomicU64::new(0)),
        stop,
    );
    Some((store, subscriber))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;

    /// A Secret keeps its data, identity and version; its labels and annotations go.
    #[test]
    fn unlabelled_keeps_data_identity_and_version() {
        use k8s_openapi::ByteString;
        use k8s_openapi::api::core::v1::Secret;
        let meta = ObjectMeta {
            name: Some("demo-superuser".into()),
            namespace: Some("db".into()),
            resource_version: Some("7".into()),
            labels: Some([(INSTANCE.to_owned(), "demo".to_owned())].into()),
            annotations: Some([("a".to_owned(), "b".to_owned())].into()),
            managed_fields: Some(vec![Default::default()]),
            ..ObjectMeta::default()
        };
        let data =
            std::collections::BTreeMap::from([("password".to_owned(), ByteString(b"x".to_vec()))]);
        let mut secret = Secret {
            metadata: meta.clone(),
            data: Some(data.clone()),
            ..Secret::default()
        };
        unlabelled(&mut secret);
        assert_eq!(secret.data, Some(data));
        assert_eq!(
            secret.metadata,
            ObjectMeta {
                labels: None,
                annotations: None,
                managed_fields: None,
                ..meta
            }
        );
    }

    /// What the applier's skip and the owner mapping read survives; the maps do not.
    #[test]
    fn version_only_keeps_identity_version_and_owners() {
        let owner = OwnerReference {
            api_version: "steward.dev/v1alpha1".into(),
            kind: "EtcdCluster".into(),
            name: "demo".into(),
            uid: "u0".into(),
            controller: Some(true),
            ..OwnerReference::default()
        };
        let meta = ObjectMeta {
            name: Some("demo-client".into()),
            namespace: Some("db".into()),
            uid: Some("u1".into()),
            resource_version: Some("42".into()),
            owner_references: Some(vec![owner]),
            labels: Some([(INSTANCE.to_owned(), "demo".to_owned())].into()),
            annotations: Some([("a".to_owned(), "b".to_owned())].into()),
            managed_fields: Some(vec![Default::default()]),
            ..ObjectMeta::default()
        };
        let mut obj = PartialObjectMeta::<Service> {
            types: None,
            metadata: meta.clone(),
            _phantom: std::marker::PhantomData,
        };
        version_only(&mut obj);
        assert_eq!(
            obj.metadata,
            ObjectMeta {
                labels: None,
                annotations: None,
                managed_fields: None,
                ..meta
            }
        );
    }
}
