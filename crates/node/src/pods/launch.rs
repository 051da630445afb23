//! Starting shim processes: containers (own cgroup and process group, pid file, stdout/stderr
//! into the instance's log file) and commands inside running containers (exec probes,
//! `pods/exec`, which join the container's cgroup).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use jiff::Timestamp;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use super::runtime::PodRuntime;
use crate::cgroup::{self, Cgroups};
use crate::logs::{self, ActiveLogs};
use crate::process::{self, ProcessTable};
use crate::shim::ShimSpec;

#[derive(Debug)]
pub struct Launcher {
    shim: Vec<String>,
    /// The containers' cgroups; `None` where the agent cannot make them (then process groups
    /// only).
    cgroups: Option<Cgroups>,
    pub processes: ProcessTable,
    pub logs: Arc<ActiveLogs>,
    counter: AtomicU64,
}

/// A started container instance.
#[derive(Debug)]
pub struct Started {
    pub child: Child,
    pub pid: i32,
    pub started_at: Timestamp,
    pub log_task: JoinHandle<()>,
    pub error_file: PathBuf,
    /// The instance's cgroup, killed once its first process has exited.
    pub cgroup: Option<PathBuf>,
}

fn write_spec(path: &Path, spec: &ShimSpec) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let body = serde_json::to_vec(spec).map_err(std::io::Error::other)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(&body)
}

impl Launcher {
    pub fn new(shim: Vec<String>, cgroups: Option<Cgroups>) -> Self {
        Self {
            shim,
            cgroups,
            processes: ProcessTable::default(),
            logs: Arc::new(ActiveLogs::default()),
            counter: AtomicU64::new(0),
        }
    }

    fn command(&self, spec_path: &Path) -> std::io::Result<Command> {
        let Some((program, lead)) = self.shim.split_first() else {
            return Err(std::io::Error::other("no shim command configured"));
        };
        let mut cmd = Command::new(program);
        cmd.args(lead)
            .arg(spec_path)
            .process_group(0)
            .kill_on_drop(true);
        Ok(cmd)
    }

    /// The error file of a container instance (written by the shim when the start fails).
    pub fn error_file(rt: &PodRuntime, container: &str, instance: u32) -> PathBuf {
        rt.run_dir().join(format!("{container}-{instance}.err"))
    }

    /// Starts instance `instance` of `container`.
    pub fn start_container(
        &self,
        rt: &PodRuntime,
        container: &str,
        instance: u32,
        spec: &ShimSpec,
    ) -> std::io::Result<Started> {
        let spec_path = rt.run_dir().join(format!("{container}-{instance}.json"));
        let error_file = spec
            .error_file
            .clone()
            .unwrap_or_else(|| Self::error_file(rt, container, instance));
        let _ = std::fs::remove_file(&error_file);
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let cgroup = match &self.cgroups {
            Some(c) => Some(c.create(&format!(
                "{}_{}-{container}-{instance}-{n}",
                rt.namespace, rt.name
            ))?),
            None => None,
        };
        let spec = ShimSpec {
            cgroup: cgroup.clone(),
            ..spec.clone()
        };
        if let Err(e) = write_spec(&spec_path, &spec) {
            Self::release(cgroup.as_deref());
            return Err(e);
        }
        let log_dir = rt.log_dir(container);
        std::fs::create_dir_all(&log_dir)?;
        let spawned = self.command(&spec_path).and_then(|mut c| {
            c.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        });
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                Self::release(cgroup.as_deref());
                return Err(e);
            }
        };
        let started_at = Timestamp::now();
        let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        self.processes.add(pid);
        if let Err(e) = process::write_pid_file(&rt.pid_file(container), pid) {
            tracing::warn!(error = %e, "writing pid file failed");
        }
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let path = logs::instance_path(&log_dir, instance);
        let active = self.logs.clone();
        let log_task = tokio::spawn(async move {
            if let (Some(out), Some(err)) = (stdout, stderr) {
                logs::pump(path, out, err, active).await;
            }
        });
        Ok(Started {
            child,
            pid,
            started_at,
            log_task,
            error_file,
            cgroup,
        })
    }

    /// Kills whatever is left in a container instance's cgroup and removes it.
    fn release(cgroup: Option<&Path>) {
        if let Some(dir) = cgroup
            && let Err(e) = cgroup::destroy(dir)
        {
            tracing::warn!(cgroup = %dir.display(), error = %e, "removing a container's cgroup failed");
        }
    }

    /// Kills every process the agent started: the recorded process groups and every container
    /// cgroup.
    pub fn kill_all(&self) {
        self.processes.kill_all();
        if let Some(c) = &self.cgroups {
            c.sweep();
        }
    }

    /// [`Self::kill_all`], and the agent's cgroup directory removed (the agent is going).
    pub fn remove_all(&self) {
        self.processes.kill_all();
        if let Some(c) = &self.cgroups {
            c.remove();
        }
    }

    /// Bookkeeping after a container instance exited; returns the shim's start error, if any.
    pub fn finish(&self, rt: &PodRuntime, container: &str, started: &Started) -> Option<String> {
        // A container's processes do not outlive its first process, wherever they went.
        Self::release(started.cgroup.as_deref());
        self.processes.remove(started.pid);
        let _ = std::fs::remove_file(rt.pid_file(container));
        let err = std::fs::read_to_string(&started.error_file)
            .ok()
            .filter(|s| !s.is_empty());
        let _ = std::fs::remove_file(&started.error_file);
        err
    }

    /// Starts a command inside running `container` with piped stdout/stderr (and stdin when
    /// asked). The shim is killed when the child is dropped; the command's process group is
    /// killed with the container and when the agent goes.
    pub fn exec(
        &self,
        rt: &PodRuntime,
        container: &str,
        spec: &ShimSpec,
        stdin: bool,
    ) -> std::io::Result<Child> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let spec_path = rt.run_dir().join(format!("exec-{n}.json"));
        write_spec(&spec_path, spec)?;
        let result = self
            .command(&spec_path)?
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        match &result {
            Ok(child) => {
                if let Some(pgid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                    rt.add_exec(container, pgid);
                    self.processes.add(pgid);
                }
            }
            Err(_) => {
                let _ = std::fs::remove_file(&spec_path);
            }
        }
        result
    }
}
