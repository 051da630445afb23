//! A simulated operator pass: what `ObserveCluster`, `ScaleNodes` and `RollingRestart` do,
//! with the operator's status and memory.

use futures::executor::block_on;
use rand::Rng;
use steward_api::cratedb::{RestartProgress, ScaleProgress};

use super::SYSTEM_PW;
use super::world::{Phase, World};
use crate::cratedb::admin::ops::{self, Observed};
use crate::cratedb::admin::{Endpoint, Login};
use crate::cratedb::names::{MASTER_SET, SYSTEM_USER};
use crate::cratedb::plan::restart::{self, PodView, RestartAction};
use crate::cratedb::plan::scale::{self, DbView, ScaleAction, SetReplicas};
use crate::resources::secrets::Password;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Op {
    Scale,
    Restart,
}

/// What the operator keeps in the `CrateCluster`'s status: all an operator restart keeps.
#[derive(Clone, Debug, Default)]
pub(super) struct Status {
    pub(super) operation: Option<Op>,
    pub(super) scale: Option<ScaleProgress>,
    pub(super) restart: Option<RestartProgress>,
    /// The restart trigger last rolled out (`status.restartedAt`).
    pub(super) restarted: u32,
    /// The last refusal (the `ScaleRefused` condition).
    pub(super) refused: Option<String>,
}

/// What the operator only holds in memory; an operator restart drops it.
#[derive(Clone, Debug, Default)]
pub(super) struct Memory {
    observed: Option<Observed>,
}

impl World {
    /// Ready Pods, masters first, as `ObserveCluster` lists them.
    pub(super) fn endpoints(&self) -> Vec<Endpoint> {
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

    pub(super) fn system(&self) -> Login {
        Login {
            user: SYSTEM_USER.into(),
            password: Password::new(SYSTEM_PW),
        }
    }

    /// One reconcile pass: `ObserveCluster`, `ScaleNodes`, `RollingRestart`.
    pub(super) fn pass(&mut self) {
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
}
