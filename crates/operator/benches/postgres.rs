//! PostgreSQL benchmarks on the local control plane with real PostgreSQL (record results in
//! docs/performance.md):
//! - the floor: a primary and two streaming replicas by hand on loopback addresses — `initdb`
//!   (the entrypoint's flags), `postgres`, two `pg_basebackup`s side by side, two standbys —
//!   until the primary reports both standbys streaming;
//! - the same through Steward: `PostgresCluster` created → primary and 2 streaming replicas
//!   ready in status;
//! - a single kill of the primary's postmaster (the container restarts it; no fail-over): the
//!   longest gap between acknowledged writes through the `-primary` Service;
//! - fail-over: the primary kept down (killed whenever it restarts) → first write acknowledged
//!   through the `-primary` Service by the new primary, with the default detection delay;
//! - switchover to a named replica: the longest gap between two acknowledged writes of a
//!   writer that inserts every 10 ms through the `-primary` Service.
//!
//! Needs root (the node agent; the by-hand servers run as the `postgres` OS user).
//! `cargo bench -p steward-operator --bench postgres` (add `-- --runs N`, default 3).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
#[path = "common/by_hand.rs"]
mod hand;
#[path = "common/postgres.rs"]
mod pg;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hand::{Procs, clone_standbys, initdb, pg_bin, spawn_server, wait_up, workdir};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use pg::{Writer, settled, until};
use steward_api::postgres::PostgresCluster;
use steward_operator::dev::apply_manifests;

const NAMESPACE: &str = "default";

/// A primary and two streaming replicas by hand: the floor any operator is compared with.
async fn by_hand(run: usize) -> Duration {
    let bin = pg_bin("15");
    let dir = workdir();
    let ips: Vec<String> = (0..3).map(|i| format!("127.43.{run}.{}", i + 1)).collect();
    let data = |i: usize| dir.path().join(format!("d{i}"));
    let started = Instant::now();
    initdb(&bin, dir.path(), &data(0));
    let mut procs = Procs(vec![spawn_server(&bin, &data(0), &ips[0])]);
    wait_up(&ips[0], started).await;
    clone_standbys(&bin, &data, &ips, &mut procs, started).await;
    let took = started.elapsed();
    drop(procs);
    took
}

fn pkill(pattern: &str) -> bool {
    Command::new("pkill")
        .args(["-9", "-f", pattern])
        .status()
        .unwrap()
        .success()
}

/// Kills whatever matches `pattern` every 100 ms until stopped; returns the kill count.
fn kill_loop(pattern: String) -> (Arc<AtomicBool>, tokio::task::JoinHandle<u32>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let task = tokio::spawn(async move {
        let mut kills = 0;
        while !flag.load(Ordering::Relaxed) {
            if pkill(&pattern) {
                kills += 1;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        kills
    });
    (stop, task)
}

async fn pod_ip(client: &kube::Client, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    pods.get(name)
        .await
        .unwrap()
        .status
        .unwrap()
        .pod_ip
        .unwrap()
}

#[derive(Clone, Copy)]
struct Row {
    floor: Duration,
    create: Duration,
    restart: Duration,
    failover: Duration,
    detected: Duration,
    switchover_gap: Duration,
    switchover: Duration,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let runs = common::runs();
    let dir = tempfile::tempdir().unwrap();
    let plane = common::plane(&dir).await;
    let client = plane.embedded.client.clone();
    let api: Api<PostgresCluster> = Api::namespaced(client.clone(), NAMESPACE);

    let mut rows = Vec::new();
    for run in 0..runs {
        let floor = by_hand(run).await;
        let name = format!("bench{run}");
        let manifest = format!(
            "apiVersion: steward.dev/v1alpha1\nkind: PostgresCluster\nmetadata:\n  name: {name}\nspec:\n  version: \"15\"\n  instances: 3\n"
        );
        let started = Instant::now();
        apply_manifests(&client, &manifest, NAMESPACE)
            .await
            .unwrap();
        until(&api, &name, "ready with 3 instances", |c| settled(c, 3)).await;
        let create = started.elapsed();

        let writer = Writer::for_cluster(&client, NAMESPACE, &name).await;

        // One kill: the container restarts PostgreSQL (crash recovery), no fail-over.
        let old = format!("{name}-0");
        let old_ip = pod_ip(&client, &old).await;
        let pattern = format!("listen_addresses={old_ip} ");
        // A backend whose postmaster was killed may still answer a statement or two, so the
        // figure is the longest gap between acknowledged writes around the outage.
        let killed = Instant::now();
        assert!(pkill(&pattern), "the primary's postmaster was found");
        let failed = writer.first_failure_after(killed).await;
        let back = writer.first_after(failed, None).await;
        let restart = writer.longest_gap(killed, back);
        until(&api, &name, "ready again after one kill", |c| {
            settled(c, 3) && c.status.as_ref().unwrap().current_primary.as_deref() == Some(&old)
        })
        .await;

        // Fail-over: the primary stays down until a replica is promoted.
        let killed = Instant::now();
        let killer = kill_loop(pattern);
        let (_, c) = until(&api, &name, "failing over", |c| {
            c.status
                .as_ref()
                .is_some_and(|s| s.pending_failover.is_some())
        })
        .await;
        let detected = killed.elapsed();
        let target = c.status.unwrap().pending_failover.unwrap().target;
        let target_ip = pod_ip(&client, &target).await;
        let promoted = writer.first_after(killed, Some(&target_ip)).await;
        let failover = promoted - killed;
        killer.0.store(true, Ordering::Relaxed);
        killer.1.await.unwrap();
        until(&api, &name, "settled after the fail-over", |c| {
            settled(c, 3)
        })
        .await;

        // Switchover back to the first instance, a healthy replica now.
        let requested = Instant::now();
        let patch =
            serde_json::json!({"spec": {"switchover": {"id": format!("s{run}"), "target": old}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        until(&api, &name, "switched over", |c| {
            settled(c, 3) && c.status.as_ref().unwrap().current_primary.as_deref() == Some(&old)
        })
        .await;
        let old_ip = pod_ip(&client, &old).await;
        let resumed = writer.first_after(requested, Some(&old_ip)).await;
        let switchover = resumed - requested;
        let switchover_gap = writer.longest_gap(requested, resumed);
        writer.stop().await;

        let row = Row {
            floor,
            create,
            restart,
            failover,
            detected,
            switchover_gap,
            switchover,
        };
        println!(
            "run {run}: by hand {:.2} s | Steward create→primary+2 streaming {:.2} s (×{:.1}) | one kill: write gap {:.2} s | fail-over: noticed {:.2} s, kill→write on new primary {:.2} s | switchover {:.2} s, longest write gap {:.2} s",
            floor.as_secs_f64(),
            create.as_secs_f64(),
            create.as_secs_f64() / floor.as_secs_f64(),
            restart.as_secs_f64(),
            detected.as_secs_f64(),
            failover.as_secs_f64(),
            switchover.as_secs_f64(),
            switchover_gap.as_secs_f64(),
        );
        rows.push(row);
        api.delete(&name, &Default::default()).await.unwrap();
    }
    let median = |f: fn(&Row) -> Duration| {
        let mut v: Vec<f64> = rows.iter().map(|r| f(r).as_secs_f64()).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (floor, create) = (median(|r| r.floor), median(|r| r.create));
    println!(
        "median of {runs}: by hand {floor:.2} s | create {create:.2} s (×{:.1}) | one kill: write gap {:.2} s | fail-over noticed {:.2} s, kill→write {:.2} s | switchover {:.2} s, longest write gap {:.2} s",
        create / floor,
        median(|r| r.restart),
        median(|r| r.detected),
        median(|r| r.failover),
        median(|r| r.switchover),
        median(|r| r.switchover_gap),
    );
    plane.shutdown().await;
}
