//! etcd benchmarks on the local control plane (record results in docs/performance.md):
//! - the physical floor: three etcd processes started by hand on loopback addresses, until all
//!   three answer a status call with a leader;
//! - the same through Steward: `EtcdCluster` created → three healthy members in status;
//! - scaling 3→5 and 5→3 (each until status settles).
//!
//! `cargo bench -p steward-operator --bench etcd` (add `-- --runs N`, default 3).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::api::{Api, Patch, PatchParams, PostParams};
use steward_api::etcd::{EtcdCluster, EtcdClusterSpec};

struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

async fn healthy(endpoints: &[String]) -> bool {
    let mut leaders = Vec::new();
    for e in endpoints {
        let Ok(mut c) = etcd_client::Client::connect(
            [e.clone()],
            Some(etcd_client::ConnectOptions::new().with_timeout(Duration::from_millis(500))),
        )
        .await
        else {
            return false;
        };
        match c.status().await {
            Ok(s) if s.leader() != 0 => leaders.push(s.leader()),
            _ => return false,
        }
    }
    leaders.windows(2).all(|w| w[0] == w[1])
}

/// Three etcd processes by hand: the floor any operator is compared with.
async fn by_hand(run: usize) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let ips: Vec<String> = (0..3).map(|i| format!("127.42.{run}.{}", i + 1)).collect();
    let initial = ips
        .iter()
        .enumerate()
        .map(|(i, ip)| format!("m{i}=http://{ip}:2380"))
        .collect::<Vec<_>>()
        .join(",");
    let started = Instant::now();
    let mut procs = Procs(Vec::new());
    for (i, ip) in ips.iter().enumerate() {
        let child = Command::new("etcd")
            .args([
                format!("--name=m{i}"),
                format!("--data-dir={}", dir.path().join(format!("m{i}")).display()),
                format!("--listen-peer-urls=http://{ip}:2380"),
                format!("--listen-client-urls=http://{ip}:2379"),
                format!("--advertise-client-urls=http://{ip}:2379"),
                format!("--initial-advertise-peer-urls=http://{ip}:2380"),
                format!("--initial-cluster={initial}"),
                "--initial-cluster-state=new".into(),
                "--logger=zap".into(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        procs.0.push(child);
    }
    let endpoints: Vec<String> = ips.iter().map(|ip| format!("http://{ip}:2379")).collect();
    while !healthy(&endpoints).await {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed()
}

fn settled(c: &EtcdCluster, want: i32) -> bool {
    c.status.as_ref().is_some_and(|s| {
        s.ready_members == want
            && s.replicas == want
            && s.members.len() == usize::try_from(want).unwrap()
            && s.members.iter().all(|m| m.healthy && !m.learner)
            && s.common.operation.is_none()
    })
}

async fn until(api: &Api<EtcdCluster>, name: &str, want: i32) -> Duration {
    let started = Instant::now();
    loop {
        if let Ok(c) = api.get(name).await
            && settled(&c, want)
        {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "{name} never settled at {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn scale(api: &Api<EtcdCluster>, name: &str, replicas: i32) {
    let patch = serde_json::json!({"spec": {"replicas": replicas}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let runs = common::runs();
    let dir = tempfile::tempdir().unwrap();
    let plane = common::plane(&dir).await;
    let api: Api<EtcdCluster> = Api::namespaced(plane.embedded.client.clone(), "default");

    let mut rows = Vec::new();
    for run in 0..runs {
        let floor = by_hand(run).await;
        let name = format!("bench{run}");
        let started = Instant::now();
        api.create(
            &PostParams::default(),
            &EtcdCluster::new(&name, EtcdClusterSpec::new(3, "3.4.23")),
        )
        .await
        .unwrap();
        until(&api, &name, 3).await;
        let create = started.elapsed();
        scale(&api, &name, 5).await;
        let up = until(&api, &name, 5).await;
        scale(&api, &name, 3).await;
        let down = until(&api, &name, 3).await;
        println!(
            "run {run}: by hand {:.2} s | Steward create→3 healthy {:.2} s (×{:.1}) | scale 3→5 {:.2} s | 5→3 {:.2} s",
            floor.as_secs_f64(),
            create.as_secs_f64(),
            create.as_secs_f64() / floor.as_secs_f64(),
            up.as_secs_f64(),
            down.as_secs_f64()
        );
        rows.push((floor, create, up, down));
        api.delete(&name, &Default::default()).await.unwrap();
    }
    let median = |f: fn(&(Duration, Duration, Duration, Duration)) -> Duration| {
        let mut v: Vec<f64> = rows.iter().map(|r| f(r).as_secs_f64()).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (floor, create) = (median(|r| r.0), median(|r| r.1));
    println!(
        "median of {runs}: by hand {floor:.2} s | create→3 healthy {create:.2} s (×{:.1}) | 3→5 {:.2} s | 5→3 {:.2} s",
        create / floor,
        median(|r| r.2),
        median(|r| r.3)
    );
    plane.shutdown().await;
}
