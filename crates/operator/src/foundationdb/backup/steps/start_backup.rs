//! StartBackup — when the backup should run (`Running` or `Paused`) and `fdbbackup status`
//! reports none running, runs `fdbbackup start -d file:///var/fdb/backup/<name> -t default -s
//! <snapshotPeriodSeconds>` (seed 002). A start that finds one already running is no error.

use async_trait::async_trait;
use steward_api::common::{OperationKind, OperationPhase};

use super::{SOON, wants};
use crate::error::Error;
use crate::foundationdb::backup::build::backup_url;
use crate::foundationdb::backup::plan::Action;
use crate::foundationdb::backup::{BackupPass, TAG};
use crate::operation::OperationRequest;
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct StartBackup;

#[async_trait]
impl SubReconciler<BackupPass> for StartBackup {
    fn name(&self) -> &'static str {
        "StartBackup"
    }

    async fn reconcile(&self, pass: &mut BackupPass) -> Result<Outcome, Error> {
        if pass
            .core
            .status
            .operation
            .as_ref()
            .is_some_and(|o| o.kind == OperationKind::Backup)
            && pass
                .status
                .backup_details
                .as_ref()
                .is_some_and(|d| d.running && d.restorable)
        {
            pass.core.finish_operation(
                OperationKind::Backup,
                OperationPhase::Succeeded,
                "the backup is restorable",
            );
        }
        if wants(pass, |a| *a == Action::Start).is_none() {
            return Ok(Outcome::Continue);
        }
        if pass.status.agent_count == 0 && pass.backup.spec.agent_count > 0 {
            return Ok(Outcome::requeue(
                SOON,
                "the backup starts once an agent runs",
            ));
        }
        let url = backup_url(&pass.core.name);
        let args = vec![
            "start".to_owned(),
            "-d".to_owned(),
            url.clone(),
            "-t".to_owned(),
            TAG.to_owned(),
            "-s".to_owned(),
            pass.backup.spec.snapshot_period_seconds.to_string(),
        ];
        match pass.fdbbackup(&args).await {
            Ok(_) => {}
            Err(Error::Database { message, .. }) if message.contains("already running") => {}
            Err(e) => return Err(e),
        }
        pass.core.start_operation(OperationRequest {
            kind: OperationKind::Backup,
            step: "StartBackup".into(),
            total: 1,
            change: Default::default(),
            message: format!("backup to {url} started"),
        });
        pass.core.event(
            EventType::Normal,
            "BackupStarted",
            "StartBackup",
            format!("backup to {url}"),
        );
        Ok(Outcome::requeue(SOON, "backup started"))
    }
}
