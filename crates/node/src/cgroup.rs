//! A cgroup (v2) per container instance, as a kubelet gives every container one: whatever the
//! container's processes do — `setsid`, a double fork, a daemonising `pg_ctl` — they stay in
//! it, and stopping the container kills the whole cgroup (`cgroup.kill`), not only the process
//! group of its first process.
//!
//! Each agent keeps its containers' cgroups under one directory of its own,
//! `<cgroup2 mount>/steward/<state directory>/agent-<pid>-<time>`: a new agent on the same
//! state directory kills and removes what earlier ones left there before it starts Pods
//! ([`Cgroups::for_agent`]), and a reaper process ([`reap`], started by the agent, waiting for
//! the agent's end of a pipe to close) does the same the moment the agent is gone, however it
//! went (a panic, `SIGKILL`); a dropped agent removes its own ([`Cgroups::remove`]).
//!
//! Without a cgroup v2 hierarchy, or without the right to write to it (not root), the agent
//! falls back to process groups and says so.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The directory under the cgroup v2 mount that holds every agent's cgroups.
const PARENT: &str = "steward";

/// How long a kill waits for a cgroup to empty before it gives up removing it.
const EMPTY_WAIT: Duration = Duration::from_secs(5);

/// The cgroup v2 hierarchy's mount point (`/sys/fs/cgroup` on a pure v2 system,
/// `/sys/fs/cgroup/unified` on a hybrid one), from `/proc/self/mountinfo`.
pub fn mount_point() -> Option<PathBuf> {
    let file = std::fs::File::open("/proc/self/mountinfo").ok()?;
    std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| {
            // `id parent major:minor root mount-point options… - fstype source super-options`
            let (before, after) = line.split_once(" - ")?;
            (after.split_whitespace().next()? == "cgroup2")
                .then(|| before.split_whitespace().nth(4).map(PathBuf::from))?
        })
}

/// The cgroup (v2) directory process `pid` is in, when it is not the hierarchy's root.
pub fn of_pid(pid: i32) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let relative = path.trim().trim_start_matches('/');
    (!relative.is_empty()).then(|| mount_point().map(|m| m.join(relative)))?
}

/// Moves the calling process into the cgroup at `dir` (the shim, before it executes the
/// container's program).
pub fn join(dir: &Path) -> std::io::Result<()> {
    std::fs::write(dir.join("cgroup.procs"), "0\n")
}

/// The processes in the cgroup at `dir`.
pub fn pids(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Kills every process in the cgroup at `dir` (`cgroup.kill`; on a kernel without it, SIGKILL
/// to each listed process until none is left), then removes the cgroup. Returns how many
/// processes it found. A cgroup that is already gone is no error.
pub fn destroy(dir: &Path) -> std::io::Result<usize> {
    if !dir.exists() {
        return Ok(0);
    }
    let found = pids(dir).len();
    if std::fs::write(dir.join("cgroup.kill"), "1\n").is_err() {
        for pid in pids(dir) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
    let deadline = Instant::now() + EMPTY_WAIT;
    loop {
        let left = pids(dir);
        if left.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            return Err(std::io::Error::other(format!(
                "cgroup {} still holds {left:?}",
                dir.display()
            )));
        }
        for pid in left {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(found),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(found),
        Err(e) => Err(e),
    }
}

/// One agent's cgroups.
#[derive(Clone, Debug)]
pub struct Cgroups {
    root: PathBuf,
}

impl Cgroups {
    /// The cgroups of a new agent whose state directory is `state_dir`, with the number of
    /// processes killed in what earlier agents on that directory left (each agent has a
    /// directory of its own under the state directory's, so an earlier agent's reaper never
    /// touches a later agent's containers); the error says why there are none (no cgroup v2
    /// hierarchy, no right to write to it).
    pub fn for_agent(state_dir: &Path) -> Result<(Self, usize), String> {
        let mount = mount_point().ok_or("no cgroup v2 hierarchy is mounted")?;
        let dir = std::path::absolute(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
        let base = mount.join(PARENT).join(name_of(&dir));
        std::fs::create_dir_all(&base).map_err(|e| format!("creating {}: {e}", base.display()))?;
        let mut killed = 0;
        if let Ok(earlier) = std::fs::read_dir(&base) {
            for agent in earlier.filter_map(Result::ok).filter(|e| e.path().is_dir()) {
                killed += Self::at(agent.path()).remove();
            }
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let root = base.join(format!("agent-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&root).map_err(|e| format!("creating {}: {e}", root.display()))?;
        // The memory controller for the containers' cgroups, so that their working set is
        // theirs (`memory.current`); where the hierarchy does not offer it (a hybrid one keeps
        // it in v1) `crate::stats` sums their processes' resident sets instead.
        for dir in [mount.join(PARENT), base, root.clone()] {
            let _ = std::fs::write(dir.join("cgroup.subtree_control"), "+memory\n");
        }
        Ok((Self { root }, killed))
    }

    /// The cgroups under `root` (the reaper's view of an agent's).
    pub fn at(root: PathBuf) -> Self {
        Self { root }
    }

    /// Where they are.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A new, empty cgroup for a container instance (`key` unique within the agent, whose
    /// directory is new: nothing is there before).
    pub fn create(&self, key: &str) -> std::io::Result<PathBuf> {
        let dir = self.root.join(key);
        std::fs::create_dir(&dir)?;
        Ok(dir)
    }

    /// Kills and removes every container cgroup of the agent. Returns the processes killed.
    pub fn sweep(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return 0;
        };
        let mut killed = 0;
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            match destroy(&path) {
                Ok(n) => killed += n,
                Err(e) => {
                    tracing::warn!(cgroup = %path.display(), error = %e, "removing a container's cgroup failed")
                }
            }
        }
        killed
    }

    /// [`Self::sweep`], then the agent's own directory, and the state directory's when no
    /// other agent's is left in it. Returns the processes killed.
    pub fn remove(&self) -> usize {
        let killed = self.sweep();
        let _ = std::fs::remove_dir(&self.root);
        if let Some(base) = self.root.parent() {
            let _ = std::fs::remove_dir(base);
        }
        killed
    }
}

/// (pure) A cgroup name for a state directory: its path without the leading `/`, each `/` a
/// `_`, at most 200 characters (the start cut, the end kept).
fn name_of(dir: &Path) -> String {
    let name: String = dir
        .to_string_lossy()
        .trim_start_matches('/')
        .chars()
        .map(|c| if c == '/' || c == '\n' { '_' } else { c })
        .collect();
    let skip = name.chars().count().saturating_sub(200);
    let name: String = name.chars().skip(skip).collect();
    if name.is_empty() || name == "." || name == ".." {
        "agent".to_owned()
    } else {
        name
    }
}

/// The reaper: reads `input` (the agent's end of a pipe) until it closes — the agent exited,
/// however — then kills and removes every cgroup under `root`. Returns the processes killed.
pub fn reap(root: &Path, mut input: impl Read) -> usize {
    let mut buf = [0_u8; 64];
    loop {
        match input.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    Cgroups::at(root.to_path_buf()).remove()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_the_path_and_its_end() {
        assert_eq!(name_of(Path::new("/tmp/x/node-0")), "tmp_x_node-0");
        let long = format!("/{}end", "a/".repeat(150));
        let name = name_of(Path::new(&long));
        assert_eq!(name.chars().count(), 200);
        assert!(name.ends_with("a_end"), "{name}");
        assert_eq!(name_of(Path::new("/")), "agent");
    }
}
