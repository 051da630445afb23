//! Several stand-in processes forming one cluster: master-published state over the stand-in's
//! own transport ([`transport`]).
//!
//! Follows the shape of CrateDB's clustering
//! (<https://cratedb.com/docs/crate/reference/en/latest/concepts/clustering.html>): nodes find
//! each other through `discovery.seed_hosts`, master-eligible nodes elect a master by a
//! majority of the voting configuration, and the master alone changes the cluster state and
//! publishes each new version to every node.
//!
//! - Every node pings every peer it knows (seeds, resolved anew each time, and nodes that
//!   pinged it) every `standin.ping_ms`; a peer not heard from for `standin.liveness_timeout_ms`
//!   is gone.
//! - A node that sees no live master takes its copy of the latest published state, removes the
//!   nodes it cannot reach, joins those it can ([`membership::election_view`]) and lets the
//!   model elect. If the model elects this node, it becomes master (first adopting a newer
//!   state a live peer holds); if the model elects nobody, the node serves that blocked view.
//! - The master applies joins and leaves it observes, runs the ticks and every statement that
//!   changes the state (other nodes forward those to it), and publishes a new version whenever
//!   the state changed, before it answers the statement; nodes adopt only newer versions.
//! - Reads (`SELECT`) are answered by any node from its latest published copy.
//! - Every node writes each version it holds to `path.data` ([`persist`]).
//!
//! The model stays pure: everything here only feeds it joins, leaves and statements.

pub mod membership;
pub mod persist;
pub mod transport;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::{NodeConfig, seed_host_with_port};
use crate::http::Shared;
use crate::model::{Cluster, ModelError};
use crate::sql::{self, QueryResult, Session, SqlError, Statement};
use transport::{Forward, Hello, Publication};

/// How long a `CREATE TABLE` waits for its primaries to become active before it answers
/// anyway (its table then fails writes with code 5002 until they are).
pub const CREATE_TABLE_WAIT: Duration = Duration::from_secs(10);

/// How long a statement forwarded to the master may take: the `master_timeout` CrateDB's
/// requests to the master default to (Elasticsearch's `?master_timeout`, 30 s). A busy master
/// is waited for; a gone one is noticed by the connection (`liveness_timeout / 2`).
pub const MASTER_TIMEOUT: Duration = Duration::from_secs(30);

/// A peer as last heard of.
struct Peer {
    hello: Hello,
    last_seen: Instant,
}

/// The coordination state of one node, next to its served copy of the cluster state.
struct Meta {
    /// Version of the latest published state this node holds.
    version: u64,
    /// Whether this node acts as the elected master.
    leader: bool,
    /// The latest published state (the served state may be a blocked view of it).
    published: Cluster,
    /// `published` serialized without the tick counter: a tick that changes nothing else
    /// publishes nothing.
    compare: Value,
    /// Incarnations of the nodes this master saw join: another one means a restart.
    joined: BTreeMap<String, u64>,
    /// Whether the served state is this node's blocked election view rather than `published`
    /// (it saw no live master): a master seen again brings `published` back.
    viewing: bool,
}

/// The networking side of a node. See the module docs.
pub struct Coordination {
    meta: Mutex<Meta>,
    peers: Mutex<BTreeMap<String, Peer>>,
    persisted: Mutex<u64>,
    /// Pings, publications and state fetches: each takes at most `liveness_timeout / 2`.
    client: reqwest::Client,
    /// Statements forwarded to the master: connected within `liveness_timeout / 2`, answered
    /// within [`MASTER_TIMEOUT`].
    statements: reqwest::Client,
    started: Instant,
    incarnation: u64,
    publish_addr: SocketAddr,
    pub(crate) stop: CancellationToken,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn without_now(state: &Value) -> Value {
    let mut v = state.clone();
    if let Some(map) = v.as_object_mut() {
        map.remove("now");
    }
    v
}

impl Coordination {
    /// A node's coordination state: `published` is the state found in `path.data` (or a new
    /// cluster) at `version`.
    pub(crate) fn new(
        config: &NodeConfig,
        publish_addr: SocketAddr,
        version: u64,
        published: &Cluster,
    ) -> Result<Self, transport::TransportError> {
        let compare = serde_json::to_value(published)
            .map(|v| without_now(&v))
            .unwrap_or(Value::Null);
        let timeout = (config.liveness_timeout / 2).max(Duration::from_millis(100));
        let incarnation = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or_default();
        Ok(Self {
            meta: Mutex::new(Meta {
                version,
                leader: false,
                published: published.clone(),
                compare,
                joined: BTreeMap::new(),
                viewing: false,
            }),
            peers: Mutex::new(BTreeMap::new()),
            persisted: Mutex::new(version),
            client: transport::client(timeout, timeout)?,
            statements: transport::client(timeout, MASTER_TIMEOUT)?,
            started: Instant::now(),
            incarnation,
            publish_addr,
            stop: CancellationToken::new(),
        })
    }

    fn meta(&self) -> MutexGuard<'_, Meta> {
        lock(&self.meta)
    }

    fn peers(&self) -> MutexGuard<'_, BTreeMap<String, Peer>> {
        lock(&self.peers)
    }
}

impl Shared {
    fn coord(&self) -> &Coordination {
        &self.coordination
    }

    /// This node as its pings describe it.
    pub fn hello(&self) -> Hello {
        let meta = self.coord().meta();
        Hello {
            cluster_name: self.config.cluster.cluster_name.clone(),
            spec: self.config.node.clone(),
            incarnation: self.coord().incarnation,
            version: meta.version,
            leader: meta.leader,
            transport: self.coord().publish_addr,
        }
    }

    /// The version of the cluster state this node holds.
    pub fn version(&self) -> u64 {
        self.coord().meta().version
    }

    /// Whether this node acts as the elected master.
    pub fn is_master(&self) -> bool {
        self.coord().meta().leader
    }

    /// The latest published state this node holds.
    pub(crate) fn publication(&self) -> Publication {
        let meta = self.coord().meta();
        Publication {
            version: meta.version,
            from: self.config.node.name.clone(),
            state: serde_json::to_value(&meta.published).unwrap_or(Value::Null),
        }
    }

    /// Notes that a peer of this cluster was heard from.
    pub(crate) fn record(&self, hello: Hello) {
        if hello.cluster_name != self.config.cluster.cluster_name
            || hello.spec.name == self.config.node.name
        {
            return;
        }
        self.coord().peers().insert(
            hello.spec.name.clone(),
            Peer {
                hello,
                last_seen: Instant::now(),
            },
        );
    }

    /// Peers heard from within the liveness timeout, by name.
    fn live(&self) -> Vec<Hello> {
        let timeout = self.config.liveness_timeout;
        self.coord()
            .peers()
            .values()
            .filter(|p| p.last_seen.elapsed() <= timeout)
            .map(|p| p.hello.clone())
            .collect()
    }

    /// For the master: whether a node has left — not heard from for the liveness timeout (a
    /// node never heard from counts from this process's start).
    fn gone_nodes(&self) -> impl Fn(&str) -> bool + use<> {
        let timeout = self.config.liveness_timeout;
        let heard: BTreeMap<String, bool> = self
            .coord()
            .peers()
            .iter()
            .map(|(n, p)| (n.clone(), p.last_seen.elapsed() > timeout))
            .collect();
        let grace_over = self.coord().started.elapsed() > timeout;
        move |name: &str| heard.get(name).copied().unwrap_or(grace_over)
    }

    /// Adopts a published state newer than the one held. Returns whether it was adopted.
    pub(crate) fn adopt(&self, version: u64, from: &str, state: Value) -> bool {
        let cluster: Cluster = match serde_json::from_value(state.clone()) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(from, error = %e, "ignoring an unreadable cluster state");
                return false;
            }
        };
        {
            let mut served = self.lock();
            let mut meta = self.coord().meta();
            if version <= meta.version {
                return false;
            }
            if meta.leader {
                tracing::warn!(
                    from,
                    version,
                    "a newer cluster state from another master: stepping down"
                );
                meta.leader = false;
            }
            meta.version = version;
            meta.compare = without_now(&state);
            meta.published = cluster.clone();
            meta.viewing = false;
            *served = cluster;
        }
        tracing::debug!(from, version, "adopted cluster state");
        self.persist(version, &state);
        true
    }

    fn persist(&self, version: u64, state: &Value) {
        let Some(dir) = &self.config.data_path else {
            return;
        };
        let mut persisted = lock(&self.coord().persisted);
        if version <= *persisted {
            return;
        }
        match persist::save(dir, &self.config.cluster.cluster_name, version, state) {
            Ok(()) => *persisted = version,
            Err(e) => tracing::warn!(error = %e, "could not persist the cluster state"),
        }
    }

    /// Runs a statement as `user` (already authenticated) in the schema `doc`.
    pub async fn execute(
        &self,
        user: &str,
        stmt: &str,
        args: &[Value],
    ) -> Result<QueryResult, SqlError> {
        self.execute_in(&Session::new(user, None), stmt, args).await
    }

    /// Runs a statement in `session` (its user already authenticated): reads here, state
    /// changes on the master (forwarded when this node is not it; code 5000 when there is
    /// none).
    pub async fn execute_in(
        &self,
        session: &Session,
        stmt: &str,
        args: &[Value],
    ) -> Result<QueryResult, SqlError> {
        let parsed = sql::parse_in(stmt, args, &session.schema)?;
        if matches!(parsed, Statement::Query(_) | Statement::NoOp(_)) {
            let mut cluster = self.lock();
            return sql::execute_in(&mut cluster, session, stmt, args);
        }
        if self.is_master() {
            return self.execute_as_master(session, stmt, args).await;
        }
        let no_master = || SqlError::from(ModelError::NoMaster);
        let Some(master) = self.live().into_iter().find(|p| p.leader) else {
            return Err(no_master());
        };
        let forward = Forward {
            user: session.user.clone(),
            schema: session.schema.clone(),
            stmt: stmt.to_owned(),
            args: args.to_vec(),
        };
        transport::forward(
            &self.coord().statements,
            master.transport,
            &forward,
            parsed.kind(),
        )
        .await
        .unwrap_or_else(|e| {
            tracing::info!(error = %e, "forwarding a statement to the master failed");
            if e.is_timeout() {
                // The master was reached and is still working on it: not "no master".
                Err(SqlError::new(
                    crate::sql::ErrorCode::Internal,
                    format!(
                        "ProcessClusterEventTimeoutException[failed to process cluster event ({}) within {}s]",
                        parsed.kind(),
                        MASTER_TIMEOUT.as_secs()
                    ),
                ))
            } else {
                Err(no_master())
            }
        })
    }

    /// Runs a statement on this node as the master and publishes the result before answering.
    /// A `CREATE TABLE` then waits (up to [`CREATE_TABLE_WAIT`]) for the table's primaries to
    /// be active, as CrateDB's answers once the primary shards started, so that an `INSERT`
    /// right after it finds them.
    pub(crate) async fn execute_as_master(
        &self,
        session: &Session,
        stmt: &str,
        args: &[Value],
    ) -> Result<QueryResult, SqlError> {
        let result = {
            let mut cluster = self.lock();
            if self.is_master() {
                sql::execute_in(&mut cluster, session, stmt, args)
            } else {
                Err(SqlError::from(ModelError::NoMaster))
            }
        };
        self.publish(false).await;
        if result.as_ref().is_ok_and(|r| r.rowcount > 0)
            && let Ok(Statement::CreateTable { name, .. }) =
                sql::parse_in(stmt, args, &session.schema)
        {
            let deadline = Instant::now() + CREATE_TABLE_WAIT;
            while !self.lock().primaries_active(&name) && Instant::now() < deadline {
                tokio::time::sleep(self.config.tick_interval.min(Duration::from_millis(50))).await;
            }
        }
        result
    }

    /// One model tick, on the master only.
    pub(crate) async fn tick(&self) {
        if !self.is_master() {
            return;
        }
        self.lock().tick();
        self.publish(false).await;
    }

    /// Publishes the served state as a new version when it changed (or `force`), then sends
    /// the latest version to every live peer that holds an older one.
    async fn publish(&self, force: bool) {
        let (version, state, changed) = {
            let cluster = self.lock();
            let Ok(state) = serde_json::to_value(&*cluster) else {
                return;
            };
            let compare = without_now(&state);
            let mut meta = self.coord().meta();
            let changed = force || compare != meta.compare;
            if changed {
                meta.version += 1;
                meta.compare = compare;
                meta.published = cluster.clone();
            }
            (meta.version, state, changed)
        };
        if changed {
            tracing::debug!(version, "publishing cluster state");
            self.persist(version, &state);
        }
        let targets: Vec<Hello> = self
            .live()
            .into_iter()
            .filter(|p| p.version < version)
            .collect();
        if targets.is_empty() {
            return;
        }
        let publication = Publication {
            version,
            from: self.config.node.name.clone(),
            state,
        };
        let client = &self.coord().client;
        let sends = targets.iter().map(|p| async {
            (
                p.spec.name.clone(),
                transport::publish(client, p.transport, &publication).await,
            )
        });
        for (name, answer) in futures::future::join_all(sends).await {
            match answer {
                Ok(a) => {
                    if let Some(peer) = self.coord().peers().get_mut(&name) {
                        peer.hello.version = a.version;
                    }
                }
                Err(e) => tracing::debug!(peer = name, error = %e, "publication failed"),
            }
        }
    }

    /// The transport addresses to ping: the seeds (resolved now) and every peer heard of.
    async fn ping_targets(&self) -> BTreeSet<SocketAddr> {
        let mut addrs: BTreeSet<SocketAddr> = self
            .coord()
            .peers()
            .values()
            .map(|p| p.hello.transport)
            .collect();
        for seed in &self.config.seed_hosts {
            let target = seed_host_with_port(seed);
            match tokio::net::lookup_host(target.as_str()).await {
                Ok(found) => addrs.extend(found),
                Err(e) => {
                    tracing::debug!(seed = target, error = %e, "seed host does not resolve (yet)")
                }
            }
        }
        addrs.remove(&self.coord().publish_addr);
        addrs
    }

    /// Pings every peer, then acts on what was seen: one round of the coordination loop.
    pub(crate) async fn round(&self) {
        let targets = self.ping_targets().await;
        let hello = self.hello();
        let client = &self.coord().client;
        let pings = targets
            .into_iter()
            .map(|addr| transport::ping(client, addr, &hello));
        for answer in futures::future::join_all(pings).await {
            match answer {
                Ok(h) => self.record(h),
                Err(e) => tracing::trace!(error = %e, "ping failed"),
            }
        }
        self.coordinate().await;
    }

    /// Leads (as master) or follows / elects, from what the pings saw.
    pub(crate) async fn coordinate(&self) {
        let live = self.live();
        if self.is_master() {
            self.lead(&live).await;
        } else {
            self.follow(&live).await;
        }
    }

    async fn lead(&self, live: &[Hello]) {
        let me = self.config.node.name.as_str();
        let version = self.version();
        if let Some(other) = live.iter().find(|p| {
            p.leader && (p.version > version || (p.version == version && p.spec.name.as_str() < me))
        }) {
            tracing::warn!(other = %other.spec.name, "another node acts as master: stepping down");
            self.coord().meta().leader = false;
            return;
        }
        let restarted: BTreeSet<String> = {
            let mut meta = self.coord().meta();
            live.iter()
                .filter(|p| {
                    meta.joined
                        .insert(p.spec.name.clone(), p.incarnation)
                        .is_some_and(|old| old != p.incarnation)
                })
                .map(|p| p.spec.name.clone())
                .collect()
        };
        let specs: Vec<_> = live.iter().map(|p| p.spec.clone()).collect();
        let gone = self.gone_nodes();
        let still_master = {
            let mut cluster = self.lock();
            if membership::reconcile(&mut cluster, &self.config.node, &specs, gone, &restarted) {
                tracing::info!(nodes = cluster.nodes().count(), master = ?cluster.master(), "cluster membership changed");
            }
            cluster.master() == Some(me)
        };
        if !still_master {
            tracing::warn!("no majority of the voting configuration: no master");
            self.coord().meta().leader = false;
        }
        self.publish(false).await;
    }

    async fn follow(&self, live: &[Hello]) {
        if live.iter().any(|p| p.leader) {
            self.serve_published();
            return;
        }
        let version = self.version();
        if let Some(newest) = live
            .iter()
            .filter(|p| p.version > version)
            .max_by_key(|p| p.version)
        {
            match transport::fetch_state(&self.coord().client, newest.transport).await {
                Ok(p) => {
                    self.adopt(p.version, &p.from, p.state);
                }
                Err(e) => {
                    tracing::debug!(error = %e, "fetching a newer cluster state failed");
                    return;
                }
            }
        }
        let specs: Vec<_> = live.iter().map(|p| p.spec.clone()).collect();
        let view = {
            let meta = self.coord().meta();
            membership::election_view(&meta.published, &self.config.node, &specs)
        };
        let me = self.config.node.name.as_str();
        if view.master() == Some(me) {
            let newest_seen = live.iter().map(|p| p.version).max().unwrap_or(0);
            {
                let mut cluster = self.lock();
                *cluster = view;
                let mut meta = self.coord().meta();
                meta.leader = true;
                meta.viewing = false;
                meta.version = meta.version.max(newest_seen);
                meta.joined = live
                    .iter()
                    .map(|p| (p.spec.name.clone(), p.incarnation))
                    .collect();
            }
            tracing::info!(node = me, "elected master");
            self.publish(true).await;
        } else {
            let mut served = self.lock();
            *served = view;
            self.coord().meta().viewing = true;
        }
    }

    /// Serves the latest published state again after a blocked view. Without this a node that
    /// lost sight of the master for a liveness timeout kept serving its view (a node missing,
    /// no master) until the next publication, which the master sends only when the state
    /// changes: a settled cluster never healed it (a CI failure: five nodes never "formed").
    fn serve_published(&self) {
        let mut served = self.lock();
        let mut meta = self.coord().meta();
        if meta.viewing {
            *served = meta.published.clone();
            meta.viewing = false;
            tracing::info!(
                version = meta.version,
                "a master is seen again: serving the published state"
            );
        }
    }

    /// Resolves when the node is stopped.
    pub(crate) async fn stopped(&self) {
        self.coord().stop.cancelled().await;
    }

    /// Stops the node: its loops and servers end, its ports close.
    pub fn stop(&self) {
        self.coord().stop.cancel();
    }
}

/// The coordination loop: a round every `ping_interval` until the node stops.
pub(crate) async fn run_rounds(state: Shared) {
    let mut timer = tokio::time::interval(state.config.ping_interval);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = timer.tick() => state.round().await,
            _ = state.stopped() => return,
        }
    }
}

/// The tick loop: a model tick every `tick_interval` on the master until the node stops.
pub(crate) async fn run_ticks(state: Shared) {
    let mut timer = tokio::time::interval(state.config.tick_interval);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = timer.tick() => state.tick().await,
            _ = state.stopped() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::{ClusterConfig, NodeSpec};

    fn config() -> ClusterConfig {
        ClusterConfig {
            cluster_name: "heal".into(),
            initial_master_nodes: vec!["m0".into()],
            ..ClusterConfig::default()
        }
    }

    fn hello(spec: NodeSpec, leader: bool, version: u64) -> Hello {
        Hello {
            cluster_name: "heal".into(),
            spec,
            incarnation: 1,
            version,
            leader,
            transport: "127.0.0.1:9".parse().unwrap(),
        }
    }

    #[tokio::test]
    async fn a_follower_that_lost_sight_of_the_master_serves_the_published_state_once_it_sees_it_again()
     {
        let (m0, d0, d1) = (
            NodeSpec::master_only("m0"),
            NodeSpec::data_only("d0"),
            NodeSpec::data_only("d1"),
        );
        let mut published = Cluster::new(config());
        membership::reconcile(
            &mut published,
            &m0,
            &[d0.clone(), d1.clone()],
            |_| false,
            &BTreeSet::new(),
        );
        assert_eq!(published.master(), Some("m0"));
        let mut node = crate::NodeConfig {
            node: d0.clone(),
            ..crate::NodeConfig::default()
        };
        node.cluster = config();
        let d0_node = Shared::new(node, "127.0.0.1:8".parse().unwrap()).unwrap();
        assert!(d0_node.adopt(5, "m0", serde_json::to_value(&published).unwrap()));

        // A liveness timeout without hearing anyone: the blocked view, no master.
        d0_node.follow(&[]).await;
        assert_eq!(d0_node.lock().master(), None);
        assert_eq!(d0_node.lock().nodes().count(), 1);

        // The master and d1 are heard again, the state unchanged (version 5): nothing is
        // published, and d0 serves the published state again.
        d0_node
            .follow(&[hello(m0, true, 5), hello(d1, false, 5)])
            .await;
        let served = d0_node.lock().clone();
        assert_eq!(served.master(), Some("m0"));
        assert_eq!(served.nodes().count(), 3);
        assert_eq!(d0_node.version(), 5);
    }

    /// A master that takes longer than a ping may (`liveness_timeout / 2`) to run a forwarded
    /// statement is waited for, not reported as "no master" (a CI failure under load: code
    /// 5000 "no master" for a `SET LICENSE` through a data node while the master was busy).
    #[tokio::test]
    async fn a_statement_forwarded_to_a_slow_master_waits_for_its_answer() {
        use axum::routing::post;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let master_addr = listener.local_addr().unwrap();
        let slow_master = axum::Router::new().route(
            "/_standin/execute",
            post(|| async {
                tokio::time::sleep(Duration::from_millis(600)).await;
                axum::Json(transport::ForwardAnswer::Ok {
                    cols: vec![],
                    types: vec![],
                    rows: vec![],
                    rowcount: 1,
                })
            }),
        );
        tokio::spawn(async move { axum::serve(listener, slow_master).await });

        let mut node = crate::NodeConfig {
            node: NodeSpec::data_only("d0"),
            liveness_timeout: Duration::from_millis(400),
            ..crate::NodeConfig::default()
        };
        node.cluster = config();
        let d0 = Shared::new(node, "127.0.0.1:8".parse().unwrap()).unwrap();
        let mut master = hello(NodeSpec::master_only("m0"), true, 1);
        master.transport = master_addr;
        d0.record(master);
        let started = Instant::now();
        let answer = d0
            .execute(crate::model::SUPERUSER, "CREATE USER slow", &[])
            .await;
        assert_eq!(answer.map(|r| r.rowcount).map_err(|e| e.message), Ok(1));
        assert!(started.elapsed() >= Duration::from_millis(600));
    }
}
