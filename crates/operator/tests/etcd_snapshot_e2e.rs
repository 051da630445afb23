//! etcd snapshots end to end on real etcd: an `EtcdBackup` taken from a running cluster with a
//! Job (`etcdctl snapshot save`, `snapshot status`), a new cluster bootstrapped from it
//! (`spec.dataSource`), retention, and the refusals.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::e2e::{Plane, etcd_client, true_condition, with_webhooks};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Event;
use kube::api::ListParams;
use steward_api::common::{OperationKind, OperationPhase};
use steward_api::etcd::{EtcdBackup, EtcdCluster, EtcdPeer, SnapshotPhase};

const VERSION: &str = "3.4.23";
const BOOT: Duration = Duration::from_secs(90);

fn settled(want: i32) -> impl Fn(&EtcdCluster) -> bool {
    move |c: &EtcdCluster| {
        let Some(s) = &c.status else { return false };
        true_condition(&s.common, "Available").is_some()
            && s.ready_members == want
            && s.members.len() == usize::try_from(want).unwrap()
            && s.members.iter().all(|m| m.healthy && !m.learner)
            && s.common.operation.is_none()
    }
}

fn cluster(name: &str, replicas: i32, source: Option<&str>) -> String {
    cluster_of(VERSION, name, replicas, source)
}

fn cluster_of(version: &str, name: &str, replicas: i32, source: Option<&str>) -> String {
    let source = source
        .map(|b| format!("  dataSource:\n    backup: {b}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: EtcdCluster\nmetadata:\n  name: {name}\nspec:\n  replicas: {replicas}\n  version: {version}\n{source}"
    )
}

fn backup(name: &str, cluster: &str, retain: u32) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: EtcdBackup\nmetadata:\n  name: {name}\nspec:\n  cluster: {cluster}\n  retain: {retain}\n"
    )
}

async fn completed(plane: &Plane, name: &str) -> EtcdBackup {
    plane
        .wait_for::<EtcdBackup, _>(
            &format!("snapshot {name} Completed"),
            name,
            Duration::from_secs(90),
            |b| {
                let phase = b.status.as_ref().and_then(|s| s.phase);
                assert_ne!(phase, Some(SnapshotPhase::Failed), "{:?}", b.status);
                phase == Some(SnapshotPhase::Completed)
            },
        )
        .await
}

async fn keys(client: &mut etcd_client::Client, prefix: &str) -> Vec<(String, String)> {
    let got = client
        .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .unwrap();
    got.kvs()
        .iter()
        .map(|kv| {
            (
                kv.key_str().unwrap().to_owned(),
                kv.value_str().unwrap().to_owned(),
            )
        })
        .collect()
}

async fn events_with(plane: &Plane, reason: &str) -> Vec<String> {
    plane
        .api::<Event>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_snapshot_seeds_a_new_cluster_with_exactly_the_keys_written_before_it() {
    let plane = Plane::start().await;
    // A backup of a cluster that does not exist waits and says so.
    plane.apply(&backup("orphan", "nope", 1)).await;
    plane
        .wait_for::<EtcdBackup, _>(
            "a backup of a missing cluster waiting",
            "orphan",
            Duration::from_secs(30),
            |b| {
                b.status.as_ref().is_some_and(|s| {
                    s.phase == Some(SnapshotPhase::Pending)
                        && s.message
                            .as_deref()
                            .is_some_and(|m| m.contains("EtcdCluster nope does not exist"))
                })
            },
        )
        .await;
    // A cluster seeded from a backup that does not exist (yet) creates nothing and says why.
    plane.apply(&cluster("copy", 3, Some("early"))).await;
    plane
        .wait_for::<EtcdCluster, _>(
            "a cluster waiting for its snapshot",
            "copy",
            Duration::from_secs(30),
            |c| {
                c.status.as_ref().is_some_and(|s| {
                    s.common.conditions.iter().any(|k| {
                        k.type_ == "Degraded"
                            && k.reason == "SnapshotNotReady"
                            && k.message.contains("EtcdBackup early does not exist")
                    })
                })
            },
        )
        .await;
    let peers = plane
        .api::<EtcdPeer>()
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(peers.items.is_empty(), "nothing is created for it");

    // The source: three members, 100 keys.
    plane.apply(&cluster("src", 3, None)).await;
    plane
        .wait_for::<EtcdCluster, _>("src with 3 members", "src", BOOT, settled(3))
        .await;
    let mut src = etcd_client(&plane, "src").await;
    for i in 0..100 {
        src.put(format!("before/{i:03}"), format!("v{i}"), None)
            .await
            .unwrap();
    }
    let before_rev = src
        .get("before/099", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();

    // A writer runs through the snapshot, recording every acknowledged put with its revision.
    let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let writer = {
        let mut c = src.clone();
        let writing = writing.clone();
        tokio::spawn(async move {
            let (mut acked, mut unknown): (Vec<(String, i64)>, Vec<String>) = Default::default();
            let mut i = 0u32;
            while writing.load(std::sync::atomic::Ordering::Relaxed) {
                let key = format!("during/{i:05}");
                match c.put(key.clone(), "w", None).await {
                    Ok(r) => acked.push((key, r.header().unwrap().revision())),
                    // Not acknowledged: it may or may not have been applied.
                    Err(_) => unknown.push(key),
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (acked, unknown)
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    plane.apply(&backup("early", "src", 1)).await;
    let early = completed(&plane, "early").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    writing.store(false, std::sync::atomic::Ordering::Relaxed);
    let (acked, unknown) = writer.await.unwrap();
    let s = early.status.clone().unwrap();
    assert!(s.revision.unwrap() >= before_rev, "{s:?}");
    assert!(s.total_keys.unwrap() >= 100, "{s:?}");
    assert!(s.size_bytes.unwrap() > 0, "{s:?}");
    assert!(s.member.as_deref().unwrap().starts_with("src-"), "{s:?}");
    let location = s.location.clone().unwrap();
    assert_eq!(
        (location.claim.as_str(), location.file.as_str()),
        ("src-snapshots", "early.db")
    );
    let last = s.common.last_operation.clone().unwrap();
    assert_eq!(
        (last.kind, last.phase),
        (OperationKind::Backup, OperationPhase::Succeeded)
    );
    assert!(s.start_time.is_some() && s.completion_time.is_some() && s.duration.is_some());

    // Written after the snapshot: not in the copy.
    for i in 0..10 {
        src.put(format!("after/{i}"), "late", None).await.unwrap();
    }

    // The copy, already waiting, now bootstraps from the snapshot: one member restores it,
    // two join it.
    let copy = plane
        .wait_for::<EtcdCluster, _>("copy with 3 members", "copy", BOOT, settled(3))
        .await;
    let last = copy.status.unwrap().common.last_operation.unwrap();
    assert_eq!(
        (last.kind, last.phase),
        (OperationKind::Scale, OperationPhase::Succeeded),
        "the restored member was scaled to 3: {last:?}"
    );
    let mut dst = etcd_client(&plane, "copy").await;
    // Exactly the writer's puts at or below the snapshot's revision, none above it.
    let at = s.revision.unwrap();
    let want: Vec<String> = acked
        .iter()
        .filter(|(_, rev)| *rev <= at)
        .map(|(k, _)| k.clone())
        .collect();
    let got: Vec<String> = keys(&mut dst, "during/")
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    for k in &want {
        assert!(
            got.contains(k),
            "{k} acknowledged at or below revision {at} is missing"
        );
    }
    for (k, rev) in acked.iter().filter(|(_, rev)| *rev > at) {
        assert!(
            !got.contains(k),
            "{k} acknowledged at revision {rev} > {at} is there"
        );
    }
    for k in got.iter().filter(|k| !want.contains(k)) {
        assert!(unknown.contains(k), "{k} was never written");
    }
    assert!(
        !want.is_empty() && want.len() < acked.len(),
        "puts on both sides of the snapshot: {} of {}",
        want.len(),
        acked.len()
    );
    let restored = keys(&mut dst, "before/").await;
    assert_eq!(restored.len(), 100, "every key written before the snapshot");
    assert_eq!(restored[42], ("before/042".to_owned(), "v42".to_owned()));
    assert!(
        keys(&mut dst, "after/").await.is_empty(),
        "nothing written after it"
    );
    // A new cluster, not a member of the old one.
    let src_id = src.status().await.unwrap().header().unwrap().cluster_id();
    let dst_id = dst.status().await.unwrap().header().unwrap().cluster_id();
    assert_ne!(src_id, dst_id);
    // It takes writes; the source did not change.
    dst.put("copy-only", "1", None).await.unwrap();
    assert!(keys(&mut src, "copy-only").await.is_empty());
    assert_eq!(keys(&mut src, "after/").await.len(), 10);
    let restored_from: Vec<String> = plane
        .api::<EtcdPeer>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.spec.cluster_name == "copy" && p.spec.restore.is_some())
        .map(|p| p.metadata.name.unwrap())
        .collect();
    assert_eq!(restored_from, ["copy-0"], "only the first member restores");

    // Retention: a second snapshot with retain 1 drops the first (object and file).
    plane.apply(&backup("second", "src", 1)).await;
    let second = completed(&plane, "second").await;
    assert!(second.status.unwrap().total_keys.unwrap() >= 110);
    plane
        .eventually(
            "the older snapshot deleted by retain",
            Duration::from_secs(30),
            || async {
                plane
                    .api::<EtcdBackup>()
                    .get_opt("early")
                    .await
                    .unwrap()
                    .is_none()
                    .then_some(())
            },
        )
        .await;
    let job = plane.api::<Job>().get("second-snapshot").await.unwrap();
    let init = job
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .init_containers
        .unwrap();
    assert_eq!(
        init[1].command.clone().unwrap(),
        ["rm", "-f", "/snapshots/early.db"],
        "the second snapshot's Job removed the first one's file"
    );
    let pruned = events_with(&plane, "SnapshotsPruned").await;
    assert!(pruned.iter().any(|m| m.contains("early")), "{pruned:?}");
    assert!(!events_with(&plane, "SnapshotCompleted").await.is_empty());
    plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_etcd_snapshot_schedule_keeps_its_newest_snapshots_and_reports_each() {
    let (hook_url, hooks) = common::hooks::receiver(axum::http::StatusCode::OK).await;
    let plane = with_webhooks(&hook_url).await;
    // A schedule on a cluster that does not exist says so.
    plane
        .apply(
            "apiVersion: steward.dev/v1alpha1\nkind: Schedule\nmetadata:\n  name: ghost\nspec:\n  cluster: nope\n  schedule: \"*/5 * * * * *\"\n  type: etcd-snapshot\n",
        )
        .await;
    plane
        .wait_for::<steward_api::schedule::Schedule, _>(
            "a schedule of a missing cluster not Ready",
            "ghost",
            Duration::from_secs(30),
            |s| {
                s.status.as_ref().is_some_and(|st| {
                    st.conditions.iter().any(|c| {
                        c.type_ == "Ready"
                            && c.status == "False"
                            && c.message.contains("EtcdCluster nope does not exist")
                    })
                })
            },
        )
        .await;
    plane.apply(&cluster("sched", 1, None)).await;
    plane
        .wait_for::<EtcdCluster, _>("sched with 1 member", "sched", BOOT, settled(1))
        .await;
    let mut c = etcd_client(&plane, "sched").await;
    c.put("k", "v", None).await.unwrap();
    plane
        .apply(
            "apiVersion: steward.dev/v1alpha1\nkind: Schedule\nmetadata:\n  name: snaps\nspec:\n  cluster: sched\n  schedule: \"*/5 * * * * *\"\n  type: etcd-snapshot\n  successfulRunsHistoryLimit: 2\n",
        )
        .await;
    // Runs come and go: collect every run seen until four have succeeded.
    let mut seen = std::collections::BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let runs = plane
            .api::<EtcdBackup>()
            .list(&ListParams::default().labels("steward.dev/schedule=snaps"))
            .await
            .unwrap()
            .items;
        for r in &runs {
            let s = r.status.clone().unwrap_or_default();
            assert_ne!(s.phase, Some(SnapshotPhase::Failed), "{s:?}");
            if s.phase == Some(SnapshotPhase::Completed) {
                assert_eq!(r.spec.retain, Some(2));
                seen.insert(r.metadata.name.clone().unwrap());
            }
        }
        let completed = runs
            .iter()
            .filter(|r| r.status.as_ref().and_then(|s| s.phase) == Some(SnapshotPhase::Completed))
            .count();
        assert!(
            completed <= 3,
            "history limit 2 (+1 completing): {completed}"
        );
        if seen.len() >= 4 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "four snapshots in 120 s: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    plane
        .patch_spec::<steward_api::schedule::Schedule>(
            "snaps",
            serde_json::json!({"suspend": true}),
        )
        .await;
    let schedule = plane
        .wait_for::<steward_api::schedule::Schedule, _>(
            "the schedule recording its runs",
            "snaps",
            Duration::from_secs(30),
            |s| {
                s.status.as_ref().is_some_and(|st| {
                    st.active.is_empty()
                        && st.last_successful_time.is_some()
                        && st.runs.iter().filter(|r| r.phase == "Succeeded").count() == 2
                })
            },
        )
        .await;
    let kept = plane
        .eventually("two snapshots kept", Duration::from_secs(30), || async {
            let runs = plane
                .api::<EtcdBackup>()
                .list(&ListParams::default().labels("steward.dev/schedule=snaps"))
                .await
                .ok()?
                .items;
            (runs.len() == 2).then_some(runs)
        })
        .await;
    // Each snapshot ended with the seed's backup webhook, naming the cluster (not the
    // EtcdBackup), its file as the label.
    let one = seen.iter().next().unwrap().clone();
    let body: serde_json::Value = plane
        .eventually("the backup webhook", Duration::from_secs(30), || {
            let hooks = hooks.clone();
            let one = one.clone();
            async move {
                hooks.all().into_iter().find_map(|(_, body)| {
                    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
                    (v["backup_data"]["backup"] == one.as_str()).then_some(v)
                })
            }
        })
        .await;
    assert_eq!(body["event"], "backup", "{body}");
    assert_eq!(body["cluster"], "sched", "{body}");
    assert_eq!(body["status"], "success", "{body}");
    assert_eq!(body["backup_data"]["type"], "snapshot", "{body}");
    assert_eq!(body["backup_data"]["label"], format!("{one}.db"), "{body}");
    let recorded: Vec<&str> = schedule
        .status
        .as_ref()
        .unwrap()
        .runs
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    for r in &kept {
        assert!(
            recorded.contains(&r.metadata.name.as_deref().unwrap()),
            "{recorded:?}"
        );
    }
    plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_snapshot_running_when_the_operator_stops_completes_once_after_it_restarts() {
    let mut plane = Plane::start().await;
    plane.apply(&cluster("busy", 1, None)).await;
    plane
        .wait_for::<EtcdCluster, _>("busy with 1 member", "busy", BOOT, settled(1))
        .await;
    // 96 MiB: the save takes long enough to stop the operator while it runs.
    let mut c = etcd_client(&plane, "busy").await;
    let value = vec![b'x'; 1024 * 1024];
    for i in 0..96 {
        c.put(format!("blob/{i:03}"), value.clone(), None)
            .await
            .unwrap();
    }
    plane.apply(&backup("mid", "busy", 1)).await;
    let running = plane
        .wait_for::<EtcdBackup, _>(
            "the snapshot running",
            "mid",
            Duration::from_secs(60),
            |b| b.status.as_ref().and_then(|s| s.phase) == Some(SnapshotPhase::Running),
        )
        .await;
    let started = running.status.unwrap().start_time.unwrap();
    // Down for 10 s: the Job ends while nobody watches it.
    plane.restart_operator_after(Duration::from_secs(10)).await;
    let done = completed(&plane, "mid").await;
    let s = done.status.unwrap();
    assert_eq!(s.start_time.as_deref(), Some(started.as_str()), "one start");
    assert!(s.total_keys.unwrap() >= 96, "{s:?}");
    let last = s.common.last_operation.unwrap();
    assert_eq!(
        (last.kind, last.phase),
        (OperationKind::Backup, OperationPhase::Succeeded)
    );
    let jobs = plane
        .api::<Job>()
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(jobs.items.len(), 1, "the Job was adopted, not made again");
    assert_eq!(events_with(&plane, "SnapshotStarted").await.len(), 1);
    plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_3_5_snapshot_is_checked_and_restored_with_etcdutl() {
    let plane = Plane::start().await;
    plane.apply(&cluster_of("3.5.34", "five", 1, None)).await;
    plane
        .wait_for::<EtcdCluster, _>("five with 1 member", "five", BOOT, settled(1))
        .await;
    let mut c = etcd_client(&plane, "five").await;
    for i in 0..20 {
        c.put(format!("k/{i:02}"), "v", None).await.unwrap();
    }
    plane.apply(&backup("five-snap", "five", 1)).await;
    let done = completed(&plane, "five-snap").await;
    assert!(done.status.unwrap().total_keys.unwrap() >= 20);
    let job = plane.api::<Job>().get("five-snap-snapshot").await.unwrap();
    let check = job.spec.unwrap().template.spec.unwrap().containers[0]
        .command
        .clone()
        .unwrap();
    assert_eq!(check[0], "etcdutl", "3.5 checks with etcdutl");
    plane
        .apply(&cluster_of("3.5.34", "five-copy", 1, Some("five-snap")))
        .await;
    plane
        .wait_for::<EtcdCluster, _>("five-copy with 1 member", "five-copy", BOOT, settled(1))
        .await;
    let mut copy = etcd_client(&plane, "five-copy").await;
    assert_eq!(keys(&mut copy, "k/").await.len(), 20);
    plane.shutdown().await;
}
