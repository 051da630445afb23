//! Process bookkeeping: every container runs in its own process group, recorded in a pid file
//! (`pid start-time`) so that an agent restart can kill what a previous run left behind, and
//! in an in-memory table so that dropping the agent kills everything still running.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::process::Child;

/// The start time of a process (clock ticks since boot, field 22 of `/proc/<pid>/stat`).
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses; fields restart after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Sends `sig` to the process group `pgid`, ignoring groups that are already gone.
pub fn signal_group(pgid: i32, sig: Signal) {
    let _ = killpg(Pid::from_raw(pgid), sig);
}

/// Whether the process group we recorded as (`pgid`, leader start time) still has members.
/// A pid is not reused while a process group of that id exists, so a group whose leader is
/// gone is still ours; a leader with another start time means the id was reused.
pub fn group_alive(pgid: i32, started: u64) -> bool {
    if pgid <= 1 {
        return false;
    }
    if start_time(pgid).is_some_and(|s| s != started) {
        return false;
    }
    killpg(Pid::from_raw(pgid), None).is_ok()
}

/// Sends `sig` to one process.
pub fn signal_pid(pid: i32, sig: Signal) {
    let _ = kill(Pid::from_raw(pid), sig);
}

/// Terminates a container: SIGTERM to its main process, up to `grace` for it to exit, then
/// SIGKILL to the whole group; whatever is left of the group is killed once the main process
/// has exited (a container's processes do not outlive its first process).
pub async fn terminate(
    child: &mut Child,
    grace: Duration,
) -> std::io::Result<std::process::ExitStatus> {
    let pid = child.id().and_then(|p| i32::try_from(p).ok());
    if let Some(pid) = pid {
        signal_pid(pid, Signal::SIGTERM);
    }
    let status = match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            if let Some(pid) = pid {
                signal_group(pid, Signal::SIGKILL);
            }
            child.wait().await
        }
    };
    if let Some(pid) = pid {
        signal_group(pid, Signal::SIGKILL);
    }
    status
}

/// Live container process groups, killed with SIGKILL when the table is dropped.
#[derive(Debug, Default)]
pub struct ProcessTable {
    groups: Mutex<HashMap<i32, u64>>,
}

impl ProcessTable {
    /// Records a group (and forgets groups whose leader is gone).
    pub fn add(&self, pgid: i32) {
        let started = start_time(pgid).unwrap_or_default();
        if let Ok(mut g) = self.groups.lock() {
            g.retain(|p, s| group_alive(*p, *s));
            g.insert(pgid, started);
        }
    }

    pub fn remove(&self, pgid: i32) {
        if let Ok(mut g) = self.groups.lock() {
            g.remove(&pgid);
        }
    }

    /// Kills every recorded group whose leader is still the process we started.
    pub fn kill_all(&self) {
        let groups: Vec<(i32, u64)> = match self.groups.lock() {
            Ok(mut g) => g.drain().collect(),
            Err(_) => return,
        };
        for (pgid, started) in groups {
            if group_alive(pgid, started) {
                signal_group(pgid, Signal::SIGKILL);
            }
        }
    }
}

impl Drop for ProcessTable {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// Writes `pid start-time` to `path`.
pub fn write_pid_file(path: &Path, pid: i32) -> std::io::Result<()> {
    let started = start_time(pid).unwrap_or_default();
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, format!("{pid} {started}\n"))
}

/// Kills the process group recorded in a pid file if its leader is still the recorded
/// process, and removes the file. Returns whether something was killed.
pub fn kill_from_pid_file(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let _ = std::fs::remove_file(path);
    let mut parts = text.split_whitespace();
    let (Some(pid), Some(started)) = (
        parts.next().and_then(|p| p.parse::<i32>().ok()),
        parts.next().and_then(|s| s.parse::<u64>().ok()),
    ) else {
        return false;
    };
    if !group_alive(pid, started) {
        return false;
    }
    signal_group(pid, Signal::SIGKILL);
    true
}

/// Kills the processes a previous agent run left behind: every pid file under
/// `<pods_dir>/*/pids/`.
pub fn kill_stale(pods_dir: &Path) -> usize {
    let Ok(pods) = std::fs::read_dir(pods_dir) else {
        return 0;
    };
    let mut killed = 0;
    for pod in pods.filter_map(Result::ok) {
        let Ok(files) = std::fs::read_dir(pod.path().join("pids")) else {
            continue;
        };
        for f in files.filter_map(Result::ok) {
            if kill_from_pid_file(&f.path()) {
                killed += 1;
            }
        }
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_of_self_is_known() {
        let me = i32::try_from(std::process::id()).unwrap();
        assert!(start_time(me).is_some());
        assert_eq!(start_time(i32::MAX), None);
    }

    #[tokio::test]
    async fn pid_files_kill_only_the_recorded_process() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = tokio::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id().unwrap()).unwrap();
        let file = dir.path().join("pod/pids/c");
        write_pid_file(&file, pid).unwrap();
        assert_eq!(kill_stale(dir.path()), 1);
        let status = child.wait().await.unwrap();
        assert!(!status.success());
        assert!(!file.exists());
        // A stale file pointing at a reused pid (other start time) kills nothing.
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, format!("{} 1\n", std::process::id())).unwrap();
        assert_eq!(kill_stale(dir.path()), 0);
    }
}
