//! Real stand-in processes on 127.0.0.1 with free ports in a temp dir, driven with the
//! stand-in's fdbcli; short timings through the knobs. Every process is killed on drop.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_fdb-standin");

/// A free port below Linux's ephemeral range, so a restarted process can bind it again.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = u16::try_from(std::process::id() % 500).unwrap() * 20;
    loop {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 21_000 + (base + offset) % 10_000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// The short timings every test process gets.
pub const KNOBS: [(&str, &str); 5] = [
    ("FDB_STANDIN_HEARTBEAT_MS", "100"),
    ("FDB_STANDIN_LIVENESS_MS", "600"),
    ("FDB_STANDIN_FAILURE_MS", "900"),
    ("FDB_STANDIN_RECOVERY_MS", "300"),
    ("FDB_STANDIN_MOVE_SECONDS", "1"),
];

/// A child killed (and reaped) on drop.
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub struct Server {
    pub address: String,
    pub class: String,
    pub zone: String,
    pub dir: PathBuf,
    pub version: String,
    pub guard: Option<Guard>,
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub servers: BTreeMap<String, Server>,
    /// The cluster file fdbcli is given.
    pub cluster_file: PathBuf,
    /// The first coordinators, in order.
    pub coordinators: Vec<String>,
}

impl Cluster {
    /// `n` servers of `class`, each in its own zone; the first `coordinators` coordinate.
    pub fn new(n: usize, coordinators: usize, class: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let addrs: Vec<String> = (0..n)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let cs = format!("test:abc123@{}", addrs[..coordinators].join(","));
        let cluster_file = dir.path().join("client/fdb.cluster");
        std::fs::create_dir_all(cluster_file.parent().unwrap()).unwrap();
        std::fs::write(&cluster_file, format!("{cs}\n")).unwrap();
        let mut servers = BTreeMap::new();
        for (i, a) in addrs.iter().enumerate() {
            let sdir = dir.path().join(format!("s{i}"));
            std::fs::create_dir_all(&sdir).unwrap();
            std::fs::write(sdir.join("fdb.cluster"), format!("{cs}\n")).unwrap();
            servers.insert(
                a.clone(),
                Server {
                    address: a.clone(),
                    class: class.to_owned(),
                    zone: format!("zone-{i}"),
                    dir: sdir,
                    version: "7.1.57".into(),
                    guard: None,
                },
            );
        }
        let mut c = Self {
            dir,
            servers,
            cluster_file,
            coordinators: addrs[..coordinators].to_vec(),
        };
        let all: Vec<String> = c.servers.keys().cloned().collect();
        for a in all {
            c.start(&a);
        }
        c
    }

    pub fn addresses(&self) -> Vec<String> {
        self.servers.keys().cloned().collect()
    }

    /// The servers that are not first coordinators.
    pub fn others(&self) -> Vec<String> {
        self.servers
            .keys()
            .filter(|a| !self.coordinators.contains(a))
            .cloned()
            .collect()
    }

    /// A new cluster of `n` servers with the database configured (`configure new <how>`).
    pub fn configured(n: usize, coordinators: usize, how: &str) -> Self {
        let c = Self::new(n, coordinators, "storage");
        c.wait_for("a controller", 15, |s| {
            s["cluster"]["recovery_state"]["name"].is_string()
        });
        c.ok(&format!("configure new {how}"));
        c.wait_available();
        c
    }

    /// Adds a server (not a coordinator) with the cluster file of `like`.
    pub fn add(&mut self, class: &str, version: &str) -> String {
        let a = format!("127.0.0.1:{}", free_port());
        let i = self.servers.len();
        let sdir = self.dir.path().join(format!("s{i}"));
        std::fs::create_dir_all(&sdir).unwrap();
        std::fs::copy(&self.cluster_file, sdir.join("fdb.cluster")).unwrap();
        self.servers.insert(
            a.clone(),
            Server {
                address: a.clone(),
                class: class.to_owned(),
                zone: format!("zone-{i}"),
                dir: sdir,
                version: version.to_owned(),
                guard: None,
            },
        );
        self.start(&a);
        a
    }

    pub fn start(&mut self, address: &str) {
        let s = self.servers.get_mut(address).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(s.dir.join("server.log"))
            .unwrap();
        let child = Command::new(BIN)
            .arg("fdbserver")
            .args([
                "--cluster_file",
                s.dir.join("fdb.cluster").to_str().unwrap(),
            ])
            .args(["--public_address", &s.address])
            .args(["--datadir", s.dir.join("data").to_str().unwrap()])
            .args(["--class", &s.class])
            .args(["--locality_zoneid", &s.zone])
            .args(["--locality_instance_id", &format!("{}-{}", s.class, s.zone)])
            .arg("--knob_max_trace_lines=1000")
            .envs(KNOBS)
            .env("FDB_STANDIN_VERSION", &s.version)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        s.guard = Some(Guard(child));
    }

    pub fn kill(&mut self, address: &str) {
        self.servers.get_mut(address).unwrap().guard = None;
    }

    /// fdbcli with this cluster's client cluster file: (exit code, stdout, stderr).
    pub fn cli(&self, cmd: &str, timeout: u32) -> (i32, String, String) {
        cli_with(&self.cluster_file, cmd, timeout)
    }

    /// Runs `cmd`, which must succeed. Its client timeout is generous: on a loaded 2-core CI
    /// machine `configure new` once took longer than 5 s ("transaction timed out (1031)");
    /// a command that succeeds returns as soon as it has, so only a failure waits longer.
    pub fn ok(&self, cmd: &str) -> String {
        let (code, out, err) = self.cli(cmd, 30);
        assert_eq!(code, 0, "`{cmd}` failed: {out}{err}");
        out
    }

    pub fn status(&self) -> Value {
        let out = self.ok("status json");
        serde_json::from_str(&out).unwrap()
    }

    /// Polls `status json` until `f` holds.
    pub fn wait_for(&self, what: &str, secs: u64, f: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.status();
            if f(&s) {
                return s;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what}; last status:\n{}",
                    serde_json::to_string_pretty(&s).unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn wait_available(&self) -> Value {
        self.wait_for("an available database", 15, |s| {
            s["cluster"]["database_available"] == true
                && s["cluster"]["recovery_state"]["name"] == "fully_recovered"
        })
    }
}

pub fn cli_with(cluster_file: &Path, cmd: &str, timeout: u32) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("fdbcli")
        .args(["-C", cluster_file.to_str().unwrap()])
        .args(["--timeout", &timeout.to_string()])
        .args(["--exec", cmd])
        .envs(KNOBS)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The roles of the process at `address` in a status.
pub fn roles(status: &Value, address: &str) -> Vec<String> {
    status["cluster"]["processes"]
        .as_object()
        .unwrap()
        .values()
        .filter(|p| p["address"] == address)
        .flat_map(|p| p["roles"].as_array().unwrap().clone())
        .map(|r| r["role"].as_str().unwrap().to_owned())
        .collect()
}

/// The address holding `role`.
pub fn holder(status: &Value, role: &str) -> Option<String> {
    status["cluster"]["processes"]
        .as_object()
        .unwrap()
        .values()
        .find(|p| {
            p["roles"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["role"] == role)
        })
        .map(|p| p["address"].as_str().unwrap().to_owned())
}
