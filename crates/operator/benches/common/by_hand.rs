//! A PostgreSQL primary and two streaming standbys by hand, as the `postgres` OS user on
//! loopback addresses: the floor the PostgreSQL benchmarks compare Steward with.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::pg::connect;

/// The superuser password of the by-hand servers.
pub const PASSWORD: &str = "bench-superuser-password";

/// Child processes killed (SIGQUIT, then SIGKILL) and reaped on drop.
pub struct Procs(pub Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if let Ok(pid) = i32::try_from(c.id()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGQUIT,
                );
            }
        }
        std::thread::sleep(Duration::from_millis(300));
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// PostgreSQL `major`'s `bin` directory (else the newest installed one's).
pub fn pg_bin(major: &str) -> PathBuf {
    let root = Path::new("/usr/lib/postgresql");
    steward_node::postgres_bin(root, major)
        .or_else(|| steward_node::newest_postgres_bin(root))
        .expect("a /usr/lib/postgresql/*/bin/postgres")
}

/// A PostgreSQL program run as the `postgres` OS user.
pub fn pg(bin: &Path, program: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=postgres",
        "--regid=postgres",
        "--init-groups",
        "--",
    ])
    .arg(bin.join(program))
    .stdin(Stdio::null());
    c
}

/// Runs `c`, which must succeed.
pub fn run_ok(mut c: Command, what: &str) {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `postgres` on `data`, listening on `ip:5432` and on a Unix socket in `<data>.sock` (each
/// server needs its own socket directory, outside the data directory that `pg_basebackup`
/// copies: the socket's lock file is per port).
pub fn spawn_server(bin: &Path, data: &Path, ip: &str) -> Child {
    let sockets = data.with_extension("sock");
    std::fs::create_dir_all(&sockets).unwrap();
    let postgres = nix::unistd::User::from_name("postgres").unwrap().unwrap();
    std::os::unix::fs::chown(&sockets, Some(postgres.uid.as_raw()), None).unwrap();
    let mut c = pg(bin, "postgres");
    c.arg("-D")
        .arg(data)
        .arg("-c")
        .arg(format!("listen_addresses={ip}"))
        .arg("-c")
        .arg(format!("unix_socket_directories={}", sockets.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c.spawn().unwrap()
}

/// A directory the `postgres` OS user owns, with the password file `pwfile` in it.
pub fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let postgres = nix::unistd::User::from_name("postgres")
        .unwrap()
        .expect("a postgres OS user");
    std::os::unix::fs::chown(
        dir.path(),
        Some(postgres.uid.as_raw()),
        Some(postgres.gid.as_raw()),
    )
    .unwrap();
    let pwfile = dir.path().join("pwfile");
    std::fs::write(&pwfile, format!("{PASSWORD}\n")).unwrap();
    std::os::unix::fs::chown(&pwfile, Some(postgres.uid.as_raw()), None).unwrap();
    dir
}

/// `initdb` with the instances' entrypoint's flags (SCRAM, data checksums, UTF8, locale C).
pub fn initdb(bin: &Path, dir: &Path, data: &Path) {
    let mut initdb = pg(bin, "initdb");
    initdb
        .arg("-D")
        .arg(data)
        .args(["-U", "steward"])
        .arg(format!("--pwfile={}", dir.join("pwfile").display()))
        .args([
            "--auth-host=scram-sha-256",
            "--auth-local=trust",
            "--data-checksums",
            "-E",
            "UTF8",
            "--locale=C",
        ]);
    run_ok(initdb, "initdb");
}

/// From a running primary at `ips[0]` (data `data(0)`): two `pg_basebackup`s side by side
/// into `data(1)`, `data(2)`, both standbys started, until the primary shows both streaming.
pub async fn clone_standbys(
    bin: &Path,
    data: &dyn Fn(usize) -> PathBuf,
    ips: &[String],
    procs: &mut Procs,
    started: Instant,
) {
    let backups: Vec<Child> = (1..3)
        .map(|i| {
            let mut c = pg(bin, "pg_basebackup");
            c.arg("-D")
                .arg(data(i))
                .arg("-d")
                .arg(format!("host={} user=steward", ips[0]))
                .env("PGPASSWORD", PASSWORD)
                .args(["-R", "-X", "stream", "-c", "fast"])
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            c.spawn().unwrap()
        })
        .collect();
    for mut b in backups {
        assert!(b.wait().unwrap().success(), "pg_basebackup");
    }
    for (i, ip) in ips.iter().enumerate().skip(1) {
        procs.0.push(spawn_server(bin, &data(i), ip));
    }
    let primary = connect(&ips[0], PASSWORD).await.unwrap();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the standbys never streamed"
        );
        let streaming: i64 = primary
            .query_one(
                "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if streaming == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the server at `ip` accepts the superuser.
pub async fn wait_up(ip: &str, started: Instant) {
    while connect(ip, PASSWORD).await.is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the primary never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
