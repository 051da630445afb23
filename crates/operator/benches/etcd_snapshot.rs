//! etcd snapshot benchmarks on the local control plane (record results in
//! docs/performance.md), on a three-member cluster (etcd 3.4.23) filled with `--mib N` MiB of
//! values (default 1024, 1 MiB per key):
//! - a snapshot by hand: `etcdctl snapshot save` against a follower, as a person would run it;
//! - the same through Steward: `EtcdBackup` created → `Completed` (Job, save, check, status);
//! - a restore by hand: `etcdctl snapshot restore` of that file for three members, then the
//!   three started, until all answer with a leader;
//! - the same through Steward: an `EtcdCluster` with `spec.dataSource` created → three healthy
//!   members (one restores, two join and receive the data through raft).
//!
//! `cargo bench -p steward-operator --bench etcd_snapshot` (add `-- --runs N --mib N`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use steward_api::etcd::{
    EtcdBackup, EtcdBackupSpec, EtcdCluster, EtcdClusterSpec, EtcdDataSource, SnapshotClaim,
    SnapshotDestination, SnapshotPhase,
};

struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn mib() -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--mib")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1024)
}

fn settled(c: &EtcdCluster, want: i32) -> bool {
    c.status.as_ref().is_some_and(|s| {
        s.ready_members == want
            && s.members.len() == usize::try_from(want).unwrap()
            && s.members.iter().all(|m| m.healthy && !m.learner)
            && s.common.operation.is_none()
    })
}

async fn until_settled(api: &Api<EtcdCluster>, name: &str, limit: Duration) {
    let started = Instant::now();
    loop {
        if let Ok(c) = api.get(name).await
            && settled(&c, 3)
        {
            return;
        }
        assert!(started.elapsed() < limit, "{name} never settled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Client URLs of the cluster's member Pods, followers' first is not known here: all of them.
async fn member_urls(pods: &Api<Pod>, cluster: &str) -> Vec<String> {
    let list = pods
        .list(&ListParams::default().labels(&format!(
            "app.kubernetes.io/instance={cluster},app.kubernetes.io/component=member"
        )))
        .await
        .unwrap();
    list.items
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .map(|ip| format!("http://{ip}:2379"))
        .collect()
}

/// A follower's client URL (what Steward snapshots from too).
async fn follower(urls: &[String]) -> String {
    for u in urls {
        let mut c = etcd_client::Client::connect([u.clone()], None)
            .await
            .unwrap();
        let s = c.status().await.unwrap();
        if s.leader() != s.header().unwrap().member_id() {
            return u.clone();
        }
    }
    urls[0].clone()
}

async fn fill(urls: &[String], mib: usize) {
    let mut c = etcd_client::Client::connect(urls.to_vec(), None)
        .await
        .unwrap();
    let value = vec![b'x'; 1024 * 1024];
    for i in 0..mib {
        c.put(format!("blob/{i:05}"), value.clone(), None)
            .await
            .unwrap();
    }
}

fn etcdctl_save(endpoint: &str, file: &Path) -> Duration {
    let started = Instant::now();
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args([
            &format!("--endpoints={endpoint}"),
            "--command-timeout=600s",
            "snapshot",
            "save",
        ])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    started.elapsed()
}

async fn healthy(endpoints: &[String]) -> bool {
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
            Ok(s) if s.leader() != 0 => {}
            _ => return false,
        }
    }
    true
}

/// `etcdctl snapshot restore` for three members, then the three started, until all answer
/// with a leader.
async fn restore_by_hand(file: &Path, run: usize) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let ips: Vec<String> = (0..3).map(|i| format!("127.43.{run}.{}", i + 1)).collect();
    let initial = ips
        .iter()
        .enumerate()
        .map(|(i, ip)| format!("m{i}=http://{ip}:2380"))
        .collect::<Vec<_>>()
        .join(",");
    let started = Instant::now();
    let mut procs = Procs(Vec::new());
    for (i, ip) in ips.iter().enumerate() {
        let data = dir.path().join(format!("m{i}"));
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["snapshot", "restore"])
            .arg(file)
            .args([
                format!("--name=m{i}"),
                format!("--initial-cluster={initial}"),
                "--initial-cluster-token=by-hand".into(),
                format!("--initial-advertise-peer-urls=http://{ip}:2380"),
                format!("--data-dir={}", data.display()),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let child = Command::new("etcd")
            .args([
                format!("--name=m{i}"),
                format!("--data-dir={}", data.display()),
                format!("--listen-peer-urls=http://{ip}:2380"),
                format!("--listen-client-urls=http://{ip}:2379"),
                format!("--advertise-client-urls=http://{ip}:2379"),
                format!("--initial-advertise-peer-urls=http://{ip}:2380"),
                format!("--initial-cluster={initial}"),
                "--initial-cluster-state=new".into(),
                "--initial-cluster-token=by-hand".into(),
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let runs = common::runs();
    let mib = mib();
    let dir = tempfile::tempdir().unwrap();
    let plane = common::plane(&dir).await;
    let client = plane.embedded.client.clone();
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), "default");
    let backups: Api<EtcdBackup> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    let mut spec = EtcdClusterSpec::new(3, "3.4.23");
    spec.storage.size = "8Gi".into();
    clusters
        .create(
            &PostParams::default(),
            &EtcdCluster::new("src", spec.clone()),
        )
        .await
        .unwrap();
    until_settled(&clusters, "src", Duration::from_secs(120)).await;
    let urls = member_urls(&pods, "src").await;
    let filling = Instant::now();
    fill(&urls, mib).await;
    println!(
        "filled src with {mib} MiB in {:.1} s",
        filling.elapsed().as_secs_f64()
    );
    let scratch = tempfile::tempdir().unwrap();
    let mut rows = Vec::new();
    for run in 0..runs {
        let file = scratch.path().join(format!("by-hand-{run}.db"));
        let hand = etcdctl_save(&follower(&urls).await, &file);
        let name = format!("snap-{run}");
        let started = Instant::now();
        backups
            .create(
                &PostParams::default(),
                &EtcdBackup::new(
                    &name,
                    EtcdBackupSpec {
                        cluster: "src".into(),
                        destination: SnapshotDestination {
                            claim: SnapshotClaim {
                                size: "16Gi".into(),
                                ..SnapshotClaim::default()
                            },
                        },
                        retain: Some(1),
                    },
                ),
            )
            .await
            .unwrap();
        let size = loop {
            let b = backups.get(&name).await.unwrap();
            let s = b.status.unwrap_or_default();
            assert_ne!(s.phase, Some(SnapshotPhase::Failed), "{s:?}");
            if s.phase == Some(SnapshotPhase::Completed) {
                break s.size_bytes.unwrap_or_default();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let steward = started.elapsed();
        let restore_hand = restore_by_hand(&file, run).await;
        let copy = format!("copy-{run}");
        let mut restored = spec.clone();
        restored.data_source = Some(EtcdDataSource {
            backup: name.clone(),
        });
        let started = Instant::now();
        clusters
            .create(&PostParams::default(), &EtcdCluster::new(&copy, restored))
            .await
            .unwrap();
        until_settled(&clusters, &copy, Duration::from_secs(900)).await;
        let restore_steward = started.elapsed();
        clusters.delete(&copy, &Default::default()).await.unwrap();
        std::fs::remove_file(&file).ok();
        println!(
            "run {run}: snapshot of {:.0} MiB by hand {:.2} s | Steward EtcdBackup → Completed {:.2} s (×{:.2}) | restore into 3 members by hand {:.2} s | Steward dataSource → 3 healthy {:.2} s (×{:.2})",
            size as f64 / 1_048_576.0,
            hand.as_secs_f64(),
            steward.as_secs_f64(),
            steward.as_secs_f64() / hand.as_secs_f64(),
            restore_hand.as_secs_f64(),
            restore_steward.as_secs_f64(),
            restore_steward.as_secs_f64() / restore_hand.as_secs_f64(),
        );
        rows.push((hand, steward, restore_hand, restore_steward));
    }
    let col = |f: fn(&(Duration, Duration, Duration, Duration)) -> Duration| {
        median(rows.iter().map(|r| f(r).as_secs_f64()).collect())
    };
    let (hand, steward, rhand, rsteward) = (col(|r| r.0), col(|r| r.1), col(|r| r.2), col(|r| r.3));
    println!(
        "median of {runs} ({mib} MiB): snapshot by hand {hand:.2} s | Steward {steward:.2} s (×{:.2}) | restore by hand {rhand:.2} s | Steward {rsteward:.2} s (×{:.2})",
        steward / hand,
        rsteward / rhand
    );
    plane.shutdown().await;
}
