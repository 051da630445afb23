//! Server lifecycle: binding, the axum app, background tasks (garbage collector, snapshot
//! writer, the kubelet scraper behind `metrics.k8s.io`), the handle returned to callers, and shutdown (stop accepting, close watches, write
//! the final snapshot).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::ipam::ServiceCidr;
use crate::store::State;
use crate::{Error, auth, controllers, gc, handlers, snapshot};

/// How the server is started.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to listen on; port 0 picks a free port. Default `127.0.0.1:0`.
    pub bind: SocketAddr,
    /// Optional JSON snapshot: loaded at start if it exists, written (at most once a second)
    /// after changes and at shutdown.
    pub state_file: Option<PathBuf>,
    /// Range of Service ClusterIPs. Default `127.96.0.0/16`: loopback addresses a node agent's
    /// service proxy can bind without configuring interfaces.
    pub service_cidr: ServiceCidr,
    /// Bind `cluster-admin` to `system:anonymous` (ClusterRoleBinding
    /// `steward:anonymous-cluster-admin`). kubectl (client-go) never sends credentials over
    /// plain HTTP, so kubectl reaches this server as `system:anonymous` whatever its kubeconfig
    /// says; `steward dev` turns this on so that its kubeconfig works with kubectl. Default
    /// `false`: anonymous requests get only the public information, as upstream.
    pub anonymous_cluster_admin: bool,
    /// How long a Node's kubelet may stay silent before the node lifecycle controller marks it
    /// `Unknown` and taints it unreachable (kube-controller-manager's
    /// `--node-monitor-grace-period`). Default 40 s.
    pub node_monitor_grace: Duration,
    /// How often every Node's kubelet is scraped for `metrics.k8s.io` (metrics-server's
    /// `--metric-resolution`). Default 15 s.
    pub metric_resolution: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            state_file: None,
            service_cidr: ServiceCidr::default(),
            anonymous_cluster_admin: false,
            node_monitor_grace: Duration::from_secs(40),
            metric_resolution: Duration::from_secs(15),
        }
    }
}

/// Shared by every request.
pub struct Server {
    state: Mutex<State>,
    pub rv_rx: watch::Receiver<u64>,
    pub cancel: CancellationToken,
    /// Interval of BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
    /// See [`ServerConfig::node_monitor_grace`].
    pub node_monitor_grace: Duration,
    /// `apiserver_request_total`, served at `/metrics`.
    pub metrics: crate::metrics::RequestMetrics,
    /// The kubelets' resource figures behind `metrics.k8s.io`.
    pub resource_metrics: crate::resource_metrics::ResourceMetrics,
}

impl Server {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        let mut guard = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // A dry-run flag never outlives the request that set it.
        guard.dry_run = false;
        guard
    }
}

/// A running server. Dropping it without `shutdown` leaves it serving until the runtime stops.
pub struct ApiServerHandle {
    addr: SocketAddr,
    server: Arc<Server>,
    tasks: Vec<JoinHandle<()>>,
    serve: JoinHandle<()>,
    state_file: Option<PathBuf>,
}

pub async fn start(config: ServerConfig) -> Result<ApiServerHandle, Error> {
    let (tx, rx) = watch::channel(0u64);
    let gc_notify = Arc::new(Notify::new());
    let mut state = State::new(tx, gc_notify.clone());
    state.service_cidr = config.service_cidr;
    if let Some(path) = &config.state_file {
        snapshot::load(path, &mut state)?;
    }
    auth::bootstrap::ensure(&mut state, config.anonymous_cluster_admin);
    let server = Arc::new(Server {
        state: Mutex::new(state),
        rv_rx: rx,
        cancel: CancellationToken::new(),
        bookmark_interval: Duration::from_secs(1),
        node_monitor_grace: config.node_monitor_grace,
        metrics: crate::metrics::RequestMetrics::default(),
        resource_metrics: crate::resource_metrics::ResourceMetrics::new(config.metric_resolution),
    });
    let listener = tokio::net::TcpListener::bind(config.bind)
        .await
        .map_err(|source| Error::Bind {
            addr: config.bind,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| Error::Bind {
        addr: config.bind,
        source,
    })?;
    let app = handlers::router(server.clone());
    let cancel = server.cancel.clone();
    let serve = tokio::spawn(async move {
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(cancel.cancelled_owned())
            .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "local control plane stopped serving");
        }
    });
    let mut tasks = vec![
        tokio::spawn(gc::run(server.clone(), gc_notify)),
        tokio::spawn(controllers::run(server.clone())),
        tokio::spawn(crate::resource_metrics::run(server.clone())),
    ];
    if let Some(path) = &config.state_file {
        tasks.push(tokio::spawn(snapshot::run(server.clone(), path.clone())));
    }
    tracing::info!(%addr, "local control plane listening");
    Ok(ApiServerHandle {
        addr,
        server,
        tasks,
        serve,
        state_file: config.state_file,
    })
}

/// A kubeconfig for the server at `url` authenticating with bearer `token`: cluster, context and
/// user `steward-dev`, namespace `default`.
pub fn kubeconfig_yaml(url: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: steward-dev\n  cluster:\n    server: {url}\n\
         contexts:\n- name: steward-dev\n  context:\n    cluster: steward-dev\n    user: steward-dev\n    namespace: default\n\
         current-context: steward-dev\nusers:\n- name: steward-dev\n  user:\n    token: {token}\npreferences: {{}}\n"
    )
}

impl ApiServerHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Changes how many watch events are kept for resumption (default 10 000). Older history
    /// is dropped at once; watches resuming before it get `410 Expired`. Meant for tests that
    /// exercise relisting.
    pub fn set_watch_history_limit(&self, events: usize) {
        self.server.lock().set_history_cap(events);
    }

    /// The admin bearer token (user `steward-admin`, group `system:masters`). A new one is made
    /// at every start.
    pub fn admin_token(&self) -> String {
        self.server.lock().auth.tokens.admin().to_string()
    }

    /// A kubeconfig pointing at this server: cluster and context `steward-dev`, user
    /// `steward-dev` with the admin token.
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig_yaml(&self.url(), &self.admin_token())
    }

    /// Stops serving: closes open watches, waits up to five seconds for in-flight requests, and
    /// writes the final snapshot when a state file is configured.
    pub async fn shutdown(self) {
        self.server.cancel.cancel();
        let mut serve = self.serve;
        if tokio::time::timeout(Duration::from_secs(5), &mut serve)
            .await
            .is_err()
        {
            serve.abort();
        }
        for t in self.tasks {
            t.abort();
        }
        if let Some(path) = &self.state_file
            && let Err(e) = snapshot::save(&self.server, path)
        {
            tracing::warn!(error = %e, "cannot write the final snapshot");
        }
    }
}
