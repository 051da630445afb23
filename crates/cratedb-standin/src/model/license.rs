//! The license and its node limit.
//!
//! Follows CrateDB 4.x "Editions" → "Node limitation"
//! (<https://crate.io/docs/crate/reference/en/4.2/editions.html#node-limitation>) and
//! `SET LICENSE` (<https://crate.io/docs/crate/reference/en/4.2/sql/statements/set-license.html>):
//! without an Enterprise license a cluster may run on at most three nodes; beyond that it stops
//! accepting queries except `SET LICENSE`, `SELECT` on `sys` / `information_schema` and
//! `ALTER CLUSTER DECOMMISSION`, until a license is set or it scales back to three nodes.
//! (CrateDB 4.5 removed licensing; `SET LICENSE` became a no-op there. The stand-in models
//! the 4.x behaviour the operator's bootstrap order — license first — exists for.)
//!
//! Real license keys are signed by Crate.io and cannot be checked here. The stand-in accepts
//! `standin:<issued_to>:<max_nodes>` with those values, and any other non-empty key of at most
//! 4096 characters as an Enterprise license without a node limit.

use serde::{Deserialize, Serialize};

use super::{Cluster, ModelError};

/// Nodes a cluster may run without an Enterprise license.
pub const COMMUNITY_NODE_LIMIT: usize = 3;
const MAX_KEY_LEN: usize = 4096;

/// The registered license (`sys.cluster.license`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum License {
    None,
    Enterprise { issued_to: String, max_nodes: usize },
}

impl License {
    pub fn max_nodes(&self) -> usize {
        match self {
            License::None => COMMUNITY_NODE_LIMIT,
            License::Enterprise { max_nodes, .. } => *max_nodes,
        }
    }

    fn parse(key: &str) -> Result<Self, ModelError> {
        let key = key.trim();
        if key.is_empty() {
            return Err(ModelError::InvalidLicense(
                "The provided license key is empty".into(),
            ));
        }
        if key.len() > MAX_KEY_LEN {
            return Err(ModelError::InvalidLicense(format!(
                "The provided license key exceeds the maximum length of {MAX_KEY_LEN}"
            )));
        }
        if let Some(rest) = key.strip_prefix("standin:") {
            let (issued_to, max) = rest.rsplit_once(':').ok_or_else(|| {
                ModelError::InvalidLicense("expected standin:<issued_to>:<max_nodes>".into())
            })?;
            let max_nodes = max
                .parse()
                .map_err(|_| ModelError::InvalidLicense("max_nodes is not a number".into()))?;
            return Ok(License::Enterprise {
                issued_to: issued_to.to_owned(),
                max_nodes,
            });
        }
        Ok(License::Enterprise {
            issued_to: "unknown".to_owned(),
            max_nodes: usize::MAX,
        })
    }
}

impl Cluster {
    /// `SET LICENSE 'key'`. Allowed while the node limit is exceeded (that is its purpose),
    /// but, like every cluster state change, it needs a master.
    pub fn set_license_key(&mut self, key: &str) -> Result<(), ModelError> {
        if self.master.is_none() {
            return Err(ModelError::NoMaster);
        }
        self.license = License::parse(key)?;
        Ok(())
    }

    pub fn license(&self) -> &License {
        &self.license
    }

    /// Whether the cluster runs on more nodes than its license allows.
    pub fn license_violated(&self) -> bool {
        self.nodes.len() > self.license.max_nodes()
    }

    pub(crate) fn ensure_license(&self) -> Result<(), ModelError> {
        if self.license_violated() {
            return Err(ModelError::LicenseViolation {
                nodes: self.nodes.len(),
                max_nodes: self.license.max_nodes(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClusterConfig, NodeSpec, SUPERUSER};

    #[test]
    fn four_nodes_without_a_license_refuse_statements_until_one_is_set() {
        let mut c = Cluster::new(ClusterConfig::default());
        for n in ["n0", "n1", "n2", "n3"] {
            c.join(NodeSpec::new(n));
        }
        assert!(c.license_violated());
        assert!(matches!(
            c.create_user(SUPERUSER, "system", None),
            Err(ModelError::LicenseViolation {
                nodes: 4,
                max_nodes: 3
            })
        ));
        assert!(c.set_license_key("").is_err());
        assert!(c.set_license_key("standin:acme:5").is_ok());
        assert!(c.create_user(SUPERUSER, "system", None).is_ok());
        c.join(NodeSpec::new("n4"));
        c.join(NodeSpec::new("n5"));
        assert!(c.license_violated());
        assert!(c.set_license_key("opaque-enterprise-key").is_ok());
        assert!(!c.license_violated());
    }
}
