//! Shared set-up: an embedded API server, a node agent with fast back-off and refresh, a
//! namespace, and small HTTP / WebSocket clients for the kubelet API and the databases.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use steward_apiserver::{ApiServerHandle, ServerConfig};
use steward_node::{NodeConfig, NodeHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// A client configuration for `server` with its admin token.
pub fn admin_config(server: &steward_apiserver::ApiServerHandle) -> kube::Config {
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.auth_info.token = Some(server.admin_token().into());
    config
}

pub struct Env {
    pub server: Option<ApiServerHandle>,
    pub client: Client,
    pub node: Option<NodeHandle>,
    pub dir: tempfile::TempDir,
    pub ns: String,
}

/// Starts a server and an agent whose pod IPs start at `127.1.<slot>.1` (tests run in
/// parallel, each in its own slot).
pub async fn start(slot: u8) -> Env {
    start_with(slot, ServerConfig::default()).await
}

/// [`start`] with a server configured as given.
pub async fn start_with(slot: u8, config: ServerConfig) -> Env {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the node agent tests need root (mount namespaces, setuid)"
    );
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = steward_apiserver::start(config).await.unwrap();
    let config = admin_config(&server);
    let client = Client::try_from(config).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(&client, dir.path(), slot).await;
    let ns = "t".to_string();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    Env {
        server: Some(server),
        client,
        node: Some(node),
        dir,
        ns,
    }
}

pub fn node_config(state_dir: &std::path::Path, slot: u8) -> NodeConfig {
    let mut cfg = NodeConfig::new(
        "steward-test",
        state_dir,
        vec![
            env!("CARGO_BIN_EXE_steward-node").to_string(),
            "node-shim".to_string(),
        ],
    );
    cfg.pod_ip_base = Ipv4Addr::new(127, 1, slot, 1);
    cfg.restart_backoff_base = Duration::from_millis(300);
    cfg.volume_refresh = Duration::from_millis(300);
    cfg.shutdown_grace = Duration::from_secs(5);
    cfg
}

pub async fn start_node(client: &Client, state_dir: &std::path::Path, slot: u8) -> NodeHandle {
    steward_node::start(client.clone(), node_config(state_dir, slot))
        .await
        .unwrap()
}

impl Env {
    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn node(&self) -> &NodeHandle {
        self.node.as_ref().unwrap()
    }

    pub async fn create<K>(&self, v: Value) -> K
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let obj: K = serde_json::from_value(v).unwrap();
        self.api::<K>()
            .create(&PostParams::default(), &obj)
            .await
            .unwrap()
    }

    pub async fn shutdown(mut self) {
        if let Some(n) = self.node.take() {
            n.shutdown().await;
        }
        if let Some(s) = self.server.take() {
            s.shutdown().await;
        }
    }

    /// Polls the pod until `f` holds.
    pub async fn wait_pod(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        f: impl Fn(&Pod) -> bool,
    ) -> Pod {
        let deadline = Instant::now() + timeout;
        loop {
            let pod = self.pods().get_opt(name).await.unwrap();
            if let Some(p) = &pod
                && f(p)
            {
                return p.clone();
            }
            if Instant::now() > deadline {
                panic!(
                    "pod {name}: timed out waiting for {what}; last: {}",
                    serde_json::to_string_pretty(&pod).unwrap()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn wait_ready(&self, name: &str, timeout: Duration) -> Pod {
        self.wait_pod(name, "Ready", timeout, is_ready).await
    }

    pub async fn wait_gone(&self, name: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.pods().get_opt(name).await.unwrap().is_some() {
            assert!(Instant::now() < deadline, "pod {name} still exists");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn delete_pod(&self, name: &str) {
        let _ = self.pods().delete(name, &DeleteParams::default()).await;
    }

    /// The pid of a container's current process, from the agent's pid file.
    pub fn container_pid(&self, pod: &Pod, container: &str) -> i32 {
        let uid = pod.metadata.uid.clone().unwrap();
        let text = std::fs::read_to_string(
            self.dir
                .path()
                .join("pods")
                .join(uid)
                .join("pids")
                .join(container),
        )
        .unwrap();
        text.split_whitespace().next().unwrap().parse().unwrap()
    }

    pub async fn logs(&self, pod: &str, container: &str, query: &str) -> (u16, String) {
        let path = format!("/containerLogs/{}/{pod}/{container}?{query}", self.ns);
        kubelet_get(self.node().kubelet_addr(), &path).await
    }

    pub async fn exec(&self, pod: &str, container: &str, command: &[&str]) -> ExecResult {
        exec(
            self.node().kubelet_addr(),
            &self.ns,
            pod,
            container,
            command,
            "v5.channel.k8s.io, v4.channel.k8s.io",
        )
        .await
    }
}

pub fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn pod_ip(p: &Pod) -> Ipv4Addr {
    p.status
        .as_ref()
        .unwrap()
        .pod_ip
        .as_ref()
        .unwrap()
        .parse()
        .unwrap()
}

/// Whether a node agent on this host holds `ip`: its file in the agents' lock directory is
/// locked (the lock is only probed, and dropped at once).
pub fn address_in_use(ip: Ipv4Addr) -> bool {
    let path = std::env::temp_dir()
        .join("steward-node-pod-ips")
        .join(ip.to_string());
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap();
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).is_err()
}

pub fn process_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .next()
                .unwrap_or("");
            state != "Z" && state != "X"
        })
        .unwrap_or(false)
}

pub async fn wait_process_gone(pid: i32, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while process_alive(pid) {
        assert!(Instant::now() < deadline, "process {pid} still running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A minimal HTTP/1.0 client: returns the status code and body.
pub async fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let s = tokio::net::TcpStream::connect(addr).await.unwrap();
    exchange(s, addr, method, path, body).await
}

/// A GET of the kubelet API (HTTPS), connected as the API server connects.
pub async fn kubelet_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let s = steward_apiserver::connect_kubelet(addr).await.unwrap();
    exchange(s, addr, "GET", path, None).await
}

async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut s: S,
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, String) {
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    // A TLS peer may close without close_notify once the answer is complete.
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, body.to_string())
}

#[derive(Debug, Default)]
pub struct ExecResult {
    pub protocol: String,
    pub stdout: String,
    pub stderr: String,
    pub status: Value,
    /// The close code the kubelet ended with (1000 = normal).
    pub close_code: Option<u16>,
}

impl ExecResult {
    pub fn exit_code(&self) -> i32 {
        if self.status["status"] == "Success" {
            return 0;
        }
        self.status["details"]["causes"][0]["message"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    }
}

/// Runs a command through the kubelet exec endpoint over WebSocket.
pub async fn exec(
    addr: SocketAddr,
    ns: &str,
    pod: &str,
    container: &str,
    command: &[&str],
    protocols: &str,
) -> ExecResult {
    let mut query: Vec<String> = command
        .iter()
        .map(|c| format!("command={}", urlencode(c)))
        .collect();
    query.push("output=1&error=1".into());
    let url = format!(
        "wss://{addr}/exec/{ns}/{pod}/{container}?{}",
        query.join("&")
    );
    let mut req = url.into_client_request().unwrap();
    req.headers_mut()
        .insert("Sec-WebSocket-Protocol", protocols.parse().unwrap());
    let tls = steward_apiserver::connect_kubelet(addr).await.unwrap();
    let (mut ws, resp) = tokio_tungstenite::client_async(req, tls).await.unwrap();
    let mut out = ExecResult {
        protocol: resp
            .headers()
            .get("Sec-WebSocket-Protocol")
            .unwrap()
            .to_str()
            .unwrap()
            .to_string(),
        ..Default::default()
    };
    while let Some(msg) = ws.next().await {
        match msg.unwrap() {
            Message::Binary(b) if !b.is_empty() => {
                let text = String::from_utf8_lossy(&b[1..]).into_owned();
                match b[0] {
                    1 => out.stdout.push_str(&text),
                    2 => out.stderr.push_str(&text),
                    3 => out.status = serde_json::from_str(&text).unwrap(),
                    _ => {}
                }
            }
            Message::Close(frame) => {
                out.close_code = frame.map(|f| u16::from(f.code));
                break;
            }
            _ => {}
        }
    }
    let _ = ws.close(None).await;
    out
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
