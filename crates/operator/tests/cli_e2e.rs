//! The `steward` CLI end to end, as a new user runs it: `steward dev up` (the embedded control
//! plane, a node agent running real PostgreSQL and etcd, the operator serving the REST API),
//! then, with only the `cli.yaml` it wrote: create a PostgreSQL and an etcd cluster and wait
//! with progress, scale, query the fail-over candidates and fail over to a named replica,
//! create a database user and log in to PostgreSQL with it (`psql`), rotate its password,
//! upgrade PostgreSQL 15 → 16 (`steward upgrade cluster --wait`; a refused upgrade and a refused
//! restore end their `--wait` at once), show status as JSON, delete a
//! cluster — and no password in any output or in the plane's log.
//! A second plane runs a small CrateDB cluster (stand-in Pods: `cargo build -p
//! steward-cratedb-standin` first) through the CLI: create with a license, show, scale the
//! data set 1→2 and restart with `--wait`, fail-over refused, delete. A third runs a
//! FoundationDB cluster (stand-in Pods: `cargo build -p steward-fdb-standin`): create, scale a
//! process class, a continuous backup waited for until restorable, a second backup and a restore
//! to a time refused, fail-over refused, delete. A fourth backs up a 3-member etcd cluster
//! (`steward backup --wait`: one snapshot) and restores it (`steward restore --wait`): a new
//! cluster holding exactly the keys written before the snapshot, the source unchanged.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// Runs `steward` with the dev plane's CLI settings, from a directory without `.steward/`.
fn steward(config: &Path, cwd: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_steward"))
        .args(args)
        .env("STEWARD_CONFIG", config)
        .env_remove("STEWARD_PASSWORD")
        .env_remove("STEWARD_SERVER")
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `steward dev down` when the test ends, even by a panic.
struct Down(String);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = Command::new(env!("CARGO_BIN_EXE_steward"))
            .args(["dev", "down", "--state-dir", &self.0])
            .output();
    }
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let bin = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = Command::new(&bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {bin} (set KUBECTL, or run scripts/prereqs.sh): {e}"));
    assert!(out.status.success(), "kubectl {args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `psql` as the user, through the cluster's primary Service; what it printed.
fn psql(host: &str, user: &str, password: &str) -> Output {
    Command::new("psql")
        .args([
            "-h",
            host,
            "-U",
            user,
            "-d",
            user,
            "-tAc",
            "SELECT current_user",
        ])
        .env("PGPASSWORD", password)
        .env("PGCONNECT_TIMEOUT", "5")
        .output()
        .expect("psql (the postgresql package) is installed")
}

#[test]
fn the_cli_creates_waits_scales_fails_over_and_manages_a_user_on_the_dev_plane() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("dev");
    let state_arg = state.to_str().unwrap().to_owned();
    let _down = Down(state_arg.clone());
    let up = Command::new(env!("CARGO_BIN_EXE_steward"))
        .args(["dev", "up", "--state-dir", &state_arg])
        .output()
        .unwrap();
    let said = text(&up);
    assert!(up.status.success(), "{said}");
    assert!(
        said.contains("cli.yaml"),
        "dev up tells where the CLI settings are: {said}"
    );
    let config = state.join("cli.yaml");
    let kubeconfig = state.join("kubeconfig");
    let cwd = dir.path();
    let mut outputs = String::new();
    let mut run = |args: &[&str], stdin: Option<&str>| -> String {
        let out = steward(&config, cwd, args, stdin);
        let t = text(&out);
        outputs.push_str(&t);
        assert!(out.status.success(), "steward {args:?} failed:\n{t}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let json =
        |s: String| -> Value { serde_json::from_str(&s).unwrap_or_else(|e| panic!("{e}: {s}")) };

    // Create both engines and wait: progress lines (stdout is not a terminal), then the cluster.
    let created = run(
        &[
            "create",
            "cluster",
            "pg",
            "--engine",
            "postgres",
            "--instances",
            "2",
            "--wait",
        ],
        None,
    );
    assert!(created.contains("pg"), "{created}");
    let created = run(
        &[
            "create",
            "cluster",
            "kv",
            "--engine",
            "etcd",
            "--instances",
            "3",
            "--wait",
        ],
        None,
    );
    assert!(created.contains("kv"), "{created}");
    let list = run(&["show", "cluster"], None);
    assert!(list.contains("pg") && list.contains("kv"), "{list}");

    // Scale PostgreSQL to 3: the wait ends with three ready instances.
    run(&["scale", "pg", "--instances", "3", "--wait"], None);
    let pg = json(run(&["show", "cluster", "pg", "-o", "json"], None));
    assert_eq!(pg["status"]["readyInstances"], 3, "{pg}");

    // Fail over to a named replica.
    let candidates = json(run(&["failover", "pg", "--query", "-o", "json"], None));
    let primary = candidates["primary"].as_str().unwrap().to_owned();
    let target = candidates["candidates"].as_array().unwrap().last().unwrap()["name"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(primary, target);
    run(&["failover", "pg", "--target", &target, "--wait"], None);
    let pg = json(run(&["show", "cluster", "pg", "-o", "json"], None));
    assert_eq!(pg["engine"], "postgres");
    assert_eq!(pg["status"]["currentPrimary"], target.as_str(), "{pg}");

    // A database user: created with a password from stdin, then used to log in.
    let password = "Cli-E2e-Password-7";
    run(
        &[
            "create",
            "user",
            "pg",
            "--username",
            "app",
            "--database",
            "app",
            "--password-stdin",
        ],
        Some(password),
    );
    let host = kubectl(
        &kubeconfig,
        &[
            "get",
            "service",
            "pg-primary",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ],
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let out = psql(&host, "app", password);
        if out.status.success() {
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "app");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "app never logged in: {}",
            text(&out)
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let users = json(run(&["show", "user", "pg", "-o", "json"], None));
    assert_eq!(users["users"][0]["name"], "app", "{users}");
    // Rotated: the new password works, the old one stops working.
    let rotated = "Cli-E2e-Rotated-8";
    run(
        &[
            "update",
            "user",
            "pg",
            "--username",
            "app",
            "--password-stdin",
        ],
        Some(rotated),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while !psql(&host, "app", rotated).status.success() {
        assert!(
            std::time::Instant::now() < deadline,
            "the rotated password never worked"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    assert!(
        !psql(&host, "app", password).status.success(),
        "the old password still works"
    );

    // A major-version upgrade through the CLI (pg_upgrade 15 → 16; no repository, so no
    // backup is needed): the user and its rotated password survive it.
    let upgraded = run(
        &[
            "upgrade",
            "cluster",
            "pg",
            "--to",
            "16",
            "--wait",
            "--timeout",
            "300",
        ],
        None,
    );
    assert!(
        upgraded.contains("16"),
        "the cluster after the upgrade: {upgraded}"
    );
    let version = kubectl(
        &kubeconfig,
        &[
            "get",
            "postgrescluster",
            "pg",
            "-o",
            "jsonpath={.spec.version}",
        ],
    );
    assert_eq!(version.trim(), "16");
    // Asked again, the upgrade is refused (not newer): `--wait` ends at once with the reason,
    // not after its timeout.
    let asked = std::time::Instant::now();
    let again = steward(
        &config,
        cwd,
        &[
            "upgrade",
            "cluster",
            "pg",
            "--to",
            "16",
            "--wait",
            "--timeout",
            "120",
        ],
        None,
    );
    let said = text(&again);
    assert!(!again.status.success(), "{said}");
    assert!(
        said.contains("failed") && said.contains("16"),
        "the refusal's reason: {said}"
    );
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(60),
        "the refusal took {:?}",
        asked.elapsed()
    );
    // So does a refused restore (this cluster has no repository to restore from).
    let asked = std::time::Instant::now();
    let restore = steward(
        &config,
        cwd,
        &["restore", "pg", "--wait", "--timeout", "120"],
        None,
    );
    let said = text(&restore);
    assert!(!restore.status.success(), "{said}");
    assert!(
        said.contains("failed") && said.contains("no spec.backups.pgbackrest"),
        "the restore's refusal: {said}"
    );
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(60),
        "the restore's refusal took {:?}",
        asked.elapsed()
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while !psql(&host, "app", rotated).status.success() {
        assert!(
            std::time::Instant::now() < deadline,
            "the user cannot log in after the upgrade"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let server = Command::new("psql")
        .args([
            "-h",
            &host,
            "-U",
            "app",
            "-d",
            "app",
            "-tAc",
            "SHOW server_version_num",
        ])
        .env("PGPASSWORD", rotated)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&server.stdout)
            .trim()
            .starts_with("16"),
        "{}",
        text(&server)
    );

    // etcd as JSON; then delete it and wait until it is gone.
    let kv = json(run(&["show", "cluster", "kv", "-o", "json"], None));
    assert_eq!(
        (kv["engine"].as_str(), kv["status"]["readyMembers"].as_i64()),
        (Some("etcd"), Some(3))
    );
    run(&["delete", "cluster", "kv", "--wait"], None);
    let list = run(&["show", "cluster"], None);
    assert!(!list.contains("kv"), "{list}");

    // No password in anything the CLI printed, nor in the plane's log (operator and API).
    let log = std::fs::read_to_string(state.join("dev.log")).unwrap_or_default();
    for secret in [password, rotated] {
        assert!(!outputs.contains(secret), "the CLI printed a password");
        assert!(!log.contains(secret), "a password reached dev.log");
    }
    let admin: serde_json::Value = {
        let text = std::fs::read_to_string(&config).unwrap();
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("password: "))
            .unwrap()
            .trim()
            .trim_matches('"')
            .to_owned();
        Value::String(line)
    };
    let admin = admin.as_str().unwrap();
    assert!(
        !outputs.contains(admin) && !log.contains(admin),
        "the admin password leaked"
    );
    assert!(
        log.contains("steward::audit"),
        "mutating calls are audited in the log"
    );
}

/// `steward dev up` in a temporary directory; the guard that takes it down, the state directory.
fn dev_up(dir: &Path) -> (Down, std::path::PathBuf) {
    let state = dir.join("dev");
    let state_arg = state.to_str().unwrap().to_owned();
    let down = Down(state_arg.clone());
    let up = Command::new(env!("CARGO_BIN_EXE_steward"))
        .args(["dev", "up", "--state-dir", &state_arg])
        .output()
        .unwrap();
    assert!(up.status.success(), "{}", text(&up));
    (down, state)
}

#[test]
fn the_cli_creates_scales_a_node_set_and_restarts_a_cratedb_cluster() {
    let standin = Path::new(env!("CARGO_BIN_EXE_steward")).with_file_name("cratedb-standin");
    assert!(
        standin.exists(),
        "{} is missing: cargo build -p steward-cratedb-standin",
        standin.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let (_down, state) = dev_up(dir.path());
    let config = state.join("cli.yaml");
    let cwd = dir.path();
    let run = |args: &[&str]| -> String {
        let out = steward(&config, cwd, args, None);
        assert!(
            out.status.success(),
            "steward {args:?} failed:\n{}",
            text(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let json =
        |s: String| -> Value { serde_json::from_str(&s).unwrap_or_else(|e| panic!("{e}: {s}")) };
    // 4 nodes: over the 3 CrateDB 4.x allows without a license (the stand-in's key format).
    kubectl(
        &state.join("kubeconfig"),
        &[
            "create",
            "secret",
            "generic",
            "cc-license",
            "--from-literal=license=standin:e2e:16",
        ],
    );
    // 3 masters and the data set "hot" of 1; the health gate shortened for the test.
    let created = run(&[
        "create",
        "cluster",
        "cc",
        "--engine",
        "cratedb",
        "--replicas",
        "1",
        "--node-set",
        "hot",
        "--storage",
        "1Gi",
        "--set-string",
        "cluster.license.secretKeyRef.name=cc-license",
        "--set-string",
        "cluster.license.secretKeyRef.key=license",
        "--set",
        "restart.greenReadings=1",
        "--set",
        "restart.greenIntervalSeconds=1",
        "--wait",
    ]);
    assert!(created.contains("NODE SET"), "{created}");
    let table = run(&["show", "cluster", "cc"]);
    assert!(
        table.contains("Engine:") && table.contains("cratedb") && table.contains("4/4 ready"),
        "{table}"
    );
    let list = run(&["show", "cluster"]);
    assert!(list.contains("cratedb") && list.contains("cc"), "{list}");
    let cc = json(run(&["show", "cluster", "cc", "-o", "json"]));
    assert_eq!(cc["status"]["readyNodes"], 4, "{cc}");
    assert_eq!(cc["status"]["health"], "GREEN", "{cc}");

    // Scale needs the node set; then the data set grows 1 -> 2.
    let out = steward(&config, cwd, &["scale", "cc", "--replicas", "2"], None);
    assert!(!out.status.success());
    assert!(text(&out).contains("master, hot"), "{}", text(&out));
    run(&[
        "scale",
        "cc",
        "--replicas",
        "2",
        "--node-set",
        "hot",
        "--wait",
    ]);
    let cc = json(run(&["show", "cluster", "cc", "-o", "json"]));
    let hot = cc["status"]["nodeSets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "hot")
        .cloned()
        .unwrap();
    assert_eq!(
        (hot["replicas"].as_i64(), hot["ready"].as_i64()),
        (Some(2), Some(2)),
        "{cc}"
    );
    assert_eq!(cc["status"]["readyNodes"], 5, "{cc}");

    // A rolling restart, waited for: every node restarted, the annotation rolled out.
    run(&["restart", "cc", "--wait"]);
    let cc = json(run(&["show", "cluster", "cc", "-o", "json"]));
    let last = &cc["status"]["lastOperation"];
    assert_eq!(
        (last["kind"].as_str(), last["phase"].as_str()),
        (Some("Restart"), Some("Succeeded")),
        "{cc}"
    );
    assert_eq!(
        cc["status"]["restartedAt"],
        cc["spec"]["podTemplate"]["annotations"]["steward.dev/restarted-at"],
        "{cc}"
    );
    assert_eq!(cc["status"]["readyNodes"], 5, "{cc}");

    // Fail-over does not apply to CrateDB.
    let out = steward(&config, cwd, &["failover", "cc"], None);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("CrateDB has no primary"),
        "{}",
        text(&out)
    );

    run(&["delete", "cluster", "cc", "--wait"]);
    let list = run(&["show", "cluster"]);
    assert!(!list.contains("cc"), "{list}");
}

#[test]
fn the_cli_creates_scales_backs_up_and_deletes_a_foundationdb_cluster() {
    let standin = Path::new(env!("CARGO_BIN_EXE_steward")).with_file_name("fdb-standin");
    assert!(
        standin.exists(),
        "{} is missing: cargo build -p steward-fdb-standin",
        standin.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let (_down, state) = dev_up(dir.path());
    let config = state.join("cli.yaml");
    let cwd = dir.path();
    let run = |args: &[&str]| -> String {
        let out = steward(&config, cwd, args, None);
        assert!(
            out.status.success(),
            "steward {args:?} failed:\n{}",
            text(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let json =
        |s: String| -> Value { serde_json::from_str(&s).unwrap_or_else(|e| panic!("{e}: {s}")) };
    // One Node is one fault domain: single redundancy.
    run(&[
        "create",
        "cluster",
        "fdb",
        "--engine",
        "foundationdb",
        "--replicas",
        "2",
        "--storage",
        "1Gi",
        "--set-string",
        "databaseConfiguration.redundancyMode=single",
        "--wait",
    ]);
    let reconciled = |want: u64| {
        for _ in 0..240 {
            let c = json(run(&["show", "cluster", "fdb", "-o", "json"]));
            let generation = c["generation"].as_u64();
            if c["status"]["generations"]["reconciled"].as_u64() == generation
                && generation >= Some(want)
                && c["status"]["health"]["available"] == true
            {
                return c;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        panic!("fdb not reconciled at generation {want}");
    };
    let c = reconciled(1);
    assert_eq!(c["status"]["configured"], true, "{c}");
    // Scale names the process class.
    let out = steward(&config, cwd, &["scale", "fdb", "--replicas", "3"], None);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("storage, log, stateless"),
        "{}",
        text(&out)
    );
    run(&[
        "scale",
        "fdb",
        "--replicas",
        "3",
        "--node-set",
        "storage",
        "--wait",
    ]);
    let c = reconciled(2);
    let storage = c["status"]["processGroups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["processClass"] == "storage" && g.get("removalTimestamp").is_none())
        .count();
    assert_eq!(storage, 3, "{c}");
    // A continuous backup, waited for until restorable; a second one is refused.
    let backup = run(&["backup", "fdb", "--wait"]);
    assert!(
        backup.contains("continuous") && backup.contains("Completed"),
        "{backup}"
    );
    let out = steward(&config, cwd, &["backup", "fdb"], None);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("already has a backup"),
        "{}",
        text(&out)
    );
    let out = steward(
        &config,
        cwd,
        &["restore", "fdb", "--target-time", "2026-01-01T00:00:00Z"],
        None,
    );
    assert!(!out.status.success());
    assert!(text(&out).contains("version"), "{}", text(&out));
    // A restore of that backup into the (empty) database, followed until it completes, then
    // the cluster shown.
    let restored = run(&["restore", "fdb", "--wait", "--timeout", "240"]);
    assert!(restored.contains("fdb"), "{restored}");
    let restores = kubectl(
        &state.join("kubeconfig"),
        &[
            "get",
            "foundationdbrestores",
            "-o",
            "jsonpath={.items[*].status.state}",
        ],
    );
    assert_eq!(restores.trim(), "Completed");
    // Users and fail-over do not apply.
    let out = steward(&config, cwd, &["failover", "fdb"], None);
    assert!(!out.status.success());
    assert!(text(&out).contains("no primary"), "{}", text(&out));
    run(&["delete", "cluster", "fdb", "--wait"]);
    let list = run(&["show", "cluster"]);
    assert!(!list.contains("fdb"), "{list}");
}

/// The etcd client of cluster `name` on the dev plane (its `-client` Service), once it answers.
async fn etcd_client(kubeconfig: &Path, name: &str) -> etcd_client::Client {
    let ip = kubectl(
        kubeconfig,
        &[
            "get",
            "service",
            &format!("{name}-client"),
            "-o",
            "jsonpath={.spec.clusterIP}",
        ],
    );
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(std::time::Duration::from_secs(2))
        .with_timeout(std::time::Duration::from_secs(5));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Ok(mut c) = etcd_client::Client::connect(
            [format!("http://{}:2379", ip.trim())],
            Some(options.clone()),
        )
        .await
            && c.status().await.is_ok()
        {
            return c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name} never answered"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

async fn etcd_keys(client: &mut etcd_client::Client, prefix: &str) -> Vec<String> {
    let got = client
        .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .unwrap();
    got.kvs()
        .iter()
        .map(|kv| kv.key_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_cli_backs_up_an_etcd_cluster_and_restores_the_snapshot_into_a_new_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let (_down, state) = dev_up(dir.path());
    let config = state.join("cli.yaml");
    let kubeconfig = state.join("kubeconfig");
    let cwd = dir.path();
    let run = |args: &[&str]| -> String {
        let out = steward(&config, cwd, args, None);
        assert!(
            out.status.success(),
            "steward {args:?} failed:\n{}",
            text(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let refused = |args: &[&str]| -> String {
        let out = steward(&config, cwd, args, None);
        assert!(!out.status.success(), "steward {args:?} succeeded");
        text(&out)
    };
    let json =
        |s: String| -> Value { serde_json::from_str(&s).unwrap_or_else(|e| panic!("{e}: {s}")) };
    let rt = tokio::runtime::Runtime::new().unwrap();

    run(&[
        "create",
        "cluster",
        "kv",
        "--engine",
        "etcd",
        "--instances",
        "3",
        "--wait",
    ]);
    let mut src = rt.block_on(etcd_client(&kubeconfig, "kv"));
    rt.block_on(async {
        for i in 0..20 {
            src.put(format!("before/{i:02}"), "v", None).await.unwrap();
        }
    });
    // Nothing to restore yet; a snapshot is a full one.
    let said = refused(&["restore", "kv"]);
    assert!(said.contains("no Completed backup"), "{said}");
    let said = refused(&["backup", "kv", "--type", "diff"]);
    assert!(said.contains("an etcd backup is a snapshot"), "{said}");

    // One snapshot, waited for until Completed.
    let backup = json(run(&["backup", "kv", "--wait", "-o", "json"]));
    assert_eq!(
        (&backup["phase"], &backup["method"]),
        (&Value::from("Completed"), &Value::from("snapshot")),
        "{backup}"
    );
    let snapshot = backup["name"].as_str().unwrap().to_owned();
    let list = run(&["show", "backup", "kv"]);
    assert!(
        list.contains(&snapshot) && list.contains("revision"),
        "{list}"
    );
    rt.block_on(async {
        src.put("after/0", "late", None).await.unwrap();
    });

    // A snapshot is restored as it was taken; then into a new cluster, followed until all
    // three members are healthy, and shown.
    let said = refused(&["restore", "kv", "--target-time", "2026-01-01T00:00:00Z"]);
    assert!(said.contains("as it was taken"), "{said}");
    let restored = json(run(&[
        "restore",
        "kv",
        "--wait",
        "--timeout",
        "300",
        "-o",
        "json",
    ]));
    let name = restored["name"].as_str().unwrap().to_owned();
    assert!(name.starts_with("kv-restore-"), "{restored}");
    assert_eq!(
        (
            restored["engine"].as_str(),
            restored["spec"]["dataSource"]["backup"].as_str(),
            restored["status"]["readyMembers"].as_i64()
        ),
        (Some("etcd"), Some(snapshot.as_str()), Some(3)),
        "{restored}"
    );
    let mut dst = rt.block_on(etcd_client(&kubeconfig, &name));
    let (before, after) = rt.block_on(async {
        (
            etcd_keys(&mut dst, "before/").await,
            etcd_keys(&mut dst, "after/").await,
        )
    });
    assert_eq!(before.len(), 20, "every key written before the snapshot");
    assert!(after.is_empty(), "nothing written after it: {after:?}");
    let kept = rt.block_on(etcd_keys(&mut src, "after/"));
    assert_eq!(kept, ["after/0"], "the source is not changed");
    let list = run(&["show", "cluster"]);
    assert!(list.contains(&name) && list.contains("kv"), "{list}");

    run(&["delete", "cluster", &name, "--wait"]);
    run(&["delete", "cluster", "kv", "--wait"]);
}
