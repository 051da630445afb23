//! The JSON contract between the agent and the container shim: one file per process start.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What the shim sets up before it executes the program.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShimSpec {
    /// Exec mode: join the mount and UTS namespaces of this process (a running container)
    /// instead of creating new ones; `mounts`, `hosts_file` and `hostname` are then ignored.
    pub join_pid: Option<i32>,
    /// The container's hostname (new UTS namespace).
    pub hostname: String,
    /// Bind mounts, in order.
    pub mounts: Vec<BindMount>,
    /// The pod's hosts file, bind-mounted on `/etc/hosts`.
    pub hosts_file: Option<PathBuf>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Supplementary groups; set whenever `uid` or `gid` is set (an empty list drops root's).
    pub groups: Vec<u32>,
    /// Working directory inside the container (created when missing in container mode).
    pub working_dir: Option<PathBuf>,
    /// The program: an absolute path, or (exec mode) a name searched on the env's PATH.
    pub program: String,
    /// The full argument vector; `argv[0]` is what the program sees as its name.
    pub argv: Vec<String>,
    /// The complete environment, in order.
    pub env: Vec<(String, String)>,
    /// Where the shim writes why it failed before the program started.
    pub error_file: Option<PathBuf>,
    /// The container instance's cgroup, which the shim joins first (`crate::cgroup`). In exec
    /// mode the shim joins the cgroup of `join_pid` instead.
    #[serde(default)]
    pub cgroup: Option<PathBuf>,
}

/// One bind mount of a host path on a container path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindMount {
    pub source: PathBuf,
    pub target: PathBuf,
    pub read_only: bool,
}
