//! The etcd admin seam: everything the engine asks of an etcd cluster goes through
//! [`EtcdAdmin`]. [`client`] talks to real etcd over gRPC (`etcd-client`); [`model`] is an
//! in-memory etcd that enforces the same membership rules (quorum, learners, strict
//! reconfiguration checks) for step tests.

pub mod client;
pub mod model;

use std::time::Duration;

use async_trait::async_trait;

/// One entry of the etcd member list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Member ID (etcd's uint64).
    pub id: u64,
    /// `--name`; empty while an added member has not started yet.
    pub name: String,
    /// Advertised peer URLs.
    pub peer_urls: Vec<String>,
    /// Advertised client URLs; empty while the member has not started yet.
    pub client_urls: Vec<String>,
    /// A learner (non-voting) member.
    pub is_learner: bool,
}

impl Member {
    /// Added to the member list but never started (etcd reports no name yet).
    pub fn is_started(&self) -> bool {
        !self.name.is_empty()
    }
}

/// What one member says about itself (`Maintenance.Status`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointStatus {
    /// The answering member's ID.
    pub member_id: u64,
    /// The leader this member knows of (0: none).
    pub leader: u64,
    /// Server version, e.g. `3.4.23`.
    pub version: String,
    /// Backend database size in bytes.
    pub db_size: i64,
    /// Raft index applied on this member.
    pub raft_index: u64,
    /// Raft term.
    pub raft_term: u64,
    /// A learner.
    pub is_learner: bool,
    /// Alarms / errors the member reports (e.g. `NOSPACE`).
    pub errors: Vec<String>,
}

/// Why an admin call failed. The engine decides on the kind, never on message text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    /// No endpoint answered (connection refused, DNS, timeout before any answer).
    #[error("etcd unreachable: {0}")]
    Unavailable(String),
    /// The cluster answered but could not commit (no leader / lost quorum / request timed out).
    #[error("etcd cannot reach consensus: {0}")]
    NoQuorum(String),
    /// The member ID is not in the member list.
    #[error("etcd member {0:x} not found")]
    MemberNotFound(u64),
    /// The change would leave too few started voting members (strict reconfiguration check).
    #[error("etcd refused the membership change as unsafe: {0}")]
    Unhealthy(String),
    /// The learner has not caught up with the leader's log yet; retry later.
    #[error("etcd learner {0:x} is not in sync with the leader yet")]
    LearnerNotReady(u64),
    /// Only one learner at a time (etcd's default `--experimental-max-learners`).
    #[error("etcd already has a learner member")]
    TooManyLearners,
    /// The peer URLs are already used by a member.
    #[error("etcd peer URL already in use: {0}")]
    PeerUrlExists(String),
    /// The call needs a voting member (e.g. moving leadership to a learner).
    #[error("etcd member {0:x} is a learner")]
    IsLearner(u64),
    /// Anything else etcd said.
    #[error("etcd error: {0}")]
    Other(String),
}

impl AdminError {
    /// True when retrying later may succeed without anyone changing anything.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Unavailable(_)
                | Self::NoQuorum(_)
                | Self::LearnerNotReady(_)
                | Self::Unhealthy(_)
        )
    }
}

/// The result of `member_add`: the new member and the member list after the add (what the new
/// member's `--initial-cluster` must contain).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Added {
    /// The new member (name empty until it starts).
    pub member: Member,
    /// All members after the add, the new one included.
    pub members: Vec<Member>,
}

/// Membership and health operations on one etcd cluster.
#[async_trait]
pub trait EtcdAdmin: Send + Sync {
    /// The member list, as agreed by the cluster (linearizable).
    async fn member_list(&self) -> Result<Vec<Member>, AdminError>;
    /// Adds a member with these peer URLs, as a learner when `learner` is true.
    async fn member_add(&self, peer_urls: &[String], learner: bool) -> Result<Added, AdminError>;
    /// Promotes a learner to a voting member.
    async fn member_promote(&self, id: u64) -> Result<(), AdminError>;
    /// Removes a member.
    async fn member_remove(&self, id: u64) -> Result<(), AdminError>;
    /// Asks the member serving `endpoint` (a client URL) for its status.
    async fn status(&self, endpoint: &str) -> Result<EndpointStatus, AdminError>;
    /// Transfers leadership to `to` (must be a started voting member). Sent to the current
    /// leader's endpoint, as etcd requires.
    async fn move_leader(&self, leader_endpoint: &str, to: u64) -> Result<(), AdminError>;
}

/// The context's etcd connector (`crate::etcd::engine` installs the gRPC one; tests a model).
pub fn connector(
    ctx: &crate::runtime::context::Context,
) -> Result<std::sync::Arc<dyn EtcdConnector>, crate::error::Error> {
    ctx.seam::<std::sync::Arc<dyn EtcdConnector>>()
}

/// Opens an [`EtcdAdmin`] on a set of client endpoints. The engine holds one connector; tests
/// swap in the model's.
#[async_trait]
pub trait EtcdConnector: Send + Sync {
    /// Connects to any of `endpoints` (client URLs such as `http://127.1.0.5:2379`), giving up
    /// after `timeout`.
    async fn connect(
        &self,
        endpoints: &[String],
        timeout: Duration,
    ) -> Result<Box<dyn EtcdAdmin>, AdminError>;
}
