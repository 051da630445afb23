//! The Endpoints and EndpointSlice controller: for every Service with a selector, the Pods of
//! its namespace that match, are not being deleted and have a `status.podIP` become addresses
//! (ready or not ready by their `Ready` condition), with target ports resolved per Pod (numbers
//! as is, names through the Pod's container ports). It writes an Endpoints object named after
//! the Service (labelled `endpoints.kubernetes.io/managed-by: endpoint-controller`, deleted with
//! the Service) and EndpointSlices labelled `kubernetes.io/service-name` and owned by the
//! Service (one slice per distinct port set; the garbage collector removes them with it).
//! Services without a selector are left alone. IPv4 only; no topology hints. Event-driven
//! ([`Changes`]): a pass converges only the Services that changed, whose Endpoints or slices
//! changed, or whose selector matches a Pod that changed.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::Changes;
use crate::meta;
use crate::registry::GroupResource;
use crate::selectors::{LabelReq, LabelSelector};
use crate::store::State;
use crate::write::create::create;
use crate::write::delete::{DeleteOptions, delete};
use crate::write::{Fields, commit};

const EP_MANAGER: &str = "endpoint-controller";
const SLICE_MANAGER: &str = "endpointslice-controller";
const MANAGED_BY: &str = "endpoints.kubernetes.io/managed-by";

fn is_ready(pod: &Value) -> bool {
    meta::get_path(pod, "status.conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// The Pod's port for a Service port's targetPort, if it resolves.
fn resolve_port(pod: &Value, svc_port: &Value) -> Option<i64> {
    let target = svc_port.get("targetPort").unwrap_or(&svc_port["port"]);
    if let Some(n) = target.as_i64() {
        return Some(n);
    }
    let name = target.as_str()?;
    if let Ok(n) = name.parse::<i64>() {
        return Some(n);
    }
    meta::get_path(pod, "spec.containers")?
        .as_array()?
        .iter()
        .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_i64())
}

struct Member {
    ip: String,
    ready: bool,
    node: Option<String>,
    target: Value,
}

/// Pods grouped by their resolved port list (JSON array of EndpointPorts).
fn groups(svc: &Value, pods: &[&Value]) -> BTreeMap<String, Vec<Member>> {
    let ports = meta::get_path(svc, "spec.ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut out: BTreeMap<String, Vec<Member>> = BTreeMap::new();
    for pod in pods {
        let resolved: Vec<Value> = ports
            .iter()
            .filter_map(|p| {
                let port = resolve_port(pod, p)?;
                let mut ep =
                    json!({"port": port, "protocol": p["protocol"].as_str().unwrap_or("TCP")});
                if let Some(name) = p["name"].as_str().filter(|n| !n.is_empty()) {
                    ep["name"] = json!(name);
                }
                Some(ep)
            })
            .collect();
        let Some(ip) = meta::get_path(pod, "status.podIP")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        else {
            continue;
        };
        out.entry(Value::Array(resolved).to_string()).or_default().push(Member {
            ip: ip.to_string(),
            ready: is_ready(pod),
            node: meta::get_path(pod, "spec.nodeName").and_then(Value::as_str).map(String::from),
            target: json!({"kind": "Pod", "namespace": meta::namespace(pod), "name": meta::name(pod), "uid": meta::uid(pod)}),
        });
    }
    for members in out.values_mut() {
        members.sort_by(|a, b| a.ip.cmp(&b.ip));
    }
    out
}

fn address(m: &Member) -> Value {
    let mut a = json!({"ip": m.ip, "targetRef": m.target});
    if let Some(n) = &m.node {
        a["nodeName"] = json!(n);
    }
    a
}

fn subsets(groups: &BTreeMap<String, Vec<Member>>) -> Vec<Value> {
    groups
        .iter()
        .map(|(ports, members)| {
            let mut s = Map::new();
            let ready: Vec<Value> = members.iter().filter(|m| m.ready).map(address).collect();
            let not_ready: Vec<Value> = members.iter().filter(|m| !m.ready).map(address).collect();
            if !ready.is_empty() {
                s.insert("addresses".into(), Value::Array(ready));
            }
            if !not_ready.is_empty() {
                s.insert("notReadyAddresses".into(), Value::Array(not_ready));
            }
            let ports: Value = serde_json::from_str(ports).unwrap_or(json!([]));
            if ports.as_array().is_some_and(|p| !p.is_empty()) {
                s.insert("ports".into(), ports);
            }
            Value::Object(s)
        })
        .collect()
}

fn slice_endpoints(members: &[Member]) -> Vec<Value> {
    members
        .iter()
        .map(|m| {
            let mut e = json!({"addresses": [m.ip], "conditions": {"ready": m.ready, "serving": m.ready, "terminating": false},
                "targetRef": m.target});
            if let Some(n) = &m.node {
                e["nodeName"] = json!(n);
            }
            e
        })
        .collect()
}

/// Creates `desired` or updates the stored object's fields listed in `fields`.
fn upsert(state: &mut State, gr: &GroupResource, desired: Value, fields: &[&str], manager: &str) {
    let Some(def) = state.registry.storage_def(gr) else {
        return;
    };
    let ns = meta::namespace(&desired).unwrap_or_default().to_string();
    let name = meta::name(&desired).unwrap_or_default().to_string();
    let result = match state.get(gr, &ns, &name).cloned() {
        None => create(state, &def, &ns, desired, Fields::Record(manager)).map(|_| ()),
        Some(old) => {
            let mut new = old.clone();
            for f in fields {
                match meta::get_path(&desired, f) {
                    Some(v) => meta::set_path(&mut new, f, v.clone()),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove(*f);
                        }
                    }
                }
            }
            commit(state, &def, &old, new, "", Fields::Record(manager)).map(|_| ())
        }
    };
    if let Err(e) = result {
        tracing::debug!(error = %e.message, "endpoints controller write failed");
    }
}

/// The Services to converge on this pass, by namespace and name: every one on a full pass;
/// else those that changed, those whose Endpoints or EndpointSlices changed (someone else wrote
/// them), and those whose selector matches a changed Pod (before or after the change).
fn affected(state: &State, changes: &Changes) -> BTreeSet<(String, String)> {
    let svc_gr = GroupResource::new("", "services");
    let key = State::key_of;
    if changes.is_all() {
        let mut all: BTreeSet<(String, String)> = state.list(&svc_gr, None).map(key).collect();
        // Endpoints and slices whose Service is gone, so they are swept.
        all.extend(
            state
                .list(&GroupResource::new("", "endpoints"), None)
                .map(key),
        );
        all.extend(slice_services(state.list(&slice_gr(), None)));
        return all;
    }
    let mut out: BTreeSet<(String, String)> = changes.objects(&svc_gr).map(key).collect();
    out.extend(
        changes
            .objects(&GroupResource::new("", "endpoints"))
            .map(key),
    );
    out.extend(slice_services(changes.objects(&slice_gr())));
    // The Services whose selectors a changed Pod satisfies, before or after the change: from
    // the store's selector index, whatever the number of Services in the namespace.
    for pod in changes.objects(&GroupResource::new("", "pods")) {
        let Some(ns) = meta::namespace(pod) else {
            continue;
        };
        for name in state
            .indexes()
            .selecting(&svc_gr, ns, meta::labels_ref(pod))
        {
            out.insert((ns.to_string(), name));
        }
    }
    out
}

fn slice_gr() -> GroupResource {
    GroupResource::new("discovery.k8s.io", "endpointslices")
}

/// The Services (namespace, name) that the given EndpointSlices belong to.
fn slice_services<'a>(
    slices: impl Iterator<Item = &'a Value>,
) -> impl Iterator<Item = (String, String)> {
    slices.filter_map(|s| {
        let service = meta::labels_ref(s)
            .get("kubernetes.io/service-name")?
            .as_str()?;
        Some((meta::namespace(s)?.to_string(), service.to_string()))
    })
}

/// A Service's selector, when it has a non-empty one (the controllers manage only those).
fn selector(svc: &Value) -> Option<LabelSelector> {
    let selector = meta::get_path(svc, "spec.selector")
        .and_then(Value::as_object)
        .filter(|s| !s.is_empty())?;
    Some(LabelSelector(
        selector
            .iter()
            .map(|(k, v)| LabelReq::Eq(k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect(),
    ))
}

/// What one Service wants: its Endpoints and EndpointSlices (none when the Service is gone,
/// being deleted, or has no selector).
fn desired(state: &State, ns: &str, name: &str) -> (Option<Value>, Vec<Value>) {
    let svc_gr = GroupResource::new("", "services");
    let Some(svc) = state
        .get(&svc_gr, ns, name)
        .filter(|s| !meta::is_deleting(s))
    else {
        return (None, Vec::new());
    };
    let Some(sel) = selector(svc) else {
        return (None, Vec::new());
    };
    let matching: Vec<&Value> = candidates(state, svc, ns)
        .into_iter()
        .filter(|p| !meta::is_deleting(p) && sel.matches(p))
        .collect();
    let groups = groups(svc, &matching);
    let mut labels = meta::labels(svc);
    labels.insert(MANAGED_BY.into(), json!(EP_MANAGER));
    let mut ep = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name, "namespace": ns, "labels": labels}});
    let subsets = subsets(&groups);
    if !subsets.is_empty() {
        ep["subsets"] = Value::Array(subsets);
    }
    let uid = meta::uid(svc).unwrap_or_default().to_string();
    let base = format!(
        "{name}-{}",
        uid.chars()
            .filter(char::is_ascii_alphanumeric)
            .take(5)
            .collect::<String>()
    );
    let mut slice_labels = meta::labels(svc);
    slice_labels.insert("kubernetes.io/service-name".into(), json!(name));
    slice_labels.insert(
        "endpointslice.kubernetes.io/managed-by".into(),
        json!("endpointslice-controller.k8s.io"),
    );
    let owner = json!([{"apiVersion": "v1", "kind": "Service", "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}]);
    let empty = vec![(String::from("[]"), Vec::new())];
    let entries: Vec<(String, Vec<Member>)> = if groups.is_empty() {
        empty
    } else {
        groups.into_iter().collect()
    };
    let slices = entries
        .iter()
        .enumerate()
        .map(|(i, (ports, members))| {
            let slice_name = if i == 0 {
                base.clone()
            } else {
                format!("{base}-{i}")
            };
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": slice_name, "namespace": ns, "labels": slice_labels, "ownerReferences": owner},
                "addressType": "IPv4", "endpoints": slice_endpoints(members),
                "ports": serde_json::from_str::<Value>(ports).unwrap_or(json!([]))})
        })
        .collect();
    (Some(ep), slices)
}

/// The Pods that carry the rarest pair of the Service's selector (a superset of those it
/// selects; none when it has no selector), from the store's label index: a Service looks at
/// its own candidates, not at its namespace (10,000 clusters' Services share one namespace in
/// the scale benchmark).
fn candidates<'a>(state: &'a State, svc: &Value, ns: &str) -> Vec<&'a Value> {
    meta::get_path(svc, "spec.selector")
        .and_then(Value::as_object)
        .and_then(|sel| state.pods_by_rarest_pair(ns, sel))
        .unwrap_or_default()
}

/// The EndpointSlices labelled as the Service's.
fn slices_of<'a>(state: &'a State, ns: &str, service: &str) -> Vec<&'a Value> {
    state
        .indexes()
        .labelled(&slice_gr(), ns, "kubernetes.io/service-name", service)
        .iter()
        .filter_map(|name| state.get(&slice_gr(), ns, name))
        .collect()
}

/// What a pass writes and deletes for one Service.
struct Plan {
    ns: String,
    endpoints: Option<Value>,
    slices: Vec<Value>,
    stale: Vec<(GroupResource, String)>,
}

/// Converges the Endpoints and EndpointSlices of the Services that changes may affect: writes
/// what they want and deletes what the controllers made that no Service wants any more. Every
/// Service's plan is made first, from one view of the store (writing one Service's objects
/// changes nothing another Service's plan reads), then written.
pub fn reconcile(state: &mut State, changes: &Changes) {
    let affected = affected(state, changes);
    if affected.is_empty() {
        return;
    }
    let plans: Vec<Plan> = affected
        .iter()
        .map(|(ns, name)| plan(state, ns, name))
        .collect();
    let ep_gr = GroupResource::new("", "endpoints");
    for plan in plans {
        if let Some(ep) = plan.endpoints {
            upsert(
                state,
                &ep_gr,
                ep,
                &["subsets", "metadata.labels"],
                EP_MANAGER,
            );
        }
        for slice in plan.slices {
            upsert(
                state,
                &slice_gr(),
                slice,
                &["endpoints", "ports", "metadata.labels"],
                SLICE_MANAGER,
            );
        }
        for (gr, stale_name) in plan.stale {
            let Some(def) = state.registry.storage_def(&gr) else {
                continue;
            };
            let _ = delete(
                state,
                &def,
                &plan.ns,
                &stale_name,
                &DeleteOptions::default(),
            );
        }
    }
}

/// One Service's plan: its desired Endpoints and slices, and the controllers' objects of it
/// that nothing wants any more.
fn plan(state: &State, ns: &str, name: &str) -> Plan {
    let ep_gr = GroupResource::new("", "endpoints");
    let (endpoints, slices) = desired(state, ns, name);
    let wanted: BTreeSet<&str> = slices.iter().filter_map(meta::name).collect();
    let ours = |o: &Value, label: &str, manager: &str| {
        meta::labels_ref(o).get(label).and_then(Value::as_str) == Some(manager)
    };
    let mut stale: Vec<(GroupResource, String)> = Vec::new();
    if endpoints.is_none() {
        let live = state
            .get(&GroupResource::new("", "services"), ns, name)
            .is_some_and(|s| !meta::is_deleting(s));
        if !live
            && state
                .get(&ep_gr, ns, name)
                .is_some_and(|e| ours(e, MANAGED_BY, EP_MANAGER))
        {
            stale.push((ep_gr.clone(), name.to_string()));
        }
    }
    stale.extend(
        slices_of(state, ns, name)
            .iter()
            .filter(|s| {
                ours(
                    s,
                    "endpointslice.kubernetes.io/managed-by",
                    "endpointslice-controller.k8s.io",
                ) && !meta::name(s).is_some_and(|n| wanted.contains(n))
            })
            .filter_map(|s| Some((slice_gr(), meta::name(s)?.to_string()))),
    );
    Plan {
        ns: ns.to_string(),
        endpoints,
        slices,
        stale,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_target_ports_resolve_per_pod() {
        let pod =
            json!({"spec": {"containers": [{"ports": [{"name": "http", "containerPort": 8080}]}]}});
        assert_eq!(
            resolve_port(&pod, &json!({"port": 80, "targetPort": "http"})),
            Some(8080)
        );
        assert_eq!(
            resolve_port(&pod, &json!({"port": 80, "targetPort": 9090})),
            Some(9090)
        );
        assert_eq!(resolve_port(&pod, &json!({"port": 80})), Some(80));
        assert_eq!(
            resolve_port(&pod, &json!({"port": 80, "targetPort": "grpc"})),
            None
        );
    }

    #[test]
    fn subsets_split_ready_and_not_ready() {
        let svc = json!({"spec": {"ports": [{"name": "db", "port": 5432, "protocol": "TCP"}]}});
        let a = json!({"metadata": {"name": "a", "namespace": "n", "uid": "1"}, "spec": {"nodeName": "n1"},
            "status": {"podIP": "10.0.0.2", "conditions": [{"type": "Ready", "status": "True"}]}});
        let b = json!({"metadata": {"name": "b", "namespace": "n", "uid": "2"}, "status": {"podIP": "10.0.0.1"}});
        let c = json!({"metadata": {"name": "c", "namespace": "n", "uid": "3"}, "status": {}});
        let g = groups(&svc, &[&a, &b, &c]);
        let s = subsets(&g);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0]["addresses"][0]["ip"], "10.0.0.2");
        assert_eq!(s[0]["addresses"][0]["nodeName"], "n1");
        assert_eq!(s[0]["notReadyAddresses"][0]["ip"], "10.0.0.1");
        assert_eq!(
            s[0]["ports"],
            json!([{"name": "db", "port": 5432, "protocol": "TCP"}])
        );
        let e = slice_endpoints(&g.into_values().next().unwrap());
        assert_eq!(e[0]["conditions"]["ready"], false);
    }
}
