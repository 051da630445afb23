//! RunBackups — runs the cluster's `PostgresBackup`s, one at a time, oldest first, each as the
//! cluster's `Backup` operation (`BACKUP_TIMEOUT` deadline), and keeps `status.backups` in step
//! with the repository (seed 004: `pgo backup`, `pgo show backup`).
//!
//! - Without `spec.backups.pgbackrest` every unfinished backup is refused (`Failed`, Event
//!   `BackupRefused`); nothing else happens.
//! - A backup waits (`Pending`, with the reason) for the stanza, a writable primary, an
//!   unpaused cluster and a free operation slot; then the operation starts and the Job
//!   `<backup>-job` runs `pgbackrest backup --type=… --annotation=steward.dev/backup=<name>`.
//! - When the Job completes, `pgbackrest info` (through the [`Repository`] seam) finds the set
//!   annotated with the backup's name; its label, type, times, WAL range, LSNs and sizes go to
//!   the backup's status, the repository's list to the cluster's, and the operation succeeds.
//!   A failed Job fails the backup with pgBackRest's last words (the Pod's termination
//!   message). Either way: an Event and the `backup` webhook.
//! - The operation's deadline, a fail-over (which takes the slot) or the backup's deletion end
//!   it as failed; the Job is deleted. A backup marked `Running` whose operation record was
//!   lost (status write refused) is adopted again.
//! - Every ten minutes, and after each backup, `pgbackrest info` refreshes the cluster's list;
//!   backups retention expired are marked `expired`. A repository that lost its stanza is
//!   reported (`RepositoryLost`) and the stanza created again.
//!
//! [`Repository`]: crate::postgres::repository::Repository

use crate::resources::pods::{CachedPod, PodParts};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use steward_api::common::{OperationChange, OperationKind, OperationPhase};
use steward_api::pgbackrest::{
    BackupMethod, BackupPhase, BackupType, PostgresBackup, PostgresBackupStatus,
};
use steward_api::postgres::{BackupSummary, BackupsStatus};

use crate::clock::{format_time, parse_time};
use crate::error::Error;
use crate::operation::{OperationRequest, Started};
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::postgres::PostgresPass;
use crate::postgres::build::{basebackup, pgbackrest};
use crate::postgres::repository::{BackupSet, RepoHost, RepoInfo};
use crate::postgres::steps::provision_repository::job_outcome;
use crate::postgres::steps::{SOON, validated};
use crate::postgres::validate::ValidatedPostgresCluster;

/// See the module documentation.
pub struct RunBackups;

/// How often a pass looks at a running backup Job anyway (its changes wake the cluster).
const JOB_POLL: Duration = Duration::from_secs(5);
/// How often the repository is read when nothing happens.
pub const INFO_REFRESH: Duration = Duration::from_secs(600);
/// Backups listed in the cluster's status.
pub const LISTED: usize = 10;

/// (pure) The objects naming cluster `cluster` of `namespace` (by `spec_cluster`), oldest
/// first (creation time, then name): the order backups and restores are run in.
pub fn of_cluster<K: kube::Resource>(
    all: &[Arc<K>],
    namespace: &str,
    cluster: &str,
    spec_cluster: impl Fn(&K) -> &str,
) -> Vec<Arc<K>> {
    let mut mine: Vec<Arc<K>> = all
        .iter()
        .filter(|o| o.namespace().as_deref() == Some(namespace) && spec_cluster(o) == cluster)
        .cloned()
        .collect();
    mine.sort_by(|a, b| {
        let at = |x: &K| x.meta().creation_timestamp.as_ref().map(|t| t.0);
        (at(a), a.name_any()).cmp(&(at(b), b.name_any()))
    });
    mine
}

/// (pure) The cluster's backups, oldest first.
pub fn backups_of(
    all: &[Arc<PostgresBackup>],
    namespace: &str,
    cluster: &str,
) -> Vec<Arc<PostgresBackup>> {
    of_cluster(all, namespace, cluster, |b| b.spec.cluster.as_str())
}

fn phase(b: &PostgresBackup) -> Option<BackupPhase> {
    b.status.as_ref().and_then(|s| s.phase)
}

fn finished(b: &PostgresBackup) -> bool {
    matches!(phase(b), Some(BackupPhase::Completed | BackupPhase::Failed))
}

/// The backup the running `Backup` operation runs.
fn running(pass: &PostgresPass) -> Option<String> {
    pass.core
        .status
        .operation
        .as_ref()
        .filter(|op| op.kind == OperationKind::Backup)
        .and_then(|op| op.change.backup.clone())
}

/// Why the last `Backup` operation for `name` failed, if it did.
fn failed_operation(pass: &PostgresPass, name: &str) -> Option<String> {
    crate::operation::failed_backup(&pass.core.status, name)
}

pub use crate::clock::human_duration;

fn unix(seconds: i64) -> Option<String> {
    jiff::Timestamp::from_second(seconds).ok().map(format_time)
}

/// (pure) A completed backup's status from its set in the repository.
pub fn completed(
    mut status: PostgresBackupStatus,
    set: &BackupSet,
    now: jiff::Timestamp,
) -> PostgresBackupStatus {
    status.phase = Some(BackupPhase::Completed);
    status.message = Some(format!("backup {} is in the repository", set.label));
    status.error = None;
    status.label = Some(set.label.clone());
    status.type_ = BackupType::parse(&set.type_);
    status.start_time = unix(set.start);
    status.stop_time = unix(set.stop);
    status.wal_start.clone_from(&set.wal_start);
    status.wal_stop.clone_from(&set.wal_stop);
    status.lsn_start.clone_from(&set.lsn_start);
    status.lsn_stop.clone_from(&set.lsn_stop);
    status.size = Some(set.size);
    status.delta_size = Some(set.delta);
    status.repository_size = Some(set.repo_size);
    status.repository_delta_size = Some(set.repo_delta);
    status.duration = Some(human_duration(set.stop - set.start));
    status.finished_at = Some(format_time(now));
    status
}

/// (pure) The cluster's view of its repository from `pgbackrest info`.
pub fn summarize(info: &RepoInfo, status: &mut BackupsStatus, now: jiff::Timestamp) {
    status.backups = info
        .backups
        .iter()
        .rev()
        .take(LISTED)
        .map(|b| BackupSummary {
            label: b.label.clone(),
            type_: b.type_.clone(),
            backup: b.backup.clone(),
            start_time: unix(b.start).unwrap_or_default(),
            stop_time: unix(b.stop).unwrap_or_default(),
            size: b.size,
            repository_size: b.repo_size,
        })
        .collect();
    status.backup_count = Some(u32::try_from(info.backups.len()).unwrap_or(u32::MAX));
    status.first_recoverability_point = info.backups.first().and_then(|b| unix(b.stop));
    status.last_successful_backup = info.backups.last().and_then(|b| unix(b.stop));
    status.wal_min.clone_from(&info.wal_min);
    status.wal_max.clone_from(&info.wal_max);
    status.info_time = Some(format_time(now));
}

/// The last words of a failed Job (backup, restore, clone): its newest Pod's termination
/// message.
pub fn last_words(pass: &PostgresPass, job: &Job) -> Option<String> {
    let uid = job.uid()?;
    let mut pods: Vec<Arc<CachedPod>> = pass
        .stores
        .pods
        .of_instance(&pass.core.namespace, &pass.core.name)
        .into_iter()
        .filter(|p| p.owner_references().iter().any(|o| o.uid == uid))
        .collect();
    pods.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
    termination_message(pods.last()?)
}

/// A Pod's termination message (a pgBackRest Job's log tail): its `ERROR:` lines if it has
/// any, else all its lines, joined with ` | `.
pub fn termination_message(pod: &impl PodParts) -> Option<String> {
    let message = raw_termination_message(pod)?;
    let errors: Vec<&str> = message
        .split(" | ")
        .filter(|l| l.contains("ERROR:"))
        .collect();
    Some(if errors.is_empty() {
        message
    } else {
        errors.join(" | ")
    })
}

fn raw_termination_message(pod: &impl PodParts) -> Option<String> {
    pod.pod_status()?
        .container_statuses
        .as_ref()?
        .iter()
        .find_map(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone())
        .map(|m| {
            m.trim()
                .lines()
                .filter(|l| !l.trim().is_empty())
                .collect::<Vec<_>>()
                .join(" | ")
        })
}

async fn write_status(
    pass: &PostgresPass,
    backup: &PostgresBackup,
    status: PostgresBackupStatus,
) -> Result<(), Error> {
    if backup.status.as_ref() == Some(&status) {
        return Ok(());
    }
    patch_status::<PostgresBackup>(pass, &backup.name_any(), &status).await
}

/// Merges `status` into the status of the `K` named `name` (a user's object: a backup or a
/// restore). One that was deleted meanwhile is left alone.
pub async fn patch_status<K>(
    pass: &PostgresPass,
    name: &str,
    status: &impl serde::Serialize,
) -> Result<(), Error>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let api: Api<K> = pass.ctx.api(&pass.core.namespace);
    let patch = serde_json::json!({ "status": status });
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(Error::kube(
            "update status",
            format!("{} {}/{name}", K::kind(&()), pass.core.namespace),
            source,
        )),
    }
}

fn with(
    backup: &PostgresBackup,
    phase: BackupPhase,
    message: impl Into<String>,
) -> PostgresBackupStatus {
    let mut status = backup.status.clone().unwrap_or_default();
    status.phase = Some(phase);
    status.message = Some(message.into());
    status
}

fn failed(
    backup: &PostgresBackup,
    error: impl Into<String>,
    now: jiff::Timestamp,
) -> PostgresBackupStatus {
    let error = error.into();
    let mut status = with(backup, BackupPhase::Failed, "the backup failed");
    status.error = Some(error);
    status.finished_at = Some(format_time(now));
    status
}

async fn delete_job(pass: &PostgresPass, name: &str) -> Result<(), Error> {
    let jobs: Api<Job> = pass.ctx.api(&pass.core.namespace);
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match jobs.delete(name, &params).await {
        Ok(_) | Err(kube::Error::Api(_)) => Ok(()),
        Err(source) => Err(Error::kube(
            "delete Job",
            format!("{}/{name}", pass.core.namespace),
            source,
        )),
    }
}

fn repo_host(pass: &PostgresPass) -> RepoHost {
    RepoHost {
        namespace: pass.core.namespace.clone(),
        pod: pass.names.repo(),
    }
}

/// Ends the running operation, naming the backup's label, and queues the backup's Event.
fn conclude(
    pass: &mut PostgresPass,
    name: &str,
    label: Option<String>,
    phase: OperationPhase,
    message: String,
) {
    if let Some(op) = pass
        .core
        .status
        .operation
        .as_mut()
        .filter(|op| op.kind == OperationKind::Backup)
    {
        op.change.backup_label = label;
    }
    let (type_, reason) = match phase {
        OperationPhase::Succeeded => (EventType::Normal, "BackupCompleted"),
        _ => (EventType::Warning, "BackupFailed"),
    };
    pass.core
        .event(type_, reason, "Backup", format!("{name}: {message}"));
    pass.core
        .finish_operation(OperationKind::Backup, phase, message);
}

/// Reads the repository and records it in the cluster's status; marks expired backups; a
/// repository without its stanza is reported and the stanza created again.
async fn refresh(
    pass: &mut PostgresPass,
    backups: &[Arc<PostgresBackup>],
) -> Result<Option<RepoInfo>, Error> {
    let host = repo_host(pass);
    let info = match pass.repository()?.info(&host).await {
        Ok(info) => info,
        Err(err) => {
            tracing::warn!(cluster = %pass.object(), error = %err, "could not read the pgBackRest repository");
            return Ok(None);
        }
    };
    let now = pass.core.now;
    if info.stanza_missing() {
        if let Some(b) = pass.status.backups.as_mut()
            && b.stanza.take().is_some()
        {
            b.backups.clear();
            b.backup_count = Some(0);
            pass.core.event(
                EventType::Warning,
                "RepositoryLost",
                "Backup",
                format!(
                    "repository {} has no stanza ({}): the backups it held are gone; the stanza is created again and WAL archiving resumes",
                    host.pod, info.status_message
                ),
            );
            delete_job(pass, &pass.names.stanza_job()).await?;
        }
        return Ok(Some(info));
    }
    if let Some(b) = pass.status.backups.as_mut() {
        summarize(&info, b, now);
    }
    for backup in backups {
        let Some(label) = backup.status.as_ref().and_then(|s| s.label.clone()) else {
            continue;
        };
        if phase(backup) == Some(BackupPhase::Completed)
            && backup.status.as_ref().and_then(|s| s.expired) != Some(true)
            && !info.backups.iter().any(|s| s.label == label)
        {
            let mut status = with(
                backup,
                BackupPhase::Completed,
                format!("backup {label} expired from the repository (retention)"),
            );
            status.expired = Some(true);
            write_status(pass, backup, status).await?;
        }
    }
    Ok(Some(info))
}

/// A backup's status while its Job runs.
fn running_in(backup: &PostgresBackup, job: &str, now: jiff::Timestamp) -> PostgresBackupStatus {
    let mut status = with(
        backup,
        BackupPhase::Running,
        format!("pgbackrest backup runs in Job {job}"),
    );
    status.job = Some(job.to_owned());
    status.started_at.get_or_insert_with(|| format_time(now));
    status
}

/// Creates the backup claim `<cluster>-backup` of `pg_basebackup`s unless the cache has it.
async fn ensure_backup_claim(
    pass: &PostgresPass,
    valid: &ValidatedPostgresCluster,
) -> Result<(), Error> {
    let ns = &pass.core.namespace;
    let name = pass.names.backup_claim();
    if pass
        .stores
        .claims
        .get(&kube::runtime::reflector::ObjectRef::new(&name).within(ns))
        .is_some()
    {
        return Ok(());
    }
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> = pass.ctx.api(ns);
    match claims
        .create(&PostParams::default(), &basebackup::claim(valid))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(s) => Err(Error::kube(
            "create PersistentVolumeClaim",
            format!("{ns}/{name}"),
            s,
        )),
    }
}

/// Follows the running backup: creates its Job, waits for it, concludes.
async fn follow(
    pass: &mut PostgresPass,
    valid: &ValidatedPostgresCluster,
    backup: &PostgresBackup,
    all: &[Arc<PostgresBackup>],
) -> Result<Outcome, Error> {
    let name = backup.name_any();
    let job_name = pgbackrest::backup_job_name(&name);
    let now = pass.core.now;
    match phase(backup) {
        // Concluded on a pass whose cluster status write did not land.
        Some(BackupPhase::Completed) => {
            let label = backup.status.as_ref().and_then(|s| s.label.clone());
            conclude(
                pass,
                &name,
                label,
                OperationPhase::Succeeded,
                "completed".into(),
            );
            return Ok(Outcome::Continue);
        }
        Some(BackupPhase::Failed) => {
            let why = backup
                .status
                .as_ref()
                .and_then(|s| s.error.clone())
                .unwrap_or_default();
            conclude(pass, &name, None, OperationPhase::Failed, why);
            return Ok(Outcome::Continue);
        }
        _ => {}
    }
    let jobs: Api<Job> = pass.ctx.api(&pass.core.namespace);
    let object = format!("{}/{job_name}", pass.core.namespace);
    let job = jobs
        .get_opt(&job_name)
        .await
        .map_err(|source| Error::kube("get Job", object.clone(), source))?;
    let basebackup = backup.spec.method == BackupMethod::Pgbasebackup;
    let Some(job) = job else {
        if basebackup {
            ensure_backup_claim(pass, valid).await?;
        }
        let desired = if basebackup {
            basebackup::backup_job(backup, valid)
        } else {
            pgbackrest::backup_job(backup, valid)
        };
        let Some(desired) = desired else {
            return Err(Error::Internal {
                message: format!("PostgresBackup {name} has no UID or namespace"),
            });
        };
        match jobs.create(&PostParams::default(), &desired).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(source) => return Err(Error::kube("create Job", object, source)),
        }
        write_status(pass, backup, running_in(backup, &job_name, now)).await?;
        pass.core.advance_operation(
            OperationKind::Backup,
            "RunJob",
            0,
            format!("backup {name} runs in Job {job_name}"),
        );
        return Ok(Outcome::requeue(JOB_POLL, "a backup Job runs"));
    };
    match job_outcome(&job) {
        None => {
            write_status(pass, backup, running_in(backup, &job_name, now)).await?;
            Ok(Outcome::requeue(JOB_POLL, "a backup Job runs"))
        }
        Some(Err(why)) => {
            let words = last_words(pass, &job)
                .map(|w| format!(": {w}"))
                .unwrap_or_default();
            let error = format!("Job {job_name} failed ({why}){words}");
            write_status(pass, backup, failed(backup, error.clone(), now)).await?;
            conclude(pass, &name, None, OperationPhase::Failed, error);
            Ok(Outcome::Continue)
        }
        Some(Ok(())) if basebackup => {
            let mut status = with(
                backup,
                BackupPhase::Completed,
                format!(
                    "pg_basebackup completed into {}:{}/{name}",
                    pass.names.backup_claim(),
                    basebackup::BACKUP_MOUNT
                ),
            );
            status.label = Some(name.clone());
            status.finished_at = Some(format_time(now));
            status.stop_time = Some(format_time(now));
            status.start_time = status.started_at.clone();
            write_status(pass, backup, status).await?;
            conclude(
                pass,
                &name,
                Some(name.clone()),
                OperationPhase::Succeeded,
                format!("pg_basebackup {name} completed"),
            );
            Ok(Outcome::Continue)
        }
        Some(Ok(())) => {
            pass.core.advance_operation(
                OperationKind::Backup,
                "ReadRepository",
                1,
                format!("Job {job_name} completed; reading the repository"),
            );
            let Some(info) = refresh(pass, all).await? else {
                return Ok(Outcome::requeue(
                    SOON * 5,
                    "the repository could not be read yet",
                ));
            };
            let Some(set) = info.backup_of(&name).cloned() else {
                let error = format!(
                    "Job {job_name} completed but the repository holds no backup annotated {}={name} ({})",
                    crate::postgres::repository::BACKUP_ANNOTATION,
                    info.status_message
                );
                write_status(pass, backup, failed(backup, error.clone(), now)).await?;
                conclude(pass, &name, None, OperationPhase::Failed, error);
                return Ok(Outcome::Continue);
            };
            let status = completed(backup.status.clone().unwrap_or_default(), &set, now);
            write_status(pass, backup, status).await?;
            let message = format!(
                "{} backup {} completed in {} ({} bytes, {} bytes in the repository)",
                set.type_,
                set.label,
                human_duration(set.stop - set.start),
                set.size,
                set.repo_size
            );
            conclude(
                pass,
                &name,
                Some(set.label.clone()),
                OperationPhase::Succeeded,
                message,
            );
            Ok(Outcome::Continue)
        }
    }
}

#[async_trait]
impl SubReconciler<PostgresPass> for RunBackups {
    fn name(&self) -> &'static str {
        "RunBackups"
    }

    async fn reconcile(&self, pass: &mut PostgresPass) -> Result<Outcome, Error> {
        let valid = validated(pass)?;
        let now = pass.core.now;
        let all = pass.stores.backups.state();
        let backups = backups_of(&all, &pass.core.namespace, &pass.core.name);
        let running = running(pass);

        if valid.pgbackrest.is_none() {
            for b in backups
                .iter()
                .filter(|b| !finished(b) && b.spec.method == BackupMethod::Pgbackrest)
            {
                let why = format!(
                    "cluster {} has no spec.backups.pgbackrest: there is no repository to back up to",
                    pass.core.name
                );
                pass.core.event(
                    EventType::Warning,
                    "BackupRefused",
                    "Backup",
                    format!("{}: {why}", b.name_any()),
                );
                write_status(pass, b, failed(b, why, now)).await?;
            }
            let pgbackrest_running = running.as_ref().is_some_and(|name| {
                backups
                    .iter()
                    .any(|b| &b.name_any() == name && b.spec.method == BackupMethod::Pgbackrest)
            });
            if pgbackrest_running {
                pass.core.finish_operation(
                    OperationKind::Backup,
                    OperationPhase::Failed,
                    "backups were turned off",
                );
            }
            if !backups
                .iter()
                .any(|b| !finished(b) && b.spec.method == BackupMethod::Pgbasebackup)
            {
                return Ok(Outcome::Continue);
            }
        }

        // Backups marked running that lost their operation: deadline, fail-over, or a lost
        // status write (adopted again below).
        for b in backups
            .iter()
            .filter(|b| phase(b) == Some(BackupPhase::Running))
        {
            let name = b.name_any();
            if running.as_deref() == Some(name.as_str()) {
                continue;
            }
            if let Some(why) = failed_operation(pass, &name) {
                delete_job(pass, &pgbackrest::backup_job_name(&name)).await?;
                write_status(pass, b, failed(b, why, now)).await?;
            }
        }

        if let Some(name) = &running {
            return match backups.iter().find(|b| &b.name_any() == name) {
                Some(b) => follow(pass, &valid, b, &backups).await,
                None => {
                    conclude(
                        pass,
                        name,
                        None,
                        OperationPhase::Failed,
                        format!(
                            "PostgresBackup {name} was deleted while it ran (its Job goes with it)"
                        ),
                    );
                    Ok(Outcome::Continue)
                }
            };
        }

        let waiting: Vec<&Arc<PostgresBackup>> = backups
            .iter()
            .filter(|b| valid.pgbackrest.is_some() || b.spec.method == BackupMethod::Pgbasebackup)
            .filter(|b| match phase(b) {
                None | Some(BackupPhase::Pending) => true,
                Some(BackupPhase::Running) => failed_operation(pass, &b.name_any()).is_none(),
                _ => false,
            })
            .collect();
        let Some(next) = waiting.first().map(|b| (*b).clone()) else {
            let due = pass
                .status
                .backups
                .as_ref()
                .filter(|b| b.stanza.is_some())
                .map(|b| {
                    b.info_time
                        .as_deref()
                        .and_then(parse_time)
                        .is_none_or(|at| {
                            now.duration_since(at).as_secs()
                                >= i64::try_from(INFO_REFRESH.as_secs()).unwrap_or(600)
                        })
                })
                .unwrap_or(false);
            if due {
                refresh(pass, &backups).await?;
            }
            return Ok(Outcome::Continue);
        };

        let stanza = pass
            .status
            .backups
            .as_ref()
            .is_some_and(|b| b.stanza.is_some());
        let writable = pass
            .primary()
            .and_then(|p| pass.instance(&p).map(|v| v.writable()))
            .unwrap_or(false);
        let wait = if valid.paused {
            Some("the cluster is paused".to_owned())
        } else if !stanza && next.spec.method == BackupMethod::Pgbackrest {
            Some(format!(
                "waiting for the stanza in repository {}",
                pass.names.repo()
            ))
        } else if !writable {
            Some("waiting for a writable primary".to_owned())
        } else {
            None
        };
        let wait = match wait {
            Some(why) => Some(why),
            None => {
                let type_ = match next.spec.method {
                    BackupMethod::Pgbackrest => next.spec.type_.as_str(),
                    BackupMethod::Pgbasebackup => "pgbasebackup",
                };
                let started = pass.core.start_operation(OperationRequest {
                    kind: OperationKind::Backup,
                    step: "RunJob".into(),
                    total: 2,
                    change: OperationChange {
                        backup: Some(next.name_any()),
                        backup_type: Some(type_.to_owned()),
                        ..OperationChange::default()
                    },
                    message: format!("{type_} backup {}", next.name_any()),
                });
                match started {
                    Started::New | Started::Resumed => None,
                    Started::Busy(kind) => Some(format!(
                        "waiting for the running {} operation",
                        kind.as_str()
                    )),
                    Started::Blocked(why) => Some(why),
                }
            }
        };
        match wait {
            Some(why) => {
                for (i, b) in waiting.iter().enumerate() {
                    let message = if i == 0 {
                        why.clone()
                    } else {
                        format!("queued behind {}", next.name_any())
                    };
                    if phase(b) != Some(BackupPhase::Running) {
                        write_status(pass, b, with(b, BackupPhase::Pending, message)).await?;
                    }
                }
                Ok(Outcome::requeue(SOON * 5, why))
            }
            None => {
                for b in waiting.iter().skip(1) {
                    write_status(
                        pass,
                        b,
                        with(
                            b,
                            BackupPhase::Pending,
                            format!("queued behind {}", next.name_any()),
                        ),
                    )
                    .await?;
                }
                follow(pass, &valid, &next, &backups).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(65), "1m5s");
        assert_eq!(human_duration(3700), "1h1m40s");
        assert_eq!(human_duration(-3), "0s");
    }
}
