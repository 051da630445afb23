//! Pure membership decisions over the model: which nodes leave and join a node's copy of the
//! cluster state, given what the networking layer saw. No clock, no I/O: the caller says which
//! nodes are gone and which restarted.

use std::collections::BTreeSet;

use crate::model::{Cluster, NodeSpec};

/// Brings `state`'s membership in line with what this node sees: nodes for which `gone` holds
/// leave (never `me`), `me` and every `live` node that is missing, changed its spec or
/// `restarted` join (a node of the same name is replaced, so its copies recover as CrateDB's
/// do). Nodes leave before any joins, in name order, so every node that sees the same thing
/// computes the same state. Returns whether anything changed.
pub fn reconcile(
    state: &mut Cluster,
    me: &NodeSpec,
    live: &[NodeSpec],
    gone: impl Fn(&str) -> bool,
    restarted: &BTreeSet<String>,
) -> bool {
    let mut changed = false;
    let leaving: Vec<String> = state
        .nodes()
        .map(|n| n.spec.name.clone())
        .filter(|n| *n != me.name && gone(n))
        .collect();
    for name in leaving {
        changed |= state.leave(&name).is_ok();
    }
    let mut joining: Vec<&NodeSpec> = std::iter::once(me).chain(live).collect();
    joining.sort_by(|a, b| a.name.cmp(&b.name));
    joining.dedup_by(|a, b| a.name == b.name);
    for spec in joining {
        let current = state.node(&spec.name).map(|n| &n.spec);
        if current != Some(spec) || restarted.contains(&spec.name) {
            state.join(spec.clone());
            changed = true;
        }
    }
    changed
}

/// What a node without a live elected master sees: its copy of the state with every node it
/// cannot reach removed and every node it can reach joined. The model then elects (or not).
pub fn election_view(published: &Cluster, me: &NodeSpec, live: &[NodeSpec]) -> Cluster {
    let mut view = published.clone();
    let names: BTreeSet<&str> = live.iter().map(|s| s.name.as_str()).collect();
    reconcile(
        &mut view,
        me,
        live,
        |n| !names.contains(n),
        &BTreeSet::new(),
    );
    view
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ClusterConfig;

    fn masters() -> Vec<NodeSpec> {
        ["m0", "m1", "m2"]
            .into_iter()
            .map(NodeSpec::master_only)
            .collect()
    }

    fn three_masters() -> Cluster {
        let mut c = Cluster::new(ClusterConfig {
            initial_master_nodes: vec!["m0".into(), "m1".into(), "m2".into()],
            ..ClusterConfig::default()
        });
        let m = masters();
        reconcile(&mut c, &m[0], &m[1..], |_| false, &BTreeSet::new());
        c
    }

    #[test]
    fn one_of_three_initial_masters_elects_nobody_two_do() {
        let fresh = Cluster::new(ClusterConfig {
            initial_master_nodes: vec!["m0".into(), "m1".into(), "m2".into()],
            ..ClusterConfig::default()
        });
        let m = masters();
        assert_eq!(election_view(&fresh, &m[1], &[]).master(), None);
        let view = election_view(&fresh, &m[1], &m[2..]);
        assert_eq!(view.master(), Some("m1"));
        // Every node that sees the same thing computes the same master.
        assert_eq!(election_view(&fresh, &m[2], &m[1..2]).master(), Some("m1"));
    }

    #[test]
    fn losing_the_master_elects_the_next_voter_and_two_losses_block() {
        let c = three_masters();
        assert_eq!(c.master(), Some("m0"));
        let m = masters();
        assert_eq!(election_view(&c, &m[1], &m[2..]).master(), Some("m1"));
        let alone = election_view(&c, &m[2], &[]);
        assert_eq!(alone.master(), None);
        assert!(alone.ensure_writable().is_err());
        // One comes back: a majority of the voting configuration again.
        assert_eq!(election_view(&alone, &m[2], &m[1..2]).master(), Some("m1"));
    }

    #[test]
    fn a_restart_rejoins_and_unchanged_nodes_stay() {
        let mut c = three_masters();
        let m = masters();
        assert!(!reconcile(
            &mut c,
            &m[0],
            &m[1..],
            |_| false,
            &BTreeSet::new()
        ));
        let restarted: BTreeSet<String> = ["m2".to_owned()].into();
        assert!(reconcile(&mut c, &m[0], &m[1..], |_| false, &restarted));
        assert_eq!(c.nodes().count(), 3);
        assert!(reconcile(
            &mut c,
            &m[0],
            &m[1..2],
            |n| n == "m2",
            &BTreeSet::new()
        ));
        assert_eq!(c.nodes().count(), 2);
    }
}
