//! The embedded metrics-server: every resolution (`ServerConfig::metric_resolution`, 15 s by
//! default as metrics-server's `--metric-resolution`) each Node's kubelet is asked for
//! `GET /metrics/resource` (HTTPS, at the address the server proxies logs and exec to), the
//! answers are read (`decode`) and kept as the last two points of every node and container
//! (`storage`), and `handlers::metrics_api` serves `metrics.k8s.io/v1beta1` from them.
//!
//! Only kubelets on loopback addresses are scraped: the embedded plane's node agents register
//! `127.0.0.1`, and a Node object a test or a user made up with another address is not dialled
//! from here. A scrape that fails or times out (0.9 resolution, as metrics-server bounds it)
//! forgets that node's points until it answers again.

mod decode;
pub mod format;
mod storage;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use hyper_util::rt::TokioIo;
use jiff::Timestamp;

pub use self::decode::PodKey;
pub use self::storage::{TimeInfo, Usage};
use crate::registry::GroupResource;
use crate::server::Server;

/// The largest `/metrics/resource` answer read.
const BODY_LIMIT: usize = 16 * 1024 * 1024;

/// The stored points, shared by the scraper and the request handlers.
#[derive(Debug)]
pub struct ResourceMetrics {
    resolution: Duration,
    storage: Mutex<storage::Storage>,
}

impl ResourceMetrics {
    pub fn new(resolution: Duration) -> Self {
        Self {
            resolution,
            storage: Mutex::new(storage::Storage::new(resolution)),
        }
    }

    fn storage(&self) -> std::sync::MutexGuard<'_, storage::Storage> {
        self.storage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A node's usage, when two of its points are known.
    pub fn node(&self, name: &str) -> Option<(TimeInfo, Usage)> {
        self.storage().node(name)
    }

    /// A Pod's usage per container, when every container has two points.
    pub fn pod(&self, key: &PodKey) -> Option<(TimeInfo, Vec<(String, Usage)>)> {
        self.storage().pod(key)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error("connecting to the kubelet at {addr}: {message}")]
    Connect { addr: SocketAddr, message: String },
    #[error("GET https://{addr}/metrics/resource: {source}")]
    Http {
        addr: SocketAddr,
        source: hyper::Error,
    },
    #[error("GET https://{addr}/metrics/resource answered {status}")]
    Status {
        addr: SocketAddr,
        status: http::StatusCode,
    },
    #[error(
        "GET https://{addr}/metrics/resource: reading the answer (at most {BODY_LIMIT} bytes): {message}"
    )]
    Body { addr: SocketAddr, message: String },
    #[error("GET https://{addr}/metrics/resource: no answer within {timeout:?}")]
    Timeout { addr: SocketAddr, timeout: Duration },
    #[error(transparent)]
    Decode(#[from] decode::DecodeError),
}

/// Scrapes every node each resolution until the server stops.
pub async fn run(server: Arc<Server>) {
    let resolution = server.resource_metrics.resolution;
    let mut tick = tokio::time::interval(resolution);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = server.cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        scrape_all(&server, resolution.mul_f64(0.9)).await;
    }
}

/// The Nodes with a loopback kubelet address, by name.
fn targets(server: &Server) -> Vec<(String, SocketAddr)> {
    let state = server.lock();
    state
        .list(&GroupResource::new("", "nodes"), None)
        .filter_map(|node| {
            let name = crate::meta::name(node)?.to_string();
            let addr = crate::handlers::kubelet_addr(node).ok()?;
            addr.ip().is_loopback().then_some((name, addr))
        })
        .collect()
}

async fn scrape_all(server: &Server, timeout: Duration) {
    let scrapes = targets(server).into_iter().map(|(name, addr)| async move {
        let result = match tokio::time::timeout(timeout, scrape(addr)).await {
            Ok(r) => r,
            Err(_) => Err(ScrapeError::Timeout { addr, timeout }),
        };
        (name, result)
    });
    let mut nodes = BTreeMap::new();
    let mut pods = BTreeMap::new();
    for (name, result) in futures::future::join_all(scrapes).await {
        match result {
            Ok(batch) => {
                if let Some(point) = batch.node {
                    nodes.insert(name, point);
                }
                for (key, containers) in batch.pods {
                    pods.entry(key).or_insert(containers);
                }
            }
            Err(e) => tracing::debug!(node = %name, error = %e, "scraping a kubelet failed"),
        }
    }
    server.resource_metrics.storage().store(nodes, pods);
}

/// One kubelet's `/metrics/resource`, read.
async fn scrape(addr: SocketAddr) -> Result<decode::Batch, ScrapeError> {
    let stream = crate::handlers::connect_kubelet(addr)
        .await
        .map_err(|message| ScrapeError::Connect { addr, message })?;
    let http = |source| ScrapeError::Http { addr, source };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(http)?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "kubelet metrics connection ended");
        }
    });
    let request = http::Request::get("/metrics/resource")
        .header(http::header::HOST, addr.to_string())
        .header(http::header::ACCEPT, "text/plain")
        .body(Body::empty())
        .map_err(|e| ScrapeError::Connect {
            addr,
            message: e.to_string(),
        })?;
    let response = sender.send_request(request).await.map_err(http)?;
    let status = response.status();
    if !status.is_success() {
        return Err(ScrapeError::Status { addr, status });
    }
    let bytes = axum::body::to_bytes(Body::new(response.into_body()), BODY_LIMIT)
        .await
        .map_err(|e| ScrapeError::Body {
            addr,
            message: e.to_string(),
        })?;
    let text = String::from_utf8_lossy(&bytes);
    Ok(decode::decode(&text, Timestamp::now())?)
}
