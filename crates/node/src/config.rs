//! The agent's configuration.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::images::ImageMap;

/// Everything the node agent needs to know; build it with [`NodeConfig::new`] and adjust fields.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// The Node's name, e.g. `steward-dev`.
    pub name: String,
    /// All on-disk state: pod directories, volumes, logs, pid files, the cluster hosts file.
    pub state_dir: PathBuf,
    /// The first pod IP; pods get addresses counting upwards from here: in `127.0.0.0/8`
    /// (loopback, the default `127.1.0.1`: no set-up, but a real API server refuses them as
    /// endpoints) or in `198.18.0.0/15` (routed on `lo`, made local by the agent; what to use
    /// with a real API server). See `podnet`.
    pub pod_ip_base: Ipv4Addr,
    /// Image → executable resolution.
    pub images: ImageMap,
    /// Program and leading arguments that run the container shim, e.g.
    /// `["/path/steward", "node-shim"]`; the agent appends the spec file path.
    pub shim: Vec<String>,
    /// Where the kubelet HTTP API (logs, exec) listens; port 0 picks a free port.
    pub kubelet_bind: SocketAddr,
    /// Extra Node labels.
    pub labels: BTreeMap<String, String>,
    /// First restart back-off of a crashing container; doubles per restart up to five minutes.
    pub restart_backoff_base: Duration,
    /// Interval of the Node's Ready heartbeat.
    pub heartbeat_interval: Duration,
    /// Upper bound on a pod's termination grace period when the agent shuts down.
    pub shutdown_grace: Duration,
    /// How often secret, configMap and downwardAPI volumes are re-rendered.
    pub volume_refresh: Duration,
    /// Run the ClusterIP service proxy. Several agents on one machine share the loopback
    /// network, so exactly one of them proxies (the others' Pods reach it all the same).
    pub service_proxy: bool,
}

impl NodeConfig {
    /// A configuration with the defaults: pod IPs from `127.1.0.1`, the default image map,
    /// kubelet API on `127.0.0.1:0`, 10 s back-off base and heartbeat.
    pub fn new(name: impl Into<String>, state_dir: impl Into<PathBuf>, shim: Vec<String>) -> Self {
        Self {
            name: name.into(),
            state_dir: state_dir.into(),
            pod_ip_base: Ipv4Addr::new(127, 1, 0, 1),
            images: ImageMap::default(),
            shim,
            kubelet_bind: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            labels: BTreeMap::new(),
            restart_backoff_base: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
            volume_refresh: Duration::from_secs(2),
            service_proxy: true,
        }
    }
}
