//! Errors of the agent's start-up and its API calls.

use std::path::PathBuf;

/// A failure that stops the agent from starting or a step from completing.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("Kubernetes API call failed while {action}: {source}")]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    #[error("I/O on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot bind the kubelet API on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("cannot make the kubelet API's TLS certificate: {0}")]
    Tls(String),
}

impl NodeError {
    /// A stable category for logs and metrics.
    pub fn category(&self) -> &'static str {
        match self {
            NodeError::Kube { .. } => "kube",
            NodeError::Io { .. } => "io",
            NodeError::Bind { .. } => "bind",
            NodeError::Config(_) => "config",
            NodeError::Tls(_) => "tls",
        }
    }

    pub(crate) fn kube(action: impl Into<String>) -> impl FnOnce(kube::Error) -> NodeError {
        let action = action.into();
        move |source| NodeError::Kube { action, source }
    }

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> NodeError {
        let path = path.into();
        move |source| NodeError::Io { path, source }
    }
}
