//! The real admin seam: FoundationDB's tools run in the cluster's Pods through `pods/exec`.
//! fdbcli reads the Pod's own cluster file (the one its `fdbserver` keeps up to date when the
//! coordinators change).

use std::time::Duration;

use async_trait::async_trait;

use super::{FdbAdmin, FdbError, Target};
use crate::foundationdb::build::{CLUSTER_FILE, CONTAINER, DATA_MOUNT};
use crate::resources::exec;

/// fdbcli's own `--timeout` (seconds); the exec is given a few more.
pub const CLI_TIMEOUT: u64 = 10;

/// See the module documentation.
#[derive(Clone)]
pub struct ExecAdmin {
    client: kube::Client,
}

impl ExecAdmin {
    /// Tools run through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    async fn run(&self, target: &Target, command: Vec<String>) -> Result<String, FdbError> {
        let out = exec::run(
            &self.client,
            &target.namespace,
            &target.pod,
            CONTAINER,
            command,
            Duration::from_secs(CLI_TIMEOUT + 5),
        )
        .await
        .map_err(|e| FdbError::Unavailable(e.0))?;
        if out.success {
            Ok(out.stdout)
        } else {
            Err(command_error(&out.stdout, &out.stderr, &out.message))
        }
    }
}

/// (pure) A failed tool's error: its `ERROR` line, else its last line; a tool that is not
/// there, or a Pod whose process is gone, is [`FdbError::Unavailable`].
pub fn command_error(stdout: &str, stderr: &str, message: &str) -> FdbError {
    let lines = || stderr.lines().chain(stdout.lines()).map(str::trim);
    let line = lines()
        .find(|l| l.starts_with("ERROR"))
        .or_else(|| lines().rfind(|l| !l.is_empty()))
        .unwrap_or(message)
        .to_owned();
    if line.contains("executable file not found")
        || line.contains("No such file")
        || line.contains("timed out")
        || line.contains("Could not communicate")
    {
        FdbError::Unavailable(line)
    } else {
        FdbError::Command(line)
    }
}

#[async_trait]
impl FdbAdmin for ExecAdmin {
    async fn cli(&self, target: &Target, commands: &str) -> Result<String, FdbError> {
        self.run(
            target,
            vec![
                "fdbcli".to_owned(),
                "-C".to_owned(),
                CLUSTER_FILE.to_owned(),
                "--timeout".to_owned(),
                CLI_TIMEOUT.to_string(),
                "--exec".to_owned(),
                commands.to_owned(),
            ],
        )
        .await
    }

    async fn tool(&self, target: &Target, argv: Vec<String>) -> Result<String, FdbError> {
        self.run(target, argv).await
    }

    async fn monitor_report(&self, target: &Target) -> Result<String, FdbError> {
        self.run(
            target,
            vec![
                "fdb-kubernetes-monitor".to_owned(),
                "report".to_owned(),
                "--data-dir".to_owned(),
                DATA_MOUNT.to_owned(),
            ],
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_fdbclis_error_line() {
        assert_eq!(
            command_error("", "ERROR: Database already exists!\nmore", ""),
            FdbError::Command("ERROR: Database already exists!".into())
        );
        assert!(matches!(
            command_error("ERROR: timed out waiting", "", ""),
            FdbError::Unavailable(_)
        ));
        assert_eq!(
            command_error("", "", "command terminated with exit code 1"),
            FdbError::Command("command terminated with exit code 1".into())
        );
    }
}
