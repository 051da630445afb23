//! The `steward` binary: `crd`, `operator --help`, and `operator` stopping cleanly on SIGTERM
//! with its Lease released.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use steward_operator::embedded::Embedded;

const STEWARD: &str = env!("CARGO_BIN_EXE_steward");

#[test]
fn crd_and_help_work() {
    let out = Command::new(STEWARD).arg("crd").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("name: etcdclusters.steward.dev"));
    let help = Command::new(STEWARD)
        .args(["operator", "--help"])
        .output()
        .unwrap();
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    for flag in [
        "--namespace",
        "--http-addr",
        "--leader-election",
        "--scaling-timeout",
        "[env: SCALING_TIMEOUT=",
    ] {
        assert!(help.contains(flag), "{flag} missing from help:\n{help}");
    }
}

/// `steward crd | head`: the reader stops after its first line, well before the 290 KB of
/// CRDs are written; the rest of the output is not wanted and that is not an error.
#[test]
fn crd_into_a_closed_pipe_exits_cleanly() {
    use std::io::BufRead;
    let mut child = Command::new(STEWARD)
        .arg("crd")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(!first.is_empty());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("steward-operator")
        .await
        .ok()??
        .spec?
        .holder_identity
}

#[tokio::test]
async fn sigterm_stops_the_operator_and_releases_the_lease() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let plane = Embedded::start(&["steward-system"]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, plane.server.kubeconfig_yaml()).unwrap();
    let mut child = tokio::process::Command::new(STEWARD)
        .args([
            "operator",
            "--http-addr",
            "127.0.0.1:0",
            "--api-addr",
            "127.0.0.1:0",
            "--identity",
            "bin-a",
            "--lease-duration-seconds",
            "5",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("POD_NAMESPACE")
        .env_remove("POD_NAME")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let leases: Api<Lease> = Api::namespaced(plane.client.clone(), "steward-system");
    let deadline = Instant::now() + Duration::from_secs(30);
    while holder(&leases).await.as_deref() != Some("bin-a") {
        assert!(Instant::now() < deadline, "the binary never took the Lease");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pid = child.id().unwrap().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "exit status {status:?}");
    let after = holder(&leases).await;
    assert_ne!(
        after.as_deref(),
        Some("bin-a"),
        "Lease still held after shutdown"
    );
    plane.server.shutdown().await;
}
