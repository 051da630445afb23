//! Nodes, the voting configuration and master election.
//!
//! Follows CrateDB's "Clustering" concept page
//! (<https://cratedb.com/docs/crate/reference/en/latest/concepts/clustering.html>, "Master node
//! election"): a master is elected by a quorum (a majority) of the *voting configuration*,
//! which starts as `cluster.initial_master_nodes`; on every join or leave the configuration is
//! re-evaluated to all master-eligible nodes, minus one when their number is even, and it is
//! never shrunk below 3 nodes. Without a master the cluster is blocked.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::{Cluster, ModelError};

/// A node as configured: `node.name`, `node.master`, `node.data`, `node.attr.*`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpec {
    pub name: String,
    pub master_eligible: bool,
    pub data: bool,
    pub attributes: BTreeMap<String, String>,
    /// The CrateDB version the node reports (`sys.nodes.version['number']`).
    pub version: String,
}

impl NodeSpec {
    /// A node that is both master-eligible and holds data (CrateDB's default roles).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            master_eligible: true,
            data: true,
            attributes: BTreeMap::new(),
            version: "5.10.1".to_owned(),
        }
    }

    /// A dedicated master: master-eligible, no data (`node.data: false`).
    pub fn master_only(name: impl Into<String>) -> Self {
        Self {
            data: false,
            ..Self::new(name)
        }
    }

    /// A data node that is not master-eligible (`node.master: false`).
    pub fn data_only(name: impl Into<String>) -> Self {
        Self {
            master_eligible: false,
            ..Self::new(name)
        }
    }

    pub fn with_attribute(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.insert(key.into(), value.into());
        self
    }
}

/// A node that joined the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub spec: NodeSpec,
    /// `sys.nodes.id`: stable for a name, so a restarted node keeps it.
    pub id: String,
}

/// A deterministic 22-character node id for a node name (CrateDB ids are random and of this
/// shape; a stand-in needs replayable runs).
pub fn node_id(name: &str) -> String {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&fnv1a(name.as_bytes(), 0xcbf2_9ce4_8422_2325).to_be_bytes());
    bytes[8..].copy_from_slice(&fnv1a(name.as_bytes(), 0x8422_2325_cbf2_9ce4).to_be_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

pub(crate) fn fnv1a(data: &[u8], seed: u64) -> u64 {
    data.iter().fold(seed, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Cluster {
    /// A node joins (it started, or came back). A node of the same name is replaced.
    pub fn join(&mut self, spec: NodeSpec) {
        let name = spec.name.clone();
        if self.nodes.contains_key(&name) {
            self.leave_inner(&name);
        }
        let id = node_id(&name);
        self.nodes.insert(name, Node { spec, id });
        self.membership_changed();
    }

    /// A node leaves (stopped, killed or partitioned away). Its shard copies are lost to the
    /// cluster; acknowledgements of its node checks are forgotten.
    pub fn leave(&mut self, name: &str) -> Result<(), ModelError> {
        if !self.nodes.contains_key(name) {
            return Err(ModelError::NodeUnknown(name.to_owned()));
        }
        self.leave_inner(name);
        self.membership_changed();
        Ok(())
    }

    fn leave_inner(&mut self, name: &str) {
        self.nodes.remove(name);
        self.acknowledged.retain(|(_, node)| node != name);
        self.shards_lost_on(name);
        if self.master.as_deref() == Some(name) {
            self.master = None;
        }
    }

    fn membership_changed(&mut self) {
        if self.voting.is_empty() {
            self.bootstrap_voting();
        }
        self.elect();
        if self.master.is_some() {
            self.reconfigure_voting();
            self.elect();
            self.reroute();
        }
    }

    /// The first voting configuration: `cluster.initial_master_nodes`, or, when that is empty,
    /// the master-eligible nodes present at the first join (a single-process stand-in).
    fn bootstrap_voting(&mut self) {
        self.voting = if self.config.initial_master_nodes.is_empty() {
            self.master_eligible().collect()
        } else {
            self.config.initial_master_nodes.iter().cloned().collect()
        };
    }

    fn master_eligible(&self) -> impl Iterator<Item = String> + '_ {
        self.nodes
            .values()
            .filter(|n| n.spec.master_eligible)
            .map(|n| n.spec.name.clone())
    }

    /// Keeps the master while it has a quorum; otherwise elects the first live voter by name
    /// when a quorum of the voting configuration is present.
    fn elect(&mut self) {
        let live_voters: Vec<&String> = self
            .voting
            .iter()
            .filter(|v| self.nodes.get(*v).is_some_and(|n| n.spec.master_eligible))
            .collect();
        let quorum = self.voting.len() / 2 + 1;
        if self.voting.is_empty() || live_voters.len() < quorum {
            self.master = None;
            return;
        }
        if let Some(m) = &self.master
            && self.voting.contains(m)
            && self.nodes.contains_key(m)
        {
            return;
        }
        self.master = live_voters.first().map(|s| (*s).clone());
    }

    /// Re-evaluates the voting configuration as the clustering page describes.
    fn reconfigure_voting(&mut self) {
        let mut live: Vec<String> = self.master_eligible().collect();
        if live.len().is_multiple_of(2) && live.len() > 1 {
            // Exclude one node (never the master) to keep the configuration odd.
            if let Some(pos) = live.iter().rposition(|n| Some(n) != self.master.as_ref()) {
                live.remove(pos);
            }
        }
        let mut next: BTreeSet<String> = live.into_iter().collect();
        // Never shrink below 3: keep departed voters of the previous configuration.
        for old in &self.voting {
            if next.len() >= 3 {
                break;
            }
            next.insert(old.clone());
        }
        self.voting = next;
    }

    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name)
    }

    pub fn master(&self) -> Option<&str> {
        self.master.as_deref()
    }

    pub fn voting_configuration(&self) -> &BTreeSet<String> {
        &self.voting
    }

    pub(crate) fn data_nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values().filter(|n| n.spec.data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ClusterConfig;

    fn three_masters() -> Cluster {
        let mut c = Cluster::new(ClusterConfig {
            initial_master_nodes: vec!["m0".into(), "m1".into(), "m2".into()],
            ..ClusterConfig::default()
        });
        for m in ["m0", "m1", "m2"] {
            c.join(NodeSpec::master_only(m));
        }
        c
    }

    #[test]
    fn a_majority_of_the_initial_masters_elects_a_master() {
        let mut c = Cluster::new(ClusterConfig {
            initial_master_nodes: vec!["m0".into(), "m1".into(), "m2".into()],
            ..ClusterConfig::default()
        });
        c.join(NodeSpec::master_only("m0"));
        assert_eq!(c.master(), None, "one of three is no quorum");
        c.join(NodeSpec::master_only("m1"));
        assert_eq!(c.master(), Some("m0"));
    }

    #[test]
    fn voting_configuration_never_shrinks_below_three() {
        let mut c = three_masters();
        c.leave("m2").ok();
        assert_eq!(c.voting_configuration().len(), 3);
        assert!(c.master().is_some());
        c.leave("m1").ok();
        assert_eq!(c.master(), None, "1 of 3 voters is no quorum");
        assert!(c.ensure_writable().is_err());
    }

    #[test]
    fn five_to_three_one_at_a_time_keeps_a_master() {
        let mut c = three_masters();
        c.join(NodeSpec::master_only("m3"));
        c.join(NodeSpec::master_only("m4"));
        assert_eq!(c.voting_configuration().len(), 5);
        c.leave("m4").ok();
        assert_eq!(c.voting_configuration().len(), 3, "even count excludes one");
        c.leave("m3").ok();
        assert!(c.master().is_some());
        // The documented example: the voting configuration has adapted to 3 nodes.
        c.leave("m0").ok();
        assert!(c.master().is_some(), "2 of 3 remain");
    }

    #[test]
    fn master_loss_elects_another_voter() {
        let mut c = three_masters();
        c.leave("m0").ok();
        assert_eq!(c.master(), Some("m1"));
        assert_eq!(c.node("m1").map(|n| n.id.len()), Some(22));
        assert_eq!(node_id("a"), node_id("a"));
        assert_ne!(node_id("a"), node_id("b"));
    }
}
