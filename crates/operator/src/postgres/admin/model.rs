//! An in-memory set of PostgreSQL instances implementing [`PostgresAdmin`], for the engine's
//! step tests.
//!
//! It enforces the rules real PostgreSQL 15 enforces (checked against real instances by
//! `crates/operator/tests/postgres_admin.rs`, which runs the same scenarios on both):
//! - a primary writes; a standby (in recovery) refuses every role or database change with
//!   [`PgAdminError::ReadOnly`], but answers reads, and logs users in against the catalog it
//!   has replayed so far;
//! - a standby streams from its primary: what it has received and replayed only moves when the
//!   test says so ([`PgModel::advance`], [`PgModel::catch_up`]), never past what the primary
//!   has written, and not at all while the primary is down; its catalog (roles, passwords,
//!   databases) is the primary's as of its replay LSN;
//! - every write on a primary advances its WAL position;
//! - promotion is for standbys only ([`PgAdminError::NotInRecovery`] on a primary): the
//!   standby leaves recovery on the next timeline, keeps what it replayed and forgets WAL it
//!   received but did not replay; its old primary keeps running on the old timeline if it was
//!   up (the engine must fence it);
//! - logins check the stored password ([`PgAdminError::AuthFailed`] for a wrong password, an
//!   unknown role or a `NOLOGIN` role), then that the database exists
//!   ([`PgAdminError::NotFound`]);
//! - role and database changes need a superuser, except `ALTER ROLE … PASSWORD` (see
//!   [`Needs::PasswordOf`]): an ordinary role may change its own password, but not another
//!   role's, and only a superuser may change a superuser's or a `REPLICATION` role's (even its
//!   own); refusals are `42501` ([`PgAdminError::Other`]);
//! - `create_role` of an existing role is [`PgAdminError::AlreadyExists`], `alter_password` of
//!   a missing one [`PgAdminError::NotFound`] (whoever asks), `drop_role` of a missing one is
//!   nothing to do, dropping a role that owns a database or holds a grant fails as PostgreSQL's
//!   dependency check does; `create_database` of an existing database answers `Ok(false)` even
//!   on a standby (the real client checks before it writes);
//! - `has_database_privileges` is a read: true for a superuser, the database's owner, or a role
//!   granted all privileges on it; [`PgAdminError::NotFound`] for a missing role or database;
//! - a killed instance refuses connections ([`PgAdminError::Unavailable`]); connections opened
//!   before a kill stay dead after a restart.
//!
//! Not modelled: SASLprep (passwords compare as exact strings), connection limits, cascading
//! replication, synchronous replication, timeline histories (a standby follows only the primary
//! it was created from), `CREATEROLE` (which lets a role change other non-superuser roles'
//! passwords; the engine never creates such a role), role membership and privileges granted to
//! `PUBLIC` or through other roles (by default `PUBLIC` has `CONNECT` and `TEMPORARY` but not
//! `CREATE`, so "all privileges" is false without a grant either way), `REVOKE`.
//!
//! The handle is cheap to clone; all clones and every admin opened through
//! [`PgModel::connector`] share one set of instances. Test hooks (`add_primary`, `add_standby`,
//! `kill`, `start`, `advance`, `catch_up`, `fail_next`, `calls`, ...) drive and observe it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use super::{
    ArchiverStats, ConnectionTarget, Lsn, PgAdminError, PostgresAdmin, PostgresConnector,
    ReplicationConnection, RoleOptions, ServerInfo, SqlOutcome, WalPosition, sql,
};

/// The port every model instance listens on; the host is the instance's name.
pub const PORT: u16 = 5432;
/// The `server_version_num` model instances report.
pub const VERSION_NUM: u32 = 150_018;
/// Where a new primary's WAL starts.
const INITIAL_LSN: Lsn = Lsn(0x300_0060);
/// WAL written by one catalog change.
const WRITE_BYTES: u64 = 0x200;
/// WAL written at promotion (the end-of-recovery record).
const PROMOTE_BYTES: u64 = 0x28;

/// Roles, passwords and databases of one instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Catalog {
    /// Roles by name.
    pub roles: BTreeMap<String, ModelRole>,
    /// Databases by name, with their owner.
    pub databases: BTreeMap<String, String>,
    /// `(role, database)` pairs granted all privileges.
    pub grants: BTreeSet<(String, String)>,
    /// The superuser `initdb` created; it cannot be dropped.
    pub bootstrap_superuser: String,
    /// SQL text run by `run_sql` (database, text), oldest first: the model does not interpret
    /// it, but it is written like any change (a primary only, replicated to standbys).
    pub sql_log: Vec<(String, String)>,
}

/// One role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelRole {
    /// Clear-text password (the model compares exact strings).
    pub password: Option<String>,
    /// Its attributes.
    pub options: RoleOptions,
}

/// Primary or standby, with the WAL positions that go with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Not in recovery; writes WAL.
    Primary {
        /// `pg_current_wal_lsn()`.
        current: Lsn,
        /// The catalog after every change, by the LSN of the change (oldest first), for
        /// standbys to replay.
        history: Vec<(Lsn, Catalog)>,
    },
    /// In recovery, streaming from `upstream`.
    Standby {
        /// The primary's instance name.
        upstream: String,
        /// `pg_last_wal_receive_lsn()`.
        receive: Lsn,
        /// `pg_last_wal_replay_lsn()`.
        replay: Lsn,
    },
}

/// One instance as the model sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelInstance {
    /// The process runs and accepts connections.
    pub up: bool,
    /// Incremented on every start; connections from an earlier boot are dead.
    pub boot: u64,
    /// Shared by a primary and the standbys made from it.
    pub system_identifier: u64,
    /// Current timeline.
    pub timeline: u32,
    /// Primary or standby.
    pub mode: Mode,
    /// What this instance sees (a standby: as of its replay LSN).
    pub catalog: Catalog,
    /// Errors to answer the next calls with, oldest first.
    pub fail_next: VecDeque<PgAdminError>,
    /// What `pg_stat_archiver` shows (the model archives nothing itself: tests set it).
    pub archiver: ArchiverStats,
    /// SQL text `run_sql` answers with an error (the model does not interpret SQL: tests say
    /// which text PostgreSQL would refuse, and how).
    pub sql_errors: BTreeMap<String, PgAdminError>,
}

impl ModelInstance {
    /// In recovery.
    pub fn is_standby(&self) -> bool {
        matches!(self.mode, Mode::Standby { .. })
    }
}

/// What a call was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    /// `PostgresConnector::connect` (and so `check_login`).
    Connect,
    /// `server_info`.
    ServerInfo,
    /// `wal_position`.
    WalPosition,
    /// `replication`.
    Replication,
    /// `promote`.
    Promote,
    /// `role_exists`.
    RoleExists,
    /// `create_role`.
    CreateRole,
    /// `alter_password`.
    AlterPassword,
    /// `drop_role`.
    DropRole,
    /// `create_database`.
    CreateDatabase,
    /// `grant_database`.
    GrantDatabase,
    /// `has_database_privileges`.
    HasDatabasePrivileges,
    /// `archiver`.
    Archiver,
    /// `switch_wal`.
    SwitchWal,
    /// `run_sql`.
    RunSql,
}

/// PostgreSQL's default WAL segment size.
const WAL_SEGMENT: u64 = 16 << 20;

/// A call made through the model, failed ones included.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// The instance asked.
    pub instance: String,
    /// What was asked.
    pub kind: CallKind,
    /// The role, database or user it was about (empty for instance-wide calls).
    pub object: String,
    /// Whether it succeeded.
    pub ok: bool,
    /// Whether it changed the instance (wrote WAL, or promoted it).
    pub wrote: bool,
}

#[derive(Debug, Default)]
struct State {
    instances: BTreeMap<String, ModelInstance>,
    next_system_identifier: u64,
    calls: Vec<Call>,
    /// Set by a call that changed its instance.
    wrote: bool,
}

/// Handle on the model; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct PgModel {
    state: Arc<Mutex<State>>,
}

fn no_such(name: &str) -> PgAdminError {
    PgAdminError::Other(format!("the model has no instance {name:?}"))
}

fn refused(name: &str) -> PgAdminError {
    PgAdminError::Unavailable(format!("{name}:{PORT}: connection refused"))
}

fn read_only(statement: &str) -> PgAdminError {
    PgAdminError::from_sqlstate(
        "25006",
        format!("ERROR: cannot execute {statement} in a read-only transaction"),
    )
}

fn role_missing(name: &str) -> PgAdminError {
    PgAdminError::from_sqlstate("42704", format!("ERROR: role \"{name}\" does not exist"))
}

fn database_missing(name: &str) -> PgAdminError {
    PgAdminError::from_sqlstate(
        "3D000",
        format!("ERROR: database \"{name}\" does not exist"),
    )
}

fn denied(message: &str) -> PgAdminError {
    PgAdminError::from_sqlstate("42501", format!("ERROR: {message}"))
}

/// Who may run a catalog change.
#[derive(Clone, Copy, Debug)]
enum Needs<'a> {
    /// A superuser: every change but a password change.
    Superuser,
    /// `ALTER ROLE <role> PASSWORD`, as PostgreSQL 15's `AlterRole` checks it: a superuser may
    /// change any role's; anyone else is told a missing role does not exist (`42704`, the
    /// lookup comes first), may not touch a superuser or a `REPLICATION` role (`42501`), and
    /// may change only their own password (`42501` "permission denied"; `CREATEROLE` is not
    /// modelled).
    PasswordOf(&'a str),
    /// Anyone logged in: what the statement itself needs is not modelled.
    Login,
}

impl Needs<'_> {
    /// Whether `user` may make the change on `catalog`.
    fn check(self, catalog: &Catalog, user: &str, statement: &str) -> Result<(), PgAdminError> {
        let is_superuser =
            |name: &str| catalog.roles.get(name).is_some_and(|r| r.options.superuser);
        if is_superuser(user) {
            return Ok(());
        }
        match self {
            Self::Login => Ok(()),
            Self::Superuser => Err(denied(&format!("permission denied to {statement}"))),
            Self::PasswordOf(target) => {
                let role = catalog
                    .roles
                    .get(target)
                    .ok_or_else(|| role_missing(target))?;
                if role.options.superuser {
                    Err(denied(
                        "must be superuser to alter superuser roles or change superuser attribute",
                    ))
                } else if role.options.replication {
                    Err(denied(
                        "must be superuser to alter replication roles or change replication \
                         attribute",
                    ))
                } else if target == user {
                    Ok(())
                } else {
                    Err(denied("permission denied"))
                }
            }
        }
    }
}

/// The primary's catalog as of `lsn`.
fn catalog_at(history: &[(Lsn, Catalog)], lsn: Lsn) -> Option<&Catalog> {
    history
        .iter()
        .rev()
        .find(|(at, _)| *at <= lsn)
        .map(|(_, c)| c)
}

impl State {
    fn get(&self, name: &str) -> Result<&ModelInstance, PgAdminError> {
        self.instances.get(name).ok_or_else(|| no_such(name))
    }

    fn get_mut(&mut self, name: &str) -> Result<&mut ModelInstance, PgAdminError> {
        self.instances.get_mut(name).ok_or_else(|| no_such(name))
    }

    /// Moves a standby's receive (and, if `replay`, replay) position towards `lsn`, as far as
    /// its upstream allows, and replays the catalog. A stopped standby does nothing; a standby
    /// whose primary is stopped only replays what it already received.
    fn stream(&mut self, name: &str, lsn: Lsn, replay: bool) -> Result<(), PgAdminError> {
        let inst = self.get(name)?;
        let Mode::Standby {
            upstream,
            receive: received,
            replay: replayed,
        } = &inst.mode
        else {
            return Err(PgAdminError::Other(format!("{name} is not a standby")));
        };
        if !inst.up {
            return Ok(());
        }
        let (received, replayed) = (*received, *replayed);
        let primary = self.get(upstream)?;
        let Mode::Primary { current, history } = &primary.mode else {
            return Ok(());
        };
        let receive = if primary.up {
            received.max(lsn.min(*current))
        } else {
            received
        };
        let replay_to = if replay {
            replayed.max(lsn.min(receive))
        } else {
            replayed
        };
        let catalog = catalog_at(history, replay_to).cloned();
        let inst = self.get_mut(name)?;
        if let Mode::Standby {
            receive: r,
            replay: p,
            ..
        } = &mut inst.mode
        {
            *r = receive;
            *p = replay_to;
        }
        if let Some(catalog) = catalog {
            inst.catalog = catalog;
        }
        Ok(())
    }
}

impl State {
    /// A catalog change on `name` by `user` that needs a superuser: see [`State::write_with`].
    fn write<T>(
        &mut self,
        name: &str,
        user: &str,
        statement: &str,
        change: impl FnOnce(&mut Catalog) -> Result<T, PgAdminError>,
    ) -> Result<T, PgAdminError> {
        self.write_with(name, user, statement, Needs::Superuser, change)
    }

    /// A catalog change on `name` by `user`: needs a primary and what `needs` says; `change`
    /// edits the catalog, then the change is written to WAL.
    fn write_with<T>(
        &mut self,
        name: &str,
        user: &str,
        statement: &str,
        needs: Needs<'_>,
        change: impl FnOnce(&mut Catalog) -> Result<T, PgAdminError>,
    ) -> Result<T, PgAdminError> {
        let inst = self.get_mut(name)?;
        // PostgreSQL refuses any change on a standby before it checks permissions.
        if inst.is_standby() {
            return Err(read_only(statement));
        }
        needs.check(&inst.catalog, user, statement)?;
        let Mode::Primary { current, history } = &mut inst.mode else {
            return Err(read_only(statement));
        };
        let out = change(&mut inst.catalog)?;
        current.0 += WRITE_BYTES;
        history.push((*current, inst.catalog.clone()));
        self.wrote = true;
        Ok(out)
    }
}

impl PgModel {
    /// No instances yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The connection target of an instance of this model.
    pub fn target(name: &str, user: &str, password: &str) -> ConnectionTarget {
        ConnectionTarget::new(name, PORT, user, password)
    }

    /// A connector whose connections reach this model's instances.
    pub fn connector(&self) -> ModelConnector {
        ModelConnector {
            model: self.clone(),
        }
    }

    /// `initdb` and start a primary on timeline 1 with a superuser and a `postgres` database.
    pub fn add_primary(
        &self,
        name: &str,
        superuser: &str,
        password: &str,
    ) -> Result<(), PgAdminError> {
        let mut state = self.lock();
        if state.instances.contains_key(name) {
            return Err(PgAdminError::Other(format!("instance {name} exists")));
        }
        state.next_system_identifier += 1;
        let mut catalog = Catalog {
            bootstrap_superuser: superuser.to_owned(),
            ..Catalog::default()
        };
        catalog.roles.insert(
            superuser.to_owned(),
            ModelRole {
                password: Some(password.to_owned()),
                options: RoleOptions {
                    login: true,
                    superuser: true,
                    replication: true,
                    createdb: true,
                    connection_limit: None,
                },
            },
        );
        catalog
            .databases
            .insert("postgres".to_owned(), superuser.to_owned());
        let system_identifier = 7_300_000_000_000_000_000 + state.next_system_identifier;
        state.instances.insert(
            name.to_owned(),
            ModelInstance {
                up: true,
                boot: 1,
                system_identifier,
                timeline: 1,
                mode: Mode::Primary {
                    current: INITIAL_LSN,
                    history: vec![(INITIAL_LSN, catalog.clone())],
                },
                catalog,
                fail_next: VecDeque::new(),
                archiver: ArchiverStats::default(),
                sql_errors: BTreeMap::new(),
            },
        );
        Ok(())
    }

    /// `pg_basebackup -R` from a running primary and start the standby: same system
    /// identifier, timeline and catalog, caught up to the primary's current position.
    pub fn add_standby(&self, name: &str, primary: &str) -> Result<(), PgAdminError> {
        let mut state = self.lock();
        if state.instances.contains_key(name) {
            return Err(PgAdminError::Other(format!("instance {name} exists")));
        }
        let p = state.get(primary)?;
        if !p.up {
            return Err(refused(primary));
        }
        let Mode::Primary { current, .. } = p.mode else {
            return Err(PgAdminError::Other(format!("{primary} is not a primary")));
        };
        let standby = ModelInstance {
            up: true,
            boot: 1,
            system_identifier: p.system_identifier,
            timeline: p.timeline,
            mode: Mode::Standby {
                upstream: primary.to_owned(),
                receive: current,
                replay: current,
            },
            catalog: p.catalog.clone(),
            fail_next: VecDeque::new(),
            archiver: ArchiverStats::default(),
            sql_errors: BTreeMap::new(),
        };
        state.instances.insert(name.to_owned(), standby);
        Ok(())
    }

    /// Stops an instance (as `pg_ctl stop -m immediate`); its connections die.
    pub fn kill(&self, name: &str) -> Result<(), PgAdminError> {
        self.lock().get_mut(name)?.up = false;
        Ok(())
    }

    /// Sets what the instance's `pg_stat_archiver` shows, as its archiver would have left it.
    pub fn set_archiver(&self, name: &str, stats: ArchiverStats) -> Result<(), PgAdminError> {
        self.lock().get_mut(name)?.archiver = stats;
        Ok(())
    }

    /// Starts a stopped instance (a new boot); a standby resumes where it was.
    pub fn start(&self, name: &str) -> Result<(), PgAdminError> {
        let mut state = self.lock();
        let inst = state.get_mut(name)?;
        if !inst.up {
            inst.up = true;
            inst.boot += 1;
        }
        Ok(())
    }

    /// Simulated traffic and replication up to `lsn`: a primary's WAL grows to `lsn`; a
    /// standby receives and replays up to `lsn`, as far as its primary has written and only
    /// while both are up (already received WAL is replayed regardless).
    pub fn advance(&self, name: &str, lsn: Lsn) -> Result<(), PgAdminError> {
        let mut state = self.lock();
        let inst = state.get_mut(name)?;
        match &mut inst.mode {
            Mode::Primary { current, .. } => {
                *current = (*current).max(lsn);
                Ok(())
            }
            Mode::Standby { .. } => state.stream(name, lsn, true),
        }
    }

    /// A standby receives WAL up to `lsn` without replaying it.
    pub fn receive(&self, name: &str, lsn: Lsn) -> Result<(), PgAdminError> {
        self.lock().stream(name, lsn, false)
    }

    /// A standby receives and replays everything its primary has written (if both are up).
    pub fn catch_up(&self, name: &str) -> Result<(), PgAdminError> {
        self.advance(name, Lsn(u64::MAX))
    }

    /// `run_sql` of exactly this text on instance `name` fails with `error`, as PostgreSQL
    /// would refuse it.
    pub fn fail_sql(&self, name: &str, sql: &str, error: PgAdminError) -> Result<(), PgAdminError> {
        let mut state = self.lock();
        state
            .get_mut(name)?
            .sql_errors
            .insert(sql.to_owned(), error);
        Ok(())
    }

    /// The next call on this instance (connecting included) fails with `error`.
    pub fn fail_next(&self, name: &str, error: PgAdminError) -> Result<(), PgAdminError> {
        self.lock().get_mut(name)?.fail_next.push_back(error);
        Ok(())
    }

    /// A copy of an instance.
    pub fn instance(&self, name: &str) -> Option<ModelInstance> {
        self.lock().instances.get(name).cloned()
    }

    /// Every call so far, oldest first.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The calls that changed an instance, oldest first.
    pub fn changes(&self) -> Vec<Call> {
        self.calls().into_iter().filter(|c| c.wrote).collect()
    }

    fn connect(&self, target: &ConnectionTarget) -> Result<ModelAdmin, PgAdminError> {
        let mut state = self.lock();
        let result = Self::login(&mut state, target);
        state.calls.push(Call {
            instance: target.host.clone(),
            kind: CallKind::Connect,
            object: target.user.clone(),
            ok: result.is_ok(),
            wrote: false,
        });
        let boot = result?;
        Ok(ModelAdmin {
            model: self.clone(),
            instance: target.host.clone(),
            user: target.user.clone(),
            database: target.dbname.clone(),
            boot,
        })
    }

    fn login(state: &mut State, target: &ConnectionTarget) -> Result<u64, PgAdminError> {
        let name = target.host.as_str();
        let Some(inst) = state
            .instances
            .get_mut(name)
            .filter(|_| target.port == PORT)
        else {
            return Err(refused(&format!("{name}:{}", target.port)));
        };
        if !inst.up {
            return Err(refused(name));
        }
        if let Some(e) = inst.fail_next.pop_front() {
            return Err(e);
        }
        let user = &target.user;
        let role = inst.catalog.roles.get(user);
        if role.and_then(|r| r.password.as_deref()) != Some(target.password.as_str()) {
            return Err(PgAdminError::from_sqlstate(
                "28P01",
                format!("FATAL: password authentication failed for user \"{user}\""),
            ));
        }
        if !role.is_some_and(|r| r.options.login) {
            return Err(PgAdminError::from_sqlstate(
                "28000",
                format!("FATAL: role \"{user}\" is not permitted to log in"),
            ));
        }
        if !inst.catalog.databases.contains_key(&target.dbname) {
            return Err(PgAdminError::from_sqlstate(
                "3D000",
                format!("FATAL: database \"{}\" does not exist", target.dbname),
            ));
        }
        Ok(inst.boot)
    }
}

/// Opens [`ModelAdmin`]s on a [`PgModel`]'s instances (host = instance name, port [`PORT`]).
#[derive(Clone, Debug)]
pub struct ModelConnector {
    model: PgModel,
}

#[async_trait]
impl PostgresConnector for ModelConnector {
    async fn connect(
        &self,
        target: &ConnectionTarget,
        _timeout: Duration,
    ) -> Result<Box<dyn PostgresAdmin>, PgAdminError> {
        Ok(Box::new(self.model.connect(target)?))
    }
}

/// A connection to one model instance, as one user.
#[derive(Clone, Debug)]
pub struct ModelAdmin {
    model: PgModel,
    instance: String,
    user: String,
    database: String,
    boot: u64,
}

impl ModelAdmin {
    /// Runs `f` on the instance if this connection is alive, recording the call.
    fn call<T>(
        &self,
        kind: CallKind,
        object: &str,
        f: impl FnOnce(&mut State, &str) -> Result<T, PgAdminError>,
    ) -> Result<T, PgAdminError> {
        let mut state = self.model.lock();
        state.wrote = false;
        let result = self
            .live(&mut state)
            .and_then(|()| f(&mut state, &self.instance));
        let wrote = std::mem::take(&mut state.wrote);
        state.calls.push(Call {
            instance: self.instance.clone(),
            kind,
            object: object.to_owned(),
            ok: result.is_ok(),
            wrote,
        });
        result
    }

    fn live(&self, state: &mut State) -> Result<(), PgAdminError> {
        let inst = state.get_mut(&self.instance)?;
        if !inst.up || inst.boot != self.boot {
            return Err(PgAdminError::Unavailable(format!(
                "{}: connection closed",
                self.instance
            )));
        }
        match inst.fail_next.pop_front() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// A catalog change that needs a superuser, as one call: see [`State::write`].
    fn write<T>(
        &self,
        kind: CallKind,
        object: &str,
        statement: &str,
        change: impl FnOnce(&mut Catalog) -> Result<T, PgAdminError>,
    ) -> Result<T, PgAdminError> {
        self.write_with(kind, object, statement, Needs::Superuser, change)
    }

    /// A catalog change as one call: see [`State::write_with`].
    fn write_with<T>(
        &self,
        kind: CallKind,
        object: &str,
        statement: &str,
        needs: Needs<'_>,
        change: impl FnOnce(&mut Catalog) -> Result<T, PgAdminError>,
    ) -> Result<T, PgAdminError> {
        self.call(kind, object, |state, name| {
            state.write_with(name, &self.user, statement, needs, change)
        })
    }
}

#[async_trait]
impl PostgresAdmin for ModelAdmin {
    async fn server_info(&self) -> Result<ServerInfo, PgAdminError> {
        self.call(CallKind::ServerInfo, "", |state, name| {
            let inst = state.get(name)?;
            Ok(ServerInfo {
                version_num: VERSION_NUM,
                in_recovery: inst.is_standby(),
                timeline: inst.timeline,
                system_identifier: inst.system_identifier,
            })
        })
    }

    async fn archiver(&self) -> Result<ArchiverStats, PgAdminError> {
        self.call(CallKind::Archiver, "", |state, name| {
            Ok(state.get(name)?.archiver.clone())
        })
    }

    async fn run_sql(&self, sql: &str, _timeout: Duration) -> Result<SqlOutcome, PgAdminError> {
        let refused = self
            .model
            .lock()
            .instances
            .get(&self.instance)
            .and_then(|i| i.sql_errors.get(sql).cloned());
        if let Some(e) = refused {
            return self.call(CallKind::RunSql, &self.database, |_, _| Err(e));
        }
        let database = self.database.clone();
        self.write_with(
            CallKind::RunSql,
            &database,
            "SQL",
            Needs::Login,
            |catalog| {
                catalog.sql_log.push((database.clone(), sql.to_owned()));
                Ok(SqlOutcome::default())
            },
        )
    }

    async fn switch_wal(&self) -> Result<String, PgAdminError> {
        self.call(CallKind::SwitchWal, "", |state, name| {
            let inst = state.get_mut(name)?;
            let timeline = inst.timeline;
            let Mode::Primary { current, .. } = &mut inst.mode else {
                return Err(PgAdminError::from_sqlstate(
                    "55000",
                    "ERROR: recovery is in progress",
                ));
            };
            // Written into the current segment: it ends, and the next one starts at the next
            // boundary. Nothing written since the last switch: nothing happens. Either way the
            // answer names the segment that ends at the (new) position, as
            // `pg_walfile_name(pg_switch_wal())` does.
            let switched = current.0 % WAL_SEGMENT != 0;
            if switched {
                current.0 = (current.0 / WAL_SEGMENT + 1) * WAL_SEGMENT;
            }
            let last = current.0.saturating_sub(1);
            state.wrote = switched;
            Ok(format!(
                "{timeline:08X}{:08X}{:08X}",
                last >> 32,
                (last & 0xFFFF_FFFF) / WAL_SEGMENT
            ))
        })
    }

    async fn wal_position(&self) -> Result<WalPosition, PgAdminError> {
        self.call(CallKind::WalPosition, "", |state, name| {
            Ok(match &state.get(name)?.mode {
                Mode::Primary { current, .. } => WalPosition::Primary { current: *current },
                Mode::Standby {
                    receive, replay, ..
                } => WalPosition::Standby {
                    receive: Some(*receive),
                    replay: Some(*replay),
                },
            })
        })
    }

    async fn replication(&self) -> Result<Vec<ReplicationConnection>, PgAdminError> {
        self.call(CallKind::Replication, "", |state, name| {
            Ok(state
                .instances
                .iter()
                .filter(|(_, i)| i.up)
                .filter_map(|(standby, i)| match &i.mode {
                    Mode::Standby {
                        upstream,
                        receive,
                        replay,
                    } if upstream == name => Some(ReplicationConnection {
                        application_name: standby.clone(),
                        client_addr: None,
                        state: "streaming".to_owned(),
                        sent_lsn: Some(*receive),
                        write_lsn: Some(*receive),
                        flush_lsn: Some(*receive),
                        replay_lsn: Some(*replay),
                        sync_state: "async".to_owned(),
                    }),
                    _ => None,
                })
                .collect())
        })
    }

    async fn promote(&self, _wait: Duration) -> Result<bool, PgAdminError> {
        let user = self.user.clone();
        self.call(CallKind::Promote, "", |state, name| {
            let inst = state.get_mut(name)?;
            if !inst
                .catalog
                .roles
                .get(&user)
                .is_some_and(|r| r.options.superuser)
            {
                return Err(PgAdminError::from_sqlstate(
                    "42501",
                    "ERROR: permission denied for function pg_promote",
                ));
            }
            let Mode::Standby { replay, .. } = inst.mode else {
                return Err(PgAdminError::NotInRecovery(
                    "ERROR: recovery is not in progress (SQLSTATE 55000)".to_owned(),
                ));
            };
            let current = Lsn(replay.0 + PROMOTE_BYTES);
            inst.timeline += 1;
            inst.mode = Mode::Primary {
                current,
                history: vec![(current, inst.catalog.clone())],
            };
            state.wrote = true;
            Ok(true)
        })
    }

    async fn role_exists(&self, name: &str) -> Result<bool, PgAdminError> {
        self.call(CallKind::RoleExists, name, |state, inst| {
            Ok(state.get(inst)?.catalog.roles.contains_key(name))
        })
    }

    async fn create_role(
        &self,
        name: &str,
        password: &str,
        options: &RoleOptions,
    ) -> Result<(), PgAdminError> {
        sql::quote_ident(name)?;
        sql::check_password(password)?;
        self.write(CallKind::CreateRole, name, "CREATE ROLE", |catalog| {
            if catalog.roles.contains_key(name) {
                return Err(PgAdminError::from_sqlstate(
                    "42710",
                    format!("ERROR: role \"{name}\" already exists"),
                ));
            }
            catalog.roles.insert(
                name.to_owned(),
                ModelRole {
                    password: Some(password.to_owned()),
                    options: *options,
                },
            );
            Ok(())
        })
    }

    async fn alter_password(&self, name: &str, new_password: &str) -> Result<(), PgAdminError> {
        sql::quote_ident(name)?;
        sql::check_password(new_password)?;
        let needs = Needs::PasswordOf(name);
        self.write_with(
            CallKind::AlterPassword,
            name,
            "ALTER ROLE",
            needs,
            |catalog| {
                let role = catalog
                    .roles
                    .get_mut(name)
                    .ok_or_else(|| role_missing(name))?;
                role.password = Some(new_password.to_owned());
                Ok(())
            },
        )
    }

    async fn drop_role(&self, name: &str) -> Result<(), PgAdminError> {
        sql::quote_ident(name)?;
        let user = self.user.clone();
        self.write(CallKind::DropRole, name, "DROP ROLE", |catalog| {
            if !catalog.roles.contains_key(name) {
                return Ok(());
            }
            let depends = |what: &str| {
                PgAdminError::from_sqlstate(
                    "2BP01",
                    format!("ERROR: role \"{name}\" cannot be dropped because {what}"),
                )
            };
            if name == catalog.bootstrap_superuser {
                return Err(depends("it is required by the database system"));
            }
            if name == user {
                return Err(PgAdminError::from_sqlstate(
                    "55006",
                    "ERROR: current user cannot be dropped",
                ));
            }
            if catalog.databases.values().any(|owner| owner == name)
                || catalog.grants.iter().any(|(role, _)| role == name)
            {
                return Err(depends("some objects depend on it"));
            }
            catalog.roles.remove(name);
            Ok(())
        })
    }

    async fn create_database(&self, name: &str, owner: &str) -> Result<bool, PgAdminError> {
        sql::create_database(name, owner)?;
        self.call(CallKind::CreateDatabase, name, |state, inst| {
            // The real client looks before it writes.
            if state.get(inst)?.catalog.databases.contains_key(name) {
                return Ok(false);
            }
            state.write(inst, &self.user, "CREATE DATABASE", |catalog| {
                if !catalog.roles.contains_key(owner) {
                    return Err(role_missing(owner));
                }
                catalog.databases.insert(name.to_owned(), owner.to_owned());
                Ok(true)
            })
        })
    }

    async fn grant_database(&self, role: &str, database: &str) -> Result<(), PgAdminError> {
        sql::grant_database(role, database)?;
        self.write(CallKind::GrantDatabase, role, "GRANT", |catalog| {
            if !catalog.databases.contains_key(database) {
                return Err(database_missing(database));
            }
            if !catalog.roles.contains_key(role) {
                return Err(role_missing(role));
            }
            catalog
                .grants
                .insert((role.to_owned(), database.to_owned()));
            Ok(())
        })
    }

    async fn has_database_privileges(
        &self,
        role: &str,
        database: &str,
    ) -> Result<bool, PgAdminError> {
        sql::quote_ident(role)?;
        sql::quote_ident(database)?;
        self.call(CallKind::HasDatabasePrivileges, role, |state, inst| {
            let catalog = &state.get(inst)?.catalog;
            // PostgreSQL resolves the role first.
            let options = catalog
                .roles
                .get(role)
                .ok_or_else(|| role_missing(role))?
                .options;
            let owner = catalog
                .databases
                .get(database)
                .ok_or_else(|| database_missing(database))?;
            Ok(options.superuser
                || owner == role
                || catalog
                    .grants
                    .contains(&(role.to_owned(), database.to_owned())))
        })
    }
}

#[cfg(test)]
mod tests;
