//! The SQL front against the model: the statements the operator sends, in its order.

use serde_json::{Value, json};

use super::*;
use crate::model::{Cluster, ClusterConfig, GatewaySettings, NodeSpec, SUPERUSER};

fn cluster(data_nodes: usize) -> Cluster {
    let mut c = Cluster::new(ClusterConfig {
        initial_master_nodes: vec!["master-0".into(), "master-1".into(), "master-2".into()],
        gateway: GatewaySettings {
            expected_data_nodes: Some(data_nodes as u32),
            ..GatewaySettings::default()
        },
        ..ClusterConfig::default()
    });
    for i in 0..3 {
        c.join(NodeSpec::master_only(format!("master-{i}")));
    }
    for i in 0..data_nodes {
        c.join(NodeSpec::data_only(format!("data-hot-{i}")));
    }
    c
}

fn run(c: &mut Cluster, user: &str, sql: &str) -> QueryResult {
    match execute(c, user, sql, &[]) {
        Ok(r) => r,
        Err(e) => panic!("{sql}: {e}"),
    }
}

fn err(c: &mut Cluster, user: &str, sql: &str) -> SqlError {
    match execute(c, user, sql, &[]) {
        Ok(r) => panic!("{sql}: expected an error, got {r:?}"),
        Err(e) => e,
    }
}

#[test]
fn bootstrap_in_the_operators_order() {
    let mut c = cluster(2);
    // Five nodes without a license: only SET LICENSE and system reads work.
    let e = err(
        &mut c,
        SUPERUSER,
        r#"CREATE USER "system" WITH (password = 'pw')"#,
    );
    assert_eq!(e.code, ErrorCode::InvalidSql);
    assert!(e.message.starts_with("LicenseViolationException"));
    assert_eq!(
        run(&mut c, SUPERUSER, "SELECT count(*) FROM sys.nodes").rows,
        vec![vec![json!(5)]]
    );
    run(&mut c, SUPERUSER, "SET LICENSE 'standin:acme:10'");
    run(
        &mut c,
        SUPERUSER,
        r#"CREATE USER "system" WITH (password = 'pw')"#,
    );
    let again = err(
        &mut c,
        SUPERUSER,
        r#"CREATE USER "system" WITH (password = 'pw')"#,
    );
    assert_eq!((again.code_number(), again.http_status()), (4099, 409));
    run(&mut c, SUPERUSER, r#"GRANT ALL PRIVILEGES TO "system""#);
    run(&mut c, "system", "CREATE USER app WITH (password = 'a')");
    run(&mut c, "system", "GRANT ALL TO app");
    let privs = run(
        &mut c,
        SUPERUSER,
        "SELECT type FROM sys.privileges WHERE grantee = 'app' ORDER BY type",
    );
    assert_eq!(privs.rows.len(), 4);
    assert!(c.authenticate("app", Some("a")).is_ok());
    run(&mut c, "app", "ALTER USER app SET (password = 'b')");
    assert!(c.authenticate("app", Some("a")).is_err());
}

#[test]
fn scale_down_queries_drain_a_node_and_acknowledge_check_one() {
    let mut c = cluster(3);
    run(&mut c, SUPERUSER, "SET LICENSE 'standin:acme:10'");
    run(
        &mut c,
        SUPERUSER,
        "CREATE TABLE doc.t (id INT, v TEXT) CLUSTERED INTO 6 SHARDS WITH (number_of_replicas = 1)",
    );
    assert!(c.tick_until(10, |c| c.health() == crate::model::Health::Green));
    let health = run(
        &mut c,
        SUPERUSER,
        "SELECT health FROM sys.health ORDER BY severity DESC LIMIT 1",
    );
    assert_eq!(health.rows, vec![vec![json!("GREEN")]]);
    let replicas = run(
        &mut c,
        SUPERUSER,
        "SELECT number_of_replicas FROM information_schema.tables WHERE number_of_replicas IS NOT NULL",
    );
    assert_eq!(replicas.rows, vec![vec![json!("1")]]);

    run(
        &mut c,
        SUPERUSER,
        r#"SET GLOBAL TRANSIENT "cluster.routing.allocation.exclude._name" = 'data-hot-2'"#,
    );
    let on_departing = "SELECT count(*) FROM sys.shards WHERE node['name'] = ANY(['data-hot-2'])";
    assert!(run(&mut c, SUPERUSER, on_departing).rows[0][0].as_i64() > Some(0));
    assert!(c.tick_until(10, |c| c.shard_count_on("data-hot-2") == 0));
    assert_eq!(
        run(&mut c, SUPERUSER, on_departing).rows,
        vec![vec![json!(0)]]
    );
    let per_node = run(
        &mut c,
        SUPERUSER,
        "SELECT node['name'] AS n, count(*) FROM sys.shards GROUP BY 1 ORDER BY 1",
    );
    assert_eq!(per_node.cols, vec!["n", "count(*)"]);
    assert_eq!(
        per_node
            .rows
            .iter()
            .map(|r| r[1].as_i64().unwrap_or(0))
            .sum::<i64>(),
        12
    );
    assert_eq!(per_node.rows.len(), 2);
    c.leave("data-hot-2").ok();

    run(
        &mut c,
        SUPERUSER,
        r#"RESET GLOBAL "cluster.routing.allocation.exclude._name""#,
    );
    let failing = "SELECT count(*) FROM sys.node_checks WHERE id = 1 AND passed = false AND acknowledged = false";
    assert_eq!(run(&mut c, SUPERUSER, failing).rows, vec![vec![json!(5)]]);
    let ack = run(
        &mut c,
        SUPERUSER,
        "UPDATE sys.node_checks SET acknowledged = TRUE WHERE id = 1",
    );
    assert_eq!(ack.rowcount, 5);
    assert_eq!(run(&mut c, SUPERUSER, failing).rows, vec![vec![json!(0)]]);
    let settings = run(
        &mut c,
        SUPERUSER,
        "SELECT settings['cluster']['routing']['allocation']['exclude']['_name'] FROM sys.cluster",
    );
    assert_eq!(settings.rows, vec![vec![Value::Null]]);
}

#[test]
fn inserts_counts_and_parameters() {
    let mut c = cluster(2);
    run(&mut c, SUPERUSER, "SET LICENSE 'k'");
    run(
        &mut c,
        SUPERUSER,
        "CREATE TABLE t (id INT, v TEXT) CLUSTERED INTO 2 SHARDS WITH (number_of_replicas = '0-1')",
    );
    let early = err(&mut c, SUPERUSER, "INSERT INTO t (id, v) VALUES (1, 'a')");
    assert_eq!(
        early.code,
        ErrorCode::ShardsUnavailable,
        "primaries still initializing"
    );
    c.tick();
    let r = execute(
        &mut c,
        SUPERUSER,
        "INSERT INTO t (id, v) VALUES (?, ?), ($3, 'c')",
        &[json!(1), json!("a"), json!(3)],
    );
    assert_eq!(r.map(|r| r.rowcount), Ok(2));
    assert_eq!(
        run(&mut c, SUPERUSER, "SELECT count(*) FROM t").rows,
        vec![vec![json!(2)]]
    );
    assert_eq!(
        run(&mut c, SUPERUSER, "SELECT v FROM doc.t WHERE id > 1").rows,
        vec![vec![json!("c")]]
    );
    let docs = run(
        &mut c,
        SUPERUSER,
        "SELECT sum(num_docs) FROM sys.shards WHERE \"primary\" = true",
    );
    assert_eq!(docs.rows, vec![vec![json!(2)]]);
    assert_eq!(
        err(&mut c, SUPERUSER, "SELECT * FROM nope").code_number(),
        4041
    );
    assert_eq!(
        err(&mut c, SUPERUSER, "SELECT nope FROM sys.nodes").code_number(),
        4043
    );
}

#[test]
fn privileges_and_no_master_map_to_crate_codes() {
    let mut c = cluster(1);
    run(&mut c, SUPERUSER, "SET LICENSE 'k'");
    run(
        &mut c,
        SUPERUSER,
        "CREATE USER reader WITH (password = 'r')",
    );
    run(&mut c, SUPERUSER, "GRANT DQL TO reader");
    let e = err(
        &mut c,
        "reader",
        r#"SET GLOBAL "cluster.routing.allocation.exclude._name" = 'x'"#,
    );
    assert_eq!((e.code_number(), e.http_status()), (4011, 401));
    assert_eq!(
        e.message,
        "MissingPrivilegeException[Missing 'AL' privilege for user 'reader']"
    );
    assert_eq!(
        err(&mut c, SUPERUSER, "DROP USER nobody").code_number(),
        40410
    );
    assert_eq!(
        err(&mut c, SUPERUSER, "DROP USER crate").code_number(),
        4010
    );
    assert_eq!(
        err(
            &mut c,
            SUPERUSER,
            r#"SET GLOBAL "gateway.expected_data_nodes" = 3"#
        )
        .code_number(),
        4000
    );
    c.leave("master-0").ok();
    c.leave("master-1").ok();
    let e = err(&mut c, SUPERUSER, "CREATE USER late");
    assert_eq!((e.code_number(), e.http_status()), (5000, 500));
    let h = run(
        &mut c,
        SUPERUSER,
        "SELECT health, missing_shards FROM sys.cluster_health",
    );
    assert_eq!(h.rows, vec![vec![json!("RED"), json!(-1)]]);
}
