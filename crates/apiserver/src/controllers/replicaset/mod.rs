//! The ReplicaSet controller (apps/v1): runs `plan` for every ReplicaSet over the Pods it
//! controls and the orphans of its namespace, then applies the result through the normal write
//! path: adoptions and releases (owner references), Pod creations (`generateName: <rs>-`, the
//! template's labels, annotations and spec, a controller reference), graceful deletions, and one
//! status write. Pods run only if a node agent runs them; without one they stay `Pending`.

pub mod plan;

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::workload::{PodName, controller_of, controller_ref, pod_from_template};
use super::writes;
use crate::meta;
use crate::registry::GroupResource;
use crate::store::State;

const MANAGER: &str = "replicaset-controller";

pub fn pods_gr() -> GroupResource {
    GroupResource::new("", "pods")
}

/// Adds a controller reference to a Pod (adoption) or removes the references to `uid`.
pub fn set_owner(
    state: &mut State,
    ns: &str,
    name: &str,
    manager: &str,
    owner: Option<Value>,
    uid: &str,
) {
    writes::update(state, &pods_gr(), ns, name, "", manager, |p| {
        let mut refs: Vec<Value> = meta::owner_references(p)
            .into_iter()
            .filter(|r| r["uid"] != uid)
            .collect();
        refs.extend(owner);
        meta::meta_mut(p).insert("ownerReferences".into(), Value::Array(refs));
    });
}

/// One pass over all ReplicaSets; returns when a Pod becomes available (`minReadySeconds`).
pub fn reconcile(state: &mut State, now: jiff::Timestamp) -> Option<Duration> {
    let gr = GroupResource::new("apps", "replicasets");
    let sets: Vec<Value> = state.list(&gr, None).cloned().collect();
    if sets.is_empty() {
        return None;
    }
    let mut owned: HashMap<String, Vec<Value>> = HashMap::new();
    let mut orphans: HashMap<String, Vec<Value>> = HashMap::new();
    for p in state.list(&pods_gr(), None) {
        match controller_of(p) {
            Some(r) => owned
                .entry(r["uid"].as_str().unwrap_or_default().to_string())
                .or_default()
                .push(p.clone()),
            None => orphans
                .entry(meta::namespace(p).unwrap_or_default().to_string())
                .or_default()
                .push(p.clone()),
        }
    }
    let mut requeue: Option<Duration> = None;
    for rs in &sets {
        let ns = meta::namespace(rs).unwrap_or_default().to_string();
        let name = meta::name(rs).unwrap_or_default().to_string();
        let uid = meta::uid(rs).unwrap_or_default().to_string();
        let mine = owned.remove(&uid).unwrap_or_default();
        let free = orphans.entry(ns.clone()).or_default();
        let p = plan::plan(rs, &mine, free, now);
        free.retain(|o| !p.adopt.iter().any(|a| Some(a.as_str()) == meta::name(o)));
        let owner = controller_ref(rs, "apps/v1", "ReplicaSet");
        for pod in &p.adopt {
            set_owner(state, &ns, pod, MANAGER, Some(owner.clone()), &uid);
        }
        for pod in &p.release {
            set_owner(state, &ns, pod, MANAGER, None, &uid);
        }
        for pod in &p.delete {
            writes::delete_obj(state, &pods_gr(), &ns, pod, MANAGER);
        }
        let template = meta::get_path(rs, "spec.template")
            .cloned()
            .unwrap_or(json!({}));
        for _ in 0..p.create {
            let prefix = format!("{name}-");
            let pod = pod_from_template(
                &template,
                PodName::Prefix(&prefix),
                owner.clone(),
                &json!({}),
            );
            writes::create_obj(state, &pods_gr(), &ns, pod, MANAGER);
        }
        writes::status(state, &gr, &ns, &name, MANAGER, p.status);
        if let Some(r) = p.requeue {
            requeue = Some(requeue.map_or(r, |q| q.min(r)));
        }
    }
    requeue
}
