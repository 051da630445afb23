//! The CrateDB admin seam. CrateDB is reached three ways, as seed 000 says, and
//! [`CrateChannels`] has one method for each:
//!
//! - **`crash` over `pods/exec`** in a master Pod, as CrateDB's superuser `crate` (trusted from
//!   the node's own address): the license and the `system` user. The statements go to `crash`'s
//!   standard input, so neither the license nor the password is in the exec command line.
//! - **the PostgreSQL wire protocol**, as `system`: the users of the spec; as a user with its old
//!   password: that user's password change.
//! - **HTTP `/_sql`**, as `system`: everything the operator reads (nodes, health, shards,
//!   settings) and the allocation settings it changes while scaling.
//!
//! [`client`] is the real thing (reqwest, tokio-postgres, kube exec); [`model`] (tests only)
//! runs the same statements on the CrateDB stand-in's model. The SQL text and the reading of
//! its answers live here, once: [`ops`].
//!
//! Passwords and the license travel only inside statements; [`CrateError`] messages never
//! contain a statement.

pub mod client;
#[cfg(test)]
pub mod model;
pub mod ops;

use async_trait::async_trait;
use serde_json::Value;

use crate::resources::secrets::Password;

/// Why a CrateDB call failed. Messages never contain a statement or a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrateError {
    /// No node answered.
    #[error("CrateDB unreachable: {0}")]
    Unavailable(String),
    /// The login was refused (wrong password, unknown user).
    #[error("CrateDB login refused: {0}")]
    AuthFailed(String),
    /// The user (or object) exists already (CrateDB error 4099 / SQLSTATE 42710).
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// CrateDB refused the statement.
    #[error("CrateDB error {code}: {message}")]
    Refused {
        /// CrateDB's error code (or 0 when only a SQLSTATE was given).
        code: i64,
        /// CrateDB's message.
        message: String,
    },
    /// Anything else (an answer the operator cannot read, an exec that failed).
    #[error("{0}")]
    Other(String),
}

impl CrateError {
    /// From a CrateDB error code and message (HTTP `/_sql` errors).
    pub fn from_code(code: i64, message: String) -> Self {
        match code {
            4099 | 4093 => Self::AlreadyExists(message),
            4010 => Self::AuthFailed(message),
            5000 | 5002 | 5030 => Self::Unavailable(message),
            _ => Self::Refused { code, message },
        }
    }

    /// A stable reason, for conditions and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unavailable(_) => "Unavailable",
            Self::AuthFailed(_) => "AuthFailed",
            Self::AlreadyExists(_) => "AlreadyExists",
            Self::Refused { .. } => "Refused",
            Self::Other(_) => "Other",
        }
    }
}

/// A node to talk to: its Pod and address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Pod (and node) name.
    pub pod: String,
    /// Namespace of the Pod.
    pub namespace: String,
    /// Pod IP.
    pub ip: String,
}

/// Who logs in. `Debug` never shows the password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Login {
    /// User name.
    pub user: String,
    /// Password.
    pub password: Password,
}

/// Rows of an HTTP `/_sql` answer.
pub type Rows = Vec<Vec<Value>>;

/// The three ways to CrateDB. Each call goes to one node; [`ops`] tries the next node on
/// [`CrateError::Unavailable`].
#[async_trait]
pub trait CrateChannels: Send + Sync {
    /// Runs one statement over HTTP `/_sql` as `login`.
    async fn http(
        &self,
        node: &Endpoint,
        login: &Login,
        stmt: &str,
        args: &[Value],
    ) -> Result<Rows, CrateError>;

    /// Runs statements (`;`-separated) over the PostgreSQL wire protocol as `login`.
    async fn pg(&self, node: &Endpoint, login: &Login, statements: &str) -> Result<(), CrateError>;

    /// Runs statements with `crash` inside the node's Pod, as `crate`, reading them from
    /// standard input.
    async fn crash(&self, node: &Endpoint, statements: &str) -> Result<(), CrateError>;
}
