//! CrateDB's HTTP endpoint: `POST /_sql` and `GET /`.
//!
//! Follows "HTTP endpoint" (<https://cratedb.com/docs/crate/reference/en/latest/interfaces/http.html>):
//! a JSON body `{"stmt": …, "args": […]}` answered by `{"cols", "rows", "rowcount",
//! "duration"}` (duration in milliseconds) or, on failure, by `{"error": {"message", "code"}}`
//! with the HTTP status the code's leading digits name. Credentials come by HTTP basic auth
//! (<https://cratedb.com/docs/crate/reference/en/latest/admin/auth/methods.html>); a request
//! without them runs as `auth.trust.http_default_user` (`crate`). `?types` adds `col_types`
//! (the documented type IDs); a `Default-Schema` header sets the schema of unqualified table
//! names. `bulk_args` is not modelled.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};
use tracing::Instrument as _;

use crate::cluster::{Coordination, persist, transport};
use crate::config::NodeConfig;
use crate::model::Cluster;
use crate::model::DataType;
use crate::sql::{ErrorCode, Session, SqlError};

/// The state a stand-in process serves: its copy of the cluster state and its coordination
/// with the other nodes ([`crate::cluster`]).
#[derive(Clone)]
pub struct Shared {
    /// The served cluster state: the latest published one, or, without a master, the blocked
    /// view this node computed.
    pub cluster: Arc<Mutex<Cluster>>,
    pub config: Arc<NodeConfig>,
    pub(crate) coordination: Arc<Coordination>,
}

impl Shared {
    /// A node whose transport peers reach at `publish_addr`, with the cluster state found in
    /// `path.data` (after a full restart: transient settings dropped) or a new cluster. It
    /// joins (and elects) on its first coordination round.
    pub fn new(config: NodeConfig, publish_addr: SocketAddr) -> Result<Self, ServerError> {
        let found = match &config.data_path {
            Some(dir) => persist::load(dir, &config.cluster.cluster_name)?,
            None => None,
        };
        let (version, cluster) = match found {
            Some((version, cluster)) => {
                tracing::info!(version, "cluster state found in path.data");
                (version, cluster.after_full_restart())
            }
            None => (0, Cluster::new(config.cluster.clone())),
        };
        let coordination = Coordination::new(&config, publish_addr, version, &cluster)?;
        Ok(Self {
            cluster: Arc::new(Mutex::new(cluster)),
            config: Arc::new(config),
            coordination: Arc::new(coordination),
        })
    }

    /// The cluster, also after a panicking holder (the model keeps no half-done invariants
    /// across a lock).
    pub fn lock(&self) -> MutexGuard<'_, Cluster> {
        self.cluster
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("binding the HTTP port {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("serving HTTP: {0}")]
    Serve(std::io::Error),
    #[error("binding the PostgreSQL port {addr}: {source}")]
    BindPsql {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("serving PostgreSQL: {0}")]
    ServePsql(std::io::Error),
    #[error("binding the transport port {addr}: {source}")]
    BindTransport {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("serving the transport: {0}")]
    ServeTransport(std::io::Error),
    #[error(transparent)]
    Persist(#[from] persist::PersistError),
    #[error(transparent)]
    Transport(#[from] transport::TransportError),
}

#[derive(Debug, Deserialize)]
struct SqlRequest {
    stmt: String,
    #[serde(default)]
    args: Vec<Value>,
    #[serde(default)]
    bulk_args: Option<Value>,
}

/// The HTTP routes.
pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/_sql", post(sql_endpoint))
        .route("/", get(root))
        .with_state(state)
}

fn error_response(e: &SqlError) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        Json(json!({"error": {"message": e.message, "code": e.code_number()}})),
    )
        .into_response()
}

/// The user and password of a basic `Authorization` header; `None` without one.
fn credentials(headers: &HeaderMap) -> Result<Option<(String, Option<String>)>, SqlError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let bad = || {
        SqlError::new(
            ErrorCode::Unauthorized,
            "UnauthorizedException[invalid Authorization header]",
        )
    };
    let text = value.to_str().map_err(|_| bad())?;
    let encoded = text.strip_prefix("Basic ").ok_or_else(bad)?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| bad())?;
    let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
    Ok(Some(match decoded.split_once(':') {
        Some((u, p)) => (u.to_owned(), (!p.is_empty()).then(|| p.to_owned())),
        None => (decoded, None),
    }))
}

/// Whether the query string asks for `col_types` (`?types`, `?types=true`).
fn wants_types(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&').any(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            k == "types" && v != "false"
        })
    })
}

async fn sql_endpoint(
    State(state): State<Shared>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let started = Instant::now();
    let request: SqlRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(_) => return error_response(&SqlError::parse("Failed to parse source")),
    };
    if request.bulk_args.is_some() {
        return error_response(&SqlError::unsupported("bulk_args"));
    }
    let (user, password) = match credentials(&headers) {
        Ok(Some(c)) => c,
        Ok(None) => (state.config.http_default_user.clone(), None),
        Err(e) => return error_response(&e),
    };
    let authenticated = state
        .lock()
        .authenticate(&user, password.as_deref())
        .map(|_| ());
    if let Err(e) = authenticated {
        tracing::info!(user, "HTTP authentication failed");
        let mut resp = error_response(&SqlError::from(e));
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Basic realm=\"CrateDB\""),
        );
        return resp;
    }
    let schema = headers
        .get("default-schema")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    let session = Session::new(user, schema);
    let result = state
        .execute_in(&session, &request.stmt, &request.args)
        .await;
    match result {
        Ok(r) => {
            let mut body = json!({
                "cols": r.cols,
                "rows": r.rows,
                "rowcount": r.rowcount,
                "duration": started.elapsed().as_secs_f64() * 1000.0,
            });
            if wants_types(query.as_deref()) {
                body["col_types"] = r.types.iter().map(DataType::http_id).collect();
            }
            Json(body).into_response()
        }
        Err(e) => {
            tracing::debug!(code = e.code_number(), "statement failed");
            error_response(&e)
        }
    }
}

async fn root(State(state): State<Shared>) -> Json<Value> {
    let cluster = state.lock();
    Json(json!({
        "ok": true,
        "status": 200,
        "name": state.config.node.name,
        "cluster_name": cluster.config().cluster_name,
        "version": {"number": state.config.node.version, "build_snapshot": false},
    }))
}

/// A running stand-in node.
pub struct Running {
    /// The HTTP endpoint's address.
    pub addr: SocketAddr,
    /// The PostgreSQL wire protocol endpoint's address.
    pub psql_addr: SocketAddr,
    /// The transport's address (`transport.tcp.port`).
    pub transport_addr: SocketAddr,
    pub state: Shared,
    pub task: tokio::task::JoinHandle<Result<(), ServerError>>,
}

impl Running {
    /// Stops the node as a killed process would disappear: no more answers, every port
    /// closed. Its `path.data` stays.
    pub async fn stop(self) {
        self.state.stop();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), self.task).await;
    }
}

async fn bind(
    addr: SocketAddr,
    err: fn(SocketAddr, std::io::Error) -> ServerError,
) -> Result<(tokio::net::TcpListener, SocketAddr), ServerError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| err(addr, source))?;
    let bound = listener.local_addr().map_err(|source| err(addr, source))?;
    Ok((listener, bound))
}

/// Binds the HTTP, PostgreSQL and transport ports, runs a first coordination round (a node
/// without peers to wait for is master at once), starts the coordination and tick loops and
/// serves in the background; the task ends when a server fails or the node is stopped.
pub async fn spawn(config: NodeConfig) -> Result<Running, ServerError> {
    let (listener, addr) = bind(config.http_addr, |addr, source| ServerError::Bind {
        addr,
        source,
    })
    .await?;
    let (psql_listener, psql_addr) = bind(config.psql_addr, |addr, source| ServerError::BindPsql {
        addr,
        source,
    })
    .await?;
    let (transport_listener, transport_addr) = bind(config.transport_addr, |addr, source| {
        ServerError::BindTransport { addr, source }
    })
    .await?;
    let publish_addr = config.transport_publish_addr(transport_addr);
    // Several nodes may share one process (the cluster tests): each one's coordination logs
    // carry its name.
    let span = tracing::info_span!("node", name = %config.node.name);
    let state = Shared::new(config, publish_addr)?;
    state.coordinate().instrument(span.clone()).await;
    let rounds = tokio::spawn(crate::cluster::run_rounds(state.clone()).instrument(span.clone()));
    let ticks = tokio::spawn(crate::cluster::run_ticks(state.clone()).instrument(span.clone()));
    let app = router(state.clone());
    let transport_app = transport::router(state.clone());
    tracing::info!(%addr, %psql_addr, %transport_addr, node = %state.config.node.name, "CrateDB stand-in listening (HTTP, PostgreSQL, stand-in transport)");
    let psql = crate::pgwire::serve(psql_listener, state.clone());
    let stopping = state.clone();
    let stop_http = state.clone();
    let stop_transport = state.clone();
    let task = tokio::spawn(async move {
        let result = tokio::select! {
            r = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop_http.stopped().await }) => r.map_err(ServerError::Serve),
            r = axum::serve(transport_listener, transport_app)
                .with_graceful_shutdown(async move { stop_transport.stopped().await }) => r.map_err(ServerError::ServeTransport),
            r = psql => r.map_err(ServerError::ServePsql),
        };
        stopping.stop();
        rounds.abort();
        ticks.abort();
        result
    }.instrument(span));
    Ok(Running {
        addr,
        psql_addr,
        transport_addr,
        state,
        task,
    })
}

/// Runs a stand-in node until a server fails.
pub async fn run(config: NodeConfig) -> Result<(), ServerError> {
    let running = spawn(config).await?;
    match running.task.await {
        Ok(r) => r,
        Err(e) => Err(ServerError::Serve(std::io::Error::other(e))),
    }
}
