//! The writes the workload controllers make, each through the normal write path (`write::create`,
//! `write::commit`, `write::delete`) as the named manager; failures are logged at debug level
//! and retried by the next pass, as a controller's requeue would.

use serde_json::Value;

use crate::registry::GroupResource;
use crate::store::State;
use crate::write::delete::{DeleteOptions, delete};
use crate::write::{Fields, commit, create::create};

fn log(what: &str, manager: &str, r: Result<(), String>) {
    if let Err(e) = r {
        tracing::debug!(manager, what, error = %e, "controller write failed");
    }
}

/// Creates `obj` in namespace `ns`; returns the stored object.
pub fn create_obj(
    state: &mut State,
    gr: &GroupResource,
    ns: &str,
    obj: Value,
    manager: &str,
) -> Option<Value> {
    let def = state.registry.storage_def(gr)?;
    match create(state, &def, ns, obj, Fields::Record(manager)) {
        Ok(v) => Some(v),
        Err(e) => {
            log("create", manager, Err(e.message));
            None
        }
    }
}

/// Deletes an object (Pods gracefully), with the default propagation.
pub fn delete_obj(state: &mut State, gr: &GroupResource, ns: &str, name: &str, manager: &str) {
    let Some(def) = state.registry.storage_def(gr) else {
        return;
    };
    let r = delete(state, &def, ns, name, &DeleteOptions::default());
    log("delete", manager, r.map(|_| ()).map_err(|e| e.message));
}

/// Changes an object through `edit` (the main resource, or `status` when `sub` says so); no
/// write happens when nothing changed.
pub fn update(
    state: &mut State,
    gr: &GroupResource,
    ns: &str,
    name: &str,
    sub: &str,
    manager: &str,
    edit: impl FnOnce(&mut Value),
) {
    let (Some(def), Some(old)) = (
        state.registry.storage_def(gr),
        state.get(gr, ns, name).cloned(),
    ) else {
        return;
    };
    let mut new = old.clone();
    edit(&mut new);
    if new == old {
        return;
    }
    let r = commit(state, &def, &old, new, sub, Fields::Record(manager));
    log("update", manager, r.map(|_| ()).map_err(|e| e.message));
}

/// Replaces `status` of an object.
pub fn status(
    state: &mut State,
    gr: &GroupResource,
    ns: &str,
    name: &str,
    manager: &str,
    status: Value,
) {
    // A pass over every object recomputes every status: compare before copying anything.
    if state
        .get(gr, ns, name)
        .is_some_and(|o| o.get("status") == Some(&status))
    {
        return;
    }
    update(state, gr, ns, name, "status", manager, |o| {
        o["status"] = status
    });
}
