//! An in-memory pgBackRest repository per repository host, for step tests. It keeps
//! pgBackRest's rules that Steward depends on:
//!
//! - nothing can be backed up before `stanza-create` (`info` says "missing stanza path");
//! - a `diff` or `incr` backup with no full backup to build on is taken as a full one;
//! - labels: `YYYYMMDD-HHMMSSF` for a full backup, `<full>_YYYYMMDD-HHMMSS{D,I}` for the
//!   others (a `diff` builds on the last full, an `incr` on the last backup);
//! - after each backup, full backups beyond `repo1-retention-full` expire, with every backup
//!   built on them;
//! - a host can be made unreachable (its Pod gone), and its repository lost (emptied).
//!
//! It does not model the WAL archive beyond its range, checksums or encryption.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use jiff::Timestamp;

use super::{BackupSet, RepoError, RepoHost, RepoInfo, Repository};

#[derive(Clone, Debug, Default)]
struct Repo {
    stanza: bool,
    unreachable: bool,
    retention_full: usize,
    backups: Vec<BackupSet>,
    /// Segments archived so far.
    archived: u64,
}

/// Shared model state; clones see the same repositories.
#[derive(Clone, Debug, Default)]
pub struct RepoModel {
    repos: Arc<Mutex<BTreeMap<RepoHost, Repo>>>,
}

fn segment(n: u64) -> String {
    format!("00000001{:08X}{:08X}", n >> 8, n & 0xff)
}

fn stamp(at: Timestamp) -> String {
    at.strftime("%Y%m%d-%H%M%S").to_string()
}

impl RepoModel {
    /// An empty model: every host answers with a missing stanza until `create_stanza`.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<RepoHost, Repo>> {
        self.repos.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn with<T>(&self, host: &RepoHost, f: impl FnOnce(&mut Repo) -> T) -> T {
        let mut repos = self.lock();
        let repo = repos.entry(host.clone()).or_insert_with(|| Repo {
            retention_full: 2,
            ..Repo::default()
        });
        f(repo)
    }

    /// `stanza-create` (idempotent).
    pub fn create_stanza(&self, host: &RepoHost) {
        self.with(host, |r| r.stanza = true);
    }

    /// Sets `repo1-retention-full`.
    pub fn set_retention_full(&self, host: &RepoHost, keep: usize) {
        self.with(host, |r| r.retention_full = keep.max(1));
    }

    /// Makes the host unreachable (`info` fails) or reachable again.
    pub fn set_unreachable(&self, host: &RepoHost, unreachable: bool) {
        self.with(host, |r| r.unreachable = unreachable);
    }

    /// Loses everything in the repository, the stanza too.
    pub fn lose(&self, host: &RepoHost) {
        self.with(host, |r| {
            r.stanza = false;
            r.backups.clear();
            r.archived = 0;
        });
    }

    /// The primary archives `segments` more WAL segments.
    pub fn archive(&self, host: &RepoHost, segments: u64) {
        self.with(host, |r| r.archived += segments);
    }

    /// `pgbackrest backup --type=<type_> --annotation=steward.dev/backup=<backup>` finishing at
    /// `at` after `seconds`, with a database of `size` bytes. Errors as pgBackRest does on a
    /// missing stanza.
    pub fn backup(
        &self,
        host: &RepoHost,
        type_: &str,
        backup: &str,
        at: Timestamp,
        seconds: i64,
        size: i64,
    ) -> Result<BackupSet, String> {
        self.with(host, |r| {
            if !r.stanza {
                return Err("ERROR: [055]: unable to load info file '/pgbackrest/repo/backup/db/backup.info'".into());
            }
            let last_full = r.backups.iter().rposition(|b| b.type_ == "full");
            let type_ = if last_full.is_none() { "full" } else { type_ };
            let start = at.as_second() - seconds;
            let label = match (type_, last_full) {
                ("full", _) | (_, None) => format!("{}F", stamp(at)),
                (kind, Some(full)) => format!(
                    "{}_{}{}",
                    r.backups[full].label.split('_').next().unwrap_or_default(),
                    stamp(at),
                    if kind == "diff" { "D" } else { "I" }
                ),
            };
            let delta = if type_ == "full" { size } else { size / 10 };
            let prior_repo = match type_ {
                "full" => 0,
                "diff" => last_full.map_or(0, |i| r.backups[i].repo_size),
                _ => r.backups.last().map_or(0, |b| b.repo_size),
            };
            r.archived += 2;
            let set = BackupSet {
                label,
                type_: type_.to_owned(),
                backup: Some(backup.to_owned()),
                start,
                stop: at.as_second(),
                wal_start: Some(segment(r.archived - 1)),
                wal_stop: Some(segment(r.archived)),
                lsn_start: Some(format!("0/{:X}000028", r.archived - 1)),
                lsn_stop: Some(format!("0/{:X}000100", r.archived)),
                size,
                delta,
                repo_size: prior_repo + delta / 8,
                repo_delta: delta / 8,
                error: false,
            };
            r.backups.push(set.clone());
            // Expire: full backups beyond the retention, with what builds on them.
            let fulls: Vec<String> = r
                .backups
                .iter()
                .filter(|b| b.type_ == "full")
                .map(|b| b.label.clone())
                .collect();
            let expired = fulls.len().saturating_sub(r.retention_full);
            for label in fulls.iter().take(expired) {
                r.backups.retain(|b| !b.label.starts_with(label.as_str()));
            }
            Ok(set)
        })
    }

    /// The labels the repository holds, oldest first.
    pub fn labels(&self, host: &RepoHost) -> Vec<String> {
        self.with(host, |r| {
            r.backups.iter().map(|b| b.label.clone()).collect()
        })
    }
}

#[async_trait]
impl Repository for RepoModel {
    async fn info(&self, host: &RepoHost) -> Result<RepoInfo, RepoError> {
        self.with(host, |r| {
            if r.unreachable {
                return Err(RepoError::Unavailable(format!(
                    "exec in {}: pod not running",
                    host.pod
                )));
            }
            let (status_code, status_message) = match (r.stanza, r.backups.is_empty()) {
                (false, _) => (1, "missing stanza path"),
                (true, true) => (2, "no valid backups"),
                (true, false) => (0, "ok"),
            };
            let first = r
                .backups
                .first()
                .and_then(|b| b.wal_start.clone())
                .or_else(|| (r.archived > 0).then(|| segment(1)));
            Ok(RepoInfo {
                status_code,
                status_message: status_message.to_owned(),
                backups: r.backups.clone(),
                wal_min: first,
                wal_max: (r.archived > 0).then(|| segment(r.archived)),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> RepoHost {
        RepoHost {
            namespace: "db".into(),
            pod: "demo-repo".into(),
        }
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[tokio::test]
    async fn follows_pgbackrests_rules() {
        let model = RepoModel::new();
        let h = host();
        assert!(model.info(&h).await.unwrap().stanza_missing());
        let no_stanza = model.backup(&h, "full", "b0", at("2026-11-26T07:00:00Z"), 5, 100);
        assert!(no_stanza.unwrap_err().contains("[055]"));
        model.create_stanza(&h);
        assert_eq!(model.info(&h).await.unwrap().status_code, 2);

        let first = model
            .backup(&h, "incr", "b1", at("2026-11-26T07:00:00Z"), 5, 1000)
            .unwrap();
        assert_eq!(
            (first.type_.as_str(), first.label.as_str()),
            ("full", "20261126-070000F")
        );
        let incr = model
            .backup(&h, "incr", "b2", at("2026-11-26T07:10:00Z"), 1, 1000)
            .unwrap();
        assert_eq!(incr.label, "20261126-070000F_20261126-071000I");
        assert!(incr.repo_size > first.repo_size);
        let info = model.info(&h).await.unwrap();
        assert_eq!(info.backup_of("b2").unwrap().type_, "incr");
        assert_eq!(info.backups[0].backup.as_deref(), Some("b1"));

        // Retention: one full kept, and the incremental built on the expired one goes too.
        model.set_retention_full(&h, 1);
        model
            .backup(&h, "full", "b3", at("2026-11-26T08:00:00Z"), 5, 1000)
            .unwrap();
        assert_eq!(model.labels(&h), ["20261126-080000F"]);

        model.set_unreachable(&h, true);
        assert!(matches!(
            model.info(&h).await,
            Err(RepoError::Unavailable(_))
        ));
        model.set_unreachable(&h, false);
        model.lose(&h);
        assert!(model.info(&h).await.unwrap().stanza_missing());
    }
}
