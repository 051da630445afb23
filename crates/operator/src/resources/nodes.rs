//! Nodes as the engines need them: whether the Node a Pod is bound to is usable, cordoned (a
//! drain is coming) or lost (its kubelet stopped posting status), read from one cluster-wide
//! cache of Nodes. Only what decides those states enters the cache.

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus};
use kube::runtime::reflector::{ObjectRef, Store};

/// The annotation on a claim naming the Node its volume lives on (set by the scheduler at the
/// first binding of a `WaitForFirstConsumer` claim, as with local volumes).
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// The state of the Node a Pod is bound to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum NodeState {
    /// Not bound, Node unknown to the cache, or schedulable and Ready.
    #[default]
    Usable,
    /// Cordoned (`spec.unschedulable`): a drain is coming, or under way.
    Cordoned,
    /// Its `Ready` condition is not `True` (the node lifecycle controller sets `Unknown` once
    /// the kubelet stopped posting for the grace period): nothing confirms what runs there.
    Lost,
}

/// What a Node says about itself. Lost wins over cordoned.
pub fn state(node: &Node) -> NodeState {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status == "True");
    if ready == Some(false) {
        NodeState::Lost
    } else if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        NodeState::Cordoned
    } else {
        NodeState::Usable
    }
}

/// The Node `pod` is bound to, and its state (usable when the cache does not know it).
pub fn of_pod(
    nodes: &Store<Node>,
    pod: &impl crate::resources::pods::PodParts,
) -> (Option<String>, NodeState) {
    let Some(name) = pod.node_name().map(str::to_owned) else {
        return (None, NodeState::Usable);
    };
    let state = nodes
        .get(&ObjectRef::new(&name))
        .map_or(NodeState::Usable, |n| state(&n));
    (Some(name), state)
}

/// Keeps only what [`state`] reads (the cache holds every Node of the cluster; images, volumes,
/// addresses and most conditions are the bulk of a Node object).
pub fn slim(node: &mut Node) {
    node.metadata.managed_fields = None;
    node.metadata.annotations = None;
    node.metadata.labels = None;
    let unschedulable = node.spec.as_ref().and_then(|s| s.unschedulable);
    node.spec = Some(NodeSpec {
        unschedulable,
        ..NodeSpec::default()
    });
    let ready: Option<Vec<NodeCondition>> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|c| c.iter().filter(|c| c.type_ == "Ready").cloned().collect());
    node.status = Some(NodeStatus {
        conditions: ready.map(|c| {
            c.into_iter()
                .map(|c| NodeCondition {
                    // Heartbeat times change every few seconds; the state does not.
                    last_heartbeat_time: None,
                    ..c
                })
                .collect()
        }),
        ..NodeStatus::default()
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(unschedulable: Option<bool>, ready: Option<&str>) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        n.spec = Some(NodeSpec {
            unschedulable,
            pod_cidr: Some("10.0.0.0/24".into()),
            ..NodeSpec::default()
        });
        n.status = Some(NodeStatus {
            conditions: ready.map(|r| {
                vec![
                    NodeCondition {
                        type_: "Ready".into(),
                        status: r.into(),
                        ..NodeCondition::default()
                    },
                    NodeCondition {
                        type_: "MemoryPressure".into(),
                        status: "False".into(),
                        ..NodeCondition::default()
                    },
                ]
            }),
            ..NodeStatus::default()
        });
        n
    }

    #[test]
    fn lost_wins_over_cordoned_and_unknown_readiness_is_usable() {
        assert_eq!(state(&node(None, Some("True"))), NodeState::Usable);
        assert_eq!(state(&node(Some(false), None)), NodeState::Usable);
        assert_eq!(state(&node(Some(true), Some("True"))), NodeState::Cordoned);
        assert_eq!(state(&node(None, Some("Unknown"))), NodeState::Lost);
        assert_eq!(state(&node(Some(true), Some("False"))), NodeState::Lost);
    }

    #[test]
    fn slimming_keeps_the_state() {
        for (u, r) in [
            (Some(true), Some("True")),
            (None, Some("Unknown")),
            (None, None),
        ] {
            let full = node(u, r);
            let mut slim_node = full.clone();
            slim(&mut slim_node);
            assert_eq!(state(&slim_node), state(&full));
            let conditions = slim_node.status.unwrap().conditions.unwrap_or_default();
            assert!(conditions.len() <= 1);
            assert_eq!(slim_node.spec.unwrap().pod_cidr, None);
        }
    }
}
