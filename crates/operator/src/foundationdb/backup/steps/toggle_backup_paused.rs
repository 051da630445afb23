//! ToggleBackupPaused — `fdbbackup pause` when the spec says `Paused` and the agents work,
//! `fdbbackup resume` when it says `Running` and they are paused (seed 002).

use async_trait::async_trait;

use super::{SOON, wants};
use crate::error::Error;
use crate::foundationdb::backup::BackupPass;
use crate::foundationdb::backup::plan::Action;
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct ToggleBackupPaused;

#[async_trait]
impl SubReconciler<BackupPass> for ToggleBackupPaused {
    fn name(&self) -> &'static str {
        "ToggleBackupPaused"
    }

    async fn reconcile(&self, pass: &mut BackupPass) -> Result<Outcome, Error> {
        let Some(action) = wants(pass, |a| matches!(a, Action::Pause | Action::Resume)) else {
            return Ok(Outcome::Continue);
        };
        let (command, reason) = if action == Action::Pause {
            ("pause", "BackupPaused")
        } else {
            ("resume", "BackupResumed")
        };
        pass.fdbbackup(&[command.to_owned()]).await?;
        pass.core.event(
            EventType::Normal,
            reason,
            "ToggleBackupPaused",
            format!("backup agents: {command}"),
        );
        Ok(Outcome::requeue(SOON, format!("backup {command}d")))
    }
}
