//! What the ReplicaSet controller does for one ReplicaSet, as a pure function of the set, the Pods
//! it controls, the namespace's orphan Pods and the time: adopt matching orphans, release Pods
//! that stopped matching the selector, create or delete Pods towards `spec.replicas` (nothing
//! while the set is being deleted), and compute the status kube-controller-manager writes
//! (`replicas`, `fullyLabeledReplicas`, `readyReplicas`, `availableReplicas` after
//! `minReadySeconds`, `observedGeneration`). Surplus Pods go in upstream's order: unscheduled,
//! then Pending before Unknown before Running, not ready before ready, ready for less time,
//! more restarts, newer.

use std::cmp::Reverse;
use std::time::Duration;

use serde_json::{Value, json};

use crate::controllers::workload::{
    is_active, is_ready, phase, replicas, selects, until_available,
};
use crate::meta;

#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Pods to create from the template.
    pub create: usize,
    /// Pods to delete, by name.
    pub delete: Vec<String>,
    /// Orphans to adopt, by name.
    pub adopt: Vec<String>,
    /// Controlled Pods the selector no longer selects, by name.
    pub release: Vec<String>,
    pub status: Value,
    /// When a ready Pod becomes available.
    pub requeue: Option<Duration>,
}

fn restarts(pod: &Value) -> i64 {
    meta::get_path(pod, "status.containerStatuses")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|s| s["restartCount"].as_i64()).sum())
        .unwrap_or(0)
}

/// Sorts Pods so that the ones to delete first come first.
pub fn deletion_order(pods: &mut [&Value]) {
    pods.sort_by_key(|p| {
        let bound = meta::get_path(p, "spec.nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let phase_rank = match phase(p) {
            "Pending" => 0,
            "Unknown" => 1,
            _ => 2,
        };
        let ready_since = meta::get_path(p, "status.conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
            .and_then(|c| c["lastTransitionTime"].as_str())
            .unwrap_or_default()
            .to_string();
        let created = meta::str_field(p, "creationTimestamp")
            .unwrap_or_default()
            .to_string();
        (
            bound,
            phase_rank,
            is_ready(p),
            Reverse(ready_since),
            Reverse(restarts(p)),
            Reverse(created),
        )
    });
}

/// The plan for `rs`, given the Pods it controls and the orphan Pods of its namespace.
pub fn plan(rs: &Value, owned: &[Value], orphans: &[Value], now: jiff::Timestamp) -> Plan {
    let mut out = Plan::default();
    let selector = meta::get_path(rs, "spec.selector");
    let deleting = meta::is_deleting(rs);
    let mut mine: Vec<&Value> = Vec::new();
    for p in owned {
        if selects(selector, meta::labels_ref(p)) {
            mine.push(p);
        } else {
            out.release
                .push(meta::name(p).unwrap_or_default().to_string());
        }
    }
    if !deleting {
        for p in orphans {
            if !meta::is_deleting(p) && selects(selector, meta::labels_ref(p)) {
                out.adopt
                    .push(meta::name(p).unwrap_or_default().to_string());
                mine.push(p);
            }
        }
    }
    let active: Vec<&Value> = mine.into_iter().filter(|p| is_active(p)).collect();
    let want = usize::try_from(replicas(rs).max(0)).unwrap_or(0);
    if !deleting {
        if active.len() < want {
            out.create = want - active.len();
        } else if active.len() > want {
            let mut order = active.clone();
            deletion_order(&mut order);
            out.delete = order[..active.len() - want]
                .iter()
                .map(|p| meta::name(p).unwrap_or_default().to_string())
                .collect();
        }
    }
    let template_labels = meta::get_path(rs, "spec.template.metadata.labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let min_ready = meta::get_path(rs, "spec.minReadySeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let fully = active
        .iter()
        .filter(|p| {
            let l = meta::labels(p);
            template_labels.iter().all(|(k, v)| l.get(k) == Some(v))
        })
        .count();
    let ready = active.iter().filter(|p| is_ready(p)).count();
    let mut available = 0;
    for p in &active {
        match until_available(p, min_ready, now) {
            Some(Duration::ZERO) => available += 1,
            Some(left) => out.requeue = Some(out.requeue.map_or(left, |r: Duration| r.min(left))),
            None => {}
        }
    }
    let mut status = match rs.get("status") {
        Some(Value::Object(m)) => Value::Object(m.clone()),
        _ => json!({}),
    };
    status["replicas"] = json!(active.len());
    status["fullyLabeledReplicas"] = json!(fully);
    status["readyReplicas"] = json!(ready);
    status["availableReplicas"] = json!(available);
    status["observedGeneration"] = json!(meta::generation(rs));
    out.status = status;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(replicas: i64) -> Value {
        json!({"metadata": {"name": "web", "uid": "u1", "generation": 3},
            "spec": {"replicas": replicas, "minReadySeconds": 10,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web", "tier": "front"}}, "spec": {}}}})
    }

    fn pod(
        name: &str,
        node: Option<&str>,
        phase: &str,
        ready_at: Option<&str>,
        created: &str,
    ) -> Value {
        let mut p = json!({"metadata": {"name": name, "labels": {"app": "web", "tier": "front"},
            "creationTimestamp": created}, "spec": {}, "status": {"phase": phase}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        if let Some(t) = ready_at {
            p["status"]["conditions"] =
                json!([{"type": "Ready", "status": "True", "lastTransitionTime": t}]);
        }
        p
    }

    fn now() -> jiff::Timestamp {
        "2026-01-01T00:01:00Z".parse().unwrap()
    }

    #[test]
    fn creates_missing_pods_and_counts_status() {
        let pods = vec![
            pod(
                "a",
                Some("n"),
                "Running",
                Some("2026-01-01T00:00:00Z"),
                "2026-01-01T00:00:00Z",
            ),
            pod(
                "b",
                Some("n"),
                "Running",
                Some("2026-01-01T00:00:55Z"),
                "2026-01-01T00:00:00Z",
            ),
        ];
        let p = plan(&rs(4), &pods, &[], now());
        assert_eq!(p.create, 2);
        assert!(p.delete.is_empty());
        assert_eq!(p.status["replicas"], 2);
        assert_eq!(p.status["readyReplicas"], 2);
        assert_eq!(p.status["availableReplicas"], 1);
        assert_eq!(p.status["fullyLabeledReplicas"], 2);
        assert_eq!(p.status["observedGeneration"], 3);
        assert_eq!(p.requeue, Some(Duration::from_secs(5)));
    }

    #[test]
    fn deletes_unscheduled_pending_and_unready_pods_first() {
        let pods = vec![
            pod(
                "ready-old",
                Some("n"),
                "Running",
                Some("2026-01-01T00:00:00Z"),
                "2026-01-01T00:00:00Z",
            ),
            pod(
                "ready-new",
                Some("n"),
                "Running",
                Some("2026-01-01T00:00:30Z"),
                "2026-01-01T00:00:00Z",
            ),
            pod(
                "unready",
                Some("n"),
                "Running",
                None,
                "2026-01-01T00:00:00Z",
            ),
            pod(
                "pending",
                Some("n"),
                "Pending",
                None,
                "2026-01-01T00:00:00Z",
            ),
            pod("unbound", None, "Pending", None, "2026-01-01T00:00:00Z"),
        ];
        assert_eq!(
            plan(&rs(2), &pods, &[], now()).delete,
            ["unbound", "pending", "unready"]
        );
        assert_eq!(
            plan(&rs(1), &pods, &[], now()).delete,
            ["unbound", "pending", "unready", "ready-new"]
        );
    }

    #[test]
    fn adopts_matching_orphans_and_releases_unselected_pods() {
        let mut stray = pod("stray", None, "Pending", None, "2026-01-01T00:00:00Z");
        stray["metadata"]["labels"] = json!({"app": "other"});
        let orphan = pod("orphan", None, "Pending", None, "2026-01-01T00:00:00Z");
        let mut other = pod("other", None, "Pending", None, "2026-01-01T00:00:00Z");
        other["metadata"]["labels"] = json!({"app": "x"});
        let p = plan(&rs(1), &[stray], &[orphan, other], now());
        assert_eq!(p.adopt, ["orphan"]);
        assert_eq!(p.release, ["stray"]);
        assert_eq!(p.create, 0);
        assert_eq!(p.status["replicas"], 1);
    }

    #[test]
    fn terminating_and_finished_pods_are_replaced_and_a_deleting_set_does_nothing() {
        let mut gone = pod("gone", Some("n"), "Running", None, "2026-01-01T00:00:00Z");
        gone["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:50Z");
        let failed = pod("failed", Some("n"), "Failed", None, "2026-01-01T00:00:00Z");
        let p = plan(&rs(2), &[gone.clone(), failed.clone()], &[], now());
        assert_eq!(p.create, 2);
        assert_eq!(p.status["replicas"], 0);
        let mut deleting = rs(2);
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:50Z");
        assert_eq!(plan(&deleting, &[gone, failed], &[], now()).create, 0);
    }
}
