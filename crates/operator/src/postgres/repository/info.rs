//! (pure) Parses `pgbackrest info --output=json` (pgBackRest 2.x's format: an array of
//! stanzas, each with `status`, `archive` and `backup`).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{BACKUP_ANNOTATION, BackupSet, RepoError, RepoInfo};

#[derive(Deserialize)]
struct Stanza {
    name: String,
    status: Status,
    #[serde(default)]
    archive: Vec<Archive>,
    #[serde(default)]
    backup: Vec<Backup>,
}

#[derive(Deserialize)]
struct Status {
    code: i64,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
struct Archive {
    min: Option<String>,
    max: Option<String>,
}

#[derive(Deserialize)]
struct Backup {
    label: String,
    #[serde(rename = "type")]
    type_: String,
    #[serde(default)]
    annotation: Option<BTreeMap<String, String>>,
    timestamp: Range<i64>,
    #[serde(default)]
    archive: Option<Range<Option<String>>>,
    #[serde(default)]
    lsn: Option<Range<Option<String>>>,
    info: Sizes,
    #[serde(default)]
    error: Option<bool>,
}

#[derive(Deserialize)]
struct Range<T> {
    start: T,
    stop: T,
}

#[derive(Deserialize)]
struct Sizes {
    size: i64,
    delta: i64,
    repository: RepoSizes,
}

#[derive(Deserialize)]
struct RepoSizes {
    size: i64,
    delta: i64,
}

/// The stanza `stanza` in `pgbackrest info --output=json`.
pub fn parse(json: &str, stanza: &str) -> Result<RepoInfo, RepoError> {
    let stanzas: Vec<Stanza> =
        serde_json::from_str(json).map_err(|e| RepoError::Parse(e.to_string()))?;
    let Some(s) = stanzas.into_iter().find(|s| s.name == stanza) else {
        return Err(RepoError::Parse(format!(
            "no stanza {stanza:?} in the output"
        )));
    };
    // One archive entry per database history entry (after a major upgrade); the newest is last.
    let wal_min = s.archive.iter().find_map(|a| a.min.clone());
    let wal_max = s.archive.iter().rev().find_map(|a| a.max.clone());
    let backups = s
        .backup
        .into_iter()
        .map(|b| {
            let (wal_start, wal_stop) = b.archive.map(|a| (a.start, a.stop)).unwrap_or_default();
            let (lsn_start, lsn_stop) = b.lsn.map(|l| (l.start, l.stop)).unwrap_or_default();
            BackupSet {
                backup: b.annotation.and_then(|mut a| a.remove(BACKUP_ANNOTATION)),
                label: b.label,
                type_: b.type_,
                start: b.timestamp.start,
                stop: b.timestamp.stop,
                wal_start,
                wal_stop,
                lsn_start,
                lsn_stop,
                size: b.info.size,
                delta: b.info.delta,
                repo_size: b.info.repository.size,
                repo_delta: b.info.repository.delta,
                error: b.error.unwrap_or(false),
            }
        })
        .collect();
    Ok(RepoInfo {
        status_code: s.status.code,
        status_message: s.status.message,
        backups,
        wal_min,
        wal_max,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Printed by pgBackRest 2.45 for a full and an incremental backup, both annotated.
    const INFO: &str = include_str!("testdata/info-2.45.json");

    #[test]
    fn reads_what_pgbackrest_2_45_prints() {
        let info = parse(INFO, "db").unwrap();
        assert_eq!((info.status_code, info.status_message.as_str()), (0, "ok"));
        assert_eq!(info.wal_min.as_deref(), Some("000000010000000000000001"));
        assert_eq!(info.wal_max.as_deref(), Some("000000010000000000000004"));
        assert_eq!(info.backups.len(), 2);
        let full = &info.backups[0];
        assert_eq!(full.label, "20261126-070424F");
        assert_eq!(full.type_, "full");
        assert_eq!(full.backup.as_deref(), Some("first"));
        assert_eq!((full.start, full.stop), (1_795_676_664, 1_795_676_669));
        assert_eq!(full.wal_start.as_deref(), Some("000000010000000000000002"));
        assert_eq!(full.lsn_stop.as_deref(), Some("0/2000100"));
        assert_eq!((full.size, full.repo_size), (22_992_523, 3_043_451));
        let incr = info.backup_of("second").unwrap();
        assert_eq!(incr.type_, "incr");
        assert_eq!(incr.label, "20261126-070424F_20261126-070430I");
        assert_eq!((incr.delta, incr.repo_delta), (1_474_826, 167_078));
        assert!(info.backup_of("third").is_none());
        assert!(!info.stanza_missing());
    }

    #[test]
    fn a_missing_stanza_and_garbage_are_told_apart() {
        let missing = r#"[{"archive":[],"backup":[],"cipher":"none","db":[],"name":"db",
            "repo":[{"cipher":"none","key":1,"status":{"code":1,"message":"missing stanza path"}}],
            "status":{"code":1,"lock":{"backup":{"held":false}},"message":"missing stanza path"}}]"#;
        let info = parse(missing, "db").unwrap();
        assert!(info.stanza_missing() && info.backups.is_empty());
        assert!(matches!(parse(missing, "other"), Err(RepoError::Parse(_))));
        assert!(matches!(
            parse("ERROR: [055]", "db"),
            Err(RepoError::Parse(_))
        ));
    }
}
