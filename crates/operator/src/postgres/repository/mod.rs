//! The pgBackRest repository seam: what Steward reads from a cluster's repository host
//! (`pgbackrest info --output=json`, the seed's `pgo show backup`). [`exec::ExecRepository`]
//! runs the command in the repository host's container through `pods/exec`, as the seed's
//! operator does; [`model::RepoModel`] is an in-memory repository with pgBackRest's rules
//! (type promotion, labels, retention) for step tests. [`info`] parses the JSON both return.

pub mod exec;
pub mod info;
pub mod model;

use async_trait::async_trait;

/// The annotation every Steward backup carries in the repository (`--annotation`), naming the
/// `PostgresBackup` that took it.
pub const BACKUP_ANNOTATION: &str = "steward.dev/backup";

/// A repository host: the Pod whose `pgbackrest` container holds the repository.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RepoHost {
    /// Namespace.
    pub namespace: String,
    /// Pod name (`<cluster>-repo`).
    pub pod: String,
}

/// One backup set, as `pgbackrest info` describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackupSet {
    /// The label (`20261126-070424F`, `…F_20261126-070430I`).
    pub label: String,
    /// `full`, `diff` or `incr`.
    pub type_: String,
    /// The `PostgresBackup` named by [`BACKUP_ANNOTATION`], if any.
    pub backup: Option<String>,
    /// Start, Unix seconds.
    pub start: i64,
    /// Stop, Unix seconds.
    pub stop: i64,
    /// First WAL segment needed.
    pub wal_start: Option<String>,
    /// Last WAL segment needed.
    pub wal_stop: Option<String>,
    /// Start LSN.
    pub lsn_start: Option<String>,
    /// Stop LSN.
    pub lsn_stop: Option<String>,
    /// Database size, bytes.
    pub size: i64,
    /// Bytes copied by this backup.
    pub delta: i64,
    /// Bytes of the set in the repository.
    pub repo_size: i64,
    /// Bytes this backup added to the repository.
    pub repo_delta: i64,
    /// pgBackRest found page checksum errors while copying.
    pub error: bool,
}

/// `pgbackrest info` of the cluster's stanza.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepoInfo {
    /// pgBackRest's stanza status code: 0 ok, 1 missing stanza path, 2 no valid backups,
    /// 3 missing stanza data, …
    pub status_code: i64,
    /// Its message.
    pub status_message: String,
    /// Backups, oldest first (as pgBackRest lists them).
    pub backups: Vec<BackupSet>,
    /// Oldest archived WAL segment.
    pub wal_min: Option<String>,
    /// Newest archived WAL segment.
    pub wal_max: Option<String>,
}

impl RepoInfo {
    /// The newest backup `PostgresBackup` `name` took.
    pub fn backup_of(&self, name: &str) -> Option<&BackupSet> {
        self.backups
            .iter()
            .rev()
            .find(|b| b.backup.as_deref() == Some(name))
    }

    /// Whether the stanza is missing from the repository (lost or never created).
    pub fn stanza_missing(&self) -> bool {
        matches!(self.status_code, 1 | 3)
    }
}

/// Why the repository could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RepoError {
    /// The repository host could not be reached (no Pod, not running, exec refused).
    #[error("repository host unreachable: {0}")]
    Unavailable(String),
    /// `pgbackrest` ran and failed.
    #[error("pgbackrest failed: {0}")]
    Command(String),
    /// Its output was not what pgBackRest 2.x prints.
    #[error("unexpected pgbackrest output: {0}")]
    Parse(String),
}

/// Reads a cluster's repository.
#[async_trait]
pub trait Repository: Send + Sync {
    /// `pgbackrest info` of the stanza on this repository host.
    async fn info(&self, host: &RepoHost) -> Result<RepoInfo, RepoError>;
}
