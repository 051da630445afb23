//! What every benchmark does before it measures: parse `--runs N` and start one local control
//! plane (embedded API server, node agent, operator) in a temporary directory.

use std::time::Duration;

use steward_operator::dev::{DevOptions, DevPlane};

/// The `--runs N` argument (default 3).
pub fn runs() -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
}

/// A started plane with the e2e settings (1 s restart back-off, 2 s database timeouts); the
/// directory must outlive it.
#[allow(dead_code)] // not every benchmark uses it
pub async fn plane(dir: &tempfile::TempDir) -> DevPlane {
    plane_with_nodes(dir, 1).await
}

/// [`plane`] with `nodes` node agents.
pub async fn plane_with_nodes(dir: &tempfile::TempDir, nodes: usize) -> DevPlane {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let shim = vec![env!("CARGO_BIN_EXE_steward").to_owned(), "node-shim".into()];
    let mut options = DevOptions::new(dir.path(), shim);
    options.restart_backoff = Duration::from_secs(1);
    options.operator_flags = vec!["--database-timeout-seconds".into(), "2".into()];
    options.nodes = nodes;
    DevPlane::start(options).await.unwrap()
}

/// Runs kubectl (`$KUBECTL`, as `scripts/prereqs.sh` installs it) against the plane; panics with
/// its output when it fails.
#[allow(dead_code)] // not every benchmark uses it
pub fn kubectl(plane: &DevPlane, args: &[&str]) -> String {
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = std::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&plane.kubeconfig)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {kubectl} (set KUBECTL): {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "kubectl {args:?}: {text}");
    text
}
