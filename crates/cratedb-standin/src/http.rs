//! CrateDB's HTTP endpoint: `POST /_sql` and `GET /`.
//!
//! Follows "HTTP endpoint" (<https://cratedb.com/docs/crate/reference/en/latest/interfaces/http.html>):
//! a JSON body `{"stmt": …, "args": […]}` answered by `{"cols", "rows", "rowcount",
//! "duration"}` (duration in milliseconds) or, on failure, by `{"error": {"message", "code"}}`
//! with the HTTP status the code's leading digits name. Credentials come by HTTP basic auth
//! (<https://cratedb.com/docs/crate/reference/en/latest/admin/auth/methods.html>); a request
//! without them runs as `auth.trust.http_default_user` (`crate`). `bulk_args` is not modelled.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::NodeConfig;
use crate::model::Cluster;
use crate::sql::{self, ErrorCode, SqlError};

/// The state a stand-in process serves: its view of the cluster.
#[derive(Clone)]
pub struct Shared {
    pub cluster: Arc<Mutex<Cluster>>,
    pub config: Arc<NodeConfig>,
}

impl Shared {
    /// A new cluster that this node has joined.
    pub fn new(config: NodeConfig) -> Self {
        let mut cluster = Cluster::new(config.cluster.clone());
        cluster.join(config.node.clone());
        Self {
            cluster: Arc::new(Mutex::new(cluster)),
            config: Arc::new(config),
        }
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

async fn sql_endpoint(
    State(state): State<Shared>,
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
    let result = {
        let mut cluster = state.lock();
        match cluster.authenticate(&user, password.as_deref()) {
            Err(e) => {
                tracing::info!(user, "HTTP authentication failed");
                let mut resp = error_response(&SqlError::from(e));
                resp.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Basic realm=\"CrateDB\""),
                );
                return resp;
            }
            Ok(_) => sql::execute(&mut cluster, &user, &request.stmt, &request.args),
        }
    };
    match result {
        Ok(r) => Json(json!({
            "cols": r.cols,
            "rows": r.rows,
            "rowcount": r.rowcount,
            "duration": started.elapsed().as_secs_f64() * 1000.0,
        }))
        .into_response(),
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
    pub state: Shared,
    pub task: tokio::task::JoinHandle<Result<(), ServerError>>,
}

/// Binds the HTTP and PostgreSQL ports, starts the tick loop and serves both in the
/// background; the task ends when either server fails.
pub async fn spawn(config: NodeConfig) -> Result<Running, ServerError> {
    let addr = config.http_addr;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })?;
    let addr = listener.local_addr().map_err(ServerError::Serve)?;
    let psql_addr = config.psql_addr;
    let psql_listener = tokio::net::TcpListener::bind(psql_addr)
        .await
        .map_err(|source| ServerError::BindPsql {
            addr: psql_addr,
            source,
        })?;
    let psql_addr = psql_listener.local_addr().map_err(ServerError::ServePsql)?;
    let interval = config.tick_interval;
    let state = Shared::new(config);
    let ticking = state.clone();
    tokio::spawn(async move {
        let mut timer = tokio::time::interval(interval);
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            timer.tick().await;
            ticking.lock().tick();
        }
    });
    let app = router(state.clone());
    tracing::info!(%addr, %psql_addr, node = %state.config.node.name, "CrateDB stand-in listening (HTTP, PostgreSQL)");
    let psql = crate::pgwire::serve(psql_listener, state.clone());
    let task = tokio::spawn(async move {
        tokio::select! {
            r = axum::serve(listener, app) => r.map_err(ServerError::Serve),
            r = psql => r.map_err(ServerError::ServePsql),
        }
    });
    Ok(Running {
        addr,
        psql_addr,
        state,
        task,
    })
}

/// Runs a stand-in node until the server fails.
pub async fn run(config: NodeConfig) -> Result<(), ServerError> {
    let running = spawn(config).await?;
    match running.task.await {
        Ok(r) => r,
        Err(e) => Err(ServerError::Serve(std::io::Error::other(e))),
    }
}
