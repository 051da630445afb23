//! (pure) The scaling algorithm of seed 000, one action per pass:
//!
//! 1. the masters, up or down;
//! 2. every data set that grows;
//! 3. every data set that shrinks: refuse when a table wants more copies than the remaining
//!    data nodes can hold, else exclude the departing nodes from allocation
//!    (`cluster.routing.allocation.exclude._name`), wait until they hold no shard, then lower
//!    the StatefulSets' replicas and wait for the Pods to go;
//! 4. reset the allocation settings and acknowledge node check 1
//!    (`gateway.expected_data_nodes`).
//!
//! The planner reads what it needs — wanted and current replicas, the nodes in the cluster, the
//! shards on departing nodes, the largest replica count of any table — and names the next
//! action; the `ScaleNodes` step carries it out and records the step number in status, so an
//! operator that restarts continues from there.

use std::collections::BTreeMap;

/// A node set's replicas: wanted (spec) and current (its StatefulSet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetReplicas {
    /// `master` or a data set's name.
    pub name: String,
    /// Whether these are the masters.
    pub master: bool,
    /// From the spec.
    pub wanted: i32,
    /// The StatefulSet's `spec.replicas`.
    pub current: i32,
    /// Pods of the set that exist (whatever their state).
    pub pods: i32,
    /// Nodes of the set in the CrateDB cluster.
    pub joined: i32,
}

/// One shard copy on a node, as `sys.shards` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyView {
    /// `schema.table`.
    pub table: String,
    /// Shard id.
    pub shard: u32,
    /// The node holding it.
    pub node: String,
    /// STARTED or RELOCATING: it holds the data.
    pub active: bool,
    /// Its table's `number_of_replicas` is a range up to `all`: it has a copy on every data
    /// node, so an allocation exclusion cannot move it (no other node may take a second copy).
    pub expanding: bool,
}

/// What the database says, for the planner.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DbView {
    /// Node names in the cluster.
    pub nodes: Vec<String>,
    /// Shard copies by node name.
    pub shards_by_node: BTreeMap<String, u32>,
    /// Every assigned shard copy (the drain lets a departing node keep copies of `…-all`
    /// tables that have an active copy on a node that stays).
    pub copies: Vec<CopyView>,
    /// The most replicas any table wants (the upper bound of a range; `all` counts as 0, it
    /// follows the nodes).
    pub max_table_replicas: u32,
    /// The exclusion in effect (`cluster.routing.allocation.exclude._name`).
    pub excluded: Vec<String>,
}

/// The next thing to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScaleAction {
    /// Every set has its wanted replicas and nothing is left to reset: scaling is done.
    Done,
    /// Set a StatefulSet's replicas (steps 1, 2 and the end of 3).
    SetReplicas {
        /// Seed step.
        step: u32,
        /// The set.
        set: String,
        /// New replicas.
        replicas: i32,
    },
    /// Wait until a set's nodes have joined or gone.
    Wait {
        /// Seed step.
        step: u32,
        /// Why, for status.
        reason: String,
    },
    /// Refuse step 3: it would leave tables under-replicated. Nothing is changed.
    Refuse {
        /// Why, for the condition.
        reason: String,
    },
    /// Step 3: exclude these nodes from allocation so their shards move away.
    Exclude {
        /// Node names.
        nodes: Vec<String>,
    },
    /// Step 4: reset the allocation exclusion and acknowledge node check 1.
    Reset,
}

impl ScaleAction {
    /// The seed step of this action (0 when done).
    pub fn step(&self) -> u32 {
        match self {
            Self::Done => 0,
            Self::SetReplicas { step, .. } | Self::Wait { step, .. } => *step,
            Self::Refuse { .. } | Self::Exclude { .. } => 3,
            Self::Reset => 4,
        }
    }
}

/// The node names a set loses when it goes from `current` to `wanted` replicas: the highest
/// ordinals, as a StatefulSet removes them. `pod` names a set's Pod by ordinal.
pub fn departing(set: &SetReplicas, pod: impl Fn(&str, i32) -> String) -> Vec<String> {
    (set.wanted.max(0)..set.current.max(0))
        .map(|i| pod(&set.name, i))
        .collect()
}

/// The next action. `pod` names a set's Pod (and CrateDB node) by ordinal; `scaled` is true
/// once this operation has changed a StatefulSet (step 4 then resets and acknowledges).
pub fn plan(
    sets: &[SetReplicas],
    db: &DbView,
    scaled: bool,
    pod: impl Fn(&str, i32) -> String,
) -> ScaleAction {
    // Step 1: masters.
    if let Some(m) = sets.iter().find(|s| s.master) {
        if m.current != m.wanted {
            return ScaleAction::SetReplicas {
                step: 1,
                set: m.name.clone(),
                replicas: m.wanted,
            };
        }
        if m.pods != m.wanted || m.joined != m.wanted {
            return ScaleAction::Wait {
                step: 1,
                reason: format!(
                    "waiting for {} master nodes to be in the cluster ({} are)",
                    m.wanted, m.joined
                ),
            };
        }
    }
    let data: Vec<&SetReplicas> = sets.iter().filter(|s| !s.master).collect();
    // Step 2: data sets that grow, in spec order.
    for s in &data {
        if s.wanted > s.current {
            return ScaleAction::SetReplicas {
                step: 2,
                set: s.name.clone(),
                replicas: s.wanted,
            };
        }
    }
    for s in &data {
        if s.wanted >= s.current && (s.pods < s.wanted || s.joined < s.wanted) {
            return ScaleAction::Wait {
                step: 2,
                reason: format!(
                    "waiting for {} nodes of data set {} to be in the cluster ({} are)",
                    s.wanted, s.name, s.joined
                ),
            };
        }
    }
    // Step 3: data sets that shrink.
    let shrinking: Vec<&&SetReplicas> = data.iter().filter(|s| s.wanted < s.current).collect();
    if !shrinking.is_empty() {
        let leaving: Vec<String> = shrinking.iter().flat_map(|s| departing(s, &pod)).collect();
        let remaining: i32 = data.iter().map(|s| s.wanted.min(s.current)).sum();
        let copies = i64::from(db.max_table_replicas) + 1;
        if copies > i64::from(remaining) {
            return ScaleAction::Refuse {
                reason: format!(
                    "a table has {} replicas: its {copies} copies need {copies} data nodes, and \
                     only {remaining} would remain after removing {}; lower the table's \
                     number_of_replicas or keep more data nodes",
                    db.max_table_replicas,
                    leaving.join(", ")
                ),
            };
        }
        if !leaving.iter().all(|n| db.excluded.contains(n)) {
            return ScaleAction::Exclude { nodes: leaving };
        }
        // A copy of a `…-all` table stays on an excluded node (every other data node already
        // holds one); it is no shard's last copy once a node that stays has an active one.
        let safe_elsewhere = |c: &CopyView| {
            c.expanding
                && db.copies.iter().any(|o| {
                    o.table == c.table
                        && o.shard == c.shard
                        && o.active
                        && !leaving.contains(&o.node)
                })
        };
        // A departing node that is down shows no shard in `sys.shards`, yet a primary without
        // replica waits for its data there: remove it only once it is back and drained.
        let down: Vec<&String> = leaving.iter().filter(|n| !db.nodes.contains(n)).collect();
        if !down.is_empty() {
            return ScaleAction::Wait {
                step: 3,
                reason: format!(
                    "waiting for {} to be back in the cluster: a node that is down may hold the \
                     only copy of a shard",
                    down.iter()
                        .map(|n| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
        }
        let holding: Vec<String> = leaving
            .iter()
            .filter_map(|n| {
                let expanding = db
                    .copies
                    .iter()
                    .filter(|c| &c.node == n && safe_elsewhere(c))
                    .count();
                let shards = db
                    .shards_by_node
                    .get(n)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(u32::try_from(expanding).unwrap_or(u32::MAX));
                (shards > 0).then(|| format!("{n} ({shards})"))
            })
            .collect();
        if !holding.is_empty() {
            return ScaleAction::Wait {
                step: 3,
                reason: format!("moving shards off {}", holding.join(", ")),
            };
        }
        let s = shrinking[0];
        return ScaleAction::SetReplicas {
            step: 3,
            set: s.name.clone(),
            replicas: s.wanted,
        };
    }
    for s in &data {
        if s.pods > s.wanted {
            return ScaleAction::Wait {
                step: 3,
                reason: format!(
                    "waiting for the removed nodes of data set {} to stop ({} Pods, {} wanted)",
                    s.name, s.pods, s.wanted
                ),
            };
        }
    }
    // Step 4.
    if scaled || !db.excluded.is_empty() {
        return ScaleAction::Reset;
    }
    ScaleAction::Done
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str, wanted: i32, current: i32) -> SetReplicas {
        SetReplicas {
            name: name.into(),
            master: name == "master",
            wanted,
            current,
            pods: current,
            joined: current,
        }
    }

    fn pod(set: &str, i: i32) -> String {
        format!("{set}-{i}")
    }

    #[test]
    fn the_seed_order_masters_then_growth_then_shrink_then_reset() {
        // One edit: masters 3→5, hot 2→3, cold 2→1.
        let mut sets = vec![set("master", 5, 3), set("hot", 3, 2), set("cold", 1, 2)];
        let mut db = DbView {
            nodes: vec!["cold-1".into()],
            max_table_replicas: 1,
            shards_by_node: BTreeMap::from([("cold-1".into(), 4)]),
            ..Default::default()
        };
        let step = |sets: &[SetReplicas], db: &DbView| plan(sets, db, true, pod);
        assert_eq!(
            step(&sets, &db),
            ScaleAction::SetReplicas {
                step: 1,
                set: "master".into(),
                replicas: 5
            }
        );
        sets[0].current = 5;
        assert!(matches!(
            step(&sets, &db),
            ScaleAction::Wait { step: 1, .. }
        ));
        sets[0].pods = 5;
        sets[0].joined = 5;
        assert_eq!(
            step(&sets, &db),
            ScaleAction::SetReplicas {
                step: 2,
                set: "hot".into(),
                replicas: 3
            }
        );
        sets[1].current = 3;
        assert!(matches!(
            step(&sets, &db),
            ScaleAction::Wait { step: 2, .. }
        ));
        sets[1].pods = 3;
        sets[1].joined = 3;
        assert_eq!(
            step(&sets, &db),
            ScaleAction::Exclude {
                nodes: vec!["cold-1".into()]
            }
        );
        db.excluded = vec!["cold-1".into()];
        assert!(matches!(
            step(&sets, &db),
            ScaleAction::Wait { step: 3, .. }
        ));
        db.shards_by_node.insert("cold-1".into(), 0);
        assert_eq!(
            step(&sets, &db),
            ScaleAction::SetReplicas {
                step: 3,
                set: "cold".into(),
                replicas: 1
            }
        );
        sets[2].current = 1;
        assert!(matches!(
            step(&sets, &db),
            ScaleAction::Wait { step: 3, .. }
        ));
        sets[2].pods = 1;
        sets[2].joined = 1;
        assert_eq!(step(&sets, &db), ScaleAction::Reset);
        db.excluded.clear();
        assert_eq!(plan(&sets, &db, false, pod), ScaleAction::Done);
    }

    #[test]
    fn a_shrink_that_would_under_replicate_a_table_is_refused() {
        // 2 + 1 data nodes → 1 + 1 would remain; a table with 2 replicas needs 3.
        let sets = vec![set("master", 3, 3), set("hot", 1, 2), set("cold", 1, 1)];
        let db = DbView {
            max_table_replicas: 2,
            ..Default::default()
        };
        match plan(&sets, &db, false, pod) {
            ScaleAction::Refuse { reason } => {
                assert!(reason.contains("2 replicas"), "{reason}");
                assert!(reason.contains("hot-1"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // With 1 replica (2 copies) two remaining nodes suffice.
        let db = DbView {
            max_table_replicas: 1,
            ..Default::default()
        };
        assert_eq!(
            plan(&sets, &db, false, pod),
            ScaleAction::Exclude {
                nodes: vec!["hot-1".into()]
            }
        );
    }

    /// Found by the simulation (seed 7): a `0-all` table has a copy on every data node, so the
    /// exclusion never moves the departing node's copy and the drain waited forever.
    #[test]
    fn copies_of_all_expanding_tables_do_not_hold_up_the_drain_once_safe_elsewhere() {
        let sets = vec![set("master", 3, 3), set("hot", 1, 2)];
        let copy = |node: &str, active: bool| CopyView {
            table: "doc.t".into(),
            shard: 0,
            node: node.into(),
            active,
            expanding: true,
        };
        let mut db = DbView {
            nodes: vec!["hot-0".into(), "hot-1".into()],
            shards_by_node: BTreeMap::from([("hot-0".into(), 1), ("hot-1".into(), 1)]),
            copies: vec![copy("hot-0", true), copy("hot-1", true)],
            excluded: vec!["hot-1".into()],
            ..Default::default()
        };
        assert_eq!(
            plan(&sets, &db, true, pod),
            ScaleAction::SetReplicas {
                step: 3,
                set: "hot".into(),
                replicas: 1
            }
        );
        // The copy that stays is still recovering: hot-1 holds the only data.
        db.copies[0].active = false;
        assert!(matches!(
            plan(&sets, &db, true, pod),
            ScaleAction::Wait { step: 3, .. }
        ));
        // A table with a fixed replica count must move off.
        db.copies[0].active = true;
        db.copies[1].expanding = false;
        assert!(matches!(
            plan(&sets, &db, true, pod),
            ScaleAction::Wait { step: 3, .. }
        ));
    }

    /// Found by the simulation (seed 84): `cold-2` crashed after it was excluded; `sys.shards`
    /// showed nothing on it, yet the only copy of a shard without replicas waited for it there
    /// (an unassigned primary), and lowering the replicas removed it for good.
    #[test]
    fn a_departing_node_that_is_down_is_not_removed_until_it_is_back() {
        let sets = vec![set("master", 3, 3), set("cold", 1, 3)];
        let mut db = DbView {
            nodes: vec!["cold-0".into(), "cold-1".into()],
            excluded: vec!["cold-1".into(), "cold-2".into()],
            ..Default::default()
        };
        match plan(&sets, &db, true, pod) {
            ScaleAction::Wait { step: 3, reason } => assert!(reason.contains("cold-2"), "{reason}"),
            other => panic!("{other:?}"),
        }
        db.nodes.push("cold-2".into());
        assert_eq!(
            plan(&sets, &db, true, pod),
            ScaleAction::SetReplicas {
                step: 3,
                set: "cold".into(),
                replicas: 1
            }
        );
    }

    #[test]
    fn masters_scale_down_first_and_never_touch_data() {
        let sets = vec![set("master", 3, 5), set("hot", 2, 2)];
        assert_eq!(
            plan(&sets, &DbView::default(), false, pod),
            ScaleAction::SetReplicas {
                step: 1,
                set: "master".into(),
                replicas: 3
            }
        );
        assert_eq!(departing(&sets[0], pod), ["master-3", "master-4"]);
    }

    #[test]
    fn nothing_to_do_is_done() {
        let sets = vec![set("master", 3, 3), set("hot", 2, 2)];
        assert_eq!(
            plan(&sets, &DbView::default(), false, pod),
            ScaleAction::Done
        );
    }
}
