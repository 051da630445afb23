//! The real repository: `pgbackrest info --output=json` run in the repository host's
//! `pgbackrest` container through `pods/exec` (RBAC: `create` on `pods/exec`), with the
//! repository side's configuration. Output is bounded; a command that does not finish within
//! [`EXEC_TIMEOUT`] is abandoned.

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::{RepoError, RepoHost, RepoInfo, Repository, info};
use crate::postgres::build::pgbackrest::{CONFIG_MOUNT, CONTAINER, REPO_CONF, STANZA};

/// How long one `pgbackrest info` may take.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(30);

/// The most output read from one command (the JSON of a few hundred backups).
const MAX_OUTPUT: u64 = 8 << 20;

/// Runs pgBackRest in repository hosts through the API server.
#[derive(Clone)]
pub struct ExecRepository {
    client: kube::Client,
}

impl ExecRepository {
    /// A repository reader using `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

async fn read_all(stream: Option<impl AsyncRead + Unpin>) -> String {
    let mut out = Vec::new();
    if let Some(s) = stream {
        let _ = s.take(MAX_OUTPUT).read_to_end(&mut out).await;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// pgBackRest's error lines (`ERROR: [055]: …`), or the last line of its output.
fn error_lines(stderr: &str, stdout: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .chain(stdout.lines())
        .filter(|l| l.contains("ERROR:"))
        .collect();
    if lines.is_empty() {
        stderr
            .lines()
            .chain(stdout.lines())
            .rfind(|l| !l.trim().is_empty())
            .unwrap_or("no output")
            .to_owned()
    } else {
        lines.join("; ")
    }
}

#[async_trait]
impl Repository for ExecRepository {
    async fn info(&self, host: &RepoHost) -> Result<RepoInfo, RepoError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &host.namespace);
        let command = [
            "pgbackrest".to_owned(),
            format!("--config={CONFIG_MOUNT}/{REPO_CONF}"),
            format!("--stanza={STANZA}"),
            "--output=json".to_owned(),
            "info".to_owned(),
        ];
        let params = AttachParams::default()
            .container(CONTAINER)
            .stdin(false)
            .stdout(true)
            .stderr(true);
        let run = async {
            let mut process = pods
                .exec(&host.pod, command, &params)
                .await
                .map_err(|e| RepoError::Unavailable(format!("exec in {}: {e}", host.pod)))?;
            let status = process.take_status();
            let (stdout, stderr) =
                tokio::join!(read_all(process.stdout()), read_all(process.stderr()));
            let status = match status {
                Some(s) => s.await,
                None => None,
            };
            let _ = process.join().await;
            Ok::<_, RepoError>((stdout, stderr, status))
        };
        let (stdout, stderr, status) =
            tokio::time::timeout(EXEC_TIMEOUT, run)
                .await
                .map_err(|_| {
                    RepoError::Unavailable(format!(
                        "pgbackrest info in {} did not answer within {}s",
                        host.pod,
                        EXEC_TIMEOUT.as_secs()
                    ))
                })??;
        match status {
            Some(s) if s.status.as_deref() == Some("Success") => info::parse(&stdout, STANZA),
            Some(s) => Err(RepoError::Command(format!(
                "pgbackrest info in {}: {} ({})",
                host.pod,
                error_lines(&stderr, &stdout),
                s.message.unwrap_or_default()
            ))),
            None => Err(RepoError::Unavailable(format!(
                "pgbackrest info in {}: the exec session ended without a status",
                host.pod
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_pgbackrests_error_lines() {
        let stderr = "WARN: something\nERROR: [103]: unable to find a valid repository\n";
        assert_eq!(
            error_lines(stderr, ""),
            "ERROR: [103]: unable to find a valid repository"
        );
        assert_eq!(error_lines("", "last words\n\n"), "last words");
        assert_eq!(error_lines("", ""), "no output");
    }
}
