//! FoundationDB end to end: the operator against FoundationDB stand-in Pods (the node agent runs
//! the stand-in for FoundationDB's images; the Pods' monitors and servers form one cluster per
//! connection string), through the operator's production admin seam — `fdbcli` and the
//! monitor's `report` over `pods/exec`. The stand-in is not FoundationDB:
//! docs/foundationdb-standin.md says what it models.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::e2e::Plane;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::ListParams;
use steward_api::foundationdb::FoundationDBCluster;
use steward_operator::api::clusters::RESTARTED_AT;
use steward_operator::resources::exec;

const BOOT: Duration = Duration::from_secs(180);

/// The engine's recovery-time rules shortened, so that a test does not wait FoundationDB's
/// 120 s and 600 s between recoveries and exclusions or inclusions.
fn flags() -> Vec<String> {
    vec![
        "--engine-setting".into(),
        "foundationdb.minimumRecoveryTimeForExclusion=2".into(),
        "--engine-setting".into(),
        "foundationdb.minimumRecoveryTimeForInclusion=3".into(),
    ]
}

fn manifest(name: &str, redundancy: &str, storage: u32, log: u32) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: FoundationDBCluster\nmetadata: {{name: {name}}}\nspec:\n  version: \"7.1.57\"\n  databaseConfiguration: {{redundancyMode: {redundancy}}}\n  processCounts: {{storage: {storage}, log: {log}, stateless: 1}}\n  minimumUptimeSecondsForBounce: 5\n  storage: {{size: 1Gi}}\n"
    )
}

async fn reconciled(plane: &Plane, name: &str, what: &str) -> FoundationDBCluster {
    plane
        .wait_for::<FoundationDBCluster, _>(what, name, BOOT, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.configured
                    && s.health.available
                    && s.common.generations.reconciled == c.metadata.generation
                    && s.common.generations.has_pending_removal.is_none()
            })
        })
        .await
}

/// Runs fdbcli in `pod`; its output, or why it failed.
async fn fdbcli(plane: &Plane, pod: &str, commands: &str) -> Result<String, String> {
    let out = exec::run(
        &plane.client,
        &plane.namespace,
        pod,
        "foundationdb",
        vec![
            "fdbcli".into(),
            "-C".into(),
            "/var/fdb/data/fdb.cluster".into(),
            "--timeout".into(),
            "5".into(),
            "--exec".into(),
            commands.into(),
        ],
        Duration::from_secs(15),
    )
    .await
    .map_err(|e| e.0)?;
    if out.success {
        Ok(out.stdout)
    } else {
        Err(format!("{}{}", out.stdout, out.stderr))
    }
}

fn storage_groups(c: &FoundationDBCluster) -> Vec<String> {
    c.status
        .as_ref()
        .unwrap()
        .process_groups
        .iter()
        .filter(|g| g.process_group_id.contains("-storage-"))
        .map(|g| g.process_group_id.clone())
        .collect()
}

async fn event_notes(plane: &Plane, reason: &str) -> Vec<String> {
    let mut items = plane
        .api::<Event>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    items.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_is_created_grown_and_shrunk_with_exclusion_first_and_no_acknowledged_key_lost() {
    let plane = Plane::start_with(flags(), 3).await;
    assert_eq!(plane.nodes().len(), 3, "three fault domains");
    plane.apply(&manifest("grow", "double", 3, 2)).await;
    let c = reconciled(
        &plane,
        "grow",
        "the cluster configured, available and reconciled",
    )
    .await;
    let status = c.status.clone().unwrap();
    // configure new once; three coordinators, in three zones.
    assert_eq!(
        event_notes(&plane, "DatabaseCreated").await,
        ["configure new double ssd-2"]
    );
    let coordinators: Vec<&str> = status
        .connection_string
        .as_deref()
        .unwrap()
        .split_once('@')
        .unwrap()
        .1
        .split(',')
        .collect();
    assert_eq!(coordinators.len(), 3, "{status:?}");
    let zones: BTreeSet<_> = status
        .process_groups
        .iter()
        .filter(|g| {
            coordinators
                .iter()
                .any(|c| g.addresses.iter().any(|a| c.starts_with(&format!("{a}:"))))
        })
        .filter_map(|g| g.fault_domain.clone())
        .collect();
    assert_eq!(zones.len(), 3, "coordinators in three zones: {status:?}");

    // A writer runs through a grow and a shrink.
    let stop = tokio_util::sync::CancellationToken::new();
    let (acked, task) = writer(&plane, "grow-stateless-1", "w", stop.clone());
    plane
        .patch_spec::<FoundationDBCluster>(
            "grow",
            serde_json::json!({"processCounts": {"storage": 4}}),
        )
        .await;
    let c = reconciled(&plane, "grow", "four storage process groups").await;
    assert_eq!(storage_groups(&c).len(), 4);
    plane
        .patch_spec::<FoundationDBCluster>(
            "grow",
            serde_json::json!({"processCounts": {"storage": 3}}),
        )
        .await;
    let c = reconciled(&plane, "grow", "back to three storage process groups").await;
    let left = storage_groups(&c);
    assert_eq!(left.len(), 3, "{left:?}");
    stop.cancel();
    task.await.unwrap();
    let removed = [
        "grow-storage-1",
        "grow-storage-2",
        "grow-storage-3",
        "grow-storage-4",
    ]
    .into_iter()
    .find(|g| !left.contains(&g.to_string()))
    .unwrap();
    // Excluded before its Pod was deleted; its Pod and claim are gone; it was included again.
    let excluded = event_notes(&plane, "ProcessesExcluded").await;
    assert!(excluded.iter().any(|n| n.contains(removed)), "{excluded:?}");
    let pods: Vec<String> = plane
        .api::<Pod>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert!(!pods.contains(&removed.to_owned()), "{pods:?}");
    let claims: Vec<String> = plane
        .api::<PersistentVolumeClaim>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert!(!claims.contains(&format!("{removed}-data")), "{claims:?}");
    let removed_events = event_notes(&plane, "ProcessGroupsRemoved").await;
    assert!(
        removed_events.iter().any(|n| n.contains(removed)),
        "{removed_events:?}"
    );
    // No acknowledged key lost.
    assert_no_acknowledged_key_lost(&plane, "grow-stateless-1", "w", "x", &acked).await;
    plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invalid_spec_is_refused_with_a_condition_and_nothing_is_created() {
    let plane = Plane::start_with(flags(), 1).await;
    // One log process cannot keep double redundancy's two copies of the log.
    plane.apply(&manifest("bad", "double", 2, 1)).await;
    let c = plane
        .wait_for::<FoundationDBCluster, _>("InvalidSpec", "bad", Duration::from_secs(60), |c| {
            c.status.as_ref().is_some_and(|s| {
                s.common
                    .conditions
                    .iter()
                    .any(|x| x.type_ == "Degraded" && x.reason == "InvalidSpec")
            })
        })
        .await;
    let message = &c
        .status
        .unwrap()
        .common
        .conditions
        .iter()
        .find(|x| x.reason == "InvalidSpec")
        .unwrap()
        .message
        .clone();
    assert!(message.contains("spec.processCounts.log"), "{message}");
    let pods = plane
        .api::<Pod>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(pods.is_empty(), "no Pod for an invalid spec");
    // The schema refuses what it can: double redundancy with one storage process.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("one.yaml");
    std::fs::write(&file, manifest("one", "double", 1, 2)).unwrap();
    let refused = plane.kubectl_refused(&[
        "apply",
        "-n",
        &plane.namespace,
        "-f",
        file.to_str().unwrap(),
    ]);
    assert!(
        refused.contains("redundancyMode double needs processCounts.storage of at least 2"),
        "{refused}"
    );
    plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_buggified_group_runs_no_process_until_let_go() {
    let plane = Plane::start_with(flags(), 1).await;
    let base = manifest("bg", "single", 2, 1);
    plane.apply(&base).await;
    reconciled(&plane, "bg", "the cluster configured and reconciled").await;
    let uids = |pods: &[Pod]| -> Vec<(String, String)> {
        pods.iter()
            .map(|p| (p.name_any(), p.metadata.uid.clone().unwrap()))
            .collect()
    };
    let before = uids(
        &plane
            .api::<Pod>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items,
    );
    // Crash-loop bg-stateless-1: its Pod is recreated to run no process (alone). (Not a
    // storage group: in `single` mode the stand-in latches a storage process's absence as lost
    // data, docs/foundationdb-standin.md.)
    plane
        .apply(&format!(
            "{base}  buggify: {{crashLoop: [bg-stateless-1]}}\n"
        ))
        .await;
    plane
        .wait_for::<FoundationDBCluster, _>("bg-stateless-1 missing its process", "bg", BOOT, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.process_groups.iter().any(|g| {
                    g.process_group_id == "bg-stateless-1"
                        && g.conditions.iter().any(|x| x.type_ == "MissingProcesses")
                })
            })
        })
        .await;
    let during = plane
        .api::<Pod>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let crash = during
        .iter()
        .find(|p| p.name_any() == "bg-stateless-1")
        .unwrap();
    assert_eq!(
        crash.spec.as_ref().unwrap().containers[0].command,
        Some(vec!["crash-loop".to_owned()])
    );
    for (name, uid) in &before {
        let now = uids(&during)
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, u)| u);
        assert_eq!(
            now.as_deref() != Some(uid.as_str()),
            name == "bg-stateless-1",
            "{name}: only the buggified Pod is recreated"
        );
    }
    assert!(
        !event_notes(&plane, "PodsDeletedForBuggification")
            .await
            .is_empty()
    );
    // Let go: the group runs its process again.
    plane.apply(&base).await;
    reconciled(&plane, "bg", "bg-stateless-1's process back").await;
    // (A claim-size replacement is tested against the model, in the step tests: in `single`
    // mode the stand-in intermittently latched `missing_data` during the replacements here —
    // a false data loss whose cause is not found yet, docs/foundationdb-standin.md.)
    let out = fdbcli(
        &plane,
        "bg-stateless-1",
        "writemode on; set after-buggify yes; get after-buggify",
    )
    .await
    .unwrap();
    assert!(out.contains("`after-buggify' is `yes'"), "{out}");
    plane.shutdown().await;
}

/// The writer committed more than ten keys, and every one it saw acknowledged is in the range
/// `begin..end`, read through fdbcli in `pod`.
async fn assert_no_acknowledged_key_lost(
    plane: &Plane,
    pod: &str,
    begin: &str,
    end: &str,
    acked: &Commits,
) {
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 10,
        "the writer committed {} keys",
        acked.len()
    );
    let range = fdbcli(plane, pod, &format!("getrange {begin} {end} 100000"))
        .await
        .unwrap();
    let missing: Vec<&String> = acked
        .iter()
        .map(|(k, _)| k)
        .filter(|k| !range.contains(&format!("`{k}' is")))
        .collect();
    assert!(missing.is_empty(), "acknowledged keys lost: {missing:?}");
}

/// Acknowledged keys with their commit versions.
type Commits = Arc<Mutex<Vec<(String, u64)>>>;

/// A writer: sets `<prefix><n>` keys one after another through fdbcli in `pod`, recording
/// every key whose commit was acknowledged, with its version, until `stop`.
fn writer(
    plane: &Plane,
    pod: &str,
    prefix: &'static str,
    stop: tokio_util::sync::CancellationToken,
) -> (Commits, tokio::task::JoinHandle<()>) {
    let acked = Arc::new(Mutex::new(Vec::new()));
    let (client, ns, pod) = (
        plane.client.clone(),
        plane.namespace.clone(),
        pod.to_owned(),
    );
    let record = acked.clone();
    let task = tokio::spawn(async move {
        let mut n = 0u32;
        while !stop.is_cancelled() {
            let key = format!("{prefix}{n:05}");
            let out = exec::run(
                &client,
                &ns,
                &pod,
                "foundationdb",
                vec![
                    "fdbcli".into(),
                    "-C".into(),
                    "/var/fdb/data/fdb.cluster".into(),
                    "--timeout".into(),
                    "5".into(),
                    "--exec".into(),
                    format!("writemode on; set {key} v{n}"),
                ],
                Duration::from_secs(15),
            )
            .await;
            if let Ok(o) = out
                && o.success
                && let Some(v) = o
                    .stdout
                    .split("Committed (")
                    .nth(1)
                    .and_then(|r| r.split(')').next())
                    .and_then(|v| v.trim().parse::<u64>().ok())
            {
                record.lock().unwrap().push((key, v));
            }
            n += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (acked, task)
}

async fn backup_where(
    plane: &Plane,
    what: &str,
    ready: impl Fn(&steward_api::foundationdb::BackupDetails) -> bool,
) -> steward_api::foundationdb::FoundationDBBackup {
    plane
        .wait_for::<steward_api::foundationdb::FoundationDBBackup, _>(
            what,
            "bk-backup",
            BOOT,
            |b| {
                b.status
                    .as_ref()
                    .and_then(|s| s.backup_details.as_ref())
                    .is_some_and(&ready)
            },
        )
        .await
}

async fn restore_done(
    plane: &Plane,
    name: &str,
) -> steward_api::foundationdb::FoundationDBRestoreStatus {
    use steward_api::foundationdb::{FoundationDBRestore, RestoreState};
    plane
        .wait_for::<FoundationDBRestore, _>("the restore finished", name, BOOT, |r| {
            r.status
                .as_ref()
                .is_some_and(|s| matches!(s.state, RestoreState::Completed | RestoreState::Failed))
        })
        .await
        .status
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backup_is_started_paused_resumed_modified_stopped_and_restored_without_losing_an_acknowledged_key()
 {
    use steward_api::foundationdb::{FoundationDBBackup, RestoreState};
    let plane = Plane::start_with(flags(), 1).await;
    plane.apply(&manifest("bk", "single", 2, 1)).await;
    reconciled(
        &plane,
        "bk",
        "the cluster configured, available and reconciled",
    )
    .await;
    let stop = tokio_util::sync::CancellationToken::new();
    let (acked, task) = writer(&plane, "bk-stateless-1", "b", stop.clone());
    plane
        .apply(
            "apiVersion: steward.dev/v1alpha1\nkind: FoundationDBBackup\nmetadata: {name: bk-backup}\nspec: {clusterName: bk, snapshotPeriodSeconds: 60, storage: {size: 1Gi}}\n",
        )
        .await;
    backup_where(&plane, "the backup running and restorable", |d| {
        d.running && d.restorable
    })
    .await;
    // Paused, resumed, its snapshot period modified.
    plane
        .patch_spec::<FoundationDBBackup>("bk-backup", serde_json::json!({"backupState": "Paused"}))
        .await;
    backup_where(&plane, "the agents paused", |d| d.paused).await;
    plane
        .patch_spec::<FoundationDBBackup>(
            "bk-backup",
            serde_json::json!({"backupState": "Running"}),
        )
        .await;
    backup_where(&plane, "the agents resumed", |d| !d.paused).await;
    plane
        .patch_spec::<FoundationDBBackup>(
            "bk-backup",
            serde_json::json!({"snapshotPeriodSeconds": 120}),
        )
        .await;
    backup_where(&plane, "the snapshot period modified", |d| {
        d.snapshot_time == 120
    })
    .await;
    // Stopped while the writer runs: the backup ends restorable.
    tokio::time::sleep(Duration::from_secs(2)).await;
    plane
        .patch_spec::<FoundationDBBackup>(
            "bk-backup",
            serde_json::json!({"backupState": "Stopped"}),
        )
        .await;
    let b = backup_where(&plane, "the backup stopped", |d| !d.running && d.restorable).await;
    stop.cancel();
    task.await.unwrap();
    let details = b.status.unwrap().backup_details.unwrap();
    let restorable = details.latest_restorable_version.unwrap();
    let acked = acked.lock().unwrap().clone();
    let covered: Vec<&(String, u64)> = acked.iter().filter(|(_, v)| *v <= restorable).collect();
    assert!(
        covered.len() > 5,
        "{} of {} commits up to version {restorable}",
        covered.len(),
        acked.len()
    );
    for (reason, _) in [
        ("BackupStarted", ()),
        ("BackupPaused", ()),
        ("BackupResumed", ()),
        ("BackupModified", ()),
        ("BackupStopped", ()),
    ] {
        assert!(
            !event_notes(&plane, reason).await.is_empty(),
            "no {reason} Event"
        );
    }
    // A restore into a database that still holds keys is refused, by FoundationDB's rule.
    let restore = |name: &str| {
        format!(
            "apiVersion: steward.dev/v1alpha1\nkind: FoundationDBRestore\nmetadata: {{name: {name}}}\nspec: {{destinationClusterName: bk, backupName: bk-backup}}\n"
        )
    };
    plane.apply(&restore("refused")).await;
    let s = restore_done(&plane, "refused").await;
    assert_eq!(s.state, RestoreState::Failed, "{s:?}");
    assert!(s.message.contains("non-empty"), "{s:?}");
    // Emptied, the database gets every acknowledged key of the backup back.
    fdbcli(&plane, "bk-stateless-1", "writemode on; clearrange a \\xff")
        .await
        .unwrap();
    plane.apply(&restore("again")).await;
    let s = restore_done(&plane, "again").await;
    assert_eq!(s.state, RestoreState::Completed, "{s:?}");
    // Every acknowledged key the backup covers is in the cluster of `pod`.
    let all_covered_in = |pod: &'static str| {
        let plane = &plane;
        let covered = &covered;
        async move {
            let range = fdbcli(plane, pod, "getrange a \\xff 100000").await.unwrap();
            let missing: Vec<&&(String, u64)> = covered
                .iter()
                .filter(|(k, _)| !range.contains(&format!("`{k}' is")))
                .collect();
            assert!(
                missing.is_empty(),
                "acknowledged keys of the backup missing in {pod}'s cluster: {missing:?}"
            );
        }
    };
    all_covered_in("bk-stateless-1").await;
    // Into another, new cluster: the same keys, through the agents' Pods.
    plane.apply(&manifest("bk2", "single", 1, 1)).await;
    reconciled(&plane, "bk2", "the second cluster configured").await;
    plane
        .apply(
            "apiVersion: steward.dev/v1alpha1\nkind: FoundationDBRestore\nmetadata: {name: elsewhere}\nspec: {destinationClusterName: bk2, backupName: bk-backup}\n",
        )
        .await;
    let s = restore_done(&plane, "elsewhere").await;
    assert_eq!(s.state, RestoreState::Completed, "{s:?}");
    all_covered_in("bk2-stateless-1").await;
    plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lock_and_deny_list_hold_a_change_back_knobs_bounce_and_pod_changes_go_zone_by_zone() {
    use steward_operator::foundationdb::admin::cli::{LOCK_KEY, LockValue, escape};
    let plane = Plane::start_with(flags(), 3).await;
    assert_eq!(plane.nodes().len(), 3, "three fault domains");
    plane.apply(&manifest("lk", "double", 3, 2)).await;
    reconciled(
        &plane,
        "lk",
        "the cluster configured, available and reconciled",
    )
    .await;
    // Another operator instance (lock ID dc2) holds the global lock for ten minutes.
    let now = jiff::Timestamp::now().as_second();
    let held = LockValue {
        id: "dc2".into(),
        start: now,
        end: now + 600,
    };
    fdbcli(
        &plane,
        "lk-stateless-1",
        &format!(
            "writemode on; set {} {}",
            escape(LOCK_KEY),
            escape(&held.pack())
        ),
    )
    .await
    .unwrap();
    plane
        .patch_spec::<FoundationDBCluster>(
            "lk",
            serde_json::json!({"databaseConfiguration": {"commitProxies": 2}}),
        )
        .await;
    plane
        .wait_for::<FoundationDBCluster, _>("waiting for dc2's lock", "lk", BOOT, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.lock_holder.as_deref() == Some("dc2")
                    && s.common
                        .conditions
                        .iter()
                        .any(|x| x.type_ == "LockAvailable" && x.reason == "HeldByOther")
            })
        })
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let c = plane.api::<FoundationDBCluster>().get("lk").await.unwrap();
    assert_ne!(
        c.status
            .unwrap()
            .database_configuration
            .unwrap()
            .commit_proxies,
        Some(2),
        "the configuration changed under another instance's lock"
    );
    // dc2 on the deny list: its lock no longer counts, and the change is made.
    plane
        .patch_spec::<FoundationDBCluster>(
            "lk",
            serde_json::json!({"lockOptions": {"denyList": [{"id": "dc2"}]}}),
        )
        .await;
    let c = reconciled(
        &plane,
        "lk",
        "the configuration changed under this instance's lock",
    )
    .await;
    let s = c.status.unwrap();
    assert_eq!(s.database_configuration.unwrap().commit_proxies, Some(2));
    assert_eq!(s.lock_holder.as_deref(), Some("lk"));
    // A knob: every process bounced once, after the uptime rule (5 s here).
    plane
        .patch_spec::<FoundationDBCluster>(
            "lk",
            serde_json::json!({"customParameters": ["knob_max_trace_lines=1000"]}),
        )
        .await;
    reconciled(&plane, "lk", "the knob rolled out").await;
    let bounced = event_notes(&plane, "ProcessesBounced").await;
    assert!(!bounced.is_empty(), "no bounce");
    let line = fdbcli(&plane, "lk-stateless-1", "status json")
        .await
        .unwrap();
    let status: serde_json::Value = serde_json::from_str(&line[line.find('{').unwrap()..]).unwrap();
    let processes = status["cluster"]["processes"].as_object().unwrap();
    assert_eq!(processes.len(), 6);
    assert!(
        processes.values().all(|p| p["command_line"]
            .as_str()
            .unwrap()
            .contains("--knob_max_trace_lines=1000")),
        "{processes:?}"
    );
    // A Pod template change (the REST API's restart trigger): Pods recreated one zone (Node) at
    // a time — watched from outside: never are Pods of two Nodes missing or not running at
    // once.
    let before: std::collections::BTreeMap<String, (String, String)> = plane
        .api::<Pod>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| {
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            (p.name_any(), (node, p.uid().unwrap_or_default()))
        })
        .collect();
    let watch_stop = tokio_util::sync::CancellationToken::new();
    let pods_api = plane.api::<Pod>();
    let (known, stop_w) = (before.clone(), watch_stop.clone());
    let watcher = tokio::spawn(async move {
        let mut worst = 0usize;
        while !stop_w.is_cancelled() {
            if let Ok(list) = pods_api.list(&ListParams::default()).await {
                let up: BTreeSet<String> = list
                    .items
                    .iter()
                    .filter(|p| {
                        p.metadata.deletion_timestamp.is_none()
                            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    })
                    .map(|p| p.name_any())
                    .collect();
                let down: BTreeSet<&String> = known
                    .iter()
                    .filter(|(name, _)| !up.contains(*name))
                    .map(|(_, (node, _))| node)
                    .collect();
                worst = worst.max(down.len());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        worst
    });
    plane
        .patch_spec::<FoundationDBCluster>(
            "lk",
            serde_json::json!({"podTemplate": {"annotations": {RESTARTED_AT: "r1"}}}),
        )
        .await;
    plane
        .wait_for::<FoundationDBCluster, _>("every Pod recreated", "lk", BOOT, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.common.generations.reconciled == c.metadata.generation
                    && s.common.generations.needs_pod_deletion.is_none()
                    && s.health.available
            })
        })
        .await;
    watch_stop.cancel();
    let worst = watcher.await.unwrap();
    assert!(worst <= 1, "Pods of {worst} Nodes were down at once");
    let after = plane
        .api::<Pod>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    for p in &after {
        let (_, old_uid) = &before[&p.name_any()];
        assert_ne!(
            &p.uid().unwrap_or_default(),
            old_uid,
            "{} was not recreated",
            p.name_any()
        );
    }
    assert!(!event_notes(&plane, "PodsUpdating").await.is_empty());
    let pods = plane
        .api::<Pod>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(
        pods.iter()
            .all(|p| p.annotations().get(RESTARTED_AT).map(String::as_str) == Some("r1"))
    );
    // The headless Service on: made, named like the cluster.
    plane
        .patch_spec::<FoundationDBCluster>(
            "lk",
            serde_json::json!({"routing": {"headlessService": true}}),
        )
        .await;
    plane
        .wait_for::<Service, _>("the headless Service", "lk", BOOT, |s| {
            s.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
        })
        .await;
    // A template label: put on every Pod in place, none recreated.
    let uids = |pods: &[Pod]| -> std::collections::BTreeMap<String, String> {
        pods.iter()
            .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
            .collect()
    };
    let before = uids(&pods);
    plane
        .patch_spec::<FoundationDBCluster>(
            "lk",
            serde_json::json!({"podTemplate": {"labels": {"team": "storage"}}}),
        )
        .await;
    let pods_api = plane.api::<Pod>();
    let labelled = plane
        .eventually("the template label on every Pod", BOOT, || {
            let pods_api = pods_api.clone();
            async move {
                let pods = pods_api.list(&ListParams::default()).await.ok()?.items;
                pods.iter()
                    .all(|p| p.labels().get("team").map(String::as_str) == Some("storage"))
                    .then_some(pods)
            }
        })
        .await;
    assert_eq!(uids(&labelled), before, "a label change recreated Pods");
    // Off: the Service is deleted.
    plane
        .patch_spec::<FoundationDBCluster>(
            "lk",
            serde_json::json!({"routing": {"headlessService": false}}),
        )
        .await;
    let services = plane.api::<Service>();
    plane
        .eventually("the headless Service deleted", BOOT, || {
            let services = services.clone();
            async move { matches!(services.get_opt("lk").await, Ok(None)).then_some(()) }
        })
        .await;
    plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_process_groups_of_a_lost_node_are_replaced_after_the_detection_time() {
    common::e2e::embedded_only(common::e2e::LOST_NODE_REAL);
    let plane = Plane::start_with(flags(), 4).await;
    assert_eq!(plane.nodes().len(), 4, "three fault domains and a spare");
    let spec = manifest("rp", "double", 3, 2).replace(
        "  minimumUptimeSecondsForBounce: 5\n",
        "  minimumUptimeSecondsForBounce: 5\n  automationOptions:\n    replacements: {enabled: true, failureDetectionTimeSeconds: 5, maxConcurrentReplacements: 3}\n",
    );
    plane.apply(&spec).await;
    reconciled(
        &plane,
        "rp",
        "the cluster configured, available and reconciled",
    )
    .await;
    // The Node of rp-storage-1 loses power.
    let pods = plane
        .api::<Pod>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let node = pods
        .iter()
        .find(|p| p.name_any() == "rp-storage-1")
        .and_then(|p| p.spec.as_ref()?.node_name.clone())
        .unwrap();
    let lost: BTreeSet<String> = pods
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
        .map(|p| p.name_any())
        .collect();
    plane.power_off_node(&node);
    // Each lost process group is marked for removal and replaced; the database stays available
    // and its coordinators leave the lost Node.
    let c = plane
        .wait_for::<FoundationDBCluster, _>(
            "the lost Node's process groups replaced",
            "rp",
            BOOT,
            |c| {
                c.status.as_ref().is_some_and(|s| {
                    let replaced = lost.iter().all(|id| {
                        s.process_groups
                            .iter()
                            .any(|g| &g.process_group_id == id && g.removal_timestamp.is_some())
                    });
                    let active = s
                        .process_groups
                        .iter()
                        .filter(|g| g.removal_timestamp.is_none())
                        .count();
                    replaced
                        && active == 6
                        && s.health.available
                        && s.common.generations.reconciled == c.metadata.generation
                })
            },
        )
        .await;
    let s = c.status.unwrap();
    let lost_ips: Vec<String> = s
        .process_groups
        .iter()
        .filter(|g| lost.contains(&g.process_group_id))
        .flat_map(|g| g.addresses.clone())
        .collect();
    let coordinators = s.connection_string.clone().unwrap();
    assert!(
        !lost_ips
            .iter()
            .any(|ip| coordinators.contains(&format!("{ip}:"))),
        "a coordinator is still on the lost Node: {coordinators} {lost_ips:?}"
    );
    let replacing = event_notes(&plane, "ReplacingFailedProcessGroups").await;
    assert!(!replacing.is_empty(), "no replacement Event");
    // The database takes writes.
    let pod = s
        .process_groups
        .iter()
        .find(|g| g.removal_timestamp.is_none() && g.process_group_id.contains("stateless"))
        .map(|g| g.process_group_id.clone())
        .unwrap();
    let out = fdbcli(
        &plane,
        &pod,
        "writemode on; set after-loss yes; get after-loss",
    )
    .await
    .unwrap();
    assert!(out.contains("`after-loss' is `yes'"), "{out}");
    plane.shutdown().await;
}

/// The images of `pod`'s containers, in order (main, sidecar).
fn images(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .map(|c| c.image.clone().unwrap_or_default())
        .collect()
}

/// A protocol-changing upgrade, 7.1.57 → 7.3.43, with a writer running: held while an
/// application client has no 7.3 library (released here by `ignoreUpgradabilityChecks`), then
/// the sidecars in place, one bounce of every process, the running version 7.3.43, and the
/// main containers recreated zone by zone; no acknowledged key lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_protocol_changing_upgrade_bounces_every_process_at_once_and_loses_no_acknowledged_key() {
    let plane = Plane::start_with(flags(), 3).await;
    assert_eq!(plane.nodes().len(), 3, "three fault domains");
    plane.apply(&manifest("up", "double", 3, 2)).await;
    reconciled(
        &plane,
        "up",
        "the cluster configured, available and reconciled",
    )
    .await;
    // An application's client, with the 7.1 client library only.
    plane
        .apply(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: app}\nspec:\n  containers:\n  - name: app\n    image: foundationdb/foundationdb:7.1.57\n    command: [sh, -c, 'while true; do fdbcli -C /etc/fdb/fdb.cluster --timeout 3 --exec status >/dev/null 2>&1; sleep 1; done']\n    volumeMounts: [{name: cf, mountPath: /etc/fdb}]\n  volumes:\n  - name: cf\n    configMap: {name: up-config, items: [{key: fdb.cluster, path: fdb.cluster}]}\n",
        )
        .await;
    let app_ip = plane
        .wait_for::<Pod, _>("the client Pod running", "app", BOOT, |p| {
            p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some()
        })
        .await
        .status
        .unwrap()
        .pod_ip
        .unwrap();
    // The cluster knows the client before the upgrade is asked for.
    plane
        .eventually("the client in the database's status", BOOT, || async {
            let status = fdbcli(&plane, "up-stateless-1", "status json").await.ok()?;
            let json: serde_json::Value =
                serde_json::from_str(&status[status.find('{')?..]).ok()?;
            json["cluster"]["clients"]["supported_versions"]
                .as_array()?
                .iter()
                .flat_map(|v| v["connected_clients"].as_array().into_iter().flatten())
                .any(|c| {
                    c["address"]
                        .as_str()
                        .is_some_and(|a| a.starts_with(&format!("{app_ip}:")))
                })
                .then_some(())
        })
        .await;
    let stop = tokio_util::sync::CancellationToken::new();
    let (acked, task) = writer(&plane, "up-stateless-1", "u", stop.clone());
    plane
        .patch_spec::<FoundationDBCluster>("up", serde_json::json!({"version": "7.3.43"}))
        .await;
    let held = plane
        .wait_for::<FoundationDBCluster, _>("the upgrade held by the old client", "up", BOOT, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.common
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Progressing" && c.message.contains("IncompatibleClients"))
            })
        })
        .await;
    let message = held
        .status
        .unwrap()
        .common
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap()
        .message;
    assert!(message.contains(&app_ip), "names the client: {message}");
    let pods = plane
        .api::<Pod>()
        .list(&ListParams::default().labels("app.kubernetes.io/instance=up"))
        .await
        .unwrap()
        .items;
    assert!(
        pods.iter().all(|p| images(p)[1].ends_with(":7.1.57")),
        "nothing changed while held: {:?}",
        pods.iter().map(images).collect::<Vec<_>>()
    );
    plane
        .patch_spec::<FoundationDBCluster>(
            "up",
            serde_json::json!({"ignoreUpgradabilityChecks": true}),
        )
        .await;
    let c = plane
        .wait_for::<FoundationDBCluster, _>(
            "7.3.43 running and every Pod on its image",
            "up",
            BOOT,
            |c| {
                c.status.as_ref().is_some_and(|s| {
                    s.running_version.as_deref() == Some("7.3.43")
                        && s.common.generations.reconciled == c.metadata.generation
                        && s.common.generations.needs_pod_deletion.is_none()
                        && s.health.available
                })
            },
        )
        .await;
    stop.cancel();
    task.await.unwrap();
    let pods = plane
        .api::<Pod>()
        .list(&ListParams::default().labels("app.kubernetes.io/instance=up"))
        .await
        .unwrap()
        .items;
    for p in &pods {
        assert_eq!(
            images(p),
            [
                "foundationdb/fdb-kubernetes-monitor:7.3.43",
                "foundationdb/fdb-kubernetes-monitor:7.3.43"
            ],
            "{}",
            p.name_any()
        );
    }
    let bounces = event_notes(&plane, "UpgradeBounced").await;
    assert_eq!(bounces.len(), 1, "{bounces:?}");
    assert!(
        !event_notes(&plane, "SidecarsUpdated").await.is_empty(),
        "{c:?}"
    );
    let status = fdbcli(&plane, "up-stateless-1", "status json")
        .await
        .unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&status[status.find('{').unwrap()..]).unwrap();
    let versions: BTreeSet<&str> = json["cluster"]["processes"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|p| p["version"].as_str())
        .collect();
    assert_eq!(versions, BTreeSet::from(["7.3.43"]), "{json}");
    assert_no_acknowledged_key_lost(&plane, "up-stateless-1", "u", "v", &acked).await;
    plane.shutdown().await;
}
