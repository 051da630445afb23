//! Tests of the entrypoint: its text, the configuration files, and every start-up path run by
//! `/bin/sh` against fake `initdb`, `pg_basebackup`, `pg_rewind`, `pg_isready` and `postgres`
//! (the fake `postgres` is Perl, because a shell started as an asynchronous command cannot
//! catch the SIGINT the entrypoint sends; real `postgres` installs its own handlers).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use super::*;

const SU_PASSWORD: &str = "Su9pw:with\\colon";
const REPL_PASSWORD: &str = "Repl7pw";

#[test]
fn entrypoint_is_posix_sh_and_uses_the_pod_layout() {
    let script = entrypoint();
    assert!(script.starts_with("#!/bin/sh\n"));
    assert!(
        !script.contains("set -x") && !script.contains('@'),
        "{script}"
    );
    for path in [
        names::DATA_MOUNT,
        names::CONFIG_MOUNT,
        names::SUPERUSER_MOUNT,
        names::REPLICATION_MOUNT,
    ] {
        assert!(script.contains(&format!("='{path}'")), "{path}");
    }
    assert!(script.contains("PORT=5432\n"));
    assert!(!script.contains("pg_promote") && !script.contains("rm -f \"$PGDATA/standby.signal"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("entrypoint.sh");
    std::fs::write(&path, &script).unwrap();
    let out = Command::new("sh").arg("-n").arg(&path).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // shellcheck, where installed (scripts/test.sh installs it).
    if let Ok(out) = Command::new("shellcheck")
        .args(["-s", "sh"])
        .arg(&path)
        .output()
    {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

#[test]
fn readiness_asks_pg_isready_on_the_pod_ip() {
    assert_eq!(
        readiness_command(),
        ["sh", "-c", "exec pg_isready -q -h \"$POD_IP\" -p 5432"]
    );
}

#[test]
fn postgresql_conf_has_the_defaults_then_the_users_parameters_quoted() {
    let params = BTreeMap::from([
        ("max_connections".to_owned(), "200".to_owned()),
        ("wal_keep_size".to_owned(), "1GB".to_owned()),
        (
            "search_path".to_owned(),
            r#""$user", it's \ public"#.to_owned(),
        ),
        ("bad name\nx".to_owned(), "1".to_owned()),
    ]);
    let conf = postgresql_conf(&params);
    let lines: Vec<&str> = conf.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        &lines[..9],
        [
            "wal_level = 'replica'",
            "hot_standby = 'on'",
            "max_wal_senders = '10'",
            "max_replication_slots = '10'",
            "wal_keep_size = '256MB'",
            "password_encryption = 'scram-sha-256'",
            "wal_log_hints = 'on'",
            "log_destination = 'stderr'",
            "logging_collector = 'off'",
        ]
    );
    assert_eq!(
        &lines[9..],
        [
            "max_connections = '200'",
            r#"search_path = '"$user", it''s \\ public'"#,
            "wal_keep_size = '1GB'",
        ],
        "user parameters come after the defaults, so they win"
    );
    assert!(conf.contains("# (a parameter with an invalid name was left out)\n"));
    assert!(!conf.contains("bad name"));
    assert_eq!(quote_value("a\nb\r\0"), r"'a\nb\r'");
    assert!(is_parameter_name("auto_explain.log_min_duration"));
    assert!(!is_parameter_name("1x") && !is_parameter_name("") && !is_parameter_name("a=b"));
    assert_eq!(postgresql_conf(&BTreeMap::new()).lines().count(), 11);
}

#[test]
fn pg_hba_uses_scram_everywhere() {
    let hba = pg_hba_conf();
    let rules: Vec<Vec<&str>> = hba
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rules,
        [
            vec!["local", "all", "all", "scram-sha-256"],
            vec![
                "host",
                "replication",
                "replicator",
                "0.0.0.0/0",
                "scram-sha-256"
            ],
            vec!["host", "replication", "replicator", "::/0", "scram-sha-256"],
            vec!["host", "all", "all", "0.0.0.0/0", "scram-sha-256"],
            vec!["host", "all", "all", "::/0", "scram-sha-256"],
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// The start-up paths, with fake binaries.

/// A temporary Pod filesystem: mounts, fake binaries, and a call log.
struct Fake {
    root: tempfile::TempDir,
    /// Process groups of the entrypoints started.
    groups: RefCell<Vec<u32>>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        for pgid in self.groups.borrow().iter() {
            if let Ok(pgid) = i32::try_from(*pgid) {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            }
        }
    }
}

const FAKE_INITDB: &str = r#"#!/bin/sh
echo "initdb $*" >> "$FAKE/calls"
while [ $# -gt 0 ]; do [ "$1" = -D ] && dir=$2; shift; done
mkdir -p "$dir" && echo 15 > "$dir/PG_VERSION" && echo initdb > "$dir/origin"
"#;

const FAKE_BASEBACKUP: &str = r#"#!/bin/sh
echo "pg_basebackup $* passfile-mode=$(stat -c %a "$PGPASSFILE")" >> "$FAKE/calls"
n=$(cat "$FAKE/basebackup-failures" 2>/dev/null || echo 0)
if [ "$n" -gt 0 ]; then echo $((n - 1)) > "$FAKE/basebackup-failures"; echo "refused" >&2; exit 1; fi
while [ $# -gt 0 ]; do [ "$1" = -D ] && dir=$2; shift; done
mkdir -p "$dir" && echo 15 > "$dir/PG_VERSION" && echo clone > "$dir/origin"
"#;

const FAKE_REWIND: &str = r#"#!/bin/sh
echo "pg_rewind $*" >> "$FAKE/calls"
exit "$(cat "$FAKE/rewind-exit" 2>/dev/null || echo 0)"
"#;

const FAKE_ISREADY: &str = "#!/bin/sh\necho \"pg_isready $*\" >> \"$FAKE/calls\"\n";

const FAKE_POSTGRES: &str = r#"#!/usr/bin/perl
my $fake = $ENV{FAKE};
sub note { open(my $f, '>>', "$fake/calls"); print $f "$_[0]\n"; close($f); }
note("postgres " . join(' ', @ARGV));
select(undef, undef, undef, 0.3) if -e "$fake/slow-start";
$SIG{INT} = sub { note("postgres got SIGINT"); exit 0; };
$SIG{TERM} = sub { note("postgres got SIGTERM"); exit 7; };
open(my $p, '>', "$fake/postgres.pid"); print $p "$$\n"; close($p);
while (1) { exit 3 if -e "$fake/crash"; select(undef, undef, undef, 0.02); }
"#;

impl Fake {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let fake = Self {
            root,
            groups: RefCell::new(Vec::new()),
        };
        for dir in ["data", "config", "su", "repl", "bin"] {
            std::fs::create_dir_all(fake.path(dir)).unwrap();
        }
        std::fs::write(fake.path("su/username"), "steward").unwrap();
        std::fs::write(fake.path("su/password"), format!("{SU_PASSWORD}\n")).unwrap();
        std::fs::write(fake.path("repl/username"), "replicator").unwrap();
        std::fs::write(fake.path("repl/password"), REPL_PASSWORD).unwrap();
        for (name, text) in [
            ("initdb", FAKE_INITDB),
            ("pg_basebackup", FAKE_BASEBACKUP),
            ("pg_rewind", FAKE_REWIND),
            ("pg_isready", FAKE_ISREADY),
            ("postgres", FAKE_POSTGRES),
        ] {
            let path = fake.path("bin").join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let layout = Layout {
            data_mount: fake.path("data").display().to_string(),
            config_mount: fake.path("config").display().to_string(),
            superuser_mount: fake.path("su").display().to_string(),
            replication_mount: fake.path("repl").display().to_string(),
            port: 5432,
            attempts: 3,
            retry_seconds: "0.01".to_owned(),
        };
        std::fs::write(fake.path("entrypoint.sh"), render(&layout)).unwrap();
        fake
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    fn pgdata(&self) -> PathBuf {
        self.path("data/pgdata")
    }

    /// Data left by an earlier instance; `standby` adds standby.signal.
    fn existing_data(&self, dir: &str, origin: &str, standby: bool) {
        let dir = self.path(dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("PG_VERSION"), "15\n").unwrap();
        std::fs::write(dir.join("origin"), origin).unwrap();
        if standby {
            std::fs::write(dir.join("standby.signal"), "").unwrap();
        }
    }

    fn set(&self, name: &str, value: &str) {
        std::fs::write(self.path(name), value).unwrap();
    }

    /// Starts the entrypoint in its own process group (killed when the test ends), its output
    /// going to the file `output` (a pipe would stay open while a background loop of the
    /// script outlives it).
    fn start(&self, role: &str) -> Child {
        let path = format!(
            "{}:{}",
            self.path("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let output = std::fs::File::create(self.path("output")).unwrap();
        let child = Command::new("sh")
            .arg(self.path("entrypoint.sh"))
            .env_clear()
            .env("PATH", path)
            .env("FAKE", self.root.path())
            .env("PGDATA", self.pgdata())
            .env("PGROLE", role)
            .env("POD_IP", "127.1.0.7")
            .env("INSTANCE", "demo-1")
            .env("PRIMARY_HOST", "demo-primary.db.svc")
            .stdin(Stdio::null())
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            .process_group(0)
            .spawn()
            .unwrap();
        self.groups.borrow_mut().push(child.id());
        child
    }

    /// Waits for the entrypoint to exit; returns its exit code.
    fn wait(&self, child: &mut Child) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "the entrypoint does not exit: {}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(self.path("output")).unwrap_or_default()
    }

    /// Runs the entrypoint until `postgres` runs, then sends SIGTERM; or until it exits by
    /// itself. Returns the exit code and the output.
    fn run(&self, role: &str) -> (i32, String) {
        let _ = std::fs::remove_file(self.path("postgres.pid"));
        let mut child = self.start(role);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if self.path("postgres.pid").exists() {
                let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
                kill(pid, Signal::SIGTERM).unwrap();
                break;
            }
            assert!(Instant::now() < deadline, "the entrypoint hangs");
            std::thread::sleep(Duration::from_millis(10));
        }
        let code = self.wait(&mut child);
        let text = self.output();
        for secret in [SU_PASSWORD, REPL_PASSWORD, "Su9pw"] {
            assert!(!text.contains(secret), "a password was printed: {text}");
        }
        (code, text)
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn programs(&self) -> Vec<String> {
        self.calls()
            .iter()
            .map(|c| c.split(' ').next().unwrap_or_default().to_owned())
            .collect()
    }

    fn origin(&self, dir: &Path) -> String {
        std::fs::read_to_string(dir.join("origin"))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }
}

fn has_perl() -> bool {
    Path::new("/usr/bin/perl").exists()
}

#[test]
fn a_primary_without_data_initdbs_then_runs_postgres_and_stops_it_fast() {
    if !has_perl() {
        return;
    }
    let f = Fake::new();
    let (code, out) = f.run("primary");
    assert_eq!(code, 0, "{out}");
    assert_eq!(f.programs(), ["initdb", "postgres", "postgres"], "{out}");
    let calls = f.calls();
    let su = f.path("su").display().to_string();
    let init = f.path("data/pgdata.init").display().to_string();
    assert_eq!(
        calls[0],
        format!(
            "initdb -D {init} -U steward --pwfile={su}/password --auth-host=scram-sha-256 \
             --auth-local=scram-sha-256 --data-checksums -E UTF8 --locale=C"
        )
    );
    let data = f.path("data").display().to_string();
    let config = f.path("config").display().to_string();
    let pgdata = f.pgdata().display().to_string();
    assert_eq!(
        calls[1],
        format!(
            "postgres -D {pgdata} -c config_file={config}/postgresql.conf \
             -c hba_file={config}/pg_hba.conf -c listen_addresses=127.1.0.7 -c port=5432 \
             -c unix_socket_directories={data}/run -c cluster_name=demo-1 \
             -c primary_conninfo=host=demo-primary.db.svc port=5432 user=replicator \
             passfile={data}/.pgpass application_name=demo-1"
        )
    );
    assert_eq!(
        calls[2], "postgres got SIGINT",
        "SIGTERM becomes a fast shutdown"
    );
    assert_eq!(f.origin(&f.pgdata()), "initdb");
    assert!(!f.pgdata().join("standby.signal").exists());
    assert!(!f.path("data/pgdata.init").exists());
    let passfile = f.path("data/.pgpass");
    assert_eq!(
        std::fs::metadata(&passfile).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::read_to_string(&passfile).unwrap(),
        "*:*:*:replicator:Repl7pw\n*:*:*:steward:Su9pw\\:with\\\\colon\n"
    );
    assert!(f.path("data/run").is_dir());
}

#[test]
fn a_replica_without_data_clones_retrying_until_the_primary_answers() {
    if !has_perl() {
        return;
    }
    let f = Fake::new();
    f.set("basebackup-failures", "2");
    let (code, out) = f.run("replica");
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        f.programs(),
        [
            "pg_basebackup",
            "pg_basebackup",
            "pg_basebackup",
            "postgres",
            "postgres"
        ]
    );
    let clone = f.path("data/pgdata.clone").display().to_string();
    let data = f.path("data").display().to_string();
    assert_eq!(
        f.calls()[2],
        format!(
            "pg_basebackup -D {clone} -d host=demo-primary.db.svc port=5432 user=replicator \
             passfile={data}/.pgpass -X stream -c fast -w passfile-mode=600"
        )
    );
    assert!(out.contains("attempt 2 of 3"), "{out}");
    assert_eq!(f.origin(&f.pgdata()), "clone");
    assert!(f.pgdata().join("standby.signal").exists());
    assert!(!f.path("data/pgdata.clone").exists());
}

#[test]
fn a_replica_that_cannot_clone_gives_up_without_starting() {
    let f = Fake::new();
    f.set("basebackup-failures", "10");
    let (code, out) = f.run("replica");
    assert_eq!(code, 1, "{out}");
    assert_eq!(f.programs(), ["pg_basebackup"; 3]);
    assert!(
        out.contains("could not clone from demo-primary.db.svc"),
        "{out}"
    );
    assert!(!f.pgdata().exists() && !f.path("data/pgdata.clone").exists());
}

#[test]
fn a_complete_clone_of_an_earlier_start_is_used() {
    if !has_perl() {
        return;
    }
    let f = Fake::new();
    f.existing_data("data/pgdata.clone", "clone", true);
    std::fs::create_dir_all(f.pgdata()).unwrap(); // an empty PGDATA is no data
    let (code, out) = f.run("replica");
    assert_eq!(code, 0, "{out}");
    assert_eq!(f.programs(), ["postgres", "postgres"]);
    assert_eq!(f.origin(&f.pgdata()), "clone");
}

#[test]
fn a_former_primary_as_replica_rejoins_with_pg_rewind() {
    if !has_perl() {
        return;
    }
    let f = Fake::new();
    f.existing_data("data/pgdata", "old", false);
    let (code, out) = f.run("replica");
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        f.programs(),
        ["pg_isready", "pg_rewind", "postgres", "postgres"]
    );
    let data = f.path("data").display().to_string();
    let pgdata = f.pgdata().display().to_string();
    assert_eq!(
        f.calls()[1],
        format!(
            "pg_rewind --target-pgdata={pgdata} --source-server=host=demo-primary.db.svc \
             port=5432 user=steward dbname=postgres passfile={data}/.pgpass"
        )
    );
    assert_eq!(f.origin(&f.pgdata()), "old", "rewound in place");
    assert!(f.pgdata().join("standby.signal").exists());
    assert!(!f.path("data/pgdata.diverged").exists());
}

#[test]
fn a_former_primary_that_cannot_rewind_is_replaced_by_a_clone_and_kept_aside() {
    if !has_perl() {
        return;
    }
    let f = Fake::new();
    f.existing_data("data/pgdata", "old", false);
    f.existing_data("data/pgdata.diverged", "older", false);
    f.set("rewind-exit", "1");
    let (code, out) = f.run("replica");
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        f.programs(),
        [
            "pg_isready",
            "pg_rewind",
            "pg_basebackup",
            "postgres",
            "postgres"
        ]
    );
    assert_eq!(f.origin(&f.pgdata()), "clone");
    assert!(f.pgdata().join("standby.signal").exists());
    assert_eq!(f.origin(&f.path("data/pgdata.diverged")), "old");
}

#[test]
fn a_former_primary_keeps_its_data_when_neither_rewind_nor_clone_works() {
    let f = Fake::new();
    f.existing_data("data/pgdata", "old", false);
    f.set("rewind-exit", "1");
    f.set("basebackup-failures", "10");
    let (code, out) = f.run("replica");
    assert_eq!(code, 1, "{out}");
    assert!(!f.programs().contains(&"postgres".to_owned()));
    assert_eq!(f.origin(&f.pgdata()), "old");
    assert!(!f.pgdata().join("standby.signal").exists());
    assert!(!f.path("data/pgdata.diverged").exists());
    assert!(out.contains("the old data is untouched"), "{out}");
}

#[test]
fn existing_data_starts_as_it_is_and_standby_signal_is_never_removed() {
    if !has_perl() {
        return;
    }
    for (role, standby) in [("primary", true), ("replica", true), ("primary", false)] {
        let f = Fake::new();
        f.existing_data("data/pgdata", "old", standby);
        let (code, out) = f.run(role);
        assert_eq!(code, 0, "{out}");
        assert_eq!(f.programs(), ["postgres", "postgres"], "{role} {standby}");
        assert_eq!(f.pgdata().join("standby.signal").exists(), standby);
        let mode = if standby { "standby" } else { "primary" };
        assert!(
            out.contains(&format!("starting postgres as a {mode} (role {role})")),
            "{out}"
        );
    }
}

#[test]
fn the_entrypoint_exits_with_the_status_of_postgres() {
    if !has_perl() {
        return;
    }
    let f = Fake::new();
    f.existing_data("data/pgdata", "old", false);
    f.set("crash", "");
    let mut child = f.start("primary");
    assert_eq!(f.wait(&mut child), 3, "{}", f.output());
}

#[test]
fn a_stop_before_postgres_handles_signals_is_repeated_until_it_stops() {
    if !has_perl() {
        return;
    }
    let f = Fake::new();
    f.existing_data("data/pgdata", "old", false);
    f.set("slow-start", "");
    let mut child = f.start("primary");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f.programs().contains(&"postgres".to_owned()) {
        assert!(Instant::now() < deadline, "postgres never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    // postgres runs but ignores SIGINT for another 0.3 s (inherited from the shell).
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
    kill(pid, Signal::SIGTERM).unwrap();
    assert_eq!(f.wait(&mut child), 0, "{}", f.output());
    assert_eq!(
        f.calls().last().map(String::as_str),
        Some("postgres got SIGINT")
    );
}

#[test]
fn an_unknown_role_or_a_missing_secret_stops_the_entrypoint() {
    let f = Fake::new();
    let (code, out) = f.run("leader");
    assert_eq!(code, 1);
    assert!(
        out.contains("PGROLE must be primary or replica, not 'leader'"),
        "{out}"
    );
    std::fs::remove_file(f.path("repl/password")).unwrap();
    let (code, out) = f.run("primary");
    assert_eq!(code, 1);
    assert!(out.contains("repl/password is missing"), "{out}");
    assert!(f.calls().is_empty());
}

#[test]
fn a_past_restores_recovery_settings_are_removed_unless_recovery_is_pending() {
    if !has_perl() {
        return;
    }
    let auto = "# Do not edit this file manually!\nwork_mem = '8MB'\n\
        # Recovery settings generated by pgBackRest restore on 2026-11-26 07:20:34\n\
        restore_command = 'pgbackrest --stanza=db archive-get %f \"%p\"'\n\
        recovery_target_time = '2026-11-26 07:20:34+00'\n\
        recovery_target_action = 'promote'\n";
    for (signal, kept) in [
        (Some("recovery.signal"), true),
        (Some("standby.signal"), false),
        (None, false),
    ] {
        let f = Fake::new();
        f.existing_data("data/pgdata", "old", signal == Some("standby.signal"));
        if signal == Some("recovery.signal") {
            std::fs::write(f.pgdata().join("recovery.signal"), "").unwrap();
        }
        std::fs::write(f.pgdata().join("postgresql.auto.conf"), auto).unwrap();
        let (code, out) = f.run("primary");
        assert_eq!(code, 0, "{out}");
        let now = std::fs::read_to_string(f.pgdata().join("postgresql.auto.conf")).unwrap();
        if kept {
            assert_eq!(now, auto, "a pending recovery keeps its settings");
        } else {
            assert_eq!(
                now, "# Do not edit this file manually!\nwork_mem = '8MB'\n",
                "{signal:?}: {out}"
            );
            assert!(
                out.contains("removing a past restore's recovery settings"),
                "{out}"
            );
        }
    }
}
