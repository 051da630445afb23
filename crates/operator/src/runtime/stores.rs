//! Shared reflector stores: one watch per child kind for all controllers, filtered to objects
//! Steward manages. Steps read children from these caches, never with fresh GETs.

use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::reflector::{self, ReflectHandle, Store};

use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use super::context::Context;
use crate::resources::labels::{MANAGED_BY, MANAGER};

/// Events a shared cache buffers for each subscriber.
pub const BUFFER: usize = 1024;

/// The watch of Steward's objects of `K`.
fn managed_watch<K>(api: Api<K>) -> impl futures::Stream<Item = watcher::Result<watcher::Event<K>>>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + 'static,
{
    let config = watcher::Config::default().labels(&format!("{MANAGED_BY}={MANAGER}"));
    watcher(api, config).default_backoff()
}

/// Drives a cache's watch stream until `stop`, logging watch errors.
fn drive<K, S>(stream: S, stop: CancellationToken)
where
    K: Resource<DynamicType = ()> + Send + 'static,
    S: futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
{
    tokio::spawn(async move {
        let drive = stream.for_each(|event| async move {
            if let Err(err) = event {
                tracing::warn!(kind = %K::kind(&()), error = %err, "shared cache watch error");
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
pub fn cached<K>(api: Api<K>, stop: CancellationToken) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let (store, writer) = reflector::store::<K>();
    drive(reflector::reflector(writer, managed_watch(api)), stop);
    store
}

/// Starts a shared cache of `K` (objects labelled `managed-by=steward`), driven until `stop`.
/// Returns the store and a subscription for a controller's `owns_shared_stream`. Every
/// subscription must be read: a subscriber that falls `BUFFER` events behind stops the watch
/// (the shared reflector waits for it), so kinds only read from the cache use [`cached`].
pub fn shared<K>(
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
    let api: Api<K> = ctx.watched_api();
    let (store, writer) = reflector::store_shared::<K>(BUFFER);
    let subscriber = writer.subscribe()?;
    drive(managed_watch(api).reflect_shared(writer), stop);
    Some((store, subscriber))
}
