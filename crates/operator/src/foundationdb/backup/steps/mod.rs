//! The backup pipeline's steps, one per file, in pipeline order.

mod modify_backup;
mod start_backup;
mod stop_backup;
mod toggle_backup_paused;
mod update_backup_agents;
mod update_backup_status;

pub use modify_backup::ModifyBackup;
pub use start_backup::StartBackup;
pub use stop_backup::StopBackup;
pub use toggle_backup_paused::ToggleBackupPaused;
pub use update_backup_agents::UpdateBackupAgents;
pub use update_backup_status::UpdateBackupStatus;

use std::time::Duration;

use super::BackupPass;
use super::plan::{Action, actions};

/// How soon to look again while the backup changes.
pub const SOON: Duration = Duration::from_secs(3);

/// Whether the spec asks for `action` of the live backup read on this pass.
pub fn wants(pass: &BackupPass, pick: impl Fn(&Action) -> bool) -> Option<Action> {
    let live = pass.live.as_ref()?;
    actions(
        pass.backup.spec.backup_state,
        pass.backup.spec.snapshot_period_seconds,
        live,
    )
    .into_iter()
    .find(|a| pick(a))
}
