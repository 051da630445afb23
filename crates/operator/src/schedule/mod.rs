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
//! `backups.pgbackrest` — the scheduler reports it, it does not enable it). `pgbasebackup`,
//! `policy` and `verify` are not implemented yet: such a schedule is `Valid=False` with that
//! reason, and nothing runs. A cluster being restored skips its slots (the seed asks to remove
//! schedules before a restore; Steward pauses them).

pub mod cron;
pub mod plan;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
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

/// Why the cluster cannot take a `pgbackrest` run now, if it cannot.
fn not_ready(cluster: Option<&PostgresCluster>, name: &str) -> Option<(&'static str, String)> {
    let Some(c) = cluster else {
        return Some(("ClusterNotFound", format!("cluster {name} does not exist")));
    };
    if c.spec
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

/// Records the runs (this schedule's `PostgresBackup`s) in `status`, newest first; returns
/// the ones beyond the history limits.
fn record_runs(
    schedule: &Schedule,
    backups: &[PostgresBackup],
    status: &mut ScheduleStatus,
) -> Vec<String> {
    let mut runs: Vec<ScheduleRun> = backups
        .iter()
        .map(|b| {
            let s = b.status.clone().unwrap_or_default();
            let phase = match s.phase {
                Some(BackupPhase::Completed) => "Succeeded",
                Some(BackupPhase::Failed) => "Failed",
                _ => "Running",
            };
            let slot = b
                .labels()
                .get(SLOT_LABEL)
                .and_then(|t| t.parse::<i64>().ok())
                .and_then(|t| Timestamp::from_second(t).ok())
                .map(format_time)
                .unwrap_or_default();
            ScheduleRun {
                name: b.name_any(),
                slot,
                phase: phase.into(),
                finished_at: s.finished_at.clone(),
                message: s.error.clone().or(s.label.clone()),
            }
        })
        .collect();
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

/// The label with a run's slot (Unix seconds).
pub const SLOT_LABEL: &str = "steward.dev/slot";

async fn reconcile(schedule: Arc<Schedule>, ctx: Arc<Context>) -> Result<Action, Error> {
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
        ScheduleType::Pgbackrest => None,
        other => Some(format!(
            "type {} is not implemented yet (pgbackrest is); nothing runs",
            other.as_str()
        )),
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

    // Runs.
    let backups: Api<PostgresBackup> = Api::namespaced(ctx.client.clone(), &ns);
    let mine = backups
        .list(&ListParams::default().labels(&format!("{SCHEDULE_LABEL}={name}")))
        .await
        .map_err(|s| Error::kube("list PostgresBackups", object.clone(), s))?
        .items;
    let before: Vec<(String, String)> = stored
        .runs
        .iter()
        .map(|r| (r.name.clone(), r.phase.clone()))
        .collect();
    for pruned in record_runs(&schedule, &mine, &mut status) {
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

    // The cluster.
    let clusters: Api<PostgresCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let cluster = clusters
        .get_opt(&schedule.spec.cluster)
        .await
        .map_err(|s| Error::kube("get PostgresCluster", object.clone(), s))?;
    let blocked = not_ready(cluster.as_ref(), &schedule.spec.cluster);
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
                format!("cluster {} takes backups", schedule.spec.cluster),
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
    let forbid = schedule.spec.concurrency_policy == ConcurrencyPolicy::Forbid;
    let (action, next) = decide(
        &cron,
        &Inputs {
            cursor,
            now,
            deadline: schedule.spec.starting_deadline_seconds,
            suspended: schedule.spec.suspend,
            blocking_run: status.active.first().map(String::as_str).filter(|_| forbid),
        },
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
            } else {
                let run = run_name(&name, slot);
                let mut backup = PostgresBackup::new(
                    &run,
                    PostgresBackupSpec {
                        cluster: schedule.spec.cluster.clone(),
                        type_: schedule
                            .spec
                            .pgbackrest
                            .as_ref()
                            .map(|p| p.type_)
                            .unwrap_or_default(),
                    },
                );
                backup.metadata.namespace = Some(ns.clone());
                backup.metadata.labels = Some(
                    [
                        (SCHEDULE_LABEL.to_owned(), name.clone()),
                        (SLOT_LABEL.to_owned(), slot.as_second().to_string()),
                    ]
                    .into(),
                );
                backup.metadata.owner_references =
                    schedule.controller_owner_ref(&()).map(|o| vec![o]);
                match backups.create(&PostParams::default(), &backup).await {
                    // 409: this slot's run exists (an earlier attempt created it).
                    Ok(_) => {
                        event(
                            &mut effects,
                            EventType::Normal,
                            "RunStarted",
                            format!("slot {slot}: PostgresBackup {run}"),
                        );
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(s) => {
                        return Err(Error::kube(
                            "create PostgresBackup",
                            format!("{ns}/{run}"),
                            s,
                        ));
                    }
                }
                status.last_schedule_time = Some(format_time(slot));
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
                            finished_at: None,
                            message: None,
                        },
                    );
                }
            }
        }
    }
    status.next_schedule_time = next.map(format_time);
    write(&ctx, &schedule, &stored, &status, effects).await?;
    // Woken at the next slot's second (a little after, never before it).
    Ok(match next {
        Some(next) => {
            let wait = next.as_millisecond() - ctx.clock.now().as_millisecond();
            Action::requeue(Duration::from_millis(
                u64::try_from(wait.max(0)).unwrap_or(0) + 5,
            ))
        }
        None => Action::await_change(),
    })
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
        let patch = serde_json::json!({ "status": status });
        match api
            .patch_status(
                &schedule.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {}
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
    Controller::new(schedules, watcher::Config::default())
        .owns(backups, watcher::Config::default().labels(SCHEDULE_LABEL))
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
