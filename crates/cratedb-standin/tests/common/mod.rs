//! What the stand-in's integration tests share.

use std::time::Duration;

use steward_cratedb_standin::NodeConfig;
use steward_cratedb_standin::http::Running;
use steward_cratedb_standin::model::NodeSpec;

/// One node, `crate-0`, on free loopback ports, ticking every 5 ms.
pub async fn one_node() -> Running {
    let config = NodeConfig {
        node: NodeSpec::new("crate-0"),
        http_addr: "127.0.0.1:0".parse().unwrap(),
        psql_addr: "127.0.0.1:0".parse().unwrap(),
        transport_addr: "127.0.0.1:0".parse().unwrap(),
        tick_interval: Duration::from_millis(5),
        ..NodeConfig::default()
    };
    steward_cratedb_standin::spawn(config).await.unwrap()
}
