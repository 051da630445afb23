//! A minimal scheduler: binds Pods that have no `spec.nodeName` and use the default scheduler
//! to a Ready, schedulable Node whose labels satisfy the Pod's `nodeSelector` and required node
//! affinity (`matchExpressions` with In/NotIn/Exists/DoesNotExist/Gt/Lt, `matchFields` on
//! `metadata.name`) and whose NoSchedule/NoExecute taints the Pod tolerates, where no Pod its
//! required pod anti-affinity terms select runs in the same topology domain (`topologyKey`), and
//! where its `DoNotSchedule` topology spread constraints keep the skew within `maxSkew`
//! (`minDomains`, `nodeAffinityPolicy`, `nodeTaintsPolicy` as the real scheduler reads them);
//! among those it picks the Node with the least preferred anti-affinity weight plus
//! `ScheduleAnyway` skew against it, then the fewest Pods, then by name — so replicas spread
//! over Nodes and zones. Pods that fit nowhere get `PodScheduled=False` (`Unschedulable`).
//! Claims are node-local: a Pod goes to the Node its claims' volumes live on
//! (`volume.kubernetes.io/selected-node`, recorded at the first binding), so a rescheduled Pod
//! finds its data, as with local persistent volumes. Resource requests, pod affinity,
//! `matchLabelKeys` and preemption are not considered. Event-driven: a pass looks at the Pods that changed, and at every pending
//! Pod only when a Node came, went, or changed readiness, labels or taints, or a Pod was deleted
//! (as the real scheduler moves unschedulable Pods back to its active queue on such events).

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
    let taints_ok = meta::get_path(node, "spec.taints")
        .and_then(Value::as_array)
        .is_none_or(|ts| {
            ts.iter()
                .filter(|t| t["effect"] != "PreferNoSchedule")
                .all(|t| tolerates(pod, t))
        });
    affinity_admits(pod, node) && taints_ok
}

/// The annotation recording the Node a claim's volume lives on (the real scheduler sets it on
/// `WaitForFirstConsumer` claims; here every claim is node-local, as with a local-path
/// provisioner: node agents keep volumes in their own state directory).
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// The Pod's claims (that exist) and the Node each one's volume lives on, if it has one yet.
fn claim_nodes(state: &State, pod: &Value) -> Vec<(String, Option<String>)> {
    let ns = meta::namespace(pod).unwrap_or_default();
    let claims_gr = GroupResource::new("", "persistentvolumeclaims");
    meta::get_path(pod, "spec.volumes")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
                .filter_map(|name| {
                    let claim = state.get(&claims_gr, ns, name)?;
                    let selected = meta::get_path(claim, "metadata.annotations")
                        .and_then(|a| a.get(SELECTED_NODE))
                        .and_then(Value::as_str)
                        .map(String::from);
                    Some((name.to_string(), selected))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Records `node` on the claims that have no Node yet: their volumes will live there.
fn select_node_for_claims(
    state: &mut State,
    ns: &str,
    claims: &[(String, Option<String>)],
    node: &str,
) {
    let claims_gr = GroupResource::new("", "persistentvolumeclaims");
    let Some(def) = state.registry.storage_def(&claims_gr) else {
        return;
    };
    for (name, selected) in claims {
        if selected.is_some() {
            continue;
        }
        let Some(old) = state.get(&claims_gr, ns, name).cloned() else {
            continue;
        };
        let mut new = old.clone();
        let annotations = meta::meta_mut(&mut new)
            .entry("annotations")
            .or_insert_with(|| json!({}));
        if let Value::Object(map) = annotations {
            map.insert(SELECTED_NODE.into(), json!(node));
        }
        if let Err(e) = commit(state, &def, &old, new, "", Fields::Record(MANAGER)) {
            tracing::debug!(error = %e.message, claim = %name, "recording the claim's node failed");
        }
    }
}

/// A Pod already placed on a Node (or placed earlier in this pass).
struct Placed {
    node: String,
    namespace: String,
    labels: serde_json::Map<String, Value>,
}

/// Whether a pod affinity term selects `other`: its namespaces (the Pod's own by default) and
/// label selector (an empty one selects every Pod; a missing one none).
fn term_selects(term: &Value, pod_ns: &str, other: &Placed) -> bool {
    let in_namespace = match term["namespaces"].as_array().filter(|a| !a.is_empty()) {
        Some(list) => list.iter().any(|n| n.as_str() == Some(&other.namespace)),
        None => other.namespace == pod_ns,
    };
    let selector = term.get("labelSelector").filter(|s| s.is_object());
    let selected = match selector {
        None => false,
        Some(sel) if sel.as_object().is_some_and(serde_json::Map::is_empty) => true,
        Some(sel) => super::workload::selects(Some(sel), &other.labels),
    };
    in_namespace && selected
}

/// Placed Pods that `term` selects in `node`'s topology domain (none when the Node lacks the
/// term's `topologyKey` label).
fn in_domain(
    term: &Value,
    pod_ns: &str,
    node: &Value,
    nodes: &std::collections::HashMap<String, Value>,
    placed: &[Placed],
) -> usize {
    let Some(key) = term["topologyKey"].as_str() else {
        return 0;
    };
    let Some(domain) = meta::labels_ref(node).get(key) else {
        return 0;
    };
    placed
        .iter()
        .filter(|p| {
            nodes
                .get(&p.node)
                .is_some_and(|n| meta::labels_ref(n).get(key) == Some(domain))
        })
        .filter(|p| term_selects(term, pod_ns, p))
        .count()
}

fn anti_affinity<'a>(pod: &'a Value, kind: &str) -> &'a [Value] {
    meta::get_path(pod, "spec.affinity.podAntiAffinity")
        .and_then(|a| a.get(kind))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The Pod's required anti-affinity holds on `node`.
fn anti_affinity_allows(
    pod: &Value,
    node: &Value,
    nodes: &std::collections::HashMap<String, Value>,
    placed: &[Placed],
) -> bool {
    let ns = meta::namespace(pod).unwrap_or_default();
    anti_affinity(pod, "requiredDuringSchedulingIgnoredDuringExecution")
        .iter()
        .all(|term| in_domain(term, ns, node, nodes, placed) == 0)
}

/// The weight of the Pod's preferred anti-affinity terms that `node` goes against.
fn anti_affinity_penalty(
    pod: &Value,
    node: &Value,
    nodes: &std::collections::HashMap<String, Value>,
    placed: &[Placed],
) -> i64 {
    let ns = meta::namespace(pod).unwrap_or_default();
    anti_affinity(pod, "preferredDuringSchedulingIgnoredDuringExecution")
        .iter()
        .map(|w| {
            let weight = w["weight"].as_i64().unwrap_or(1);
            let count = in_domain(&w["podAffinityTerm"], ns, node, nodes, placed);
            weight * i64::try_from(count).unwrap_or(i64::MAX / 100)
        })
        .sum()
}

/// Whether `pod`'s node selector and required node affinity (not taints) admit `node`: the
/// nodes a topology spread constraint with `nodeAffinityPolicy: Honor` counts domains on.
fn affinity_admits(pod: &Value, node: &Value) -> bool {
    let labels = meta::labels(node);
    meta::get_path(pod, "spec.nodeSelector")
        .and_then(Value::as_object)
        .is_none_or(|sel| sel.iter().all(|(k, v)| labels.get(k) == Some(v)))
        && meta::get_path(
            pod,
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
        )
        .and_then(Value::as_array)
        .is_none_or(|terms| terms.iter().any(|t| term_matches(t, node)))
}

/// The skew `node` would have under one `topologySpreadConstraints` entry if `pod` went there:
/// matching Pods in its domain plus one, minus the fewest in any eligible domain (zero while
/// there are fewer domains than `minDomains`). `None` when `node` lacks the topology key. As
/// the real scheduler: domains come from Nodes carrying the key (admitted by the Pod's node
/// selector and affinity unless `nodeAffinityPolicy: Ignore`; taints ignored unless
/// `nodeTaintsPolicy: Honor`), and only Pods of the Pod's namespace that the constraint's
/// `labelSelector` selects count.
fn spread_skew(
    constraint: &Value,
    pod: &Value,
    node: &Value,
    nodes: &std::collections::HashMap<String, Value>,
    placed: &[Placed],
) -> Option<i64> {
    let key = constraint["topologyKey"].as_str()?;
    let domain = meta::labels_ref(node).get(key)?.as_str()?.to_owned();
    let honor_affinity = constraint["nodeAffinityPolicy"].as_str() != Some("Ignore");
    let honor_taints = constraint["nodeTaintsPolicy"].as_str() == Some("Honor");
    let mut counts: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
    let mut node_domain: std::collections::HashMap<&str, String> = std::collections::HashMap::new();
    for (name, n) in nodes {
        let Some(d) = meta::labels_ref(n).get(key).and_then(Value::as_str) else {
            continue;
        };
        if (honor_affinity && !affinity_admits(pod, n)) || (honor_taints && !fits(pod, n)) {
            continue;
        }
        counts.entry(d.to_owned()).or_default();
        node_domain.insert(name.as_str(), d.to_owned());
    }
    let ns = meta::namespace(pod).unwrap_or_default();
    let selector = constraint.get("labelSelector").filter(|s| s.is_object());
    for other in placed {
        let selected = other.namespace == ns
            && selector.is_some_and(|sel| super::workload::selects(Some(sel), &other.labels));
        if let (true, Some(d)) = (selected, node_domain.get(other.node.as_str())) {
            *counts.entry(d.clone()).or_default() += 1;
        }
    }
    let min_domains = constraint["minDomains"].as_u64().unwrap_or(1);
    let min = if (counts.len() as u64) < min_domains {
        0
    } else {
        counts.values().copied().min().unwrap_or(0)
    };
    Some(counts.get(&domain).copied().unwrap_or(0) + 1 - min)
}

fn spread_constraints(pod: &Value) -> &[Value] {
    meta::get_path(pod, "spec.topologySpreadConstraints")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The Pod's `DoNotSchedule` spread constraints hold on `node`.
fn spread_allows(
    pod: &Value,
    node: &Value,
    nodes: &std::collections::HashMap<String, Value>,
    placed: &[Placed],
) -> bool {
    spread_constraints(pod)
        .iter()
        .filter(|c| c["whenUnsatisfiable"].as_str() != Some("ScheduleAnyway"))
        .all(|c| {
            let max = c["maxSkew"].as_i64().unwrap_or(1);
            spread_skew(c, pod, node, nodes, placed).is_some_and(|skew| skew <= max)
        })
}

/// How much `node` goes against the Pod's `ScheduleAnyway` spread constraints (its skews).
fn spread_penalty(
    pod: &Value,
    node: &Value,
    nodes: &std::collections::HashMap<String, Value>,
    placed: &[Placed],
) -> i64 {
    spread_constraints(pod)
        .iter()
        .filter(|c| c["whenUnsatisfiable"].as_str() == Some("ScheduleAnyway"))
        .map(|c| spread_skew(c, pod, node, nodes, placed).unwrap_or(0).max(0))
        .sum()
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
fn candidates(state: &State, changes: &Changes, any_ready: bool) -> Vec<(String, String)> {
    let pods_gr = GroupResource::new("", "pods");
    let nodes_gr = GroupResource::new("", "nodes");
    let key = State::key_of;
    let everything = match changes {
        Changes::All => true,
        // A Pod gone may free a topology domain for a Pod its anti-affinity kept out (when
        // there is a Ready node to place it on).
        Changes::Events(events) => events.iter().any(|e| {
            (e.gr == nodes_gr && node_change_matters(e))
                || (any_ready && e.gr == pods_gr && e.etype == crate::store::EventType::Deleted)
        }),
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
    let nodes: Vec<Value> = state
        .list(&GroupResource::new("", "nodes"), None)
        .filter(|n| is_ready(n))
        .cloned()
        .collect();
    let candidates = candidates(state, changes, !nodes.is_empty());
    if candidates.is_empty() {
        return;
    }
    let by_name: std::collections::HashMap<String, Value> = state
        .list(&GroupResource::new("", "nodes"), None)
        .filter_map(|n| Some((meta::name(n)?.to_string(), n.clone())))
        .collect();
    let mut load: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut placed = Vec::new();
    // The placed Pods matter only to a choice between nodes: with no ready node, nothing is
    // placed and the store's Pods are not looked at.
    let placed_pods = state.list(&pods_gr, None).take_while(|_| !nodes.is_empty());
    for p in placed_pods {
        if let Some(n) = meta::get_path(p, "spec.nodeName").and_then(Value::as_str) {
            *load.entry(n.to_string()).or_default() += 1;
            placed.push(Placed {
                node: n.to_string(),
                namespace: meta::namespace(p).unwrap_or_default().to_string(),
                labels: meta::labels_ref(p).clone(),
            });
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
        let claims = claim_nodes(state, &pod);
        let fitting: Vec<&Value> = nodes
            .iter()
            .filter(|n| fits(&pod, n))
            .filter(|n| {
                claims.iter().all(|(_, selected)| {
                    selected.as_deref().is_none_or(|s| meta::name(n) == Some(s))
                })
            })
            .collect();
        let node_only: usize = nodes.iter().filter(|n| fits(&pod, n)).count();
        let apart: Vec<&Value> = fitting
            .iter()
            .copied()
            .filter(|n| anti_affinity_allows(&pod, n, &by_name, &placed))
            .collect();
        let allowed: Vec<&Value> = apart
            .iter()
            .copied()
            .filter(|n| spread_allows(&pod, n, &by_name, &placed))
            .collect();
        let best = allowed
            .iter()
            .filter_map(|n| {
                let name = meta::name(n)?;
                let penalty = anti_affinity_penalty(&pod, n, &by_name, &placed)
                    + spread_penalty(&pod, n, &by_name, &placed);
                Some((
                    penalty,
                    load.get(name).copied().unwrap_or(0),
                    name.to_string(),
                ))
            })
            .min()
            .map(|(_, _, name)| name);
        if let Some(node) = &best {
            placed.push(Placed {
                node: node.clone(),
                namespace: ns.clone(),
                labels: meta::labels_ref(&pod).clone(),
            });
        }
        let result = match &best {
            Some(node) => {
                select_node_for_claims(state, &ns, &claims, node);
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
                let msg = if node_only == 0 {
                    format!(
                        "0/{} nodes are available: no Ready node matches the Pod's node selector, affinity and tolerations.",
                        nodes.len()
                    )
                } else if fitting.is_empty() {
                    format!(
                        "0/{} nodes are available: {node_only} node(s) had volume node affinity conflict.",
                        nodes.len()
                    )
                } else if apart.is_empty() {
                    format!(
                        "0/{} nodes are available: {} node(s) didn't match pod anti-affinity rules.",
                        nodes.len(),
                        fitting.len()
                    )
                } else {
                    format!(
                        "0/{} nodes are available: {} node(s) didn't match pod topology spread constraints.",
                        nodes.len(),
                        apart.len()
                    )
                };
                set_condition(&mut with_status, "False", Some("Unschedulable"), Some(&msg));
                if with_status == pod {
                    // Still unschedulable, for the same reason: nothing to write.
                    continue;
                }
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

    #[test]
    fn topology_spread_keeps_the_skew_within_max_skew() {
        let node = |name: &str, zone: &str| {
            json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": zone}}})
        };
        let nodes: std::collections::HashMap<String, Value> = [
            ("n1", node("n1", "a")),
            ("n2", node("n2", "a")),
            ("n3", node("n3", "b")),
            ("n4", json!({"metadata": {"name": "n4", "labels": {}}})),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let at = |n: &str, app: &str| Placed {
            node: n.into(),
            namespace: "db".into(),
            labels: json!({ "app": app }).as_object().unwrap().clone(),
        };
        // Zone a holds two matching Pods (and one of another app), zone b none.
        let placed = vec![at("n1", "pg"), at("n2", "pg"), at("n3", "other")];
        let pod = |when: &str, policy: Option<&str>, selector: Value| {
            let mut c = json!({"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": when, "labelSelector": {"matchLabels": {"app": "pg"}}});
            if let Some(p) = policy {
                c["nodeAffinityPolicy"] = json!(p);
            }
            json!({"metadata": {"namespace": "db", "labels": {"app": "pg"}},
                "spec": {"topologySpreadConstraints": [c], "nodeSelector": selector}})
        };
        let hard = pod("DoNotSchedule", None, json!({}));
        let allows = |p: &Value, n: &str| spread_allows(p, &nodes[n], &nodes, &placed);
        assert!(!allows(&hard, "n1"), "zone a would be 3 against 0");
        assert!(allows(&hard, "n3"));
        assert!(
            !allows(&hard, "n4"),
            "a node without the key is not a domain"
        );
        let soft = pod("ScheduleAnyway", None, json!({}));
        assert!(allows(&soft, "n1"));
        let penalty = |p: &Value, n: &str| spread_penalty(p, &nodes[n], &nodes, &placed);
        assert!(penalty(&soft, "n3") < penalty(&soft, "n1"));
        // Honoring the node selector, zone b is not a domain for a Pod held to zone a.
        let held = pod(
            "DoNotSchedule",
            None,
            json!({"topology.kubernetes.io/zone": "a"}),
        );
        assert!(allows(&held, "n1"));
        let ignoring = pod(
            "DoNotSchedule",
            Some("Ignore"),
            json!({"topology.kubernetes.io/zone": "a"}),
        );
        assert!(!allows(&ignoring, "n1"));
        // Another namespace does not count.
        let mut elsewhere = hard.clone();
        elsewhere["metadata"]["namespace"] = json!("web");
        assert!(allows(&elsewhere, "n1"));
    }

    #[test]
    fn anti_affinity_keeps_selected_pods_apart_by_topology() {
        let node = |name: &str, zone: &str| {
            json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": zone}}})
        };
        let nodes: std::collections::HashMap<String, Value> = [
            ("n1", node("n1", "a")),
            ("n2", node("n2", "a")),
            ("n3", node("n3", "b")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let placed = vec![Placed {
            node: "n1".into(),
            namespace: "db".into(),
            labels: json!({"app": "etcd"}).as_object().unwrap().clone(),
        }];
        let term = |key: &str| json!({"labelSelector": {"matchLabels": {"app": "etcd"}}, "topologyKey": key});
        let required = |key: &str| {
            json!({"metadata": {"namespace": "db"}, "spec": {"affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [term(key)]}}}})
        };
        let by_host = required("kubernetes.io/hostname");
        assert!(!anti_affinity_allows(
            &by_host,
            &nodes["n1"],
            &nodes,
            &placed
        ));
        assert!(anti_affinity_allows(
            &by_host,
            &nodes["n2"],
            &nodes,
            &placed
        ));
        let by_zone = required("topology.kubernetes.io/zone");
        assert!(!anti_affinity_allows(
            &by_zone,
            &nodes["n2"],
            &nodes,
            &placed
        ));
        assert!(anti_affinity_allows(
            &by_zone,
            &nodes["n3"],
            &nodes,
            &placed
        ));
        // Another namespace's Pods are not selected unless the term names it.
        let elsewhere = json!({"metadata": {"namespace": "web"}, "spec": {"affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [term("kubernetes.io/hostname")]}}}});
        assert!(anti_affinity_allows(
            &elsewhere,
            &nodes["n1"],
            &nodes,
            &placed
        ));
        let preferred = json!({"metadata": {"namespace": "db"}, "spec": {"affinity": {"podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term("kubernetes.io/hostname")}]}}}});
        assert_eq!(
            anti_affinity_penalty(&preferred, &nodes["n1"], &nodes, &placed),
            100
        );
        assert_eq!(
            anti_affinity_penalty(&preferred, &nodes["n2"], &nodes, &placed),
            0
        );
    }

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
