//! TakeSnapshot — takes the snapshot once, as the backup's `Backup` operation (deadline: the
//! operator's backup timeout; progress and deadline in status, so a restarted operator goes on
//! where it was):
//!
//! - it waits (`Pending`, the reason in `status.message`) while another snapshot of the same
//!   cluster runs — one at a time, so a snapshot's pruning never races another's — and while
//!   no voting member is healthy;
//! - it creates the Job `<backup>-snapshot` (`build::snapshot::job`) against a healthy follower
//!   (the leader when it is the only one), the files its `retain` drops listed for removal,
//!   and records `Running`, the member, the file and the start;
//! - when the Job completes it reads the check container's log (`snapshot status` as JSON):
//!   revision, hash, keys and size go to status, the backup is `Completed`, Event
//!   `SnapshotCompleted`; a failed Job, an unreadable status line or the deadline make it
//!   `Failed` with the reason (the failed container's last words), Event `SnapshotFailed`,
//!   and the Job is deleted at the deadline;
//! - a Job found without a `Running` record (the status write of the pass that made it was
//!   lost) is adopted, never created twice.
//!
//! Either way the operation ends with the `backup` webhook, `cluster` naming the
//! `EtcdCluster`.

use async_trait::async_trait;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams, PropagationPolicy};
use steward_api::common::{OperationChange, OperationKind, OperationPhase};
use steward_api::etcd::{SnapshotFile, SnapshotPhase};

use super::{SOON, beyond_retention, pick_member, running_sibling, siblings};
use crate::clock::{format_time, human_duration, parse_time};
use crate::error::Error;
use crate::etcd::backup::SnapshotPass;
use crate::etcd::build::snapshot::{
    CHECK_CONTAINER, claim_name, file_name, job, job_name, parse_status,
};
use crate::etcd::names::ClusterNames;
use crate::operation::{OperationRequest, Started};
use crate::pipeline::{Effect, EventType, Outcome, SubReconciler};
use crate::resources::jobs::job_outcome;

/// See the module documentation.
pub struct TakeSnapshot;

#[async_trait]
impl SubReconciler<SnapshotPass> for TakeSnapshot {
    fn name(&self) -> &'static str {
        "TakeSnapshot"
    }

    async fn reconcile(&self, pass: &mut SnapshotPass) -> Result<Outcome, Error> {
        if pass.finished() {
            return Ok(Outcome::Continue);
        }
        let Some(cluster) = pass.cluster.clone() else {
            return Ok(Outcome::Continue);
        };
        let name = pass.core.name.clone();
        let jobs: Api<Job> = pass.ctx.api(&pass.core.namespace);
        let job_object = format!("Job {}/{}", pass.core.namespace, job_name(&name));
        if let Some(why) = expired(pass, &name) {
            match jobs
                .delete(
                    &job_name(&name),
                    &DeleteParams {
                        propagation_policy: Some(PropagationPolicy::Background),
                        ..DeleteParams::default()
                    },
                )
                .await
            {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(source) => return Err(Error::kube("delete", job_object, source)),
            }
            fail(pass, why, false);
            return Ok(Outcome::Continue);
        }
        let live = jobs
            .get_opt(&job_name(&name))
            .await
            .map_err(|source| Error::kube("get", job_object.clone(), source))?;
        let Some(live) = live else {
            if pass.status.phase == Some(SnapshotPhase::Running) {
                fail(
                    pass,
                    format!("the snapshot Job {} was deleted", job_name(&name)),
                    true,
                );
                return Ok(Outcome::Continue);
            }
            return start(pass, &cluster, &jobs, &job_object).await;
        };
        if pass.status.phase != Some(SnapshotPhase::Running) {
            // Adopt the Job a lost status write did not record.
            begin(pass, None);
        }
        match job_outcome(&live) {
            None => {
                let message = match stuck(pass, &job_name(&name)).await? {
                    Some(why) => format!(
                        "the snapshot Job {} cannot start a container: {why}",
                        job_name(&name)
                    ),
                    None => format!("the snapshot Job {} runs", job_name(&name)),
                };
                pass.status.message = Some(message.clone());
                pass.core
                    .advance_operation(OperationKind::Backup, "SnapshotJob", 0, message);
                Ok(Outcome::requeue(SOON, "the snapshot Job runs"))
            }
            Some(Err(why)) => {
                let words = last_words(pass, &job_name(&name)).await?;
                fail(
                    pass,
                    match words {
                        Some(w) => format!("the snapshot Job failed: {w}"),
                        None => format!("the snapshot Job failed: {why}"),
                    },
                    true,
                );
                Ok(Outcome::Continue)
            }
            Some(Ok(())) => {
                let log = check_log(pass, &job_name(&name)).await?;
                match log.as_deref().map(parse_status) {
                    Some(Ok(file)) => {
                        let now = pass.core.now;
                        let s = &mut pass.status;
                        s.phase = Some(SnapshotPhase::Completed);
                        s.revision = Some(file.revision);
                        s.hash = Some(file.hash);
                        s.total_keys = Some(file.total_keys);
                        s.size_bytes = Some(file.total_size);
                        s.completion_time = Some(format_time(now));
                        s.duration = took(s.start_time.as_deref(), now);
                        s.error = None;
                        let message = format!(
                            "snapshot at revision {} ({} keys, {} bytes) from member {}",
                            file.revision,
                            file.total_keys,
                            file.total_size,
                            s.member.as_deref().unwrap_or("?")
                        );
                        s.message = Some(message.clone());
                        pass.core.event(
                            EventType::Normal,
                            "SnapshotCompleted",
                            "Backup",
                            message.clone(),
                        );
                        finish(pass, OperationPhase::Succeeded, message);
                    }
                    Some(Err(why)) => fail(pass, format!("the snapshot is unusable: {why}"), true),
                    None => fail(
                        pass,
                        "the snapshot Job completed but its Pod is gone: its check cannot be read"
                            .into(),
                        true,
                    ),
                }
                Ok(Outcome::Continue)
            }
        }
    }
}

/// Creates the Job (or says what it waits for).
async fn start(
    pass: &mut SnapshotPass,
    cluster: &steward_api::etcd::EtcdCluster,
    jobs: &Api<Job>,
    job_object: &str,
) -> Result<Outcome, Error> {
    let others = siblings(pass).await?;
    if let Some(other) = running_sibling(&others) {
        return Ok(wait(
            pass,
            format!("waits for snapshot {other} of the cluster to finish"),
        ));
    }
    let members = cluster
        .status
        .as_ref()
        .map(|s| s.members.clone())
        .unwrap_or_default();
    let Some(member) = pick_member(&members) else {
        return Ok(wait(
            pass,
            format!(
                "no voting member of EtcdCluster {} is healthy to take a snapshot from",
                pass.backup.spec.cluster
            ),
        ));
    };
    let names = ClusterNames::new(
        cluster.name_any(),
        pass.core.namespace.clone(),
        pass.ctx.cluster_domain.clone(),
    );
    let prune: Vec<String> = beyond_retention(&pass.backup, &others)
        .into_iter()
        .map(|(_, file)| file)
        .collect();
    let timeout = pass
        .core
        .timeouts
        .for_kind(OperationKind::Backup, cluster.spec.timeouts.as_ref());
    let Some(new) = job(
        &pass.backup,
        cluster,
        &names.client_url(&member),
        &prune,
        timeout.as_secs(),
    ) else {
        return Err(Error::Internal {
            message: "the backup has no UID or namespace".into(),
        });
    };
    match jobs.create(&PostParams::default(), &new).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(source) => return Err(Error::kube("create", job_object.to_owned(), source)),
    }
    begin(pass, Some(member.clone()));
    pass.core.event(
        EventType::Normal,
        "SnapshotStarted",
        "Backup",
        format!(
            "taking a snapshot of EtcdCluster {} from member {member}{}",
            pass.backup.spec.cluster,
            if prune.is_empty() {
                String::new()
            } else {
                format!("; retain drops {}", prune.join(", "))
            }
        ),
    );
    Ok(Outcome::requeue(SOON, "the snapshot Job starts"))
}

/// Records the snapshot as running (the operation, the file, the member when known).
fn begin(pass: &mut SnapshotPass, member: Option<String>) {
    let name = pass.core.name.clone();
    let started = pass.core.start_operation(OperationRequest {
        kind: OperationKind::Backup,
        step: "SnapshotJob".into(),
        total: 1,
        change: OperationChange {
            backup: Some(name.clone()),
            backup_type: Some("snapshot".into()),
            ..OperationChange::default()
        },
        message: format!(
            "snapshot of EtcdCluster {} to claim {}",
            pass.backup.spec.cluster,
            claim_name(&pass.backup)
        ),
    });
    if started == Started::New {
        pass.status.start_time = Some(format_time(pass.core.now));
    }
    let s = &mut pass.status;
    s.phase = Some(SnapshotPhase::Running);
    s.message = Some(format!("the snapshot Job {} runs", job_name(&name)));
    s.location = Some(SnapshotFile {
        claim: claim_name(&pass.backup),
        file: file_name(&name),
    });
    if member.is_some() {
        s.member = member;
    }
}

fn wait(pass: &mut SnapshotPass, why: String) -> Outcome {
    pass.status.phase = Some(SnapshotPhase::Pending);
    pass.status.message = Some(why.clone());
    Outcome::requeue(SOON * 3, why)
}

/// Why the running snapshot's operation ended by its deadline, if it did.
fn expired(pass: &SnapshotPass, name: &str) -> Option<String> {
    if pass.status.phase != Some(SnapshotPhase::Running) || pass.core.status.operation.is_some() {
        return None;
    }
    crate::operation::failed_backup(&pass.core.status, name)
}

/// Marks the backup failed; `end` finishes the operation too (the deadline already did).
fn fail(pass: &mut SnapshotPass, why: String, end: bool) {
    let now = pass.core.now;
    let s = &mut pass.status;
    s.phase = Some(SnapshotPhase::Failed);
    s.error = Some(why.clone());
    s.message = None;
    s.completion_time = Some(format_time(now));
    s.duration = took(s.start_time.as_deref(), now);
    pass.core
        .event(EventType::Warning, "SnapshotFailed", "Backup", why.clone());
    if end {
        finish(pass, OperationPhase::Failed, why);
    }
}

/// Finishes the operation; its webhook names the cluster, not the backup object.
fn finish(pass: &mut SnapshotPass, phase: OperationPhase, message: String) {
    let before = pass.core.effects.len();
    pass.core
        .finish_operation(OperationKind::Backup, phase, message);
    let cluster = pass.backup.spec.cluster.clone();
    let file = pass.status.location.as_ref().map(|l| l.file.clone());
    for effect in pass.core.effects.iter_mut().skip(before) {
        if let Effect::Webhook(payload) = effect {
            payload.cluster.clone_from(&cluster);
            if let Some(data) = payload.backup_data.as_mut()
                && phase == OperationPhase::Succeeded
            {
                data.label.clone_from(&file);
            }
        }
    }
}

fn took(start: Option<&str>, now: jiff::Timestamp) -> Option<String> {
    let start = parse_time(start?)?;
    let seconds = now.duration_since(start).as_secs();
    Some(human_duration(seconds))
}

/// The Job's newest Pod.
async fn job_pod(pass: &SnapshotPass, job: &str) -> Result<Option<Pod>, Error> {
    let pods: Api<Pod> = pass.ctx.api(&pass.core.namespace);
    let list = pods
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await
        .map_err(|source| {
            Error::kube(
                "list",
                format!("Pods of Job {}/{job}", pass.core.namespace),
                source,
            )
        })?;
    Ok(list
        .items
        .into_iter()
        .max_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0)))
}

/// The check container's log (`snapshot status` as JSON); `None` when the Pod is gone.
async fn check_log(pass: &SnapshotPass, job: &str) -> Result<Option<String>, Error> {
    let Some(pod) = job_pod(pass, job).await? else {
        return Ok(None);
    };
    let pods: Api<Pod> = pass.ctx.api(&pass.core.namespace);
    let name = pod.name_any();
    let log = pods
        .logs(
            &name,
            &LogParams {
                container: Some(CHECK_CONTAINER.into()),
                tail_lines: Some(20),
                ..LogParams::default()
            },
        )
        .await
        .map_err(|source| {
            Error::kube(
                "read the log of",
                format!("Pod {}/{name}", pass.core.namespace),
                source,
            )
        })?;
    Ok(Some(log))
}

/// Why a container of the Job's Pod cannot start, when the kubelet says so (an image it cannot
/// pull or run, a configuration it cannot build), as `container: Reason: message`. The Job
/// keeps its deadline: a kubelet may still recover; the backup says what it waits for.
async fn stuck(pass: &SnapshotPass, job: &str) -> Result<Option<String>, Error> {
    const STUCK: [&str; 6] = [
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    ];
    let Some(pod) = job_pod(pass, job).await? else {
        return Ok(None);
    };
    let status = pod.status.unwrap_or_default();
    Ok(status
        .init_container_statuses
        .unwrap_or_default()
        .into_iter()
        .chain(status.container_statuses.unwrap_or_default())
        .find_map(|c| {
            let waiting = c.state?.waiting?;
            let reason = waiting.reason.filter(|r| STUCK.contains(&r.as_str()))?;
            Some(format!(
                "{}: {reason}: {}",
                c.name,
                waiting.message.unwrap_or_default()
            ))
        }))
}

/// What the failed container of the Job's Pod said (its termination message: the log's
/// tail), as `container: words`.
async fn last_words(pass: &SnapshotPass, job: &str) -> Result<Option<String>, Error> {
    let Some(pod) = job_pod(pass, job).await? else {
        return Ok(None);
    };
    let status = pod.status.unwrap_or_default();
    let all = status
        .init_container_statuses
        .unwrap_or_default()
        .into_iter()
        .chain(status.container_statuses.unwrap_or_default());
    for c in all {
        if let Some(t) = c.state.and_then(|s| s.terminated)
            && t.exit_code != 0
        {
            let words = t
                .message
                .unwrap_or_default()
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" | ");
            let words = if words.is_empty() {
                format!("exit code {}", t.exit_code)
            } else {
                words
            };
            return Ok(Some(format!("{}: {words}", c.name)));
        }
    }
    Ok(None)
}
