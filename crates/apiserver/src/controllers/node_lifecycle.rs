//! kube-controller-manager's node lifecycle controller and taint-based eviction, as the local
//! control plane needs them when a node agent stops or is killed:
//! * a Node whose kubelet has not posted status for the grace period (`lastHeartbeatTime` of
//!   `Ready`; 40 s by default, `ServerConfig::node_monitor_grace`) gets every condition
//!   `Unknown` (`NodeStatusUnknown`, "Kubelet stopped posting node status.");
//! * a Node that is not Ready is tainted `node.kubernetes.io/unreachable` (conditions
//!   `Unknown`) or `node.kubernetes.io/not-ready` (the kubelet said `False`), `NoSchedule` and
//!   `NoExecute`; the taints go when it is Ready again;
//! * the Pods of such a Node are marked not ready (`Ready=False`), so Services drop them — once
//!   the Node has a `Ready` condition (a Node created without one is tainted, but its Pods are
//!   left alone until the condition is posted or the grace period makes it `Unknown`);
//! * a `NoExecute` taint evicts (deletes, gracefully) the Node's Pods that do not tolerate it,
//!   after their `tolerationSeconds` (every Pod gets 300 s for both taints on create, as
//!   upstream's `DefaultTolerationSeconds` admission gives). No kubelet confirms the deletion,
//!   so such a Pod stays `Terminating` until its node agent comes back or someone deletes it
//!   with grace 0 — as on a real cluster, where a partitioned machine may still run it.

use std::time::Duration;

use serde_json::{Value, json};

use super::writes::{delete_obj, update};
use crate::meta;
use crate::registry::GroupResource;
use crate::store::State;

const MANAGER: &str = "node-controller";
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
const CONDITIONS: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

fn nodes() -> GroupResource {
    GroupResource::new("", "nodes")
}

fn pods() -> GroupResource {
    GroupResource::new("", "pods")
}

fn time(v: Option<&Value>) -> Option<jiff::Timestamp> {
    v.and_then(Value::as_str).and_then(|t| t.parse().ok())
}

fn ready_condition(node: &Value) -> Option<&Value> {
    meta::get_path(node, "status.conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == "Ready")
}

/// The Node's `Ready` status ("True", "False", "Unknown"; "Unknown" when never reported).
fn readiness(node: &Value) -> String {
    ready_condition(node)
        .and_then(|c| c["status"].as_str())
        .unwrap_or("Unknown")
        .to_string()
}

/// The taint key a Node with this readiness carries, if any.
fn wanted_taint(readiness: &str) -> Option<&'static str> {
    match readiness {
        "True" => None,
        "False" => Some(NOT_READY),
        _ => Some(UNREACHABLE),
    }
}

/// The Node's taints with ours set for its readiness (`None` when nothing changes).
fn retaint(node: &Value, now: jiff::Timestamp) -> Option<Vec<Value>> {
    let taints: Vec<Value> = meta::get_path(node, "spec.taints")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let want = wanted_taint(&readiness(node));
    let ours = |t: &Value| matches!(t["key"].as_str(), Some(UNREACHABLE | NOT_READY));
    let have: Vec<(&str, &str)> = taints
        .iter()
        .filter(|t| ours(t))
        .filter_map(|t| Some((t["key"].as_str()?, t["effect"].as_str()?)))
        .collect();
    let wanted: Vec<(&str, &str)> = want
        .map(|k| vec![(k, "NoSchedule"), (k, "NoExecute")])
        .unwrap_or_default();
    let mut sorted_have = have.clone();
    sorted_have.sort_unstable();
    if sorted_have == wanted {
        return None;
    }
    let mut out: Vec<Value> = taints.into_iter().filter(|t| !ours(t)).collect();
    for (key, effect) in wanted {
        let mut taint = json!({"key": key, "effect": effect});
        if effect == "NoExecute" {
            taint["timeAdded"] = json!(now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        }
        out.push(taint);
    }
    Some(out)
}

/// When the Pod must go because of `taint` (a `NoExecute` taint), if it must: at once without
/// a toleration, after `tolerationSeconds` with a bounded one, never with an unbounded one.
fn evict_at(pod: &Value, taint: &Value, now: jiff::Timestamp) -> Option<jiff::Timestamp> {
    let key = taint["key"].as_str().unwrap_or_default();
    let tolerations = meta::get_path(pod, "spec.tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let tolerating = tolerations.iter().find(|t| {
        let effect_ok = t["effect"]
            .as_str()
            .is_none_or(|e| e.is_empty() || e == "NoExecute");
        let key_ok = match t["key"].as_str() {
            None | Some("") => t["operator"] == "Exists",
            Some(k) => k == key,
        };
        effect_ok && key_ok
    });
    let added = time(taint.get("timeAdded")).unwrap_or(now);
    match tolerating {
        None => Some(now),
        Some(t) => t["tolerationSeconds"]
            .as_i64()
            .map(|s| added + jiff::SignedDuration::from_secs(s.max(0))),
    }
}

/// One pass; returns when the next eviction is due, if one is.
pub fn reconcile(state: &mut State, now: jiff::Timestamp, grace: Duration) -> Option<Duration> {
    let all: Vec<Value> = state.list(&nodes(), None).cloned().collect();
    let mut next: Option<Duration> = None;
    for node in all {
        let Some(name) = meta::name(&node).map(String::from) else {
            continue;
        };
        // 1. A silent kubelet: conditions Unknown.
        let heartbeat = ready_condition(&node)
            .and_then(|c| time(c.get("lastHeartbeatTime")))
            .or_else(|| time(meta::get_path(&node, "metadata.creationTimestamp")));
        let silent = heartbeat.is_some_and(|h| {
            now.duration_since(h) > jiff::SignedDuration::try_from(grace).unwrap_or_default()
        });
        if silent && readiness(&node) != "Unknown" {
            let stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
            update(state, &nodes(), "", &name, "status", MANAGER, |n| {
                let mut conditions: Vec<Value> = meta::get_path(n, "status.conditions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for t in CONDITIONS {
                    let old = conditions.iter().find(|c| c["type"] == t).cloned();
                    conditions.retain(|c| c["type"] != t);
                    conditions.push(json!({"type": t, "status": "Unknown",
                        "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status.",
                        "lastHeartbeatTime": old.as_ref().map_or(Value::Null, |c| c["lastHeartbeatTime"].clone()),
                        "lastTransitionTime": stamp}));
                }
                meta::set_path(n, "status.conditions", Value::Array(conditions));
            });
        }
        // 2. Taints follow readiness.
        let Some(node) = state.get(&nodes(), "", &name).cloned() else {
            continue;
        };
        if let Some(taints) = retaint(&node, now) {
            update(state, &nodes(), "", &name, "", MANAGER, |n| {
                meta::set_path(n, "spec.taints", Value::Array(taints));
            });
        }
        if readiness(&node) == "True" {
            continue;
        }
        // 3. Its Pods are not ready; 4. NoExecute taints evict those that do not tolerate them.
        let Some(node) = state.get(&nodes(), "", &name).cloned() else {
            continue;
        };
        let no_execute: Vec<Value> = meta::get_path(&node, "spec.taints")
            .and_then(Value::as_array)
            .map(|ts| {
                ts.iter()
                    .filter(|t| t["effect"] == "NoExecute")
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let on_node: Vec<Value> = state
            .list(&pods(), None)
            .filter(|p| meta::get_path(p, "spec.nodeName").and_then(Value::as_str) == Some(&name))
            .cloned()
            .collect();
        // Upstream marks Pods not ready only on a Node whose `Ready` condition was posted (a
        // Node never heard from has none until its startup grace ends and the condition
        // becomes `Unknown`, step 1).
        let posted = ready_condition(&node).is_some();
        for pod in on_node {
            let ns = meta::namespace(&pod).unwrap_or_default().to_string();
            let pod_name = meta::name(&pod).unwrap_or_default().to_string();
            let ready = meta::get_path(&pod, "status.conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
            if ready && posted {
                update(state, &pods(), &ns, &pod_name, "status", MANAGER, |p| {
                    if let Some(cs) = p
                        .pointer_mut("/status/conditions")
                        .and_then(Value::as_array_mut)
                    {
                        for c in cs
                            .iter_mut()
                            .filter(|c| c["type"] == "Ready" || c["type"] == "ContainersReady")
                        {
                            c["status"] = json!("False");
                            c["reason"] = json!("NodeNotReady");
                        }
                    }
                });
            }
            if meta::is_deleting(&pod) {
                continue;
            }
            let due = no_execute
                .iter()
                .filter_map(|t| evict_at(&pod, t, now))
                .min();
            match due {
                Some(at) if at <= now => {
                    tracing::info!(pod = %pod_name, namespace = %ns, node = %name, "evicting a Pod of a node that is not ready");
                    delete_obj(state, &pods(), &ns, &pod_name, MANAGER);
                }
                Some(at) => {
                    let wait = Duration::try_from(at.duration_since(now)).unwrap_or_default();
                    next = Some(next.map_or(wait, |n| n.min(wait)));
                }
                None => {}
            }
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taints_follow_readiness_and_evictions_follow_tolerations() {
        let now: jiff::Timestamp = "2026-11-25T12:00:00Z".parse().unwrap();
        let node = |status: &str| {
            json!({"spec": {"taints": [{"key": "other", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": status}]}})
        };
        assert_eq!(retaint(&node("True"), now), None);
        let taints = retaint(&node("Unknown"), now).unwrap();
        let keys: Vec<(&str, &str)> = taints
            .iter()
            .map(|t| (t["key"].as_str().unwrap(), t["effect"].as_str().unwrap()))
            .collect();
        assert_eq!(
            keys,
            [
                ("other", "NoSchedule"),
                (UNREACHABLE, "NoSchedule"),
                (UNREACHABLE, "NoExecute")
            ]
        );
        let tainted = json!({"spec": {"taints": taints}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert_eq!(
            retaint(&tainted, now).unwrap(),
            [json!({"key": "other", "effect": "NoSchedule"})]
        );
        let taint =
            json!({"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": "2026-11-25T11:59:00Z"});
        let bare = json!({"spec": {}});
        assert_eq!(evict_at(&bare, &taint, now), Some(now));
        let defaulted = json!({"spec": {"tolerations": [{"key": UNREACHABLE, "operator": "Exists",
            "effect": "NoExecute", "tolerationSeconds": 300}]}});
        assert_eq!(
            evict_at(&defaulted, &taint, now),
            Some("2026-11-25T12:04:00Z".parse().unwrap())
        );
        let forever = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        assert_eq!(evict_at(&forever, &taint, now), None);
    }
}
