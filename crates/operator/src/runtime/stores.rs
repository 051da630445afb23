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

/// Starts a shared cache of `K` (objects labelled `managed-by=steward`), driven until `stop`.
/// Returns the store and a subscription for a controller's `owns_shared_stream`.
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
    let (store, writer) = reflector::store_shared::<K>(1024);
    let subscriber = writer.subscribe()?;
    let config = watcher::Config::default().labels(&format!("{MANAGED_BY}={MANAGER}"));
    let stream = watcher(api, config)
        .default_backoff()
        .reflect_shared(writer);
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
    Some((store, subscriber))
}
