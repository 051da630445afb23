//! The monitor: runs servers from its configuration, restarts killed ones, rejects bad
//! configurations, reports its state; the sidecar provides another version's binary; servers
//! die with their monitor.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, Guard, KNOBS, cli_with, free_port};
use serde_json::Value;

fn config(version: &str, port: u16, extra_env: &str) -> String {
    format!(
        r#"{{"version": "{version}", "serverCount": 1, "arguments": [
  {{"value": "--cluster_file"}}, {{"value": "DATA/fdb.cluster"}},
  {{"value": "--public_address"}},
  {{"type": "Concatenate", "values": [{{"type": "Environment", "source": "FDB_PUBLIC_IP"}},
     {{"value": ":"}}, {{"type": "ProcessNumber", "offset": {}, "multiplier": 1}}]}},
  {{"value": "--class"}}, {{"value": "storage"}},
  {{"value": "--datadir"}}, {{"value": "DATA"}},
  {{"value": "--locality_instance_id"}}, {{"type": "Environment", "source": "{extra_env}"}},
  {{"value": "--locality_zoneid"}}, {{"type": "Environment", "source": "FDB_ZONE_ID"}},
  {{"value": "--knob_max_trace_lines=1000"}}
]}}"#,
        port - 1
    )
}

fn report(data: &Path) -> Value {
    let out = Command::new(BIN)
        .args([
            "fdb-kubernetes-monitor",
            "report",
            "--data-dir",
            data.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn wait(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn status(file: &Path) -> Option<Value> {
    let (code, out, _) = cli_with(file, "status json", 2);
    (code == 0).then(|| serde_json::from_str(&out).unwrap())
}

fn uptime(s: &Value) -> Option<f64> {
    s["cluster"]["processes"].as_object()?.values().next()?["uptime_seconds"].as_f64()
}

#[test]
fn the_monitor_runs_restarts_and_rejects() {
    let dir = tempfile::tempdir().unwrap();
    let (input, data, shared) = (
        dir.path().join("in"),
        dir.path().join("data"),
        dir.path().join("shared"),
    );
    for d in [&input, &data, &shared] {
        std::fs::create_dir_all(d).unwrap();
    }
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    std::fs::write(input.join("fdb.cluster"), format!("mon:id1@{addr}\n")).unwrap();
    let good = config("7.1.57", port, "FDB_INSTANCE_ID").replace("DATA", data.to_str().unwrap());
    std::fs::write(input.join("config.json"), &good).unwrap();
    let monitor = Command::new(BIN)
        .arg("fdb-kubernetes-monitor")
        .args([
            "--input-dir",
            input.to_str().unwrap(),
            "--input-monitor-conf",
            "config.json",
        ])
        .args([
            "--data-dir",
            data.to_str().unwrap(),
            "--shared-binary-dir",
            shared.to_str().unwrap(),
        ])
        .args(["--main-container-version", "7.1.57"])
        .envs(KNOBS)
        .env("FDB_PUBLIC_IP", "127.0.0.1")
        .env("FDB_POD_IP", "127.0.0.1")
        .env("FDB_MACHINE_ID", "pod-1")
        .env("FDB_ZONE_ID", "node-1")
        .env("FDB_INSTANCE_ID", "storage-1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut monitor = Guard(monitor);
    let file = data.join("fdb.cluster");
    wait("the cluster file copy", 5, || file.exists());
    wait("a controller", 15, || {
        status(&file).is_some_and(|s| s["cluster"]["recovery_state"]["name"].is_string())
    });
    let r = report(&data);
    assert_eq!(r["rejected"], Value::Null);
    let current: Value = serde_json::from_str(r["currentConfiguration"].as_str().unwrap()).unwrap();
    assert_eq!(current["version"], "7.1.57");
    assert_eq!(r["environment"]["FDB_INSTANCE_ID"], "storage-1");
    assert_eq!(r["environment"]["FDB_ZONE_ID"], "node-1");
    let (code, out, err) = cli_with(&file, "configure new single memory", 5);
    assert_eq!(code, 0, "{out}{err}");
    wait("availability", 10, || {
        status(&file).is_some_and(|s| s["cluster"]["database_available"] == true)
    });
    let s = status(&file).unwrap();
    let p = s["cluster"]["processes"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .clone();
    assert_eq!(p["locality"]["instance_id"], "storage-1");
    assert!(
        p["command_line"]
            .as_str()
            .unwrap()
            .starts_with("fdbserver --cluster_file"),
        "{}",
        p["command_line"]
    );

    // fdbcli's kill: the monitor restarts the server.
    std::thread::sleep(Duration::from_millis(1200));
    let before = uptime(&status(&file).unwrap()).unwrap();
    assert!(before >= 1.0);
    let (code, out, err) = cli_with(&file, &format!("kill; kill {addr}"), 5);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Attempted to kill 1 processes"), "{out}");
    wait("the restarted server", 15, || {
        status(&file)
            .and_then(|s| uptime(&s))
            .is_some_and(|u| u < before)
    });

    // A configuration naming a missing variable is rejected; the active one stays.
    let bad = config("7.1.57", port, "FDB_NOPE").replace("DATA", data.to_str().unwrap());
    std::fs::write(input.join("config.json"), &bad).unwrap();
    wait("the rejection", 5, || report(&data)["rejected"].is_string());
    let r = report(&data);
    assert!(r["rejected"].as_str().unwrap().contains("FDB_NOPE"));
    assert_eq!(
        serde_json::from_str::<Value>(r["currentConfiguration"].as_str().unwrap()).unwrap(),
        serde_json::from_str::<Value>(&good).unwrap()
    );
    // So is another version without its binary…
    let next = config("7.1.61", port, "FDB_INSTANCE_ID").replace("DATA", data.to_str().unwrap());
    std::fs::write(input.join("config.json"), &next).unwrap();
    wait("the rejection", 5, || {
        report(&data)["rejected"]
            .as_str()
            .is_some_and(|r| r.contains("7.1.61"))
    });
    // …until the sidecar provides it.
    let sidecar = Command::new(BIN)
        .args([
            "fdb-kubernetes-monitor",
            "--mode",
            "sidecar",
            "--main-container-version",
            "7.1.57",
        ])
        .args([
            "--output-dir",
            shared.to_str().unwrap(),
            "--sidecar-version",
            "7.1.61",
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _sidecar = Guard(sidecar);
    wait("the sidecar's binary", 5, || {
        shared.join("7.1.61/fdbserver").exists()
    });
    std::fs::write(input.join("config.json"), format!("{next}\n")).unwrap();
    wait("the new configuration", 5, || {
        report(&data)["rejected"].is_null()
    });
    let (code, _, _) = cli_with(&file, &format!("kill; kill {addr}"), 5);
    assert_eq!(code, 0);
    wait("the server at 7.1.61", 15, || {
        status(&file).is_some_and(|s| {
            s["cluster"]["processes"]
                .as_object()
                .is_some_and(|m| m.values().any(|p| p["version"] == "7.1.61"))
        })
    });

    // The server dies with its monitor.
    let _ = monitor.0.kill();
    let _ = monitor.0.wait();
    wait("the server to exit", 10, || {
        std::net::TcpStream::connect(&addr).is_err()
    });
}
