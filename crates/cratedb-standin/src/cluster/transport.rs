//! The stand-in's node-to-node transport on `transport.tcp.port` (4300).
//!
//! CrateDB's transport is its own binary protocol; the stand-in's is **its own HTTP/JSON**,
//! shared by no other program: a node pings its peers (`POST /_standin/ping`, both sides learn
//! of each other), the elected master pushes each new version of the cluster state
//! (`POST /_standin/publish`), a node that is about to be elected fetches a newer state
//! (`GET /_standin/state`), and other nodes forward statements that change the state to the
//! master (`POST /_standin/execute`). The transport is unauthenticated, like CrateDB's
//! transport without TLS: anything that reaches the port is trusted.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::http::Shared;
use crate::model::NodeSpec;
use crate::sql::{QueryResult, Session, SqlError};

/// What a node says about itself in every ping and ping answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    pub cluster_name: String,
    pub spec: NodeSpec,
    /// Differs after every process start: the master re-joins a node that restarted.
    pub incarnation: u64,
    /// The version of the cluster state the node holds.
    pub version: u64,
    /// Whether the node acts as the elected master.
    pub leader: bool,
    /// Where its transport listens.
    pub transport: SocketAddr,
}

/// A published cluster state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Publication {
    pub version: u64,
    pub from: String,
    /// A serialized [`crate::model::Cluster`].
    pub state: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PublishAnswer {
    pub accepted: bool,
    /// The receiver's version after the publication.
    pub version: u64,
}

/// A statement forwarded to the master, run there as `user` (authenticated by the node that
/// received it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Forward {
    pub user: String,
    /// The session's default schema.
    #[serde(default = "default_schema")]
    pub schema: String,
    pub stmt: String,
    #[serde(default)]
    pub args: Vec<Value>,
}

fn default_schema() -> String {
    crate::sql::DEFAULT_SCHEMA.to_owned()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ForwardAnswer {
    Ok {
        cols: Vec<String>,
        #[serde(default)]
        types: Vec<crate::model::DataType>,
        rows: Vec<Vec<Value>>,
        rowcount: i64,
    },
    Error {
        message: String,
        code: u32,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("transport request to {addr} failed: {source}")]
    Request {
        addr: SocketAddr,
        source: reqwest::Error,
    },
    #[error("building the transport client: {0}")]
    Client(reqwest::Error),
}

impl TransportError {
    /// Whether the peer was reached but did not answer in time (a slow peer, not a gone one).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Request { source, .. } if source.is_timeout() && !source.is_connect())
    }
}

/// The transport's routes.
pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/_standin/ping", post(ping_endpoint))
        .route("/_standin/publish", post(publish_endpoint))
        .route("/_standin/state", get(state_endpoint))
        .route("/_standin/execute", post(execute_endpoint))
        .with_state(state)
}

async fn ping_endpoint(State(state): State<Shared>, Json(hello): Json<Hello>) -> Json<Hello> {
    state.record(hello);
    Json(state.hello())
}

async fn publish_endpoint(
    State(state): State<Shared>,
    Json(publication): Json<Publication>,
) -> Json<PublishAnswer> {
    let accepted = state.adopt(publication.version, &publication.from, publication.state);
    Json(PublishAnswer {
        accepted,
        version: state.version(),
    })
}

async fn state_endpoint(State(state): State<Shared>) -> Json<Publication> {
    Json(state.publication())
}

async fn execute_endpoint(
    State(state): State<Shared>,
    Json(forward): Json<Forward>,
) -> Json<ForwardAnswer> {
    Json(
        match state
            .execute_as_master(
                &Session {
                    user: forward.user,
                    schema: forward.schema,
                },
                &forward.stmt,
                &forward.args,
            )
            .await
        {
            Ok(r) => ForwardAnswer::Ok {
                cols: r.cols,
                types: r.types,
                rows: r.rows,
                rowcount: r.rowcount,
            },
            Err(e) => ForwardAnswer::Error {
                code: e.code_number(),
                message: e.message,
            },
        },
    )
}

/// An HTTP client for the transport: no connection pooling (a node that stops must look gone
/// at once, not answer on a kept-alive connection), no proxies; a connection takes at most
/// `connect`, a request (connection included) at most `timeout`.
pub fn client(connect: Duration, timeout: Duration) -> Result<reqwest::Client, TransportError> {
    // reqwest is built without a default TLS provider in this workspace.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .connect_timeout(connect)
        .timeout(timeout)
        .build()
        .map_err(TransportError::Client)
}

fn request_error(addr: SocketAddr) -> impl Fn(reqwest::Error) -> TransportError {
    move |source| TransportError::Request { addr, source }
}

pub async fn ping(
    client: &reqwest::Client,
    addr: SocketAddr,
    hello: &Hello,
) -> Result<Hello, TransportError> {
    client
        .post(format!("http://{addr}/_standin/ping"))
        .json(hello)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(request_error(addr))?
        .json()
        .await
        .map_err(request_error(addr))
}

pub async fn publish(
    client: &reqwest::Client,
    addr: SocketAddr,
    publication: &Publication,
) -> Result<PublishAnswer, TransportError> {
    client
        .post(format!("http://{addr}/_standin/publish"))
        .json(publication)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(request_error(addr))?
        .json()
        .await
        .map_err(request_error(addr))
}

pub async fn fetch_state(
    client: &reqwest::Client,
    addr: SocketAddr,
) -> Result<Publication, TransportError> {
    client
        .get(format!("http://{addr}/_standin/state"))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(request_error(addr))?
        .json()
        .await
        .map_err(request_error(addr))
}

/// Runs a statement on the master at `addr`. `kind` is the statement's kind as parsed here.
pub async fn forward(
    client: &reqwest::Client,
    addr: SocketAddr,
    forward: &Forward,
    kind: &'static str,
) -> Result<Result<QueryResult, SqlError>, TransportError> {
    let answer: ForwardAnswer = client
        .post(format!("http://{addr}/_standin/execute"))
        .json(forward)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(request_error(addr))?
        .json()
        .await
        .map_err(request_error(addr))?;
    Ok(match answer {
        ForwardAnswer::Ok {
            cols,
            types,
            rows,
            rowcount,
        } => Ok(QueryResult {
            kind,
            cols,
            types,
            rows,
            rowcount,
        }),
        ForwardAnswer::Error { message, code } => Err(SqlError::from_code_number(code, message)),
    })
}
