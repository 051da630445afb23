//! Several stand-in nodes in one process forming one cluster over the stand-in's transport:
//! 3 dedicated masters and 2 data nodes on 127.0.0.1 with their own ports, short ticks and a
//! short liveness timeout. Nodes are stopped and started again on the same ports and
//! `path.data`, as Pods are.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use steward_cratedb_standin::model::{NodeSpec, node_id};
use steward_cratedb_standin::{NodeConfig, http::Running};
use tokio_postgres::NoTls;

const MASTERS: [&str; 3] = ["m0", "m1", "m2"];
const DATA: [&str; 2] = ["d0", "d1"];
const WAIT: Duration = Duration::from_secs(20);

/// A free port below Linux's ephemeral range (32768–60999), so that no outgoing connection
/// takes it while a stopped node is away and the node can bind it again.
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20_000 + u16::try_from(std::process::id() % 400).unwrap() * 30;
    loop {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 20_000 + (base - 20_000 + offset) % 12_000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

struct TestCluster {
    configs: BTreeMap<String, NodeConfig>,
    running: BTreeMap<String, Running>,
    _dir: tempfile::TempDir,
}

impl TestCluster {
    fn new() -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        // The nodes' coordination log (elections, membership, step-downs), each line in its
        // node's span; nextest shows it when a test fails.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                std::env::var("STEWARD_TEST_LOG")
                    .unwrap_or_else(|_| "steward_cratedb_standin=info".into()),
            ))
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .try_init();
        let dir = tempfile::tempdir().unwrap();
        let ports: BTreeMap<&str, [u16; 3]> = MASTERS
            .iter()
            .chain(&DATA)
            .map(|n| (*n, [free_port(), free_port(), free_port()]))
            .collect();
        let seeds: Vec<String> = MASTERS
            .iter()
            .map(|m| format!("127.0.0.1:{}", ports[m][2]))
            .collect();
        let mut configs = BTreeMap::new();
        for (name, [http, psql, transport]) in &ports {
            let node = if MASTERS.contains(name) {
                NodeSpec::master_only(*name)
            } else {
                NodeSpec::data_only(*name).with_attribute("zone", "z1")
            };
            let mut cfg = NodeConfig {
                node,
                http_addr: format!("127.0.0.1:{http}").parse().unwrap(),
                psql_addr: format!("127.0.0.1:{psql}").parse().unwrap(),
                transport_addr: format!("127.0.0.1:{transport}").parse().unwrap(),
                seed_hosts: seeds.clone(),
                data_path: Some(dir.path().join(name)),
                tick_interval: Duration::from_millis(20),
                ping_interval: Duration::from_millis(50),
                liveness_timeout: Duration::from_millis(800),
                ..NodeConfig::default()
            };
            cfg.cluster.cluster_name = "standin-test".into();
            cfg.cluster.initial_master_nodes = MASTERS.iter().map(|m| (*m).to_owned()).collect();
            configs.insert((*name).to_owned(), cfg);
        }
        Self {
            configs,
            running: BTreeMap::new(),
            _dir: dir,
        }
    }

    async fn start(&mut self, name: &str) {
        let running = steward_cratedb_standin::spawn(self.configs[name].clone())
            .await
            .unwrap();
        self.running.insert(name.to_owned(), running);
    }

    async fn start_all(&mut self) {
        for n in MASTERS.iter().chain(&DATA) {
            self.start(n).await;
        }
    }

    async fn stop(&mut self, name: &str) {
        self.running.remove(name).unwrap().stop().await;
    }

    fn http(&self, name: &str) -> SocketAddr {
        self.configs[name].http_addr
    }

    fn psql(&self, name: &str) -> SocketAddr {
        self.configs[name].psql_addr
    }

    /// The node acting as master, if one does.
    fn master(&self) -> Option<String> {
        self.running
            .iter()
            .find(|(_, r)| r.state.is_master())
            .map(|(n, _)| n.clone())
    }

    /// Waits until all running nodes see `expected` nodes and one master; returns its name. On
    /// a timeout the panic shows what every node saw last (the logs above show why).
    async fn formed(&self, expected: usize) -> String {
        let names: Vec<String> = self.running.keys().cloned().collect();
        let formed = try_wait_for(|| async {
            let mut seen = None;
            for n in &names {
                let (_, nodes) = sql(self.http(n), None, "SELECT name FROM sys.nodes").await;
                if nodes["rowcount"] != json!(expected) {
                    return None;
                }
                let (_, m) = sql(self.http(n), None, "SELECT master_node FROM sys.cluster").await;
                let m = m["rows"][0][0].as_str()?.to_owned();
                if seen.get_or_insert_with(|| m.clone()) != &m {
                    return None;
                }
            }
            let master = self.master()?;
            (seen? == node_id(&master)).then_some(master)
        })
        .await;
        match formed {
            Some(master) => master,
            None => panic!(
                "timed out waiting for {expected} nodes and one master; each node's view:\n{}",
                self.views().await
            ),
        }
    }

    /// What each running node says: its nodes, its master, its state version, whether it leads.
    async fn views(&self) -> String {
        let mut out = String::new();
        for (n, r) in &self.running {
            let (_, nodes) = sql(
                self.http(n),
                None,
                "SELECT name FROM sys.nodes ORDER BY name",
            )
            .await;
            let (_, m) = sql(self.http(n), None, "SELECT master_node FROM sys.cluster").await;
            out.push_str(&format!(
                "  {n}: nodes {} master {} version {} leads {}\n",
                nodes.get("rows").unwrap_or(&nodes),
                m.get("rows").unwrap_or(&m),
                r.state.version(),
                r.state.is_master(),
            ));
        }
        out
    }
}

async fn wait_for<T, F, Fut>(what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    match try_wait_for(probe).await {
        Some(v) => v,
        None => panic!("timed out waiting for {what}"),
    }
}

/// Probes every 50 ms until the probe answers or `WAIT` has passed.
async fn try_wait_for<T, F, Fut>(mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = probe().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn sql_as(addr: SocketAddr, auth: Option<(&str, &str)>, stmt: &str) -> (u16, Value) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut req = client
        .post(format!("http://{addr}/_sql"))
        .json(&json!({"stmt": stmt}));
    if let Some((u, p)) = auth {
        req = req.basic_auth(u, Some(p));
    }
    match req.send().await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            (status, resp.json().await.unwrap_or(Value::Null))
        }
        Err(e) => (0, json!({"transport": e.to_string()})),
    }
}

async fn sql(addr: SocketAddr, auth: Option<(&str, &str)>, stmt: &str) -> (u16, Value) {
    sql_as(addr, auth, stmt).await
}

/// Runs a statement that must succeed.
async fn ok(addr: SocketAddr, stmt: &str) -> Value {
    let (status, body) = sql(addr, None, stmt).await;
    assert_eq!(status, 200, "{stmt}: {body}");
    body
}

async fn pg_login(addr: SocketAddr, user: &str, password: &str) -> Result<String, String> {
    let mut config = tokio_postgres::Config::new();
    config
        .host(addr.ip().to_string())
        .port(addr.port())
        .user(user)
        .password(password)
        .dbname("doc")
        .connect_timeout(Duration::from_secs(5));
    let (client, connection) = config.connect(NoTls).await.map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let rows = client
        .simple_query("SELECT name FROM sys.cluster")
        .await
        .map_err(|e| e.to_string())?;
    rows.into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .ok_or_else(|| "no row".to_owned())
}

async fn health(addr: SocketAddr, table: &str) -> Option<String> {
    let (_, body) = sql(
        addr,
        None,
        &format!("SELECT health FROM sys.health WHERE table_name = '{table}'"),
    )
    .await;
    body["rows"][0][0].as_str().map(str::to_owned)
}

/// License first (five nodes exceed the 4.x community limit), as the operator bootstraps.
async fn licensed(c: &TestCluster, via: &str) {
    ok(c.http(via), "SET LICENSE 'standin:steward-tests:10'").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_form_one_cluster_and_users_log_in_through_any_node() {
    let mut c = TestCluster::new();
    c.start_all().await;
    let master = c.formed(5).await;
    assert!(
        MASTERS.contains(&master.as_str()),
        "a data node is never master"
    );

    // Every node answers the same cluster: nodes with their roles' attributes, node checks.
    for n in MASTERS.iter().chain(&DATA) {
        let root: Value = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(format!("http://{}/", c.http(n)))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(root["name"], *n);
        assert_eq!(root["cluster_name"], "standin-test");
        let body = ok(
            c.http(n),
            "SELECT name, attributes['zone'] FROM sys.nodes ORDER BY name",
        )
        .await;
        assert_eq!(
            body["rows"],
            json!([
                ["d0", "z1"],
                ["d1", "z1"],
                ["m0", null],
                ["m1", null],
                ["m2", null]
            ])
        );
        let checks = ok(c.http(n), "SELECT count(*) FROM sys.node_checks").await;
        assert_eq!(checks["rows"], json!([[15]]));
    }

    // Without a license five nodes refuse statements; the license is set through a data node
    // (forwarded to the master) and seen everywhere.
    let (status, body) = sql(c.http("d1"), None, "CREATE USER early").await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!(4000)),
        "{body}"
    );
    licensed(&c, "d1").await;

    // A user created through one node logs in through the others, over HTTP and PG wire.
    ok(
        c.http("d0"),
        "CREATE USER alice WITH (password = 'wonderland')",
    )
    .await;
    let (status, body) = sql(c.http("d0"), None, "CREATE USER alice").await;
    assert_eq!(body["error"]["code"], 4099, "{status} {body}");
    ok(c.http("m1"), "GRANT DQL TO alice").await;
    for n in MASTERS.iter().chain(&DATA) {
        let (status, body) = sql(
            c.http(n),
            Some(("alice", "wonderland")),
            "SELECT name FROM sys.nodes",
        )
        .await;
        assert_eq!(status, 200, "alice on {n}: {body}");
        let (status, _) = sql(c.http(n), Some(("alice", "wrong")), "SELECT 1").await;
        assert_eq!(status, 401, "a wrong password on {n}");
        assert_eq!(
            pg_login(c.psql(n), "alice", "wonderland").await.as_deref(),
            Ok("standin-test"),
            "PG wire login on {n}"
        );
        assert!(pg_login(c.psql(n), "alice", "wrong").await.is_err());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_master_elects_another_and_the_state_survives() {
    let mut c = TestCluster::new();
    c.start_all().await;
    let first = c.formed(5).await;
    licensed(&c, "m2").await;
    ok(c.http("d0"), "CREATE USER bob WITH (password = 'builder')").await;
    ok(
        c.http("d0"),
        "CREATE TABLE doc.t (x int) CLUSTERED INTO 2 SHARDS WITH (number_of_replicas = 1)",
    )
    .await;

    c.stop(&first).await;
    let second = c.formed(4).await;
    assert_ne!(second, first);
    for n in c.running.keys() {
        let (status, body) = sql(c.http(n), Some(("bob", "builder")), "SELECT 1").await;
        assert_eq!(status, 200, "bob on {n} after the fail-over: {body}");
        let tables = ok(
            c.http(n),
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'doc'",
        )
        .await;
        assert_eq!(tables["rows"], json!([["t"]]));
    }
    // The new master takes writes, also forwarded from a data node.
    ok(c.http("d1"), "CREATE USER carol").await;
    let users = ok(
        c.http(&second),
        "SELECT name FROM sys.users WHERE name = 'carol'",
    )
    .await;
    assert_eq!(users["rowcount"], 1);

    // The old master comes back as a follower of the new one.
    c.start(&first).await;
    let now = c.formed(5).await;
    assert_eq!(
        now, second,
        "a returning node does not take the master role back"
    );
    let users = ok(
        c.http(&first),
        "SELECT name FROM sys.users WHERE name = 'carol'",
    )
    .await;
    assert_eq!(users["rowcount"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_three_masters_lost_block_the_cluster_until_one_returns() {
    let mut c = TestCluster::new();
    c.start_all().await;
    c.formed(5).await;
    licensed(&c, "m0").await;
    ok(
        c.http("m0"),
        "CREATE TABLE doc.t (x int) CLUSTERED INTO 2 SHARDS WITH (number_of_replicas = 1)",
    )
    .await;
    wait_for("t GREEN", || async {
        (health(c.http("d0"), "t").await.as_deref() == Some("GREEN")).then_some(())
    })
    .await;

    c.stop("m0").await;
    c.stop("m1").await;
    for n in ["m2", "d0", "d1"] {
        // Writes fail at once (the master does not answer); the node's view turns RED once
        // the liveness timeout has passed.
        wait_for(&format!("{n} blocked and RED"), || async {
            let (_, body) = sql(c.http(n), None, "CREATE USER blocked").await;
            let red = health(c.http(n), "t").await.as_deref() == Some("RED");
            (body["error"]["code"] == 5000 && red).then_some(())
        })
        .await;
        let (status, body) = sql(c.http(n), None, "CREATE TABLE doc.other (x int)").await;
        assert_eq!(
            (status, body["error"]["code"].clone()),
            (500, json!(5000)),
            "{n}: {body}"
        );
        let master = ok(c.http(n), "SELECT master_node FROM sys.cluster").await;
        assert_eq!(master["rows"], json!([[null]]), "{n}");
        let (_, body) = sql(c.http(n), None, "SELECT missing_shards FROM sys.health").await;
        assert_eq!(body["rows"], json!([[-1]]), "{n}");
    }

    c.start("m1").await;
    c.formed(4).await;
    // Accepted once d1 sees the elected master: `formed` saw it, but on a starved machine a
    // node's view may lapse for a liveness timeout (CI once got "no master" here, 1 of many).
    wait_for("d1 accepts writes again", || async {
        let (status, _) = sql(c.http("d1"), None, "CREATE USER unblocked").await;
        (status == 200).then_some(())
    })
    .await;
    wait_for("t GREEN again", || async {
        (health(c.http("m2"), "t").await.as_deref() == Some("GREEN")).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_node_that_leaves_makes_a_table_yellow_until_it_returns() {
    let mut c = TestCluster::new();
    c.start_all().await;
    c.formed(5).await;
    licensed(&c, "m1").await;
    ok(
        c.http("m1"),
        "CREATE TABLE doc.r (x int) CLUSTERED INTO 3 SHARDS WITH (number_of_replicas = 1)",
    )
    .await;
    wait_for("r GREEN", || async {
        (health(c.http("m2"), "r").await.as_deref() == Some("GREEN")).then_some(())
    })
    .await;
    ok(c.http("d1"), "INSERT INTO doc.r (x) VALUES (1), (2)").await;

    c.stop("d1").await;
    wait_for("r YELLOW seen from m2", || async {
        (health(c.http("m2"), "r").await.as_deref() == Some("YELLOW")).then_some(())
    })
    .await;
    let body = ok(
        c.http("d0"),
        "SELECT count(*) FROM sys.shards WHERE table_name = 'r' AND routing_state = 'UNASSIGNED'",
    )
    .await;
    assert_eq!(
        body["rows"],
        json!([[3]]),
        "the three replicas have nowhere to go"
    );
    let rows = ok(c.http("d0"), "SELECT count(*) FROM doc.r").await;
    assert_eq!(rows["rows"], json!([[2]]));

    c.start("d1").await;
    wait_for("r GREEN again", || async {
        (health(c.http("m0"), "r").await.as_deref() == Some("GREEN")).then_some(())
    })
    .await;
    let body = ok(c.http("d1"), "SELECT count(*) FROM sys.shards WHERE table_name = 'r' AND node['name'] = 'd1' AND routing_state = 'STARTED'").await;
    assert_eq!(
        body["rows"],
        json!([[3]]),
        "d1 holds a started copy of each shard again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allocation_exclusion_moves_shards_off_a_node() {
    let mut c = TestCluster::new();
    c.start_all().await;
    c.formed(5).await;
    licensed(&c, "d0").await;
    ok(
        c.http("m0"),
        "CREATE TABLE doc.e (x int) CLUSTERED INTO 4 SHARDS WITH (number_of_replicas = 0)",
    )
    .await;
    let on = |node: &'static str| {
        let addr = c.http("m2");
        async move {
            let body = ok(addr, &format!("SELECT count(*) FROM sys.shards WHERE table_name = 'e' AND node['name'] = '{node}' AND routing_state = 'STARTED'")).await;
            body["rows"][0][0].as_i64().unwrap_or(-1)
        }
    };
    wait_for("shards on both data nodes", || async {
        (on("d0").await == 2 && on("d1").await == 2).then_some(())
    })
    .await;

    ok(
        c.http("d1"),
        "SET GLOBAL TRANSIENT \"cluster.routing.allocation.exclude._name\" = 'd1'",
    )
    .await;
    wait_for("every shard on d0", || async {
        (on("d0").await == 4 && on("d1").await == 0).then_some(())
    })
    .await;
    let body = ok(
        c.http("d1"),
        "SELECT count(*) FROM sys.shards WHERE node['name'] = 'd1'",
    )
    .await;
    assert_eq!(body["rows"], json!([[0]]), "d1 sees itself drained");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_restart_keeps_users_tables_settings_and_license() {
    let mut c = TestCluster::new();
    c.start_all().await;
    c.formed(5).await;
    licensed(&c, "m0").await;
    ok(c.http("d0"), "CREATE USER dave WITH (password = 'diver')").await;
    ok(c.http("d0"), "GRANT DQL TO dave").await;
    ok(
        c.http("m1"),
        "CREATE TABLE doc.kept (x int) CLUSTERED INTO 2 SHARDS WITH (number_of_replicas = 1)",
    )
    .await;
    wait_for("kept GREEN", || async {
        (health(c.http("m2"), "kept").await.as_deref() == Some("GREEN")).then_some(())
    })
    .await;
    ok(c.http("m1"), "INSERT INTO doc.kept (x) VALUES (42)").await;
    ok(
        c.http("m2"),
        "SET GLOBAL PERSISTENT \"cluster.routing.allocation.exclude._name\" = 'nobody'",
    )
    .await;
    ok(
        c.http("m2"),
        "SET GLOBAL TRANSIENT \"stats.enabled\" = false",
    )
    .await;
    // Every node holds the latest version before the restart.
    let version = c.running[&c.master().unwrap()].state.version();
    wait_for("every node at the latest version", || async {
        c.running
            .values()
            .all(|r| r.state.version() >= version)
            .then_some(())
    })
    .await;

    for n in MASTERS.iter().chain(&DATA) {
        c.stop(n).await;
    }
    c.start_all().await;
    c.formed(5).await;
    for n in MASTERS.iter().chain(&DATA) {
        let (status, body) =
            sql(c.http(n), Some(("dave", "diver")), "SELECT x FROM doc.kept").await;
        assert_eq!(status, 200, "dave on {n}: {body}");
        assert_eq!(body["rows"], json!([[42]]));
        let settings = ok(c.http(n), "SELECT settings['cluster']['routing']['allocation']['exclude']['_name'], settings['stats'], license['issued_to'] FROM sys.cluster").await;
        assert_eq!(
            settings["rows"],
            json!([["nobody", null, "steward-tests"]]),
            "persistent settings and the license survive, transient ones do not ({n})"
        );
    }
    assert!(pg_login(c.psql("d1"), "dave", "diver").await.is_ok());
    wait_for("kept GREEN after the restart", || async {
        (health(c.http("d1"), "kept").await.as_deref() == Some("GREEN")).then_some(())
    })
    .await;
}
