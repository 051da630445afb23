//! The Endpoints and EndpointSlice controller: for every Service with a selector, the Pods of
//! its namespace that match, are not being deleted and have a `status.podIP` become addresses
//! (ready or not ready by their `Ready` condition), with target ports resolved per Pod (numbers
//! as is, names through the Pod's container ports). It writes an Endpoints object named after
//! the Service (labelled `endpoints.kubernetes.io/managed-by: endpoint-controller`, deleted with
//! the Service) and EndpointSlices labelled `kubernetes.io/service-name` and owned by the
//! Service (one slice per distinct port set; the garbage collector removes them with it).
//! Services without a selector are left alone. IPv4 only; no topology hints.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

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

pub fn reconcile(state: &mut State) {
    let svc_gr = GroupResource::new("", "services");
    let ep_gr = GroupResource::new("", "endpoints");
    let slice_gr = GroupResource::new("discovery.k8s.io", "endpointslices");
    let services: Vec<Value> = state
        .list(&svc_gr, None)
        .filter(|s| !meta::is_deleting(s))
        .cloned()
        .collect();
    let pods: Vec<Value> = state
        .list(&GroupResource::new("", "pods"), None)
        .filter(|p| !meta::is_deleting(p))
        .cloned()
        .collect();
    let mut wanted_slices: Vec<(String, String)> = Vec::new();
    for svc in &services {
        let Some(selector) = meta::get_path(svc, "spec.selector")
            .and_then(Value::as_object)
            .filter(|s| !s.is_empty())
        else {
            continue;
        };
        let ns = meta::namespace(svc).unwrap_or_default().to_string();
        let name = meta::name(svc).unwrap_or_default().to_string();
        let sel = LabelSelector(
            selector
                .iter()
                .map(|(k, v)| LabelReq::Eq(k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect(),
        );
        let matching: Vec<&Value> = pods
            .iter()
            .filter(|p| meta::namespace(p) == Some(ns.as_str()) && sel.matches(p))
            .collect();
        let groups = groups(svc, &matching);
        let mut labels = meta::labels(svc);
        labels.insert(MANAGED_BY.into(), json!(EP_MANAGER));
        let mut ep = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name, "namespace": ns, "labels": labels}});
        let subsets = subsets(&groups);
        if !subsets.is_empty() {
            ep["subsets"] = Value::Array(subsets);
        }
        upsert(
            state,
            &ep_gr,
            ep,
            &["subsets", "metadata.labels"],
            EP_MANAGER,
        );

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
        for (i, (ports, members)) in entries.iter().enumerate() {
            let slice_name = if i == 0 {
                base.clone()
            } else {
                format!("{base}-{i}")
            };
            let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": slice_name, "namespace": ns, "labels": slice_labels, "ownerReferences": owner},
                "addressType": "IPv4", "endpoints": slice_endpoints(members),
                "ports": serde_json::from_str::<Value>(ports).unwrap_or(json!([]))});
            upsert(
                state,
                &slice_gr,
                slice,
                &["endpoints", "ports", "metadata.labels"],
                SLICE_MANAGER,
            );
            wanted_slices.push((ns.clone(), slice_name));
        }
    }
    // Drop what no Service wants any more.
    let live: Vec<(String, String)> = services
        .iter()
        .map(|s| {
            (
                meta::namespace(s).unwrap_or_default().to_string(),
                meta::name(s).unwrap_or_default().to_string(),
            )
        })
        .collect();
    let stale_eps: Vec<(String, String)> = state
        .list(&ep_gr, None)
        .filter(|e| meta::labels(e).get(MANAGED_BY).and_then(Value::as_str) == Some(EP_MANAGER))
        .map(|e| {
            (
                meta::namespace(e).unwrap_or_default().to_string(),
                meta::name(e).unwrap_or_default().to_string(),
            )
        })
        .filter(|k| !live.contains(k))
        .collect();
    let stale_slices: Vec<(String, String)> = state
        .list(&slice_gr, None)
        .filter(|e| {
            meta::labels(e)
                .get("endpointslice.kubernetes.io/managed-by")
                .and_then(Value::as_str)
                == Some("endpointslice-controller.k8s.io")
        })
        .map(|e| {
            (
                meta::namespace(e).unwrap_or_default().to_string(),
                meta::name(e).unwrap_or_default().to_string(),
            )
        })
        .filter(|k| !wanted_slices.contains(k))
        .collect();
    for (gr, list) in [(ep_gr, stale_eps), (slice_gr, stale_slices)] {
        let Some(def) = state.registry.storage_def(&gr) else {
            continue;
        };
        for (ns, name) in list {
            let _ = delete(state, &def, &ns, &name, &DeleteOptions::default());
        }
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
