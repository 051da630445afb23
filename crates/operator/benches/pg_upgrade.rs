//! PostgreSQL major-version upgrade 15 → 16 (issue 31; record results in docs/performance.md),
//! real PostgreSQL 15 (Debian) and 16 (`/usr/lib/postgresql/16`, `scripts/prereqs.sh`):
//! - by hand (the floor): a primary and two streaming standbys of 15 holding `ROWS` rows; the
//!   clock starts with the fast shutdown of all three, then `initdb` of 16 with the same flags,
//!   `pg_upgrade` in copy mode (as Steward runs it: the old data stays the way back), the 16
//!   primary started, `vacuumdb --all --analyze-in-stages`, two `pg_basebackup`s side by side,
//!   both standbys started; it stops when the primary shows both streaming;
//! - Steward: the same cluster (`instances: 3`, the same rows) and a `PostgresUpgrade`
//!   (`withoutBackup`: no repository) created → the cluster settled on 16: three ready
//!   instances, both replicas streaming, no operation, `spec.version` 16.
//!
//! Needs root (the node agent; the by-hand servers run as the `postgres` OS user).
//! `cargo bench -p steward-operator --bench pg_upgrade` (add `-- --runs N`, default 3).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
#[path = "common/by_hand.rs"]
mod hand;
#[path = "common/postgres.rs"]
mod pg;

use std::time::{Duration, Instant};

use hand::{PASSWORD, Procs, clone_standbys, initdb, pg, pg_bin, run_ok, spawn_server, wait_up};
use kube::api::Api;
use pg::{primary_service, settled, until};
use steward_api::pgupgrade::{PostgresUpgrade, UpgradePhase};
use steward_api::postgres::PostgresCluster;
use steward_operator::dev::apply_manifests;

const NAMESPACE: &str = "default";
/// Rows in the upgraded database (about 13 MB of table).
const ROWS: i64 = 100_000;
const FILL: &str = "CREATE TABLE t (id int primary key, v text); \
    INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, 100000) g";

/// A superuser session on the cluster's writable primary, through its `-primary` Service.
async fn session(client: &kube::Client, name: &str) -> tokio_postgres::Client {
    let (ip, password) = primary_service(client, NAMESPACE, name).await;
    let started = Instant::now();
    loop {
        if let Some(c) = pg::connect(&ip, &password).await
            && let Ok(row) = c.query_one("SELECT pg_is_in_recovery()", &[]).await
            && !row.get::<_, bool>(0)
        {
            return c;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{name}-primary never routed to a writable primary"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Stops a by-hand server with a fast shutdown (SIGINT) and waits for it.
fn stop(procs: &mut Procs) {
    for c in &mut procs.0 {
        if let Ok(pid) = i32::try_from(c.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGINT,
            );
        }
    }
    for c in &mut procs.0 {
        let _ = c.wait();
    }
    procs.0.clear();
}

async fn by_hand(run: usize) -> Duration {
    let (old, new) = (pg_bin("15"), pg_bin("16"));
    assert!(
        new.ends_with("16/bin"),
        "PostgreSQL 16: run scripts/prereqs.sh"
    );
    let dir = hand::workdir();
    let ips: Vec<String> = (0..3).map(|i| format!("127.44.{run}.{}", i + 1)).collect();
    let data15 = |i: usize| dir.path().join(format!("a{i}"));
    let data16 = |i: usize| dir.path().join(format!("b{i}"));
    let setup = Instant::now();
    initdb(&old, dir.path(), &data15(0));
    let mut procs = Procs(vec![spawn_server(&old, &data15(0), &ips[0])]);
    wait_up(&ips[0], setup).await;
    let primary = pg::connect(&ips[0], PASSWORD).await.unwrap();
    primary.batch_execute(FILL).await.unwrap();
    drop(primary);
    clone_standbys(&old, &data15, &ips, &mut procs, setup).await;

    let started = Instant::now();
    stop(&mut procs);
    initdb(&new, dir.path(), &data16(0));
    let mut upgrade = pg(&new, "pg_upgrade");
    upgrade
        .current_dir(dir.path())
        .arg("-b")
        .arg(&old)
        .arg("-B")
        .arg(&new)
        .arg("-d")
        .arg(data15(0))
        .arg("-D")
        .arg(data16(0))
        .args(["-U", "steward", "-p", "50432", "-P", "50433"])
        .arg("-s")
        .arg(dir.path());
    run_ok(upgrade, "pg_upgrade");
    procs.0.push(spawn_server(&new, &data16(0), &ips[0]));
    wait_up(&ips[0], started).await;
    let mut analyze = pg(&new, "vacuumdb");
    analyze
        .args([
            "--all",
            "--analyze-in-stages",
            "-U",
            "steward",
            "-h",
            &ips[0],
        ])
        .env("PGPASSWORD", PASSWORD);
    run_ok(analyze, "vacuumdb");
    clone_standbys(&new, &data16, &ips, &mut procs, started).await;
    let took = started.elapsed();
    let primary = pg::connect(&ips[0], PASSWORD).await.unwrap();
    let n: i64 = primary
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, ROWS, "every row after the upgrade by hand");
    drop(procs);
    took
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let runs = common::runs();
    let dir = tempfile::tempdir().unwrap();
    let plane = common::plane(&dir).await;
    let client = plane.embedded.client.clone();
    let clusters: Api<PostgresCluster> = Api::namespaced(client.clone(), NAMESPACE);
    let upgrades: Api<PostgresUpgrade> = Api::namespaced(client.clone(), NAMESPACE);

    let mut rows = Vec::new();
    for run in 0..runs {
        let floor = by_hand(run).await;
        let name = format!("up{run}");
        let manifest = format!(
            "apiVersion: steward.dev/v1alpha1\nkind: PostgresCluster\nmetadata:\n  name: {name}\nspec:\n  version: \"15\"\n  instances: 3\n"
        );
        apply_manifests(&client, &manifest, NAMESPACE)
            .await
            .unwrap();
        until(&clusters, &name, "ready with 3 instances", |c| {
            settled(c, 3)
        })
        .await;
        let s = session(&client, &name).await;
        s.batch_execute(FILL).await.unwrap();
        drop(s);

        let upgrade = format!(
            "apiVersion: steward.dev/v1alpha1\nkind: PostgresUpgrade\nmetadata:\n  name: {name}-16\nspec:\n  cluster: {name}\n  toVersion: \"16\"\n  withoutBackup: true\n"
        );
        let started = Instant::now();
        apply_manifests(&client, &upgrade, NAMESPACE).await.unwrap();
        until(&clusters, &name, "settled on 16", |c| {
            c.spec.version == "16" && settled(c, 3)
        })
        .await;
        let steward = started.elapsed();
        let done = upgrades.get(&format!("{name}-16")).await.unwrap();
        assert_eq!(
            done.status.and_then(|s| s.phase),
            Some(UpgradePhase::Completed)
        );
        let s = session(&client, &name).await;
        let n: i64 = s
            .query_one("SELECT count(*) FROM t", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, ROWS, "every row after Steward's upgrade");
        drop(s);
        println!(
            "run {run}: by hand {:.2} s | Steward PostgresUpgrade → 3 ready on 16 {:.2} s (×{:.1})",
            floor.as_secs_f64(),
            steward.as_secs_f64(),
            steward.as_secs_f64() / floor.as_secs_f64(),
        );
        rows.push((floor, steward));
        clusters.delete(&name, &Default::default()).await.unwrap();
    }
    let median = |f: fn(&(Duration, Duration)) -> Duration| {
        let mut v: Vec<f64> = rows.iter().map(|r| f(r).as_secs_f64()).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (floor, steward) = (median(|r| r.0), median(|r| r.1));
    println!(
        "median of {runs}: by hand {floor:.2} s | Steward {steward:.2} s (×{:.1})",
        steward / floor
    );
    plane.shutdown().await;
}
