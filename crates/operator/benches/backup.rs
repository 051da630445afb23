//! A full backup of a ~1 GiB PostgreSQL database (record results in docs/performance.md):
//! taken by Steward — a `PostgresBackup` created, the operator's Job running `pgbackrest
//! backup`, `pgbackrest info` read back, `status.phase: Completed` — against the same command
//! run by hand in the repository host (`kubectl exec <cluster>-repo -- pgbackrest … backup`),
//! into the same repository from the same database, alternating which goes first. Figures:
//! each one's wall time (Steward's from creating the object to seeing `Completed`), the
//! medians, and their ratio.
//!
//! Needs root (the node agent), real PostgreSQL and pgBackRest, and kubectl (`$KUBECTL`).
//! `cargo bench -p steward-operator --bench backup` (add `-- --runs N`, default 3;
//! `--gib X`, default 1).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
#[path = "common/postgres.rs"]
mod pg;

use std::time::{Duration, Instant};

use kube::api::{Api, PostParams};
use pg::{connect, settled, until};
use steward_api::pgbackrest::{BackupPhase, BackupType, PostgresBackup, PostgresBackupSpec};
use steward_api::postgres::PostgresCluster;
use steward_operator::dev::apply_manifests;

const NAMESPACE: &str = "default";
const CLUSTER: &str = "bench";

fn gib() -> f64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--gib")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1.0)
}

async fn steward_backup(client: &kube::Client, name: &str) -> (Duration, String) {
    let api: Api<PostgresBackup> = Api::namespaced(client.clone(), NAMESPACE);
    let backup = PostgresBackup::new(
        name,
        PostgresBackupSpec {
            cluster: CLUSTER.into(),
            type_: BackupType::Full,
            method: steward_api::pgbackrest::BackupMethod::Pgbackrest,
        },
    );
    let started = Instant::now();
    api.create(&PostParams::default(), &backup).await.unwrap();
    loop {
        let b = api.get(name).await.unwrap();
        let status = b.status.unwrap_or_default();
        match status.phase {
            Some(BackupPhase::Completed) => {
                return (started.elapsed(), status.duration.unwrap_or_default());
            }
            Some(BackupPhase::Failed) => panic!("{name} failed: {:?}", status.error),
            _ => {}
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "{name} never completed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn by_hand(plane: &steward_operator::dev::DevPlane) -> Duration {
    let started = Instant::now();
    common::kubectl(
        plane,
        &[
            "exec",
            &format!("{CLUSTER}-repo"),
            "-c",
            "pgbackrest",
            "--",
            "pgbackrest",
            "--config=/etc/pgbackrest/repo.conf",
            "--stanza=db",
            "--type=full",
            "backup",
        ],
    );
    started.elapsed()
}

fn median(v: &[Duration]) -> f64 {
    let mut s: Vec<f64> = v.iter().map(Duration::as_secs_f64).collect();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let runs = common::runs();
    let dir = tempfile::tempdir().unwrap();
    let plane = common::plane(&dir).await;
    let client = plane.embedded.client.clone();
    let clusters: Api<PostgresCluster> = Api::namespaced(client.clone(), NAMESPACE);
    let manifest = format!(
        "apiVersion: steward.dev/v1alpha1\nkind: PostgresCluster\nmetadata:\n  name: {CLUSTER}\nspec:\n  version: \"15\"\n  instances: 1\n  storage: {{size: 20Gi}}\n  backups:\n    pgbackrest:\n      retentionFull: 2\n      storage: {{size: 20Gi}}\n"
    );
    apply_manifests(&client, &manifest, NAMESPACE)
        .await
        .unwrap();
    until(&clusters, CLUSTER, "ready with its stanza", |c| {
        settled(c, 1)
            && c.status
                .as_ref()
                .and_then(|s| s.backups.as_ref())
                .is_some_and(|b| b.stanza.is_some())
    })
    .await;

    // ~1 GiB: rows of ~1 KiB (md5 text, as compressible as typical data is to lz4).
    let (ip, password) = pg::primary_service(&client, NAMESPACE, CLUSTER).await;
    let session = connect(&ip, &password).await.unwrap();
    let rows = (gib() * 1_000_000.0) as i64;
    let loading = Instant::now();
    session
        .batch_execute(&format!(
            "CREATE TABLE big AS SELECT g AS id, repeat(md5(g::text), 31) AS pad FROM generate_series(1, {rows}) g; CHECKPOINT"
        ))
        .await
        .unwrap();
    let size: i64 = session
        .query_one("SELECT pg_database_size(current_database())", &[])
        .await
        .unwrap()
        .get(0);
    let cluster_size: i64 = session
        .query_one(
            "SELECT sum(pg_database_size(oid))::bigint FROM pg_database",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    println!(
        "loaded {rows} rows in {:.1} s: database {:.2} GiB, cluster {:.2} GiB",
        loading.elapsed().as_secs_f64(),
        size as f64 / f64::from(1 << 30),
        cluster_size as f64 / f64::from(1 << 30)
    );

    let (mut hand, mut steward) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let mut order = [true, false];
        if run % 2 == 1 {
            order.reverse();
        }
        for steward_first in order {
            if steward_first {
                let (took, pgbackrest) =
                    steward_backup(&client, &format!("bench-full-{run}")).await;
                println!(
                    "run {run}: Steward (PostgresBackup → Completed) {:.2} s (pgBackRest's own duration {pgbackrest})",
                    took.as_secs_f64()
                );
                steward.push(took);
            } else {
                let took = by_hand(&plane);
                println!(
                    "run {run}: by hand (kubectl exec … pgbackrest backup) {:.2} s",
                    took.as_secs_f64()
                );
                hand.push(took);
            }
        }
    }
    let (h, s) = (median(&hand), median(&steward));
    println!(
        "median of {runs}: by hand {h:.2} s, Steward {s:.2} s, ratio Steward / by hand {:.3}",
        s / h
    );
    plane.shutdown().await;
}
