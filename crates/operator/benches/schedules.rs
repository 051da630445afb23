//! The scheduler at 1,000 schedules (issue 14; record results in docs/performance.md): the
//! embedded API server in this process, `steward operator` as its own process, one
//! `PostgresCluster` with backups on (no node agent: its Pods stay Pending, which the
//! scheduler does not care about), `--idle N` schedules that fire once a year (default 1,000)
//! and `--firing M` that fire every 5 s (default 10, `concurrencyPolicy: Allow`, since no
//! backup ever completes here).
//!
//! Figures, over `--steady S` seconds (default 60) after every schedule has its
//! `nextScheduleTime`:
//! - the operator's RSS and CPU share of one core (from `/proc`);
//! - the firing delay: from a slot's second to the watch event of its `PostgresBackup` (the
//!   run's creation, as a client sees it), p50 / p99 / max.
//!
//! `cargo bench -p steward-operator --bench schedules` (add `-- --idle N --firing M --steady S`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use steward_api::pgbackrest::PostgresBackup;
use steward_api::postgres::PostgresCluster;
use steward_api::schedule::Schedule;
use steward_operator::embedded::Embedded;

#[path = "common/process.rs"]
mod process;
use process::{Operator, arg, cpu_ticks, rss_mib};

const NS: &str = "db";

fn schedule(name: &str, cron: &str) -> Schedule {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "steward.dev/v1alpha1", "kind": "Schedule",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"cluster": "target", "schedule": cron, "type": "pgbackrest",
                 "pgbackrest": {"type": "incr"}, "concurrencyPolicy": "Allow",
                 "successfulRunsHistoryLimit": 1}
    }))
    .unwrap()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let idle = arg("--idle", 1000);
    let firing = arg("--firing", 10);
    let steady = arg("--steady", 60);
    let plane = Embedded::start(&[NS, "steward-system"]).await.unwrap();
    let client: Client = plane.client.clone();
    let cluster: PostgresCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "steward.dev/v1alpha1", "kind": "PostgresCluster",
        "metadata": {"name": "target", "namespace": NS},
        "spec": {"version": "15", "instances": 1, "backups": {"pgbackrest": {}}}
    }))
    .unwrap();
    Api::<PostgresCluster>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let schedules: Api<Schedule> = Api::namespaced(client.clone(), NS);
    let creating = Instant::now();
    for i in 0..idle {
        schedules
            .create(
                &PostParams::default(),
                &schedule(&format!("idle-{i}"), "0 0 0 1 1 ?"),
            )
            .await
            .unwrap();
    }
    for i in 0..firing {
        schedules
            .create(
                &PostParams::default(),
                &schedule(&format!("fire-{i}"), "*/5 * * * * *"),
            )
            .await
            .unwrap();
    }
    println!(
        "created {idle} idle and {firing} firing schedules in {:.1} s",
        creating.elapsed().as_secs_f64()
    );

    // Every run's arrival, as a watching client sees it: (slot, seen).
    let arrivals: Arc<Mutex<Vec<(i64, jiff::Timestamp)>>> = Arc::default();
    let watching = {
        let arrivals = arrivals.clone();
        let backups: Api<PostgresBackup> = Api::namespaced(client.clone(), NS);
        tokio::spawn(async move {
            let mut seen = std::collections::HashSet::new();
            let mut events = watcher(backups, watcher::Config::default()).boxed();
            while let Some(Ok(event)) = events.next().await {
                if let watcher::Event::Apply(b) | watcher::Event::InitApply(b) = event {
                    let now = jiff::Timestamp::now();
                    let Some(slot) = b
                        .labels()
                        .get("steward.dev/slot")
                        .and_then(|s| s.parse::<i64>().ok())
                    else {
                        continue;
                    };
                    if seen.insert(b.name_any()) {
                        arrivals.lock().unwrap().push((slot, now));
                    }
                }
            }
        })
    };

    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut operator = Operator::start(&plane, dir.path());
    let pid = operator.0.id();
    loop {
        let list = schedules.list(&ListParams::default()).await.unwrap();
        let ready = list
            .items
            .iter()
            .filter(|s| {
                s.status
                    .as_ref()
                    .is_some_and(|s| s.next_schedule_time.is_some())
            })
            .count();
        if ready as u64 == idle + firing {
            break;
        }
        operator.assert_running(dir.path());
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "schedules never all scheduled ({ready})"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "every schedule has its next slot {:.1} s after the operator started",
        started.elapsed().as_secs_f64()
    );

    // Steady state.
    let window_start = jiff::Timestamp::now();
    let ticks = cpu_ticks(pid);
    let at = Instant::now();
    tokio::time::sleep(Duration::from_secs(steady)).await;
    let cpu = (cpu_ticks(pid) - ticks) as f64 / at.elapsed().as_secs_f64();
    let rss = rss_mib(&pid.to_string());
    watching.abort();
    let mut delays: Vec<f64> = arrivals
        .lock()
        .unwrap()
        .iter()
        .filter(|(slot, _)| *slot >= window_start.as_second())
        .map(|(slot, seen)| (seen.as_millisecond() - slot * 1000) as f64)
        .collect();
    delays.sort_by(f64::total_cmp);
    println!(
        "steady ({steady} s, {idle} idle + {firing} firing schedules): operator RSS {rss:.0} MiB, CPU {cpu:.1} % of a core; \
         {} runs, firing delay (slot → run seen) p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        delays.len(),
        percentile(&delays, 0.5),
        percentile(&delays, 0.99),
        delays.last().copied().unwrap_or(f64::NAN)
    );
    drop(operator);
}
