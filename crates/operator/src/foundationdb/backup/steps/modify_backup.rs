//! ModifyBackup — sets what can change on a running backup to the spec: the snapshot period,
//! with `fdbbackup modify -t default -s <seconds>` (seed 002: only `snapshotPeriodSeconds`).

use async_trait::async_trait;

use super::{SOON, wants};
use crate::error::Error;
use crate::foundationdb::backup::plan::Action;
use crate::foundationdb::backup::{BackupPass, TAG};
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct ModifyBackup;

#[async_trait]
impl SubReconciler<BackupPass> for ModifyBackup {
    fn name(&self) -> &'static str {
        "ModifyBackup"
    }

    async fn reconcile(&self, pass: &mut BackupPass) -> Result<Outcome, Error> {
        let Some(Action::Modify(period)) = wants(pass, |a| matches!(a, Action::Modify(_))) else {
            return Ok(Outcome::Continue);
        };
        pass.fdbbackup(&[
            "modify".to_owned(),
            "-t".to_owned(),
            TAG.to_owned(),
            "-s".to_owned(),
            period.to_string(),
        ])
        .await?;
        pass.core.event(
            EventType::Normal,
            "BackupModified",
            "ModifyBackup",
            format!("snapshot period {period}s"),
        );
        Ok(Outcome::requeue(SOON, "backup modified"))
    }
}
