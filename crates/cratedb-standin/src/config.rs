//! A stand-in node's configuration, read from CrateDB's own `-Ckey=value` flags so the node
//! agent can start it with the arguments a CrateDB container gets
//! (<https://cratedb.com/docs/crate/reference/en/latest/config/index.html>).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
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
    /// `network.host` / `transport.host` and `transport.tcp.port` (4300): the stand-in's own
    /// node-to-node transport (HTTP/JSON, not CrateDB's binary transport protocol).
    pub transport_addr: SocketAddr,
    /// `network.publish_host`: the address other nodes reach this node's transport at. When
    /// unset, the bound address (or `127.0.0.1` when bound to `0.0.0.0`).
    pub publish_host: Option<IpAddr>,
    /// `discovery.seed_hosts`: `host[:port]` entries (port 4300 by default), resolved anew on
    /// every attempt.
    pub seed_hosts: Vec<String>,
    /// `path.data`: where the node keeps the latest published cluster state. `None`: nothing
    /// persists (in-process tests); the binary defaults to a directory under the temp dir.
    pub data_path: Option<PathBuf>,
    /// How often a node pings its peers (`standin.ping_ms`, 500 ms).
    pub ping_interval: Duration,
    /// A peer not heard from for this long has left (`standin.liveness_timeout_ms`, 3 s).
    pub liveness_timeout: Duration,
}

/// The default `transport.tcp.port`.
pub const TRANSPORT_PORT: u16 = 4300;

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            node: NodeSpec::new("crate-0"),
            cluster: ClusterConfig::default(),
            http_addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4200),
            psql_addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 5432),
            http_default_user: crate::model::SUPERUSER.to_owned(),
            tick_interval: Duration::from_millis(200),
            transport_addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), TRANSPORT_PORT),
            publish_host: None,
            seed_hosts: Vec::new(),
            data_path: None,
            ping_interval: Duration::from_millis(500),
            liveness_timeout: Duration::from_secs(3),
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

/// `path.data` when not given: `<temp dir>/cratedb-standin/<cluster>/<node>` (CrateDB's default
/// is `$CRATE_HOME/data`).
pub fn default_data_path(cluster: &str, node: &str) -> PathBuf {
    std::env::temp_dir()
        .join("cratedb-standin")
        .join(cluster)
        .join(node)
}

/// One `discovery.seed_hosts` entry as `host:port` (port 4300 when absent; `[v6]:port` kept).
pub fn seed_host_with_port(seed: &str) -> String {
    let seed = seed.trim();
    let has_port = match seed.rsplit_once(':') {
        Some((host, port)) => {
            port.parse::<u16>().is_ok() && (!host.contains(':') || host.ends_with(']'))
        }
        None => false,
    };
    if has_port {
        seed.to_owned()
    } else if seed.contains(':') && !seed.starts_with('[') {
        format!("[{seed}]:{TRANSPORT_PORT}")
    } else {
        format!("{seed}:{TRANSPORT_PORT}")
    }
}

impl NodeConfig {
    /// The address peers reach this node's transport at.
    pub fn transport_publish_addr(&self, bound: SocketAddr) -> SocketAddr {
        let ip = match self.publish_host {
            Some(ip) if !ip.is_unspecified() => ip,
            _ if bound.ip().is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            _ => bound.ip(),
        };
        SocketAddr::new(ip, bound.port())
    }

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
        let mut transport_host = None;
        let mut transport_port = cfg.transport_addr.port();
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
                "transport.host" => transport_host = Some(ip(key, value)?),
                "network.publish_host" | "transport.publish_host" => {
                    cfg.publish_host = Some(ip(key, value)?)
                }
                "transport.tcp.port" | "transport.port" => transport_port = num(key, value)?,
                "discovery.seed_hosts" => {
                    cfg.seed_hosts = value
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect();
                }
                "path.data" => cfg.data_path = Some(PathBuf::from(value)),
                "standin.ping_ms" => cfg.ping_interval = Duration::from_millis(num(key, value)?),
                "standin.liveness_timeout_ms" => {
                    cfg.liveness_timeout = Duration::from_millis(num(key, value)?)
                }
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
        cfg.transport_addr = SocketAddr::new(transport_host.unwrap_or(host), transport_port);
        if cfg.data_path.is_none() {
            cfg.data_path = Some(default_data_path(&cfg.cluster.cluster_name, &cfg.node.name));
        }
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
        assert_eq!(cfg.transport_addr.port(), TRANSPORT_PORT);
        assert_eq!(
            cfg.data_path,
            Some(default_data_path("crate", "crate-data-hot-0"))
        );
    }

    #[test]
    fn reads_cluster_flags() {
        let args = [
            "-Cnetwork.host=127.0.4.7",
            "-Ctransport.tcp.port=14300",
            "-Cdiscovery.seed_hosts=crate-master-0.crate-discovery.ns.svc.cluster.local, 127.0.4.8:4301",
            "-Cpath.data=/data/data0",
            "-Cstandin.liveness_timeout_ms=1500",
            "-Cstandin.ping_ms=100",
        ]
        .map(String::from);
        let cfg = NodeConfig::from_crate_args(args).unwrap();
        assert_eq!(cfg.http_addr, "127.0.4.7:4200".parse().unwrap());
        assert_eq!(cfg.psql_addr, "127.0.4.7:5432".parse().unwrap());
        assert_eq!(cfg.transport_addr, "127.0.4.7:14300".parse().unwrap());
        assert_eq!(cfg.seed_hosts.len(), 2);
        assert_eq!(cfg.data_path, Some(PathBuf::from("/data/data0")));
        assert_eq!(cfg.liveness_timeout, Duration::from_millis(1500));
        assert_eq!(cfg.ping_interval, Duration::from_millis(100));
        assert_eq!(
            seed_host_with_port("crate-master-0.crate-discovery.ns.svc.cluster.local"),
            "crate-master-0.crate-discovery.ns.svc.cluster.local:4300"
        );
        assert_eq!(seed_host_with_port("10.0.0.1:4301"), "10.0.0.1:4301");
        assert_eq!(seed_host_with_port("::1"), "[::1]:4300");
        assert_eq!(seed_host_with_port("[::1]:4301"), "[::1]:4301");
        let unspecified = NodeConfig::default();
        assert_eq!(
            unspecified.transport_publish_addr("0.0.0.0:4300".parse().unwrap()),
            "127.0.0.1:4300".parse().unwrap()
        );
    }
}
