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

/// `steward operator` as a child process, with where it serves `/metrics`; killed when dropped.
pub struct Operator(pub Child, pub std::net::SocketAddr);

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
        // A free port for `/metrics` (the operator binds it again at once).
        let http = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
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
                    &http.to_string(),
                    "--api-addr",
                    "127.0.0.1:0",
                ])
                .env("KUBECONFIG", &kubeconfig)
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join("operator.log")).unwrap())
                .spawn()
                .unwrap(),
            http,
        )
    }

    /// A sample of the operator's `/metrics`, or `None` with `name` absent: the summed value of
    /// the series whose line starts with `name` (labels included in the prefix).
    pub fn metric(&self, name: &str) -> Option<f64> {
        let text = self.metrics_text()?;
        let values: Vec<f64> = text
            .lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse().ok())
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    }

    /// The operator's whole `/metrics` answer (headers included), or `None` if it did not answer.
    pub fn metrics_text(&self) -> Option<String> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(self.1).ok()?;
        write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.1
        )
        .ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).ok()?;
        Some(text)
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
