//! The model world: the stand-in's `Cluster`, the StatefulSets and their Pods, the operator's
//! state, and time (the StatefulSet controller and the kubelet over ticks).

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

use jiff::Timestamp;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use steward_cratedb_standin::model::{Cluster, ClusterConfig, NodeSpec, User};
use steward_cratedb_standin::sql;

use super::operator::{Memory, Status};
use super::{LICENSE, ROUND, SETS, SYSTEM_PW, Stats};
use crate::cratedb::admin::model::ModelChannels;
use crate::cratedb::admin::ops;
use crate::cratedb::names::{ClusterNames, INITIAL_MASTERS, MASTER_SET, SUPERUSER, SYSTEM_USER};
use crate::cratedb::plan::restart::Gate;

/// A Pod's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
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
pub(super) struct SimPod {
    pub(super) uid: u64,
    pub(super) phase: Phase,
}

/// A StatefulSet and its Pods by ordinal.
#[derive(Clone, Debug)]
pub(super) struct Set {
    pub(super) name: &'static str,
    pub(super) replicas: i32,
    pub(super) pods: BTreeMap<i32, SimPod>,
}

pub(super) struct World {
    seed: u64,
    pub(super) step: u64,
    pub(super) rng: StdRng,
    pub(super) channels: ModelChannels,
    pub(super) names: ClusterNames,
    pub(super) sets: Vec<Set>,
    /// Wanted replicas per set (the spec), in `SETS` order.
    pub(super) wanted: Vec<i32>,
    /// The spec's restart trigger (`steward.dev/restarted-at`).
    pub(super) restart_trigger: u32,
    pub(super) status: Status,
    pub(super) memory: Memory,
    pub(super) gate: Gate,
    pub(super) now: Timestamp,
    next_uid: u64,
    /// Users and their latest password.
    pub(super) users: BTreeMap<String, String>,
    /// Each user as last seen logging in with its latest password.
    pub(super) user_records: BTreeMap<String, User>,
    pub(super) log: VecDeque<String>,
    /// Counts of what happened, for the summary and the replay check.
    pub(super) stats: Stats,
}

impl World {
    pub(super) fn new(seed: u64) -> Self {
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
            channels: ModelChannels::new(cluster),
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

    pub(super) fn cluster(&self) -> std::sync::MutexGuard<'_, Cluster> {
        match self.channels.cluster.lock() {
            Ok(c) => c,
            Err(e) => e.into_inner(),
        }
    }

    pub(super) fn fail(&self, what: impl std::fmt::Display) -> ! {
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

    pub(super) fn note(&mut self, what: String) {
        if self.log.len() >= 60 {
            self.log.pop_front();
        }
        self.log.push_back(format!("#{} {what}", self.step));
    }

    pub(super) fn sql_as_crate(&self, stmt: &str) -> Result<(), String> {
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

    pub(super) fn node_name(&self, set: usize, ordinal: i32) -> String {
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

    pub(super) fn leave(&mut self, set: usize, ordinal: i32) {
        let name = self.node_name(set, ordinal);
        let _ = self.cluster().leave(&name);
    }

    /// One tick: the StatefulSet controller and the kubelet, then the model, then the clock.
    pub(super) fn tick(&mut self) {
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

    pub(super) fn set_phase(&mut self, set: usize, ordinal: i32, phase: Phase) {
        if let Some(p) = self.sets[set].pods.get_mut(&ordinal) {
            p.phase = phase;
        }
    }

    /// A Pod is deleted: its node stops at once (SIGTERM), the Pod goes after `ticks`.
    pub(super) fn delete_pod(&mut self, set: usize, ordinal: i32, ticks: u32) {
        self.set_phase(set, ordinal, Phase::Terminating(ticks));
        self.leave(set, ordinal);
    }
}
