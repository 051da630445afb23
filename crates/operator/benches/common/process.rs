//! What the benchmarks that run `steward operator` as its own process against an in-process
//! API server share: numeric flags, the operator process (killed when dropped) and its RSS and
//! CPU time from `/proc`.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};

use steward_operator::embedded::Embedded;

/// The numeric flag `name` (e.g. `--steady 60`), or `default`.
pub fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// `steward operator` as a child process; killed when dropped.
pub struct Operator(pub Child);

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Operator {
    /// Starts the operator against `plane` with the admin token, logging warnings to
    /// `dir/operator.log`.
    pub fn start(plane: &Embedded, dir: &Path) -> Self {
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n\
                 users:\n- name: u\n  user:\n    token: {}\ncontexts:\n- name: c\n  context:\n    \
                 cluster: c\n    user: u\ncurrent-context: c\n",
                plane.server.url(),
                plane.server.admin_token()
            ),
        )
        .unwrap();
        // `STEWARD_BENCH_WRAP="heaptrack -o /tmp/op"` runs the operator under a profiler (its
        // RSS and CPU figures are then the wrapper's).
        let wrap = std::env::var("STEWARD_BENCH_WRAP").unwrap_or_default();
        let mut words = wrap.split_whitespace();
        let mut command = match words.next() {
            Some(program) => {
                let mut c = Command::new(program);
                c.args(words).arg(env!("CARGO_BIN_EXE_steward"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_steward")),
        };
        Self(
            command
                .args([
                    "operator",
                    "--http-addr",
                    "127.0.0.1:0",
                    "--api-addr",
                    "127.0.0.1:0",
                ])
                .env("KUBECONFIG", &kubeconfig)
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join("operator.log")).unwrap())
                .spawn()
                .unwrap(),
        )
    }

    /// Panics with the operator's log if it has exited.
    pub fn assert_running(&mut self, dir: &Path) {
        if let Ok(Some(exit)) = self.0.try_wait() {
            let log = std::fs::read_to_string(dir.join("operator.log")).unwrap_or_default();
            panic!("the operator exited ({exit}):\n{log}");
        }
    }
}

/// Resident set size of a process (`self` or a pid), in MiB.
pub fn rss_mib(pid: &str) -> f64 {
    status_mib(pid, "VmRSS")
}

/// One `kB` line of `/proc/<pid>/status` (`VmRSS`, `VmHWM`, `RssAnon`, `RssFile`), in MiB.
pub fn status_mib(pid: &str, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// User + system CPU time of a process, in clock ticks (100 per second on Linux).
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // After the command: state is field 0, utime 11, stime 12.
    field(11) + field(12)
}
