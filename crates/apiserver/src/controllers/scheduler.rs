//! A minimal scheduler: binds Pods that have no `spec.nodeName` and use the default scheduler
//! to a Ready, schedulable Node whose labels satisfy the Pod's `nodeSelector` and required node
//! affinity (`matchExpressions` with In/NotIn/Exists/DoesNotExist/Gt/Lt, `matchFields` on
//! `metadata.name`) and whose NoSchedule/NoExecute taints the Pod tolerates; among those it picks
//! the Node with the fewest Pods (then by name). Pods that fit nowhere get `PodScheduled=False`
//! (`Unschedulable`). Resource requests, pod (anti-)affinity, topology spread and preemption are
//! not considered. Event-driven: a pass looks at the Pods that changed, and at every pending
//! Pod only when a Node came, went, or changed readiness, labels or taints (as the real
//! scheduler moves unschedulable Pods back to its active queue on such Node events).

use serde_json::{Value, json};

use super::Changes;
use crate::meta;
use crate::registry::GroupResource;
use crate::store::{State, WatchEvent};
use crate::write::{Fields, commit};

const MANAGER: &str = "kube-scheduler";

fn is_ready(node: &Value) -> bool {
    let ready = meta::get_path(node, "status.conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
    ready && meta::get_path(node, "spec.unschedulable").and_then(Value::as_bool) != Some(true)
}

fn expr_matches(expr: &Value, value: Option<&str>) -> bool {
    let values: Vec<&str> = expr["values"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let num = |s: &str| s.parse::<i64>().ok();
    match expr["operator"].as_str().unwrap_or_default() {
        "In" => value.is_some_and(|v| values.contains(&v)),
        "NotIn" => value.is_none_or(|v| !values.contains(&v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => value
            .and_then(num)
            .zip(values.first().and_then(|v| num(v)))
            .is_some_and(|(a, b)| a > b),
        "Lt" => value
            .and_then(num)
            .zip(values.first().and_then(|v| num(v)))
            .is_some_and(|(a, b)| a < b),
        _ => false,
    }
}

fn term_matches(term: &Value, node: &Value) -> bool {
    let labels = meta::labels(node);
    let exprs = term["matchExpressions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let fields = term["matchFields"].as_array().cloned().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs.iter().all(|e| {
        expr_matches(
            e,
            e["key"]
                .as_str()
                .and_then(|k| labels.get(k))
                .and_then(Value::as_str),
        )
    }) && fields
        .iter()
        .all(|e| e["key"] == "metadata.name" && expr_matches(e, meta::name(node)))
}

fn tolerates(pod: &Value, taint: &Value) -> bool {
    let tolerations = meta::get_path(pod, "spec.tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    tolerations.iter().any(|t| {
        let effect_ok =
            t["effect"].as_str().is_none_or(str::is_empty) || t["effect"] == taint["effect"];
        let key = t["key"].as_str().unwrap_or_default();
        match t["operator"].as_str().unwrap_or("Equal") {
            "Exists" => effect_ok && (key.is_empty() || taint["key"] == key),
            _ => {
                effect_ok
                    && taint["key"] == key
                    && t["value"].as_str().unwrap_or_default()
                        == taint["value"].as_str().unwrap_or_default()
            }
        }
    })
}

/// Whether `pod` may run on `node` (ignoring readiness).
pub fn fits(pod: &Value, node: &Value) -> bool {
    let labels = meta::labels(node);
    let selector_ok = meta::get_path(pod, "spec.nodeSelector")
        .and_then(Value::as_object)
        .is_none_or(|sel| sel.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let affinity_ok = meta::get_path(pod, "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms")
        .and_then(Value::as_array)
        .is_none_or(|terms| terms.iter().any(|t| term_matches(t, node)));
    let taints_ok = meta::get_path(node, "spec.taints")
        .and_then(Value::as_array)
        .is_none_or(|ts| {
            ts.iter()
                .filter(|t| t["effect"] != "PreferNoSchedule")
                .all(|t| tolerates(pod, t))
        });
    selector_ok && affinity_ok && taints_ok
}

fn set_condition(pod: &mut Value, status: &str, reason: Option<&str>, message: Option<&str>) {
    let mut conditions: Vec<Value> = meta::get_path(pod, "status.conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let old = conditions
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .cloned();
    if old.as_ref().is_some_and(|c| {
        c["status"] == status && c["reason"].as_str() == reason && c["message"].as_str() == message
    }) {
        return;
    }
    conditions.retain(|c| c["type"] != "PodScheduled");
    let mut c = json!({"type": "PodScheduled", "status": status, "lastProbeTime": null, "lastTransitionTime": meta::now()});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    conditions.push(c);
    meta::set_path(pod, "status.conditions", Value::Array(conditions));
}

/// One scheduling pass over all pending Pods.
/// Whether a Pod waits for this scheduler.
fn pending(pod: &Value) -> bool {
    meta::get_path(pod, "spec.nodeName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
        && meta::get_path(pod, "spec.schedulerName")
            .and_then(Value::as_str)
            .is_none_or(|s| s == "default-scheduler")
        && !meta::is_deleting(pod)
}

/// Whether a Node change can change where Pods fit: it came or went, or its readiness,
/// labels, taints or cordon changed (not a heartbeat).
fn node_change_matters(event: &WatchEvent) -> bool {
    let Some(prev) = event.prev.as_deref() else {
        return true;
    };
    let now = &*event.object;
    is_ready(prev) != is_ready(now)
        || ["metadata.labels", "spec.taints"]
            .iter()
            .any(|path| meta::get_path(prev, path) != meta::get_path(now, path))
}

/// Namespace and name of the Pods to look at on this pass: every pending Pod when the Nodes
/// changed in a way that matters (or on a full pass), else the pending Pods that changed.
fn candidates(state: &State, changes: &Changes) -> Vec<(String, String)> {
    let pods_gr = GroupResource::new("", "pods");
    let nodes_gr = GroupResource::new("", "nodes");
    let key = |p: &Value| {
        (
            meta::namespace(p).unwrap_or_default().to_string(),
            meta::name(p).unwrap_or_default().to_string(),
        )
    };
    let everything = match changes {
        Changes::All => true,
        Changes::Events(events) => events
            .iter()
            .any(|e| e.gr == nodes_gr && node_change_matters(e)),
    };
    let mut out: Vec<(String, String)> = if everything {
        state
            .list(&pods_gr, None)
            .filter(|p| pending(p))
            .map(key)
            .collect()
    } else {
        changes.objects(&pods_gr).map(key).collect()
    };
    out.sort();
    out.dedup();
    out
}

pub fn schedule(state: &mut State, changes: &Changes) {
    let pods_gr = GroupResource::new("", "pods");
    let Some(pod_def) = state.registry.storage_def(&pods_gr) else {
        return;
    };
    let candidates = candidates(state, changes);
    if candidates.is_empty() {
        return;
    }
    let nodes: Vec<Value> = state
        .list(&GroupResource::new("", "nodes"), None)
        .filter(|n| is_ready(n))
        .cloned()
        .collect();
    let mut load: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for p in state.list(&pods_gr, None) {
        if let Some(n) = meta::get_path(p, "spec.nodeName").and_then(Value::as_str) {
            *load.entry(n.to_string()).or_default() += 1;
        }
    }
    for (ns, name) in candidates {
        let Some(pod) = state
            .get(&pods_gr, &ns, &name)
            .filter(|p| pending(p))
            .cloned()
        else {
            continue;
        };
        let best = nodes
            .iter()
            .filter(|n| fits(&pod, n))
            .filter_map(meta::name)
            .min_by_key(|n| (load.get(*n).copied().unwrap_or(0), n.to_string()))
            .map(String::from);
        let result = match &best {
            Some(node) => {
                let mut bound = pod.clone();
                meta::set_path(&mut bound, "spec.nodeName", json!(node));
                commit(state, &pod_def, &pod, bound, "", Fields::Record(MANAGER)).and_then(
                    |stored| {
                        *load.entry(node.clone()).or_default() += 1;
                        let current = state
                            .get(
                                &pods_gr,
                                meta::namespace(&stored).unwrap_or_default(),
                                meta::name(&stored).unwrap_or_default(),
                            )
                            .cloned()
                            .unwrap_or(stored);
                        let mut with_status = current.clone();
                        set_condition(&mut with_status, "True", None, None);
                        commit(
                            state,
                            &pod_def,
                            &current,
                            with_status,
                            "status",
                            Fields::Record(MANAGER),
                        )
                    },
                )
            }
            None => {
                let mut with_status = pod.clone();
                let msg = format!(
                    "0/{} nodes are available: no Ready node matches the Pod's node selector, affinity and tolerations.",
                    nodes.len()
                );
                set_condition(&mut with_status, "False", Some("Unschedulable"), Some(&msg));
                commit(
                    state,
                    &pod_def,
                    &pod,
                    with_status,
                    "status",
                    Fields::Record(MANAGER),
                )
            }
        };
        if let Err(e) = result {
            tracing::debug!(error = %e.message, "scheduling failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(labels: Value, taints: Value) -> Value {
        json!({"metadata": {"name": "n1", "labels": labels}, "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    }

    #[test]
    fn selectors_affinity_and_taints() {
        let n = node(
            json!({"zone": "a", "size": "4"}),
            json!([{"key": "db", "value": "only", "effect": "NoSchedule"}]),
        );
        assert!(is_ready(&n));
        let plain = json!({"spec": {}});
        assert!(!fits(&plain, &n), "untolerated taint");
        let tolerant = json!({"spec": {"tolerations": [{"key": "db", "operator": "Exists"}], "nodeSelector": {"zone": "a"}}});
        assert!(fits(&tolerant, &n));
        let wrong_zone = json!({"spec": {"tolerations": [{"operator": "Exists"}], "nodeSelector": {"zone": "b"}}});
        assert!(!fits(&wrong_zone, &n));
        let affinity = |op: &str, vals: Value| {
            json!({"spec": {"tolerations": [{"operator": "Exists"}], "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "size", "operator": op, "values": vals}]}]}}}}})
        };
        assert!(fits(&affinity("In", json!(["4", "8"])), &n));
        assert!(!fits(&affinity("NotIn", json!(["4"])), &n));
        assert!(fits(&affinity("Gt", json!(["2"])), &n));
        assert!(!fits(&affinity("Lt", json!(["2"])), &n));
        let by_name = json!({"spec": {"tolerations": [{"operator": "Exists"}], "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}}});
        assert!(fits(&by_name, &n));
        let cordoned = json!({"metadata": {"name": "n2"}, "spec": {"unschedulable": true}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert!(!is_ready(&cordoned));
    }
}
