//! Cluster settings: `SET GLOBAL` / `RESET GLOBAL`, and the static `gateway.*` settings.
//!
//! Follows `SET GLOBAL` / `RESET GLOBAL`
//! (<https://cratedb.com/docs/crate/reference/en/latest/sql/statements/set.html>,
//! `reset.html`) and the cluster settings page
//! (<https://cratedb.com/docs/crate/reference/en/latest/config/cluster.html>): persistent
//! settings survive a full cluster restart, transient ones do not, a transient value wins over
//! a persistent one, and only runtime-changeable settings may be set; `gateway.*` settings are
//! node settings read at start (`-C` flags), which is why node check 1 exists.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Cluster, ModelError, Privilege};

/// `cluster.routing.allocation.exclude._name`: the setting the operator drains nodes with.
pub const EXCLUDE_NAME: &str = "cluster.routing.allocation.exclude._name";

/// Prefixes of the runtime-changeable settings the stand-in accepts.
const DYNAMIC_PREFIXES: &[&str] = &[
    "cluster.routing.allocation.",
    "cluster.routing.rebalance.",
    "cluster.graceful_stop.",
    "indices.recovery.",
    "indices.breaker.",
    "stats.",
    "bulk.",
    "overload_protection.",
];

/// Static gateway settings of the nodes (`gateway.expected_data_nodes`, …).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewaySettings {
    pub expected_data_nodes: Option<u32>,
    pub recover_after_data_nodes: Option<u32>,
    /// `gateway.recover_after_time` as written, e.g. `5m` or `0s`.
    pub recover_after_time: Option<String>,
}

/// Persistent and transient cluster settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub persistent: BTreeMap<String, Value>,
    pub transient: BTreeMap<String, Value>,
}

impl Settings {
    /// The effective value: transient over persistent.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.transient.get(key).or_else(|| self.persistent.get(key))
    }

    /// Every effective setting, transient over persistent.
    pub fn effective(&self) -> BTreeMap<String, Value> {
        let mut all = self.persistent.clone();
        all.extend(self.transient.iter().map(|(k, v)| (k.clone(), v.clone())));
        all
    }
}

fn validate(key: &str) -> Result<(), ModelError> {
    if key.starts_with("gateway.") || key.starts_with("node.") || key.starts_with("path.") {
        return Err(ModelError::InvalidArgument(format!(
            "Setting '{key}' cannot be set/reset at runtime"
        )));
    }
    if !DYNAMIC_PREFIXES.iter().any(|p| key.starts_with(p)) {
        return Err(ModelError::InvalidArgument(format!(
            "Setting '{key}' is not supported"
        )));
    }
    Ok(())
}

impl Cluster {
    /// `SET GLOBAL [PERSISTENT|TRANSIENT] key = value` (no privilege check; see
    /// [`Cluster::set_global_as`]).
    pub fn set_global(
        &mut self,
        persistent: bool,
        key: &str,
        value: Value,
    ) -> Result<(), ModelError> {
        self.ensure_writable()?;
        validate(key)?;
        let map = if persistent {
            &mut self.settings.persistent
        } else {
            &mut self.settings.transient
        };
        map.insert(key.to_owned(), value);
        self.reroute();
        Ok(())
    }

    /// `SET GLOBAL` as `user`: needs `AL`.
    pub fn set_global_as(
        &mut self,
        user: &str,
        persistent: bool,
        key: &str,
        value: Value,
    ) -> Result<(), ModelError> {
        self.ensure_writable()?;
        self.require(user, Privilege::Al)?;
        self.set_global(persistent, key, value)
    }

    /// `RESET GLOBAL key`: removes both the persistent and the transient value; a key names
    /// itself and every setting below it (`cluster.routing.allocation` resets them all).
    pub fn reset_global_as(&mut self, user: &str, key: &str) -> Result<(), ModelError> {
        self.ensure_writable()?;
        self.require(user, Privilege::Al)?;
        validate(&format!("{key}.")).or_else(|_| validate(key))?;
        let below = format!("{key}.");
        for map in [&mut self.settings.persistent, &mut self.settings.transient] {
            map.retain(|k, _| k != key && !k.starts_with(&below));
        }
        self.reroute();
        Ok(())
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Whether a node is excluded from allocation by `cluster.routing.allocation.exclude.*`
    /// (`_name`, `_id`, or a node attribute); values are comma-separated lists.
    pub(crate) fn is_excluded(&self, node: &str) -> bool {
        let Some(n) = self.nodes.get(node) else {
            return false;
        };
        let prefix = "cluster.routing.allocation.exclude.";
        self.settings.effective().iter().any(|(key, value)| {
            let Some(attr) = key.strip_prefix(prefix) else {
                return false;
            };
            let actual = match attr {
                "_name" => Some(n.spec.name.as_str()),
                "_id" => Some(n.id.as_str()),
                other => n.spec.attributes.get(other).map(String::as_str),
            };
            let listed = match value {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            actual.is_some_and(|a| {
                listed
                    .split(',')
                    .map(str::trim)
                    .any(|l| !l.is_empty() && l == a)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClusterConfig, NodeSpec, SUPERUSER};
    use serde_json::json;

    #[test]
    fn transient_wins_and_reset_clears_a_subtree() {
        let mut c = Cluster::new(ClusterConfig::default());
        c.join(NodeSpec::new("a").with_attribute("zone", "z1"));
        c.join(NodeSpec::new("b"));
        assert!(
            c.set_global_as(SUPERUSER, true, EXCLUDE_NAME, json!("x"))
                .is_ok()
        );
        assert!(
            c.set_global_as(SUPERUSER, false, EXCLUDE_NAME, json!("a, b"))
                .is_ok()
        );
        assert_eq!(c.settings().get(EXCLUDE_NAME), Some(&json!("a, b")));
        assert!(c.is_excluded("a") && c.is_excluded("b"));
        assert!(
            c.reset_global_as(SUPERUSER, "cluster.routing.allocation")
                .is_ok()
        );
        assert!(c.settings().effective().is_empty());
        assert!(
            c.set_global(true, "cluster.routing.allocation.exclude.zone", json!("z1"))
                .is_ok()
        );
        assert!(c.is_excluded("a") && !c.is_excluded("b"));
    }

    #[test]
    fn static_and_unknown_settings_are_refused() {
        let mut c = Cluster::new(ClusterConfig::default());
        c.join(NodeSpec::new("a"));
        assert!(
            c.set_global(true, "gateway.expected_data_nodes", json!(3))
                .is_err()
        );
        assert!(c.set_global(true, "no.such.setting", json!(3)).is_err());
        assert!(
            c.reset_global_as(SUPERUSER, "gateway.expected_data_nodes")
                .is_err()
        );
    }
}
