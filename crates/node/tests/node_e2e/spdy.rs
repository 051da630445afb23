//! The kubelet API as kube-apiserver (1.30 and later) drives it for exec and port-forward:
//! TLS, an upgrade to SPDY/3.1 with the kubelet's parameter names, then streams opened with a
//! `streamtype` header in the order client-go's SPDY executor opens them. The client is
//! `tests/spdy_client/client.js` on the npm package `spdy-transport`, so frames and header
//! compression are checked against an implementation other than the agent's. Without node or
//! npm the test says so and checks only what needs no SPDY client.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::common::*;

const T: Duration = Duration::from_secs(30);

fn client_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/spdy_client")
}

/// Installs the client's one dependency (from its lock file) when missing; why it cannot run
/// otherwise.
fn prepare_client() -> Result<PathBuf, String> {
    let dir = client_dir();
    let node = std::process::Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return Err("node is not installed".into());
    }
    if !dir.join("node_modules/spdy-transport").exists() {
        let out = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .output()
            .map_err(|e| format!("npm could not run: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "npm ci failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(dir.join("client.js"))
}

async fn run_client(client: &PathBuf, request: Value) -> Value {
    let out = tokio::process::Command::new("node")
        .arg(client)
        .arg(request.to_string())
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(text.trim()).unwrap()
}

/// What kube-apiserver offers a kubelet for exec.
const EXEC_PROTOCOLS: [&str; 4] = [
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

fn exec_path(ns: &str, command: &[&str], params: &str) -> String {
    let mut q: Vec<String> = command
        .iter()
        .map(|c| {
            let enc: String = c
                .bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' => {
                        (b as char).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect();
            format!("command={enc}")
        })
        .collect();
    q.push(params.to_string());
    format!("/exec/{ns}/spdy/c?{}", q.join("&"))
}

#[tokio::test]
async fn exec_and_port_forward_over_spdy_as_kube_apiserver_drives_them() {
    let env = start(25).await;
    let addr = env.node().kubelet_addr();
    // The Pod serves one line per connection on its own address, port 8080.
    let server = "import os,socket\n\
        s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
        s.bind((os.environ['POD_IP'], 8080)); s.listen()\n\
        while True:\n    c,_=s.accept(); line=c.makefile('rb').readline(); c.sendall(b'pong:'+line); c.close()\n";
    env.create::<Pod>(
        json!({"metadata": {"name": "spdy"}, "spec": {"containers": [{
        "name": "c", "image": "busybox", "command": ["python3", "-c", server],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]}}),
    )
    .await;
    env.wait_ready("spdy", T).await;

    // What needs no SPDY client: port-forward is SPDY only, and SPDY needs a subprotocol.
    let (code, body) = kubelet_get(addr, "/portForward/t/spdy").await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("SPDY/3.1"), "{body}");
    let (code, body) = kubelet_get(addr, "/attach/t/spdy/c?output=1").await;
    assert_eq!(code, 501, "{body}");

    let client = match prepare_client() {
        Ok(c) => c,
        Err(why) => {
            println!("SKIPPED: the SPDY exec and port-forward checks need a SPDY client: {why}");
            env.shutdown().await;
            return;
        }
    };
    let exec = |command: &[&str], params: &str, streams: &[&str], stdin: Option<&str>| {
        json!({
            "addr": addr.to_string(), "mode": "exec", "protocols": EXEC_PROTOCOLS,
            "path": exec_path(&env.ns, command, params), "streams": streams, "stdin": stdin,
        })
    };

    // `kubectl exec spdy -- echo hi`: output and error asked, no stdin.
    let r = run_client(
        &client,
        exec(
            &["echo", "hi"],
            "output=1&error=1",
            &["error", "stdout", "stderr"],
            None,
        ),
    )
    .await;
    assert_eq!(r["status"], 101, "{r}");
    assert_eq!(r["protocol"], "v4.channel.k8s.io");
    assert_eq!(r["streams"]["stdout"], "hi\n");
    assert_eq!(r["streams"]["stderr"], "");
    let status: Value = serde_json::from_str(r["streams"]["error"].as_str().unwrap()).unwrap();
    assert_eq!(status, json!({"metadata": {}, "status": "Success"}));

    // A non-zero exit: Failure, NonZeroExitCode, the code as the ExitCode cause.
    let r = run_client(
        &client,
        exec(
            &["sh", "-c", "echo oops >&2; exit 7"],
            "output=1&error=1",
            &["error", "stdout", "stderr"],
            None,
        ),
    )
    .await;
    assert_eq!(r["streams"]["stderr"], "oops\n", "{r}");
    let status: Value = serde_json::from_str(r["streams"]["error"].as_str().unwrap()).unwrap();
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(
        status["details"]["causes"],
        json!([{"reason": "ExitCode", "message": "7"}])
    );

    // stdin piped to cat, ended by the stdin stream's FIN.
    let r = run_client(
        &client,
        exec(
            &["cat"],
            "input=1&output=1&error=1",
            &["error", "stdin", "stdout", "stderr"],
            Some("piped through\n"),
        ),
    )
    .await;
    assert_eq!(r["streams"]["stdout"], "piped through\n", "{r}");
    let status: Value = serde_json::from_str(r["streams"]["error"].as_str().unwrap()).unwrap();
    assert_eq!(status["status"], "Success");

    // An older protocol is taken when it is the client's first choice (v3: no Status on
    // success, the message on failure).
    let mut req = exec(
        &["sh", "-c", "exit 3"],
        "error=1",
        &["error", "stderr"],
        None,
    );
    req["protocols"] = json!(["v3.channel.k8s.io", "v2.channel.k8s.io"]);
    let r = run_client(&client, req).await;
    assert_eq!(r["protocol"], "v3.channel.k8s.io", "{r}");
    assert!(
        r["streams"]["error"]
            .as_str()
            .unwrap()
            .starts_with("command terminated with non-zero exit code"),
        "{r}"
    );

    // One port-forward round trip to the Pod's port 8080 (retried while it starts listening).
    let deadline = Instant::now() + T;
    loop {
        let r = run_client(
            &client,
            json!({"addr": addr.to_string(), "mode": "portforward", "path": "/portForward/t/spdy",
                "protocols": ["portforward.k8s.io"], "port": 8080, "send": "ping\n"}),
        )
        .await;
        assert_eq!(r["status"], 101, "{r}");
        assert_eq!(r["protocol"], "portforward.k8s.io");
        if r["streams"]["data"] == "pong:ping\n" {
            assert_eq!(r["streams"]["error"], "", "{r}");
            break;
        }
        assert!(
            r["streams"]["error"]
                .as_str()
                .unwrap_or("")
                .contains("error forwarding port 8080 to pod spdy"),
            "{r}"
        );
        assert!(Instant::now() < deadline, "{r}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    env.shutdown().await;
}
