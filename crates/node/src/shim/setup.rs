//! The shim's steps, in order: namespaces, mounts, hostname, credentials, working directory,
//! exec. Each step either succeeds or returns the error that ends the shim.

use std::fs::{File, OpenOptions};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, setns, unshare};
use nix::unistd::{Gid, Uid, setgid, setgroups, sethostname, setuid};

use super::spec::{BindMount, ShimSpec};

#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    #[error("RunContainerError: {}", super::NEEDS_ROOT)]
    NotRoot,
    #[error("{what}: {source}")]
    Sys {
        what: String,
        #[source]
        source: nix::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("exec {program:?}: {source}")]
    Exec {
        program: String,
        #[source]
        source: std::io::Error,
    },
}

impl ShimError {
    pub fn exit_code(&self) -> i32 {
        match self {
            ShimError::Exec { source, .. } if source.kind() == std::io::ErrorKind::NotFound => 127,
            ShimError::Exec { source, .. }
                if source.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                126
            }
            _ => super::START_ERROR_EXIT,
        }
    }
}

fn sys(what: impl Into<String>) -> impl FnOnce(nix::Error) -> ShimError {
    let what = what.into();
    move |source| ShimError::Sys { what, source }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ShimError {
    let what = what.into();
    move |source| ShimError::Io { what, source }
}

/// Runs every step and execs the program; returns only the error that stopped it.
pub fn run(spec: &ShimSpec) -> ShimError {
    let result = join_cgroup(spec)
        .and_then(|()| match spec.join_pid {
            Some(pid) => join_namespaces(pid),
            None => new_namespaces(spec),
        })
        .and_then(|()| prepare_working_dir(spec))
        .and_then(|()| drop_privileges(spec))
        .and_then(|()| change_dir(spec));
    match result {
        Ok(()) => exec(spec),
        Err(e) => e,
    }
}

/// Joins the container's cgroup before anything else, so that nothing the program starts can
/// escape it: the spec's, or in exec mode the running container's.
fn join_cgroup(spec: &ShimSpec) -> Result<(), ShimError> {
    let dir = match spec.join_pid {
        Some(pid) => crate::cgroup::of_pid(pid),
        None => spec.cgroup.clone(),
    };
    match dir {
        Some(dir) => crate::cgroup::join(&dir).map_err(io(format!(
            "joining the container's cgroup {}",
            dir.display()
        ))),
        None => Ok(()),
    }
}

fn join_namespaces(pid: i32) -> Result<(), ShimError> {
    // Joining a mount namespace needs an unshared filesystem context.
    unshare(CloneFlags::CLONE_FS).map_err(sys("unshare(CLONE_FS)"))?;
    for (ns, flag) in [
        ("uts", CloneFlags::CLONE_NEWUTS),
        ("mnt", CloneFlags::CLONE_NEWNS),
    ] {
        let path = format!("/proc/{pid}/ns/{ns}");
        let file =
            File::open(&path).map_err(io(format!("opening {path} (is the container running?)")))?;
        setns(&file, flag).map_err(sys(format!("setns({path})")))?;
    }
    Ok(())
}

fn new_namespaces(spec: &ShimSpec) -> Result<(), ShimError> {
    unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWUTS)
        .map_err(sys("unshare(CLONE_NEWNS|CLONE_NEWUTS)"))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(sys("making / rprivate"))?;
    if !spec.hostname.is_empty() {
        sethostname(&spec.hostname).map_err(sys(format!("sethostname({})", spec.hostname)))?;
    }
    for m in &spec.mounts {
        bind(m)?;
    }
    if let Some(hosts) = &spec.hosts_file {
        bind(&BindMount {
            source: hosts.clone(),
            target: PathBuf::from("/etc/hosts"),
            read_only: false,
        })?;
    }
    Ok(())
}

fn bind(m: &BindMount) -> Result<(), ShimError> {
    let source_is_dir = std::fs::metadata(&m.source)
        .map_err(io(format!("volume source {}", m.source.display())))?
        .is_dir();
    create_mount_point(&m.target, source_is_dir)?;
    let what = format!(
        "bind-mounting {} on {}",
        m.source.display(),
        m.target.display()
    );
    mount(
        Some(&m.source),
        &m.target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(sys(what.clone()))?;
    if m.read_only {
        mount(
            None::<&str>,
            &m.target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            None::<&str>,
        )
        .map_err(sys(format!("{what} (read-only remount)")))?;
    }
    Ok(())
}

fn create_mount_point(target: &Path, dir: bool) -> Result<(), ShimError> {
    if target.exists() {
        return Ok(());
    }
    let what = format!("creating mount point {}", target.display());
    if dir {
        return std::fs::create_dir_all(target).map_err(io(what));
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(io(what.clone()))?;
    }
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(target)
        .map(drop)
        .map_err(io(what))
}

fn prepare_working_dir(spec: &ShimSpec) -> Result<(), ShimError> {
    match (&spec.working_dir, spec.join_pid) {
        (Some(dir), None) if !dir.exists() => std::fs::create_dir_all(dir)
            .map_err(io(format!("creating working directory {}", dir.display()))),
        _ => Ok(()),
    }
}

fn drop_privileges(spec: &ShimSpec) -> Result<(), ShimError> {
    if spec.uid.is_none() && spec.gid.is_none() && spec.groups.is_empty() {
        return Ok(());
    }
    let groups: Vec<Gid> = spec.groups.iter().copied().map(Gid::from_raw).collect();
    setgroups(&groups).map_err(sys(format!("setgroups({:?})", spec.groups)))?;
    if let Some(gid) = spec.gid {
        setgid(Gid::from_raw(gid)).map_err(sys(format!("setgid({gid})")))?;
    }
    if let Some(uid) = spec.uid {
        setuid(Uid::from_raw(uid)).map_err(sys(format!("setuid({uid})")))?;
    }
    Ok(())
}

fn change_dir(spec: &ShimSpec) -> Result<(), ShimError> {
    let dir = spec
        .working_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("/"));
    std::env::set_current_dir(&dir).map_err(io(format!("chdir({})", dir.display())))
}

fn exec(spec: &ShimSpec) -> ShimError {
    let mut cmd = std::process::Command::new(&spec.program);
    if let Some((arg0, rest)) = spec.argv.split_first() {
        cmd.arg0(arg0).args(rest);
    }
    cmd.env_clear().envs(spec.env.iter().map(|(k, v)| (k, v)));
    ShimError::Exec {
        program: spec.program.clone(),
        source: cmd.exec(),
    }
}
