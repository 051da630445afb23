//! The Deployment controller (apps/v1): runs `plan` for every Deployment over the ReplicaSets it
//! controls and their Pods, then writes through the normal write path: the new ReplicaSet,
//! `spec.replicas` of scaled sets (with the `desired-replicas` and `max-replicas` annotations),
//! the revision of the new set and of the Deployment, deletions beyond the history limit, and
//! status. Orphan ReplicaSets are not adopted.

pub mod plan;
pub mod status;

use std::time::Duration;

use serde_json::{Value, json};

use super::workload::{by_controller, replicas};
use super::writes;
use crate::meta;
use crate::registry::GroupResource;
use crate::store::State;

const MANAGER: &str = "deployment-controller";

fn annotate(obj: &mut Value, key: &str, value: String) {
    let m = meta::meta_mut(obj);
    let a = m.entry("annotations").or_insert_with(|| json!({}));
    if !a.is_object() {
        *a = json!({});
    }
    a[key] = json!(value);
}

/// One pass over all Deployments; returns when a progress deadline is due.
pub fn reconcile(state: &mut State, now: jiff::Timestamp) -> Option<Duration> {
    let gr = GroupResource::new("apps", "deployments");
    let deployments: Vec<Value> = state.list(&gr, None).cloned().collect();
    if deployments.is_empty() {
        return None;
    }
    let rs_gr = GroupResource::new("apps", "replicasets");
    let mut sets = by_controller(state, &rs_gr);
    let pods = by_controller(state, &GroupResource::new("", "pods"));
    let mut requeue: Option<Duration> = None;
    for d in &deployments {
        let ns = meta::namespace(d).unwrap_or_default().to_string();
        let name = meta::name(d).unwrap_or_default().to_string();
        let mine = sets
            .remove(meta::uid(d).unwrap_or_default())
            .unwrap_or_default();
        let their_pods: Vec<Value> = mine
            .iter()
            .filter_map(|s| pods.get(meta::uid(s).unwrap_or_default()))
            .flatten()
            .cloned()
            .collect();
        let p = plan::plan(d, &mine, &their_pods, now);
        if let Some(rs) = p.create {
            writes::create_obj(state, &rs_gr, &ns, rs, MANAGER);
        }
        let desired = replicas(d).to_string();
        for (set, n) in &p.scale {
            writes::update(state, &rs_gr, &ns, set, "", MANAGER, |rs| {
                rs["spec"]["replicas"] = json!(n);
                annotate(
                    rs,
                    "deployment.kubernetes.io/desired-replicas",
                    desired.clone(),
                );
                annotate(
                    rs,
                    "deployment.kubernetes.io/max-replicas",
                    p.max_replicas.to_string(),
                );
            });
        }
        if let Some(set) = &p.new_rs {
            let min_ready = meta::get_path(d, "spec.minReadySeconds")
                .cloned()
                .unwrap_or(json!(0));
            writes::update(state, &rs_gr, &ns, set, "", MANAGER, |rs| {
                annotate(rs, plan::REVISION, p.revision.clone());
                rs["spec"]["minReadySeconds"] = min_ready;
            });
        }
        if !p.revision.is_empty() {
            writes::update(state, &gr, &ns, &name, "", MANAGER, |o| {
                annotate(o, plan::REVISION, p.revision.clone());
            });
        }
        for set in &p.delete {
            writes::delete_obj(state, &rs_gr, &ns, set, MANAGER);
        }
        writes::status(state, &gr, &ns, &name, MANAGER, p.status);
        if let Some(r) = p.requeue {
            requeue = Some(requeue.map_or(r, |q| q.min(r)));
        }
    }
    requeue
}
