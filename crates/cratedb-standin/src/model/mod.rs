//! A pure, deterministic model of one CrateDB cluster.
//!
//! The model is CrateDB's *cluster state* as its elected master publishes it: the nodes that
//! joined, the voting configuration and the master, tables with their shard copies, users and
//! privileges, cluster settings, the license and the node checks. Time only moves through
//! [`Cluster::tick`]; the model reads no clock and draws no random number, so a run replays
//! exactly. A stand-in process owns one [`Cluster`] value (one node's view of the published
//! state); how several processes share it is left to the server layer.
//!
//! Each rule cites the CrateDB documentation page it follows. This is a stand-in, never CrateDB.

mod checks;
mod license;
mod nodes;
mod rows;
mod settings;
mod tables;
mod types;
mod users;

pub use checks::{
    NodeCheck, RECOVERY_AFTER_NODES_CHECK, RECOVERY_AFTER_TIME_CHECK, RECOVERY_EXPECTED_NODES_CHECK,
};
pub use license::{COMMUNITY_NODE_LIMIT, License};
pub use nodes::{Node, NodeSpec, node_id};
pub use settings::{EXCLUDE_NAME, GatewaySettings, Settings};
pub use tables::{Health, Replicas, ShardCopy, ShardState, Table, TableHealth, TableName};
pub use types::{DataType, format_timestamp, parse_text_array, parse_timestamp};
pub use users::{Privilege, SUPERUSER, User};

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// What a model operation refused, with CrateDB's meaning. The SQL front maps each variant to
/// CrateDB's error code; messages never contain a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// No master is elected: CrateDB blocks writes and DDL (`concepts/clustering.html`).
    #[error("ClusterBlockException[blocked by: [SERVICE_UNAVAILABLE/2/no master];]")]
    NoMaster,
    /// The node limit of the license is exceeded (4.2 `editions.html#node-limitation`).
    #[error(
        "LicenseViolationException[Statement not allowed. The maximum number of nodes granted by the license has been exceeded ({nodes} > {max_nodes})]"
    )]
    LicenseViolation { nodes: usize, max_nodes: usize },
    #[error("InvalidLicenseException[{0}]")]
    InvalidLicense(String),
    #[error("RoleAlreadyExistsException[Role '{0}' already exists]")]
    UserAlreadyExists(String),
    #[error("RoleUnknownException[Role '{0}' does not exist]")]
    UserUnknown(String),
    #[error("UnauthorizedException[{0}]")]
    Unauthorized(String),
    #[error("MissingPrivilegeException[Missing '{privilege}' privilege for user '{user}']")]
    MissingPrivilege { privilege: Privilege, user: String },
    #[error("RelationAlreadyExists[Relation '{0}' already exists.]")]
    TableAlreadyExists(TableName),
    #[error("RelationUnknown[Relation '{0}' unknown]")]
    TableUnknown(TableName),
    #[error("UnavailableShardsException[the primary shards of '{0}' are not active]")]
    ShardsUnavailable(TableName),
    /// An invalid argument: bad setting name or value, bad table parameter.
    #[error("IllegalArgumentException[{0}]")]
    InvalidArgument(String),
    #[error("UnknownNode[node '{0}' is not part of the cluster]")]
    NodeUnknown(String),
}

/// How the cluster is configured at start: what CrateDB reads from `crate.yml` / `-C` flags.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterConfig {
    /// `cluster.name`.
    pub cluster_name: String,
    /// `cluster.initial_master_nodes`: the first voting configuration.
    pub initial_master_nodes: Vec<String>,
    /// Ticks a shard copy spends INITIALIZING before it is STARTED (0: at once).
    pub init_ticks: u32,
    /// Ticks a relocation takes (0: at once).
    pub relocation_ticks: u32,
    /// Static `gateway.*` settings (node-level, not settable at runtime).
    pub gateway: GatewaySettings,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            cluster_name: "crate".to_owned(),
            initial_master_nodes: Vec::new(),
            init_ticks: 1,
            relocation_ticks: 2,
            gateway: GatewaySettings::default(),
        }
    }
}

/// One CrateDB cluster's state. See the module docs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cluster {
    config: ClusterConfig,
    nodes: BTreeMap<String, Node>,
    voting: BTreeSet<String>,
    master: Option<String>,
    #[serde(with = "tables::as_list")]
    tables: BTreeMap<TableName, Table>,
    shards: Vec<ShardCopy>,
    users: BTreeMap<String, User>,
    settings: Settings,
    license: License,
    /// `(check id, node name)` of acknowledged node checks; transient, as in CrateDB.
    acknowledged: BTreeSet<(u32, String)>,
    /// Number of ticks so far.
    now: u64,
    /// Feeds deterministic password salts.
    salt_counter: u64,
}

impl Cluster {
    /// A cluster with no node yet, the built-in `crate` superuser and no license.
    pub fn new(config: ClusterConfig) -> Self {
        let mut users = BTreeMap::new();
        users.insert(SUPERUSER.to_owned(), User::superuser());
        Self {
            config,
            nodes: BTreeMap::new(),
            voting: BTreeSet::new(),
            master: None,
            tables: BTreeMap::new(),
            shards: Vec::new(),
            users,
            settings: Settings::default(),
            license: License::None,
            acknowledged: BTreeSet::new(),
            now: 0,
            salt_counter: 0,
        }
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// The number of ticks so far.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Advance time by one tick: recoveries and relocations progress, then the master
    /// reroutes. Without a master nothing changes: only a master publishes cluster state.
    pub fn tick(&mut self) {
        self.now += 1;
        if self.master.is_none() {
            return;
        }
        self.advance_shards();
        self.reroute();
    }

    /// Ticks until `done(self)` holds or `max_ticks` passed; returns whether it holds.
    pub fn tick_until(&mut self, max_ticks: u32, done: impl Fn(&Self) -> bool) -> bool {
        for _ in 0..max_ticks {
            if done(self) {
                return true;
            }
            self.tick();
        }
        done(self)
    }

    /// The state as a full cluster restart finds it on disk: transient settings and
    /// node-check acknowledgements are gone (`sql/statements/set.html`: transient settings do
    /// not survive a full cluster restart), persistent ones, users, tables and the license stay.
    pub fn after_full_restart(mut self) -> Self {
        self.settings.transient.clear();
        self.acknowledged.clear();
        self
    }

    /// Refuses writes and DDL when no master is elected or the license is violated.
    pub fn ensure_writable(&self) -> Result<(), ModelError> {
        if self.master.is_none() {
            return Err(ModelError::NoMaster);
        }
        self.ensure_license()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same operations give the same state: the model has no clock and no randomness.
    fn scripted() -> Cluster {
        let mut c = Cluster::new(ClusterConfig::default());
        for n in ["a", "b", "c"] {
            c.join(NodeSpec::new(n));
        }
        c.create_user(SUPERUSER, "u", Some("pw")).ok();
        c.create_table(
            TableName::new("doc", "t"),
            5,
            Replicas::Fixed(1),
            vec![],
            false,
        )
        .ok();
        c.tick_until(3, |_| false);
        c.set_global(false, EXCLUDE_NAME, serde_json::json!("c"))
            .ok();
        c.tick();
        c.leave("a").ok();
        c.tick_until(5, |_| false);
        c
    }

    #[test]
    fn state_round_trips_through_json() {
        let x = scripted();
        let json = serde_json::to_value(&x).unwrap();
        let y: Cluster = serde_json::from_value(json).unwrap();
        assert_eq!(x.shards(), y.shards());
        assert_eq!(x.user("u"), y.user("u"));
        assert_eq!(x.master(), y.master());
        assert_eq!(x.voting_configuration(), y.voting_configuration());
        assert_eq!(x.table_health(), y.table_health());
        assert!(y.authenticate("u", Some("pw")).is_ok(), "the hash is kept");
    }

    #[test]
    fn runs_replay_exactly() {
        let (x, y) = (scripted(), scripted());
        assert_eq!(x.shards(), y.shards());
        assert_eq!(x.master(), y.master());
        assert_eq!(x.user("u"), y.user("u"), "same salts, same hashes");
        assert_eq!(x.table_health(), y.table_health());
    }
}
