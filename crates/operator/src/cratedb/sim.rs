//! (tests) Deterministic simulation of the CrateDB engine (issue 16): a seeded run of random
//! scale, restart and user edits with random Pod kills and operator restarts against the
//! CrateDB stand-in's model, checking invariants after every pass and every event:
//!
//! 1. the operator never removes or restarts a master when that would leave the cluster without
//!    a majority of its voting configuration (checked on the planner's action, before it is
//!    applied, on a copy of the model; random kills may break quorum by themselves);
//! 2. no shard's last copy is on a node the operator removes (checked before a data set's
//!    replicas are lowered, and after every step: no lost primary waits for a removed node);
//! 3. no user is lost: every user ever created still has the password hash that was last seen
//!    to log in with its latest password;
//! 4. liveness: once random events stop, every operation finishes (or a shrink is refused, and
//!    the guard agrees) within a bounded number of passes.
//!
//! The world: one model `Cluster` (3 masters, data sets `hot` and `cold`), StatefulSets with
//! Pods that start, stop and crash over ticks (`podManagementPolicy: Parallel`), and the
//! operator's status (`ScaleProgress`, `RestartProgress`, the running operation) — the only
//! thing an operator restart keeps. Each pass does what `ObserveCluster`, `ScaleNodes` and
//! `RollingRestart` do: the same statements (`admin::ops`) through the stand-in's SQL front, the
//! same planner inputs, the same planners.
//!
//! `CRATEDB_SIM_SEED=<seed>` replays one seed; `CRATEDB_SIM_SEEDS` (default 1000) sets how many
//! seeds the test runs, from `CRATEDB_SIM_FIRST` (default 0). A failure prints
//! `CRATEDB_SIM_SEED=<seed>` and the last actions.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::executor::block_on;
use jiff::{SignedDuration, Timestamp};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use steward_api::cratedb::{RestartProgress, ScaleProgress};
use steward_cratedb_standin::model::{Cluster, ClusterConfig, NodeSpec, ShardState, User};
use steward_cratedb_standin::sql;

use super::admin::ops::{self, Observed};
use super::admin::{CrateChannels, CrateError, Endpoint, Login, Rows};
use super::names::{ClusterNames, INITIAL_MASTERS, MASTER_SET, SUPERUSER, SYSTEM_USER};
use super::plan::restart::{self, Gate, PodView, RestartAction};
use super::plan::scale::{self, DbView, ScaleAction, SetReplicas};
use crate::postgres::build::secrets::Password;

/// Rounds of random events per seed.
const ROUNDS: u32 = 30;
/// Rounds without events in which everything must converge.
const SETTLE_ROUNDS: u32 = 400;
/// Simulated time per round.
const ROUND: SignedDuration = SignedDuration::from_secs(10);
const SYSTEM_PW: &str = "system-pw";
const LICENSE: &str = "standin:sim:64";
/// The node sets, masters first, data sets in spec order.
const SETS: [&str; 3] = [MASTER_SET, "hot", "cold"];

/// The stand-in's SQL front on the shared model, as [`super::admin::model::ModelChannels`], but
/// a login already verified against the same stored hash is not hashed again (Argon2 on every
/// statement would make a thousand seeds too slow).
struct SimChannels {
    cluster: Arc<Mutex<Cluster>>,
    verified: Mutex<BTreeMap<(String, String), User>>,
}

impl SimChannels {
    fn run(
        &self,
        node: &Endpoint,
        user: &str,
        password: Option<&str>,
        stmt: &str,
        args: &[Value],
    ) -> Result<Rows, CrateError> {
        let mut cluster = self
            .cluster
            .lock()
            .map_err(|_| CrateError::Other("poisoned".into()))?;
        if cluster.node(&node.pod).is_none() {
            return Err(CrateError::Unavailable("connection refused".into()));
        }
        if let Some(pw) = password {
            let key = (user.to_owned(), pw.to_owned());
            let mut verified = self
                .verified
                .lock()
                .map_err(|_| CrateError::Other("poisoned".into()))?;
            if verified.get(&key) != cluster.user(user) {
                let u = cluster
                    .authenticate(user, Some(pw))
                    .map_err(|e| CrateError::AuthFailed(e.to_string()))?;
                verified.insert(key, u.clone());
            }
        } else {
            cluster
                .authenticate(user, None)
                .map_err(|e| CrateError::AuthFailed(e.to_string()))?;
        }
        let stmt = stmt.trim().trim_end_matches(';');
        sql::execute(&mut cluster, user, stmt, args)
            .map(|r| r.rows)
            .map_err(|e| CrateError::from_code(i64::from(e.code_number()), e.message))
    }
}

#[async_trait]
impl CrateChannels for SimChannels {
    async fn http(
        &self,
        node: &Endpoint,
        login: &Login,
        stmt: &str,
        args: &[Value],
    ) -> Result<Rows, CrateError> {
        self.run(node, &login.user, Some(login.password.expose()), stmt, args)
    }

    async fn pg(&self, node: &Endpoint, login: &Login, statements: &str) -> Result<(), CrateError> {
        self.run(
            node,
            &login.user,
            Some(login.password.expose()),
            statements,
            &[],
        )
        .map(drop)
    }

    async fn crash(&self, node: &Endpoint, statements: &str) -> Result<(), CrateError> {
        self.run(node, SUPERUSER, None, statements, &[]).map(drop)
    }
}

/// A Pod's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Created; its node joins when the count reaches 0.
    Starting(u32),
    /// Its node is in the cluster (or tried to join).
    Running,
    /// Being deleted; its node left; the Pod goes when the count reaches 0.
    Terminating(u32),
    /// Its container crashed; it starts again (same UID) when the count reaches 0.
    Crashed(u32),
}

#[derive(Clone, Debug)]
struct SimPod {
    uid: u64,
    phase: Phase,
}

/// A StatefulSet and its Pods by ordinal.
#[derive(Clone, Debug)]
struct Set {
    name: &'static str,
    replicas: i32,
    pods: BTreeMap<i32, SimPod>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Scale,
    Restart,
}

/// What the operator keeps in the `CrateCluster`'s status: all an operator restart keeps.
#[derive(Clone, Debug, Default)]
struct Status {
    operation: Option<Op>,
    scale: Option<ScaleProgress>,
    restart: Option<RestartProgress>,
    /// The restart trigger last rolled out (`status.restartedAt`).
    restarted: u32,
    /// The last refusal (the `ScaleRefused` condition).
    refused: Option<String>,
}

/// What the operator only holds in memory; an operator restart drops it.
#[derive(Clone, Debug, Default)]
struct Memory {
    observed: Option<Observed>,
}

struct World {
    seed: u64,
    step: u64,
    rng: StdRng,
    channels: SimChannels,
    names: ClusterNames,
    sets: Vec<Set>,
    /// Wanted replicas per set (the spec), in `SETS` order.
    wanted: Vec<i32>,
    /// The spec's restart trigger (`steward.dev/restarted-at`).
    restart_trigger: u32,
    status: Status,
    memory: Memory,
    gate: Gate,
    now: Timestamp,
    next_uid: u64,
    /// Users and their latest password.
    users: BTreeMap<String, String>,
    /// Each user as last seen logging in with its latest password.
    user_records: BTreeMap<String, User>,
    log: VecDeque<String>,
    /// Counts of what happened, for the summary and the replay check.
    stats: Stats,
}

/// What a seed did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Operator passes.
    pub passes: u32,
    /// Scale actions applied (replicas changed, exclusions, resets).
    pub scale_actions: u32,
    /// Scale refusals.
    pub refusals: u32,
    /// Pods the rolling restart deleted.
    pub restart_deletes: u32,
    /// Pods killed at random.
    pub kills: u32,
    /// Operator restarts.
    pub operator_restarts: u32,
    /// Users created or rotated.
    pub user_changes: u32,
    /// A digest of the final model state and log, for the replay check.
    pub digest: String,
}

impl World {
    fn new(seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let names = ClusterNames::new("sim", "db", "cluster.local");
        let masters: Vec<String> = (0..INITIAL_MASTERS)
            .map(|i| names.pod(MASTER_SET, i))
            .collect();
        let cluster = Cluster::new(ClusterConfig {
            initial_master_nodes: masters,
            init_ticks: rng.random_range(0..=2),
            relocation_ticks: rng.random_range(0..=3),
            ..ClusterConfig::default()
        });
        let wanted = vec![3, rng.random_range(1..=3), rng.random_range(1..=3)];
        let sets = SETS
            .iter()
            .zip(&wanted)
            .map(|(name, &replicas)| Set {
                name,
                replicas,
                pods: BTreeMap::new(),
            })
            .collect();
        let gate = Gate {
            readings: rng.random_range(1..=3),
            interval: Duration::from_secs(rng.random_range(0..=3) * 10),
        };
        let mut world = Self {
            seed,
            step: 0,
            rng,
            channels: SimChannels {
                cluster: Arc::new(Mutex::new(cluster)),
                verified: Mutex::default(),
            },
            names,
            sets,
            wanted,
            restart_trigger: 0,
            status: Status::default(),
            memory: Memory::default(),
            gate,
            now: Timestamp::UNIX_EPOCH,
            next_uid: 0,
            users: BTreeMap::new(),
            user_records: BTreeMap::new(),
            log: VecDeque::new(),
            stats: Stats::default(),
        };
        world.bootstrap();
        world
    }

    fn cluster(&self) -> std::sync::MutexGuard<'_, Cluster> {
        match self.channels.cluster.lock() {
            Ok(c) => c,
            Err(e) => e.into_inner(),
        }
    }

    fn fail(&self, what: impl std::fmt::Display) -> ! {
        let mut recent = String::new();
        let (tables, shards) = match self.channels.cluster.try_lock() {
            Ok(c) => (
                c.tables()
                    .map(|t| {
                        format!(
                            "{} {} shards, replicas {}",
                            t.name, t.number_of_shards, t.number_of_replicas
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
                c.shards()
                    .iter()
                    .map(|s| {
                        format!(
                            "{}#{}{} {} {:?}→{:?}",
                            s.table.name,
                            s.shard,
                            if s.primary { "p" } else { "r" },
                            s.state.as_str(),
                            s.node,
                            s.relocating_node
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n  "),
            ),
            Err(_) => Default::default(),
        };
        for line in &self.log {
            let _ = writeln!(recent, "  {line}");
        }
        panic!(
            "CrateDB simulation: seed {} step {}: {what}\nreplay: CRATEDB_SIM_SEED={}\n\
             status: {:?}\nsets: {:?}\nwanted: {:?}\ntables: {tables}\nshards:\n  {shards}\n\
             last actions:\n{recent}",
            self.seed,
            self.step,
            self.seed,
            self.status,
            self.sets
                .iter()
                .map(|s| (s.name, s.replicas, s.pods.clone()))
                .collect::<Vec<_>>(),
            self.wanted
        );
    }

    fn note(&mut self, what: String) {
        if self.log.len() >= 60 {
            self.log.pop_front();
        }
        self.log.push_back(format!("#{} {what}", self.step));
    }

    fn sql_as_crate(&self, stmt: &str) -> Result<(), String> {
        sql::execute(&mut self.cluster(), SUPERUSER, stmt, &[])
            .map(drop)
            .map_err(|e| e.message)
    }

    /// The cluster as bootstrap leaves it: every Pod up, license, `system`, a few tables.
    fn bootstrap(&mut self) {
        for i in 0..self.sets.len() {
            for o in 0..self.sets[i].replicas {
                self.next_uid += 1;
                let pod = SimPod {
                    uid: self.next_uid,
                    phase: Phase::Running,
                };
                self.sets[i].pods.insert(o, pod);
                self.join(i, o);
            }
        }
        let system = format!(
            "CREATE USER {} WITH (password = {})",
            ops::ident(SYSTEM_USER),
            ops::literal(SYSTEM_PW)
        );
        let grant = format!("GRANT ALL PRIVILEGES TO {}", ops::ident(SYSTEM_USER));
        for stmt in [
            format!("SET LICENSE {}", ops::literal(LICENSE)),
            system,
            grant,
        ] {
            if let Err(e) = self.sql_as_crate(&stmt) {
                self.fail(format!("bootstrap: {stmt}: {e}"));
            }
        }
        let data_nodes: u32 = self.wanted[1..].iter().map(|&n| n.unsigned_abs()).sum();
        for t in 0..self.rng.random_range(1..=3) {
            let shards = self.rng.random_range(1..=4);
            let replicas = match self.rng.random_range(0..4) {
                0 => "'0-1'".to_owned(),
                1 => "'0-all'".to_owned(),
                _ => self.rng.random_range(0..data_nodes).to_string(),
            };
            let stmt = format!(
                "CREATE TABLE doc.t{t} (id INT) CLUSTERED INTO {shards} SHARDS \
                 WITH (number_of_replicas = {replicas})"
            );
            if let Err(e) = self.sql_as_crate(&stmt) {
                self.fail(format!("bootstrap: {stmt}: {e}"));
            }
        }
        let green = self
            .cluster()
            .tick_until(50, |c| c.health().as_str() == "GREEN");
        if !green {
            self.fail("the first cluster never became GREEN");
        }
    }

    fn node_name(&self, set: usize, ordinal: i32) -> String {
        self.names.pod(self.sets[set].name, ordinal)
    }

    fn join(&mut self, set: usize, ordinal: i32) {
        let name = self.node_name(set, ordinal);
        let spec = if set == 0 {
            NodeSpec::master_only(name)
        } else {
            NodeSpec::data_only(name)
        };
        self.cluster().join(spec);
    }

    fn leave(&mut self, set: usize, ordinal: i32) {
        let name = self.node_name(set, ordinal);
        let _ = self.cluster().leave(&name);
    }

    // ---------------------------------------------------------------- Kubernetes and time

    /// One tick: the StatefulSet controller and the kubelet, then the model, then the clock.
    fn tick(&mut self) {
        for i in 0..self.sets.len() {
            let ordinals: Vec<i32> = self.sets[i].pods.keys().copied().collect();
            for o in ordinals {
                let Some(phase) = self.sets[i].pods.get(&o).map(|p| p.phase) else {
                    continue;
                };
                match phase {
                    Phase::Starting(0) => {
                        self.set_phase(i, o, Phase::Running);
                        self.join(i, o);
                    }
                    Phase::Starting(n) => self.set_phase(i, o, Phase::Starting(n - 1)),
                    Phase::Crashed(0) => self.set_phase(i, o, Phase::Starting(0)),
                    Phase::Crashed(n) => self.set_phase(i, o, Phase::Crashed(n - 1)),
                    Phase::Terminating(0) => {
                        self.sets[i].pods.remove(&o);
                    }
                    Phase::Terminating(n) => self.set_phase(i, o, Phase::Terminating(n - 1)),
                    Phase::Running => {}
                }
                // Parallel: Pods above the replicas are deleted at once.
                if o >= self.sets[i].replicas
                    && self.sets[i]
                        .pods
                        .get(&o)
                        .is_some_and(|p| !matches!(p.phase, Phase::Terminating(_)))
                {
                    let ticks = self.rng.random_range(0..=1);
                    self.delete_pod(i, o, ticks);
                }
            }
            for o in 0..self.sets[i].replicas {
                if !self.sets[i].pods.contains_key(&o) {
                    self.next_uid += 1;
                    let ticks = self.rng.random_range(0..=2);
                    let pod = SimPod {
                        uid: self.next_uid,
                        phase: Phase::Starting(ticks),
                    };
                    self.sets[i].pods.insert(o, pod);
                }
            }
        }
        self.cluster().tick();
        self.now = self.now.checked_add(ROUND).unwrap_or(self.now);
    }

    fn set_phase(&mut self, set: usize, ordinal: i32, phase: Phase) {
        if let Some(p) = self.sets[set].pods.get_mut(&ordinal) {
            p.phase = phase;
        }
    }

    /// A Pod is deleted: its node stops at once (SIGTERM), the Pod goes after `ticks`.
    fn delete_pod(&mut self, set: usize, ordinal: i32, ticks: u32) {
        self.set_phase(set, ordinal, Phase::Terminating(ticks));
        self.leave(set, ordinal);
    }

    // ---------------------------------------------------------------- the operator

    /// Ready Pods, masters first, as `ObserveCluster` lists them.
    fn endpoints(&self) -> Vec<Endpoint> {
        let mut out = Vec::new();
        for s in &self.sets {
            for (&o, p) in &s.pods {
                if p.phase == Phase::Running {
                    out.push(Endpoint {
                        pod: self.names.pod(s.name, o),
                        namespace: self.names.namespace.clone(),
                        ip: format!("10.0.0.{o}"),
                    });
                }
            }
        }
        out
    }

    fn system(&self) -> Login {
        Login {
            user: SYSTEM_USER.into(),
            password: Password::new(SYSTEM_PW),
        }
    }

    /// One reconcile pass: `ObserveCluster`, `ScaleNodes`, `RollingRestart`.
    fn pass(&mut self) {
        self.stats.passes += 1;
        let nodes = self.endpoints();
        let observed = block_on(ops::observe(&self.channels, &nodes, &self.system())).ok();
        self.memory.observed = observed;
        if self.scale_nodes(&nodes) {
            self.rolling_restart();
        }
    }

    /// The planner's input, as `scale_nodes::sets` builds it.
    fn set_replicas(&self) -> Vec<SetReplicas> {
        let joined = self
            .memory
            .observed
            .as_ref()
            .map(|o| o.nodes.clone())
            .unwrap_or_default();
        self.sets
            .iter()
            .zip(&self.wanted)
            .map(|(s, &wanted)| {
                let prefix = format!("{}-", self.names.statefulset(s.name));
                let ours = |name: &str| {
                    name.strip_prefix(&prefix)
                        .is_some_and(|o| o.parse::<i32>().is_ok())
                };
                SetReplicas {
                    name: s.name.to_owned(),
                    master: s.name == MASTER_SET,
                    wanted,
                    current: s.replicas,
                    pods: i32::try_from(s.pods.len()).unwrap_or(i32::MAX),
                    joined: i32::try_from(joined.iter().filter(|n| ours(n)).count())
                        .unwrap_or(i32::MAX),
                }
            })
            .collect()
    }

    /// `ScaleNodes`. Returns whether later steps run (false: the step failed).
    fn scale_nodes(&mut self, nodes: &[Endpoint]) -> bool {
        let sets = self.set_replicas();
        let running = self.status.operation == Some(Op::Scale);
        if !running && self.status.scale.is_none() && sets.iter().all(|s| s.wanted == s.current) {
            return true;
        }
        let Some(observed) = self.memory.observed.clone() else {
            return true;
        };
        if !running {
            if self.status.operation.is_some() {
                return true;
            }
            self.status.operation = Some(Op::Scale);
            self.status.scale.get_or_insert(ScaleProgress {
                step: 1,
                excluded: Vec::new(),
            });
        }
        let db = DbView {
            nodes: observed.nodes.clone(),
            shards_by_node: observed.shards_by_node.clone(),
            copies: observed.copies.clone(),
            max_table_replicas: observed.max_table_replicas,
            excluded: observed.excluded.clone(),
        };
        let names = self.names.clone();
        let action = scale::plan(&sets, &db, true, |set, i| names.pod(set, i));
        if let Some(p) = self.status.scale.as_mut() {
            p.step = p.step.max(action.step());
        }
        if !matches!(action, ScaleAction::Wait { .. }) {
            self.note(format!("scale: {action:?}"));
        }
        if !matches!(action, ScaleAction::Refuse { .. }) {
            self.status.refused = None;
        }
        let system = self.system();
        match action {
            ScaleAction::SetReplicas { set, replicas, .. } => {
                let Some(i) = self.sets.iter().position(|s| s.name == set) else {
                    self.fail(format!("the planner named an unknown set {set}"));
                };
                self.check_lowering(i, replicas);
                self.sets[i].replicas = replicas;
                self.stats.scale_actions += 1;
            }
            ScaleAction::Wait { .. } => {}
            ScaleAction::Refuse { reason } => {
                if self.status.refused.is_none() {
                    self.stats.refusals += 1;
                }
                self.status.refused = Some(reason);
            }
            ScaleAction::Exclude { nodes: leaving } => {
                if block_on(ops::exclude(&self.channels, nodes, &system, &leaving)).is_err() {
                    return false;
                }
                if let Some(p) = self.status.scale.as_mut() {
                    p.excluded = leaving;
                }
                self.stats.scale_actions += 1;
            }
            ScaleAction::Reset => {
                if block_on(ops::reset_after_scaling(&self.channels, nodes, &system)).is_err() {
                    return false;
                }
                self.status.scale = None;
                self.status.operation = None;
                self.stats.scale_actions += 1;
            }
            ScaleAction::Done => {
                self.status.scale = None;
                self.status.operation = None;
            }
        }
        true
    }

    /// `RollingRestart`.
    fn rolling_restart(&mut self) {
        let trigger = self.restart_trigger != self.status.restarted;
        if !trigger && self.status.restart.is_none() {
            return;
        }
        if self.status.operation != Some(Op::Restart) {
            if self.status.operation.is_some() {
                return;
            }
            self.status.operation = Some(Op::Restart);
        }
        let mut progress = self.status.restart.clone().unwrap_or_default();
        let order: Vec<String> = self
            .sets
            .iter()
            .flat_map(|s| (0..s.replicas).map(|o| self.names.pod(s.name, o)))
            .collect();
        let observed = self.memory.observed.as_ref();
        let joined = observed.map(|o| o.nodes.clone()).unwrap_or_default();
        let pods: Vec<PodView> = self
            .sets
            .iter()
            .flat_map(|s| {
                s.pods.iter().map(|(&o, p)| {
                    let name = self.names.pod(s.name, o);
                    PodView {
                        uid: p.uid.to_string(),
                        terminating: matches!(p.phase, Phase::Terminating(_)),
                        ready: p.phase == Phase::Running,
                        joined: joined.contains(&name),
                        name,
                    }
                })
            })
            .collect();
        let health = observed.map(|o| o.health.clone());
        let action = restart::plan(
            &order,
            &pods,
            &progress,
            self.gate,
            health.as_deref(),
            self.now,
        );
        restart::advance(&mut progress, &action, self.now);
        if !matches!(
            action,
            RestartAction::Wait { .. } | RestartAction::Reading { .. }
        ) {
            self.note(format!("restart: {action:?}"));
        }
        match action {
            RestartAction::Done => {
                self.status.restarted = self.restart_trigger;
                self.status.restart = None;
                self.status.operation = None;
                return;
            }
            RestartAction::Delete { pod, uid } => {
                self.check_restart(&pod);
                let found = self.sets.iter().enumerate().find_map(|(i, s)| {
                    s.pods.iter().find_map(|(&o, p)| {
                        (self.names.pod(s.name, o) == pod && p.uid.to_string() == uid)
                            .then_some((i, o))
                    })
                });
                // A UID precondition that fails (409) or a Pod already gone (404) is fine.
                if let Some((i, o)) = found {
                    let ticks = self.rng.random_range(0..=1);
                    self.delete_pod(i, o, ticks);
                    self.stats.restart_deletes += 1;
                }
            }
            RestartAction::Wait { .. }
            | RestartAction::Reading { .. }
            | RestartAction::Restarted { .. } => {}
        }
        self.status.restart = Some(progress);
    }

    // ---------------------------------------------------------------- invariants

    /// Whether the model keeps a master once `nodes` left (on a copy).
    fn keeps_master_without(&self, nodes: &[String]) -> bool {
        let mut copy = self.cluster().clone();
        for n in nodes {
            let _ = copy.leave(n);
        }
        copy.master().is_some()
    }

    /// Invariants 1 and 2, before a StatefulSet's replicas are lowered.
    fn check_lowering(&self, set: usize, replicas: i32) {
        let current = self.sets[set].replicas;
        if replicas >= current {
            return;
        }
        let departing: Vec<String> = (replicas..current)
            .rev()
            .map(|o| self.node_name(set, o))
            .collect();
        if set == 0 {
            if replicas < INITIAL_MASTERS {
                self.fail(format!(
                    "masters lowered to {replicas}, below the initial masters"
                ));
            }
            let had_master = self.cluster().master().is_some();
            if had_master && !self.keeps_master_without(&departing) {
                self.fail(format!(
                    "invariant 1: removing masters {departing:?} leaves no majority of the voting \
                     configuration {:?} up",
                    self.cluster().voting_configuration()
                ));
            }
            return;
        }
        let cluster = self.cluster();
        let mut holders: BTreeMap<(String, u32), Vec<String>> = BTreeMap::new();
        for s in cluster.shards() {
            let node = match (s.state, &s.node, &s.last_node) {
                (ShardState::Started | ShardState::Relocating, Some(n), _) => n,
                (ShardState::Unassigned, None, Some(n)) if s.primary => n,
                _ => continue,
            };
            holders
                .entry((s.table.to_string(), s.shard))
                .or_default()
                .push(node.clone());
        }
        for ((table, shard), nodes) in holders {
            if nodes.iter().all(|n| departing.contains(n)) {
                drop(cluster);
                self.fail(format!(
                    "invariant 2: shard {table}#{shard} has its data only on {nodes:?}, which \
                     lowering {} to {replicas} removes",
                    self.sets[set].name
                ));
            }
        }
    }

    /// Invariant 1, before the rolling restart deletes a Pod.
    fn check_restart(&self, pod: &str) {
        let master = self
            .cluster()
            .node(pod)
            .is_some_and(|n| n.spec.master_eligible);
        let had_master = self.cluster().master().is_some();
        if master && had_master && !self.keeps_master_without(&[pod.to_owned()]) {
            let down: Vec<String> = (0..self.sets[0].replicas)
                .map(|o| self.node_name(0, o))
                .filter(|n| self.cluster().node(n).is_none())
                .collect();
            self.fail(format!(
                "invariant 1: restarting master {pod} leaves no majority of the voting \
                 configuration {:?} up (masters down: {down:?})",
                self.cluster().voting_configuration()
            ));
        }
    }

    /// Invariants checked after every pass and event.
    fn check(&self) {
        let cluster = self.cluster();
        for (name, record) in &self.user_records {
            if cluster.user(name) != Some(record) {
                drop(cluster);
                self.fail(format!(
                    "invariant 3: user {name} is gone or no longer has its latest password"
                ));
            }
        }
        let lost = cluster.shards().iter().find_map(|s| {
            let last = s.last_node.as_ref()?;
            let removed = self.sets.iter().any(|set| {
                let prefix = format!("{}-", self.names.statefulset(set.name));
                last.strip_prefix(&prefix)
                    .and_then(|o| o.parse::<i32>().ok())
                    .is_some_and(|o| o >= set.replicas)
            });
            removed.then(|| format!("{}#{} on {last}", s.table, s.shard))
        });
        drop(cluster);
        if let Some(lost) = lost {
            self.fail(format!(
                "invariant 2: shard {lost}: its only data is on a node the operator removed"
            ));
        }
    }

    // ---------------------------------------------------------------- random events

    fn event(&mut self) {
        match self.rng.random_range(0..100) {
            0..30 => self.kill(),
            30..40 => {
                self.note("operator restart".into());
                self.memory = Memory::default();
                self.stats.operator_restarts += 1;
            }
            40..65 => {
                let set = self.rng.random_range(0..self.sets.len());
                let replicas = if set == 0 {
                    self.rng.random_range(3..=5)
                } else {
                    self.rng.random_range(1..=4)
                };
                self.note(format!("spec: {} {replicas}", self.sets[set].name));
                self.wanted[set] = replicas;
            }
            65..73 => {
                self.note("spec: restart".into());
                self.restart_trigger += 1;
            }
            73..88 => self.alter_table(),
            _ => self.user_edit(),
        }
    }

    fn kill(&mut self) {
        let live: Vec<(usize, i32)> = self
            .sets
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                s.pods
                    .iter()
                    .filter(|(_, p)| !matches!(p.phase, Phase::Terminating(_)))
                    .map(move |(&o, _)| (i, o))
            })
            .collect();
        if live.is_empty() {
            return;
        }
        let (i, o) = live[self.rng.random_range(0..live.len())];
        self.stats.kills += 1;
        if self.rng.random_bool(0.5) {
            self.note(format!("kill: container of {}", self.node_name(i, o)));
            let ticks = self.rng.random_range(0..=3);
            self.set_phase(i, o, Phase::Crashed(ticks));
            self.leave(i, o);
        } else {
            self.note(format!("kill: delete Pod {}", self.node_name(i, o)));
            self.delete_pod(i, o, 0);
        }
    }

    fn alter_table(&mut self) {
        let tables: Vec<String> = self
            .cluster()
            .tables()
            .map(|t| t.name.to_string())
            .collect();
        if tables.is_empty() {
            return;
        }
        let table = &tables[self.rng.random_range(0..tables.len())];
        let replicas = match self.rng.random_range(0..4) {
            0 => "'0-1'".to_owned(),
            1 => "'0-all'".to_owned(),
            // Copies that fit the data nodes kept (more would keep the cluster YELLOW, and a
            // rolling restart waits for GREEN: it would fail at its deadline, by design).
            _ => {
                let kept: i32 = self.sets[1..]
                    .iter()
                    .zip(&self.wanted[1..])
                    .map(|(s, &w)| w.min(s.replicas))
                    .sum();
                self.rng.random_range(0..kept.max(1)).to_string()
            }
        };
        let stmt = format!("ALTER TABLE {table} SET (number_of_replicas = {replicas})");
        let done = self.sql_as_crate(&stmt);
        self.note(format!("{stmt}: {done:?}"));
    }

    /// Creates a user or rotates one's password the way `ReconcileUsers` does, then checks
    /// the logins.
    fn user_edit(&mut self) {
        let nodes = self.endpoints();
        let create = self.users.len() < 4 && (self.users.is_empty() || self.rng.random_bool(0.3));
        if create {
            let name = format!("u{}", self.users.len());
            let pw = format!("{name}-pw-0");
            let done = block_on(ops::create_user(
                &self.channels,
                &nodes,
                &self.system(),
                &name,
                &Password::new(&pw),
            ));
            self.note(format!("create user {name}: {done:?}"));
            if done.is_ok() {
                self.users.insert(name.clone(), pw);
                self.stats.user_changes += 1;
                self.verify_login(&name);
            }
            return;
        }
        let names: Vec<String> = self.users.keys().cloned().collect();
        let name = names[self.rng.random_range(0..names.len())].clone();
        let old = self.users.get(&name).cloned().unwrap_or_default();
        let new = format!("{name}-pw-{}", self.step);
        let login = Login {
            user: name.clone(),
            password: Password::new(&old),
        };
        let done = block_on(ops::change_password(
            &self.channels,
            &nodes,
            &login,
            &Password::new(&new),
        ));
        self.note(format!("rotate user {name}: {done:?}"));
        if done.is_ok() {
            self.users.insert(name.clone(), new);
            self.stats.user_changes += 1;
            self.verify_login(&name);
            let old_works = block_on(ops::can_log_in(&self.channels, &nodes, &login));
            if matches!(old_works, Ok(true)) {
                self.fail(format!("user {name} still logs in with its old password"));
            }
        }
    }

    /// The user logs in with its latest password (over the SQL front, then on the model); its
    /// record is what invariant 3 compares with.
    fn verify_login(&mut self, name: &str) {
        let Some(pw) = self.users.get(name).cloned() else {
            return;
        };
        let login = Login {
            user: name.to_owned(),
            password: Password::new(&pw),
        };
        let nodes = self.endpoints();
        match block_on(ops::can_log_in(&self.channels, &nodes, &login)) {
            Ok(true) | Err(CrateError::Unavailable(_)) => {}
            other => self.fail(format!("invariant 3: user {name} cannot log in: {other:?}")),
        }
        // The login just verified (the channels keep the record they checked the password of).
        let key = (name.to_owned(), pw);
        let record = self
            .channels
            .verified
            .lock()
            .ok()
            .and_then(|v| v.get(&key).cloned());
        let record = match record {
            Some(r) => r,
            None => match self.cluster().authenticate(name, Some(&key.1)) {
                Ok(u) => u.clone(),
                Err(e) => self.fail(format!("invariant 3: user {name} cannot log in: {e}")),
            },
        };
        self.user_records.insert(name.to_owned(), record);
    }

    // ---------------------------------------------------------------- liveness

    /// Everything the spec asks for is done, or a shrink is refused and the guard agrees.
    fn converged(&self) -> Result<(), String> {
        if let Some(reason) = &self.status.refused {
            return self.refusal_justified(reason);
        }
        if self.status.operation.is_some()
            || self.status.scale.is_some()
            || self.status.restart.is_some()
        {
            return Err(format!("operation {:?} still runs", self.status.operation));
        }
        if self.restart_trigger != self.status.restarted {
            return Err("a requested restart did not run".into());
        }
        let cluster = self.cluster();
        for (s, &wanted) in self.sets.iter().zip(&self.wanted) {
            if s.replicas != wanted || s.pods.len() != usize::try_from(wanted).unwrap_or(0) {
                return Err(format!(
                    "set {} has {} replicas, {} Pods, wants {wanted}",
                    s.name,
                    s.replicas,
                    s.pods.len()
                ));
            }
            for o in 0..wanted {
                if cluster.node(&self.names.pod(s.name, o)).is_none() {
                    return Err(format!(
                        "node {} is not in the cluster",
                        self.names.pod(s.name, o)
                    ));
                }
            }
        }
        if cluster.settings().get(ops::EXCLUDE_NAME).is_some() {
            return Err("the allocation exclusion was not reset".into());
        }
        Ok(())
    }

    /// A refusal is right when the largest table replica count needs more data nodes than the
    /// shrink leaves.
    fn refusal_justified(&self, reason: &str) -> Result<(), String> {
        let max = self
            .cluster()
            .tables()
            .map(|t| ops::replicas_upper_bound(&t.number_of_replicas.to_string()))
            .max()
            .unwrap_or(0);
        let remaining: i32 = self.sets[1..]
            .iter()
            .zip(&self.wanted[1..])
            .map(|(s, &w)| w.min(s.replicas))
            .sum();
        if i64::from(max) + 1 > i64::from(remaining) {
            Ok(())
        } else {
            Err(format!(
                "refused ({reason}) although {remaining} data nodes hold {} copies",
                max + 1
            ))
        }
    }
}

/// Runs one seed; panics (with the seed and step) when an invariant breaks.
pub fn run_seed(seed: u64) -> Stats {
    let mut w = World::new(seed);
    w.check();
    for _ in 0..ROUNDS {
        w.step += 1;
        if w.rng.random_bool(0.3) {
            w.event();
            w.check();
        }
        w.pass();
        w.check();
        w.tick();
        w.check();
    }
    w.note("events stop".into());
    let mut settled = Err(String::new());
    for _ in 0..SETTLE_ROUNDS {
        w.step += 1;
        w.pass();
        w.check();
        settled = w.converged();
        if settled.is_ok() {
            break;
        }
        w.tick();
        w.check();
    }
    if let Err(why) = settled {
        w.fail(format!(
            "invariant 4: not converged {SETTLE_ROUNDS} rounds after events stopped: {why}"
        ));
    }
    let cluster = w.cluster().clone();
    let mut digest = format!("{:?}|{:?}|{:?}", cluster.shards(), cluster.master(), w.log);
    let _ = write!(digest, "|{}", w.step);
    w.stats.digest = digest;
    w.stats.clone()
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Runs a seed; on a panic prints the line that replays it.
fn run_reporting(seed: u64) -> Stats {
    match catch_unwind(AssertUnwindSafe(|| run_seed(seed))) {
        Ok(stats) => stats,
        Err(panic) => {
            eprintln!("CRATEDB_SIM_SEED={seed}");
            resume_unwind(panic)
        }
    }
}

/// Runs half `h` (0 or 1) of the seeds, so that the two halves run in parallel under nextest;
/// `CRATEDB_SIM_SEED` runs just that seed (in the first half).
fn run_half(h: u64) {
    if let Some(seed) = env_u64("CRATEDB_SIM_SEED") {
        if h == 0 {
            let stats = run_reporting(seed);
            eprintln!(
                "seed {seed}: {:?}",
                Stats {
                    digest: String::new(),
                    ..stats
                }
            );
        }
        return;
    }
    let first = env_u64("CRATEDB_SIM_FIRST").unwrap_or(0);
    let seeds = env_u64("CRATEDB_SIM_SEEDS").unwrap_or(1000);
    let (from, to) = if h == 0 {
        (first, first + seeds / 2)
    } else {
        (first + seeds / 2, first + seeds)
    };
    let mut total = Stats::default();
    for seed in from..to {
        let s = run_reporting(seed);
        total.passes += s.passes;
        total.scale_actions += s.scale_actions;
        total.refusals += s.refusals;
        total.restart_deletes += s.restart_deletes;
        total.kills += s.kills;
        total.operator_restarts += s.operator_restarts;
        total.user_changes += s.user_changes;
    }
    eprintln!("seeds {from}..{to}: {total:?}");
    if to - from >= 50 {
        assert!(total.scale_actions > 0 && total.restart_deletes > 0 && total.user_changes > 0);
    }
}

#[test]
fn seeded_runs_keep_the_invariants_first_half() {
    run_half(0);
}

#[test]
fn seeded_runs_keep_the_invariants_second_half() {
    run_half(1);
}

#[test]
fn a_seed_replays_exactly() {
    assert_eq!(run_seed(7), run_seed(7));
    assert_ne!(run_seed(7).digest, run_seed(8).digest);
}
