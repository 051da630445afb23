//! The cluster view behind DNS and the service proxy: reflectors over all Services,
//! Endpoints and Pods; on every change (debounced by 100 ms, and every 5 s regardless) the
//! Service views are recomputed and handed to the hosts-file writer and the proxy.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::dns::Dns;
use crate::dns::hosts;
use crate::endpoints::{self, ServiceCache};
use crate::proxy::Proxy;

fn reflect<K>(api: Api<K>, tx: watch::Sender<u64>, cancel: CancellationToken) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                ev = stream.next() => match ev {
                    Some(Ok(_)) => tx.send_modify(|v| *v += 1),
                    Some(Err(e)) => tracing::debug!(error = %e, "cluster watch error"),
                    None => return,
                },
            }
        }
    });
    store
}

/// Runs until `cancel`.
pub async fn run(
    client: Client,
    services_cache: Arc<ServiceCache>,
    dns: Arc<Dns>,
    proxy: Option<Arc<Proxy>>,
    cancel: CancellationToken,
) {
    let (tx, mut rx) = watch::channel(0u64);
    let services = reflect(
        Api::<Service>::all(client.clone()),
        tx.clone(),
        cancel.clone(),
    );
    let endpoints_store = reflect(
        Api::<Endpoints>::all(client.clone()),
        tx.clone(),
        cancel.clone(),
    );
    let pods = reflect(Api::<Pod>::all(client), tx, cancel.clone());
    let synced = async {
        let _ = services.wait_until_ready().await;
        let _ = endpoints_store.wait_until_ready().await;
        let _ = pods.wait_until_ready().await;
    };
    tokio::select! {
        () = cancel.cancelled() => return,
        () = synced => {}
    }
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            r = rx.changed() => if r.is_err() { return },
            _ = tick.tick() => {}
        }
        let views = endpoints::views(&services.state(), &pods.state(), &endpoints_store.state());
        dns.update(hosts::records(&views));
        if let Some(proxy) = &proxy {
            proxy.reconcile(&views);
        }
        services_cache.set(views);
        // Debounce: changes within the next 100 ms are handled together.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
