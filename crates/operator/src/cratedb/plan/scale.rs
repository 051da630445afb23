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

/// What the database says, for the planner.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DbView {
    /// Shard copies by node name.
    pub shards_by_node: BTreeMap<String, u32>,
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
        let holding: Vec<String> = leaving
            .iter()
            .filter_map(|n| {
                let shards = db.shards_by_node.get(n).copied().unwrap_or(0);
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
