//! (pure) What the backup steps decide from the spec and `fdbbackup status --json`.

use serde::Deserialize;
use steward_api::foundationdb::BackupState;

use crate::foundationdb::admin::FdbError;

/// `fdbbackup status --json` (FoundationDB's operator's `FoundationDBLiveBackupStatus`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct LiveStatus {
    /// `DestinationURL`.
    #[serde(rename = "DestinationURL")]
    pub destination_url: String,
    /// `SnapshotIntervalSeconds`.
    #[serde(rename = "SnapshotIntervalSeconds")]
    pub snapshot_interval_seconds: i64,
    /// `Status`.
    #[serde(rename = "Status")]
    pub status: LiveState,
    /// `BackupAgentsPaused`.
    #[serde(rename = "BackupAgentsPaused")]
    pub paused: bool,
    /// `Restorable`.
    #[serde(rename = "Restorable")]
    pub restorable: Option<bool>,
    /// `LatestRestorablePoint`.
    #[serde(rename = "LatestRestorablePoint")]
    pub latest: Option<RestorablePoint>,
}

/// `Status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct LiveState {
    /// FoundationDB's name of the state.
    #[serde(rename = "Name")]
    pub name: String,
    /// The backup runs.
    #[serde(rename = "Running")]
    pub running: bool,
    /// It completed.
    #[serde(rename = "Completed")]
    pub completed: bool,
}

/// `LatestRestorablePoint`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct RestorablePoint {
    /// `Version`.
    #[serde(rename = "Version")]
    pub version: Option<u64>,
}

impl LiveStatus {
    /// Parses `fdbbackup status --json`.
    pub fn parse(text: &str) -> Result<Self, FdbError> {
        let start = text
            .find('{')
            .ok_or_else(|| FdbError::Unreadable("fdbbackup status printed no JSON".into()))?;
        serde_json::from_str(&text[start..])
            .map_err(|e| FdbError::Unreadable(format!("fdbbackup status: {e}")))
    }
}

/// What a backup step does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// `fdbbackup start`.
    Start,
    /// `fdbbackup discontinue`.
    Stop,
    /// `fdbbackup pause`.
    Pause,
    /// `fdbbackup resume`.
    Resume,
    /// `fdbbackup modify -s <seconds>`.
    Modify(u32),
}

/// (pure) The actions the spec asks of the live backup, in the seed's step order: start one
/// when it should run (Running or Paused) and none runs; stop it when Stopped and it runs;
/// pause or resume the agents; set the snapshot period of a running backup.
pub fn actions(state: BackupState, period: u32, live: &LiveStatus) -> Vec<Action> {
    let mut out = Vec::new();
    let running = live.status.running;
    let wanted = matches!(state, BackupState::Running | BackupState::Paused);
    if wanted && !running {
        out.push(Action::Start);
    }
    if !wanted && running {
        out.push(Action::Stop);
    }
    match state {
        BackupState::Paused if !live.paused => out.push(Action::Pause),
        BackupState::Running if live.paused => out.push(Action::Resume),
        _ => {}
    }
    if running && wanted && live.snapshot_interval_seconds != i64::from(period) {
        out.push(Action::Modify(period));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(running: bool, paused: bool, period: i64) -> LiveStatus {
        LiveStatus {
            snapshot_interval_seconds: period,
            status: LiveState {
                running,
                ..LiveState::default()
            },
            paused,
            ..LiveStatus::default()
        }
    }

    #[test]
    fn each_state_asks_for_its_commands() {
        assert_eq!(
            actions(BackupState::Running, 60, &live(false, false, 0)),
            [Action::Start]
        );
        assert!(actions(BackupState::Running, 60, &live(true, false, 60)).is_empty());
        assert_eq!(
            actions(BackupState::Stopped, 60, &live(true, false, 60)),
            [Action::Stop]
        );
        assert!(actions(BackupState::Stopped, 60, &live(false, false, 60)).is_empty());
        assert_eq!(
            actions(BackupState::Paused, 60, &live(true, false, 60)),
            [Action::Pause]
        );
        assert_eq!(
            actions(BackupState::Running, 60, &live(true, true, 60)),
            [Action::Resume]
        );
        assert_eq!(
            actions(BackupState::Running, 30, &live(true, false, 60)),
            [Action::Modify(30)]
        );
        // A new backup is started (and then modified on a later pass, once it runs).
        assert_eq!(
            actions(BackupState::Paused, 30, &live(false, false, 0)),
            [Action::Start, Action::Pause]
        );
    }

    #[test]
    fn the_live_status_is_read() {
        let s = LiveStatus::parse(
            r#"{"DestinationURL":"file:///b","SnapshotIntervalSeconds":60,
            "Status":{"Name":"is differential","Running":true,"Completed":false},
            "BackupAgentsPaused":false,"Restorable":true,"LatestRestorablePoint":{"Version":42}}"#,
        )
        .unwrap();
        assert!(s.status.running);
        assert_eq!(s.latest.and_then(|l| l.version), Some(42));
        assert!(LiveStatus::parse("ERROR: x").is_err());
    }
}
