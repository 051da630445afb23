//! The container shim: a short-lived helper the agent runs as `<shim…> <spec.json>` for every
//! container start, exec probe and `pods/exec` command. It builds the container's namespaces,
//! mounts and credentials in a fresh single-threaded process (the workspace forbids `unsafe`,
//! so there is no `pre_exec` hook in the agent) and then replaces itself with the program, so
//! the program keeps the shim's pid, process group and stdio.
//!
//! Failures before the program starts are written to the spec's `error_file` and stderr, and
//! the shim exits with [`START_ERROR_EXIT`].

mod setup;
pub mod spec;

use std::io::Write;
use std::path::Path;

pub use spec::{BindMount, ShimSpec};

/// The shim's argument that makes it the agent's reaper instead.
pub const REAP: &str = "--reap";

/// Exit code of a shim that could not start its program.
pub const START_ERROR_EXIT: i32 = 128;

/// The message a non-root agent reports for every container.
pub const NEEDS_ROOT: &str = "the node agent needs root for per-pod mount namespaces";

/// Entry point of the `node-shim` subcommand: `args` are the arguments after the subcommand
/// name (a leading `node-shim` is skipped), the first being the spec file, which is deleted
/// once read. Returns only on failure, with the exit code to use. Call it before starting any
/// async runtime: joining a mount namespace needs a process whose filesystem context is not
/// shared.
pub fn shim_main(args: Vec<String>) -> i32 {
    let mut args = args.into_iter().peekable();
    if args.peek().map(String::as_str) == Some("node-shim") {
        args.next();
    }
    let Some(path) = args.next() else {
        eprintln!("usage: node-shim <spec.json> | node-shim --reap <cgroup directory>");
        return 2;
    };
    if path == REAP {
        // The agent's reaper (`crate::cgroup::reap`): its standard input is the agent's end of
        // a pipe; when it closes, every container cgroup of the agent is killed.
        let Some(root) = args.next() else {
            eprintln!("usage: node-shim --reap <cgroup directory>");
            return 2;
        };
        crate::cgroup::reap(Path::new(&root), std::io::stdin().lock());
        return 0;
    }
    let spec = match read_spec(Path::new(&path)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("node-shim: {e}");
            return START_ERROR_EXIT;
        }
    };
    let mut error_file = spec
        .error_file
        .as_ref()
        .and_then(|p| std::fs::File::create(p).ok());
    let err = if nix::unistd::geteuid().is_root() {
        setup::run(&spec)
    } else {
        setup::ShimError::NotRoot
    };
    let message = err.to_string();
    if let Some(f) = error_file.as_mut() {
        let _ = f.write_all(message.as_bytes());
    }
    eprintln!("node-shim: {message}");
    err.exit_code()
}

fn read_spec(path: &Path) -> Result<ShimSpec, String> {
    let text = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let _ = std::fs::remove_file(path);
    serde_json::from_slice(&text).map_err(|e| format!("parsing {}: {e}", path.display()))
}
