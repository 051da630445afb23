//! The PostgreSQL admin seam: everything the engine asks of one PostgreSQL instance goes through
//! [`PostgresAdmin`], opened by a [`PostgresConnector`]. [`client`] talks to real PostgreSQL
//! (`tokio-postgres`); [`model`] is an in-memory set of instances (a primary and its streaming
//! standbys) that enforces the same rules, for step tests; [`sql`] is the pure SQL text
//! (quoting, statements) the client sends.
//!
//! Clear-text passwords go only into the login exchange: the client hashes them to SCRAM-SHA-256
//! verifiers before they go into DDL (so the server's statement log shows none),
//! [`ConnectionTarget`]'s `Debug` redacts them, and no error message contains one.

pub mod client;
pub mod model;
pub mod sql;

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;

/// A WAL position (`pg_lsn`), written by PostgreSQL as two hex halves: `16/B374D848`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    /// How many bytes of WAL `self` is behind `ahead` (0 when it is not behind).
    pub fn bytes_behind(self, ahead: Lsn) -> u64 {
        ahead.0.saturating_sub(self.0)
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

impl FromStr for Lsn {
    type Err = PgAdminError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || PgAdminError::Other(format!("not an LSN: {s:?}"));
        let (hi, lo) = s.split_once('/').ok_or_else(bad)?;
        let half = |h: &str| {
            if h.is_empty() || h.len() > 8 {
                return Err(bad());
            }
            u32::from_str_radix(h, 16).map_err(|_| bad())
        };
        Ok(Self((u64::from(half(hi)?) << 32) | u64::from(half(lo)?)))
    }
}

/// What an instance says about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// `server_version_num`, e.g. `150018` for 15.18.
    pub version_num: u32,
    /// `pg_is_in_recovery()`: a standby (or a primary still replaying at startup).
    pub in_recovery: bool,
    /// The timeline the instance writes (a primary) or replays (a standby); 1 for a fresh
    /// cluster, +1 on every promotion.
    pub timeline: u32,
    /// The cluster's system identifier (`pg_control_system()`); a primary and its standbys share
    /// it, an unrelated `initdb` does not.
    pub system_identifier: u64,
}

/// Where an instance is in the WAL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalPosition {
    /// A primary: `pg_current_wal_lsn()`.
    Primary {
        /// The current write position.
        current: Lsn,
    },
    /// A standby: what it has received from its upstream and what it has replayed.
    Standby {
        /// `pg_last_wal_receive_lsn()`; `None` if it never streamed.
        receive: Option<Lsn>,
        /// `pg_last_wal_replay_lsn()`; `None` if it has replayed nothing yet.
        replay: Option<Lsn>,
    },
}

impl WalPosition {
    /// The position up to which this instance's data is visible: the current LSN on a
    /// primary, the replay LSN on a standby.
    pub fn applied(&self) -> Option<Lsn> {
        match self {
            Self::Primary { current } => Some(*current),
            Self::Standby { replay, .. } => *replay,
        }
    }
}

/// One row of `pg_stat_replication` on a primary: a connected WAL receiver (a standby) or a
/// base backup. The engine computes lag from the LSNs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicationConnection {
    /// The standby's `application_name` (its `cluster_name` unless `primary_conninfo` says).
    pub application_name: String,
    /// The standby's address; `None` over a Unix socket.
    pub client_addr: Option<IpAddr>,
    /// `startup`, `catchup`, `streaming`, `backup` or `stopping`.
    pub state: String,
    /// Last WAL position sent.
    pub sent_lsn: Option<Lsn>,
    /// Last position the standby wrote to disk.
    pub write_lsn: Option<Lsn>,
    /// Last position the standby flushed to disk.
    pub flush_lsn: Option<Lsn>,
    /// Last position the standby replayed.
    pub replay_lsn: Option<Lsn>,
    /// `async`, `potential`, `sync` or `quorum`.
    pub sync_state: String,
}

/// Attributes of a role created by [`PostgresAdmin::create_role`]. The default is a plain
/// login role without limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoleOptions {
    /// `LOGIN` (else `NOLOGIN`).
    pub login: bool,
    /// `SUPERUSER`.
    pub superuser: bool,
    /// `REPLICATION`: may stream WAL (standbys, base backups).
    pub replication: bool,
    /// `CREATEDB`.
    pub createdb: bool,
    /// `CONNECTION LIMIT`; `None` is unlimited.
    pub connection_limit: Option<u32>,
}

impl Default for RoleOptions {
    fn default() -> Self {
        Self {
            login: true,
            superuser: false,
            replication: false,
            createdb: false,
            connection_limit: None,
        }
    }
}

/// Where and as whom to connect. `Debug` shows everything but the password.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectionTarget {
    /// Host name or IP address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Role to log in as.
    pub user: String,
    /// Its password (clear text; sent only inside the SCRAM exchange).
    pub password: String,
    /// Database to connect to.
    pub dbname: String,
}

impl ConnectionTarget {
    /// A target on the `postgres` database.
    pub fn new(
        host: impl Into<String>,
        port: u16,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        Self {
            host: host.into(),
            port,
            user: user.into(),
            password: password.into(),
            dbname: "postgres".to_owned(),
        }
    }

    /// The same target as another user.
    pub fn as_user(&self, user: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            user: user.into(),
            password: password.into(),
            ..self.clone()
        }
    }

    /// The same target on another database.
    pub fn on_database(&self, dbname: impl Into<String>) -> Self {
        Self {
            dbname: dbname.into(),
            ..self.clone()
        }
    }

    /// `user@host:port/dbname`, for messages.
    pub fn describe(&self) -> String {
        format!("{}@{}:{}/{}", self.user, self.host, self.port, self.dbname)
    }
}

impl fmt::Debug for ConnectionTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionTarget")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .field("dbname", &self.dbname)
            .finish()
    }
}

/// Why an admin call failed. The engine decides on the kind, never on message text. Messages
/// never contain a password.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PgAdminError {
    /// No answer: connection refused or reset, timeout, the server starting up or shutting down
    /// (SQLSTATE classes 08 and 57P, `53300` too many connections).
    #[error("postgres unreachable: {0}")]
    Unavailable(String),
    /// The server refused the login: wrong password or unknown role (`28P01`), a role that may
    /// not log in (`28000`).
    #[error("postgres login refused: {0}")]
    AuthFailed(String),
    /// The instance is a standby (read-only, `25006`); writes must go to the primary.
    #[error("postgres instance is read-only: {0}")]
    ReadOnly(String),
    /// Promotion asked of an instance that is not in recovery (already a primary; `55000`).
    #[error("postgres instance is not in recovery: {0}")]
    NotInRecovery(String),
    /// The role or database already exists (`42710`, `42P04`).
    #[error("postgres object already exists: {0}")]
    AlreadyExists(String),
    /// The role or database does not exist (`42704`, `3D000`).
    #[error("postgres object not found: {0}")]
    NotFound(String),
    /// The request cannot be expressed: an empty name, a name over 63 bytes, a NUL byte.
    #[error("invalid postgres request: {0}")]
    Invalid(String),
    /// Anything else PostgreSQL said.
    #[error("postgres error: {0}")]
    Other(String),
}

impl PgAdminError {
    /// Maps a SQLSTATE and the server's message to an error kind. Promotion's "recovery is not
    /// in progress" (`55000`) is mapped by the caller: the same code has other meanings.
    pub fn from_sqlstate(code: &str, message: impl Into<String>) -> Self {
        let message = format!("{} (SQLSTATE {code})", message.into());
        match code {
            "28P01" | "28000" => Self::AuthFailed(message),
            "25006" => Self::ReadOnly(message),
            "42710" | "42P04" => Self::AlreadyExists(message),
            "42704" | "3D000" => Self::NotFound(message),
            "53300" => Self::Unavailable(message),
            c if c.starts_with("08") || c.starts_with("57P") => Self::Unavailable(message),
            _ => Self::Other(message),
        }
    }

    /// A stable label for metrics and event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Unavailable(_) => "Unavailable",
            Self::AuthFailed(_) => "AuthFailed",
            Self::ReadOnly(_) => "ReadOnly",
            Self::NotInRecovery(_) => "NotInRecovery",
            Self::AlreadyExists(_) => "AlreadyExists",
            Self::NotFound(_) => "NotFound",
            Self::Invalid(_) => "Invalid",
            Self::Other(_) => "Other",
        }
    }

    /// True when retrying later may succeed without anyone changing anything.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// WAL archiving as the instance's `pg_stat_archiver` counts it (since the last statistics
/// reset; times in whole Unix seconds).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArchiverStats {
    /// Segments archived.
    pub archived_count: i64,
    /// The last segment archived.
    pub last_archived_wal: Option<String>,
    /// When it was archived.
    pub last_archived_time: Option<i64>,
    /// Failed attempts.
    pub failed_count: i64,
    /// The segment of the last failed attempt.
    pub last_failed_wal: Option<String>,
    /// When that attempt failed.
    pub last_failed_time: Option<i64>,
}

impl ArchiverStats {
    /// The last attempt failed: a failure after the last success (or with no success yet).
    pub fn failing(&self) -> bool {
        self.last_failed_time
            .is_some_and(|failed| self.last_archived_time.is_none_or(|ok| failed > ok))
    }
}

/// What SQL text did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SqlOutcome {
    /// Rows inserted, updated, deleted or returned, summed over the statements.
    pub rows: u64,
    /// The first column of the first row returned (as text; `None` for SQL `NULL` or no row).
    pub first: Option<String>,
}

/// Operations on one PostgreSQL instance, as a superuser.
#[async_trait]
pub trait PostgresAdmin: Send + Sync {
    /// Version, recovery state, timeline and system identifier.
    async fn server_info(&self) -> Result<ServerInfo, PgAdminError>;
    /// The WAL position: current on a primary, received and replayed on a standby.
    async fn wal_position(&self) -> Result<WalPosition, PgAdminError>;
    /// The standbys streaming from this instance (`pg_stat_replication`); empty on a standby
    /// without cascading standbys of its own.
    async fn replication(&self) -> Result<Vec<ReplicationConnection>, PgAdminError>;
    /// WAL archiving so far (`pg_stat_archiver`).
    async fn archiver(&self) -> Result<ArchiverStats, PgAdminError>;
    /// Ends the current WAL segment (`pg_switch_wal`) so that it is archived; returns its file
    /// name. Fails on a standby (recovery is in progress).
    async fn switch_wal(&self) -> Result<String, PgAdminError>;
    /// Promotes a standby to primary (`pg_promote`), waiting up to `wait` (whole seconds, at
    /// least one) for it to finish. `Ok(false)`: promotion was triggered but had not finished in
    /// time. [`PgAdminError::NotInRecovery`] on a primary.
    async fn promote(&self, wait: Duration) -> Result<bool, PgAdminError>;
    /// Whether the role exists.
    async fn role_exists(&self, name: &str) -> Result<bool, PgAdminError>;
    /// Creates a role with this password. [`PgAdminError::AlreadyExists`] if it exists.
    async fn create_role(
        &self,
        name: &str,
        password: &str,
        options: &RoleOptions,
    ) -> Result<(), PgAdminError>;
    /// Sets a role's password. [`PgAdminError::NotFound`] if the role does not exist.
    async fn alter_password(&self, name: &str, new_password: &str) -> Result<(), PgAdminError>;
    /// Drops a role; nothing to do if it does not exist.
    async fn drop_role(&self, name: &str) -> Result<(), PgAdminError>;
    /// Creates a database owned by `owner` unless one of that name exists (its owner is then
    /// left alone). `Ok(true)` if it was created.
    async fn create_database(&self, name: &str, owner: &str) -> Result<bool, PgAdminError>;
    /// Grants a role all privileges on a database (`CONNECT`, `CREATE`, `TEMPORARY`);
    /// granting twice is not an error, but it is a write: check with
    /// [`has_database_privileges`](Self::has_database_privileges) first.
    async fn grant_database(&self, role: &str, database: &str) -> Result<(), PgAdminError>;
    /// Whether a role holds every privilege [`grant_database`](Self::grant_database) grants on a
    /// database, however it holds them: as a superuser, as the owner or by a grant. A read.
    /// [`PgAdminError::NotFound`] if the role or the database does not exist.
    async fn has_database_privileges(
        &self,
        role: &str,
        database: &str,
    ) -> Result<bool, PgAdminError>;
    /// Runs SQL text (one or more statements, as one simple query: one implicit transaction)
    /// as the connected user in the connected database, with `statement_timeout` set to
    /// `timeout`; returns the rows the statements affected or returned, summed, and the first
    /// column of the first row returned. Policies and checks: unlike every other call, the
    /// text is the user's, run as it is.
    async fn run_sql(&self, sql: &str, timeout: Duration) -> Result<SqlOutcome, PgAdminError>;
}

/// The context's PostgreSQL connector (`crate::postgres::engine` installs `tokio-postgres`'s;
/// tests a model).
pub fn connector(
    ctx: &crate::runtime::context::Context,
) -> Result<std::sync::Arc<dyn PostgresConnector>, crate::error::Error> {
    ctx.seam::<std::sync::Arc<dyn PostgresConnector>>()
}

/// Opens a [`PostgresAdmin`] on one instance. The engine holds one connector; tests swap in the
/// model's.
#[async_trait]
pub trait PostgresConnector: Send + Sync {
    /// Connects and logs in, giving up after `timeout`; every call on the admin is bounded by
    /// the same timeout.
    async fn connect(
        &self,
        target: &ConnectionTarget,
        timeout: Duration,
    ) -> Result<Box<dyn PostgresAdmin>, PgAdminError>;

    /// Whether this user and password log in: `Ok(false)` when the server refused the login
    /// ([`PgAdminError::AuthFailed`]), an error when it could not tell (unreachable, unknown
    /// database).
    async fn check_login(
        &self,
        target: &ConnectionTarget,
        timeout: Duration,
    ) -> Result<bool, PgAdminError> {
        match self.connect(target, timeout).await {
            Ok(_) => Ok(true),
            Err(PgAdminError::AuthFailed(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_parses_and_prints_postgres_text() {
        let lsn: Lsn = "16/B374D848".parse().unwrap();
        assert_eq!(lsn, Lsn(0x16_B374_D848));
        assert_eq!(lsn.to_string(), "16/B374D848");
        assert_eq!("0/0".parse::<Lsn>().unwrap(), Lsn(0));
        assert_eq!("0/3000060".parse::<Lsn>().unwrap(), Lsn(0x300_0060));
        assert_eq!("FFFFFFFF/FFFFFFFF".parse::<Lsn>().unwrap(), Lsn(u64::MAX));
        assert_eq!("a/b".parse::<Lsn>().unwrap().to_string(), "A/B");
        for bad in [
            "",
            "0",
            "/0",
            "0/",
            "1/2/3",
            "x/0",
            "100000000/0",
            "-1/0",
            " 0/0",
        ] {
            assert!(
                matches!(bad.parse::<Lsn>(), Err(PgAdminError::Other(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn lsn_lag() {
        assert_eq!(Lsn(10).bytes_behind(Lsn(25)), 15);
        assert_eq!(Lsn(25).bytes_behind(Lsn(10)), 0);
        assert!(Lsn(0x1_0000_0000) > Lsn(0xFFFF_FFFF));
    }

    #[test]
    fn sqlstates_map_to_kinds() {
        let kind = |code: &str| PgAdminError::from_sqlstate(code, "m").category();
        assert_eq!(kind("28P01"), "AuthFailed");
        assert_eq!(kind("28000"), "AuthFailed");
        assert_eq!(kind("25006"), "ReadOnly");
        assert_eq!(kind("42710"), "AlreadyExists");
        assert_eq!(kind("42P04"), "AlreadyExists");
        assert_eq!(kind("42704"), "NotFound");
        assert_eq!(kind("3D000"), "NotFound");
        assert_eq!(kind("57P01"), "Unavailable"); // admin_shutdown
        assert_eq!(kind("57P03"), "Unavailable"); // cannot_connect_now (starting up)
        assert_eq!(kind("08006"), "Unavailable");
        assert_eq!(kind("53300"), "Unavailable"); // too many connections
        assert_eq!(kind("55000"), "Other"); // only promotion reads it as NotInRecovery
        assert_eq!(kind("42501"), "Other");
        assert_eq!(kind("42601"), "Other");
        let e = PgAdminError::from_sqlstate("28P01", "password authentication failed");
        assert_eq!(
            e.to_string(),
            "postgres login refused: password authentication failed (SQLSTATE 28P01)"
        );
        assert!(PgAdminError::from_sqlstate("57P03", "").is_transient());
        assert!(!PgAdminError::from_sqlstate("25006", "").is_transient());
    }

    #[test]
    fn target_debug_redacts_the_password() {
        let t = ConnectionTarget::new("db-0", 5432, "app", "hunter2'\\x");
        let shown = format!("{t:?} {t:#?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("<redacted>") && shown.contains("db-0"));
        assert_eq!(t.describe(), "app@db-0:5432/postgres");
        let other = t.as_user("admin", "pw").on_database("app");
        assert_eq!(other.describe(), "admin@db-0:5432/app");
        assert_eq!(other.password, "pw");
    }
}
