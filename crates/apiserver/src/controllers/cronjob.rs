//! The CronJob controller (batch/v1), after the real `cronjob_controllerv2`: keeps
//! `status.active` to the unfinished Jobs it started, records `lastSuccessfulTime`, and at each
//! scheduled time (in `spec.timeZone`, else UTC) creates the Job `<cronjob>-<scheduled unix
//! minutes>` from `spec.jobTemplate` (controller reference, the template's labels and
//! annotations, `batch.kubernetes.io/cronjob-scheduled-timestamp`), unless suspended, the most
//! recent missed time is older than `startingDeadlineSeconds`, or `concurrencyPolicy: Forbid`
//! and a Job is active (`Replace` deletes the active Jobs first). Finished Jobs beyond
//! `successfulJobsHistoryLimit` / `failedJobsHistoryLimit` are deleted, oldest first. Only the
//! most recent missed time is run, as the real controller does. No Events are recorded.

use std::time::Duration;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde_json::{Map, Value, json};

use super::cron;
use crate::meta;
use crate::registry::GroupResource;
use crate::store::State;
use crate::write::create::create;
use crate::write::delete::{DeleteOptions, delete};
use crate::write::{Fields, commit};

const MANAGER: &str = "cronjob-controller";
pub const SCHEDULED_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

#[derive(Debug, Default, PartialEq)]
pub struct CronPlan {
    /// The Job to create (full object, named).
    pub create: Option<Value>,
    /// Jobs to delete (Replace, history limits), by name.
    pub delete: Vec<String>,
    pub status: Value,
    pub requeue: Option<Duration>,
}

fn job_condition(job: &Value) -> Option<&str> {
    meta::get_path(job, "status.conditions")?
        .as_array()?
        .iter()
        .filter(|c| c["status"] == "True")
        .find_map(|c| match c["type"].as_str() {
            Some(k @ ("Complete" | "Failed")) => Some(k),
            _ => None,
        })
}

fn ts(v: Option<&Value>) -> Option<Timestamp> {
    v?.as_str()?.parse().ok()
}

fn format(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The time zone of a CronJob (`None` for an unknown name).
pub fn time_zone(cj: &Value) -> Option<TimeZone> {
    match meta::get_path(cj, "spec.timeZone").and_then(Value::as_str) {
        None | Some("") => Some(TimeZone::UTC),
        Some(name) => TimeZone::get(name).ok(),
    }
}

/// The most recent scheduled time in `(earliest, now]`, if any.
fn most_recent(
    schedule: &cron::Schedule,
    tz: &TimeZone,
    earliest: Timestamp,
    now: Timestamp,
) -> Option<Timestamp> {
    let mut t = schedule.next(earliest, tz)?;
    if t > now {
        return None;
    }
    // Skip ahead quickly over long gaps (a controller down for days).
    let mut steps = 0u32;
    while let Some(n) = schedule.next(t, tz).filter(|n| *n <= now) {
        t = n;
        steps += 1;
        if steps > 100_000 {
            break;
        }
    }
    Some(t)
}

/// The Job for `scheduled`: named `<cronjob>-<unix minutes>`.
pub fn job_for(cj: &Value, scheduled: Timestamp, tz: &TimeZone) -> Value {
    let name = meta::name(cj).unwrap_or_default();
    let tmpl = meta::get_path(cj, "spec.jobTemplate")
        .cloned()
        .unwrap_or(Value::Null);
    let mut md = json!({
        "name": format!("{name}-{}", scheduled.as_second().div_euclid(60)),
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": name,
            "uid": meta::uid(cj).unwrap_or_default(), "controller": true, "blockOwnerDeletion": true}],
    });
    if let Some(l) = meta::get_path(&tmpl, "metadata.labels").filter(|v| v.is_object()) {
        md["labels"] = l.clone();
    }
    let mut annotations = meta::get_path(&tmpl, "metadata.annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let local = scheduled.to_zoned(tz.clone());
    annotations.insert(
        SCHEDULED_ANNOTATION.into(),
        json!(
            local
                .strftime("%Y-%m-%dT%H:%M:%S%:z")
                .to_string()
                .replace("+00:00", "Z")
        ),
    );
    md["annotations"] = Value::Object(annotations);
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": md,
        "spec": tmpl.get("spec").cloned().unwrap_or(json!({}))})
}

fn reference(job: &Value) -> Value {
    json!({"kind": "Job", "namespace": meta::namespace(job), "name": meta::name(job),
        "uid": meta::uid(job), "apiVersion": "batch/v1", "resourceVersion": meta::resource_version(job)})
}

/// The plan for one CronJob given the Jobs it controls, at `now`.
pub fn plan(cj: &Value, jobs: &[Value], now: Timestamp) -> CronPlan {
    let mut status = match cj.get("status") {
        Some(Value::Object(m)) => Value::Object(m.clone()),
        _ => Value::Object(Map::new()),
    };
    let mut out = CronPlan::default();
    // Active list: drop finished and vanished Jobs; note the latest success.
    let mut active: Vec<Value> = status["active"].as_array().cloned().unwrap_or_default();
    active.retain(|r| {
        jobs.iter()
            .find(|j| meta::uid(j) == r["uid"].as_str())
            .is_some_and(|j| job_condition(j).is_none())
    });
    let mut last_success = ts(status.get("lastSuccessfulTime"));
    for j in jobs {
        if job_condition(j) == Some("Complete")
            && let Some(done) = ts(meta::get_path(j, "status.completionTime"))
            && last_success.is_none_or(|l| done > l)
        {
            last_success = Some(done);
        }
    }
    if let Some(l) = last_success {
        status["lastSuccessfulTime"] = json!(format(l));
    }
    let suspended = meta::get_path(cj, "spec.suspend").and_then(Value::as_bool) == Some(true);
    let schedule = meta::get_path(cj, "spec.schedule")
        .and_then(Value::as_str)
        .and_then(|s| cron::parse(s).ok());
    if let (false, false, Some(schedule), Some(tz)) =
        (meta::is_deleting(cj), suspended, schedule, time_zone(cj))
    {
        let last = ts(status.get("lastScheduleTime"));
        let mut earliest = last
            .or_else(|| ts(meta::meta(cj).and_then(|m| m.get("creationTimestamp"))))
            .unwrap_or(now);
        let deadline = meta::get_path(cj, "spec.startingDeadlineSeconds").and_then(Value::as_i64);
        if let Some(d) = deadline {
            earliest = earliest.max(now - jiff::SignedDuration::from_secs(d));
        }
        if let Some(scheduled) = most_recent(&schedule, &tz, earliest, now) {
            let too_late =
                deadline.is_some_and(|d| scheduled + jiff::SignedDuration::from_secs(d) < now);
            let job = job_for(cj, scheduled, &tz);
            let name = meta::name(&job).unwrap_or_default().to_string();
            let done = last == Some(scheduled) || active.iter().any(|r| r["name"] == name.as_str());
            let policy = meta::get_path(cj, "spec.concurrencyPolicy")
                .and_then(Value::as_str)
                .unwrap_or("Allow");
            let blocked = policy == "Forbid" && !active.is_empty();
            if !too_late && !done && !blocked {
                if policy == "Replace" {
                    for r in active.drain(..) {
                        out.delete.extend(r["name"].as_str().map(String::from));
                    }
                }
                match jobs.iter().find(|j| meta::name(j) == Some(name.as_str())) {
                    // Already there (created before a restart): take it into the active list.
                    Some(existing) => {
                        if job_condition(existing).is_none() {
                            active.push(reference(existing));
                        }
                    }
                    None => out.create = Some(job),
                }
                status["lastScheduleTime"] = json!(format(scheduled));
            }
        }
        let from = now.max(ts(status.get("lastScheduleTime")).unwrap_or(now));
        out.requeue = schedule.next(from, &tz).map(|n| {
            Duration::try_from(n.duration_since(now)).unwrap_or_default()
                + Duration::from_millis(100)
        });
    }
    // History limits: oldest finished Jobs beyond the limits go.
    for (kind, field, default) in [
        ("Complete", "spec.successfulJobsHistoryLimit", 3),
        ("Failed", "spec.failedJobsHistoryLimit", 1),
    ] {
        let limit = meta::get_path(cj, field)
            .and_then(Value::as_i64)
            .unwrap_or(default);
        let mut finished: Vec<&Value> = jobs
            .iter()
            .filter(|j| job_condition(j) == Some(kind))
            .collect();
        let excess =
            usize::try_from(i64::try_from(finished.len()).unwrap_or(0) - limit).unwrap_or(0);
        finished.sort_by_key(|j| {
            (
                meta::get_path(j, "status.startTime")
                    .and_then(Value::as_str)
                    .map(String::from),
                meta::name(j).unwrap_or_default().to_string(),
            )
        });
        for j in finished.into_iter().take(excess) {
            out.delete.extend(meta::name(j).map(String::from));
        }
    }
    if active.is_empty() {
        if let Some(m) = status.as_object_mut() {
            m.remove("active");
        }
    } else {
        status["active"] = Value::Array(active);
    }
    out.status = status;
    out
}

/// One pass over all CronJobs; returns when the next schedule is due.
pub fn reconcile(state: &mut State, now: Timestamp) -> Option<Duration> {
    let cj_gr = GroupResource::new("batch", "cronjobs");
    let jobs_gr = GroupResource::new("batch", "jobs");
    let (Some(cj_def), Some(job_def)) = (
        state.registry.storage_def(&cj_gr),
        state.registry.storage_def(&jobs_gr),
    ) else {
        return None;
    };
    let cronjobs: Vec<Value> = state.list(&cj_gr, None).cloned().collect();
    let mut requeue: Option<Duration> = None;
    for cj in cronjobs {
        let uid = meta::uid(&cj).unwrap_or_default().to_string();
        let ns = meta::namespace(&cj).unwrap_or_default().to_string();
        let jobs: Vec<Value> = state
            .list(&jobs_gr, Some(&ns))
            .filter(|j| {
                meta::owner_references(j)
                    .iter()
                    .any(|r| r["controller"] == true && r["uid"] == uid.as_str())
            })
            .cloned()
            .collect();
        let mut p = plan(&cj, &jobs, now);
        let background = DeleteOptions {
            propagation: Some("Background".into()),
            ..Default::default()
        };
        for name in &p.delete {
            if let Err(e) = delete(state, &job_def, &ns, name, &background) {
                tracing::debug!(error = %e.message, "cronjob controller could not delete a job");
            }
        }
        if let Some(job) = p.create.take() {
            match create(state, &job_def, &ns, job, Fields::Record(MANAGER)) {
                Ok(created) => {
                    let mut active = p.status["active"].as_array().cloned().unwrap_or_default();
                    active.push(reference(&created));
                    p.status["active"] = Value::Array(active);
                }
                Err(e) => {
                    tracing::debug!(error = %e.message, "cronjob controller could not create a job");
                    continue;
                }
            }
        }
        let name = meta::name(&cj).unwrap_or_default();
        if let Some(current) = state.get(&cj_gr, &ns, name).cloned() {
            let mut new = current.clone();
            new["status"] = p.status;
            if let Err(e) = commit(
                state,
                &cj_def,
                &current,
                new,
                "status",
                Fields::Record(MANAGER),
            ) {
                tracing::debug!(error = %e.message, "cronjob status write failed");
            }
        }
        if let Some(r) = p.requeue {
            requeue = Some(requeue.map_or(r, |q| q.min(r)));
        }
    }
    requeue
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn cronjob(spec: Value, status: Value) -> Value {
        json!({"metadata": {"name": "cj", "namespace": "ns", "uid": "cj-uid",
            "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": spec, "status": status})
    }

    fn spec(extra: Value) -> Value {
        let mut s = json!({"schedule": "*/5 * * * *", "jobTemplate": {
            "metadata": {"labels": {"app": "x"}}, "spec": {"template": {"spec": {"containers": []}}}}});
        if let (Value::Object(a), Value::Object(b)) = (&mut s, extra) {
            a.extend(b);
        }
        s
    }

    fn job(name: &str, uid: &str, condition: Option<(&str, &str)>) -> Value {
        let mut j =
            json!({"metadata": {"name": name, "namespace": "ns", "uid": uid}, "status": {}});
        if let Some((kind, at)) = condition {
            j["status"] =
                json!({"startTime": at, "conditions": [{"type": kind, "status": "True"}]});
            if kind == "Complete" {
                j["status"]["completionTime"] = json!(at);
            }
        }
        j
    }

    #[test]
    fn creates_the_job_for_the_most_recent_time() {
        let cj = cronjob(spec(json!({})), json!({}));
        let p = plan(&cj, &[], t("2025-01-01T00:12:30Z"));
        let created = p.create.unwrap();
        // 2025-01-01T00:10:00Z is 28 928 170 minutes after the epoch.
        assert_eq!(created["metadata"]["name"], "cj-28928170");
        assert_eq!(created["metadata"]["labels"]["app"], "x");
        assert_eq!(
            created["metadata"]["annotations"][SCHEDULED_ANNOTATION],
            "2025-01-01T00:10:00Z"
        );
        assert_eq!(
            created["metadata"]["ownerReferences"][0]["controller"],
            true
        );
        assert_eq!(p.status["lastScheduleTime"], "2025-01-01T00:10:00Z");
        assert_eq!(p.requeue, Some(Duration::from_millis(150_100)));
        // Nothing due before the first time.
        assert!(plan(&cj, &[], t("2025-01-01T00:04:00Z")).create.is_none());
    }

    #[test]
    fn concurrency_policies_and_deadline() {
        let running = json!({"lastScheduleTime": "2025-01-01T00:05:00Z",
            "active": [{"kind": "Job", "name": "cj-28928165", "uid": "j1"}]});
        let jobs = [job("cj-28928165", "j1", None)];
        let now = t("2025-01-01T00:10:05Z");
        let allow = plan(&cronjob(spec(json!({})), running.clone()), &jobs, now);
        assert!(allow.create.is_some());
        assert_eq!(allow.status["active"].as_array().unwrap().len(), 1);
        let forbid = plan(
            &cronjob(
                spec(json!({"concurrencyPolicy": "Forbid"})),
                running.clone(),
            ),
            &jobs,
            now,
        );
        assert!(forbid.create.is_none());
        assert_eq!(forbid.status["lastScheduleTime"], "2025-01-01T00:05:00Z");
        let replace = plan(
            &cronjob(
                spec(json!({"concurrencyPolicy": "Replace"})),
                running.clone(),
            ),
            &jobs,
            now,
        );
        assert!(replace.create.is_some());
        assert_eq!(replace.delete, ["cj-28928165"]);
        assert!(replace.status.get("active").is_none());
        let late = plan(
            &cronjob(spec(json!({"startingDeadlineSeconds": 3})), running),
            &jobs,
            now,
        );
        assert!(late.create.is_none());
        let suspended = plan(
            &cronjob(spec(json!({"suspend": true})), json!({})),
            &[],
            now,
        );
        assert!(suspended.create.is_none() && suspended.requeue.is_none());
    }

    #[test]
    fn finished_jobs_leave_active_and_history_is_trimmed() {
        let status = json!({"lastScheduleTime": "2025-01-01T00:10:00Z",
            "active": [{"name": "cj-c", "uid": "c"}, {"name": "cj-gone", "uid": "gone"}]});
        let jobs = [
            job("cj-a", "a", Some(("Complete", "2025-01-01T00:01:00Z"))),
            job("cj-b", "b", Some(("Complete", "2025-01-01T00:02:00Z"))),
            job("cj-c", "c", Some(("Complete", "2025-01-01T00:03:00Z"))),
            job("cj-d", "d", Some(("Failed", "2025-01-01T00:04:00Z"))),
            job("cj-e", "e", Some(("Failed", "2025-01-01T00:05:00Z"))),
        ];
        let p = plan(
            &cronjob(spec(json!({"successfulJobsHistoryLimit": 2})), status),
            &jobs,
            t("2025-01-01T00:11:00Z"),
        );
        assert!(p.status.get("active").is_none());
        assert_eq!(p.status["lastSuccessfulTime"], "2025-01-01T00:03:00Z");
        assert_eq!(p.delete, ["cj-a", "cj-d"]);
    }

    #[test]
    fn time_zone_shifts_the_schedule() {
        let cj = cronjob(
            spec(json!({"schedule": "0 9 * * *", "timeZone": "Europe/Berlin"})),
            json!({}),
        );
        let p = plan(&cj, &[], t("2025-01-01T08:30:00Z"));
        let job = p.create.unwrap();
        assert_eq!(p.status["lastScheduleTime"], "2025-01-01T08:00:00Z");
        assert_eq!(
            job["metadata"]["annotations"][SCHEDULED_ANNOTATION],
            "2025-01-01T09:00:00+01:00"
        );
        let bad = cronjob(spec(json!({"timeZone": "Mars/Olympus"})), json!({}));
        assert!(plan(&bad, &[], t("2025-01-01T08:30:00Z")).create.is_none());
    }
}
