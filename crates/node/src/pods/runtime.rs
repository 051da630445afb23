//! Per-pod runtime facts other parts of the agent look up: directories, and for each running
//! container its pid and shim spec (so exec probes and `pods/exec` can join it), its cgroup and
//! start time (for `/metrics/resource`).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use jiff::Timestamp;

use crate::shim::ShimSpec;

/// The current instance of a running container.
#[derive(Clone, Debug)]
pub struct Running {
    /// The shim's pid, leader of the instance's process group.
    pub pid: i32,
    pub spec: ShimSpec,
    /// The instance's cgroup, when the agent gives containers one.
    pub cgroup: Option<PathBuf>,
    pub started_at: Timestamp,
}

/// A running container as `/metrics/resource` sees it.
#[derive(Clone, Debug)]
pub struct RunningContainer {
    pub name: String,
    pub pid: i32,
    pub cgroup: Option<PathBuf>,
    pub started_at: Timestamp,
}

#[derive(Debug)]
pub struct PodRuntime {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub dir: PathBuf,
    /// The Pod's own address (`None` for a pod that does not run).
    pub ip: Option<Ipv4Addr>,
    seq: u64,
    running: Mutex<HashMap<String, Running>>,
    /// Process groups of commands run inside containers: (container, pgid, start time).
    execs: Mutex<Vec<(String, i32, u64)>>,
}

impl PodRuntime {
    /// Records a command started inside `container` (forgetting finished ones).
    pub fn add_exec(&self, container: &str, pgid: i32) {
        let started = crate::process::start_time(pgid).unwrap_or_default();
        if let Ok(mut e) = self.execs.lock() {
            e.retain(|(_, p, s)| crate::process::group_alive(*p, *s));
            e.push((container.to_string(), pgid, started));
        }
    }

    /// Kills what still runs of the commands started inside `container` (a container's
    /// processes do not outlive it).
    pub fn kill_execs(&self, container: &str) {
        let Ok(mut e) = self.execs.lock() else {
            return;
        };
        e.retain(|(c, pgid, started)| {
            if c != container {
                return true;
            }
            if crate::process::group_alive(*pgid, *started) {
                crate::process::signal_group(*pgid, nix::sys::signal::Signal::SIGKILL);
            }
            false
        });
    }

    pub fn log_dir(&self, container: &str) -> PathBuf {
        self.dir.join("logs").join(container)
    }

    pub fn pid_file(&self, container: &str) -> PathBuf {
        self.dir.join("pids").join(container)
    }

    pub fn run_dir(&self) -> PathBuf {
        self.dir.join("run")
    }

    pub fn hosts_file(&self) -> PathBuf {
        self.dir.join("hosts")
    }

    /// Emulated `/etc/passwd` and `/etc/group` copies of the pod's containers.
    pub fn identity_dir(&self) -> PathBuf {
        self.dir.join("etc")
    }

    pub fn set_running(&self, container: &str, running: Running) {
        if let Ok(mut r) = self.running.lock() {
            r.insert(container.to_string(), running);
        }
    }

    pub fn clear_running(&self, container: &str) {
        if let Ok(mut r) = self.running.lock() {
            r.remove(container);
        }
    }

    /// The pid and spec of a running container.
    pub fn exec_target(&self, container: &str) -> Option<(i32, ShimSpec)> {
        let running = self.running.lock().ok()?;
        let r = running.get(container)?;
        Some((r.pid, r.spec.clone()))
    }

    /// The containers running now, by name.
    pub fn running_containers(&self) -> Vec<RunningContainer> {
        let Ok(running) = self.running.lock() else {
            return Vec::new();
        };
        let mut out: Vec<RunningContainer> = running
            .iter()
            .map(|(name, r)| RunningContainer {
                name: name.clone(),
                pid: r.pid,
                cgroup: r.cgroup.clone(),
                started_at: r.started_at,
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

/// The pods this agent runs, by uid.
#[derive(Debug, Default)]
pub struct Registry {
    pods: Mutex<HashMap<String, Arc<PodRuntime>>>,
    seq: AtomicU64,
}

impl Registry {
    pub fn insert(
        &self,
        uid: &str,
        namespace: &str,
        name: &str,
        dir: &Path,
        ip: Option<Ipv4Addr>,
    ) -> Arc<PodRuntime> {
        let rt = Arc::new(PodRuntime {
            uid: uid.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            dir: dir.to_path_buf(),
            ip,
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            running: Mutex::new(HashMap::new()),
            execs: Mutex::new(Vec::new()),
        });
        if let Ok(mut p) = self.pods.lock() {
            p.insert(uid.to_string(), rt.clone());
        }
        rt
    }

    pub fn remove(&self, uid: &str) {
        if let Ok(mut p) = self.pods.lock() {
            p.remove(uid);
        }
    }

    /// Every pod the agent runs (several with one name while an old one is going).
    pub fn all(&self) -> Vec<Arc<PodRuntime>> {
        self.pods
            .lock()
            .map(|p| p.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The newest pod with this namespace and name.
    pub fn find(&self, namespace: &str, name: &str) -> Option<Arc<PodRuntime>> {
        let p = self.pods.lock().ok()?;
        p.values()
            .filter(|r| r.namespace == namespace && r.name == name)
            .max_by_key(|r| r.seq)
            .cloned()
    }
}
