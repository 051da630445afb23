//! Backup and restore with real stand-in processes: `fdbbackup`, `backup_agent`, `fdbrestore`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, Cluster, Guard, KNOBS, holder};
use serde_json::Value;

fn tool(name: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg(name)
        .args(args)
        .envs(KNOBS)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn backup(c: &Cluster, args: &[&str]) -> (i32, String, String) {
    let f = c.cluster_file.to_str().unwrap();
    let mut all = vec![args[0], "-C", f];
    all.extend_from_slice(&args[1..]);
    tool("fdbbackup", &all)
}

fn backup_ok(c: &Cluster, args: &[&str]) -> String {
    let (code, out, err) = backup(c, args);
    assert_eq!(code, 0, "fdbbackup {args:?} failed: {out}{err}");
    out.trim().to_owned()
}

fn restore(c: &Cluster, args: &[&str]) -> (i32, String, String) {
    let f = c.cluster_file.to_str().unwrap();
    let mut all = vec![args[0], "--dest-cluster-file", f];
    all.extend_from_slice(&args[1..]);
    tool("fdbrestore", &all)
}

fn status(c: &Cluster) -> Value {
    serde_json::from_str(&backup_ok(c, &["status", "-t", "default", "--json"])).unwrap()
}

fn lrv(s: &Value) -> u64 {
    s["LatestRestorablePoint"]["Version"].as_u64().unwrap_or(0)
}

fn wait_backup(c: &Cluster, what: &str, secs: u64, f: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let s = status(c);
        if f(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn agent(c: &Cluster, n: usize) -> Guard {
    let log = std::fs::File::create(c.dir.path().join(format!("agent-{n}.log"))).unwrap();
    Guard(
        Command::new(BIN)
            .arg("backup_agent")
            .args(["-C", c.cluster_file.to_str().unwrap(), "--log"])
            .envs(KNOBS)
            .env("FDB_STANDIN_BACKUP_POLL_MS", "200")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

/// The version of the last `Committed (<v>)` line.
fn committed(out: &str) -> u64 {
    out.lines()
        .rev()
        .find_map(|l| l.strip_prefix("Committed (")?.strip_suffix(')'))
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_backup_runs_with_agents_survives_recovery_and_restores_into_an_empty_database() {
    let mut c = Cluster::configured(3, 3, "double ssd");
    let sets: String = (0..10).map(|i| format!("; set k{i} v{i}")).collect();
    let w1 = committed(&c.ok(&format!("writemode on{sets}")));
    let s = status(&c);
    assert_eq!(s["Status"]["Name"], "has never been started");
    assert_eq!(s["BackupAgentsPaused"], false);

    let dir = c.dir.path().join("backups/b1");
    let url = format!("file://{}", dir.display());
    let (code, _, err) = backup(
        &c,
        &["start", "-d", "blobstore://k@h:80/b", "-t", "default"],
    );
    assert_eq!(code, 1);
    assert!(err.contains("`blobstore'"), "{err}");
    assert_eq!(
        backup_ok(&c, &["start", "-d", &url, "-t", "default"]),
        "The backup on tag `default' was successfully submitted."
    );
    let (code, _, err) = backup(&c, &["start", "-d", &url]);
    assert_eq!(code, 1);
    assert!(
        err.contains("ERROR: A backup is already running on tag `default'"),
        "{err}"
    );

    // Without an agent nothing happens.
    std::thread::sleep(Duration::from_secs(2));
    let s = status(&c);
    assert_eq!(s["Status"]["Name"], "has been submitted");
    assert_eq!(s["Status"]["Running"], true);
    assert_eq!(s["Restorable"], false);
    assert!(s.get("LatestRestorablePoint").is_none());
    assert_eq!(s["DestinationURL"], url.as_str());
    assert_eq!(s["SnapshotIntervalSeconds"], 864_000);
    let uid = s["UID"].as_str().unwrap().to_owned();
    assert!(!uid.is_empty());

    // Two agents: one does the work, both are counted.
    let a1 = agent(&c, 1);
    let _a2 = agent(&c, 2);
    let s = wait_backup(&c, "a restorable backup", 10, |s| {
        s["Restorable"] == true && lrv(s) >= w1
    });
    assert_eq!(s["Status"]["Name"], "is differential");
    assert!(std::fs::read_dir(&dir).unwrap().any(|e| {
        e.unwrap()
            .file_name()
            .to_str()
            .unwrap()
            .starts_with("snapshot-")
    }));
    let cs = c.wait_for("two agents", 10, |s| {
        s["cluster"]["layers"]["backup"]["instances_running"] == 2
    });
    let layer = &cs["cluster"]["layers"];
    assert_eq!(layer["_valid"], true);
    assert_eq!(layer["backup"]["paused"], false);
    let t = &layer["backup"]["tags"]["default"];
    assert_eq!(t["current_container"], url.as_str());
    assert_eq!(t["running_backup"], true);
    assert_eq!(t["running_backup_is_restorable"], true);
    assert_eq!(t["mutation_stream_id"], uid.as_str());
    assert!(t["last_restorable_version"].as_u64().unwrap() >= w1);

    // Later writes reach the backup within about two seconds.
    let w2 = committed(&c.ok("writemode on; set k10 v10; clear k0"));
    let started = Instant::now();
    wait_backup(&c, "the later writes", 5, |s| lrv(s) >= w2);
    assert!(started.elapsed() < Duration::from_secs(4));

    // Paused agents make no progress.
    assert_eq!(
        backup_ok(&c, &["pause"]),
        "All backup agents have been paused."
    );
    // (A round begun before the pause may still finish: wait until the point holds still.)
    let mut frozen = lrv(&status(&c));
    loop {
        std::thread::sleep(Duration::from_millis(700));
        let s = status(&c);
        assert_eq!(s["BackupAgentsPaused"], true);
        if lrv(&s) == frozen {
            break;
        }
        frozen = lrv(&s);
    }
    let wp = committed(&c.ok("writemode on; set p1 during-pause"));
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(lrv(&status(&c)), frozen);
    assert!(frozen < wp);
    assert_eq!(
        backup_ok(&c, &["resume"]),
        "All backup agents have been resumed."
    );
    wait_backup(&c, "progress after resume", 5, |s| {
        s["BackupAgentsPaused"] == false && lrv(s) >= wp
    });

    // Modify the snapshot interval.
    backup_ok(&c, &["modify", "-t", "default", "-s", "3600"]);
    assert_eq!(status(&c)["SnapshotIntervalSeconds"], 3600);
    backup_ok(&c, &["modify", "--active-snapshot-interval", "7200"]);
    assert_eq!(status(&c)["SnapshotIntervalSeconds"], 7200);
    let (code, _, err) = backup(&c, &["modify", "-t", "nope", "-s", "1"]);
    assert_eq!(code, 1);
    assert!(err.contains("No backup is running on tag `nope'"), "{err}");

    // The backup survives losing the cluster controller.
    let cc = holder(&c.status(), "cluster_controller").unwrap();
    c.kill(&cc);
    c.wait_for("a new controller", 15, |s| {
        s["cluster"]["database_available"] == true
            && holder(s, "cluster_controller").is_some_and(|h| h != cc)
    });
    let w3 = committed(&c.ok("writemode on; set k11 after-recovery"));
    let s = wait_backup(&c, "progress after recovery", 10, |s| lrv(s) >= w3);
    assert_eq!(s["UID"], uid.as_str());
    assert_eq!(s["Status"]["Name"], "is differential");

    // Losing an agent: the other one takes the work over once the lease lapses.
    drop(a1);
    let w4 = committed(&c.ok("writemode on; set k12 one-agent"));
    wait_backup(&c, "progress with one agent", 10, |s| lrv(s) >= w4);

    // Restoring into a non-empty database is refused.
    let (code, _, err) = restore(&c, &["start", "-r", &url, "-w"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("ERROR: Attempted to restore into a non-empty destination database"),
        "{err}"
    );

    // Discontinue: the backup completes.
    let out = backup_ok(&c, &["discontinue", "-t", "default"]);
    assert!(out.contains("discontinued"), "{out}");
    let done = wait_backup(&c, "a completed backup", 10, |s| {
        s["Status"]["Name"] == "has been completed"
    });
    assert_eq!(done["Status"]["Running"], false);
    assert_eq!(done["Status"]["Completed"], true);
    assert_eq!(done["Restorable"], true);
    let last = lrv(&done);
    assert!(last >= w3);

    // Empty the normal keyspace (a system key does not count), then restore.
    c.ok(r"writemode on; clearrange \x00 \xff; set \xff\x02/standin-test x");
    let (code, out, err) = restore(&c, &["start", "-r", &url, "-w", "-t", "default"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.trim(),
        format!("Restoring backup to version: {last}\nRestored to version {last}")
    );
    for i in 1..10 {
        assert_eq!(
            c.ok(&format!("get k{i}")).trim(),
            format!("`k{i}' is `v{i}'")
        );
    }
    assert_eq!(c.ok("get k0").trim(), "`k0': not found");
    assert_eq!(c.ok("get k10").trim(), "`k10' is `v10'");
    assert_eq!(c.ok("get k11").trim(), "`k11' is `after-recovery'");
    assert_eq!(c.ok("get p1").trim(), "`p1' is `during-pause'");
    assert_eq!(c.ok("get k12").trim(), "`k12' is `one-agent'");
    let (code, out, _) = restore(&c, &["status"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("completed") && out.contains(&last.to_string()) && out.contains("default"),
        "{out}"
    );

    // A point in time: before the write made while paused.
    c.ok(r"writemode on; clearrange \x00 \xff");
    let (code, out, err) = restore(&c, &["start", "-r", &url, "-v", &frozen.to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.trim(), format!("Restoring backup to version: {frozen}"));
    assert_eq!(c.ok("get p1").trim(), "`p1': not found");
    assert_eq!(c.ok("get k10").trim(), "`k10' is `v10'");
    c.ok(r"writemode on; clearrange \x00 \xff");
    let (code, _, err) = restore(&c, &["start", "-r", &url, "-v", &(last + 1).to_string()]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot be restored to version"), "{err}");

    // A new backup may start on the tag once the old one finished; abort ends it.
    backup_ok(&c, &["start", "-d", &url, "-s", "60"]);
    let s = status(&c);
    assert_ne!(s["UID"], uid.as_str());
    assert_eq!(s["SnapshotIntervalSeconds"], 60);
    let out = backup_ok(&c, &["abort"]);
    assert!(out.contains("aborted"), "{out}");
    let s = status(&c);
    assert_eq!(s["Status"]["Name"], "has been aborted");
    assert_eq!(s["Status"]["Running"], false);
}
