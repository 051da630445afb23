//! The invariants, checked before the operator's actions and after every pass and event, and
//! the liveness check once events stop.

use std::collections::BTreeMap;

use steward_cratedb_standin::model::ShardState;

use super::world::World;
use crate::cratedb::admin::ops;
use crate::cratedb::names::INITIAL_MASTERS;

impl World {
    /// Whether the model keeps a master once `nodes` left (on a copy).
    fn keeps_master_without(&self, nodes: &[String]) -> bool {
        let mut copy = self.cluster().clone();
        for n in nodes {
            let _ = copy.leave(n);
        }
        copy.master().is_some()
    }

    /// Invariants 1 and 2, before a StatefulSet's replicas are lowered.
    pub(super) fn check_lowering(&self, set: usize, replicas: i32) {
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
    pub(super) fn check_restart(&self, pod: &str) {
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
    pub(super) fn check(&self) {
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

    // ---------------------------------------------------------------- liveness

    /// Everything the spec asks for is done, or a shrink is refused and the guard agrees.
    pub(super) fn converged(&self) -> Result<(), String> {
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
