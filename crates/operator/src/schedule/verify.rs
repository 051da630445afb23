//! `verify` runs: backups proven restorable. A run `<schedule>-<slot>` restores the cluster's
//! newest backup into scratch objects of its own (a claim, a restore Job, a Pod running
//! PostgreSQL on the restored data: [`crate::postgres::build::verify`]), waits until recovery
//! has replayed the archive and the scratch instance promoted, runs the check query as
//! Steward's superuser, deletes the scratch objects, and records the outcome: the run in the
//! schedule's status, `status.lastVerifiedRestore` on the cluster, an Event and a
//! `restore_verified` webhook — on success and on failure. The cluster's own instances and
//! claims are never touched.
//!
//! A run's progress is its objects (the Job's state, the Pod's) and its entry in the
//! schedule's status, so a restarted operator carries on where it was; the deadline is the
//! slot plus `spec.verify.timeoutSeconds`.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use steward_api::postgres::{PostgresCluster, VerifiedRestore};
use steward_api::schedule::{Schedule, ScheduleRun, ScheduleStatus, VerifySchedule};

use crate::clock::{format_time, parse_time};
use crate::error::Error;
use crate::pipeline::{Effect, EventType};
use crate::postgres::admin::{ConnectionTarget, PgAdminError};
use crate::postgres::build::{pgbackrest, verify as build};
use crate::postgres::names::{PORT, SUPERUSER};
use crate::postgres::steps::run_backups::termination_message;
use crate::postgres::validate::validate;
use crate::resources::labels::{COMPONENT, MANAGED_BY, MANAGER};
use crate::resources::secrets::{PASSWORD_KEY, key_of};
use crate::runtime::context::Context;
use crate::webhook::{VerifyData, WebhookEvent, WebhookPayload, WebhookStatus};

use super::{SCHEDULE_LABEL, SLOT_LABEL, event};

/// The component label of a run's scratch objects.
pub const VERIFY_COMPONENT: &str = "verify";

/// The check run when the schedule names none.
pub const DEFAULT_CHECK: &str = "SELECT count(*) FROM pg_class";

/// The labels of a run's scratch objects.
pub fn labels(schedule: &str, slot: Timestamp) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.to_owned(), MANAGER.to_owned()),
        (COMPONENT.to_owned(), VERIFY_COMPONENT.to_owned()),
        (SCHEDULE_LABEL.to_owned(), schedule.to_owned()),
        (SLOT_LABEL.to_owned(), slot.as_second().to_string()),
    ])
}

fn options(schedule: &Schedule) -> VerifySchedule {
    schedule.spec.verify.clone().unwrap_or(VerifySchedule {
        query: None,
        expected: None,
        database: steward_api::policy::default_database(),
        timeout_seconds: 1800,
    })
}

/// The newest backup in the cluster's repository (its label), as `status.backups` lists it.
fn newest_backup(cluster: &PostgresCluster) -> Option<String> {
    let backups = cluster.status.as_ref()?.backups.as_ref()?;
    backups
        .backups
        .iter()
        .max_by(|a, b| a.stop_time.cmp(&b.stop_time))
        .map(|b| b.label.clone())
}

fn kube_err(action: &'static str, object: String) -> impl FnOnce(kube::Error) -> Error {
    move |s| Error::kube(action, object, s)
}

/// Starts run `run` of slot `slot`: the scratch claim and the restore Job of the newest
/// backup. A cluster with no backup yet gives a run that failed at once (reported like any).
pub async fn start(
    ctx: &Context,
    schedule: &Schedule,
    cluster: &PostgresCluster,
    run: &str,
    slot: Timestamp,
) -> Result<ScheduleRun, Error> {
    let ns = schedule.namespace().unwrap_or_default();
    let mut entry = ScheduleRun {
        name: run.to_owned(),
        slot: format_time(slot),
        phase: "Running".into(),
        ..ScheduleRun::default()
    };
    let Some(label) = newest_backup(cluster) else {
        entry.phase = "Failed".into();
        entry.message = Some(format!(
            "cluster {} has no backup in its repository to verify",
            cluster.name_any()
        ));
        return Ok(entry);
    };
    let valid = match validate(cluster) {
        Ok(v) => v,
        Err(why) => {
            entry.phase = "Failed".into();
            entry.message = Some(format!("cluster {}: {why}", cluster.name_any()));
            return Ok(entry);
        }
    };
    let labels = labels(&schedule.name_any(), slot);
    let (Some(claim), Some(job)) = (
        build::claim(schedule, &valid, run, &labels),
        pgbackrest::verify_restore_job(schedule, &valid, run, run, &label, &labels),
    ) else {
        return Err(Error::Internal {
            message: format!("the scratch objects of {ns}/{run} could not be built"),
        });
    };
    let claims: Api<PersistentVolumeClaim> = ctx.api(&ns);
    match claims.create(&PostParams::default(), &claim).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(s) => {
            return Err(Error::kube(
                "create PersistentVolumeClaim",
                format!("{ns}/{run}"),
                s,
            ));
        }
    }
    let jobs: Api<Job> = ctx.api(&ns);
    match jobs.create(&PostParams::default(), &job).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(s) => return Err(Error::kube("create Job", format!("{ns}/{run}"), s)),
    }
    entry.backup = Some(label.clone());
    entry.message = Some(format!("restoring backup {label}"));
    Ok(entry)
}

/// Where a running run is.
enum Progress {
    /// Still going: what it waits for.
    Waiting(String),
    /// Done.
    Done(Outcome),
}

/// How a run ended.
#[derive(Default)]
struct Outcome {
    error: Option<String>,
    recovered_to: Option<String>,
    result: Option<String>,
}

impl Outcome {
    fn failed(why: impl Into<String>) -> Progress {
        Progress::Done(Self {
            error: Some(why.into()),
            ..Self::default()
        })
    }
}

/// Moves every running `verify` run on; finished ones are recorded (run, cluster status, Event,
/// webhook). Returns whether a run is still going.
pub async fn observe(
    ctx: &Context,
    schedule: &Schedule,
    cluster: Option<&PostgresCluster>,
    status: &mut ScheduleStatus,
    effects: &mut Vec<Effect>,
) -> Result<bool, Error> {
    let mut running = false;
    let now = ctx.clock.now();
    let opts = options(schedule);
    for i in 0..status.runs.len() {
        if status.runs[i].phase != "Running" {
            continue;
        }
        let run = status.runs[i].clone();
        let slot = parse_time(&run.slot).unwrap_or(now);
        let progress = match cluster {
            None => Outcome::failed(format!(
                "cluster {} no longer exists",
                schedule.spec.cluster
            )),
            Some(cluster) => step(ctx, schedule, cluster, &run, slot, &opts).await?,
        };
        let deadline = slot.as_second() + i64::from(opts.timeout_seconds);
        let progress = match progress {
            Progress::Waiting(what) if now.as_second() > deadline => Outcome::failed(format!(
                "timed out after {}s while {what}",
                opts.timeout_seconds
            )),
            p => p,
        };
        match progress {
            Progress::Waiting(what) => {
                status.runs[i].message = Some(what);
                running = true;
            }
            Progress::Done(outcome) => {
                let entry = &mut status.runs[i];
                finish(ctx, schedule, cluster, entry, outcome, slot, &opts, effects).await?;
            }
        }
    }
    Ok(running)
}

/// One look at a running run.
async fn step(
    ctx: &Context,
    schedule: &Schedule,
    cluster: &PostgresCluster,
    run: &ScheduleRun,
    slot: Timestamp,
    opts: &VerifySchedule,
) -> Result<Progress, Error> {
    let ns = schedule.namespace().unwrap_or_default();
    let object = format!("{ns}/{}", run.name);
    let backup = run.backup.clone().unwrap_or_default();
    let jobs: Api<Job> = ctx.api(&ns);
    let Some(job) = jobs
        .get_opt(&run.name)
        .await
        .map_err(kube_err("get Job", object.clone()))?
    else {
        return Ok(Outcome::failed(format!(
            "the restore Job {} is gone",
            run.name
        )));
    };
    let job_status = job.status.clone().unwrap_or_default();
    if job_status.failed.unwrap_or(0) > 0 {
        let why = job_pod_message(ctx, &ns, &job)
            .await?
            .unwrap_or_else(|| "the restore Job failed".into());
        return Ok(Outcome::failed(format!(
            "restoring backup {backup} failed: {why}"
        )));
    }
    if job_status.succeeded.unwrap_or(0) == 0 {
        return Ok(Progress::Waiting(format!("restoring backup {backup}")));
    }
    let pods: Api<Pod> = ctx.api(&ns);
    let Some(pod) = pods
        .get_opt(&run.name)
        .await
        .map_err(kube_err("get Pod", object.clone()))?
    else {
        let valid = match validate(cluster) {
            Ok(v) => v,
            Err(why) => return Ok(Outcome::failed(format!("cluster: {why}"))),
        };
        let labels = labels(&schedule.name_any(), slot);
        let Some(pod) = build::pod(schedule, &valid, &run.name, &labels) else {
            return Err(Error::Internal {
                message: format!("the scratch Pod {object} could not be built"),
            });
        };
        match pods.create(&PostParams::default(), &pod).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(s) => return Err(Error::kube("create Pod", object, s)),
        }
        return Ok(Progress::Waiting(format!(
            "starting PostgreSQL on the restored backup {backup}"
        )));
    };
    let pod_status = pod.status.clone().unwrap_or_default();
    if matches!(pod_status.phase.as_deref(), Some("Failed" | "Succeeded")) {
        let why = termination_message(&pod).unwrap_or_else(|| "PostgreSQL exited".into());
        return Ok(Outcome::failed(format!(
            "PostgreSQL on the restored backup {backup} stopped: {why}"
        )));
    }
    let Some(ip) = pod_status.pod_ip.filter(|ip| !ip.is_empty()) else {
        return Ok(Progress::Waiting(format!(
            "starting PostgreSQL on the restored backup {backup}"
        )));
    };
    let Some(password) = superuser_password(ctx, &ns, cluster).await? else {
        return Ok(Outcome::failed(format!(
            "the superuser Secret of cluster {} is missing",
            cluster.name_any()
        )));
    };
    let target =
        ConnectionTarget::new(ip, u16::try_from(PORT).unwrap_or(5432), SUPERUSER, password);
    check(ctx, &target, opts, &backup).await
}

/// Connects to the scratch instance: waits while it recovers, then runs the check.
async fn check(
    ctx: &Context,
    target: &ConnectionTarget,
    opts: &VerifySchedule,
    backup: &str,
) -> Result<Progress, Error> {
    let timeout = ctx.database_timeout;
    let recovering = || Progress::Waiting(format!("recovering the restored backup {backup}"));
    let connector = crate::postgres::admin::connector(ctx)?;
    let admin = match connector.connect(target, timeout).await {
        Ok(a) => a,
        // Starting, or replaying WAL without hot standby: not an answer yet.
        Err(PgAdminError::Unavailable(_)) => return Ok(recovering()),
        Err(e) if e.to_string().contains("starting up") => return Ok(recovering()),
        Err(e) => return Ok(Outcome::failed(format!("connecting: {e}"))),
    };
    match admin.server_info().await {
        Ok(info) if info.in_recovery => return Ok(recovering()),
        Ok(_) => {}
        Err(e) if e.is_transient() => return Ok(recovering()),
        Err(e) => return Ok(Outcome::failed(format!("reading the instance: {e}"))),
    }
    let recovered_to = admin
        .run_sql("SELECT pg_last_xact_replay_timestamp()", timeout)
        .await
        .ok()
        .and_then(|o| o.first);
    let query = opts
        .query
        .clone()
        .unwrap_or_else(|| DEFAULT_CHECK.to_owned());
    let checked = match connector
        .connect(&target.on_database(&opts.database), timeout)
        .await
    {
        Ok(a) => a.run_sql(&query, Duration::from_secs(60)).await,
        Err(e) => Err(e),
    };
    let outcome = match checked {
        Err(e) => Outcome {
            error: Some(format!("the check failed: {e}")),
            recovered_to,
            result: None,
        },
        Ok(out) => {
            let result = out.first.clone();
            let error = match (&opts.expected, &result) {
                (Some(want), got) if got.as_deref() != Some(want.as_str()) => Some(format!(
                    "the check returned {}, expected {want}",
                    got.as_deref().unwrap_or("NULL")
                )),
                _ => None,
            };
            Outcome {
                error,
                recovered_to,
                result: Some(result.unwrap_or_else(|| "NULL".into())),
            }
        }
    };
    Ok(Progress::Done(outcome))
}

async fn superuser_password(
    ctx: &Context,
    ns: &str,
    cluster: &PostgresCluster,
) -> Result<Option<String>, Error> {
    let name = crate::postgres::names::ClusterNames::new(cluster.name_any(), ns).superuser_secret();
    let secrets: Api<Secret> = ctx.api(ns);
    let secret = secrets
        .get_opt(&name)
        .await
        .map_err(kube_err("get Secret", format!("{ns}/{name}")))?;
    Ok(secret
        .as_ref()
        .and_then(|s| key_of(s, PASSWORD_KEY))
        .map(|p| p.expose().to_owned()))
}

/// What the Job's (last) Pod said when it ended.
async fn job_pod_message(ctx: &Context, ns: &str, job: &Job) -> Result<Option<String>, Error> {
    let Some(uid) = job.uid() else {
        return Ok(None);
    };
    let pods: Api<Pod> = ctx.api(ns);
    let selector = job
        .labels()
        .get(SCHEDULE_LABEL)
        .map(|s| format!("{SCHEDULE_LABEL}={s}"))
        .unwrap_or_default();
    let mut mine: Vec<Pod> = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(kube_err("list Pods", format!("{ns}/{}", job.name_any())))?
        .items
        .into_iter()
        .filter(|p| p.owner_references().iter().any(|o| o.uid == uid))
        .collect();
    mine.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
    Ok(mine.last().and_then(termination_message))
}

/// Records a finished run: the entry, the cluster's `lastVerifiedRestore`, an Event and the
/// webhook. The scratch objects are deleted by [`sweep`] once status records the end.
#[allow(clippy::too_many_arguments)]
async fn finish(
    ctx: &Context,
    schedule: &Schedule,
    cluster: Option<&PostgresCluster>,
    entry: &mut ScheduleRun,
    outcome: Outcome,
    slot: Timestamp,
    opts: &VerifySchedule,
    effects: &mut Vec<Effect>,
) -> Result<(), Error> {
    let now = ctx.clock.now();
    let ok = outcome.error.is_none();
    entry.phase = if ok { "Succeeded" } else { "Failed" }.into();
    entry.finished_at = Some(format_time(now));
    entry.duration_ms = u64::try_from((now.as_millisecond() - slot.as_millisecond()).max(0)).ok();
    let backup = entry.backup.clone();
    entry.message = Some(match &outcome.error {
        None => format!(
            "backup {} restored and recovered to {}; check returned {}",
            backup.as_deref().unwrap_or("?"),
            outcome
                .recovered_to
                .as_deref()
                .unwrap_or("the end of its archive"),
            outcome.result.as_deref().unwrap_or("NULL"),
        ),
        Some(e) => e.clone(),
    });
    let verified = VerifiedRestore {
        schedule: schedule.name_any(),
        run: entry.name.clone(),
        backup: backup.clone(),
        phase: entry.phase.clone(),
        recovered_to: outcome.recovered_to.clone(),
        recovery_seconds: entry.duration_ms.map(|ms| ms / 1000),
        check: Some(
            opts.query
                .clone()
                .unwrap_or_else(|| DEFAULT_CHECK.to_owned()),
        ),
        result: outcome.result.clone(),
        error: outcome.error.clone(),
        finished_at: format_time(now),
    };
    if let Some(cluster) = cluster {
        record_on_cluster(ctx, cluster, &verified).await?;
    }
    let ns = schedule.namespace().unwrap_or_default();
    event(
        effects,
        if ok {
            EventType::Normal
        } else {
            EventType::Warning
        },
        if ok {
            "RestoreVerified"
        } else {
            "RestoreVerificationFailed"
        },
        format!(
            "{}: {}",
            entry.name,
            entry.message.clone().unwrap_or_default()
        ),
    );
    effects.push(Effect::Webhook(WebhookPayload {
        cluster: schedule.spec.cluster.clone(),
        event: WebhookEvent::RestoreVerified,
        namespace: ns,
        scale_data: None,
        status: if ok {
            WebhookStatus::Success
        } else {
            WebhookStatus::Failure
        },
        upgrade_data: None,
        failover_data: None,
        backup_data: None,
        verify_data: Some(VerifyData {
            schedule: schedule.name_any(),
            run: entry.name.clone(),
            backup,
            recovered_to: outcome.recovered_to,
            result: outcome.result,
            error: outcome.error,
        }),
    }));
    Ok(())
}

/// Writes `status.lastVerifiedRestore` on the cluster (a merge patch of that field alone; the
/// version written is remembered, so the cluster's next pass starts from it).
async fn record_on_cluster(
    ctx: &Context,
    cluster: &PostgresCluster,
    verified: &VerifiedRestore,
) -> Result<(), Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let api: Api<PostgresCluster> = ctx.api(&ns);
    let patch = serde_json::json!({ "status": { "lastVerifiedRestore": verified } });
    match api
        .patch_status(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(written) => {
            ctx.remember_version(&written);
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(s) => Err(Error::kube(
            "update status",
            format!("PostgresCluster {ns}/{}", cluster.name_any()),
            s,
        )),
    }
}

/// Deletes the scratch objects of runs that are no longer running (after status recorded
/// their end; a run's objects are found by the schedule's label).
pub async fn sweep(
    ctx: &Context,
    schedule: &Schedule,
    status: &ScheduleStatus,
) -> Result<(), Error> {
    let ns = schedule.namespace().unwrap_or_default();
    let selector = format!(
        "{SCHEDULE_LABEL}={},{COMPONENT}={VERIFY_COMPONENT}",
        schedule.name_any()
    );
    let lp = ListParams::default().labels(&selector);
    let done = |name: &str| {
        !status
            .runs
            .iter()
            .any(|r| r.name == name && r.phase == "Running")
    };
    let background = DeleteParams::background();
    let pods: Api<Pod> = ctx.api(&ns);
    let jobs: Api<Job> = ctx.api(&ns);
    let claims: Api<PersistentVolumeClaim> = ctx.api(&ns);
    let object = format!("{ns}/{}", schedule.name_any());
    for p in pods
        .list_metadata(&lp)
        .await
        .map_err(kube_err("list Pods", object.clone()))?
        .items
    {
        // A restore Job's Pods go with their Job.
        let owned_by_job = p.owner_references().iter().any(|o| o.kind == "Job");
        if !owned_by_job && done(&p.name_any()) && p.meta().deletion_timestamp.is_none() {
            ignore_gone(
                pods.delete(&p.name_any(), &background).await,
                "delete Pod",
                &ns,
            )?;
        }
    }
    for j in jobs
        .list_metadata(&lp)
        .await
        .map_err(kube_err("list Jobs", object.clone()))?
        .items
    {
        if done(&j.name_any()) && j.meta().deletion_timestamp.is_none() {
            ignore_gone(
                jobs.delete(&j.name_any(), &background).await,
                "delete Job",
                &ns,
            )?;
        }
    }
    for c in claims
        .list_metadata(&lp)
        .await
        .map_err(kube_err("list PersistentVolumeClaims", object))?
        .items
    {
        if done(&c.name_any()) && c.meta().deletion_timestamp.is_none() {
            ignore_gone(
                claims.delete(&c.name_any(), &background).await,
                "delete PersistentVolumeClaim",
                &ns,
            )?;
        }
    }
    Ok(())
}

fn ignore_gone<T>(
    result: Result<T, kube::Error>,
    action: &'static str,
    ns: &str,
) -> Result<(), Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(s) => Err(Error::kube(action, ns.to_owned(), s)),
    }
}
