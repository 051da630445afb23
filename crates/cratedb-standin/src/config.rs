//! A stand-in node's configuration, read from CrateDB's own `-Ckey=value` flags so the node
//! agent can start it with the arguments a CrateDB container gets
//! (<https://cratedb.com/docs/crate/reference/en/latest/config/index.html>).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::model::{ClusterConfig, GatewaySettings, NodeSpec};

/// What a stand-in process needs to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// This process's node (`node.name`, `node.master`, `node.data`, `node.attr.*`).
    pub node: NodeSpec,
    pub cluster: ClusterConfig,
    /// `network.host` / `http.host` and `http.port` (4200).
    pub http_addr: SocketAddr,
    /// `network.host` / `psql.host` and `psql.port` (5432): the PostgreSQL wire protocol
    /// endpoint (<https://cratedb.com/docs/crate/reference/en/latest/config/node.html#ports>).
    pub psql_addr: SocketAddr,
    /// `auth.trust.http_default_user`: the user of HTTP requests without credentials.
    pub http_default_user: String,
    /// Wall-clock length of one model tick (`standin.tick_ms`, 200 ms).
    pub tick_interval: Duration,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            node: NodeSpec::new("crate-0"),
            cluster: ClusterConfig::default(),
            http_addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4200),
            psql_addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 5432),
            http_default_user: crate::model::SUPERUSER.to_owned(),
            tick_interval: Duration::from_millis(200),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("argument '{0}' is not of the form -Ckey=value")]
    Malformed(String),
    #[error("setting '{key}' has an invalid value '{value}'")]
    Invalid { key: String, value: String },
}

fn flag(key: &str, value: &str) -> Result<bool, ConfigError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ConfigError::Invalid {
            key: key.to_owned(),
            value: value.to_owned(),
        }),
    }
}

fn num<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, ConfigError> {
    value.parse().map_err(|_| ConfigError::Invalid {
        key: key.to_owned(),
        value: value.to_owned(),
    })
}

/// A host setting: an address or one of CrateDB's special values.
fn ip(key: &str, value: &str) -> Result<IpAddr, ConfigError> {
    match value {
        "_local_" | "localhost" => Ok(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        "_site_" | "0.0.0.0" => Ok(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        v => num(key, v),
    }
}

impl NodeConfig {
    /// Reads `-Ckey=value` (or `-C key=value`) arguments; unknown keys are ignored, as the
    /// stand-in models only some of CrateDB's settings.
    pub fn from_crate_args<I: IntoIterator<Item = String>>(args: I) -> Result<Self, ConfigError> {
        let mut cfg = NodeConfig::default();
        let mut gateway = GatewaySettings::default();
        let mut host = cfg.http_addr.ip();
        let mut port = cfg.http_addr.port();
        let mut http_host = None;
        let mut psql_host = None;
        let mut psql_port = cfg.psql_addr.port();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let kv = match arg.strip_prefix("-C") {
                Some("") => args.next().unwrap_or_default(),
                Some(kv) => kv.to_owned(),
                None => continue,
            };
            let (key, value) = kv
                .split_once('=')
                .ok_or_else(|| ConfigError::Malformed(kv.clone()))?;
            let value = value.trim();
            match key {
                "node.name" => cfg.node.name = value.to_owned(),
                "node.master" => cfg.node.master_eligible = flag(key, value)?,
                "node.data" => cfg.node.data = flag(key, value)?,
                "cluster.name" => cfg.cluster.cluster_name = value.to_owned(),
                "cluster.initial_master_nodes" => {
                    cfg.cluster.initial_master_nodes = value
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect();
                }
                "network.host" => host = ip(key, value)?,
                "http.host" => http_host = Some(ip(key, value)?),
                "psql.host" => psql_host = Some(ip(key, value)?),
                "http.port" => port = num(key, value)?,
                "psql.port" => psql_port = num(key, value)?,
                "gateway.expected_data_nodes" | "gateway.expected_nodes" => {
                    gateway.expected_data_nodes = Some(num(key, value)?)
                }
                "gateway.recover_after_data_nodes" | "gateway.recover_after_nodes" => {
                    gateway.recover_after_data_nodes = Some(num(key, value)?);
                }
                "gateway.recover_after_time" => gateway.recover_after_time = Some(value.to_owned()),
                "auth.trust.http_default_user" => cfg.http_default_user = value.to_owned(),
                "standin.tick_ms" => cfg.tick_interval = Duration::from_millis(num(key, value)?),
                "standin.init_ticks" => cfg.cluster.init_ticks = num(key, value)?,
                "standin.relocation_ticks" => cfg.cluster.relocation_ticks = num(key, value)?,
                "standin.version" => cfg.node.version = value.to_owned(),
                other => {
                    if let Some(attr) = other.strip_prefix("node.attr.") {
                        cfg.node
                            .attributes
                            .insert(attr.to_owned(), value.to_owned());
                    }
                }
            }
        }
        cfg.cluster.gateway = gateway;
        cfg.http_addr = SocketAddr::new(http_host.unwrap_or(host), port);
        cfg.psql_addr = SocketAddr::new(psql_host.unwrap_or(host), psql_port);
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cratedb_flags() {
        let args = [
            "-Cnode.name=crate-data-hot-0",
            "-Cnode.master=false",
            "-C",
            "node.attr.zone=z1",
            "-Ccluster.initial_master_nodes=m-0,m-1,m-2",
            "-Chttp.port=14200",
            "-Cpsql.port=15432",
            "-Cgateway.expected_data_nodes=4",
            "--ignored",
        ]
        .map(String::from);
        let cfg = NodeConfig::from_crate_args(args).unwrap();
        assert_eq!(cfg.node.name, "crate-data-hot-0");
        assert!(!cfg.node.master_eligible && cfg.node.data);
        assert_eq!(
            cfg.node.attributes.get("zone").map(String::as_str),
            Some("z1")
        );
        assert_eq!(cfg.cluster.initial_master_nodes.len(), 3);
        assert_eq!(cfg.http_addr.port(), 14200);
        assert_eq!(cfg.psql_addr.port(), 15432);
        assert_eq!(NodeConfig::default().psql_addr.port(), 5432);
        assert_eq!(cfg.cluster.gateway.expected_data_nodes, Some(4));
        assert!(NodeConfig::from_crate_args(["-Cnode.master=yes".to_owned()]).is_err());
    }
}
