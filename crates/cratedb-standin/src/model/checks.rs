//! Node checks (`sys.node_checks`) and their acknowledgement.
//!
//! Follows "Node checks" and "Acknowledge failed checks"
//! (<https://cratedb.com/docs/crate/reference/en/latest/admin/system-information.html#node-checks>):
//! every node reports each check with `passed` and `acknowledged`; the operator acknowledges
//! check 1 with `UPDATE sys.node_checks SET acknowledged = true WHERE id = 1` after scaling,
//! because `gateway.expected_data_nodes` can only change with a restart. Acknowledgements are
//! transient: a restarted node forgets them.
//!
//! Modelled checks: 1 (expected data nodes match the data nodes present), 2 (`(E / 2) < R <= E`
//! for recover-after data nodes `R` and expected `E`), 3 (`recover_after_time` is not `0s`
//! when recover-after is set). The disk-watermark and shard-limit checks (5–8) always pass.

use super::{Cluster, ModelError};

pub const RECOVERY_EXPECTED_NODES_CHECK: u32 = 1;
pub const RECOVERY_AFTER_NODES_CHECK: u32 = 2;
pub const RECOVERY_AFTER_TIME_CHECK: u32 = 3;

/// One row of `sys.node_checks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCheck {
    pub id: u32,
    pub node_name: String,
    pub node_id: String,
    pub severity: i64,
    pub description: String,
    pub passed: bool,
    pub acknowledged: bool,
}

impl Cluster {
    /// Every node's checks, by node then check id.
    pub fn node_checks(&self) -> Vec<NodeCheck> {
        let g = &self.config.gateway;
        let data_nodes = u32::try_from(self.data_nodes().count()).unwrap_or(u32::MAX);
        let check1 = g.expected_data_nodes.is_none_or(|e| e == data_nodes);
        let check2 = match (g.expected_data_nodes, g.recover_after_data_nodes) {
            (Some(e), Some(r)) => e / 2 < r && r <= e,
            _ => true,
        };
        let check3 = !(g.recover_after_data_nodes.is_some()
            && g.recover_after_time
                .as_deref()
                .is_some_and(|t| t.trim_end_matches(['s', 'm', 'h']) == "0"));
        let defs: [(u32, i64, &str, bool); 3] = [
            (
                RECOVERY_EXPECTED_NODES_CHECK,
                3,
                "The value of 'gateway.expected_data_nodes' does not match the number of data nodes in the cluster.",
                check1,
            ),
            (
                RECOVERY_AFTER_NODES_CHECK,
                3,
                "The value of 'gateway.recover_after_data_nodes' is not greater than half of, and not above, 'gateway.expected_data_nodes'.",
                check2,
            ),
            (
                RECOVERY_AFTER_TIME_CHECK,
                2,
                "'gateway.recover_after_data_nodes' has no effect while 'gateway.recover_after_time' is 0s.",
                check3,
            ),
        ];
        let mut rows = Vec::new();
        for node in self.nodes.values() {
            for (id, severity, description, passed) in defs {
                rows.push(NodeCheck {
                    id,
                    node_name: node.spec.name.clone(),
                    node_id: node.id.clone(),
                    severity,
                    description: description.to_owned(),
                    passed,
                    acknowledged: self.acknowledged.contains(&(id, node.spec.name.clone())),
                });
            }
        }
        rows
    }

    /// Sets `acknowledged` of check `id` on `node` (by name). Returns whether the row exists.
    pub fn set_check_acknowledged(
        &mut self,
        id: u32,
        node: &str,
        acknowledged: bool,
    ) -> Result<bool, ModelError> {
        if !self.nodes.contains_key(node) || !(1..=3).contains(&id) {
            return Ok(false);
        }
        if acknowledged {
            self.acknowledged.insert((id, node.to_owned()));
        } else {
            self.acknowledged.remove(&(id, node.to_owned()));
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use crate::model::{Cluster, ClusterConfig, GatewaySettings, NodeSpec};

    #[test]
    fn check_one_fails_after_scaling_until_acknowledged_and_restart_forgets() {
        let mut c = Cluster::new(ClusterConfig {
            gateway: GatewaySettings {
                expected_data_nodes: Some(2),
                recover_after_data_nodes: Some(2),
                recover_after_time: Some("5m".into()),
            },
            ..ClusterConfig::default()
        });
        c.join(NodeSpec::new("a"));
        c.join(NodeSpec::new("b"));
        assert!(c.node_checks().iter().all(|c| c.passed));
        c.join(NodeSpec::new("c"));
        let failing: Vec<_> = c.node_checks().into_iter().filter(|c| !c.passed).collect();
        assert_eq!(failing.len(), 3, "check 1 on each of three nodes");
        for n in ["a", "b", "c"] {
            assert_eq!(c.set_check_acknowledged(1, n, true), Ok(true));
        }
        assert!(
            c.node_checks()
                .iter()
                .filter(|c| c.id == 1)
                .all(|c| c.acknowledged)
        );
        c.leave("c").ok();
        c.join(NodeSpec::new("c"));
        assert!(
            c.node_checks()
                .iter()
                .any(|k| k.id == 1 && k.node_name == "c" && !k.acknowledged)
        );
    }
}
