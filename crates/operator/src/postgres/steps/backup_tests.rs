//! Step tests of `RunBackups` and `RestoreCluster` on the `tests` harness (embedded API server, PostgreSQL model),
//! with the pgBackRest repository model: the test plays pgBackRest (the model takes the
//! backup) and the kubelet (the Job's Pod ends); the API server's Job controller marks the Job.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use steward_api::common::{OperationKind, OperationPhase};
use steward_api::pgbackrest::{
    BackupPhase, BackupType, PostgresBackup, PostgresBackupSpec, PostgresBackupStatus,
};
use steward_api::postgres::{BackupsSpec, PostgresCluster, PostgresClusterSpec};

use super::provision_repository::job_outcome;
use super::tests::Harness;
use crate::clock::Clock;
use crate::postgres::repository::RepoHost;

fn host() -> RepoHost {
    RepoHost {
        namespace: "db".into(),
        pod: "demo-repo".into(),
    }
}

fn with_backups() -> PostgresClusterSpec {
    let mut spec = PostgresClusterSpec::new(2, "15");
    spec.backups = Some(BackupsSpec {
        pgbackrest: Some(serde_json::from_value(json!({})).unwrap()),
    });
    spec
}

/// The stanza exists, as ProvisionRepository leaves it (written by the operator's status
/// manager, as its passes write it).
async fn stanza(h: &Harness) {
    h.repo.create_stanza(&host());
    let body = json!({"apiVersion": "steward.dev/v1alpha1", "kind": "PostgresCluster",
        "status": {"backups": {"repository": "demo-repo", "stanza": "db"}}});
    h.api::<PostgresCluster>()
        .patch_status(
            "demo",
            &PatchParams::apply(crate::runtime::context::STATUS_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .unwrap();
}

async fn create(h: &Harness, name: &str, type_: BackupType) {
    let backup = PostgresBackup::new(
        name,
        PostgresBackupSpec {
            cluster: "demo".into(),
            type_,
            method: steward_api::pgbackrest::BackupMethod::Pgbackrest,
        },
    );
    h.api::<PostgresBackup>()
        .create(&PostParams::default(), &backup)
        .await
        .unwrap();
}

async fn status(h: &Harness, name: &str) -> PostgresBackupStatus {
    h.api::<PostgresBackup>()
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

/// Plays the kubelet: the Job's Pod ends, with exit code 0, or 1 and `message` as its
/// termination message; waits until the Job controller has marked the Job.
async fn job_ends(h: &Harness, job: &str, message: Option<&str>) {
    let jobs = h.api::<Job>();
    let uid = jobs.get(job).await.unwrap().uid().unwrap();
    let pods = h.api::<Pod>();
    let mut marked = false;
    for _ in 0..100 {
        let mine: Vec<Pod> = pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.owner_references().iter().any(|o| o.uid == uid))
            .collect();
        if let Some(pod) = mine.first()
            && !marked
        {
            let (phase, code) = if message.is_some() {
                ("Failed", 1)
            } else {
                ("Succeeded", 0)
            };
            let terminated = json!({"exitCode": code, "reason": if code == 0 {"Completed"} else {"Error"},
                "message": message});
            let body = json!({"status": {"phase": phase, "containerStatuses": [{
                "name": "pgbackrest", "ready": false, "restartCount": 0, "image": "pgbackrest:2.55",
                "imageID": "", "state": {"terminated": terminated}}]}});
            pods.patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(body),
            )
            .await
            .unwrap();
            marked = true;
        }
        if job_outcome(&jobs.get(job).await.unwrap()).is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("Job {job} was not marked finished");
}

fn reasons(h: &Harness) -> Vec<String> {
    h.events.iter().map(|(r, _)| r.clone()).collect()
}

#[tokio::test]
async fn backups_run_one_at_a_time_and_a_failed_one_blocks_nothing() {
    let mut h = Harness::start(with_backups()).await;
    stanza(&h).await;
    create(&h, "b1", BackupType::Full).await;
    create(&h, "b2", BackupType::Incr).await;

    h.pass().await;
    let b1 = status(&h, "b1").await;
    assert_eq!(b1.phase, Some(BackupPhase::Running), "{b1:?}");
    assert_eq!(b1.job.as_deref(), Some("b1-job"));
    let b2 = status(&h, "b2").await;
    assert_eq!(b2.phase, Some(BackupPhase::Pending));
    assert_eq!(b2.message.as_deref(), Some("queued behind b1"));
    let op = h.status().await.common.operation.unwrap();
    assert_eq!(
        (op.kind, op.change.backup.as_deref()),
        (OperationKind::Backup, Some("b1"))
    );
    let job = h.api::<Job>().get("b1-job").await.unwrap();
    let command = job.spec.unwrap().template.spec.unwrap().containers[0]
        .command
        .clone()
        .unwrap();
    assert!(
        command.contains(&"--annotation=steward.dev/backup=b1".to_owned()),
        "{command:?}"
    );
    assert!(command.contains(&"--type=full".to_owned()));

    // pgBackRest takes it; the Job's Pod exits 0.
    let set = h
        .repo
        .backup(&host(), "full", "b1", h.clock.now(), 7, 40_000_000)
        .unwrap();
    job_ends(&h, "b1-job", None).await;
    h.pass().await;
    let b1 = status(&h, "b1").await;
    assert_eq!(b1.phase, Some(BackupPhase::Completed), "{b1:?}");
    assert_eq!(b1.label.as_deref(), Some(set.label.as_str()));
    assert_eq!(b1.type_, Some(BackupType::Full));
    assert_eq!(b1.duration.as_deref(), Some("7s"));
    assert_eq!(b1.size, Some(40_000_000));
    let cluster = h.status().await;
    let last = cluster.common.last_operation.clone().unwrap();
    assert_eq!(last.phase, OperationPhase::Succeeded);
    assert_eq!(
        last.change.backup_label.as_deref(),
        Some(set.label.as_str())
    );
    let repo = cluster.backups.unwrap();
    assert_eq!(repo.backups[0].backup.as_deref(), Some("b1"));
    assert_eq!(repo.backup_count, Some(1));
    assert!(repo.first_recoverability_point.is_some() && repo.info_time.is_some());
    assert!(reasons(&h).contains(&"BackupCompleted".to_owned()));

    // The next one starts; its Job fails with pgBackRest's error as the termination message.
    h.pass().await;
    assert_eq!(status(&h, "b2").await.phase, Some(BackupPhase::Running));
    job_ends(
        &h,
        "b2-job",
        Some("ERROR: [082]: WAL segment 000000010000000000000005 was not archived before the 60000ms timeout"),
    )
    .await;
    h.pass().await;
    let b2 = status(&h, "b2").await;
    assert_eq!(b2.phase, Some(BackupPhase::Failed));
    let error = b2.error.unwrap();
    assert!(error.starts_with("Job b2-job failed ("), "{error}");
    assert!(error.contains("ERROR: [082]: WAL segment"), "{error}");
    let cluster = h.status().await;
    let last = cluster.common.last_operation.clone().unwrap();
    assert_eq!(
        (last.kind, last.phase),
        (OperationKind::Backup, OperationPhase::Failed)
    );
    assert!(reasons(&h).contains(&"BackupFailed".to_owned()));
    // A failed backup changed nothing: no destructive step is held, nothing degraded for it.
    assert!(
        !cluster
            .common
            .conditions
            .iter()
            .any(|c| c.reason == "OperationFailed"),
        "{:?}",
        cluster.common.conditions
    );
    assert!(crate::operation::blocked_by_failure(&cluster.common, 1).is_none());
}

#[tokio::test]
async fn the_deadline_survives_an_operator_restart_and_stops_the_job() {
    let mut h = Harness::start(with_backups()).await;
    stanza(&h).await;
    create(&h, "b1", BackupType::Diff).await;
    h.pass().await;
    let started = h.status().await.common.operation.unwrap();
    h.restart();
    h.clock.advance(Duration::from_secs(600));
    h.pass().await;
    let resumed = h.status().await.common.operation.unwrap();
    assert_eq!(
        resumed.deadline, started.deadline,
        "a restart keeps the deadline"
    );
    assert_eq!(status(&h, "b1").await.phase, Some(BackupPhase::Running));

    h.clock.advance(Duration::from_secs(3001));
    h.pass().await;
    let b1 = status(&h, "b1").await;
    assert_eq!(b1.phase, Some(BackupPhase::Failed), "{b1:?}");
    assert!(b1.error.as_deref().unwrap().contains("deadline"), "{b1:?}");
    let job = h.api::<Job>().get_opt("b1-job").await.unwrap();
    assert!(
        job.is_none_or(|j| j.metadata.deletion_timestamp.is_some()),
        "the Job is stopped"
    );
    assert!(h.status().await.common.operation.is_none());
}

#[tokio::test]
async fn backups_wait_for_the_stanza_and_are_refused_without_a_repository() {
    let mut h = Harness::start(with_backups()).await;
    create(&h, "early", BackupType::Full).await;
    h.pass().await;
    let early = status(&h, "early").await;
    assert_eq!(early.phase, Some(BackupPhase::Pending));
    assert_eq!(
        early.message.as_deref(),
        Some("waiting for the stanza in repository demo-repo")
    );
    assert!(h.api::<Job>().get_opt("early-job").await.unwrap().is_none());

    let mut h = Harness::start(PostgresClusterSpec::new(1, "15")).await;
    create(&h, "nowhere", BackupType::Full).await;
    h.pass().await;
    let refused = status(&h, "nowhere").await;
    assert_eq!(refused.phase, Some(BackupPhase::Failed));
    assert!(
        refused
            .error
            .unwrap()
            .contains("cluster demo has no spec.backups.pgbackrest"),
    );
    assert!(reasons(&h).contains(&"BackupRefused".to_owned()));
    assert!(h.status().await.common.operation.is_none());
}

#[tokio::test]
async fn a_repository_that_lost_its_stanza_is_reported_and_created_again() {
    let mut h = Harness::start(with_backups()).await;
    stanza(&h).await;
    h.pass().await;
    assert_eq!(h.status().await.backups.unwrap().backup_count, Some(0));
    h.repo.lose(&host());
    h.clock.advance(super::run_backups::INFO_REFRESH);
    h.pass().await;
    let repo = h.status().await.backups.unwrap();
    assert_eq!(repo.stanza, None, "ProvisionRepository creates it again");
    let lost = h
        .events
        .iter()
        .find(|(r, _)| r == "RepositoryLost")
        .unwrap();
    assert!(lost.1.contains("missing stanza path"), "{lost:?}");
}

// --- RestoreCluster ---

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use steward_api::pgbackrest::{PostgresRestore, PostgresRestoreSpec, RestorePhase, RestoreTarget};
use steward_api::postgres::InstanceRole;

use crate::postgres::admin::ArchiverStats;
use crate::postgres::admin::model::CallKind;
use crate::postgres::build::instance;
use crate::postgres::validate;

/// The cluster's data claims of the first generation, as ProvisionInstances leaves them.
async fn claims(h: &Harness) {
    let cluster = h.api::<PostgresCluster>().get("demo").await.unwrap();
    let valid = validate::validate(&cluster).unwrap();
    for ordinal in 0..2 {
        let claim = instance::claim(&cluster, &valid, ordinal).unwrap();
        h.api::<PersistentVolumeClaim>()
            .create(&PostParams::default(), &claim)
            .await
            .unwrap();
    }
}

async fn claim_names(h: &Harness) -> Vec<String> {
    let mut names: Vec<String> = h
        .api::<PersistentVolumeClaim>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    names.sort();
    names
}

/// Plays ProvisionInstances and the kubelet: the instance's Pod on the cluster's current
/// claims, Ready.
async fn ready_pod(h: &Harness, ordinal: u32, role: InstanceRole) {
    let cluster = h.api::<PostgresCluster>().get("demo").await.unwrap();
    let valid = validate::validate(&cluster).unwrap();
    let mut pod = instance::pod(&cluster, &valid, ordinal, role, "").unwrap();
    let name = pod.name_any();
    pod.spec.as_mut().unwrap().node_name = Some(format!("node-{ordinal}"));
    h.api::<Pod>()
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    let ready = json!({"status": {"podIP": name, "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}]}});
    h.api::<Pod>()
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(ready))
        .await
        .unwrap();
}

async fn restore(h: &Harness, name: &str, target: Option<RestoreTarget>) {
    let r = PostgresRestore::new(
        name,
        PostgresRestoreSpec {
            cluster: "demo".into(),
            target,
            backup_set: None,
            node_label: None,
        },
    );
    h.api::<PostgresRestore>()
        .create(&PostParams::default(), &r)
        .await
        .unwrap();
}

async fn restore_status(h: &Harness, name: &str) -> steward_api::pgbackrest::PostgresRestoreStatus {
    h.api::<PostgresRestore>()
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

async fn step(h: &Harness) -> Option<String> {
    h.status().await.restore.map(|r| r.step)
}

#[tokio::test]
async fn a_restore_runs_its_steps_in_order_and_never_deletes_a_claim() {
    let mut h = Harness::start(with_backups()).await;
    stanza(&h).await;
    claims(&h).await;
    h.repo
        .backup(&host(), "full", "b0", h.clock.now(), 5, 1000)
        .unwrap();
    restore(&h, "r1", None).await;

    // Started: fail-over off, the old primary's WAL switched and waited for.
    h.pass().await;
    let progress = h.status().await.restore.unwrap();
    assert_eq!(progress.step, "ArchiveWal");
    assert_eq!(progress.previous_claims, ["demo-0-pgdata", "demo-1-pgdata"]);
    let segment = progress.wal_segment.clone().unwrap();
    assert!(
        h.model
            .calls()
            .iter()
            .any(|c| c.kind == CallKind::SwitchWal && c.instance == "demo-0")
    );
    assert_eq!(
        restore_status(&h, "r1").await.phase,
        Some(RestorePhase::Running)
    );
    h.pass().await;
    assert_eq!(
        step(&h).await.as_deref(),
        Some("ArchiveWal"),
        "waits for the archive"
    );
    h.model
        .set_archiver(
            "demo-0",
            ArchiverStats {
                archived_count: 3,
                last_archived_wal: Some(segment),
                ..ArchiverStats::default()
            },
        )
        .unwrap();
    h.pass().await;
    assert_eq!(step(&h).await.as_deref(), Some("StopInstances"));
    h.pass().await;
    assert!(
        h.api::<Pod>().get_opt("demo-0").await.unwrap().is_none(),
        "stopped"
    );
    h.pass().await;
    assert_eq!(step(&h).await.as_deref(), Some("RestoreJob"));
    h.pass().await;
    let job = h.api::<Job>().get("r1-restore").await.unwrap();
    let command = job.spec.unwrap().template.spec.unwrap().containers[0]
        .command
        .clone()
        .unwrap();
    assert!(
        command.ends_with(&["--delta".to_owned(), "restore".to_owned()]),
        "{command:?}"
    );
    assert_eq!(
        claim_names(&h).await,
        ["demo-0-pgdata", "demo-0-pgdata-r1", "demo-1-pgdata"]
    );
    job_ends(&h, "r1-restore", None).await;
    h.pass().await;
    assert_eq!(step(&h).await.as_deref(), Some("StartPrimary"));
    h.pass().await;
    assert_eq!(
        h.status().await.data_epoch,
        Some(1),
        "the cluster moved to the new claims"
    );

    // The restored primary starts on the new claim and answers as a primary.
    ready_pod(&h, 0, InstanceRole::Primary).await;
    let pod = h.api::<Pod>().get("demo-0").await.unwrap();
    let volumes = pod.spec.unwrap().volumes.unwrap();
    assert!(volumes.iter().any(|v| {
        v.persistent_volume_claim
            .as_ref()
            .is_some_and(|c| c.claim_name == "demo-0-pgdata-r1")
    }));
    h.pass().await;
    assert_eq!(step(&h).await.as_deref(), Some("RecloneReplicas"));
    h.pass().await;
    assert_eq!(
        step(&h).await.as_deref(),
        Some("RecloneReplicas"),
        "waits for the replica"
    );
    ready_pod(&h, 1, InstanceRole::Replica).await;
    h.pass().await;
    h.pass().await;

    let done = restore_status(&h, "r1").await;
    assert_eq!(done.phase, Some(RestorePhase::Completed), "{done:?}");
    assert_eq!(done.backup.as_deref(), Some("r1-full"));
    let cluster = h.status().await;
    assert!(cluster.restore.is_none(), "fail-over is back");
    let last = cluster.common.last_operation.unwrap();
    assert_eq!(
        (last.kind, last.phase),
        (OperationKind::Restore, OperationPhase::Succeeded)
    );
    // Nothing deleted; the previous claims are labelled.
    assert_eq!(
        claim_names(&h).await,
        ["demo-0-pgdata", "demo-0-pgdata-r1", "demo-1-pgdata"]
    );
    let old = h
        .api::<PersistentVolumeClaim>()
        .get("demo-1-pgdata")
        .await
        .unwrap();
    assert_eq!(old.labels()["steward.dev/restored-by"], "r1");
    assert_eq!(old.labels()["app.kubernetes.io/component"], "replaced-data");
    assert!(
        h.api::<PostgresBackup>()
            .get_opt("r1-full")
            .await
            .unwrap()
            .is_some()
    );
    let order: Vec<String> = reasons(&h)
        .into_iter()
        .filter(|r| r.starts_with("Restore"))
        .collect();
    assert_eq!(order, ["RestoreStarted", "RestoreCompleted"]);
}

#[tokio::test]
async fn restores_are_refused_before_anything_changes() {
    let mut h = Harness::start(with_backups()).await;
    stanza(&h).await;
    // No backup in the repository.
    restore(&h, "empty", None).await;
    h.pass().await;
    let s = restore_status(&h, "empty").await;
    assert_eq!(s.phase, Some(RestorePhase::Failed));
    assert!(s.error.unwrap().contains("holds no backup"));
    // A time before the first recoverability point.
    h.repo
        .backup(&host(), "full", "b0", h.clock.now(), 5, 1000)
        .unwrap();
    restore(
        &h,
        "early",
        Some(RestoreTarget {
            time: Some("2020-01-01T00:00:00Z".into()),
            ..RestoreTarget::default()
        }),
    )
    .await;
    h.pass().await;
    let s = restore_status(&h, "early").await;
    assert_eq!(s.phase, Some(RestorePhase::Failed));
    assert!(
        s.error
            .unwrap()
            .contains("before the first recoverability point")
    );
    // While another operation runs.
    create(&h, "busy", BackupType::Full).await;
    h.pass().await;
    assert!(h.status().await.common.operation.is_some());
    restore(&h, "during", None).await;
    h.pass().await;
    let s = restore_status(&h, "during").await;
    assert_eq!(s.phase, Some(RestorePhase::Failed));
    assert!(
        s.error
            .unwrap()
            .contains("another operation is running (backup"),
        "refused"
    );
    // Nothing changed: both instances still run, no restore recorded.
    assert!(h.api::<Pod>().get_opt("demo-0").await.unwrap().is_some());
    assert!(h.api::<Pod>().get_opt("demo-1").await.unwrap().is_some());
    assert!(h.status().await.restore.is_none());
    assert_eq!(
        reasons(&h)
            .iter()
            .filter(|r| *r == "RestoreRefused")
            .count(),
        3
    );
}

#[tokio::test]
async fn a_failed_restore_holds_the_cluster_and_its_rerun_deletes_nothing_again() {
    let mut h = Harness::start(with_backups()).await;
    stanza(&h).await;
    claims(&h).await;
    h.repo
        .backup(&host(), "full", "b0", h.clock.now(), 5, 1000)
        .unwrap();
    h.model.kill("demo-0").unwrap();
    restore(&h, "r1", None).await;
    h.pass().await;
    // The primary does not answer: its last WAL cannot be archived, which is said.
    assert!(reasons(&h).contains(&"RestoreWalNotArchived".to_owned()));
    for _ in 0..3 {
        h.pass().await;
    }
    assert_eq!(step(&h).await.as_deref(), Some("RestoreJob"));
    job_ends(
        &h,
        "r1-restore",
        Some("ERROR: [075]: no backup set found to restore"),
    )
    .await;
    h.pass().await;
    let failed = restore_status(&h, "r1").await;
    assert_eq!(failed.phase, Some(RestorePhase::Failed));
    assert!(failed.error.unwrap().contains("ERROR: [075]"));
    let cluster = h.status().await;
    assert!(cluster.restore.as_ref().unwrap().failed.is_some());
    assert!(
        cluster
            .common
            .conditions
            .iter()
            .any(|c| c.reason == "RestoreFailed")
    );
    let switched = h
        .model
        .calls()
        .iter()
        .filter(|c| c.kind == CallKind::SwitchWal)
        .count();

    // The re-run: straight to the restore Job, into the same claim; nothing deleted again.
    restore(&h, "r2", None).await;
    h.pass().await;
    assert_eq!(
        restore_status(&h, "r2").await.claim.as_deref(),
        Some("demo-0-pgdata-r1")
    );
    h.pass().await;
    assert_eq!(step(&h).await.as_deref(), Some("RestoreJob"));
    h.pass().await;
    assert!(
        h.api::<Job>()
            .get_opt("r2-restore")
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        claim_names(&h).await,
        ["demo-0-pgdata", "demo-0-pgdata-r1", "demo-1-pgdata"]
    );
    assert_eq!(
        h.model
            .calls()
            .iter()
            .filter(|c| c.kind == CallKind::SwitchWal)
            .count(),
        switched,
        "the re-run does not start over"
    );

    // Deleting the failed first attempt changes nothing while the re-run runs; deleting a
    // failed restore with no re-run brings the cluster back on its previous claims.
    job_ends(
        &h,
        "r2-restore",
        Some("ERROR: [075]: no backup set found to restore"),
    )
    .await;
    h.pass().await;
    assert_eq!(
        restore_status(&h, "r2").await.phase,
        Some(RestorePhase::Failed)
    );
    for name in ["r1", "r2"] {
        h.api::<PostgresRestore>()
            .delete(name, &Default::default())
            .await
            .unwrap();
    }
    h.pass().await;
    let cluster = h.status().await;
    assert!(cluster.restore.is_none());
    assert_eq!(cluster.data_epoch, None, "back on the previous claims");
    assert!(reasons(&h).contains(&"RestoreAbandoned".to_owned()));
    assert_eq!(
        claim_names(&h).await,
        ["demo-0-pgdata", "demo-0-pgdata-r1", "demo-1-pgdata"]
    );
}
