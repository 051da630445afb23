//! The operator runtime: HTTP endpoints, the CRD check, leader election, shared caches and the
//! controllers of every engine. Only the leader reconciles; a standby keeps its caches cold and
//! takes over when the leader's Lease is released (graceful shutdown) or expires.

pub mod context;
pub mod crds;
pub mod engine;
pub mod events;
pub mod http;
pub mod in_flight;
pub mod leader;
pub mod stores;
pub mod thread_cache;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::Client;
use kube::runtime::reflector::store::WriterDropped;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, SystemClock};
use crate::config::OperatorArgs;
use crate::metrics::Metrics;
use crate::webhook::WebhookSender;
use context::Context;

/// Why the operator could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The HTTP endpoint could not be bound.
    #[error("binding the HTTP endpoint {addr} failed: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The webhook client could not be built.
    #[error("building the webhook HTTP client failed: {0}")]
    Webhook(#[source] reqwest::Error),
    /// The REST API could not start: its certificate Secret could not be read or created
    /// (transient Kubernetes API failures are retried for a minute first), the initial admin
    /// could not be made, or its port could not be bound.
    #[error("starting the REST API failed: {0}")]
    Api(#[from] crate::api::listen::ApiStartError),
}

/// A running operator.
pub struct OperatorHandle {
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub http_addr: SocketAddr,
    /// Metrics of this instance.
    pub metrics: Metrics,
    /// `true` while this instance leads.
    pub leader: watch::Receiver<bool>,
    /// Where the REST API is served over HTTPS (`None` with `--api=false`).
    pub api_addr: Option<SocketAddr>,
    /// The CA (PEM) the API's certificate chains to (`None` with `--api=false`; empty for a
    /// provided certificate without `ca.crt`).
    pub api_ca_pem: Option<String>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), String>>,
    /// Whether `stop` already awaited `task` (a finished JoinHandle must not be polled again).
    stopped: bool,
}

impl OperatorHandle {
    /// Asks the operator to stop (as SIGTERM does) and waits until it has: controllers drained,
    /// the Lease released, the HTTP server closed. Returns the reason it failed, if it did.
    pub async fn shutdown(mut self) -> Result<(), String> {
        self.stop().await
    }

    /// As [`Self::shutdown`], keeping the handle (for callers that must stop an operator
    /// before they can replace it, as a restart does). Only the first call waits.
    pub async fn stop(&mut self) -> Result<(), String> {
        self.shutdown.cancel();
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        (&mut self.task)
            .await
            .map_err(|e| format!("operator task panicked: {e}"))?
    }

    /// Waits until the operator stops by itself (an error such as missing CRDs) or is shut down.
    pub async fn wait(self) -> Result<(), String> {
        if self.stopped {
            return Ok(());
        }
        self.task
            .await
            .map_err(|e| format!("operator task panicked: {e}"))?
    }

    /// A token that stops the operator when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }
}

/// Starts the operator: binds HTTP, starts the REST API (unless `--api=false`: its certificate
/// and initial admin, then HTTPS, on every replica), then (in the background) waits for the
/// CRDs, campaigns for leadership and runs the controllers while leading.
pub async fn start(client: Client, args: OperatorArgs) -> Result<OperatorHandle, StartError> {
    start_with_clock(client, args, Arc::new(SystemClock)).await
}

/// [`start`] with an injected clock.
pub async fn start_with_clock(
    client: Client,
    args: OperatorArgs,
    clock: Arc<dyn Clock>,
) -> Result<OperatorHandle, StartError> {
    let metrics = Metrics::new();
    let ready = Arc::new(AtomicBool::new(false));
    let shutdown = CancellationToken::new();
    let (http_addr, http_task) = http::serve(
        args.http_addr,
        metrics.clone(),
        ready.clone(),
        shutdown.child_token(),
    )
    .await
    .map_err(|source| StartError::Bind {
        addr: args.http_addr,
        source,
    })?;
    let webhooks = match WebhookSender::new(&args.webhook, metrics.clone()) {
        Ok(w) => w,
        Err(e) => {
            shutdown.cancel();
            return Err(StartError::Webhook(e));
        }
    };
    // The API on every replica (its writes go through the Kubernetes API: no leader needed).
    let api = if args.api {
        let settings = crate::api::listen::ApiSettings {
            addr: args.api_addr,
            namespace: args.lease_namespace.clone(),
            tls_secret: args.api_tls_secret.clone(),
            hostnames: args.api_hostnames.clone(),
        };
        match crate::api::listen::start(
            client.clone(),
            &settings,
            clock.clone(),
            shutdown.child_token(),
        )
        .await
        {
            Ok(api) => Some(api),
            Err(e) => {
                shutdown.cancel();
                return Err(StartError::Api(e));
            }
        }
    } else {
        None
    };
    let (api_addr, api_ca_pem) = match &api {
        Some(a) => (Some(a.addr), Some(a.ca_pem.clone())),
        None => (None, None),
    };
    let api_task = api.map(|a| a.task);
    let identity = if args.identity.is_empty() {
        default_identity()
    } else {
        args.identity.clone()
    };
    let namespace = (!args.namespace.is_empty()).then(|| args.namespace.clone());
    let mut ctx = Context::new(
        client.clone(),
        metrics.clone(),
        webhooks,
        clock,
        args.timeouts.clone(),
        namespace,
        identity.clone(),
    );
    ctx.cluster_domain = args.cluster_domain.clone();
    ctx.database_timeout = Duration::from_secs(args.database_timeout_seconds.max(1));
    ctx.max_concurrent_reconciles = args.max_concurrent_reconciles;
    ctx.own_namespace = args.lease_namespace.clone();
    ctx.seams.insert(crate::config::EngineSettings(
        args.engine_settings.iter().cloned().collect(),
    ));
    let ctx = Arc::new(ctx);
    let (leader_tx, leader_rx) = watch::channel(false);
    let token = shutdown.clone();
    let task = tokio::spawn(async move {
        let result = supervise(ctx, args, identity, ready, leader_tx, token).await;
        if let Err(err) = http_task.await {
            tracing::warn!(error = %err, "HTTP task ended abnormally");
        }
        if let Some(api_task) = api_task
            && let Err(err) = api_task.await
        {
            tracing::warn!(error = %err, "API task ended abnormally");
        }
        result
    });
    Ok(OperatorHandle {
        http_addr,
        metrics,
        leader: leader_rx,
        api_addr,
        api_ca_pem,
        shutdown,
        task,
        stopped: false,
    })
}

fn default_identity() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| format!("steward-{}", std::process::id()))
}

async fn supervise(
    ctx: Arc<Context>,
    args: OperatorArgs,
    identity: String,
    ready: Arc<AtomicBool>,
    leader_tx: watch::Sender<bool>,
    shutdown: CancellationToken,
) -> Result<(), String> {
    let wait = Duration::from_secs(args.crd_wait_seconds);
    tokio::select! {
        checked = crds::wait_established(&ctx.client, wait) => {
            if let Err(err) = checked {
                tracing::error!(error = %err, "cannot start controllers");
                shutdown.cancel();
                return Err(err.to_string());
            }
        }
        () = shutdown.cancelled() => return Ok(()),
    }
    ready.store(true, Ordering::Release);
    ctx.metrics.set_ready(true);
    tracing::info!(identity = %identity, namespace = ?ctx.namespace, "CRDs established; ready");

    let mut leadership = if args.leader_election {
        match leader::campaign(&ctx.client, &args, &identity).await {
            Ok(l) => Some(l),
            Err(err) => {
                shutdown.cancel();
                return Err(err.to_string());
            }
        }
    } else {
        None
    };

    let mut term: Option<(CancellationToken, JoinHandle<()>)> = None;
    loop {
        let leading = leadership.as_ref().is_none_or(|l| *l.state.borrow());
        match (leading, term.is_some()) {
            (true, false) => {
                tracing::info!(identity = %identity, "leading: starting controllers");
                ctx.metrics.set_leader(true);
                let _ = leader_tx.send(true);
                let stop = CancellationToken::new();
                term = Some((
                    stop.clone(),
                    tokio::spawn(run_controllers(ctx.clone(), stop)),
                ));
            }
            (false, true) => {
                tracing::warn!(identity = %identity, "lost leadership: stopping controllers");
                stop_term(term.take()).await;
                ctx.metrics.set_leader(false);
                let _ = leader_tx.send(false);
            }
            _ => {}
        }
        let changed = async {
            match leadership.as_mut() {
                Some(l) => l.state.changed().await.is_ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            ok = changed => if !ok {
                tracing::error!("leader election stopped unexpectedly");
                break;
            },
            () = shutdown.cancelled() => break,
        }
    }
    stop_term(term.take()).await;
    ctx.metrics.set_leader(false);
    let _ = leader_tx.send(false);
    if let Some(l) = leadership {
        l.release().await;
    }
    tracing::info!(identity = %identity, "operator stopped");
    Ok(())
}

/// How long the controllers get to finish their passes once told to stop; then they are
/// aborted, so a shutdown (and the Lease's release) never waits on one stuck controller.
const STOP_GRACE: Duration = Duration::from_secs(10);

async fn stop_term(term: Option<(CancellationToken, JoinHandle<()>)>) {
    if let Some((stop, mut task)) = term {
        stop.cancel();
        match tokio::time::timeout(STOP_GRACE, &mut task).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(error = %err, "controller task ended abnormally"),
            Err(_) => {
                tracing::warn!(
                    grace_s = STOP_GRACE.as_secs(),
                    "controllers did not stop in time (the ones still running are those without \
                     a 'controller stopped' line); aborting them"
                );
                task.abort();
            }
        }
    }
}

/// How long a controller may take to finish its passes after `stop` before it is dropped.
const CONTROLLER_GRACE: Duration = Duration::from_secs(5);

/// Runs one controller until it stops, or until [`CONTROLLER_GRACE`] after `stop`: kube-runtime's
/// graceful shutdown waits for its cache to be ready before it lets the runner end, so a stop
/// that comes before a cache's first list completes (a SIGTERM right after winning the Lease)
/// would wait forever. Dropping the controller cancels its passes.
pub(crate) async fn logged(
    name: &'static str,
    stop: CancellationToken,
    controller: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(controller);
    let dropped = async {
        stop.cancelled().await;
        tokio::time::sleep(CONTROLLER_GRACE).await;
    };
    tokio::select! {
        () = &mut controller => tracing::info!(controller = name, "controller stopped"),
        () = dropped => tracing::warn!(
            controller = name,
            grace_s = CONTROLLER_GRACE.as_secs(),
            "controller did not stop in time after the stop request; dropped"
        ),
    }
}

/// How long controllers wait for the shared caches' first lists before they start anyway (a
/// kind the operator may not list never fills; its watch logs why).
const CACHE_FILL: Duration = Duration::from_secs(30);

/// Waits until every cache of `filling` holds its first list, [`CACHE_FILL`] at most (then
/// names the ones still empty); `false` when `stop` came first. Engines call it for caches of
/// their own kinds too.
pub(crate) async fn caches_filled(
    filling: Vec<(&'static str, BoxFuture<'_, Result<(), WriterDropped>>)>,
    stop: &CancellationToken,
) -> bool {
    let started = std::time::Instant::now();
    let kinds: Vec<&str> = filling.iter().map(|(kind, _)| *kind).collect();
    let mut empty = kinds.clone();
    let mut pending: Vec<BoxFuture<'_, &str>> = filling
        .into_iter()
        .map(|(kind, ready)| {
            async move {
                let _ = ready.await;
                kind
            }
            .boxed()
        })
        .collect();
    let deadline = tokio::time::sleep(CACHE_FILL);
    tokio::pin!(deadline);
    while !pending.is_empty() {
        tokio::select! {
            (kind, _, rest) = futures::future::select_all(pending) => {
                empty.retain(|k| *k != kind);
                pending = rest;
            }
            () = &mut deadline => {
                tracing::warn!(
                    waited_s = CACHE_FILL.as_secs(),
                    empty = %empty.join(", "),
                    "caches without their first list (see their watch errors); \
                     starting the controllers anyway"
                );
                return true;
            }
            () = stop.cancelled() => return false,
        }
    }
    tracing::info!(
        kinds = %kinds.join(", "),
        took_ms = started.elapsed().as_millis() as u64,
        "caches filled"
    );
    true
}

/// The shared caches, with as many subscriptions to each kind as the engines' [`engine::Wakes`]
/// add up to, handed out to the engines in their order.
fn start_shared_caches(
    ctx: &Arc<Context>,
    wakes: &[engine::Wakes],
    stop: &CancellationToken,
) -> (engine::SharedCaches, Vec<engine::Subscriptions>) {
    use crate::resources::packed::CachedMeta;
    use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret, Service};
    let total = |f: fn(&engine::Wakes) -> usize| wakes.iter().map(f).sum::<usize>();
    // Services and claims: metadata only (Services are applied and swept by their labels; of a
    // claim steps read its UID, deletion and annotations), labels and annotations packed, like
    // Pods' (`resources::packed`). One subscription per controller a kind wakes.
    let (services, mut services_subs) = stores::shared::<CachedMeta<Service>>(
        ctx,
        stores::slim,
        total(|w| w.services),
        stop.clone(),
    );
    let (pods, mut pods_subs) = stores::shared::<crate::resources::pods::CachedPod>(
        ctx,
        stores::slim,
        total(|w| w.pods),
        stop.clone(),
    );
    // Claims are read from the cache only: no controller watches them through it.
    let claims =
        stores::cached::<CachedMeta<PersistentVolumeClaim>>(ctx.watched_api(), stop.clone());
    let (statefulsets, mut statefulsets_subs) =
        stores::shared::<k8s_openapi::api::apps::v1::StatefulSet>(
            ctx,
            stores::slim,
            total(|w| w.statefulsets),
            stop.clone(),
        );
    // Kinds only applied, never read: their metadata, so unchanged applies can be skipped.
    let budgets = stores::metadata::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(
        ctx.watched_api(),
        stop.clone(),
    );
    let config_maps =
        stores::metadata::<k8s_openapi::api::core::v1::ConfigMap>(ctx.watched_api(), stop.clone());
    // Steward's Secrets are read by name, for their data only.
    let secrets =
        stores::cached_with::<Secret>(ctx.watched_api(), stores::unlabelled, stop.clone());
    let (user_secrets, mut user_secrets_subs) = stores::labelled::<Secret>(
        ctx,
        crate::resources::passwords::USER_PASSWORD_LABEL,
        total(|w| w.user_secrets),
        stop.clone(),
    );
    let (nodes, mut nodes_subs) =
        stores::nodes(ctx.client.clone(), total(|w| w.nodes), stop.clone());
    fn take<T>(from: &mut Vec<T>, n: usize) -> Vec<T> {
        from.drain(..n.min(from.len())).collect()
    }
    let handed = wakes
        .iter()
        .map(|w| engine::Subscriptions {
            services: take(&mut services_subs, w.services),
            pods: take(&mut pods_subs, w.pods),
            statefulsets: take(&mut statefulsets_subs, w.statefulsets),
            user_secrets: take(&mut user_secrets_subs, w.user_secrets),
            nodes: take(&mut nodes_subs, w.nodes),
        })
        .collect();
    let shared = engine::SharedCaches {
        services,
        pods,
        claims,
        statefulsets,
        budgets,
        config_maps,
        secrets,
        user_secrets,
        nodes,
    };
    (shared, handed)
}

/// Builds the shared caches and runs every engine's controllers (`crate::engines::all`) and
/// the scheduler's until `stop` is cancelled.
async fn run_controllers(ctx: Arc<Context>, stop: CancellationToken) {
    tokio::spawn({
        let (recorder, stop) = (ctx.recorder.clone(), stop.clone());
        async move { recorder.forget_while_idle(stop).await }
    });
    let engines = crate::engines::all();
    let wakes: Vec<engine::Wakes> = engines.iter().map(|e| e.wakes()).collect();
    let (shared, handed) = start_shared_caches(&ctx, &wakes, &stop);
    // The first passes see the children that exist (an operator restarted over many clusters
    // would otherwise create, read or apply what it already has).
    let filling = vec![
        ("Services", shared.services.wait_until_ready().boxed()),
        ("Pods", shared.pods.wait_until_ready().boxed()),
        (
            "PersistentVolumeClaims",
            shared.claims.wait_until_ready().boxed(),
        ),
        (
            "StatefulSets",
            shared.statefulsets.wait_until_ready().boxed(),
        ),
        (
            "PodDisruptionBudgets",
            shared.budgets.wait_until_ready().boxed(),
        ),
        ("ConfigMaps", shared.config_maps.wait_until_ready().boxed()),
        ("Secrets", shared.secrets.wait_until_ready().boxed()),
    ];
    if !caches_filled(filling, &stop).await {
        return;
    }
    let mut controllers: Vec<BoxFuture<'static, ()>> = engines
        .iter()
        .zip(handed)
        .map(|(engine, subscriptions)| {
            engine.run(ctx.clone(), shared.clone(), subscriptions, stop.clone())
        })
        .collect();
    controllers.push(
        logged(
            "schedule",
            stop.clone(),
            crate::schedule::run(ctx.clone(), stop.clone()),
        )
        .boxed(),
    );
    controllers.push(
        logged(
            "schedule-configmaps",
            stop.clone(),
            crate::schedule::configmaps::run(ctx.clone(), ctx.own_namespace.clone(), stop.clone()),
        )
        .boxed(),
    );
    futures::future::join_all(controllers).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_controller_that_stops_is_awaited_and_one_that_hangs_is_dropped_after_the_grace() {
        let stop = CancellationToken::new();
        let polite = {
            let stop = stop.clone();
            async move { stop.cancelled().await }
        };
        stop.cancel();
        let started = std::time::Instant::now();
        logged("polite", stop.clone(), polite).await;
        assert!(started.elapsed() < Duration::from_secs(1));
        // kube-runtime's graceful shutdown before a cache's first list: never ends by itself.
        let started = std::time::Instant::now();
        logged("stuck", stop.clone(), std::future::pending::<()>()).await;
        let took = started.elapsed();
        assert!(
            took >= CONTROLLER_GRACE && took < CONTROLLER_GRACE + Duration::from_secs(2),
            "{took:?}"
        );
    }
}
