//! The StatefulSet controller (apps/v1): runs `plan` for every set over the Pods it controls, the
//! claims of its namespace and its ControllerRevisions, then writes through the normal write path
//! in a fixed order: the new revision, claims (before the Pods that mount them), claim owner
//! references (retention policy), Pod creations, graceful Pod deletions, old revisions, status.
//! Orphan Pods are not adopted. Pods run only if a node agent runs them; without one they stay
//! `Pending` and an `OrderedReady` set stops after its first Pod.

pub mod build;
pub mod plan;

use serde_json::Value;

use super::workload::by_controller;
use super::writes;
use crate::meta;
use crate::registry::GroupResource;
use crate::store::State;

const MANAGER: &str = "statefulset-controller";

/// One pass over all StatefulSets.
pub fn reconcile(state: &mut State, now: jiff::Timestamp) {
    let gr = GroupResource::new("apps", "statefulsets");
    let sets: Vec<Value> = state.list(&gr, None).cloned().collect();
    if sets.is_empty() {
        return;
    }
    let pods_gr = GroupResource::new("", "pods");
    let claims_gr = GroupResource::new("", "persistentvolumeclaims");
    let revs_gr = GroupResource::new("apps", "controllerrevisions");
    let mut pods = by_controller(state, &pods_gr);
    let mut revisions = by_controller(state, &revs_gr);
    for set in &sets {
        let ns = meta::namespace(set).unwrap_or_default().to_string();
        let name = meta::name(set).unwrap_or_default().to_string();
        let uid = meta::uid(set).unwrap_or_default().to_string();
        let claims: Vec<Value> = state.list(&claims_gr, Some(&ns)).cloned().collect();
        let mine = pods.remove(&uid).unwrap_or_default();
        let revs = revisions.remove(&uid).unwrap_or_default();
        let p = plan::plan(set, &mine, &claims, &revs, now);
        if let Some(r) = p.create_revision {
            writes::create_obj(state, &revs_gr, &ns, r, MANAGER);
        }
        for c in p.create_claims {
            writes::create_obj(state, &claims_gr, &ns, c, MANAGER);
        }
        for (claim, owners) in p.claim_owners {
            writes::update(state, &claims_gr, &ns, &claim, "", MANAGER, |c| {
                meta::meta_mut(c).insert("ownerReferences".into(), Value::Array(owners));
            });
        }
        for pod in p.create_pods {
            writes::create_obj(state, &pods_gr, &ns, pod, MANAGER);
        }
        for pod in &p.delete_pods {
            writes::delete_obj(state, &pods_gr, &ns, pod, MANAGER);
        }
        for r in &p.delete_revisions {
            writes::delete_obj(state, &revs_gr, &ns, r, MANAGER);
        }
        writes::status(state, &gr, &ns, &name, MANAGER, p.status);
    }
}
