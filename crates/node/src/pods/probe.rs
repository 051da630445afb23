//! Startup, liveness and readiness probes: exec (through the shim, inside the container's
//! namespaces), tcpSocket and httpGet against the pod IP (gRPC and HTTPS probes are reduced to
//! a TCP connect), with kubelet's delays, periods, timeouts and thresholds.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::launch::Launcher;
use super::runtime::PodRuntime;
use super::spec::exec_spec;
use super::state::{PodCell, Slot};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure(String),
}

/// What a probe needs to reach its container.
#[derive(Clone)]
pub struct Target {
    pub launcher: Arc<Launcher>,
    pub rt: Arc<PodRuntime>,
    pub container: Container,
    pub pod_ip: Ipv4Addr,
}

fn secs(v: Option<i32>, default: i32) -> Duration {
    Duration::from_secs(u64::try_from(v.unwrap_or(default).max(0)).unwrap_or(0))
}

fn period(p: &Probe) -> Duration {
    secs(p.period_seconds, 10).max(Duration::from_secs(1))
}

/// Resolves a probe port (number or container port name).
pub fn port(container: &Container, port: &IntOrString) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("invalid port {n}")),
        IntOrString::String(s) => {
            if let Ok(n) = s.parse::<u16>() {
                return Ok(n);
            }
            container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(s.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| format!("port {s:?} not found in container ports"))
        }
    }
}

fn host(explicit: Option<&String>, pod_ip: Ipv4Addr) -> String {
    explicit
        .filter(|h| !h.is_empty())
        .cloned()
        .unwrap_or_else(|| pod_ip.to_string())
}

/// Runs one probe attempt.
pub async fn check(target: &Target, probe: &Probe) -> Outcome {
    let timeout = secs(probe.timeout_seconds, 1).max(Duration::from_secs(1));
    let attempt = async {
        if let Some(exec) = &probe.exec {
            return check_exec(target, exec.command.as_deref().unwrap_or_default(), timeout).await;
        }
        if let Some(http) = &probe.http_get {
            let port = port(&target.container, &http.port)?;
            let host = host(http.host.as_ref(), target.pod_ip);
            if http.scheme.as_deref() == Some("HTTPS") {
                return tcp(&host, port).await;
            }
            let headers: Vec<(String, String)> = http
                .http_headers
                .iter()
                .flatten()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect();
            return http_get(&host, port, http.path.as_deref().unwrap_or("/"), &headers).await;
        }
        if let Some(t) = &probe.tcp_socket {
            let port = port(&target.container, &t.port)?;
            return tcp(&host(t.host.as_ref(), target.pod_ip), port).await;
        }
        if let Some(g) = &probe.grpc {
            let port = u16::try_from(g.port).map_err(|_| format!("invalid port {}", g.port))?;
            return tcp(&target.pod_ip.to_string(), port).await;
        }
        Err("probe has no handler".to_string())
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(())) => Outcome::Success,
        Ok(Err(msg)) => Outcome::Failure(msg),
        Err(_) => Outcome::Failure(format!("probe timed out after {}s", timeout.as_secs())),
    }
}

async fn check_exec(target: &Target, command: &[String], timeout: Duration) -> Result<(), String> {
    let Some((pid, template)) = target.rt.exec_target(&target.container.name) else {
        return Err("container is not running".into());
    };
    let spec = exec_spec(&template, pid, command);
    let child = target
        .launcher
        .exec(&target.rt, &target.container.name, &spec, false)
        .map_err(|e| format!("starting exec probe: {e}"))?;
    let pgid = child.id().and_then(|p| i32::try_from(p).ok());
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) if out.status.success() => Ok(()),
        Ok(Ok(out)) => {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            Err(format!(
                "command {command:?} exited with {}: {}",
                out.status.code().unwrap_or(-1),
                text.trim()
            ))
        }
        Ok(Err(e)) => Err(format!("exec probe: {e}")),
        Err(_) => {
            if let Some(p) = pgid {
                crate::process::signal_group(p, nix::sys::signal::Signal::SIGKILL);
            }
            Err(format!("command {command:?} timed out"))
        }
    }
}

async fn tcp(host: &str, port: u16) -> Result<(), String> {
    TcpStream::connect((host, port))
        .await
        .map(drop)
        .map_err(|e| format!("dial tcp {host}:{port}: {e}"))
}

async fn http_get(
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> Result<(), String> {
    let mut stream = TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("Get \"http://{host}:{port}{path}\": {e}"))?;
    let mut req =
        format!("GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.36\r\n");
    let mut has_accept = false;
    for (k, v) in headers {
        has_accept |= k.eq_ignore_ascii_case("accept");
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !has_accept {
        req.push_str("Accept: */*\r\n");
    }
    req.push_str("Connection: close\r\n\r\n");
    stream
        .write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 256];
    let mut got = 0;
    while got < buf.len() && !buf[..got].contains(&b'\n') {
        let n = stream
            .read(&mut buf[got..])
            .await
            .map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        got += n;
    }
    let line = String::from_utf8_lossy(&buf[..got]);
    let code: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("malformed HTTP response from {host}:{port}"))?;
    if (200..400).contains(&code) {
        Ok(())
    } else {
        Err(format!("HTTP probe failed with statuscode: {code}"))
    }
}

/// Runs the container's probes until aborted: the startup probe first (the container is
/// `started` once it passes, or at once without one), then liveness and readiness. Readiness
/// drives `ready` (ready once started without a readiness probe). Failing startup or liveness
/// probes send the reason on `kill`.
pub async fn run(target: Target, cell: Arc<PodCell>, slot: Slot, kill: mpsc::Sender<String>) {
    let c = target.container.clone();
    if let Some(p) = &c.startup_probe {
        tokio::time::sleep(secs(p.initial_delay_seconds, 0)).await;
        let threshold = p.failure_threshold.unwrap_or(3).max(1);
        let mut failures = 0;
        loop {
            match check(&target, p).await {
                Outcome::Success => break,
                Outcome::Failure(msg) => {
                    failures += 1;
                    if failures >= threshold {
                        let _ = kill.send(format!("Startup probe failed: {msg}")).await;
                        return;
                    }
                }
            }
            tokio::time::sleep(period(p)).await;
        }
    }
    let has_readiness = c.readiness_probe.is_some();
    cell.container(slot, |s| {
        s.started = true;
        if !has_readiness {
            s.ready = true;
        }
    });
    let liveness = async {
        let Some(p) = &c.liveness_probe else {
            return std::future::pending::<()>().await;
        };
        tokio::time::sleep(secs(p.initial_delay_seconds, 0)).await;
        let threshold = p.failure_threshold.unwrap_or(3).max(1);
        let mut failures = 0;
        loop {
            match check(&target, p).await {
                Outcome::Success => failures = 0,
                Outcome::Failure(msg) => {
                    failures += 1;
                    if failures >= threshold {
                        let _ = kill.send(format!("Liveness probe failed: {msg}")).await;
                        return std::future::pending::<()>().await;
                    }
                }
            }
            tokio::time::sleep(period(p)).await;
        }
    };
    let readiness = async {
        let Some(p) = &c.readiness_probe else {
            return std::future::pending::<()>().await;
        };
        tokio::time::sleep(secs(p.initial_delay_seconds, 0)).await;
        let (success_needed, failure_needed) = (
            p.success_threshold.unwrap_or(1).max(1),
            p.failure_threshold.unwrap_or(3).max(1),
        );
        let (mut successes, mut failures) = (0, 0);
        loop {
            match check(&target, p).await {
                Outcome::Success => {
                    failures = 0;
                    successes += 1;
                    if successes >= success_needed {
                        cell.container(slot, |s| s.ready = true);
                    }
                }
                Outcome::Failure(msg) => {
                    successes = 0;
                    failures += 1;
                    if failures >= failure_needed {
                        tracing::debug!(container = %c.name, %msg, "readiness probe failed");
                        cell.container(slot, |s| s.ready = false);
                    }
                }
            }
            tokio::time::sleep(period(p)).await;
        }
    };
    tokio::join!(liveness, readiness);
}
