//! Start-up and shutdown: kills leftovers of a previous run, serves the kubelet API, registers
//! the Node, then runs the heartbeat, the cluster view (DNS + service proxy) and the pod
//! watch until [`NodeHandle::shutdown`].

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use jiff::Timestamp;
use kube::Client;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::NodeConfig;
use crate::dns::Dns;
use crate::endpoints::ServiceCache;
use crate::error::NodeError;
use crate::ipam::Ipam;
use crate::partition::Partition;
use crate::pods::envs::NodeFacts;
use crate::pods::launch::Launcher;
use crate::pods::runtime::Registry;
use crate::proxy::Proxy;
use crate::{cluster, kubelet, node, pods, process};

/// State shared by every part of the agent.
pub struct Shared {
    pub client: Client,
    pub cfg: NodeConfig,
    pub ipam: Ipam,
    pub launcher: Arc<Launcher>,
    pub registry: Registry,
    pub dns: Arc<Dns>,
    pub services: Arc<ServiceCache>,
    pub node: NodeFacts,
    /// Whether the agent runs as root (needed for per-pod mount namespaces).
    pub root: bool,
    /// The test switch between the agent and the API server (never cut outside tests).
    pub partition: Partition,
}

impl Shared {
    pub fn pods_dir(&self) -> PathBuf {
        self.cfg.state_dir.join("pods")
    }
}

/// A running node agent.
pub struct NodeHandle {
    shared: Arc<Shared>,
    kubelet_addr: SocketAddr,
    cancel: CancellationToken,
    pods: Option<JoinHandle<()>>,
    tasks: Vec<JoinHandle<()>>,
    proxy: Arc<Proxy>,
    /// Kills the containers' cgroups once this agent is gone (`crate::cgroup::reap`).
    _reaper: Option<Reaper>,
}

/// The agent's reaper process (`node-shim --reap <cgroups>`): it waits for the end of the pipe
/// the agent holds to close — when the agent is dropped, or its process dies however it dies —
/// and then kills every container cgroup of the agent.
struct Reaper {
    input: Option<std::process::ChildStdin>,
    child: Option<std::process::Child>,
}

impl Drop for Reaper {
    fn drop(&mut self) {
        drop(self.input.take());
        if let Some(mut child) = self.child.take() {
            // Collected when it has swept (no zombie left to the agent's process).
            let _ = std::thread::Builder::new()
                .name("node-reaper-wait".into())
                .spawn(move || child.wait());
        }
    }
}

/// Starts the reaper of the cgroups under `root`, in a process group of its own (a signal to
/// the agent's group does not reach it before it has swept).
fn start_reaper(shim: &[String], root: &std::path::Path) -> std::io::Result<Reaper> {
    use std::os::unix::process::CommandExt;
    let Some((program, lead)) = shim.split_first() else {
        return Err(std::io::Error::other("no shim command configured"));
    };
    let mut child = std::process::Command::new(program)
        .args(lead)
        .arg(crate::shim::REAP)
        .arg(root)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .process_group(0)
        .spawn()?;
    Ok(Reaper {
        input: child.stdin.take(),
        child: Some(child),
    })
}

/// Starts the agent: the Node is registered Ready and pods bound to it start running.
pub async fn start(client: Client, cfg: NodeConfig) -> Result<NodeHandle, NodeError> {
    if cfg.shim.is_empty() {
        return Err(NodeError::Config("the shim command is empty".into()));
    }
    let pods_dir = cfg.state_dir.join("pods");
    std::fs::create_dir_all(&pods_dir).map_err(NodeError::io(&pods_dir))?;
    let killed = process::kill_stale(&pods_dir);
    if killed > 0 {
        tracing::info!(killed, "killed processes left by a previous run");
    }
    // A cgroup per container; what an earlier agent on this state directory left is killed
    // first, and a reaper kills what this one starts the moment it is gone.
    let cgroups = match crate::cgroup::Cgroups::for_agent(&cfg.state_dir) {
        Ok((c, killed)) => {
            if killed > 0 {
                tracing::info!(
                    killed,
                    "killed processes a previous agent left in its cgroups"
                );
            }
            Some(c)
        }
        Err(why) => {
            tracing::warn!(%why, "no cgroup per container: a container's processes are killed by process group only");
            None
        }
    };
    let reaper = match &cgroups {
        Some(c) => match start_reaper(&cfg.shim, c.root()) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(error = %e, "the reaper did not start: an agent that dies leaves its containers to the next agent's sweep");
                None
            }
        },
        None => None,
    };
    let pod_range = crate::podnet::prepare(cfg.pod_ip_base)?;
    let partition = Partition::default();
    let client = partition.wrap(client);
    let root = nix::unistd::geteuid().is_root();
    if !root {
        tracing::warn!("not running as root: containers will fail with RunContainerError");
    }
    let listener = TcpListener::bind(cfg.kubelet_bind)
        .await
        .map_err(|source| NodeError::Bind {
            addr: cfg.kubelet_bind,
            source,
        })?;
    let kubelet_addr = listener.local_addr().map_err(|source| NodeError::Bind {
        addr: cfg.kubelet_bind,
        source,
    })?;
    let tls = crate::kubelet::acceptor(&cfg.name).map_err(NodeError::Tls)?;
    let facts = node::facts();
    let ready_since = Timestamp::now();
    node::register(
        &client,
        &cfg,
        node::status(kubelet_addr.port(), facts, true, ready_since),
    )
    .await?;
    let shared = Arc::new(Shared {
        client: client.clone(),
        ipam: Ipam::new(
            cfg.pod_ip_base,
            pod_range.last(),
            &crate::ipam::default_lock_dir(),
        ),
        launcher: Arc::new(Launcher::new(cfg.shim.clone(), cgroups)),
        registry: Registry::default(),
        dns: Arc::new(Dns::new(&cfg.state_dir)),
        services: Arc::new(ServiceCache::default()),
        node: facts,
        root,
        partition,
        cfg,
    });
    let cancel = CancellationToken::new();
    let proxy = Arc::new(Proxy::new(shared.services.clone()));
    let tasks = vec![
        tokio::spawn(kubelet::serve(
            listener,
            tls,
            shared.clone(),
            cancel.clone(),
        )),
        tokio::spawn(heartbeat(
            shared.clone(),
            kubelet_addr.port(),
            ready_since,
            cancel.clone(),
        )),
        tokio::spawn(cluster::run(
            client,
            shared.services.clone(),
            shared.dns.clone(),
            shared.cfg.service_proxy.then(|| proxy.clone()),
            cancel.clone(),
        )),
    ];
    let pods = tokio::spawn(pods::run(shared.clone(), cancel.clone()));
    tracing::info!(node = %shared.cfg.name, kubelet = %kubelet_addr, "node agent started");
    Ok(NodeHandle {
        shared,
        kubelet_addr,
        cancel,
        pods: Some(pods),
        tasks,
        proxy,
        _reaper: reaper,
    })
}

/// How long one heartbeat (the Node's status write) may wait for the API server's answer: as
/// long as a Pod's status write.
const HEARTBEAT_WRITE_TIMEOUT: std::time::Duration = pods::report::WRITE_TIMEOUT;

/// The Node's status write, or `None` when it got no answer within `timeout`.
async fn bounded_write(
    client: &Client,
    name: &str,
    status: serde_json::Value,
    timeout: std::time::Duration,
) -> Option<Result<(), NodeError>> {
    tokio::time::timeout(timeout, node::write_status(client, name, status))
        .await
        .ok()
}

async fn heartbeat(shared: Arc<Shared>, port: u16, since: Timestamp, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(shared.cfg.heartbeat_interval);
    tick.tick().await;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let status = node::status(port, shared.node, true, since);
        // Bounded, as a Pod's status write is: a write whose answer never comes would stop
        // the heartbeats for good (the client has no read timeout).
        let Some(written) = bounded_write(
            &shared.client,
            &shared.cfg.name,
            status.clone(),
            HEARTBEAT_WRITE_TIMEOUT,
        )
        .await
        else {
            tracing::warn!(timeout = ?HEARTBEAT_WRITE_TIMEOUT, "node heartbeat got no answer");
            continue;
        };
        match written {
            Ok(()) => {}
            Err(NodeError::Kube {
                source: kube::Error::Api(e),
                ..
            }) if e.code == 404 => {
                tracing::warn!("the Node object is gone; registering it again");
                if let Err(e) = node::register(&shared.client, &shared.cfg, status).await {
                    tracing::warn!(error = %e, "registering the Node failed");
                }
            }
            Err(e) => tracing::warn!(error = %e, "node heartbeat failed"),
        }
    }
}

impl NodeHandle {
    /// The Node's name.
    pub fn name(&self) -> &str {
        &self.shared.cfg.name
    }

    /// Where the kubelet API listens (the Node's `daemonEndpoints.kubeletEndpoint.Port`).
    pub fn kubelet_addr(&self) -> SocketAddr {
        self.kubelet_addr
    }

    /// Resolves a Service or headless-pod DNS name the way pods on this node see it
    /// (`svc.ns`, `svc.ns.svc`, `svc.ns.svc.cluster.local`, `host.svc.ns...`).
    pub fn resolve(&self, name: &str) -> Option<Ipv4Addr> {
        self.shared.dns.resolve(name)
    }

    /// The cluster-wide hosts file (`state_dir/hosts`).
    pub fn hosts_file(&self) -> PathBuf {
        self.shared.cfg.state_dir.join("hosts")
    }

    /// Cuts the agent off from the API server, as a network partition or a crashed agent on a
    /// machine that keeps running would: no heartbeat, no Pod status, no Pod changes seen, no
    /// kubelet API; the Pod processes go on. For tests of node loss (`crate::partition`).
    pub fn partition(&self) {
        self.shared.partition.cut();
        tracing::warn!(node = %self.shared.cfg.name, "node agent partitioned from the API server");
    }

    /// Ends [`NodeHandle::partition`]: the agent reconnects and catches up.
    pub fn heal(&self) {
        self.shared.partition.heal();
    }

    /// The machine loses power: the agent is cut off (as by [`NodeHandle::partition`]) and
    /// stops — no container is restarted any more — and every Pod process is killed at once
    /// (SIGKILL). Nothing reaches the API server, so the Node goes `Unknown` only after its
    /// grace period. For tests of node loss.
    pub fn power_off(&self) {
        // The machine's Pods keep their addresses: no other node may reuse one while the Pod
        // objects (on a lost Node) still name it.
        self.shared.ipam.freeze();
        self.shared.partition.cut();
        self.cancel.cancel();
        self.shared.launcher.kill_all();
        tracing::warn!(node = %self.shared.cfg.name, "node powered off (test)");
    }

    /// Stops this agent's Service proxy (with `NodeConfig::service_proxy`), which a
    /// [`NodeHandle::power_off`] leaves forwarding on its last rules: before a new agent of the
    /// same Node starts its own on the same addresses.
    pub fn stop_proxy(&self) {
        self.proxy.stop();
    }

    /// Stops every pod process (SIGTERM, grace, SIGKILL), marks the Node NotReady and stops
    /// serving. Pod objects are kept.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(pods) = self.pods.take() {
            let _ = pods.await;
        }
        self.proxy.stop();
        self.shared.launcher.kill_all();
        let status = node::status(
            self.kubelet_addr.port(),
            self.shared.node,
            false,
            Timestamp::now(),
        );
        if let Err(e) = node::write_status(&self.shared.client, &self.shared.cfg.name, status).await
        {
            tracing::warn!(error = %e, "marking the Node NotReady failed");
        }
        for t in std::mem::take(&mut self.tasks) {
            let _ = t.await;
        }
        tracing::info!(node = %self.shared.cfg.name, "node agent stopped");
    }
}

impl Drop for NodeHandle {
    fn drop(&mut self) {
        // Dropped without shutdown (e.g. a panicking test): never leave processes behind.
        self.cancel.cancel();
        self.shared.launcher.remove_all();
    }
}

/// A client of a server that accepts connections and never answers, and that server's task.
#[cfg(test)]
pub(crate) async fn silent_client() -> (Client, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let client = Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
    (client, silent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_heartbeat_without_an_answer_ends_in_time() {
        let (client, silent) = silent_client().await;
        let status = serde_json::json!({"conditions": []});
        let write = bounded_write(&client, "n1", status, std::time::Duration::from_millis(200));
        let ended = tokio::time::timeout(std::time::Duration::from_secs(5), write).await;
        assert!(matches!(ended, Ok(None)), "the heartbeat waited for good");
        silent.abort();
    }
}
