//! The real [`PostgresAdmin`]: one `tokio-postgres` connection to one instance.
//!
//! - Plain TCP (no TLS yet); the password is only used inside the SCRAM (or MD5) exchange.
//! - `connect` and every call are bounded by the timeout given to `connect`; a call that runs
//!   out of time is [`PgAdminError::Unavailable`] (the server may still finish it: DDL here is
//!   idempotent or checked, so the engine's retry is safe).
//! - Errors are classified by SQLSTATE ([`PgAdminError::from_sqlstate`]); errors without one
//!   (refused, reset, timed out) are `Unavailable`. Messages are the server's own, with the
//!   statement's password verifier redacted, and never contain the clear-text password, which
//!   is never sent in a statement (see [`super::sql`]).
//! - The timeline is read from what the instance writes or replays, not from
//!   `pg_control_checkpoint()` alone, which is the timeline of the last checkpoint: a promotion
//!   only *requests* a checkpoint (PostgreSQL logs "checkpoint starting: force" after
//!   "selected new timeline ID"), so right after `pg_promote` returns it may still show the old
//!   timeline. A primary's timeline comes from the name of its current WAL file; a standby's
//!   from its WAL receiver (`received_tli`) or, when the receiver is not running, the last
//!   restartpoint.

use std::net::IpAddr;
use std::time::Duration;

use async_trait::async_trait;
use tokio_postgres::{Client, NoTls, Row};

use super::{
    ArchiverStats, ConnectionTarget, Lsn, PgAdminError, PostgresAdmin, PostgresConnector,
    ReplicationConnection, RoleOptions, ServerInfo, SqlOutcome, WalPosition, sql,
};

/// Opens [`PgClient`]s on real PostgreSQL instances.
#[derive(Clone, Copy, Debug, Default)]
pub struct PgConnector;

#[async_trait]
impl PostgresConnector for PgConnector {
    async fn connect(
        &self,
        target: &ConnectionTarget,
        timeout: Duration,
    ) -> Result<Box<dyn PostgresAdmin>, PgAdminError> {
        Ok(Box::new(PgClient::connect(target, timeout).await?))
    }
}

/// A [`PostgresAdmin`] over one connection. Dropping it closes the connection.
pub struct PgClient {
    client: Client,
    timeout: Duration,
    /// `user@host:port/db`, for messages.
    describe: String,
}

impl std::fmt::Debug for PgClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgClient")
            .field("target", &self.describe)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Classifies a `tokio-postgres` error; `secret` (a verifier in the statement) is redacted
/// from the message.
fn classify(e: &tokio_postgres::Error, secret: &str) -> PgAdminError {
    if let Some(db) = e.as_db_error() {
        let mut message = format!("{}: {}", db.severity(), db.message());
        if let Some(detail) = db.detail() {
            message.push_str("; ");
            message.push_str(detail);
        }
        return PgAdminError::from_sqlstate(db.code().code(), sql::redact(&message, secret));
    }
    let source = std::error::Error::source(e).map(ToString::to_string);
    let message = match source {
        Some(s) => format!("{e}: {s}"),
        None => e.to_string(),
    };
    let message = sql::redact(&message, secret);
    let io = std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>());
    if io || e.is_closed() || message.starts_with("timeout") {
        PgAdminError::Unavailable(message)
    } else if message.starts_with("authentication error") {
        PgAdminError::AuthFailed(message)
    } else {
        PgAdminError::Other(message)
    }
}

/// Reads an optional text column as an LSN.
fn lsn_column(row: &Row, idx: usize) -> Result<Option<Lsn>, PgAdminError> {
    text_column(row, idx)?.map(|s| s.parse()).transpose()
}

fn text_column(row: &Row, idx: usize) -> Result<Option<String>, PgAdminError> {
    row.try_get::<_, Option<String>>(idx)
        .map_err(|e| PgAdminError::Other(format!("reading column {idx}: {e}")))
}

fn column<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    idx: usize,
) -> Result<T, PgAdminError> {
    row.try_get::<_, T>(idx)
        .map_err(|e| PgAdminError::Other(format!("reading column {idx}: {e}")))
}

/// The timeline in a WAL file name (`000000020000000000000003` -> 2).
fn timeline_of_walfile(name: &str) -> Result<u32, PgAdminError> {
    name.get(..8)
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or_else(|| PgAdminError::Other(format!("not a WAL file name: {name:?}")))
}

impl PgClient {
    /// Connects and logs in within `timeout`.
    pub async fn connect(
        target: &ConnectionTarget,
        timeout: Duration,
    ) -> Result<Self, PgAdminError> {
        let describe = target.describe();
        let mut config = tokio_postgres::Config::new();
        config
            .host(&target.host)
            .port(target.port)
            .user(&target.user)
            .password(target.password.as_bytes())
            .dbname(&target.dbname)
            .application_name("steward")
            // The operator's own DDL (roles, databases) must not wait for a synchronous standby:
            // replicas clone with the replication role it creates, so with
            // `synchronous_standby_names` set and no standby yet, waiting would deadlock the
            // bootstrap. It is re-applied on every pass, so a role lost in a fail-over comes back.
            .options("-c synchronous_commit=local")
            .connect_timeout(timeout);
        let (client, connection) = tokio::time::timeout(timeout, config.connect(NoTls))
            .await
            .map_err(|_| {
                PgAdminError::Unavailable(format!("{describe}: no answer within {timeout:?}"))
            })?
            // Nothing in a login exchange echoes the password (SCRAM sends proofs), and
            // "redacting" a short password would mangle the message and hint at the password.
            .map_err(|e| with_target(&describe, classify(&e, "")))?;
        // The connection task ends when the client is dropped or the server goes away.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Self {
            client,
            timeout,
            describe,
        })
    }

    /// Runs a call within the timeout; `secret` (a verifier in the statement) is redacted from
    /// errors.
    async fn bounded<T, F>(&self, secret: &str, call: F) -> Result<T, PgAdminError>
    where
        F: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result.map_err(|e| with_target(&self.describe, classify(&e, secret))),
            Err(_) => Err(PgAdminError::Unavailable(format!(
                "{}: no answer within {:?}",
                self.describe, self.timeout
            ))),
        }
    }

    async fn query_one(
        &self,
        query: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Row, PgAdminError> {
        self.bounded("", self.client.query_one(query, params)).await
    }

    /// Runs a utility statement whose text may hold a password verifier (`secret`).
    async fn execute(&self, statement: &str, secret: &str) -> Result<(), PgAdminError> {
        self.bounded(secret, self.client.batch_execute(statement))
            .await
    }
}

fn with_target(describe: &str, e: PgAdminError) -> PgAdminError {
    let m = |s: String| format!("{describe}: {s}");
    match e {
        PgAdminError::Unavailable(s) => PgAdminError::Unavailable(m(s)),
        PgAdminError::AuthFailed(s) => PgAdminError::AuthFailed(m(s)),
        PgAdminError::ReadOnly(s) => PgAdminError::ReadOnly(m(s)),
        PgAdminError::NotInRecovery(s) => PgAdminError::NotInRecovery(m(s)),
        PgAdminError::AlreadyExists(s) => PgAdminError::AlreadyExists(m(s)),
        PgAdminError::NotFound(s) => PgAdminError::NotFound(m(s)),
        PgAdminError::Invalid(s) => PgAdminError::Invalid(m(s)),
        PgAdminError::Other(s) => PgAdminError::Other(m(s)),
    }
}

/// `pg_promote` on an instance that is not in recovery fails with `55000` "recovery is not in
/// progress"; any other error keeps its general meaning.
pub fn promote_error(code: &str, message: &str) -> PgAdminError {
    if code == "55000" {
        PgAdminError::NotInRecovery(format!("{message} (SQLSTATE {code})"))
    } else {
        PgAdminError::from_sqlstate(code, message)
    }
}

const SERVER_INFO: &str = "\
SELECT current_setting('server_version_num')::int4, \
       pg_is_in_recovery(), \
       CASE WHEN pg_is_in_recovery() THEN NULL \
            ELSE pg_walfile_name(pg_current_wal_lsn()) END, \
       (SELECT received_tli FROM pg_stat_wal_receiver), \
       (SELECT timeline_id FROM pg_control_checkpoint()), \
       (SELECT system_identifier FROM pg_control_system())";

const WAL_POSITION: &str = "\
SELECT pg_is_in_recovery(), \
       CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_lsn()::text END, \
       pg_last_wal_receive_lsn()::text, \
       pg_last_wal_replay_lsn()::text";

const REPLICATION: &str = "\
SELECT coalesce(application_name, ''), host(client_addr), coalesce(state, ''), \
       sent_lsn::text, write_lsn::text, flush_lsn::text, replay_lsn::text, \
       coalesce(sync_state, '') \
FROM pg_stat_replication ORDER BY application_name, pid";

const ARCHIVER: &str = "\
SELECT archived_count, last_archived_wal, floor(extract(epoch FROM last_archived_time))::bigint, \
       failed_count, last_failed_wal, floor(extract(epoch FROM last_failed_time))::bigint \
FROM pg_stat_archiver";

/// Effective privileges (superuser, owner, grants to the role, to `PUBLIC` or to roles it
/// inherits from). One `has_database_privilege` with a list answers whether *any* is held, so
/// each is asked on its own. The role is resolved first (42704), then the database (3D000).
const HAS_DATABASE_PRIVILEGES: &str = "\
SELECT has_database_privilege($1::name, $2::text, 'CONNECT') \
   AND has_database_privilege($1::name, $2::text, 'CREATE') \
   AND has_database_privilege($1::name, $2::text, 'TEMPORARY')";

#[async_trait]
impl PostgresAdmin for PgClient {
    async fn server_info(&self) -> Result<ServerInfo, PgAdminError> {
        let row = self.query_one(SERVER_INFO, &[]).await?;
        let version: i32 = column(&row, 0)?;
        let in_recovery: bool = column(&row, 1)?;
        let walfile: Option<String> = column(&row, 2)?;
        let received: Option<i32> = column(&row, 3)?;
        let checkpoint: Option<i32> = column(&row, 4)?;
        let system_identifier: i64 = column(&row, 5)?;
        let timeline = match walfile {
            Some(name) => timeline_of_walfile(&name)?,
            None => {
                let tli = received.max(checkpoint).unwrap_or(0);
                u32::try_from(tli)
                    .map_err(|_| PgAdminError::Other(format!("bad timeline {tli}")))?
            }
        };
        Ok(ServerInfo {
            version_num: u32::try_from(version)
                .map_err(|_| PgAdminError::Other(format!("bad server_version_num {version}")))?,
            in_recovery,
            timeline,
            system_identifier: system_identifier.cast_unsigned(),
        })
    }

    async fn wal_position(&self) -> Result<WalPosition, PgAdminError> {
        let row = self.query_one(WAL_POSITION, &[]).await?;
        let in_recovery: bool = column(&row, 0)?;
        if in_recovery {
            Ok(WalPosition::Standby {
                receive: lsn_column(&row, 2)?,
                replay: lsn_column(&row, 3)?,
            })
        } else {
            let current = lsn_column(&row, 1)?
                .ok_or_else(|| PgAdminError::Other("no current WAL position".to_owned()))?;
            Ok(WalPosition::Primary { current })
        }
    }

    async fn replication(&self) -> Result<Vec<ReplicationConnection>, PgAdminError> {
        let rows = self
            .bounded("", self.client.query(REPLICATION, &[]))
            .await?;
        rows.iter()
            .map(|row| {
                let client_addr = text_column(row, 1)?
                    .map(|a| {
                        a.parse::<IpAddr>()
                            .map_err(|_| PgAdminError::Other(format!("bad client_addr {a:?}")))
                    })
                    .transpose()?;
                Ok(ReplicationConnection {
                    application_name: column(row, 0)?,
                    client_addr,
                    state: column(row, 2)?,
                    sent_lsn: lsn_column(row, 3)?,
                    write_lsn: lsn_column(row, 4)?,
                    flush_lsn: lsn_column(row, 5)?,
                    replay_lsn: lsn_column(row, 6)?,
                    sync_state: column(row, 7)?,
                })
            })
            .collect()
    }

    async fn archiver(&self) -> Result<ArchiverStats, PgAdminError> {
        let row = self
            .bounded("", self.client.query_one(ARCHIVER, &[]))
            .await?;
        Ok(ArchiverStats {
            archived_count: column(&row, 0)?,
            last_archived_wal: text_column(&row, 1)?,
            last_archived_time: column(&row, 2)?,
            failed_count: column(&row, 3)?,
            last_failed_wal: text_column(&row, 4)?,
            last_failed_time: column(&row, 5)?,
        })
    }

    async fn run_sql(&self, sql: &str, timeout: Duration) -> Result<SqlOutcome, PgAdminError> {
        let ms = timeout.as_millis().max(1);
        self.execute(&format!("SET statement_timeout = {ms}"), "")
            .await?;
        // The server ends the statement at its timeout; the client waits a little longer
        // for that answer before it gives up on the connection.
        let answer = tokio::time::timeout(
            timeout + Duration::from_secs(5),
            self.client.simple_query(sql),
        )
        .await
        .map_err(|_| {
            PgAdminError::Unavailable(format!("{}: no answer within {timeout:?}", self.describe))
        })?
        .map_err(|e| with_target(&self.describe, classify(&e, "")))?;
        let mut outcome = SqlOutcome::default();
        for m in &answer {
            match m {
                tokio_postgres::SimpleQueryMessage::CommandComplete(n) => outcome.rows += *n,
                tokio_postgres::SimpleQueryMessage::Row(row) if outcome.first.is_none() => {
                    outcome.first = row.get(0).map(str::to_owned);
                }
                _ => {}
            }
        }
        Ok(outcome)
    }

    async fn switch_wal(&self) -> Result<String, PgAdminError> {
        let row = self
            .bounded(
                "",
                self.client
                    .query_one("SELECT pg_walfile_name(pg_switch_wal())", &[]),
            )
            .await?;
        column(&row, 0)
    }

    async fn promote(&self, wait: Duration) -> Result<bool, PgAdminError> {
        let seconds = sql::promote_wait_seconds(wait);
        // The server waits up to `seconds`; give the answer the usual timeout on top.
        let budget = Duration::from_secs(seconds.unsigned_abs().into()) + self.timeout;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&seconds];
        let call = self
            .client
            .query_one("SELECT pg_promote(true, $1)", &params);
        match tokio::time::timeout(budget, call).await {
            Ok(Ok(row)) => column(&row, 0),
            Ok(Err(e)) => Err(with_target(
                &self.describe,
                match e.as_db_error() {
                    Some(db) => promote_error(
                        db.code().code(),
                        &format!("{}: {}", db.severity(), db.message()),
                    ),
                    None => classify(&e, ""),
                },
            )),
            Err(_) => Err(PgAdminError::Unavailable(format!(
                "{}: no answer to pg_promote within {budget:?}",
                self.describe
            ))),
        }
    }

    async fn role_exists(&self, name: &str) -> Result<bool, PgAdminError> {
        let row = self
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)",
                &[&name],
            )
            .await?;
        column(&row, 0)
    }

    async fn create_role(
        &self,
        name: &str,
        password: &str,
        options: &RoleOptions,
    ) -> Result<(), PgAdminError> {
        let verifier = sql::password_verifier(password)?;
        let statement = sql::create_role(name, &verifier, options)?;
        self.execute(&statement, &verifier).await
    }

    async fn alter_password(&self, name: &str, new_password: &str) -> Result<(), PgAdminError> {
        let verifier = sql::password_verifier(new_password)?;
        let statement = sql::alter_password(name, &verifier)?;
        self.execute(&statement, &verifier).await
    }

    async fn drop_role(&self, name: &str) -> Result<(), PgAdminError> {
        self.execute(&sql::drop_role(name)?, "").await
    }

    async fn create_database(&self, name: &str, owner: &str) -> Result<bool, PgAdminError> {
        let statement = sql::create_database(name, owner)?;
        let row = self
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)",
                &[&name],
            )
            .await?;
        if column::<bool>(&row, 0)? {
            return Ok(false);
        }
        match self.execute(&statement, "").await {
            Ok(()) => Ok(true),
            // Created concurrently since the check: it exists, which is what was asked.
            Err(PgAdminError::AlreadyExists(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn grant_database(&self, role: &str, database: &str) -> Result<(), PgAdminError> {
        self.execute(&sql::grant_database(role, database)?, "")
            .await
    }

    async fn has_database_privileges(
        &self,
        role: &str,
        database: &str,
    ) -> Result<bool, PgAdminError> {
        // The same checks as the statements: a name over 63 bytes would be truncated to another.
        sql::quote_ident(role)?;
        sql::quote_ident(database)?;
        let row = self
            .query_one(HAS_DATABASE_PRIVILEGES, &[&role, &database])
            .await?;
        column(&row, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timelines_from_wal_file_names() {
        assert_eq!(timeline_of_walfile("000000010000000000000002").unwrap(), 1);
        assert_eq!(timeline_of_walfile("0000000A0000000000000003").unwrap(), 10);
        assert!(timeline_of_walfile("xyz").is_err());
        assert!(timeline_of_walfile("").is_err());
    }

    #[test]
    fn promote_on_a_primary_is_not_in_recovery() {
        assert!(matches!(
            promote_error("55000", "ERROR: recovery is not in progress"),
            PgAdminError::NotInRecovery(_)
        ));
        assert!(matches!(
            promote_error("42501", "ERROR: permission denied for function pg_promote"),
            PgAdminError::Other(_)
        ));
        assert!(matches!(
            promote_error("57P01", "FATAL: terminating connection"),
            PgAdminError::Unavailable(_)
        ));
    }

    #[test]
    fn errors_name_the_target() {
        let e = with_target(
            "app@db:5432/postgres",
            PgAdminError::AuthFailed("no".into()),
        );
        assert_eq!(
            e,
            PgAdminError::AuthFailed("app@db:5432/postgres: no".into())
        );
    }
}
