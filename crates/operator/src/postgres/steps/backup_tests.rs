//! Step tests of `RunBackups` on the `tests` harness (embedded API server, PostgreSQL model),
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
                "name": "pgbackrest", "ready": false, "restartCount": 0, "image": "pgbackrest:2.45",
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
