//! `policy` runs (seed 004, "Policy Schedules"): at a slot, the scheduler runs a
//! `PostgresPolicy`'s SQL on the cluster's primary, in `spec.policy.database`, as the role of
//! `spec.policy.secret` (`username`, `password`) or, with none, the cluster's replication user
//! (the seed's default). The run happens inside the scheduler; its entry is written to status
//! as `Running` before the SQL is sent, so a slot runs at most once: a run found `Running` by a
//! later reconcile was cut short by an operator restart and is reported failed, never re-run.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::Api;
use steward_api::policy::{PolicyResult, PostgresPolicy};
use steward_api::postgres::PostgresCluster;
use steward_api::schedule::{PolicySchedule, Schedule, ScheduleRun, ScheduleStatus};

use crate::clock::format_time;
use crate::error::Error;
use crate::postgres::admin::ConnectionTarget;
use crate::postgres::names::{ClusterNames, PORT};
use crate::resources::secrets::{PASSWORD_KEY, USERNAME_KEY, key_of};
use crate::runtime::context::Context;

/// Marks runs left `Running` by an earlier operator (a policy run ends within its reconcile)
/// as failed.
pub fn interrupted(status: &mut ScheduleStatus, now: Timestamp) {
    for run in status.runs.iter_mut().filter(|r| r.phase == "Running") {
        run.phase = "Failed".into();
        run.finished_at = Some(format_time(now));
        run.message = Some(
            "interrupted: the operator stopped during the run; a slot runs at most once, so it \
             is not run again"
                .into(),
        );
    }
    status.active.clear();
}

/// Runs the policy for one slot; a failure of any kind (no primary, no Secret, SQL error) is a
/// failed result, never an error of the scheduler.
pub async fn run(
    ctx: &Context,
    schedule: &Schedule,
    options: &PolicySchedule,
    cluster: &PostgresCluster,
) -> Result<PolicyResult, Error> {
    let ns = schedule.namespace().unwrap_or_default();
    let now = ctx.clock.now();
    let failed = |why: String| PolicyResult {
        phase: "Failed".into(),
        rows_affected: None,
        error: Some(why),
        duration_ms: 0,
        finished_at: format_time(now),
    };
    let policies: Api<PostgresPolicy> = ctx.api(&ns);
    let policy = policies
        .get_opt(&options.name)
        .await
        .map_err(|s| Error::kube("get PostgresPolicy", format!("{ns}/{}", options.name), s))?;
    let sql =
        match crate::postgres::policy::resolve(ctx, policy.as_ref(), &ns, &options.name).await? {
            Ok(sql) => sql,
            Err(why) => return Ok(failed(why)),
        };
    let Some(ip) = primary_ip(ctx, &ns, cluster).await? else {
        return Ok(failed(format!(
            "cluster {} has no running primary",
            cluster.name_any()
        )));
    };
    let names = ClusterNames::new(cluster.name_any(), &ns);
    let secret = options
        .secret
        .clone()
        .unwrap_or_else(|| names.replication_secret());
    let secrets: Api<Secret> = ctx.api(&ns);
    let found = secrets
        .get_opt(&secret)
        .await
        .map_err(|s| Error::kube("get Secret", format!("{ns}/{secret}"), s))?;
    let login = found.as_ref().and_then(|s| {
        Some((
            key_of(s, USERNAME_KEY)?.expose().to_owned(),
            key_of(s, PASSWORD_KEY)?.expose().to_owned(),
        ))
    });
    let Some((user, password)) = login else {
        return Ok(failed(format!(
            "Secret {secret} is missing or lacks {USERNAME_KEY} and {PASSWORD_KEY}"
        )));
    };
    let target = ConnectionTarget::new(ip, u16::try_from(PORT).unwrap_or(5432), user, password)
        .on_database(&options.database);
    let connector = crate::postgres::admin::connector(ctx)?;
    Ok(crate::postgres::policy::run(
        connector.as_ref(),
        &target,
        &sql.sql,
        Duration::from_secs(u64::from(options.timeout_seconds)),
        now,
    )
    .await)
}

/// The primary's Pod IP, when it has one.
async fn primary_ip(
    ctx: &Context,
    ns: &str,
    cluster: &PostgresCluster,
) -> Result<Option<String>, Error> {
    let Some(primary) = cluster
        .status
        .as_ref()
        .and_then(|s| s.current_primary.clone())
    else {
        return Ok(None);
    };
    let pods: Api<Pod> = ctx.api(ns);
    let pod = pods
        .get_opt(&primary)
        .await
        .map_err(|s| Error::kube("get Pod", format!("{ns}/{primary}"), s))?;
    Ok(pod
        .and_then(|p| p.status?.pod_ip)
        .filter(|ip| !ip.is_empty()))
}

/// The run's entry for a result.
pub fn entry(name: &str, slot: Timestamp, result: &PolicyResult) -> ScheduleRun {
    ScheduleRun {
        name: name.to_owned(),
        slot: format_time(slot),
        phase: result.phase.clone(),
        finished_at: Some(result.finished_at.clone()),
        message: Some(match (&result.error, result.rows_affected) {
            (Some(e), _) => e.clone(),
            (None, rows) => format!("{} rows in {} ms", rows.unwrap_or(0), result.duration_ms),
        }),
        rows_affected: result.rows_affected,
        duration_ms: Some(result.duration_ms),
        backup: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_left_running_by_an_earlier_operator_is_failed_not_rerun() {
        let mut status = ScheduleStatus {
            active: vec!["tick-1".into()],
            runs: vec![
                ScheduleRun {
                    name: "tick-1".into(),
                    phase: "Running".into(),
                    ..ScheduleRun::default()
                },
                ScheduleRun {
                    name: "tick-0".into(),
                    phase: "Succeeded".into(),
                    ..ScheduleRun::default()
                },
            ],
            ..ScheduleStatus::default()
        };
        interrupted(&mut status, "2026-11-26T07:00:00Z".parse().unwrap());
        assert!(status.active.is_empty());
        assert_eq!(status.runs[0].phase, "Failed");
        assert!(
            status.runs[0]
                .message
                .as_deref()
                .unwrap()
                .contains("not run again")
        );
        assert_eq!(status.runs[1].phase, "Succeeded");
        let ok = PolicyResult {
            phase: "Succeeded".into(),
            rows_affected: Some(3),
            duration_ms: 12,
            finished_at: "2026-11-26T07:00:01Z".into(),
            ..PolicyResult::default()
        };
        let e = entry("tick-2", "2026-11-26T07:00:00Z".parse().unwrap(), &ok);
        assert_eq!(e.message.as_deref(), Some("3 rows in 12 ms"));
        assert_eq!(e.rows_affected, Some(3));
    }
}
