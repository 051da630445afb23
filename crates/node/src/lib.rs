//! Steward's node agent: registers a Node with any Kubernetes API server (through kube-rs
//! only) and runs the Pods bound to it as local processes, each on its own loopback address,
//! with per-container mount namespaces set up by a small shim. It also serves the kubelet API
//! for logs and exec, writes hosts files in place of cluster DNS and proxies Service
//! ClusterIPs on loopback. See `docs/local-control-plane.md` ("The node agent").

mod agent;
pub mod cgroup;
mod cluster;
mod config;
mod dns;
mod endpoints;
mod error;
mod expand;
mod images;
mod ipam;
mod kubelet;
mod logs;
mod node;
mod partition;
mod podnet;
mod pods;
mod process;
mod proxy;
mod shim;
mod stats;

pub use agent::{NodeHandle, start};
pub use config::NodeConfig;
pub use error::NodeError;
pub use images::{
    CRATEDB_STANDIN, CRATEDB_STANDIN_ENV, FDB_STANDIN, FDB_STANDIN_ENV, ImageMap, ResolveError,
    Standin, cratedb_standin_dir, find_cratedb_standin, find_standin, newest_postgres_bin,
    postgres_bin, standin_dir,
};
pub use shim::shim_main;
