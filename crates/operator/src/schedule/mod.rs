//! The scheduler (seed 004, "PGO Scheduler"): one controller in the operator (leader only)
//! for every `Schedule`. A reconcile handles the slot due now, if any, and requeues the schedule
//! for its next slot — no polling: kube-runtime's delay queue (a timer wheel) holds one entry
//! per schedule and wakes each at its second. A run is the object a person would create, named
//! after its slot (`<schedule>-<unix seconds>`), owned by the schedule; so a slot runs once
//! across retries, operator restarts and leader changes (a second create is a `409`). Runs'
//! changes wake their schedule (`owns`), which records them in its status and deletes those
//! beyond the history limits.
//!
//! Types: `pgbackrest` (a `PostgresBackup` of `spec.pgbackrest.type`; the cluster must have
//! `backups.pgbackrest` — the scheduler reports it, it does not enable it), `pgbasebackup`,
//! `policy` and `verify` on a `PostgresCluster`; `etcd-snapshot` (an `EtcdBackup` whose
//! `retain` is the schedule's `successfulRunsHistoryLimit`, so the snapshot files kept are the
//! runs kept) on an `EtcdCluster`. A PostgreSQL cluster being restored skips its slots (the
//! seed asks to remove schedules before a restore; Steward pauses them).

pub mod configmaps;
pub mod cron;
pub mod plan;
pub mod policy;
pub mod verify;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use steward_api::etcd::{EtcdBackup, EtcdBackupSpec, EtcdCluster, SnapshotPhase};
use steward_api::pgbackrest::{BackupPhase, PostgresBackup, PostgresBackupSpec};
use steward_api::postgres::PostgresCluster;
use steward_api::schedule::{
    ConcurrencyPolicy, Schedule, ScheduleRun, ScheduleStatus, ScheduleType,
};
use tokio_util::sync::CancellationToken;

use crate::clock::{format_time, parse_time};
use crate::conditions::{self, Status};
use crate::error::Error;
use crate::pipeline::{Effect, EventType};
use crate::runtime::context::{Context, error_policy};
use plan::{Inputs, SlotAction, decide, run_name};

/// The controller name in metrics and logs.
pub const CONTROLLER: &str = "schedule";

/// The label on a schedule's runs, naming it.
pub const SCHEDULE_LABEL: &str = "steward.dev/schedule";

/// The longest schedule name: its runs are `<name>-<10 digits>`, and a backup's Job name
/// (`<backup>-job`) must stay a 63-character label.
pub const MAX_NAME_LEN: usize = 48;

/// `Valid`: the expression and the type can be run.
pub const VALID: &str = "Valid";
/// `Ready`: the cluster can take the work now.
pub const READY: &str = "Ready";

fn event(effects: &mut Vec<Effect>, type_: EventType, reason: &str, note: String) {
    effects.push(Effect::Event {
        type_,
        reason: reason.into(),
        action: "Schedule".into(),
        note,
    });
}

/// The cluster a schedule's work is for, as read on this pass: a `PostgresCluster` for the
/// PostgreSQL types, an `EtcdCluster` for `etcd-snapshot`.
enum Target {
    Postgres(Box<PostgresCluster>),
    Etcd,
}

impl Target {
    fn postgres(&self) -> Option<&PostgresCluster> {
        match self {
            Self::Postgres(c) => Some(c),
            Self::Etcd => None,
        }
    }
}

/// The kind of cluster a schedule type works on.
fn cluster_kind(type_: ScheduleType) -> &'static str {
    match type_ {
        ScheduleType::EtcdSnapshot => "EtcdCluster",
        _ => "PostgresCluster",
    }
}

/// Why the cluster cannot take a run of this type now, if it cannot.
fn not_ready(
    type_: ScheduleType,
    target: Option<&Target>,
    name: &str,
) -> Option<(&'static str, String)> {
    let Some(target) = target else {
        return Some((
            "ClusterNotFound",
            format!("{} {name} does not exist", cluster_kind(type_)),
        ));
    };
    let Some(c) = target.postgres() else {
        // An etcd snapshot waits for a healthy member itself (`EtcdBackup`).
        return None;
    };
    if matches!(type_, ScheduleType::Pgbackrest | ScheduleType::Verify)
        && c.spec
            .backups
            .as_ref()
            .and_then(|b| b.pgbackrest.as_ref())
            .is_none()
    {
        return Some((
            "BackupsOff",
            format!(
                "cluster {name} has no spec.backups.pgbackrest; the scheduler does not enable backups"
            ),
        ));
    }
    if c.status.as_ref().is_some_and(|s| s.restore.is_some()) {
        return Some((
            "Restoring",
            format!("cluster {name} is being restored; its schedules pause until it is done"),
        ));
    }
    None
}

/// A run's slot, from its label.
fn slot_of(run: &impl ResourceExt) -> String {
    run.labels()
        .get(SLOT_LABEL)
        .and_then(|t| t.parse::<i64>().ok())
        .and_then(|t| Timestamp::from_second(t).ok())
        .map(format_time)
        .unwrap_or_default()
}

/// A `PostgresBackup` run as the schedule records it.
fn postgres_run(b: &PostgresBackup) -> ScheduleRun {
    let s = b.status.clone().unwrap_or_default();
    let phase = match s.phase {
        Some(BackupPhase::Completed) => "Succeeded",
        Some(BackupPhase::Failed) => "Failed",
        _ => "Running",
    };
    ScheduleRun {
        name: b.name_any(),
        slot: slot_of(b),
        phase: phase.into(),
        finished_at: s.finished_at.clone(),
        message: s.error.clone().or(s.label.clone()),
        ..ScheduleRun::default()
    }
}

/// An `EtcdBackup` run as the schedule records it.
fn etcd_run(b: &EtcdBackup) -> ScheduleRun {
    let s = b.status.clone().unwrap_or_default();
    let phase = match s.phase {
        Some(SnapshotPhase::Completed) => "Succeeded",
        Some(SnapshotPhase::Failed) => "Failed",
        _ => "Running",
    };
    ScheduleRun {
        name: b.name_any(),
        slot: slot_of(b),
        phase: phase.into(),
        finished_at: s.completion_time.clone(),
        message: s.error.clone().or(s.message.clone()),
        ..ScheduleRun::default()
    }
}

/// Records the runs (this schedule's backups) in `status`, newest first; returns the ones
/// beyond the history limits.
fn record_runs(
    schedule: &Schedule,
    mut runs: Vec<ScheduleRun>,
    status: &mut ScheduleStatus,
) -> Vec<String> {
    runs.sort_by(|a, b| b.slot.cmp(&a.slot));
    status.active = runs
        .iter()
        .filter(|r| r.phase == "Running")
        .map(|r| r.name.clone())
        .collect();
    if let Some(t) = runs
        .iter()
        .filter(|r| r.phase == "Succeeded")
        .filter_map(|r| r.finished_at.clone())
        .max()
    {
        status.last_successful_time = Some(t);
    }
    let keep = |phase: &str, limit: u32| {
        runs.iter()
            .filter(|r| r.phase == phase)
            .skip(limit as usize)
            .map(|r| r.name.clone())
            .collect::<Vec<_>>()
    };
    let mut prune = keep("Succeeded", schedule.spec.successful_runs_history_limit);
    prune.extend(keep("Failed", schedule.spec.failed_runs_history_limit));
    runs.retain(|r| !prune.contains(&r.name));
    status.runs = runs;
    prune
}

/// Drops the entries of runs kept only in status (`policy`, `verify`) beyond the history
/// limits, and recomputes `active` and `lastSuccessfulTime` from them.
fn trim_runs(schedule: &Schedule, status: &mut ScheduleStatus) {
    status.runs.sort_by(|a, b| b.slot.cmp(&a.slot));
    let mut kept = (0u32, 0u32);
    status.runs.retain(|r| match r.phase.as_str() {
        "Succeeded" => {
            kept.0 += 1;
            kept.0 <= schedule.spec.successful_runs_history_limit
        }
        "Failed" => {
            kept.1 += 1;
            kept.1 <= schedule.spec.failed_runs_history_limit
        }
        _ => true,
    });
    status.active = status
        .runs
        .iter()
        .filter(|r| r.phase == "Running")
        .map(|r| r.name.clone())
        .collect();
    if let Some(t) = status
        .runs
        .iter()
        .filter(|r| r.phase == "Succeeded")
        .filter_map(|r| r.finished_at.clone())
        .max()
    {
        status.last_successful_time = Some(t);
    }
}

/// The label with a run's slot (Unix seconds).
pub const SLOT_LABEL: &str = "steward.dev/slot";

async fn reconcile(schedule: Arc<Schedule>, ctx: Arc<Context>) -> Result<Action, Error> {
    // The cached copy can predate this scheduler's own last status write (a run's `Running`
    // entry written before its SQL ran): start from the newest.
    let Some(schedule) = ctx.fresh(schedule).await? else {
        return Ok(Action::await_change());
    };
    let ns = schedule.namespace().unwrap_or_default();
    let name = schedule.name_any();
    let object = format!("{ns}/{name}");
    let now = ctx.clock.now();
    let stored = schedule.status.clone().unwrap_or_default();
    let mut status = stored.clone();
    let mut effects = Vec::new();
    let generation = schedule.metadata.generation;
    let set =
        |status: &mut ScheduleStatus, type_: &str, s: Status, reason: &str, message: String| {
            conditions::set(
                &mut status.conditions,
                type_,
                s,
                reason,
                message,
                generation,
                now,
            )
        };

    // Valid: the expression, the type, the name.
    let cron = match cron::parse(&schedule.spec.schedule) {
        Ok(cron) => Some(cron),
        Err(why) => {
            if set(
                &mut status,
                VALID,
                Status::False,
                "InvalidSchedule",
                why.clone(),
            ) {
                event(&mut effects, EventType::Warning, "InvalidSchedule", why);
            }
            None
        }
    };
    let unsupported = match schedule.spec.type_ {
        ScheduleType::Policy if schedule.spec.policy.is_none() => {
            Some("a policy schedule needs spec.policy".to_owned())
        }
        _ => None,
    };
    let invalid = if cron.is_none() {
        None
    } else if let Some(why) = unsupported {
        Some(("UnsupportedType", why))
    } else if name.len() > MAX_NAME_LEN {
        Some((
            "NameTooLong",
            format!(
                "the name has {} characters; at most {MAX_NAME_LEN} (its runs are <name>-<slot>)",
                name.len()
            ),
        ))
    } else {
        None
    };
    if let Some((reason, why)) = invalid.clone()
        && set(&mut status, VALID, Status::False, reason, why.clone())
    {
        event(&mut effects, EventType::Warning, reason, why);
    }
    let Some(cron) = cron.filter(|_| invalid.is_none()) else {
        status.next_schedule_time = None;
        write(&ctx, &schedule, &stored, &status, effects).await?;
        return Ok(Action::await_change());
    };
    set(
        &mut status,
        VALID,
        Status::True,
        "Valid",
        format!("{} (UTC)", schedule.spec.schedule),
    );

    // The cluster.
    let type_ = schedule.spec.type_;
    let target = if type_ == ScheduleType::EtcdSnapshot {
        let clusters: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
        clusters
            .get_opt(&schedule.spec.cluster)
            .await
            .map_err(|s| Error::kube("get EtcdCluster", object.clone(), s))?
            .map(|_| Target::Etcd)
    } else {
        let clusters: Api<PostgresCluster> = Api::namespaced(ctx.client.clone(), &ns);
        clusters
            .get_opt(&schedule.spec.cluster)
            .await
            .map_err(|s| Error::kube("get PostgresCluster", object.clone(), s))?
            .map(|c| Target::Postgres(Box::new(c)))
    };
    let cluster = target.as_ref().and_then(Target::postgres);

    // Runs.
    let backups: Api<PostgresBackup> = Api::namespaced(ctx.client.clone(), &ns);
    let before: Vec<(String, String)> = stored
        .runs
        .iter()
        .map(|r| (r.name.clone(), r.phase.clone()))
        .collect();
    let mut verifying = false;
    // Runs whose Job has ended though their PostgresBackup still says Running: the cluster's
    // controller records the end on its next pass. Right after an operator restart that pass
    // may come after this one; such a run must not block a slot (issue 33: under load the
    // missed slot of a restart was skipped for a run that had ended while the operator was
    // down).
    let mut ended = Vec::new();
    let forbid = schedule.spec.concurrency_policy == ConcurrencyPolicy::Forbid;
    match type_ {
        ScheduleType::Pgbackrest | ScheduleType::Pgbasebackup => {
            let mine = backups
                .list(&ListParams::default().labels(&format!("{SCHEDULE_LABEL}={name}")))
                .await
                .map_err(|s| Error::kube("list PostgresBackups", object.clone(), s))?
                .items;
            let runs = mine.iter().map(postgres_run).collect();
            for pruned in record_runs(&schedule, runs, &mut status) {
                match backups.delete(&pruned, &DeleteParams::default()).await {
                    Ok(_) | Err(kube::Error::Api(_)) => {}
                    Err(s) => {
                        return Err(Error::kube(
                            "delete PostgresBackup",
                            format!("{ns}/{pruned}"),
                            s,
                        ));
                    }
                }
            }
            // Only a slot under Forbid asks; each still-running record's Job is read once.
            if forbid {
                let jobs: Api<k8s_openapi::api::batch::v1::Job> =
                    Api::namespaced(ctx.client.clone(), &ns);
                for run in &status.active {
                    let job = crate::postgres::build::pgbackrest::backup_job_name(run);
                    let found = jobs
                        .get_opt(&job)
                        .await
                        .map_err(|s| Error::kube("get Job", format!("{ns}/{job}"), s))?;
                    if found
                        .as_ref()
                        .and_then(crate::postgres::steps::provision_repository::job_outcome)
                        .is_some()
                    {
                        ended.push(run.clone());
                    }
                }
            }
        }
        ScheduleType::EtcdSnapshot => {
            // A snapshot's phase is its own (no Job to look past): `ended` stays empty.
            let snapshots: Api<EtcdBackup> = Api::namespaced(ctx.client.clone(), &ns);
            let mine = snapshots
                .list(&ListParams::default().labels(&format!("{SCHEDULE_LABEL}={name}")))
                .await
                .map_err(|s| Error::kube("list EtcdBackups", object.clone(), s))?
                .items;
            let runs = mine.iter().map(etcd_run).collect();
            for pruned in record_runs(&schedule, runs, &mut status) {
                match snapshots.delete(&pruned, &DeleteParams::default()).await {
                    Ok(_) | Err(kube::Error::Api(_)) => {}
                    Err(s) => {
                        return Err(Error::kube(
                            "delete EtcdBackup",
                            format!("{ns}/{pruned}"),
                            s,
                        ));
                    }
                }
            }
        }
        ScheduleType::Policy => {
            policy::interrupted(&mut status, now);
            trim_runs(&schedule, &mut status);
        }
        ScheduleType::Verify => {
            verifying =
                verify::observe(&ctx, &schedule, cluster, &mut status, &mut effects).await?;
            trim_runs(&schedule, &mut status);
        }
    }
    for run in &status.runs {
        let was = before
            .iter()
            .find(|(n, _)| *n == run.name)
            .map(|(_, p)| p.as_str());
        if run.phase != "Running" && was != Some(run.phase.as_str()) {
            let (type_, reason) = if run.phase == "Succeeded" {
                (EventType::Normal, "RunSucceeded")
            } else {
                status.last_error = Some(format!(
                    "run {} failed: {}",
                    run.name,
                    run.message.clone().unwrap_or_default()
                ));
                (EventType::Warning, "RunFailed")
            };
            event(
                &mut effects,
                type_,
                reason,
                format!("{} {}", run.name, run.phase.to_lowercase()),
            );
        }
    }

    let blocked = not_ready(type_, target.as_ref(), &schedule.spec.cluster);
    match &blocked {
        Some((reason, why)) => {
            set(&mut status, READY, Status::False, reason, why.clone());
        }
        None => {
            set(
                &mut status,
                READY,
                Status::True,
                "Ready",
                format!("cluster {} can take the work", schedule.spec.cluster),
            );
        }
    }

    // The slot.
    let cursor = status
        .last_slot
        .as_deref()
        .and_then(parse_time)
        .or_else(|| schedule.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .unwrap_or(now);
    let inputs = Inputs {
        cursor,
        now,
        deadline: schedule.spec.starting_deadline_seconds,
        suspended: schedule.spec.suspend,
        blocking_run: plan::blocking(&status.active, &ended).filter(|_| forbid),
    };
    let (action, next) = decide(&cron, &inputs);
    tracing::debug!(
        object = %object,
        cursor = %inputs.cursor,
        now = %inputs.now,
        blocking = ?inputs.blocking_run,
        action = ?action,
        next = ?next,
        "schedule decision"
    );
    match action {
        SlotAction::Idle => {}
        SlotAction::Skip(slot, why) => {
            status.last_slot = Some(format_time(slot));
            if let Some(why) = why {
                event(&mut effects, EventType::Warning, "SlotSkipped", why.clone());
                status.last_error = Some(why);
            }
        }
        SlotAction::Missed(slot, why) => {
            status.last_slot = Some(format_time(slot));
            event(
                &mut effects,
                EventType::Warning,
                "MissedSchedule",
                why.clone(),
            );
            status.last_error = Some(why);
        }
        SlotAction::Run(slot) => {
            status.last_slot = Some(format_time(slot));
            if let Some((_, why)) = &blocked {
                let why = format!("slot {slot} skipped: {why}");
                event(&mut effects, EventType::Warning, "SlotSkipped", why.clone());
                status.last_error = Some(why);
            } else if let Some(target) = target.as_ref() {
                status.last_schedule_time = Some(format_time(slot));
                verifying |= start_run(
                    &ctx,
                    &schedule,
                    &stored,
                    &mut status,
                    target,
                    run_name(&name, slot),
                    slot,
                    &mut effects,
                )
                .await?;
            }
        }
    }
    // A one-off run asked for with the annotation (`kubectl annotate schedule X
    // steward.dev/run-now=<anything new>`): like a CronJob's `kubectl create job --from`, it
    // runs now whatever the expression, the suspension and the concurrency policy say; each new
    // value runs once.
    let asked = schedule.annotations().get(RUN_NOW_ANNOTATION).cloned();
    if let Some(token) = asked.filter(|t| status.last_run_now.as_ref() != Some(t)) {
        status.last_run_now = Some(token.clone());
        match (&blocked, target.as_ref()) {
            (Some((_, why)), _) => {
                let why = format!("run-now {token:?} not run: {why}");
                event(&mut effects, EventType::Warning, "SlotSkipped", why.clone());
                status.last_error = Some(why);
            }
            (None, Some(target)) => {
                let slot = Timestamp::from_second(now.as_second()).unwrap_or(now);
                verifying |= start_run(
                    &ctx,
                    &schedule,
                    &stored,
                    &mut status,
                    target,
                    // The name of a slot's run: a slot of the same second is the same run.
                    run_name(&name, slot),
                    slot,
                    &mut effects,
                )
                .await?;
            }
            (None, None) => {}
        }
    }
    status.next_schedule_time = next.map(format_time);
    write(&ctx, &schedule, &stored, &status, effects).await?;
    if type_ == ScheduleType::Verify {
        verify::sweep(&ctx, &schedule, &status).await?;
    }
    // Woken at the next slot's second (a little after, never before it); a verification in
    // progress is looked at every few seconds (its Job and Pod wake the schedule too).
    let until_next = next.map(|next| {
        let wait = next.as_millisecond() - ctx.clock.now().as_millisecond();
        Duration::from_millis(u64::try_from(wait.max(0)).unwrap_or(0) + 5)
    });
    let wait = match (until_next, verifying) {
        (Some(w), true) => Some(w.min(VERIFY_POLL)),
        (None, true) => Some(VERIFY_POLL),
        (w, false) => w,
    };
    Ok(wait.map_or_else(Action::await_change, Action::requeue))
}

/// Starts run `run` for `slot`; returns whether a verification is now going.
#[allow(clippy::too_many_arguments)]
async fn start_run(
    ctx: &Context,
    schedule: &Schedule,
    stored: &ScheduleStatus,
    status: &mut ScheduleStatus,
    target: &Target,
    run: String,
    slot: Timestamp,
    effects: &mut Vec<Effect>,
) -> Result<bool, Error> {
    let type_ = schedule.spec.type_;
    match (type_, target.postgres()) {
        (ScheduleType::Pgbackrest | ScheduleType::Pgbasebackup | ScheduleType::EtcdSnapshot, _) => {
            if type_ == ScheduleType::EtcdSnapshot {
                start_snapshot(ctx, schedule, &run, slot, effects).await?;
            } else {
                start_backup(ctx, schedule, &run, slot, effects).await?;
            }
            if !status.active.contains(&run) {
                status.active.push(run.clone());
            }
            if !status.runs.iter().any(|r| r.name == run) {
                status.runs.insert(
                    0,
                    ScheduleRun {
                        name: run,
                        slot: format_time(slot),
                        phase: "Running".into(),
                        ..ScheduleRun::default()
                    },
                );
            }
            Ok(false)
        }
        // A policy or a verification always has a PostgresCluster here.
        (ScheduleType::Policy | ScheduleType::Verify, None) => Ok(false),
        (ScheduleType::Policy, Some(cluster)) => {
            run_policy(ctx, schedule, stored, status, cluster, &run, slot, effects).await?;
            Ok(false)
        }
        (ScheduleType::Verify, Some(cluster)) => {
            let entry = verify::start(ctx, schedule, cluster, &run, slot).await?;
            event(
                effects,
                EventType::Normal,
                "RunStarted",
                format!("slot {slot}: {}", entry.message.clone().unwrap_or_default()),
            );
            status.runs.retain(|r| r.name != run);
            status.runs.insert(0, entry);
            trim_runs(schedule, status);
            Ok(status.active.contains(&run))
        }
    }
}

/// The annotation asking for a one-off run now.
pub const RUN_NOW_ANNOTATION: &str = "steward.dev/run-now";

/// How often a running verification is looked at.
const VERIFY_POLL: Duration = Duration::from_secs(3);

/// Creates slot `slot`'s `PostgresBackup` (a `409` means an earlier attempt did).
async fn start_backup(
    ctx: &Context,
    schedule: &Schedule,
    run: &str,
    slot: Timestamp,
    effects: &mut Vec<Effect>,
) -> Result<(), Error> {
    let ns = schedule.namespace().unwrap_or_default();
    let backups: Api<PostgresBackup> = Api::namespaced(ctx.client.clone(), &ns);
    let mut backup = PostgresBackup::new(
        run,
        PostgresBackupSpec {
            cluster: schedule.spec.cluster.clone(),
            type_: schedule
                .spec
                .pgbackrest
                .as_ref()
                .map(|p| p.type_)
                .unwrap_or_default(),
            method: if schedule.spec.type_ == ScheduleType::Pgbasebackup {
                steward_api::pgbackrest::BackupMethod::Pgbasebackup
            } else {
                steward_api::pgbackrest::BackupMethod::Pgbackrest
            },
        },
    );
    backup.metadata = run_meta(schedule, run, slot);
    match backups.create(&PostParams::default(), &backup).await {
        Ok(_) => {
            event(
                effects,
                EventType::Normal,
                "RunStarted",
                format!("slot {slot}: PostgresBackup {run}"),
            );
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(s) => Err(Error::kube(
            "create PostgresBackup",
            format!("{ns}/{run}"),
            s,
        )),
    }
}

/// The labels and owner of slot `slot`'s run object.
fn run_meta(schedule: &Schedule, run: &str, slot: Timestamp) -> kube::api::ObjectMeta {
    kube::api::ObjectMeta {
        name: Some(run.to_owned()),
        namespace: schedule.namespace(),
        labels: Some(
            [
                (SCHEDULE_LABEL.to_owned(), schedule.name_any()),
                (SLOT_LABEL.to_owned(), slot.as_second().to_string()),
            ]
            .into(),
        ),
        owner_references: schedule.controller_owner_ref(&()).map(|o| vec![o]),
        ..kube::api::ObjectMeta::default()
    }
}

/// Creates slot `slot`'s `EtcdBackup` (a `409` means an earlier attempt did). It keeps
/// `successfulRunsHistoryLimit` snapshots (at least one) on its claim.
async fn start_snapshot(
    ctx: &Context,
    schedule: &Schedule,
    run: &str,
    slot: Timestamp,
    effects: &mut Vec<Effect>,
) -> Result<(), Error> {
    let ns = schedule.namespace().unwrap_or_default();
    let api: Api<EtcdBackup> = Api::namespaced(ctx.client.clone(), &ns);
    let backup = EtcdBackup {
        metadata: run_meta(schedule, run, slot),
        spec: EtcdBackupSpec {
            cluster: schedule.spec.cluster.clone(),
            destination: schedule
                .spec
                .etcd_snapshot
                .clone()
                .unwrap_or_default()
                .destination,
            retain: Some(schedule.spec.successful_runs_history_limit.max(1)),
        },
        status: None,
    };
    match api.create(&PostParams::default(), &backup).await {
        Ok(_) => {
            event(
                effects,
                EventType::Normal,
                "RunStarted",
                format!("slot {slot}: EtcdBackup {run}"),
            );
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(s) => Err(Error::kube("create EtcdBackup", format!("{ns}/{run}"), s)),
    }
}

/// Runs slot `slot`'s policy: its `Running` entry is written first (at most once per slot),
/// then the SQL runs and the entry gets the result.
#[allow(clippy::too_many_arguments)]
async fn run_policy(
    ctx: &Context,
    schedule: &Schedule,
    stored: &ScheduleStatus,
    status: &mut ScheduleStatus,
    cluster: &PostgresCluster,
    run: &str,
    slot: Timestamp,
    effects: &mut Vec<Effect>,
) -> Result<(), Error> {
    let Some(options) = schedule.spec.policy.clone() else {
        return Ok(());
    };
    status.runs.insert(
        0,
        ScheduleRun {
            name: run.to_owned(),
            slot: format_time(slot),
            phase: "Running".into(),
            ..ScheduleRun::default()
        },
    );
    status.active = vec![run.to_owned()];
    write(ctx, schedule, stored, status, Vec::new()).await?;
    // Whatever goes wrong now (an API error too) ends this slot's run: it is not tried again.
    let result = match policy::run(ctx, schedule, &options, cluster).await {
        Ok(result) => result,
        Err(e) => steward_api::policy::PolicyResult {
            phase: "Failed".into(),
            error: Some(e.to_string()),
            finished_at: format_time(ctx.clock.now()),
            ..Default::default()
        },
    };
    let entry = policy::entry(run, slot, &result);
    let ok = result.error.is_none();
    event(
        effects,
        if ok {
            EventType::Normal
        } else {
            EventType::Warning
        },
        if ok { "RunSucceeded" } else { "RunFailed" },
        format!(
            "slot {slot}: policy {} in database {}: {}",
            options.name,
            options.database,
            entry.message.clone().unwrap_or_default()
        ),
    );
    if !ok {
        status.last_error = entry
            .message
            .clone()
            .map(|m| format!("run {run} failed: {m}"));
    }
    status.runs.retain(|r| r.name != run);
    status.runs.insert(0, entry);
    trim_runs(schedule, status);
    Ok(())
}

async fn write(
    ctx: &Context,
    schedule: &Schedule,
    stored: &ScheduleStatus,
    status: &ScheduleStatus,
    effects: Vec<Effect>,
) -> Result<(), Error> {
    if stored != status {
        let api: Api<Schedule> = Api::namespaced(
            ctx.client.clone(),
            &schedule.namespace().unwrap_or_default(),
        );
        // Server-side apply of the whole status: a field now empty (no active run, no error)
        // is removed, where a merge patch would leave the old value.
        let body = serde_json::json!({
            "apiVersion": Schedule::api_version(&()),
            "kind": Schedule::kind(&()),
            "status": status,
        });
        match api
            .patch_status(
                &schedule.name_any(),
                &PatchParams::apply(crate::runtime::context::STATUS_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
        {
            Ok(written) => ctx.remember_version(&written),
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(s) => {
                return Err(Error::kube(
                    "update status",
                    format!(
                        "Schedule {}/{}",
                        schedule.namespace().unwrap_or_default(),
                        schedule.name_any()
                    ),
                    s,
                ));
            }
        }
    }
    ctx.execute(schedule, effects).await;
    Ok(())
}

/// Runs the scheduler until `stop` is cancelled.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let schedules: Api<Schedule> = ctx.watched_api();
    let backups: Api<PostgresBackup> = ctx.watched_api();
    let snapshots: Api<EtcdBackup> = ctx.watched_api();
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = ctx.watched_api();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = ctx.watched_api();
    let verify_runs = format!(
        "{SCHEDULE_LABEL},{}={}",
        crate::resources::labels::COMPONENT,
        verify::VERIFY_COMPONENT
    );
    Controller::new(schedules, watcher::Config::default())
        .owns(backups, watcher::Config::default().labels(SCHEDULE_LABEL))
        .owns(snapshots, watcher::Config::default().labels(SCHEDULE_LABEL))
        .owns(jobs, watcher::Config::default().labels(&verify_runs))
        .owns(pods, watcher::Config::default().labels(&verify_runs))
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(
            reconcile,
            |obj, err, ctx: Arc<Context>| error_policy(obj, err, ctx),
            ctx,
        )
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(controller = CONTROLLER, error = %err, "controller event");
            }
        })
        .await;
}
