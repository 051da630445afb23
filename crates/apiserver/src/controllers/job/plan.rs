//! What the Job controller does for one NonIndexed Job, as a pure function of the Job, its Pods
//! and the time: count finished Pods (those still carrying the `batch.kubernetes.io/job-tracking`
//! finalizer are counted once, and the finalizer goes), decide whether the Job failed
//! (`backoffLimit`, `activeDeadlineSeconds`) or met its success criteria (`completions`, or any
//! success for work-queue Jobs), create or delete Pods towards `parallelism` (none while
//! suspended, none during the failure back-off), and compute the status the real controller
//! (1.33) writes: `active`, `ready`, `terminating`, `succeeded`, `failed`, `startTime`,
//! `completionTime`, `uncountedTerminatedPods: {}` and the conditions `Suspended`,
//! `FailureTarget` then `Failed`, `SuccessCriteriaMet` then `Complete` (the terminal condition
//! only once no Pod is terminating).

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::meta;

pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";

/// First and longest delay before replacing failed Pods (the real controller's values).
const BACKOFF_BASE: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(360);

/// Failures since the last success and when the last one was counted (kept in memory, as the
/// real controller's back-off records are).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Backoff {
    pub failures: u32,
    pub last_failure: Option<jiff::Timestamp>,
}

impl Backoff {
    /// Time left before new Pods may be created: 10 s · 2^(failures−1), at most 6 minutes.
    pub fn remaining(&self, now: jiff::Timestamp) -> Duration {
        let Some(last) = self.last_failure.filter(|_| self.failures > 0) else {
            return Duration::ZERO;
        };
        let shift = (self.failures - 1).min(16);
        let delay = BACKOFF_BASE.saturating_mul(1 << shift).min(BACKOFF_MAX);
        let elapsed = Duration::try_from(now.duration_since(last)).unwrap_or(Duration::ZERO);
        delay.saturating_sub(elapsed)
    }
}

#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Pods to create from the template.
    pub create: usize,
    /// Pods whose tracking finalizer goes (by name); applied before `delete`, so a Pod in both
    /// is deleted uncounted (suspend, surplus) while one only in `delete` counts as failed.
    pub release: Vec<String>,
    /// Pods to delete (by name).
    pub delete: Vec<String>,
    /// The Job's new status.
    pub status: Value,
    pub new_succeeded: i64,
    pub new_failed: i64,
    /// When to look again (deadline, back-off).
    pub requeue: Option<Duration>,
}

fn phase(pod: &Value) -> &str {
    meta::get_path(pod, "status.phase")
        .and_then(Value::as_str)
        .unwrap_or("Pending")
}

fn is_terminal(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

fn is_ready(pod: &Value) -> bool {
    meta::get_path(pod, "status.conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn int(job: &Value, path: &str) -> Option<i64> {
    meta::get_path(job, path).and_then(Value::as_i64)
}

fn condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn has_true(status: &Value, kind: &str) -> bool {
    condition(status, kind).is_some_and(|c| c["status"] == "True")
}

/// A Pod for `job` from its template: `generateName: <job>-`, the template's labels and
/// annotations, a controller reference (with `blockOwnerDeletion`) and the tracking finalizer.
pub fn pod_for(job: &Value) -> Value {
    let name = meta::name(job).unwrap_or_default();
    let uid = meta::uid(job).unwrap_or_default();
    let template = meta::get_path(job, "spec.template")
        .cloned()
        .unwrap_or(Value::Null);
    let mut md = json!({
        "generateName": format!("{name}-"),
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
            "controller": true, "blockOwnerDeletion": true}],
        "finalizers": [TRACKING_FINALIZER],
    });
    for k in ["labels", "annotations"] {
        if let Some(v) =
            meta::get_path(&template, &format!("metadata.{k}")).filter(|v| v.is_object())
        {
            md[k] = v.clone();
        }
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": md,
        "spec": template.get("spec").cloned().unwrap_or(json!({}))})
}

/// Whether the Job has a terminal condition (`Complete` or `Failed`).
pub fn is_finished(job: &Value) -> bool {
    let status = job.get("status").cloned().unwrap_or(Value::Null);
    has_true(&status, "Complete") || has_true(&status, "Failed")
}

/// Sets a condition (kept as is when type, status, reason and message are unchanged).
fn set_condition(status: &mut Value, kind: &str, st: &str, reason: &str, message: &str, now: &str) {
    let mut list: Vec<Value> = status["conditions"].as_array().cloned().unwrap_or_default();
    if let Some(c) = list.iter_mut().find(|c| c["type"] == kind) {
        if c["status"] == st && c["reason"] == reason && c["message"] == message {
            return;
        }
        if c["status"] != st {
            c["lastTransitionTime"] = json!(now);
        }
        c["status"] = json!(st);
        c["reason"] = json!(reason);
        c["message"] = json!(message);
        c["lastProbeTime"] = json!(now);
    } else {
        list.push(json!({"type": kind, "status": st, "lastProbeTime": now,
            "lastTransitionTime": now, "reason": reason, "message": message}));
    }
    status["conditions"] = Value::Array(list);
}

/// Restarts of active Pods count against `backoffLimit` when the template restarts on failure.
fn past_backoff_on_failure(job: &Value, active: &[&Value], limit: i64) -> bool {
    if meta::get_path(job, "spec.template.spec.restartPolicy").and_then(Value::as_str)
        != Some("OnFailure")
    {
        return false;
    }
    let restarts: i64 = active
        .iter()
        .flat_map(|p| {
            ["status.initContainerStatuses", "status.containerStatuses"]
                .into_iter()
                .filter_map(|f| meta::get_path(p, f).and_then(Value::as_array))
                .flatten()
        })
        .filter_map(|s| s["restartCount"].as_i64())
        .sum();
    if limit == 0 {
        restarts > 0
    } else {
        restarts >= limit
    }
}

/// Order in which surplus active Pods go: unscheduled, then pending, then not ready, newest first.
fn removal_order(pods: &mut [&Value]) {
    pods.sort_by_key(|p| {
        let bound = meta::get_path(p, "spec.nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let running = phase(p) == "Running";
        let created = meta::str_field(p, "creationTimestamp")
            .unwrap_or_default()
            .to_string();
        (bound, running, is_ready(p), std::cmp::Reverse(created))
    });
}

/// The plan for `job` given the Pods it controls, at `now`.
pub fn plan(job: &Value, pods: &[Value], now: jiff::Timestamp, backoff: Backoff) -> Plan {
    let now_s = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let mut status = match job.get("status") {
        Some(Value::Object(m)) => Value::Object(m.clone()),
        _ => Value::Object(Map::new()),
    };
    let mut out = Plan::default();
    let finished = is_finished(job);
    let deleting = meta::is_deleting(job);
    // Count Pods that finished (or are being deleted) and still carry the finalizer.
    for p in pods {
        if !meta::finalizers(p).iter().any(|f| f == TRACKING_FINALIZER) {
            continue;
        }
        let name = meta::name(p).unwrap_or_default().to_string();
        match phase(p) {
            "Succeeded" => out.new_succeeded += 1,
            "Failed" => out.new_failed += 1,
            _ if meta::is_deleting(p) => out.new_failed += 1,
            _ if finished || deleting => {}
            _ => continue,
        }
        out.release.push(name);
    }
    let succeeded = int(&status, "succeeded").unwrap_or(0) + out.new_succeeded;
    let failed = int(&status, "failed").unwrap_or(0) + out.new_failed;
    let mut active: Vec<&Value> = pods
        .iter()
        .filter(|p| !is_terminal(p) && !meta::is_deleting(p))
        .collect();
    let mut terminating = pods
        .iter()
        .filter(|p| !is_terminal(p) && meta::is_deleting(p))
        .count();
    if finished {
        out.status = status;
        return out;
    }
    let suspended = meta::get_path(job, "spec.suspend").and_then(Value::as_bool) == Some(true);
    if status.get("startTime").is_none_or(Value::is_null) && !suspended {
        status["startTime"] = json!(now_s);
    }
    let limit = int(job, "spec.backoffLimit").unwrap_or(6);
    let start = status["startTime"]
        .as_str()
        .and_then(|s| s.parse::<jiff::Timestamp>().ok());
    // The failure or success already decided on an earlier pass, else a new decision.
    let mut failure: Option<(String, String)> = condition(&status, "FailureTarget")
        .filter(|c| c["status"] == "True")
        .map(|c| {
            (
                c["reason"].as_str().unwrap_or_default().to_string(),
                c["message"].as_str().unwrap_or_default().to_string(),
            )
        });
    let mut success = has_true(&status, "SuccessCriteriaMet");
    if failure.is_none() && !success {
        if failed > limit || past_backoff_on_failure(job, &active, limit) {
            failure = Some((
                "BackoffLimitExceeded".into(),
                "Job has reached the specified backoff limit".into(),
            ));
        } else if let (Some(ads), Some(start), false) =
            (int(job, "spec.activeDeadlineSeconds"), start, suspended)
        {
            let deadline = start + jiff::SignedDuration::from_secs(ads);
            if deadline <= now {
                failure = Some((
                    "DeadlineExceeded".into(),
                    "Job was active longer than specified deadline".into(),
                ));
            } else {
                out.requeue =
                    Some(Duration::try_from(deadline.duration_since(now)).unwrap_or_default());
            }
        }
    }
    let mut created = 0usize;
    if let Some((reason, message)) = &failure {
        for p in &active {
            out.delete
                .push(meta::name(p).unwrap_or_default().to_string());
        }
        terminating += active.len();
        active.clear();
        set_condition(
            &mut status,
            "FailureTarget",
            "True",
            reason,
            message,
            &now_s,
        );
        if terminating == 0 {
            set_condition(&mut status, "Failed", "True", reason, message, &now_s);
        }
    } else {
        let parallelism = int(job, "spec.parallelism").unwrap_or(1).max(0);
        let completions = int(job, "spec.completions");
        if !deleting && !success {
            let n = i64::try_from(active.len()).unwrap_or(i64::MAX);
            let want = if suspended {
                0
            } else {
                match completions {
                    None if succeeded > 0 => n,
                    None => parallelism,
                    Some(c) => (c - succeeded).clamp(0, parallelism),
                }
            };
            if n > want {
                let surplus = usize::try_from(n - want).unwrap_or(0);
                removal_order(&mut active);
                for p in active.drain(..surplus) {
                    let name = meta::name(p).unwrap_or_default().to_string();
                    out.release.push(name.clone());
                    out.delete.push(name);
                }
                terminating += surplus;
            } else if n < want {
                let wait = backoff.remaining(now);
                if wait.is_zero() {
                    created = usize::try_from(want - n).unwrap_or(0);
                    out.create = created;
                } else {
                    out.requeue = Some(out.requeue.map_or(wait, |r| r.min(wait)));
                }
            }
        }
        let active_now = active.len() + created;
        success = success
            || match completions {
                None => succeeded > 0 && active_now == 0,
                Some(c) => succeeded >= c && active_now == 0,
            };
        if success {
            let (reason, message) = (
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            );
            set_condition(
                &mut status,
                "SuccessCriteriaMet",
                "True",
                reason,
                message,
                &now_s,
            );
            if terminating == 0 {
                set_condition(&mut status, "Complete", "True", reason, message, &now_s);
                status["completionTime"] = json!(now_s);
            }
        } else if suspended {
            set_condition(
                &mut status,
                "Suspended",
                "True",
                "JobSuspended",
                "Job suspended",
                &now_s,
            );
        } else if has_true(&status, "Suspended") {
            set_condition(
                &mut status,
                "Suspended",
                "False",
                "JobResumed",
                "Job resumed",
                &now_s,
            );
            status["startTime"] = json!(now_s);
        }
    }
    let ready = active.iter().filter(|p| is_ready(p)).count();
    status["active"] = json!(active.len() + created);
    status["ready"] = json!(ready);
    status["terminating"] = json!(terminating);
    status["succeeded"] = json!(succeeded);
    status["failed"] = json!(failed);
    status["uncountedTerminatedPods"] = json!({});
    if let Some(m) = status.as_object_mut() {
        // Zero counters are omitted, as the real status serialises them.
        for k in ["active", "succeeded", "failed"] {
            if m.get(k) == Some(&json!(0)) {
                m.remove(k);
            }
        }
    }
    out.status = status;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    fn job(spec: Value) -> Value {
        json!({"metadata": {"name": "j", "uid": "u1"}, "spec": spec})
    }

    fn pod(name: &str, phase: &str, tracked: bool) -> Value {
        let mut p = json!({"metadata": {"name": name, "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": {}, "status": {"phase": phase}});
        if tracked {
            p["metadata"]["finalizers"] = json!([TRACKING_FINALIZER]);
        }
        p
    }

    fn cond<'a>(p: &'a Plan, kind: &str) -> Option<&'a Value> {
        condition(&p.status, kind)
    }

    const NOW: &str = "2025-01-01T00:01:00Z";

    #[test]
    fn creates_pods_up_to_parallelism_and_remaining_completions() {
        let j = job(json!({"parallelism": 3, "completions": 4}));
        let p = plan(&j, &[], t(NOW), Backoff::default());
        assert_eq!(p.create, 3);
        assert_eq!(p.status["active"], 3);
        assert_eq!(p.status["startTime"], NOW);
        assert_eq!(p.status["uncountedTerminatedPods"], json!({}));
        // Two done, one running: only one more is needed.
        let pods = [
            pod("a", "Succeeded", true),
            pod("b", "Succeeded", true),
            pod("c", "Running", true),
        ];
        let p = plan(&j, &pods, t(NOW), Backoff::default());
        assert_eq!((p.create, p.new_succeeded), (1, 2));
        assert_eq!(p.release, ["a", "b"]);
        assert_eq!(p.status["succeeded"], 2);
        assert!(cond(&p, "Complete").is_none());
    }

    #[test]
    fn success_criteria_then_complete_once_nothing_terminates() {
        let j = job(json!({"parallelism": 1, "completions": 1}));
        let pods = [pod("a", "Succeeded", true)];
        let p = plan(&j, &pods, t(NOW), Backoff::default());
        assert_eq!(p.create, 0);
        assert_eq!(
            cond(&p, "SuccessCriteriaMet").unwrap()["reason"],
            "CompletionsReached"
        );
        assert_eq!(
            cond(&p, "Complete").unwrap()["message"],
            "Reached expected number of succeeded pods"
        );
        assert_eq!(p.status["completionTime"], NOW);
        // Already counted (finalizer gone): the counters come from status.
        let mut done = j.clone();
        done["status"] = p.status.clone();
        let again = plan(
            &done,
            &[pod("a", "Succeeded", false)],
            t(NOW),
            Backoff::default(),
        );
        assert!(again.release.is_empty());
        assert_eq!(again.status, p.status);
    }

    #[test]
    fn work_queue_jobs_complete_after_one_success_and_no_active_pods() {
        let j = job(json!({"parallelism": 2}));
        let pods = [pod("a", "Succeeded", true), pod("b", "Running", true)];
        let p = plan(&j, &pods, t(NOW), Backoff::default());
        assert_eq!(p.create, 0, "no new pods after a success");
        assert!(cond(&p, "SuccessCriteriaMet").is_none());
        let pods = [pod("a", "Succeeded", true), pod("b", "Succeeded", true)];
        let p = plan(&j, &pods, t(NOW), Backoff::default());
        assert!(cond(&p, "Complete").is_some());
    }

    #[test]
    fn backoff_limit_fails_the_job_after_its_pods_terminate() {
        let j = job(json!({"parallelism": 2, "completions": 2, "backoffLimit": 1}));
        let pods = [
            pod("a", "Failed", true),
            pod("b", "Failed", true),
            pod("c", "Running", true),
        ];
        let p = plan(&j, &pods, t(NOW), Backoff::default());
        assert_eq!(p.status["failed"], 2);
        assert_eq!(p.delete, ["c"]);
        assert_eq!(
            cond(&p, "FailureTarget").unwrap()["reason"],
            "BackoffLimitExceeded"
        );
        assert!(cond(&p, "Failed").is_none(), "c is still terminating");
        assert_eq!(p.status["terminating"], 1);
        let mut next = j.clone();
        next["status"] = p.status.clone();
        let mut c = pod("c", "Running", true);
        c["metadata"]["deletionTimestamp"] = json!(NOW);
        let p = plan(&next, &[c], t(NOW), Backoff::default());
        assert_eq!(p.status["failed"], 3, "a deleted pod counts as failed");
        assert!(cond(&p, "Failed").is_none());
        next["status"] = p.status.clone();
        let p = plan(&next, &[], t(NOW), Backoff::default());
        assert_eq!(
            cond(&p, "Failed").unwrap()["message"],
            "Job has reached the specified backoff limit"
        );
        assert!(p.status.get("completionTime").is_none());
    }

    #[test]
    fn replacements_wait_for_the_backoff() {
        let b = Backoff {
            failures: 2,
            last_failure: Some(t("2025-01-01T00:00:50Z")),
        };
        assert_eq!(b.remaining(t(NOW)), Duration::from_secs(10));
        let j = job(json!({"completions": 1, "backoffLimit": 6}));
        let p = plan(&j, &[pod("a", "Failed", false)], t(NOW), b);
        assert_eq!((p.create, p.requeue), (0, Some(Duration::from_secs(10))));
        let many = Backoff { failures: 30, ..b };
        assert_eq!(many.remaining(t("2025-01-01T00:00:50Z")), BACKOFF_MAX);
    }

    #[test]
    fn deadline_and_suspend() {
        let mut j = job(json!({"completions": 1, "activeDeadlineSeconds": 30}));
        j["status"] = json!({"startTime": "2025-01-01T00:00:00Z"});
        let p = plan(&j, &[pod("a", "Running", true)], t(NOW), Backoff::default());
        assert_eq!(
            cond(&p, "FailureTarget").unwrap()["reason"],
            "DeadlineExceeded"
        );
        assert_eq!(p.delete, ["a"]);
        let early = plan(
            &j,
            &[pod("a", "Running", true)],
            t("2025-01-01T00:00:20Z"),
            Backoff::default(),
        );
        assert_eq!(early.requeue, Some(Duration::from_secs(10)));

        let s = job(json!({"completions": 1, "suspend": true}));
        let p = plan(&s, &[pod("a", "Running", true)], t(NOW), Backoff::default());
        assert_eq!(
            (p.release.as_slice(), p.delete.as_slice()),
            (&["a".to_string()][..], &["a".to_string()][..])
        );
        assert_eq!(cond(&p, "Suspended").unwrap()["status"], "True");
        assert!(p.status.get("startTime").is_none());
        let mut resumed = job(json!({"completions": 1, "suspend": false}));
        resumed["status"] = p.status.clone();
        let p = plan(&resumed, &[], t(NOW), Backoff::default());
        assert_eq!(p.create, 1);
        assert_eq!(cond(&p, "Suspended").unwrap()["reason"], "JobResumed");
    }
}
