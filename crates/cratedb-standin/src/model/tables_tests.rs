//! Tests of tables, allocation, relocation and health.

use super::*;
use crate::model::{ClusterConfig, NodeSpec};

fn cluster(data: &[&str]) -> Cluster {
    let mut c = Cluster::new(ClusterConfig {
        initial_master_nodes: vec!["m0".into(), "m1".into(), "m2".into()],
        init_ticks: 1,
        relocation_ticks: 2,
        ..ClusterConfig::default()
    });
    for m in ["m0", "m1", "m2"] {
        c.join(NodeSpec::master_only(m));
    }
    assert_eq!(c.set_license_key("standin:test:100"), Ok(()));
    for d in data {
        c.join(NodeSpec::data_only(*d));
    }
    c
}

fn t() -> TableName {
    TableName::new("doc", "t")
}

#[test]
fn replicas_parse_and_expand() {
    assert_eq!(
        Replicas::parse("0-1").ok(),
        Some(Replicas::Range {
            min: 0,
            max: Some(1)
        })
    );
    assert_eq!(Replicas::parse("2").ok(), Some(Replicas::Fixed(2)));
    assert!(Replicas::parse("3-1").is_err());
    assert_eq!(Replicas::parse("0-1").map(|r| r.effective(1)).ok(), Some(0));
    assert_eq!(Replicas::parse("0-1").map(|r| r.effective(4)).ok(), Some(1));
    assert_eq!(Replicas::parse("2-4").map(|r| r.effective(5)).ok(), Some(4));
    assert_eq!(Replicas::parse("2-4").map(|r| r.effective(2)).ok(), Some(2));
    assert_eq!(
        Replicas::parse("0-all").map(|r| r.effective(3)).ok(),
        Some(2)
    );
    assert_eq!(Replicas::Range { min: 1, max: None }.to_string(), "1-all");
}

#[test]
fn new_table_goes_red_then_yellow_then_green_and_copies_never_share_a_node() {
    let mut c = cluster(&["d0", "d1", "d2"]);
    c.create_table(t(), 4, Replicas::Fixed(1), vec![], false)
        .ok();
    assert_eq!(c.health(), Health::Red, "primaries initializing");
    c.tick();
    assert_eq!(
        c.health(),
        Health::Yellow,
        "primaries started, replicas initializing"
    );
    c.tick();
    assert_eq!(c.health(), Health::Green);
    for shard in 0..4 {
        let nodes: Vec<_> = c
            .shards()
            .iter()
            .filter(|s| s.shard == shard)
            .filter_map(|s| s.node.clone())
            .collect();
        assert_eq!(nodes.len(), 2);
        assert_ne!(nodes[0], nodes[1]);
    }
    assert_eq!(c.shard_count_on("m0"), 0, "masters hold no data");
}

#[test]
fn replicas_that_cannot_fit_leave_the_table_yellow() {
    let mut c = cluster(&["d0", "d1"]);
    c.create_table(t(), 2, Replicas::Fixed(2), vec![], false)
        .ok();
    c.tick_until(10, |c| c.health() != Health::Red);
    c.tick();
    c.tick();
    assert_eq!(c.health(), Health::Yellow);
    let h = c.table_health();
    assert_eq!(h[0].underreplicated_shards, 2);
}

#[test]
fn exclusion_drains_a_node_over_ticks() {
    let mut c = cluster(&["d0", "d1", "d2"]);
    c.create_table(t(), 6, Replicas::Fixed(1), vec![], false)
        .ok();
    assert!(c.tick_until(10, |c| c.health() == Health::Green));
    assert!(c.shard_count_on("d2") > 0);
    c.set_global(true, super::super::EXCLUDE_NAME, serde_json::json!("d2"))
        .ok();
    assert!(c.shards().iter().any(|s| s.state == ShardState::Relocating));
    assert!(c.shard_count_on("d2") > 0, "relocation takes time");
    assert!(c.tick_until(10, |c| c.shard_count_on("d2") == 0));
    assert_eq!(c.health(), Health::Green);
    // The node can now leave without any shard going missing.
    c.leave("d2").ok();
    assert_eq!(c.health(), Health::Green);
}

#[test]
fn exclusion_keeps_copies_that_have_nowhere_to_go() {
    let mut c = cluster(&["d0", "d1", "d2"]);
    c.create_table(t(), 2, Replicas::Fixed(2), vec![], false)
        .ok();
    assert!(c.tick_until(10, |c| c.health() == Health::Green));
    c.set_global(true, super::super::EXCLUDE_NAME, serde_json::json!("d2"))
        .ok();
    c.tick_until(10, |_| false);
    assert_eq!(c.shard_count_on("d2"), 2, "every node already holds a copy");
}

#[test]
fn losing_a_primary_promotes_a_replica_and_losing_the_last_copy_is_red() {
    let mut c = cluster(&["d0", "d1"]);
    c.create_table(t(), 1, Replicas::Fixed(1), vec![], false)
        .ok();
    assert!(c.tick_until(10, |c| c.health() == Health::Green));
    let primary_node = c
        .shards()
        .iter()
        .find(|s| s.primary)
        .and_then(|s| s.node.clone())
        .unwrap_or_default();
    c.leave(&primary_node).ok();
    assert_eq!(c.health(), Health::Yellow, "replica promoted");
    let other = c
        .shards()
        .iter()
        .find(|s| s.primary)
        .and_then(|s| s.node.clone())
        .unwrap_or_default();
    c.leave(&other).ok();
    assert_eq!(c.health(), Health::Red);
    c.join(NodeSpec::data_only(primary_node.clone()));
    c.tick_until(5, |_| false);
    assert_eq!(
        c.health(),
        Health::Red,
        "the node that came back holds a stale replica, not the primary"
    );
    c.join(NodeSpec::data_only(other.clone()));
    assert!(
        c.tick_until(10, |c| c.health() == Health::Green),
        "the primary comes back with its node"
    );
}

#[test]
fn auto_expand_follows_data_nodes() {
    let mut c = cluster(&["d0"]);
    c.create_table(
        t(),
        2,
        Replicas::Range {
            min: 0,
            max: Some(1),
        },
        vec![],
        false,
    )
    .ok();
    assert!(c.tick_until(10, |c| c.health() == Health::Green));
    assert_eq!(c.shards().len(), 2);
    c.join(NodeSpec::data_only("d1"));
    assert_eq!(c.shards().len(), 4);
    assert!(c.tick_until(10, |c| c.health() == Health::Green));
}

#[test]
fn no_master_blocks_ddl_and_health_counts_are_unknown() {
    let mut c = cluster(&["d0"]);
    c.leave("m0").ok();
    c.leave("m1").ok();
    assert_eq!(
        c.create_table(t(), 1, Replicas::Fixed(0), vec![], false),
        Err(ModelError::NoMaster)
    );
    assert_eq!(c.health(), Health::Red);
}
