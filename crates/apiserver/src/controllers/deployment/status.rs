//! Deployment status as upstream computes it (`calculateStatus` and `syncRolloutStatus`): counts
//! summed over the ReplicaSets, `Available` (`MinimumReplicasAvailable` /
//! `MinimumReplicasUnavailable`) and `Progressing` (`NewReplicaSetCreated`, `FoundNewReplicaSet`,
//! `ReplicaSetUpdated`, `NewReplicaSetAvailable`, `ProgressDeadlineExceeded`,
//! `DeploymentPaused`), with upstream's rule that a condition whose status and reason are
//! unchanged is not rewritten.

use std::time::Duration;

use serde_json::{Value, json};

use crate::controllers::workload::replicas;
use crate::meta;

fn int(v: &Value, path: &str) -> i64 {
    meta::get_path(v, path).and_then(Value::as_i64).unwrap_or(0)
}

fn condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Upstream `SetDeploymentCondition`: same status and reason → unchanged; same status → keep the
/// transition time; the condition moves to the end of the list.
fn set(status: &mut Value, kind: &str, st: &str, reason: &str, msg: &str, now: &str) {
    let current = condition(status, kind).cloned();
    if current
        .as_ref()
        .is_some_and(|c| c["status"] == st && c["reason"] == reason)
    {
        return;
    }
    let transition = match &current {
        Some(c) if c["status"] == st => c["lastTransitionTime"].clone(),
        _ => json!(now),
    };
    let mut list: Vec<Value> = status["conditions"].as_array().cloned().unwrap_or_default();
    list.retain(|c| c["type"] != kind);
    list.push(json!({"type": kind, "status": st, "lastUpdateTime": now,
        "lastTransitionTime": transition, "reason": reason, "message": msg}));
    status["conditions"] = Value::Array(list);
}

/// Upstream `DeploymentComplete`.
pub fn complete(d: &Value, status: &Value) -> bool {
    let want = replicas(d);
    status["updatedReplicas"] == want
        && status["replicas"] == want
        && status["availableReplicas"] == want
        && status["observedGeneration"].as_i64().unwrap_or(0) >= meta::generation(d)
}

/// The new status and when the progress deadline is next due.
pub fn compute(
    d: &Value,
    sets: &[Value],
    new_idx: Option<usize>,
    created: Option<&str>,
    max_unavailable: i64,
    now: jiff::Timestamp,
) -> (Value, Option<Duration>) {
    let now_s = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let old = d.get("status").cloned().unwrap_or(json!({}));
    let sum = |path: &str| sets.iter().map(|s| int(s, path)).sum::<i64>();
    let available = sum("status.availableReplicas");
    let mut st = json!({
        "observedGeneration": meta::generation(d),
        "replicas": sum("status.replicas"),
        "updatedReplicas": new_idx.map_or(0, |i| int(&sets[i], "status.replicas")),
        "readyReplicas": sum("status.readyReplicas"),
        "availableReplicas": available,
        "unavailableReplicas": (sum("spec.replicas") - available).max(0),
    });
    for k in ["conditions", "collisionCount"] {
        if let Some(v) = old.get(k) {
            st[k] = v.clone();
        }
    }
    let desired = replicas(d);
    let max_unavailable = max_unavailable.min(desired);
    if available >= desired - max_unavailable {
        set(
            &mut st,
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
            &now_s,
        );
    } else {
        set(
            &mut st,
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            &now_s,
        );
    }
    let new_name = new_idx
        .and_then(|i| meta::name(&sets[i]))
        .unwrap_or_default()
        .to_string();
    let subject = if new_name.is_empty() {
        format!("Deployment \"{}\"", meta::name(d).unwrap_or_default())
    } else {
        format!("ReplicaSet \"{new_name}\"")
    };
    if meta::get_path(d, "spec.paused").and_then(Value::as_bool) == Some(true) {
        set(
            &mut st,
            "Progressing",
            "Unknown",
            "DeploymentPaused",
            "Deployment is paused",
            &now_s,
        );
        return (st, None);
    }
    if let Some(c) = created {
        set(
            &mut st,
            "Progressing",
            "True",
            "NewReplicaSetCreated",
            &format!("Created new replica set \"{c}\""),
            &now_s,
        );
    } else if !new_name.is_empty() && condition(&st, "Progressing").is_none() {
        set(
            &mut st,
            "Progressing",
            "True",
            "FoundNewReplicaSet",
            &format!("Found new replica set \"{new_name}\""),
            &now_s,
        );
    }
    let deadline = meta::get_path(d, "spec.progressDeadlineSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(600);
    let progressing = condition(&st, "Progressing").cloned();
    let done = st["replicas"] == st["updatedReplicas"]
        && progressing
            .as_ref()
            .is_some_and(|c| c["reason"] == "NewReplicaSetAvailable");
    let mut requeue = None;
    if done || deadline == i64::from(i32::MAX) || created.is_some() {
        return (st, requeue);
    }
    let old_old = int(&old, "replicas") - int(&old, "updatedReplicas");
    let new_old = int(&st, "replicas") - int(&st, "updatedReplicas");
    if complete(d, &st) {
        set(
            &mut st,
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            &format!("{subject} has successfully progressed."),
            &now_s,
        );
    } else if int(&st, "updatedReplicas") > int(&old, "updatedReplicas")
        || new_old < old_old
        || int(&st, "readyReplicas") > int(&old, "readyReplicas")
        || available > int(&old, "availableReplicas")
    {
        // Progress refreshes lastUpdateTime even when the reason stays the same.
        let mut list: Vec<Value> = st["conditions"].as_array().cloned().unwrap_or_default();
        let transition = progressing
            .as_ref()
            .filter(|c| c["status"] == "True")
            .map_or(json!(now_s), |c| c["lastTransitionTime"].clone());
        list.retain(|c| c["type"] != "Progressing");
        list.push(
            json!({"type": "Progressing", "status": "True", "lastUpdateTime": now_s,
            "lastTransitionTime": transition, "reason": "ReplicaSetUpdated",
            "message": format!("{subject} is progressing.")}),
        );
        st["conditions"] = Value::Array(list);
    } else if let Some(c) = progressing.filter(|c| c["reason"] != "ProgressDeadlineExceeded") {
        let from = c["lastUpdateTime"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .unwrap_or(now);
        let due = from + jiff::SignedDuration::from_secs(deadline);
        if due < now {
            set(
                &mut st,
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                &format!("{subject} has timed out progressing."),
                &now_s,
            );
        } else {
            requeue = Duration::try_from(due.duration_since(now))
                .ok()
                .map(|d| d + Duration::from_secs(1));
        }
    }
    (st, requeue)
}
