//! RestoreCluster — runs a `PostgresRestore` as the cluster's `Restore` operation (seed 004,
//! "pgbackrest Restore"), with its progress in `status.restore` so that a restarted operator
//! continues it. The seed's workflow, with what it leaves to the DBA done by Steward:
//!
//! 1. refuse (the restore `Failed`, Event `RestoreRefused`, nothing touched): no repository or
//!    stanza, no backup in it, a named backup set it does not hold, a time target before the
//!    first recoverability point, another operation running;
//! 2. automatic fail-over off for the cluster (while `status.restore` is set; the spec is not
//!    edited, so the previous setting comes back by itself);
//! 3. `ArchiveWal` — beyond the seed: the current WAL segment of a writable primary is switched
//!    and waited for in the archive (at most [`WAL_WAIT`]), so a target just before the restore
//!    is reachable;
//! 4. `StopInstances` — the instance Pods are deleted (their claims stay);
//! 5. `RestoreJob` — a new claim for the restored primary, `<primary>-pgdata-r<n>` (the next
//!    generation of data claims), and the Job `<restore>-restore` running `pgbackrest restore`
//!    into it with the target;
//! 6. `StartPrimary` — the cluster moves to generation `n` (`status.dataEpoch`) and the primary
//!    starts on the restored data: it recovers to the target and promotes itself
//!    (`recovery_target_action=promote`);
//! 7. `RecloneReplicas` — the replicas start on new, empty claims of generation `n`: they clone
//!    the restored primary and stream on its new timeline;
//! 8. `Finish` — the previous claims are labelled `steward.dev/restored-by=<restore>` (never
//!    deleted by Steward), fail-over is back, the operation succeeds, and a full backup (the
//!    `PostgresBackup` `<restore>-full`) is created: pgBackRest's advice after a restore.
//!
//! A failed Job, a restored primary that cannot start (its FATAL line), or the deadline fail the
//! restore and leave the cluster stopped (`Degraded=True/RestoreFailed`): a new
//! `PostgresRestore` re-runs it from step 4 — deleting nothing again — into the same claim
//! (`--delta`); deleting the failed one instead brings the cluster back on its previous claims.

use crate::resources::pods::CachedPod;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Resource, ResourceExt};
use steward_api::common::{OperationChange, OperationKind, OperationPhase};
use steward_api::pgbackrest::{
    BackupType, PostgresBackup, PostgresBackupSpec, PostgresRestore, PostgresRestoreStatus,
    RestorePhase,
};
use steward_api::postgres::RestoreProgress;

use crate::clock::{format_time, parse_time};
use crate::error::Error;
use crate::operation::{OperationRequest, Started};
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::postgres::PostgresPass;
use crate::postgres::build::{instance, pgbackrest};
use crate::postgres::names::{ClusterNames, ENGINE, INSTANCE_COMPONENT};
use crate::postgres::steps::provision_repository::job_outcome;
use crate::postgres::steps::{SOON, validated};
use crate::postgres::validate::ValidatedPostgresCluster;
use crate::resources::labels;

/// See the module documentation.
pub struct RestoreCluster;

/// How long the old primary's last WAL segment is waited for in the archive.
pub const WAL_WAIT: Duration = Duration::from_secs(60);

/// The label on the claims a restore replaced, naming it.
pub const RESTORED_BY: &str = "steward.dev/restored-by";

/// The component label those claims move to (out of the instances' reach).
pub const REPLACED_COMPONENT: &str = "replaced-data";

/// The steps, in order.
pub const STEPS: [&str; 6] = [
    "ArchiveWal",
    "StopInstances",
    "RestoreJob",
    "StartPrimary",
    "RecloneReplicas",
    "Finish",
];

fn step_index(step: &str) -> u32 {
    STEPS
        .iter()
        .position(|s| *s == step)
        .and_then(|i| u32::try_from(i).ok())
        .unwrap_or(0)
}

/// (pure) The cluster's restores, oldest first.
pub fn restores_of(
    all: &[Arc<PostgresRestore>],
    namespace: &str,
    cluster: &str,
) -> Vec<Arc<PostgresRestore>> {
    crate::postgres::steps::run_backups::of_cluster(all, namespace, cluster, |r| {
        r.spec.cluster.as_str()
    })
}

fn phase(r: &PostgresRestore) -> Option<RestorePhase> {
    r.status.as_ref().and_then(|s| s.phase)
}

fn unstarted(r: &PostgresRestore) -> bool {
    matches!(phase(r), None | Some(RestorePhase::Pending))
}

/// (pure) Why a restore must be refused before anything changes, from what the repository
/// holds: no backup, a backup set it does not hold, a time target before the first
/// recoverability point (the end of the oldest backup).
pub fn refusal(
    restore: &PostgresRestore,
    info: &crate::postgres::repository::RepoInfo,
) -> Option<String> {
    if info.backups.is_empty() {
        return Some(format!(
            "the repository holds no backup to restore ({})",
            info.status_message
        ));
    }
    if let Some(set) = &restore.spec.backup_set
        && !info.backups.iter().any(|b| &b.label == set)
    {
        return Some(format!("backup set {set} is not in the repository"));
    }
    let time = restore.spec.target.as_ref().and_then(|t| t.time.as_ref())?;
    let at: jiff::Timestamp = match time.parse() {
        Ok(at) => at,
        Err(e) => return Some(format!("target.time {time:?} is not an RFC 3339 time: {e}")),
    };
    let first = info.backups.iter().map(|b| b.stop).min()?;
    (at.as_second() < first).then(|| {
        format!(
            "target time {time} is before the first recoverability point {} (the end of the oldest backup)",
            jiff::Timestamp::from_second(first).map_or_else(|_| first.to_string(), format_time)
        )
    })
}

async fn write_status(
    pass: &PostgresPass,
    restore: &PostgresRestore,
    status: PostgresRestoreStatus,
) -> Result<(), Error> {
    if restore.status.as_ref() == Some(&status) {
        return Ok(());
    }
    crate::postgres::steps::run_backups::patch_status::<PostgresRestore>(
        pass,
        &restore.name_any(),
        &status,
    )
    .await
}

fn current(restore: &PostgresRestore) -> PostgresRestoreStatus {
    restore.status.clone().unwrap_or_default()
}

async fn refuse(
    pass: &mut PostgresPass,
    restore: &PostgresRestore,
    why: String,
) -> Result<(), Error> {
    pass.core.event(
        EventType::Warning,
        "RestoreRefused",
        "Restore",
        format!("{}: {why}; nothing was changed", restore.name_any()),
    );
    let mut status = current(restore);
    status.phase = Some(RestorePhase::Failed);
    status.message = Some("refused; nothing was changed".into());
    status.error = Some(why);
    status.finished_at = Some(format_time(pass.core.now));
    write_status(pass, restore, status).await
}

async fn pending(pass: &PostgresPass, restore: &PostgresRestore, why: &str) -> Result<(), Error> {
    let mut status = current(restore);
    status.phase = Some(RestorePhase::Pending);
    status.message = Some(why.to_owned());
    write_status(pass, restore, status).await
}

/// Records the step on the operation, the progress and the restore.
async fn enter(
    pass: &mut PostgresPass,
    progress: &mut RestoreProgress,
    restore: Option<&PostgresRestore>,
    step: &str,
    message: String,
) -> Result<(), Error> {
    progress.step = step.to_owned();
    pass.core.advance_operation(
        OperationKind::Restore,
        step,
        step_index(step),
        message.clone(),
    );
    pass.status.restore = Some(progress.clone());
    if let Some(r) = restore {
        let mut status = current(r);
        status.phase = Some(RestorePhase::Running);
        status.step = Some(step.to_owned());
        status.message = Some(message);
        write_status(pass, r, status).await?;
    }
    Ok(())
}

/// The `Degraded=True/RestoreFailed` message of a cluster held by a failed restore.
fn held_message(progress: &RestoreProgress, why: &str) -> String {
    format!(
        "restore {} failed at {}: {why}; the cluster stays stopped: create a new PostgresRestore to re-run it, or delete {} to come back on the previous claims",
        progress.name, progress.step, progress.name
    )
}

/// Fails the running restore: the cluster stays stopped, the restore says why.
async fn fail(
    pass: &mut PostgresPass,
    progress: &mut RestoreProgress,
    restore: Option<&PostgresRestore>,
    why: String,
) -> Result<Outcome, Error> {
    progress.failed = Some(why.clone());
    pass.status.restore = Some(progress.clone());
    pass.core.event(
        EventType::Warning,
        "RestoreFailed",
        "Restore",
        format!(
            "{} failed at {}: {why}; the cluster stays stopped until a new PostgresRestore re-runs it (or this one is deleted)",
            progress.name, progress.step
        ),
    );
    pass.core
        .finish_operation(OperationKind::Restore, OperationPhase::Failed, why.clone());
    pass.core
        .degrade("RestoreFailed", held_message(progress, &why));
    if let Some(r) = restore {
        let mut status = current(r);
        status.phase = Some(RestorePhase::Failed);
        status.error = Some(why);
        status.message = Some(format!("failed at {}", progress.step));
        status.finished_at = Some(format_time(pass.core.now));
        write_status(pass, r, status).await?;
    }
    Ok(Outcome::Continue)
}

pub(crate) fn instance_pods(pass: &PostgresPass) -> Vec<Arc<CachedPod>> {
    pass.stores
        .pods
        .of_instance(&pass.core.namespace, &pass.core.name)
        .into_iter()
        .filter(|p| {
            let l = p.labels();
            l.get(labels::NAME) == Some(ENGINE)
                && l.get(labels::COMPONENT) == Some(INSTANCE_COMPONENT)
        })
        .collect()
}

/// Creates (once) the claim of generation `epoch` for `instance`; its name.
pub(crate) async fn claim_of_generation(
    pass: &PostgresPass,
    valid: &ValidatedPostgresCluster,
    instance: &str,
    epoch: u32,
) -> Result<String, Error> {
    let ns = &pass.core.namespace;
    let ordinal = pass.names.ordinal(instance).unwrap_or(0);
    let claim = ClusterNames::claim_at(instance, epoch);
    let cached = kube::runtime::reflector::ObjectRef::new(&claim).within(ns);
    if pass.stores.claims.get(&cached).is_some() {
        return Ok(claim);
    }
    let Some(desired) = instance::claim_of_epoch(&pass.cluster, valid, ordinal, epoch) else {
        return Err(Error::Internal {
            message: "cluster has no UID".into(),
        });
    };
    let claims: Api<PersistentVolumeClaim> = pass.ctx.api(ns);
    match claims.create(&PostParams::default(), &desired).await {
        Ok(_) => Ok(claim),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(claim),
        Err(source) => Err(Error::kube(
            "create PersistentVolumeClaim",
            pass.object(),
            source,
        )),
    }
}

/// The instances other than `primary` that do not stream from it yet.
pub(crate) fn replicas_not_streaming(
    pass: &PostgresPass,
    valid: &ValidatedPostgresCluster,
    primary: &str,
) -> Vec<String> {
    (0..valid.instances.max(1))
        .map(|o| pass.names.instance(o))
        .filter(|n| n != primary)
        .filter(|n| !pass.instance(n).is_some_and(|v| v.streaming))
        .collect()
}

/// Deletes the instance Pods (their claims stay; PostgreSQL gets a fast shutdown). `true` once
/// none is left.
pub(crate) async fn stop_instances(pass: &PostgresPass) -> Result<bool, Error> {
    let pods = instance_pods(pass);
    if pods.is_empty() {
        return Ok(true);
    }
    let api: Api<Pod> = pass.ctx.api(&pass.core.namespace);
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: pod.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&pod.name_any(), &params).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(source) => return Err(Error::kube("delete Pod", pass.object(), source)),
        }
    }
    Ok(false)
}

/// The claims of generation `epoch` that exist, for the cluster's instances.
pub(crate) fn claims_of(
    pass: &PostgresPass,
    valid: &ValidatedPostgresCluster,
    epoch: u32,
) -> Vec<String> {
    (0..valid.instances.max(1))
        .map(|o| ClusterNames::claim_at(&pass.names.instance(o), epoch))
        .filter(|c| {
            pass.stores
                .claims
                .get(&kube::runtime::reflector::ObjectRef::new(c).within(&pass.core.namespace))
                .is_some()
        })
        .collect()
}

/// Starts the oldest unstarted restore, or refuses it.
async fn begin(
    pass: &mut PostgresPass,
    valid: &ValidatedPostgresCluster,
    restore: &PostgresRestore,
) -> Result<Outcome, Error> {
    let stanza = pass
        .status
        .backups
        .as_ref()
        .is_some_and(|b| b.stanza.is_some());
    if valid.pgbackrest.is_none() {
        let why = format!(
            "cluster {} has no spec.backups.pgbackrest: there is no repository to restore from",
            pass.core.name
        );
        refuse(pass, restore, why).await?;
        return Ok(Outcome::Continue);
    }
    if !stanza {
        let why = format!("the repository {} has no stanza yet", pass.names.repo());
        refuse(pass, restore, why).await?;
        return Ok(Outcome::Continue);
    }
    if let Some(op) = &pass.core.status.operation {
        let why = format!(
            "another operation is running ({}: {}); create the PostgresRestore again once it is done",
            op.kind.as_str(),
            op.message
        );
        refuse(pass, restore, why).await?;
        return Ok(Outcome::Continue);
    }
    if valid.paused {
        pending(pass, restore, "the cluster is paused").await?;
        return Ok(Outcome::requeue(SOON * 5, "restore waits: cluster paused"));
    }
    let host = crate::postgres::repository::RepoHost {
        namespace: pass.core.namespace.clone(),
        pod: pass.names.repo(),
    };
    let info = match pass.repository()?.info(&host).await {
        Ok(info) => info,
        Err(err) => {
            pending(pass, restore, &format!("reading the repository: {err}")).await?;
            return Ok(Outcome::requeue(
                SOON * 5,
                "restore waits for the repository",
            ));
        }
    };
    if let Some(why) = refusal(restore, &info) {
        refuse(pass, restore, why).await?;
        return Ok(Outcome::Continue);
    }
    if let Err(why) = pgbackrest::restore_target_args(
        restore.spec.target.as_ref(),
        restore.spec.backup_set.as_deref(),
    ) {
        refuse(pass, restore, why).await?;
        return Ok(Outcome::Continue);
    }
    let name = restore.name_any();
    let from_epoch = pass.names.epoch;
    let epoch = from_epoch + 1;
    let primary = pass.primary().unwrap_or_else(|| pass.names.instance(0));
    let started = pass.core.start_operation(OperationRequest {
        kind: OperationKind::Restore,
        step: STEPS[0].into(),
        total: u32::try_from(STEPS.len()).unwrap_or(6),
        change: OperationChange::default(),
        message: format!("restore {name} of {primary}"),
    });
    if let Some(kind) = not_started(started) {
        let why = format!("another operation is running ({kind})");
        refuse(pass, restore, why).await?;
        return Ok(Outcome::Continue);
    }
    let mut progress = RestoreProgress {
        name: name.clone(),
        step: STEPS[0].into(),
        from_epoch,
        epoch,
        primary: primary.clone(),
        previous_claims: claims_of(pass, valid, from_epoch),
        ..RestoreProgress::default()
    };
    let mut status = current(restore);
    status.started_at = Some(format_time(pass.core.now));
    status.primary = Some(primary.clone());
    status.claim = Some(ClusterNames::claim_at(&primary, epoch));
    status.previous_claims.clone_from(&progress.previous_claims);
    status.error = None;
    let restore = with_status(restore, status);
    pass.core.event(
        EventType::Warning,
        "RestoreStarted",
        "Restore",
        format!(
            "{name}: restoring {} from repository {}; automatic fail-over is off until it is done; the current claims ({}) are kept",
            pass.core.name,
            pass.names.repo(),
            progress.previous_claims.join(", ")
        ),
    );
    enter(
        pass,
        &mut progress,
        Some(&restore),
        STEPS[0],
        "archiving the primary's last WAL".into(),
    )
    .await?;
    advance(pass, valid, progress, Some(&restore)).await
}

/// What keeps an operation from starting (`Busy`, `Blocked`), as text; `None` once started.
pub(crate) fn not_started(started: Started) -> Option<String> {
    match started {
        Started::New | Started::Resumed => None,
        Started::Busy(kind) => Some(kind.as_str().to_owned()),
        Started::Blocked(why) => Some(why),
    }
}

fn with_status(restore: &PostgresRestore, status: PostgresRestoreStatus) -> PostgresRestore {
    let mut r = restore.clone();
    r.status = Some(status);
    r
}

/// Takes the next step of the restore in progress.
async fn advance(
    pass: &mut PostgresPass,
    valid: &ValidatedPostgresCluster,
    mut progress: RestoreProgress,
    restore: Option<&PostgresRestore>,
) -> Result<Outcome, Error> {
    let now = pass.core.now;
    let ns = pass.core.namespace.clone();
    match progress.step.as_str() {
        "ArchiveWal" => {
            let writable = pass
                .instance(&progress.primary)
                .is_some_and(|v| v.writable());
            if !writable {
                pass.core.event(
                    EventType::Warning,
                    "RestoreWalNotArchived",
                    "Restore",
                    format!(
                        "{}: the primary {} does not accept writes: WAL it did not archive cannot be restored",
                        progress.name, progress.primary
                    ),
                );
            } else if progress.wal_segment.is_none() {
                let admin = pass.admin(&progress.primary).await;
                match async { admin?.switch_wal().await }.await {
                    Ok(segment) => {
                        let until = now
                            .saturating_add(jiff::SignedDuration::from_secs(
                                i64::try_from(WAL_WAIT.as_secs()).unwrap_or(60),
                            ))
                            .unwrap_or(now);
                        progress.wal_segment = Some(segment);
                        progress.wal_deadline = Some(format_time(until));
                        pass.status.restore = Some(progress.clone());
                        return Ok(Outcome::requeue(
                            SOON,
                            "waiting for the last WAL segment in the archive",
                        ));
                    }
                    Err(err) => pass.core.event(
                        EventType::Warning,
                        "RestoreWalNotArchived",
                        "Restore",
                        format!(
                            "{}: switching WAL on {} failed: {err}",
                            progress.name, progress.primary
                        ),
                    ),
                }
            } else if let Some(segment) = progress.wal_segment.clone() {
                let archived = pass
                    .instance(&progress.primary)
                    .and_then(|v| v.archiver.as_ref())
                    .and_then(|a| a.last_archived_wal.clone())
                    .is_some_and(|last| last >= segment);
                let overdue = progress
                    .wal_deadline
                    .as_deref()
                    .and_then(parse_time)
                    .is_none_or(|d| now >= d);
                if !archived && !overdue {
                    return Ok(Outcome::requeue(
                        SOON,
                        "waiting for the last WAL segment in the archive",
                    ));
                }
                if !archived {
                    pass.core.event(
                        EventType::Warning,
                        "RestoreWalNotArchived",
                        "Restore",
                        format!(
                            "{}: WAL segment {segment} was not archived within {}s; restoring from what the repository holds",
                            progress.name,
                            WAL_WAIT.as_secs()
                        ),
                    );
                }
            }
            enter(
                pass,
                &mut progress,
                restore,
                "StopInstances",
                "stopping the instances (their claims stay)".into(),
            )
            .await?;
            Ok(Outcome::requeue(SOON, "stopping the instances"))
        }
        "StopInstances" => {
            if stop_instances(pass).await? {
                enter(
                    pass,
                    &mut progress,
                    restore,
                    "RestoreJob",
                    "restoring into a new claim".into(),
                )
                .await?;
                return Ok(Outcome::requeue(SOON, "restore Job next"));
            }
            Ok(Outcome::requeue(
                SOON * 2,
                "waiting for the instances to stop",
            ))
        }
        "RestoreJob" => {
            let claim = claim_of_generation(pass, valid, &progress.primary, progress.epoch).await?;
            let Some(r) = restore else {
                return fail(
                    pass,
                    &mut progress,
                    None,
                    "the PostgresRestore was deleted before its Job ran".into(),
                )
                .await;
            };
            let job_name = pgbackrest::restore_job_name(&r.name_any());
            let jobs: Api<Job> = pass.ctx.api(&ns);
            let object = format!("{ns}/{job_name}");
            let job = jobs
                .get_opt(&job_name)
                .await
                .map_err(|s| Error::kube("get Job", object.clone(), s))?;
            let Some(job) = job else {
                let args = match pgbackrest::restore_target_args(
                    r.spec.target.as_ref(),
                    r.spec.backup_set.as_deref(),
                ) {
                    Ok(args) => args,
                    Err(why) => return fail(pass, &mut progress, Some(r), why).await,
                };
                let Some(desired) = pgbackrest::restore_job(r, valid, &claim, args) else {
                    return Err(Error::Internal {
                        message: "PostgresRestore has no UID or backups are off".into(),
                    });
                };
                match jobs.create(&PostParams::default(), &desired).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(source) => return Err(Error::kube("create Job", object, source)),
                }
                let mut status = current(r);
                status.job = Some(job_name.clone());
                status.message = Some(format!(
                    "pgbackrest restore runs in Job {job_name} into claim {claim}"
                ));
                write_status(pass, r, status).await?;
                return Ok(Outcome::requeue(SOON * 3, "a restore Job runs"));
            };
            match job_outcome(&job) {
                None => Ok(Outcome::requeue(SOON * 3, "a restore Job runs")),
                Some(Err(why)) => {
                    let words = crate::postgres::steps::run_backups::last_words(pass, &job)
                        .map(|w| format!(": {w}"))
                        .unwrap_or_default();
                    fail(
                        pass,
                        &mut progress,
                        Some(r),
                        format!("Job {job_name} failed ({why}){words}"),
                    )
                    .await
                }
                Some(Ok(())) => {
                    let message = format!("starting {} on the restored data", progress.primary);
                    enter(pass, &mut progress, restore, "StartPrimary", message).await?;
                    Ok(Outcome::requeue(SOON, "starting the restored primary"))
                }
            }
        }
        "StartPrimary" => {
            if pass.names.epoch != progress.epoch {
                // The cluster moves to the new claims; the next pass sees it under their names.
                pass.status.data_epoch = Some(progress.epoch);
                pass.status.current_primary = Some(progress.primary.clone());
                pass.status.restore = Some(progress.clone());
                return Ok(Outcome::stop(
                    SOON,
                    "the cluster moves to the restored claims",
                ));
            }
            let view = pass.instance(&progress.primary).cloned();
            if view.as_ref().is_some_and(|v| v.writable()) {
                enter(
                    pass,
                    &mut progress,
                    restore,
                    "RecloneReplicas",
                    "the replicas clone the restored primary".into(),
                )
                .await?;
                return Ok(Outcome::requeue(SOON, "replicas next"));
            }
            if let Some(fatal) = view
                .as_ref()
                .filter(|v| !v.pod_ready)
                .and_then(|v| v.last_fatal.clone())
            {
                let why = format!(
                    "the restored primary {} cannot start: {fatal}",
                    progress.primary
                );
                return fail(pass, &mut progress, restore, why).await;
            }
            Ok(Outcome::requeue(SOON * 2, "the restored primary recovers"))
        }
        "RecloneReplicas" => {
            let waiting = replicas_not_streaming(pass, valid, &progress.primary);
            if !waiting.is_empty() {
                return Ok(Outcome::requeue(
                    SOON * 2,
                    format!("waiting for {} to stream", waiting.join(", ")),
                ));
            }
            enter(
                pass,
                &mut progress,
                restore,
                "Finish",
                "fail-over back on; a full backup follows".into(),
            )
            .await?;
            finish(pass, valid, progress, restore).await
        }
        "Finish" => finish(pass, valid, progress, restore).await,
        other => Err(Error::Internal {
            message: format!("unknown restore step {other:?} in status.restore"),
        }),
    }
}

/// Labels the previous claims, creates the full backup, ends the operation.
async fn finish(
    pass: &mut PostgresPass,
    valid: &ValidatedPostgresCluster,
    progress: RestoreProgress,
    restore: Option<&PostgresRestore>,
) -> Result<Outcome, Error> {
    retire_claims(pass, &progress.previous_claims, RESTORED_BY, &progress.name).await?;
    let mut backup_name = None;
    if let Some(r) = restore {
        backup_name = Some(request_full_backup(pass, r).await?);
    }
    pass.status.restore = None;
    let message = format!(
        "{} runs on the restored data ({}), its replicas stream; automatic fail-over is {} again; previous claims kept: {}",
        progress.primary,
        ClusterNames::claim_at(&progress.primary, progress.epoch),
        if valid.failover.automatic {
            "on"
        } else {
            "off (as set)"
        },
        progress.previous_claims.join(", ")
    );
    pass.core.event(
        EventType::Normal,
        "RestoreCompleted",
        "Restore",
        format!("{}: {message}", progress.name),
    );
    pass.core.finish_operation(
        OperationKind::Restore,
        OperationPhase::Succeeded,
        message.clone(),
    );
    if let Some(r) = restore {
        let mut status = current(r);
        status.phase = Some(RestorePhase::Completed);
        status.step = Some("Finish".into());
        status.message = Some(message);
        status.backup = backup_name;
        status.finished_at = Some(format_time(pass.core.now));
        write_status(pass, r, status).await?;
    }
    Ok(Outcome::requeue(SOON, "restore completed"))
}

/// Labels the claims a restore or an upgrade replaced: `<by_label>=<by>` and the component
/// [`REPLACED_COMPONENT`] (out of the instances' reach). Never deletes them.
pub(crate) async fn retire_claims(
    pass: &PostgresPass,
    claims: &[String],
    by_label: &str,
    by: &str,
) -> Result<(), Error> {
    let ns = pass.core.namespace.clone();
    let api: Api<PersistentVolumeClaim> = pass.ctx.api(&ns);
    for claim in claims {
        let patch = serde_json::json!({"metadata": {"labels": {
            by_label: by,
            labels::COMPONENT: REPLACED_COMPONENT,
        }}});
        match api
            .patch(claim, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => {
                return Err(Error::kube(
                    "label PersistentVolumeClaim",
                    format!("{ns}/{claim}"),
                    source,
                ));
            }
        }
    }
    Ok(())
}

/// Creates the full backup `<owner>-full` of the cluster, owned by `owner` (a restore or an
/// upgrade: pgBackRest's advice after both). Idempotent; returns its name.
pub(crate) async fn request_full_backup<K>(pass: &PostgresPass, owner: &K) -> Result<String, Error>
where
    K: Resource<DynamicType = ()>,
{
    let ns = pass.core.namespace.clone();
    let name = format!("{}-full", owner.meta().name.clone().unwrap_or_default());
    let mut backup = PostgresBackup::new(
        &name,
        PostgresBackupSpec {
            cluster: pass.core.name.clone(),
            type_: BackupType::Full,
            method: steward_api::pgbackrest::BackupMethod::Pgbackrest,
        },
    );
    backup.metadata.namespace = Some(ns.clone());
    backup.metadata.owner_references = owner.controller_owner_ref(&()).map(|o| vec![o]);
    let api: Api<PostgresBackup> = pass.ctx.api(&ns);
    match api.create(&PostParams::default(), &backup).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(source) => {
            return Err(Error::kube(
                "create PostgresBackup",
                format!("{ns}/{name}"),
                source,
            ));
        }
    }
    Ok(name)
}

#[async_trait]
impl SubReconciler<PostgresPass> for RestoreCluster {
    fn name(&self) -> &'static str {
        "RestoreCluster"
    }

    async fn reconcile(&self, pass: &mut PostgresPass) -> Result<Outcome, Error> {
        let valid = validated(pass)?;
        let all = pass.stores.restores.state();
        let restores = restores_of(&all, &pass.core.namespace, &pass.core.name);
        let Some(mut progress) = pass.status.restore.clone() else {
            let Some(next) = restores.iter().find(|r| unstarted(r)).cloned() else {
                return Ok(Outcome::Continue);
            };
            return begin(pass, &valid, &next).await;
        };
        let own = restores
            .iter()
            .find(|r| r.name_any() == progress.name)
            .cloned();
        // Any other restore created meanwhile is refused, except the re-run of a failed one.
        let others: Vec<Arc<PostgresRestore>> = restores
            .iter()
            .filter(|r| r.name_any() != progress.name && unstarted(r))
            .cloned()
            .collect();
        if let Some(why) = progress.failed.clone() {
            if let Some(rerun) = others.first() {
                // The re-run: from the restore Job into the same claim, deleting nothing again
                // (a restored primary that failed to start is stopped first).
                let name = rerun.name_any();
                let started = pass.core.start_operation(OperationRequest {
                    kind: OperationKind::Restore,
                    step: "StopInstances".into(),
                    total: u32::try_from(STEPS.len()).unwrap_or(6),
                    change: OperationChange::default(),
                    message: format!(
                        "restore {name} of {} (re-run of {})",
                        progress.primary, progress.name
                    ),
                });
                if let Some(kind) = not_started(started) {
                    pending(
                        pass,
                        rerun,
                        &format!("waiting for the running {kind} operation"),
                    )
                    .await?;
                    return Ok(Outcome::requeue(SOON * 5, "the re-run waits"));
                }
                progress.name.clone_from(&name);
                progress.failed = None;
                let mut status = current(rerun);
                status.started_at = Some(format_time(pass.core.now));
                status.primary = Some(progress.primary.clone());
                status.claim = Some(ClusterNames::claim_at(&progress.primary, progress.epoch));
                status.previous_claims.clone_from(&progress.previous_claims);
                let rerun = with_status(rerun, status);
                pass.core.event(
                    EventType::Warning,
                    "RestoreStarted",
                    "Restore",
                    format!("{name}: re-running the failed restore ({why}) into the same claim; nothing is deleted again"),
                );
                enter(
                    pass,
                    &mut progress,
                    Some(&rerun),
                    "StopInstances",
                    "stopping the instances (their claims stay)".into(),
                )
                .await?;
                return advance(pass, &valid, progress, Some(&rerun)).await;
            }
            if own.is_none() {
                // Abandoned: back on the previous claims, which were never touched.
                pass.status.data_epoch = (progress.from_epoch > 0).then_some(progress.from_epoch);
                pass.status.restore = None;
                pass.core.event(
                    EventType::Warning,
                    "RestoreAbandoned",
                    "Restore",
                    format!(
                        "{} was deleted after it failed: the cluster comes back on its previous claims ({}); the restored claim {} is kept",
                        progress.name,
                        progress.previous_claims.join(", "),
                        ClusterNames::claim_at(&progress.primary, progress.epoch)
                    ),
                );
                return Ok(Outcome::stop(
                    SOON,
                    "the cluster moves back to its previous claims",
                ));
            }
            pass.core
                .degrade("RestoreFailed", held_message(&progress, &why));
            return Ok(Outcome::Continue);
        }
        for r in &others {
            refuse(pass, r, format!("restore {} is running", progress.name)).await?;
        }
        if own.is_none() && step_index(&progress.step) < step_index("StartPrimary") {
            // Deleted before the cluster moved: back on the previous claims.
            pass.status.restore = None;
            pass.core.finish_operation(
                OperationKind::Restore,
                OperationPhase::Failed,
                format!("PostgresRestore {} was deleted at {}; the cluster comes back on its previous claims", progress.name, progress.step),
            );
            return Ok(Outcome::stop(SOON, "restore abandoned"));
        }
        // The deadline ended the operation: the restore fails where it stands.
        if pass
            .core
            .status
            .operation
            .as_ref()
            .is_none_or(|op| op.kind != OperationKind::Restore)
        {
            let why = pass
                .core
                .status
                .last_operation
                .as_ref()
                .filter(|op| op.kind == OperationKind::Restore)
                .map(|op| op.message.clone())
                .unwrap_or_else(|| "the Restore operation ended".into());
            progress.failed = Some(why.clone());
            pass.status.restore = Some(progress.clone());
            if let Some(r) = own.as_deref() {
                let mut status = current(r);
                status.phase = Some(RestorePhase::Failed);
                status.error = Some(why);
                status.finished_at = Some(format_time(pass.core.now));
                write_status(pass, r, status).await?;
            }
            return Ok(Outcome::Continue);
        }
        advance(pass, &valid, progress, own.as_deref()).await
    }
}
