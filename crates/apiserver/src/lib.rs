//! Steward's embedded control plane: an in-memory Kubernetes API server that speaks the real
//! HTTP API (plain HTTP on loopback, no TLS; bearer-token authentication and RBAC authorization), so
//! kube-rs clients and kubectl work against it unchanged. What is implemented, approximated and absent
//! is listed in `docs/local-control-plane.md`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), steward_apiserver::Error> {
//! let server = steward_apiserver::start(steward_apiserver::ServerConfig::default()).await?;
//! println!("{}", server.kubeconfig_yaml());
//! server.shutdown().await;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod auth;
mod cel;
mod controllers;
mod convert;
mod crd;
mod defaults;
mod fieldpath;
mod gc;
mod handlers;
mod hints;
mod index;
mod ipam;
mod managed_fields;
mod meta;
mod metrics;
mod objmeta;
mod openapi;
mod patch;
mod proto;
mod registry;
mod resource_metrics;
mod selectors;
mod server;
mod snapshot;
mod status;
mod store;
mod validation;
mod watch;
mod write;

pub use ipam::ServiceCidr;
pub use server::{ApiServerHandle, ServerConfig, kubeconfig_yaml, start};

/// A TLS connection to a kubelet API as this server opens it (certificate not verified, as a
/// real API server without `--kubelet-certificate-authority`); for tools and tests that talk to
/// a node agent directly.
pub async fn connect_kubelet(
    addr: std::net::SocketAddr,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    handlers::connect_kubelet(addr).await
}

/// Errors from starting the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot read state file {path}: {source}")]
    StateFile {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("state file {path} is not a valid snapshot: {message}")]
    Snapshot {
        path: std::path::PathBuf,
        message: String,
    },
}

impl Error {
    /// Stable label for metrics and events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Bind { .. } => "bind",
            Self::StateFile { .. } => "state_file",
            Self::Snapshot { .. } => "snapshot",
        }
    }
}
