//! The pvc-protection controller: a PersistentVolumeClaim being deleted keeps its
//! `kubernetes.io/pvc-protection` finalizer (added on create, see `defaults`) while a Pod of its
//! namespace that has not terminated (phase neither `Succeeded` nor `Failed`) references it in
//! `spec.volumes[].persistentVolumeClaim`; once none does, the controller removes the
//! finalizer and the claim disappears. A Pod counts until it is gone, so a claim deleted under a
//! running Pod stays `Terminating` until the Pod has been deleted and its node agent let it go,
//! as on a real cluster. Generic ephemeral volumes are not modelled.

use std::collections::BTreeSet;

use serde_json::Value;

use super::Changes;

use crate::defaults::PVC_PROTECTION;
use crate::meta;
use crate::registry::GroupResource;
use crate::store::State;
use crate::write::{Fields, commit};

const MANAGER: &str = "pvc-protection-controller";

/// Whether a Pod still holds the claim `name` of its namespace.
fn uses(pod: &Value, name: &str) -> bool {
    let phase = meta::get_path(pod, "status.phase").and_then(Value::as_str);
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return false;
    }
    meta::get_path(pod, "spec.volumes")
        .and_then(Value::as_array)
        .is_some_and(|vs| {
            vs.iter().any(|v| {
                meta::get_path(v, "persistentVolumeClaim.claimName").and_then(Value::as_str)
                    == Some(name)
            })
        })
}

/// What the controller keeps between passes: the claims being deleted that a Pod still used.
#[derive(Debug, Default)]
pub struct Memory {
    waiting: BTreeSet<(String, String)>,
}

/// The claims a pass looks at: every claim on a full pass; else the claims that changed, the
/// claims the changed Pods name (before or after the change), and those still in use last
/// time. A pass costs what changed, not the claims stored.
fn candidates(state: &State, changes: &Changes, memory: &Memory) -> BTreeSet<(String, String)> {
    let claims_gr = GroupResource::new("", "persistentvolumeclaims");
    let key = State::key_of;
    if changes.is_all() {
        return state.list(&claims_gr, None).map(key).collect();
    }
    let mut out = memory.waiting.clone();
    out.extend(changes.objects(&claims_gr).map(key));
    for pod in changes.objects(&GroupResource::new("", "pods")) {
        let ns = meta::namespace(pod).unwrap_or_default();
        let volumes = meta::get_path(pod, "spec.volumes")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        out.extend(volumes.iter().filter_map(|v| {
            let claim = meta::get_path(v, "persistentVolumeClaim.claimName")?.as_str()?;
            Some((ns.to_string(), claim.to_string()))
        }));
    }
    out
}

/// One pass: releases every claim being deleted (among [`candidates`]) that no Pod uses any
/// more.
pub fn reconcile(state: &mut State, changes: &Changes, memory: &mut Memory) {
    let claims_gr = GroupResource::new("", "persistentvolumeclaims");
    let pods_gr = GroupResource::new("", "pods");
    let Some(def) = state.registry.storage_def(&claims_gr) else {
        return;
    };
    let mut releasable: Vec<Value> = Vec::new();
    memory.waiting.clear();
    for (ns, name) in candidates(state, changes, memory) {
        let Some(claim) = state.get(&claims_gr, &ns, &name) else {
            continue;
        };
        if !meta::is_deleting(claim) || !meta::finalizers(claim).iter().any(|f| f == PVC_PROTECTION)
        {
            continue;
        }
        if state.list(&pods_gr, Some(&ns)).any(|p| uses(p, &name)) {
            memory.waiting.insert((ns, name));
        } else {
            releasable.push(claim.clone());
        }
    }
    for old in releasable {
        let mut new = old.clone();
        let kept: Vec<String> = meta::finalizers(&old)
            .into_iter()
            .filter(|f| f != PVC_PROTECTION)
            .collect();
        meta::set_finalizers(&mut new, &kept);
        if let Err(e) = commit(state, &def, &old, new, "", Fields::Record(MANAGER)) {
            tracing::debug!(error = %e.message, "pvc-protection controller write failed");
            memory.waiting.insert(State::key_of(&old));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_pods_that_have_not_terminated_hold_a_claim() {
        let pod = |phase: &str, claim: &str| {
            json!({"spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}},
                {"name": "e", "emptyDir": {}}]}, "status": {"phase": phase}})
        };
        assert!(uses(&pod("Running", "data"), "data"));
        assert!(uses(&pod("Pending", "data"), "data"));
        assert!(!uses(&pod("Running", "other"), "data"));
        assert!(!uses(&pod("Succeeded", "data"), "data"));
        assert!(!uses(&pod("Failed", "data"), "data"));
        assert!(uses(
            &json!({"spec": {"volumes": [{"persistentVolumeClaim": {"claimName": "data"}}]}}),
            "data"
        ));
    }
}
