//! Shared reflector stores: one watch per child kind for all controllers, filtered to objects
//! Steward manages. Steps read children from these caches, never with fresh GETs.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};

use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::context::Context;
use crate::resources::labels::{INSTANCE, MANAGED_BY, MANAGER};
use crate::resources::packed::{CachedMeta, LAST_APPLIED};
use crate::resources::pods::CachedPod;

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
}

/// How a cached object names its cluster: its `app.kubernetes.io/instance` label, wherever
/// its kind keeps labels (packed, for [`CachedPod`] and [`CachedMeta`]).
pub trait Instance {
    /// The value of the object's `app.kubernetes.io/instance` label.
    fn instance(&self) -> Option<&str>;
}

impl Instance for CachedPod {
    fn instance(&self) -> Option<&str> {
        self.labels().get(INSTANCE)
    }
}

impl<K> Instance for CachedMeta<K> {
    fn instance(&self) -> Option<&str> {
        self.labels().get(INSTANCE)
    }
}

/// A peer names its cluster in its spec: its cache keeps no labels ([`unlabelled`]).
impl Instance for steward_api::etcd::EtcdPeer {
    fn instance(&self) -> Option<&str> {
        Some(&self.spec.cluster_name)
    }
}

/// Kinds cached with their labels in their metadata.
macro_rules! instance_from_metadata {
    ($($kind:ty),* $(,)?) => {$(
        impl Instance for $kind {
            fn instance(&self) -> Option<&str> {
                self.meta().labels.as_ref()?.get(INSTANCE).map(String::as_str)
            }
        }
    )*};
}

instance_from_metadata!(
    k8s_openapi::api::apps::v1::StatefulSet,
    k8s_openapi::api::core::v1::Secret,
);

impl<K: Resource<DynamicType = ()> + Instance + Clone + 'static> Indexed<K> {
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
                if let (Some(ns), Some(inst)) = (obj.meta().namespace.as_ref(), obj.instance()) {
                    by_instance
                        .entry((ns.clone(), inst.to_owned()))
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

/// The selection of Steward's objects: labelled `managed-by=steward`.
fn managed() -> watcher::Config {
    watcher::Config::default().labels(&format!("{MANAGED_BY}={MANAGER}"))
}

/// A cache of the `K`s `config` selects through `api`, each slimmed by `trim`, driven until
/// `stop` (on the caches' thread), with `N` subscriptions, and the counter of the events it
/// applied.
fn subscribed<K, const N: usize>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
    stop: CancellationToken,
) -> (Store<K>, Arc<AtomicU64>, [Subscription<K>; N])
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    subscribed_with(api, config, trim, stop, |fanout| {
        std::array::from_fn(|_| fanout.subscribe())
    })
}

/// [`subscribed`] with the number of subscriptions known at run time (one per controller of
/// the registered engines that the kind wakes).
fn subscribed_n<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
    n: usize,
    stop: CancellationToken,
) -> (Store<K>, Arc<AtomicU64>, Vec<Subscription<K>>)
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    subscribed_with(api, config, trim, stop, |fanout| {
        (0..n).map(|_| fanout.subscribe()).collect()
    })
}

/// The cache behind [`subscribed`] and [`subscribed_n`]: `subscribe` takes the subscriptions
/// before the watch starts (a later one would miss what came before it).
fn subscribed_with<K, S>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
    stop: CancellationToken,
    subscribe: impl FnOnce(&mut Fanout<K>) -> S,
) -> (Store<K>, Arc<AtomicU64>, S)
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let mut fanout = Fanout::new(store.clone());
    let subscriptions = subscribe(&mut fanout);
    let changes = Arc::new(AtomicU64::new(0));
    drive(
        reflector::reflector(writer, watcher(api, config).default_backoff().modify(trim)),
        changes.clone(),
        fanout,
        stop,
    );
    (store, changes, subscriptions)
}

/// Drops what no step reads before an object enters a cache: `managedFields` (often the
/// largest part of a child: one entry per field manager, every field listed) and kubectl's
/// last-applied annotation. Steps compare desired state with the fields they set, never with
/// managed fields, and server-side apply does not need them on the client.
pub fn slim<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
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
/// slimmed like the child caches and driven like them (on the caches' thread, [`drive`])
/// until `stop`: for `Controller::for_shared_stream`.
pub fn primary<K>(api: Api<K>, stop: CancellationToken) -> (Store<K>, Subscription<K>)
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let (store, _, [subscription]) = subscribed(api, watcher::Config::default(), slim, stop);
    (store, subscription)
}

/// The runtime the caches' watches run on: one thread of its own, started on first use. What
/// a watch decodes and a cache keeps is then allocated by that thread, from its own jemalloc
/// arena (jemalloc gives each thread an arena of its own while there are fewer threads than
/// arenas), packed together instead of scattered among the passes' short-lived allocations:
/// after a burst of new clusters the passes' arenas empty and go back to the system, where
/// the cache objects used to pin partly used pages (`docs/performance.md`, "a thread for the
/// caches"). `None` when the thread could not be started: the watches then run on the
/// caller's runtime.
fn cache_runtime() -> Option<&'static tokio::runtime::Handle> {
    static RUNTIME: std::sync::OnceLock<Option<tokio::runtime::Handle>> =
        std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|err| tracing::warn!(error = %err, "caches' runtime not started"))
                .ok()?;
            let handle = runtime.handle().clone();
            std::thread::Builder::new()
                .name("steward-caches".into())
                .spawn(move || {
                    super::thread_cache::on_thread_start();
                    runtime.block_on(std::future::pending::<()>())
                })
                .map_err(|err| tracing::warn!(error = %err, "caches' thread not started"))
                .ok()?;
            Some(handle)
        })
        .as_ref()
}

/// Drives a cache's watch stream until `stop`, logging watch errors and handing what changed
/// to `fanout`'s subscribers (if any), on the caches' thread ([`cache_runtime`]). The watch also ends
/// when the caller's runtime shuts down (a test's), as it would if it ran there: a task left
/// on the caller's runtime holds a guard.
fn drive<K, S>(stream: S, changes: Arc<AtomicU64>, mut fanout: Fanout<K>, stop: CancellationToken)
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    S: futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
{
    let stop = stop.child_token();
    let watch = {
        let stop = stop.clone();
        async move {
            let drive = async {
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    // The reflector applied the event to the store before passing it on.
                    changes.fetch_add(1, Ordering::Release);
                    match event {
                        Ok(event) => fanout.send(event).await,
                        Err(err) => {
                            tracing::warn!(kind = %K::kind(&()), error = %err, "shared cache watch error");
                        }
                    }
                }
            };
            tokio::select! {
                () = drive => {}
                () = stop.cancelled() => {}
            }
        }
    };
    match cache_runtime() {
        Some(caches) => {
            let guard = stop.clone().drop_guard();
            tokio::spawn(async move {
                let _guard = guard;
                stop.cancelled().await;
            });
            caches.spawn(watch);
        }
        None => {
            tokio::spawn(watch);
        }
    }
}

/// What a controller hears from a shared cache: each object the watch added or changed, as the
/// cache holds it once the change is applied, each object it deleted (its last state), and on
/// each (re)list every object listed. For `Controller::for_shared_stream`, `owns_shared_stream`
/// and `watches_shared_stream`.
///
/// Not kube-runtime's `ReflectHandle`: that one passes on a reference and looks the object up
/// in the store when the controller reads it, and when the object was deleted in between it
/// returns `Pending` without asking to be woken; inside a controller's `select_all` the stream
/// is then never polled again, so the controller stops hearing of that kind for good (an etcd
/// member Pod replaced quickly left its peer deaf to its new Pod), and once the subscription
/// falls `BUFFER` behind, the whole watch stops. Here the subscriber gets the objects
/// themselves (shared, not copied).
pub struct Subscription<K> {
    objects: mpsc::Receiver<Arc<K>>,
}

impl<K> futures::Stream for Subscription<K> {
    type Item = Arc<K>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Arc<K>>> {
        self.objects.poll_recv(cx)
    }
}

/// The sending side of a shared cache's [`Subscription`]s.
struct Fanout<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    subscribers: Vec<mpsc::Sender<Arc<K>>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Fanout<K> {
    /// A fanout of what the watch feeding `store` applies to it, to no one yet.
    fn new(store: Store<K>) -> Self {
        Self {
            store,
            subscribers: Vec::new(),
        }
    }

    /// One more subscription (taken before the watch starts: a later one misses what came
    /// before it).
    fn subscribe(&mut self) -> Subscription<K> {
        let (tx, rx) = mpsc::channel(BUFFER);
        self.subscribers.push(tx);
        Subscription { objects: rx }
    }

    /// Hands the objects `event` changed to every subscriber, waiting for room (a subscriber
    /// `BUFFER` behind holds the watch). A subscriber that is gone is forgotten.
    async fn send(&mut self, event: watcher::Event<K>) {
        if self.subscribers.is_empty() {
            return;
        }
        let objects: Vec<Arc<K>> = match event {
            watcher::Event::Apply(obj) => {
                // The store holds the object now: share its copy rather than keep a second.
                let key = reflector::ObjectRef::from_obj(&obj);
                vec![self.store.get(&key).unwrap_or_else(|| Arc::new(obj))]
            }
            watcher::Event::Delete(obj) => vec![Arc::new(obj)],
            watcher::Event::InitDone => self.store.state(),
            watcher::Event::Init | watcher::Event::InitApply(_) => Vec::new(),
        };
        for obj in objects {
            let mut i = 0;
            while i < self.subscribers.len() {
                if self.subscribers[i].send(obj.clone()).await.is_ok() {
                    i += 1;
                } else {
                    self.subscribers.swap_remove(i);
                }
            }
        }
    }
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
    let (store, changes, []) = subscribed(api, managed(), trim, stop);
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
    let (store, _, []) = subscribed(api, managed(), version_only, stop);
    store
}

/// Starts a shared cache of `K` (objects labelled `managed-by=steward`, each slimmed by `trim`
/// — [`slim`], or a kind's own that also drops the fields no step reads), driven until `stop`,
/// with `n` [`Subscription`]s, one for each controller the kind wakes. Every subscription must
/// be read: one that falls [`BUFFER`] objects behind holds the watch (and so every other
/// subscriber and the cache) until it reads again; kinds only read from the cache use
/// [`cached`]. With `K` a `PartialObjectMeta` the watch is metadata-only, and so is the cache
/// (for kinds whose steps read only metadata: a typed object's empty spec and status structs
/// are most of its size).
pub fn shared<K>(
    ctx: &Arc<Context>,
    trim: fn(&mut K),
    n: usize,
    stop: CancellationToken,
) -> (Indexed<K>, Vec<Subscription<K>>)
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, changes, subscriptions) = subscribed_n(ctx.watched_api(), managed(), trim, n, stop);
    (Indexed::new(store, Some(changes)), subscriptions)
}

/// Starts a shared cache of every `K` in the watched namespaces (user-created objects such as
/// `PostgresBackup`, which carry no Steward label), driven until `stop`, with a subscription
/// for the controller that maps them to their cluster.
pub fn watched<K>(ctx: &Arc<Context>, stop: CancellationToken) -> (Store<K>, Subscription<K>)
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, [subscription]) = labelled_with(ctx, watcher::Config::default(), stop);
    (store, subscription)
}

/// Starts a shared cache of the `K`s carrying `label` (a selector) in the watched namespaces,
/// slimmed, driven until `stop`, with a subscription for the controller those objects wake.
/// The store holds an event's object before the subscription sees it, so a pass woken by a
/// change reads the changed object from the store.
pub fn labelled<K>(
    ctx: &Arc<Context>,
    label: &str,
    n: usize,
    stop: CancellationToken,
) -> (Store<K>, Vec<Subscription<K>>)
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let config = watcher::Config::default().labels(label);
    let (store, _, subscriptions) = subscribed_n(ctx.watched_api(), config, slim, n, stop);
    (store, subscriptions)
}

/// [`watched`]: a shared, slimmed cache of the `K`s `config` selects in the watched
/// namespaces, with a subscription.
fn labelled_with<K, const N: usize>(
    ctx: &Arc<Context>,
    config: watcher::Config,
    stop: CancellationToken,
) -> (Store<K>, [Subscription<K>; N])
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, _, subscriptions) = subscribed(ctx.watched_api(), config, slim, stop);
    (store, subscriptions)
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
/// driven until `stop`, with `n` subscriptions, for the controllers that react to cordons and lost
/// Nodes. Needs `list`/`watch` on Nodes (the `steward-operator-nodes` ClusterRole); without
/// it the watch logs the 403 and every Node counts as usable.
pub fn nodes(
    client: kube::Client,
    n: usize,
    stop: CancellationToken,
) -> (
    Store<k8s_openapi::api::core::v1::Node>,
    Vec<Subscription<k8s_openapi::api::core::v1::Node>>,
) {
    let config = watcher::Config::default();
    let (store, _, subscriptions) = subscribed_n(
        Api::all(client),
        config,
        crate::resources::nodes::slim,
        n,
        stop,
    );
    (store, subscriptions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;
    use std::time::Duration;

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

    fn config_map(name: &str, version: &str) -> k8s_openapi::api::core::v1::ConfigMap {
        k8s_openapi::api::core::v1::ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("db".into()),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            ..Default::default()
        }
    }

    /// An object added and deleted before the controller reads of it is still heard of (its
    /// addition, then its deletion), and the subscription keeps working inside a `select_all`
    /// (how a controller merges its triggers): kube-runtime's `ReflectHandle` went quiet for
    /// good here, since it looked the deleted object up in the store and returned `Pending`
    /// without asking to be woken.
    #[tokio::test]
    async fn a_subscription_hears_of_objects_deleted_before_it_reads_and_keeps_hearing() {
        use futures::channel::mpsc::unbounded;
        let (events, watch) = unbounded::<watcher::Result<watcher::Event<_>>>();
        let (store, writer) = reflector::store();
        let mut fanout = Fanout::new(store.clone());
        let subscription = fanout.subscribe();
        let changes = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        drive(
            reflector::reflector(writer, watch),
            changes.clone(),
            fanout,
            stop.clone(),
        );
        let applied = |n: u64| {
            let changes = changes.clone();
            async move {
                while changes.load(Ordering::Acquire) < n {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        let within = Duration::from_secs(5);
        for event in [
            watcher::Event::Init,
            watcher::Event::InitDone,
            watcher::Event::Apply(config_map("a", "1")),
            watcher::Event::Delete(config_map("a", "2")),
        ] {
            events.unbounded_send(Ok(event)).unwrap();
        }
        tokio::time::timeout(within, applied(4)).await.unwrap();
        assert!(store.is_empty(), "the cache no longer holds a");
        let mut triggers = futures::stream::select_all([subscription]);
        let heard = |obj: Option<Arc<k8s_openapi::api::core::v1::ConfigMap>>| {
            let meta = &obj.expect("the subscription ended").metadata;
            (
                meta.name.clone().unwrap(),
                meta.resource_version.clone().unwrap(),
            )
        };
        let first = tokio::time::timeout(within, triggers.next()).await.unwrap();
        assert_eq!(heard(first), ("a".into(), "1".into()));
        let second = tokio::time::timeout(within, triggers.next()).await.unwrap();
        assert_eq!(heard(second), ("a".into(), "2".into()), "the deletion");
        // Nothing else yet; then a new object wakes the merged stream.
        let waiting = tokio::time::timeout(Duration::from_millis(50), triggers.next()).await;
        assert!(waiting.is_err(), "no object was changed: {waiting:?}");
        events
            .unbounded_send(Ok(watcher::Event::Apply(config_map("b", "3"))))
            .unwrap();
        let third = tokio::time::timeout(within, triggers.next()).await.unwrap();
        assert_eq!(heard(third), ("b".into(), "3".into()));
        stop.cancel();
    }

    /// Every object listed is handed to every subscriber once the list is in the cache.
    #[tokio::test]
    async fn every_subscriber_hears_of_every_listed_object() {
        use futures::channel::mpsc::unbounded;
        let (events, watch) = unbounded::<watcher::Result<watcher::Event<_>>>();
        let (store, writer) = reflector::store();
        let mut fanout = Fanout::new(store.clone());
        let (one, two) = (fanout.subscribe(), fanout.subscribe());
        let stop = CancellationToken::new();
        drive(
            reflector::reflector(writer, watch),
            Arc::new(AtomicU64::new(0)),
            fanout,
            stop.clone(),
        );
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(config_map("a", "1")),
            watcher::Event::InitApply(config_map("b", "2")),
            watcher::Event::InitDone,
        ] {
            events.unbounded_send(Ok(event)).unwrap();
        }
        for subscription in [one, two] {
            let mut names: Vec<String> = tokio::time::timeout(
                Duration::from_secs(5),
                subscription
                    .take(2)
                    .map(|o| o.metadata.name.clone().unwrap())
                    .collect(),
            )
            .await
            .unwrap();
            names.sort();
            assert_eq!(names, ["a", "b"]);
        }
        stop.cancel();
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
