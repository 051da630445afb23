//! The disruption controller (policy/v1): computes every PodDisruptionBudget's status with
//! `plan::status` over the Pods of its namespace that its selector selects, finding each Pod
//! controller's scale as upstream's finders do — a ReplicaSet controlled by a Deployment counts
//! the Deployment's `replicas`; any other controller is read through its kind's `scale`
//! subresource (apps kinds, custom resources whose CRD declares one); a kind without one is an
//! error (`<resource>.<group> does not implement the scale subresource`). Status is written
//! through the status subresource; no Events are recorded.

pub mod plan;

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

use super::workload::{controller_of, selects};
use super::writes;
use crate::meta;
use crate::registry::{GroupResource, ResourceDef};
use crate::store::State;

const MANAGER: &str = "disruption-controller";

fn def_of(state: &State, api_version: &str, kind: &str) -> Option<std::sync::Arc<ResourceDef>> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    state
        .registry
        .all()
        .find(|d| d.group == group && d.version == version && d.kind == kind)
        .cloned()
}

/// The scale of the controller `owner` names in `ns` (see `plan::ScaleOf`).
pub fn scale_of(state: &State, owner: &Value, ns: &str) -> Result<Option<(String, i64)>, String> {
    let api_version = owner["apiVersion"].as_str().unwrap_or_default();
    let kind = owner["kind"].as_str().unwrap_or_default();
    let name = owner["name"].as_str().unwrap_or_default();
    let uid = owner["uid"].as_str().unwrap_or_default();
    if kind == "ReplicaSet"
        && api_version == "apps/v1"
        && let Some(rs) = state.get(&GroupResource::new("apps", "replicasets"), ns, name)
        && meta::uid(rs) == Some(uid)
        && let Some(d_ref) = controller_of(rs).filter(|r| r["kind"] == "Deployment")
        && let Some(d) = state.get(
            &GroupResource::new("apps", "deployments"),
            ns,
            d_ref["name"].as_str().unwrap_or_default(),
        )
        && meta::uid(d) == d_ref["uid"].as_str()
    {
        let n = meta::get_path(d, "spec.replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        return Ok(Some((meta::uid(d).unwrap_or_default().to_string(), n)));
    }
    let def = def_of(state, api_version, kind)
        .ok_or_else(|| format!("no matches for kind \"{kind}\" in version \"{api_version}\""))?;
    let Some(scale) = &def.scale else {
        return Err(format!(
            "{} does not implement the scale subresource",
            def.gr().qualified()
        ));
    };
    let Some(obj) = state.get(&def.gr(), ns, name) else {
        return Ok(None);
    };
    if meta::uid(obj) != Some(uid) {
        return Ok(None);
    }
    let n = meta::get_path(obj, &scale.spec_replicas_path)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    Ok(Some((uid.to_string(), n)))
}

/// One pass over all budgets; returns when an eviction record expires. The Pods are indexed
/// once per pass by (namespace, label, value), so a budget looks only at the Pods that carry
/// the most selective of its `matchLabels` pairs (a pass costs the Pods plus the budgets, not
/// their product).
pub fn reconcile(state: &mut State, now: jiff::Timestamp) -> Option<Duration> {
    let gr = GroupResource::new("policy", "poddisruptionbudgets");
    let pods_gr = GroupResource::new("", "pods");
    let mut requeue: Option<Duration> = None;
    let planned: Vec<(String, String, Value)> = {
        let st: &State = state;
        let mut by_label: HashMap<(&str, &str, &Value), Vec<&Value>> = HashMap::new();
        for pod in st.list(&pods_gr, None) {
            let ns = meta::namespace(pod).unwrap_or_default();
            for (k, v) in meta::labels_ref(pod) {
                by_label.entry((ns, k.as_str(), v)).or_default().push(pod);
            }
        }
        let mut planned = Vec::new();
        for pdb in st.list(&gr, None) {
            let ns = meta::namespace(pdb).unwrap_or_default();
            let selector = meta::get_path(pdb, "spec.selector");
            // The pair that selects the fewest Pods (`component=member` carries every
            // cluster's; `instance=<cluster>` one cluster's).
            let narrowest = selector
                .and_then(|s| s["matchLabels"].as_object())
                .and_then(|m| {
                    m.iter()
                        .map(|(k, v)| {
                            by_label
                                .get(&(ns, k.as_str(), v))
                                .map_or(&[][..], Vec::as_slice)
                        })
                        .min_by_key(|pods| pods.len())
                });
            let candidates: Vec<&Value> = match narrowest {
                Some(pods) => pods.to_vec(),
                None => st.list(&pods_gr, Some(ns)).collect(),
            };
            let pods: Vec<&Value> = candidates
                .into_iter()
                .filter(|p| selects(selector, meta::labels_ref(p)))
                .collect();
            let (status, recheck) =
                plan::status(pdb, &pods, &|o: &Value, n: &str| scale_of(st, o, n), now);
            if let Some(r) = recheck {
                requeue = Some(requeue.map_or(r, |q| q.min(r)));
            }
            let name = meta::name(pdb).unwrap_or_default().to_string();
            planned.push((ns.to_string(), name, status));
        }
        planned
    };
    for (ns, name, status) in planned {
        writes::status(state, &gr, &ns, &name, MANAGER, status);
    }
    requeue
}
