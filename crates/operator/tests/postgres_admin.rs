//! The PostgreSQL admin seam against real PostgreSQL processes on 127.0.0.1, and the same
//! scenarios against the in-memory model, so that the model's rules are checked against
//! reality.
//!
//! Each real test starts its own pair: a primary (`initdb`, SCRAM for TCP logins, statement
//! logging on) and a streaming standby made with `pg_basebackup -R`, on free ports with
//! temporary data directories. PostgreSQL refuses to run as root, so when the tests run as root
//! the server binaries run as the `postgres` OS user (`setpriv`). A guard stops both servers
//! (SIGQUIT, PostgreSQL's immediate shutdown, then SIGKILL) and waits for them on drop, failed
//! tests included, and prints the server logs when the test panicked. If the test process is
//! killed outright (nextest's timeout), nextest signals the whole process group, which includes
//! the servers.
//!
//! Real PostgreSQL 15 behaviours the scenarios pin down (the model mirrors each):
//! - a standby refuses role and database changes with 25006 before looking at the objects
//!   (`DROP ROLE IF EXISTS` of a missing role included);
//! - `pg_promote` on a primary is 55000 "recovery is not in progress";
//! - after a promotion the new timeline shows at once in the current WAL file name (the client
//!   reads it there: `pg_control_checkpoint()` only moves when the checkpoint that promotion
//!   requests has completed), and the old primary, still up, stays on timeline 1;
//! - a wrong password and an unknown role are the same 28P01; a `NOLOGIN` role with the right
//!   password is 28000; an unknown database is checked only after the password (3D000);
//! - a role holding a grant on a database cannot be dropped (2BP01);
//! - an ordinary role may change its own password (as ReconcileUsers' rotation does, logged in
//!   with the old one) but not another role's nor a superuser's (42501); a `REPLICATION` role
//!   may not change even its own; a missing role is 42704 whoever asks;
//! - `has_database_privileges` is true for a database's owner, a superuser and a role granted
//!   all privileges, false for another role (PUBLIC holds `CONNECT` and `TEMPORARY`, not
//!   `CREATE`), NotFound for a missing role or database, and answered by a standby.
//!
//! Where to find PostgreSQL: `STEWARD_PG_BIN`, else `/usr/lib/postgresql/15/bin` — the version
//! the model follows (16 lets a `REPLICATION` role change its own password) and the clusters'
//! default — else the newest `/usr/lib/postgresql/*/bin`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use steward_operator::postgres::admin::client::PgConnector;
use steward_operator::postgres::admin::model::PgModel;
use steward_operator::postgres::admin::{
    ConnectionTarget, Lsn, PgAdminError, PostgresAdmin, PostgresConnector, RoleOptions,
    WalPosition, sql,
};

/// Timeout for admin calls that should succeed.
const T: Duration = Duration::from_secs(5);
/// Timeout for calls expected to fail for want of an answer.
const SHORT: Duration = Duration::from_millis(700);
/// How long a scenario waits for replication.
const PATIENCE: Duration = Duration::from_secs(20);

/// The bootstrap superuser and its password (quotes and a backslash on purpose).
const SUPERUSER: &str = "postgres";
const SUPERUSER_PASSWORD: &str = r#"su'per "pw" \ ok"#;

/// Passwords that would break naive quoting, and non-ASCII ones.
const TRICKY: &[&str] = &[
    "it's",
    r"back\slash",
    r"\'; DROP ROLE postgres; --",
    "''\\\\''",
    r#""quoted" $$dollar$$ E'x'"#,
    "  spaced out  ",
    "pässwörd ✓ 🔑 中文",
    "ﬁ\u{a0}ligature and no-break space",
];

// ---------------------------------------------------------------------------------------------
// Harnesses: a primary `p` and its streaming standby `s`.

#[async_trait]
trait Harness: Send + Sync {
    fn connector(&self) -> &dyn PostgresConnector;
    /// Instance `name` (`p` or `s`) as `user`.
    fn target(&self, name: &str, user: &str, password: &str) -> ConnectionTarget;
    /// Stops an instance.
    async fn kill(&self, name: &str);
    /// Lets time pass while waiting for replication (model: the standby catches up).
    async fn tick(&self);

    fn superuser(&self, name: &str) -> ConnectionTarget {
        self.target(name, SUPERUSER, SUPERUSER_PASSWORD)
    }

    async fn admin(&self, name: &str) -> Box<dyn PostgresAdmin> {
        self.connector()
            .connect(&self.superuser(name), T)
            .await
            .unwrap_or_else(|e| panic!("connecting to {name}: {e}"))
    }

    async fn logs_in(&self, name: &str, user: &str, password: &str) -> bool {
        self.connector()
            .check_login(&self.target(name, user, password), T)
            .await
            .unwrap_or_else(|e| panic!("login check of {user} on {name}: {e}"))
    }
}

async fn current_lsn(admin: &dyn PostgresAdmin) -> Lsn {
    match admin.wal_position().await.unwrap() {
        WalPosition::Primary { current } => current,
        other => panic!("expected a primary, got {other:?}"),
    }
}

/// Waits until the standby has replayed `lsn` and the primary's `pg_stat_replication` says so.
async fn wait_replayed(h: &dyn Harness, p: &dyn PostgresAdmin, s: &dyn PostgresAdmin, lsn: Lsn) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let replayed = s.wal_position().await.unwrap().applied();
        let rows = p.replication().await.unwrap();
        let reported = rows
            .iter()
            .find(|r| r.application_name == "s")
            .and_then(|r| r.replay_lsn);
        if replayed >= Some(lsn) && reported >= Some(lsn) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "standby did not replay {lsn}: replayed {replayed:?}, primary sees {rows:?}"
        );
        h.tick().await;
    }
}

fn assert_no_secret(e: &PgAdminError, secret: &str) {
    let shown = format!("{e} {e:?}");
    assert!(!shown.contains(secret), "error shows a password: {shown}");
}

// ---------------------------------------------------------------------------------------------
// Scenarios, run against real PostgreSQL and against the model.

async fn topology_and_replication(h: &dyn Harness) {
    let (p, s) = (h.admin("p").await, h.admin("s").await);
    let (pi, si) = (
        p.server_info().await.unwrap(),
        s.server_info().await.unwrap(),
    );
    assert!(!pi.in_recovery, "{pi:?}");
    assert!(si.in_recovery, "{si:?}");
    assert_eq!((pi.timeline, si.timeline), (1, 1));
    assert_eq!(pi.system_identifier, si.system_identifier);
    assert_ne!(pi.system_identifier, 0);
    assert!(pi.version_num >= 150_000, "{pi:?}");
    assert!(matches!(
        s.wal_position().await.unwrap(),
        WalPosition::Standby {
            receive: Some(_),
            replay: Some(_)
        }
    ));
    assert!(s.replication().await.unwrap().is_empty(), "no cascading");
    // Nothing archives here (archive_mode off): nothing archived, nothing failing.
    let archiver = p.archiver().await.unwrap();
    assert_eq!((archiver.archived_count, archiver.failed_count), (0, 0));
    assert!(!archiver.failing() && archiver.last_archived_wal.is_none());
    // Switching WAL ends the current segment (named like PostgreSQL names it) and moves the
    // primary to the next one; a standby cannot switch.
    let segment = p.switch_wal().await.unwrap();
    assert!(
        segment.len() == 24
            && segment.starts_with("00000001")
            && segment.chars().all(|c| c.is_ascii_hexdigit()),
        "{segment}"
    );
    // Nothing written since: nothing to switch, the same segment.
    let at = current_lsn(p.as_ref()).await;
    assert_eq!(p.switch_wal().await.unwrap(), segment);
    assert_eq!(current_lsn(p.as_ref()).await, at);
    assert!(s.switch_wal().await.is_err());

    // A write on the primary moves its WAL; the standby replays it and reports back.
    let before = current_lsn(p.as_ref()).await;
    p.create_role("writer", "w1", &RoleOptions::default())
        .await
        .unwrap();
    let after = current_lsn(p.as_ref()).await;
    assert!(after > before, "{before} -> {after}");
    wait_replayed(h, p.as_ref(), s.as_ref(), after).await;
    let rows = p.replication().await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(
        (row.state.as_str(), row.sync_state.as_str()),
        ("streaming", "async")
    );
    for lsn in [row.sent_lsn, row.write_lsn, row.flush_lsn, row.replay_lsn] {
        assert!(lsn >= Some(after), "{row:?}");
    }
    let WalPosition::Standby { receive, replay } = s.wal_position().await.unwrap() else {
        panic!("standby expected");
    };
    assert!(receive >= replay && replay >= Some(after));
    // The replayed role logs in on the standby.
    assert!(s.role_exists("writer").await.unwrap());
    assert!(h.logs_in("s", "writer", "w1").await);
}

async fn roles_and_logins(h: &dyn Harness) {
    let p = h.admin("p").await;
    let c = h.connector();
    let opts = RoleOptions::default();

    assert!(!p.role_exists("app").await.unwrap());
    assert!(!h.logs_in("p", "app", "old-pw").await, "unknown role");
    p.create_role("app", "old-pw", &opts).await.unwrap();
    assert!(p.role_exists("app").await.unwrap());
    assert!(h.logs_in("p", "app", "old-pw").await);
    assert!(!h.logs_in("p", "app", "wrong").await);
    let e = p.create_role("app", "x-pw", &opts).await.unwrap_err();
    assert!(matches!(e, PgAdminError::AlreadyExists(_)), "{e:?}");
    assert_no_secret(&e, "x-pw");

    // New password: the old one fails with AuthFailed, the new one works.
    p.alter_password("app", "new-pw").await.unwrap();
    let e = c
        .connect(&h.target("p", "app", "old-pw"), T)
        .await
        .err()
        .unwrap();
    assert!(matches!(e, PgAdminError::AuthFailed(_)), "{e:?}");
    assert_no_secret(&e, "old-pw");
    assert!(h.logs_in("p", "app", "new-pw").await);
    let e = p.alter_password("ghost", "g-pw").await.unwrap_err();
    assert!(matches!(e, PgAdminError::NotFound(_)), "{e:?}");
    assert_no_secret(&e, "g-pw");

    // Passwords with quotes, backslashes and non-ASCII text round-trip, on create and alter.
    for (i, pw) in TRICKY.iter().enumerate() {
        let name = format!("tricky {i} \"q\" '");
        p.create_role(&name, pw, &opts).await.unwrap();
        assert!(h.logs_in("p", &name, pw).await, "created with {pw:?}");
        let next = format!("{pw}{pw}");
        p.alter_password(&name, &next).await.unwrap();
        assert!(h.logs_in("p", &name, &next).await, "altered to {next:?}");
        assert!(!h.logs_in("p", &name, pw).await);
    }
    assert!(
        h.logs_in("p", SUPERUSER, SUPERUSER_PASSWORD).await,
        "still the same superuser"
    );

    // NOLOGIN roles are refused even with the right password.
    let group = RoleOptions {
        login: false,
        ..opts
    };
    p.create_role("group", "g-pw", &group).await.unwrap();
    let e = c
        .connect(&h.target("p", "group", "g-pw"), T)
        .await
        .err()
        .unwrap();
    assert!(matches!(e, PgAdminError::AuthFailed(_)), "{e:?}");

    // Databases: missing until created, created once, then the granted role logs in there.
    let on_db = h.target("p", "app", "new-pw").on_database("app db");
    let e = c.check_login(&on_db, T).await.unwrap_err();
    assert!(matches!(e, PgAdminError::NotFound(_)), "{e:?}");
    let wrong_on_db = h.target("p", "app", "wrong").on_database("app db");
    assert!(
        !c.check_login(&wrong_on_db, T).await.unwrap(),
        "the password is checked before the database"
    );
    assert!(p.create_database("app db", SUPERUSER).await.unwrap());
    assert!(!p.create_database("app db", SUPERUSER).await.unwrap());
    let e = p.create_database("other", "ghost").await.unwrap_err();
    assert!(matches!(e, PgAdminError::NotFound(_)), "{e:?}");
    let e = p.grant_database("app", "no such db").await.unwrap_err();
    assert!(matches!(e, PgAdminError::NotFound(_)), "{e:?}");
    p.grant_database("app", "app db").await.unwrap();
    p.grant_database("app", "app db").await.unwrap();
    assert!(c.check_login(&on_db, T).await.unwrap());

    // Only superusers change roles.
    let app = c.connect(&h.target("p", "app", "new-pw"), T).await.unwrap();
    let e = app.create_role("x", "x-pw", &opts).await.unwrap_err();
    assert!(matches!(e, PgAdminError::Other(_)), "{e:?}");
    drop(app);

    // Dropping: a role holding a grant cannot go; others can, missing ones are no-ops.
    let e = p.drop_role("app").await.unwrap_err();
    assert!(matches!(e, PgAdminError::Other(_)), "{e:?}");
    p.drop_role("writer-2").await.unwrap();
    p.create_role("temp", "t-pw", &opts).await.unwrap();
    p.drop_role("temp").await.unwrap();
    assert!(!p.role_exists("temp").await.unwrap());
    assert!(!h.logs_in("p", "temp", "t-pw").await);

    // Requests that cannot be expressed never reach the server.
    for e in [
        p.create_role("", "pw", &opts).await.unwrap_err(),
        p.create_role(&"x".repeat(64), "pw", &opts)
            .await
            .unwrap_err(),
        p.create_role("ok", "", &opts).await.unwrap_err(),
        p.alter_password("app", "nul\0secret").await.unwrap_err(),
    ] {
        assert!(matches!(e, PgAdminError::Invalid(_)), "{e:?}");
        assert_no_secret(&e, "secret");
    }
}

async fn own_password(h: &dyn Harness) {
    let p = h.admin("p").await;
    let c = h.connector();
    let opts = RoleOptions::default();
    p.create_role("app", "app-pw-1", &opts).await.unwrap();
    p.create_role("other", "other-pw-1", &opts).await.unwrap();
    let replication = RoleOptions {
        replication: true,
        ..opts
    };
    p.create_role("streamer", "streamer-pw-1", &replication)
        .await
        .unwrap();

    // An ordinary role, logged in with its old password, changes its own.
    let app = c
        .connect(&h.target("p", "app", "app-pw-1"), T)
        .await
        .unwrap();
    app.alter_password("app", "app-pw-2").await.unwrap();
    assert!(h.logs_in("p", "app", "app-pw-2").await);
    assert!(!h.logs_in("p", "app", "app-pw-1").await);
    // The session goes on: it may change its own again.
    app.alter_password("app", "app-pw-3").await.unwrap();
    assert!(h.logs_in("p", "app", "app-pw-3").await);

    // Not another role's, nor a superuser's, nor a replication role's.
    for (role, pw) in [
        ("other", "other-pw-2"),
        (SUPERUSER, "su-pw-2"),
        ("streamer", "streamer-pw-2"),
    ] {
        let e = app.alter_password(role, pw).await.unwrap_err();
        assert!(matches!(e, PgAdminError::Other(_)), "{role}: {e:?}");
        assert!(e.to_string().contains("SQLSTATE 42501"), "{role}: {e}");
        assert_no_secret(&e, pw);
    }
    assert!(h.logs_in("p", "other", "other-pw-1").await);
    assert!(h.logs_in("p", SUPERUSER, SUPERUSER_PASSWORD).await);
    assert!(h.logs_in("p", "streamer", "streamer-pw-1").await);
    // A missing role is missing, whoever asks.
    let e = app.alter_password("ghost", "ghost-pw").await.unwrap_err();
    assert!(matches!(e, PgAdminError::NotFound(_)), "{e:?}");
    drop(app);

    // PostgreSQL 15: only a superuser changes a REPLICATION role's password, even its own.
    let streamer = c
        .connect(&h.target("p", "streamer", "streamer-pw-1"), T)
        .await
        .unwrap();
    let e = streamer
        .alter_password("streamer", "streamer-pw-3")
        .await
        .unwrap_err();
    assert!(matches!(e, PgAdminError::Other(_)), "{e:?}");
    assert_no_secret(&e, "streamer-pw-3");
    assert!(h.logs_in("p", "streamer", "streamer-pw-1").await);
    // The superuser may change any of them.
    p.alter_password("other", "other-pw-4").await.unwrap();
    assert!(h.logs_in("p", "other", "other-pw-4").await);
}

async fn database_privileges(h: &dyn Harness) {
    let (p, s) = (h.admin("p").await, h.admin("s").await);
    let opts = RoleOptions::default();
    p.create_role("owner", "owner-pw", &opts).await.unwrap();
    p.create_role("guest", "guest-pw", &opts).await.unwrap();
    assert!(p.create_database("owned db", "owner").await.unwrap());
    let has = |role: &'static str, db: &'static str| {
        let p = p.as_ref();
        async move {
            p.has_database_privileges(role, db)
                .await
                .unwrap_or_else(|e| panic!("{role} on {db}: {e}"))
        }
    };
    // The owner and superusers hold everything; another role does not (PUBLIC's CONNECT and
    // TEMPORARY are not all privileges).
    assert!(has("owner", "owned db").await);
    assert!(has(SUPERUSER, "owned db").await);
    assert!(!has("guest", "owned db").await);
    assert!(!has("owner", "postgres").await);
    // Until granted; granting again changes nothing it answers.
    p.grant_database("guest", "owned db").await.unwrap();
    assert!(has("guest", "owned db").await);
    p.grant_database("guest", "owned db").await.unwrap();
    assert!(has("guest", "owned db").await);
    // Missing objects, and names that cannot be expressed.
    let e = p.has_database_privileges("ghost", "owned db").await;
    assert!(matches!(e, Err(PgAdminError::NotFound(_))), "{e:?}");
    let e = p.has_database_privileges("guest", "no such db").await;
    assert!(matches!(e, Err(PgAdminError::NotFound(_))), "{e:?}");
    for (role, db) in [
        ("", "owned db"),
        ("guest", ""),
        (&*"x".repeat(64), "owned db"),
    ] {
        let e = p.has_database_privileges(role, db).await;
        assert!(matches!(e, Err(PgAdminError::Invalid(_))), "{e:?}");
    }
    // A read: a standby answers, with what it replayed.
    wait_replayed(h, p.as_ref(), s.as_ref(), current_lsn(p.as_ref()).await).await;
    assert!(
        s.has_database_privileges("guest", "owned db")
            .await
            .unwrap()
    );
    assert!(
        !s.has_database_privileges("guest", "postgres")
            .await
            .unwrap()
    );
}

async fn standby_refuses_writes(h: &dyn Harness) {
    let s = h.admin("s").await;
    let opts = RoleOptions::default();
    let read_only = |r: Result<(), PgAdminError>| matches!(r, Err(PgAdminError::ReadOnly(_)));
    let e = s.create_role("x", "x-pw", &opts).await;
    assert!(read_only(e.clone()), "{e:?}");
    assert_no_secret(&e.unwrap_err(), "x-pw");
    assert!(read_only(s.alter_password(SUPERUSER, "new-pw").await));
    assert!(read_only(s.alter_password("ghost", "new-pw").await));
    assert!(read_only(s.drop_role("ghost").await));
    assert!(read_only(s.grant_database(SUPERUSER, "postgres").await));
    assert!(read_only(s.grant_database("ghost", "nowhere").await));
    let e = s.create_database("new", SUPERUSER).await;
    assert!(matches!(e, Err(PgAdminError::ReadOnly(_))), "{e:?}");
    // Nothing to do is not refused.
    assert!(!s.create_database("postgres", SUPERUSER).await.unwrap());
    // Read-only comes before permissions: a plain role is told the same.
    let p = h.admin("p").await;
    p.create_role("plain", "p-pw", &opts).await.unwrap();
    wait_replayed(h, p.as_ref(), s.as_ref(), current_lsn(p.as_ref()).await).await;
    let plain = h
        .connector()
        .connect(&h.target("s", "plain", "p-pw"), T)
        .await
        .unwrap();
    assert!(read_only(plain.create_role("y", "y-pw", &opts).await));
    assert!(s.role_exists(SUPERUSER).await.unwrap());
    let e = s.promote(T).await;
    assert!(e.is_ok(), "a standby may be promoted: {e:?}");
}

async fn promotion(h: &dyn Harness) {
    let (p, s) = (h.admin("p").await, h.admin("s").await);
    let e = p.promote(T).await.unwrap_err();
    assert!(matches!(e, PgAdminError::NotInRecovery(_)), "{e:?}");

    p.create_role("before", "b-pw", &RoleOptions::default())
        .await
        .unwrap();
    wait_replayed(h, p.as_ref(), s.as_ref(), current_lsn(p.as_ref()).await).await;
    let replayed = s.wal_position().await.unwrap().applied().unwrap();

    assert!(s.promote(Duration::from_secs(10)).await.unwrap());
    let info = s.server_info().await.unwrap();
    assert!(!info.in_recovery, "{info:?}");
    assert_eq!(info.timeline, 2);
    assert!(current_lsn(s.as_ref()).await > replayed);
    // It writes now, and kept what it had replayed.
    assert!(s.role_exists("before").await.unwrap());
    s.create_role("after", "a-pw", &RoleOptions::default())
        .await
        .unwrap();
    assert!(h.logs_in("s", "after", "a-pw").await);
    let e = s.promote(T).await.unwrap_err();
    assert!(matches!(e, PgAdminError::NotInRecovery(_)), "{e:?}");
    // The old primary goes on alone on timeline 1.
    assert_eq!(p.server_info().await.unwrap().timeline, 1);
    assert!(!p.role_exists("after").await.unwrap());
}

async fn instance_down(h: &dyn Harness) {
    let (p, s) = (h.admin("p").await, h.admin("s").await);
    h.kill("p").await;
    let e = p.server_info().await.unwrap_err();
    assert!(matches!(e, PgAdminError::Unavailable(_)), "{e:?}");
    let e = h
        .connector()
        .connect(&h.superuser("p"), SHORT)
        .await
        .err()
        .unwrap();
    assert!(matches!(e, PgAdminError::Unavailable(_)), "{e:?}");
    assert_no_secret(&e, SUPERUSER_PASSWORD);
    let e = h.connector().check_login(&h.superuser("p"), SHORT).await;
    assert!(matches!(e, Err(PgAdminError::Unavailable(_))), "{e:?}");
    // The standby still answers, and still refuses writes.
    assert!(s.server_info().await.unwrap().in_recovery);
    assert!(h.logs_in("s", SUPERUSER, SUPERUSER_PASSWORD).await);
    let e = s.drop_role("ghost").await;
    assert!(matches!(e, Err(PgAdminError::ReadOnly(_))), "{e:?}");
}

// ---------------------------------------------------------------------------------------------
// Real PostgreSQL.

/// PostgreSQL 15's `bin` directory (else the newest installed one's).
fn pg_bin() -> PathBuf {
    if let Some(dir) = std::env::var_os("STEWARD_PG_BIN") {
        return dir.into();
    }
    let root = Path::new("/usr/lib/postgresql");
    steward_node::postgres_bin(root, "15")
        .or_else(|| steward_node::newest_postgres_bin(root))
        .expect("no /usr/lib/postgresql/*/bin/postgres; run scripts/prereqs.sh")
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A command for a PostgreSQL binary, run as the `postgres` OS user when we are root.
fn pg_command(bin: &Path, program: &str) -> Command {
    if is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--",
        ])
        .arg(bin.join(program));
        c
    } else {
        Command::new(bin.join(program))
    }
}

fn run(mut c: Command, what: &str) {
    let out = c.stdin(Stdio::null()).output().unwrap();
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A port nothing listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One postgres server; stopped (SIGQUIT, then SIGKILL) and reaped on drop.
struct Server {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Server {
    fn stop(&mut self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // setpriv execs postgres, so the child is the postmaster itself.
            let _ = kill(Pid::from_raw(pid), Signal::SIGQUIT);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

struct RealPair {
    bin: PathBuf,
    dir: tempfile::TempDir,
    ports: [u16; 2],
    servers: Mutex<Vec<Server>>,
    connector: PgConnector,
}

impl RealPair {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        if is_root() {
            let pg = nix::unistd::User::from_name("postgres")
                .unwrap()
                .expect("no postgres OS user");
            std::os::unix::fs::chown(dir.path(), Some(pg.uid.as_raw()), Some(pg.gid.as_raw()))
                .unwrap();
        }
        let pair = Self {
            bin: pg_bin(),
            ports: [free_port(), free_port()],
            dir,
            servers: Mutex::new(Vec::new()),
            connector: PgConnector,
        };
        let pwfile = pair.dir.path().join("pwfile");
        std::fs::write(&pwfile, format!("{SUPERUSER_PASSWORD}\n")).unwrap();
        if is_root() {
            run(
                {
                    let mut c = Command::new("chown");
                    c.arg("postgres").arg(&pwfile);
                    c
                },
                "chown",
            );
        }
        let mut initdb = pg_command(&pair.bin, "initdb");
        initdb
            .arg("-D")
            .arg(pair.data("p"))
            .args([
                "-U",
                SUPERUSER,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
            ])
            .args(["--no-sync", "--encoding=UTF8", "--locale=C"])
            .arg(format!("--pwfile={}", pwfile.display()));
        run(initdb, "initdb");
        pair.spawn("p");
        pair.wait_ready("p").await;

        let mut backup = pg_command(&pair.bin, "pg_basebackup");
        backup
            .arg("-d")
            .arg(format!(
                "host=127.0.0.1 port={} user={SUPERUSER}",
                pair.ports[0]
            ))
            .env("PGPASSWORD", SUPERUSER_PASSWORD)
            .arg("-D")
            .arg(pair.data("s"))
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"]);
        run(backup, "pg_basebackup");
        pair.spawn("s");
        pair.wait_ready("s").await;
        pair
    }

    fn data(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn port(&self, name: &str) -> u16 {
        if name == "p" {
            self.ports[0]
        } else {
            self.ports[1]
        }
    }

    fn spawn(&self, name: &str) {
        let log = self.dir.path().join(format!("{name}.log"));
        let mut c = pg_command(&self.bin, "postgres");
        c.arg("-D")
            .arg(self.data(name))
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("port={}", self.port(name)))
            .arg("-c")
            .arg(format!(
                "unix_socket_directories={}",
                self.dir.path().display()
            ))
            .arg("-c")
            .arg(format!("cluster_name={name}"))
            .args(["-c", "fsync=off", "-c", "shared_buffers=16MB"])
            .args(["-c", "max_connections=30", "-c", "log_statement=all"]);
        let child = c
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .unwrap();
        self.servers.lock().unwrap().push(Server {
            name: name.to_owned(),
            child,
            log,
        });
    }

    async fn wait_ready(&self, name: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            match self.connector.connect(&self.superuser(name), SHORT).await {
                Ok(_) => return,
                Err(PgAdminError::Unavailable(_)) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("{name} did not come up: {e}"),
            }
        }
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }
}

impl Drop for RealPair {
    fn drop(&mut self) {
        let servers = std::mem::take(&mut *self.servers.lock().unwrap_or_else(|e| e.into_inner()));
        if std::thread::panicking() {
            for s in &servers {
                let log = std::fs::read_to_string(&s.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                eprintln!("--- postgres {} (last lines) ---", s.name);
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
        }
        drop(servers); // stops and reaps, before the data directories go
    }
}

#[async_trait]
impl Harness for RealPair {
    fn connector(&self) -> &dyn PostgresConnector {
        &self.connector
    }

    fn target(&self, name: &str, user: &str, password: &str) -> ConnectionTarget {
        ConnectionTarget::new("127.0.0.1", self.port(name), user, password)
    }

    async fn kill(&self, name: &str) {
        let server = {
            let mut servers = self.servers.lock().unwrap();
            let i = servers.iter().position(|s| s.name == name).unwrap();
            servers.remove(i)
        };
        tokio::task::spawn_blocking(move || drop(server))
            .await
            .unwrap();
    }

    async fn tick(&self) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn real_topology_and_replication() {
    let h = RealPair::start().await;
    topology_and_replication(&h).await;
    // Real-only: where the standby connects from.
    let rows = h.admin("p").await.replication().await.unwrap();
    assert_eq!(rows[0].client_addr, Some("127.0.0.1".parse().unwrap()));
}

#[tokio::test]
async fn real_roles_and_logins() {
    let h = RealPair::start().await;
    roles_and_logins(&h).await;

    // The statement log (log_statement=all) shows verifiers, never a clear-text password.
    let log = h.log("p");
    assert!(
        log.contains("PASSWORD 'SCRAM-SHA-256$4096:"),
        "statements are logged"
    );
    for pw in TRICKY
        .iter()
        .copied()
        .chain(["old-pw", "new-pw", "x-pw", "g-pw"])
    {
        assert!(!log.contains(pw), "the server log shows {pw:?}");
    }

    // Our quoting is PostgreSQL's: quote_literal() agrees, and each literal reads back as the
    // original text.
    let (client, connection) = tokio_postgres::Config::new()
        .host("127.0.0.1")
        .port(h.port("p"))
        .user(SUPERUSER)
        .password(SUPERUSER_PASSWORD)
        .dbname("postgres")
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    for text in TRICKY.iter().copied().chain(["", "\\", "'", "a\\'b'\\"]) {
        let ours = sql::quote_literal(text).unwrap();
        let row = client
            .query_one(&format!("SELECT quote_literal($1::text), {ours}"), &[&text])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), ours, "quote_literal({text:?})");
        assert_eq!(row.get::<_, String>(1), text);
        let ident = sql::quote_ident(&format!("x{text}")).unwrap();
        let row = client
            .query_one(
                &format!("SELECT quote_ident($1::text), 1 AS {ident}"),
                &[&format!("x{text}")],
            )
            .await
            .unwrap();
        assert_eq!(row.columns()[1].name(), format!("x{text}"));
        // PostgreSQL leaves simple lower-case names unquoted; we always quote.
        let theirs: String = row.get(0);
        assert!(
            theirs == ident || format!("\"{theirs}\"") == ident,
            "{theirs} vs {ident}"
        );
    }
}

#[tokio::test]
async fn real_own_password() {
    let h = RealPair::start().await;
    own_password(&h).await;
    let log = h.log("p");
    for pw in ["app-pw-", "other-pw-", "streamer-pw-", "su-pw-", "ghost-pw"] {
        assert!(!log.contains(pw), "the server log shows {pw:?}");
    }
}

#[tokio::test]
async fn real_database_privileges() {
    database_privileges(&RealPair::start().await).await;
}

#[tokio::test]
async fn real_standby_refuses_writes() {
    standby_refuses_writes(&RealPair::start().await).await;
}

#[tokio::test]
async fn real_promotion() {
    promotion(&RealPair::start().await).await;
}

#[tokio::test]
async fn real_instance_down() {
    instance_down(&RealPair::start().await).await;
}

#[tokio::test]
async fn real_unreachable() {
    // Refused: nothing listens.
    let refused = ConnectionTarget::new("127.0.0.1", free_port(), SUPERUSER, "secret-pw");
    let e = PgConnector.connect(&refused, SHORT).await.err().unwrap();
    assert!(matches!(e, PgAdminError::Unavailable(_)), "{e:?}");
    assert_no_secret(&e, "secret-pw");
    // A black hole: the TCP handshake completes but nothing ever answers.
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hole.local_addr().unwrap().port();
    let target = ConnectionTarget::new("127.0.0.1", port, SUPERUSER, "secret-pw");
    let started = Instant::now();
    let e = PgConnector.check_login(&target, SHORT).await.unwrap_err();
    assert!(matches!(e, PgAdminError::Unavailable(_)), "{e:?}");
    assert!(
        started.elapsed() < SHORT * 3,
        "took {:?}",
        started.elapsed()
    );
    drop(hole);
}

// ---------------------------------------------------------------------------------------------
// The model.

struct ModelPair {
    model: PgModel,
    connector: steward_operator::postgres::admin::model::ModelConnector,
}

impl ModelPair {
    fn new() -> Self {
        let model = PgModel::new();
        model
            .add_primary("p", SUPERUSER, SUPERUSER_PASSWORD)
            .unwrap();
        model.add_standby("s", "p").unwrap();
        let connector = model.connector();
        Self { model, connector }
    }
}

#[async_trait]
impl Harness for ModelPair {
    fn connector(&self) -> &dyn PostgresConnector {
        &self.connector
    }

    fn target(&self, name: &str, user: &str, password: &str) -> ConnectionTarget {
        PgModel::target(name, user, password)
    }

    async fn kill(&self, name: &str) {
        self.model.kill(name).unwrap();
    }

    async fn tick(&self) {
        self.model.catch_up("s").unwrap();
    }
}

#[tokio::test]
async fn model_topology_and_replication() {
    topology_and_replication(&ModelPair::new()).await;
}

#[tokio::test]
async fn model_roles_and_logins() {
    roles_and_logins(&ModelPair::new()).await;
}

#[tokio::test]
async fn model_own_password() {
    let h = ModelPair::new();
    own_password(&h).await;
    // Three roles made, two passwords changed by the role itself, one by the superuser.
    let changes = h.model.changes();
    assert_eq!(changes.len(), 6, "{changes:?}");
}

#[tokio::test]
async fn model_database_privileges() {
    let h = ModelPair::new();
    database_privileges(&h).await;
    // Only the two roles, the database and the two grants wrote: the checks are reads.
    let changes = h.model.changes();
    assert_eq!(changes.len(), 5, "{changes:?}");
}

#[tokio::test]
async fn model_standby_refuses_writes() {
    let h = ModelPair::new();
    standby_refuses_writes(&h).await;
    // Only the role made on the primary and the promotion at the end changed anything.
    let changes = h.model.changes();
    assert_eq!(changes.len(), 2, "{changes:?}");
}

#[tokio::test]
async fn model_promotion() {
    promotion(&ModelPair::new()).await;
}

#[tokio::test]
async fn model_instance_down() {
    instance_down(&ModelPair::new()).await;
}
