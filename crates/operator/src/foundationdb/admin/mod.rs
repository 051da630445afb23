//! The FoundationDB admin seam. The operator reaches FoundationDB as its own operator does: with
//! FoundationDB's tools — `fdbcli --exec` for the machine-readable status and every command, and
//! the unified image's monitor for the configuration a Pod runs. Steward runs them inside the
//! cluster's Pods through `pods/exec` (the Pod has the tools and the cluster file), so the
//! operator needs no FoundationDB client library of its own.
//!
//! [`client`] is the real thing (kube exec); [`model`] (tests only) is an in-memory cluster
//! that enforces what the steps depend on. The commands and the reading of their output live
//! here, once ([`ops`], [`cli`]).

pub mod cli;
pub mod client;
#[cfg(test)]
pub mod model;
pub mod ops;
pub mod status;

use async_trait::async_trait;

/// Why a FoundationDB call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FdbError {
    /// No Pod could run the command (none running, exec failed, timed out).
    #[error("FoundationDB unreachable: {0}")]
    Unavailable(String),
    /// The command ran and failed (fdbcli's `ERROR:` line).
    #[error("fdbcli: {0}")]
    Command(String),
    /// The output could not be read.
    #[error("unreadable answer: {0}")]
    Unreadable(String),
}

impl FdbError {
    /// A stable reason, for conditions and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unavailable(_) => "Unavailable",
            Self::Command(_) => "CommandFailed",
            Self::Unreadable(_) => "Unreadable",
        }
    }
}

/// A Pod to run a tool in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Namespace.
    pub namespace: String,
    /// Pod name (its process group ID).
    pub pod: String,
}

/// The two tools the operator runs in a Pod.
#[async_trait]
pub trait FdbAdmin: Send + Sync {
    /// `fdbcli -C <the Pod's cluster file> --timeout <s> --exec "<commands>"`; the standard
    /// output when it exits 0, [`FdbError::Command`] with its `ERROR` line otherwise.
    async fn cli(&self, target: &Target, commands: &str) -> Result<String, FdbError>;

    /// `fdb-kubernetes-monitor report`: the monitor's active configuration and environment.
    async fn monitor_report(&self, target: &Target) -> Result<String, FdbError>;

    /// Another FoundationDB tool (`fdbbackup …`, `fdbrestore …`; `argv[0]` is the tool) in
    /// the Pod's main container; its standard output when it exits 0.
    async fn tool(&self, target: &Target, argv: Vec<String>) -> Result<String, FdbError>;
}
