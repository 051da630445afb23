//! StopBackup — when the spec says `Stopped` and a backup runs, `fdbbackup discontinue -t
//! default`: the backup ends at a restorable point (seed 002).

use async_trait::async_trait;

use super::{SOON, wants};
use crate::error::Error;
use crate::foundationdb::backup::plan::Action;
use crate::foundationdb::backup::{BackupPass, TAG};
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct StopBackup;

#[async_trait]
impl SubReconciler<BackupPass> for StopBackup {
    fn name(&self) -> &'static str {
        "StopBackup"
    }

    async fn reconcile(&self, pass: &mut BackupPass) -> Result<Outcome, Error> {
        if wants(pass, |a| *a == Action::Stop).is_none() {
            return Ok(Outcome::Continue);
        }
        pass.fdbbackup(&["discontinue".to_owned(), "-t".to_owned(), TAG.to_owned()])
            .await?;
        pass.core.event(
            EventType::Normal,
            "BackupStopped",
            "StopBackup",
            "backup discontinued",
        );
        Ok(Outcome::requeue(SOON, "backup stopping"))
    }
}
