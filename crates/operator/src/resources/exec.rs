//! Running a command in a container through `pods/exec` (RBAC: `create` on `pods/exec`), with a
//! deadline and bounded output: what an engine does to run a database's own tool in its Pod.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The most output read from one stream of one command.
const MAX_OUTPUT: u64 = 8 << 20;

/// What a command printed and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecOutput {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// It exited 0.
    pub success: bool,
    /// The exec status's message when it did not.
    pub message: String,
}

/// Why a command could not be run (or did not finish in time).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ExecError(pub String);

async fn read_all(stream: Option<impl AsyncRead + Unpin>) -> String {
    let mut out = Vec::new();
    if let Some(s) = stream {
        let _ = s.take(MAX_OUTPUT).read_to_end(&mut out).await;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Runs `command` in `container` of Pod `namespace/pod`, waiting at most `timeout`.
pub async fn run(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    container: &str,
    command: Vec<String>,
    timeout: Duration,
) -> Result<ExecOutput, ExecError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = AttachParams::default()
        .container(container)
        .stdin(false)
        .stdout(true)
        .stderr(true);
    let program = command.first().cloned().unwrap_or_default();
    let run = async {
        let mut process = pods
            .exec(pod, command, &params)
            .await
            .map_err(|e| ExecError(format!("exec in {pod}: {e}")))?;
        let status = process.take_status();
        let (stdout, stderr) = tokio::join!(read_all(process.stdout()), read_all(process.stderr()));
        let status = match status {
            Some(s) => s.await,
            None => None,
        };
        let _ = process.join().await;
        match status {
            Some(s) => Ok(ExecOutput {
                stdout,
                stderr,
                success: s.status.as_deref() == Some("Success"),
                message: s.message.unwrap_or_default(),
            }),
            None => Err(ExecError(format!(
                "{program} in {pod}: the exec session ended without a status"
            ))),
        }
    };
    tokio::time::timeout(timeout, run).await.map_err(|_| {
        ExecError(format!(
            "{program} in {pod} did not finish within {}s",
            timeout.as_secs()
        ))
    })?
}
