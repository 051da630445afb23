//! The garbage collector and namespace/CRD cleanup, run asynchronously after deletions (and
//! every second): deletes dependents whose owners are all gone (background), deletes dependents
//! of owners being deleted in the foreground and removes `foregroundDeletion` once no dependent
//! with `blockOwnerDeletion` remains, strips owner references for `orphan` deletions, removes
//! dangling references when other owners remain, empties terminating namespaces before removing
//! them, deletes a CRD's objects before the CRD, and (like the real PodGC) removes terminating
//! Pods whose Node no longer exists. Pods are deleted gracefully like any client's delete: on a
//! namespace or owner deletion, Pods on a node wait for their node agent. Owners are matched by
//! uid (and namespace), not by kind/name, like the real collector. On a large store a pass
//! takes long enough to matter to requests waiting on the lock, and the collector paces itself
//! ([`PACE`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::meta;
use crate::registry::{GroupResource, ResourceDef};
use crate::server::Server;
use crate::store::State;
use crate::write::delete::{DeleteOptions, delete, is_pod, pod_node_exists};
use crate::write::grace;
use crate::write::{Fields, commit};

const MANAGER: &str = "kube-controller-manager";

/// A pass looks at every stored object under the store's lock, so on a large store the
/// collector paces itself: the next pass starts no sooner than `PACE` times the last one's
/// duration after it ended (at most a fifth of the lock), and never sooner than 20 ms after the
/// change that woke it (so the request that triggered it returns first).
const PACE: u32 = 4;

pub async fn run(server: Arc<Server>, notify: Arc<Notify>) {
    let mut last_rv = 0;
    let mut rest = Duration::ZERO;
    loop {
        tokio::select! {
            _ = server.cancel.cancelled() => return,
            _ = notify.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        tokio::time::sleep(rest.max(Duration::from_millis(20))).await;
        let mut state = server.lock();
        if state.rv == last_rv {
            continue;
        }
        let started = std::time::Instant::now();
        for _ in 0..50 {
            if !server
                .metrics
                .timed("garbage-collector", || pass(&mut state))
            {
                break;
            }
        }
        last_rv = state.rv;
        rest = started.elapsed() * PACE;
    }
}

/// What the collector needs of an owner, borrowed from the pass's view of the store.
struct Owner<'a> {
    namespaced: bool,
    ns: &'a str,
    deleting: bool,
    orphan: bool,
    foreground: bool,
}

enum Action {
    Delete(Arc<ResourceDef>, String, String, Option<&'static str>),
    SetOwnerRefs(Arc<ResourceDef>, String, String, Vec<Value>),
    RemoveFinalizer(Arc<ResourceDef>, String, String, &'static str),
    FinalizeNamespace(String),
}

/// One collection pass; returns whether anything changed.
pub fn pass(state: &mut State) -> bool {
    let defs = state.registry.storage_resources();
    // Shared handles, not copies: a pass looks at every stored object.
    let mut objects: Vec<(Arc<ResourceDef>, Arc<Value>)> = Vec::new();
    for def in &defs {
        for obj in state.list_shared(&def.gr(), None) {
            objects.push((def.clone(), obj.clone()));
        }
    }
    // Owners by uid, borrowed from `objects` (a pass allocates per owner, not per field).
    let mut owners: HashMap<&str, Owner<'_>> = HashMap::with_capacity(objects.len());
    for (def, obj) in &objects {
        if let Some(uid) = meta::uid(obj) {
            let finalizers = meta::get_path(obj, "metadata.finalizers")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice);
            owners.insert(
                uid,
                Owner {
                    namespaced: def.namespaced,
                    ns: meta::namespace(obj).unwrap_or_default(),
                    deleting: meta::is_deleting(obj),
                    orphan: finalizers.iter().any(|f| f == "orphan"),
                    foreground: finalizers.iter().any(|f| f == "foregroundDeletion"),
                },
            );
        }
    }
    let mut actions = Vec::new();
    // Dependents.
    for (def, obj) in &objects {
        let refs = meta::owner_references_ref(obj);
        if refs.is_empty() {
            continue;
        }
        let ns = meta::namespace(obj).unwrap_or_default();
        let (mut solid, mut waiting, mut orphaning) = (Vec::new(), 0, 0);
        for r in refs {
            let owner = r
                .get("uid")
                .and_then(Value::as_str)
                .and_then(|u| owners.get(u));
            match owner {
                Some(o) if o.namespaced && o.ns != ns => {}
                None => {}
                Some(o) if o.deleting && o.orphan => orphaning += 1,
                Some(o) if o.deleting && o.foreground => waiting += 1,
                Some(_) => solid.push(r),
            }
        }
        let name = || meta::name(obj).unwrap_or_default().to_string();
        if !solid.is_empty() {
            if solid.len() < refs.len() {
                let kept = solid.into_iter().cloned().collect();
                actions.push(Action::SetOwnerRefs(
                    def.clone(),
                    ns.to_string(),
                    name(),
                    kept,
                ));
            }
        } else if orphaning > 0 {
            actions.push(Action::SetOwnerRefs(
                def.clone(),
                ns.to_string(),
                name(),
                Vec::new(),
            ));
        } else if meta::is_deleting(obj) {
            // Already on its way out.
        } else if waiting > 0 {
            actions.push(Action::Delete(
                def.clone(),
                ns.to_string(),
                name(),
                Some("Foreground"),
            ));
        } else {
            actions.push(Action::Delete(def.clone(), ns.to_string(), name(), None));
        }
    }
    drop(owners);
    // PodGC: terminating Pods whose Node is gone are deleted at once (their delete picks grace 0).
    for (def, obj) in &objects {
        if is_pod(def)
            && meta::is_deleting(obj)
            && grace::seconds(obj) > 0
            && !pod_node_exists(state, obj)
        {
            let ns = meta::namespace(obj).unwrap_or_default().to_string();
            let name = meta::name(obj).unwrap_or_default().to_string();
            actions.push(Action::Delete(def.clone(), ns, name, None));
        }
    }
    // Owners waiting on dependents.
    for (def, obj) in &objects {
        if !meta::is_deleting(obj) {
            continue;
        }
        let uid = meta::uid(obj).unwrap_or_default();
        let ns = meta::namespace(obj).unwrap_or_default().to_string();
        let name = meta::name(obj).unwrap_or_default().to_string();
        let finalizers = meta::finalizers(obj);
        let refs_to_me = |blocking_only: bool| {
            objects.iter().any(|(_, d)| {
                meta::owner_references(d).iter().any(|r| {
                    r.get("uid").and_then(Value::as_str) == Some(uid)
                        && (!blocking_only
                            || r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true))
                })
            })
        };
        if finalizers.iter().any(|f| f == "foregroundDeletion") && !refs_to_me(true) {
            actions.push(Action::RemoveFinalizer(
                def.clone(),
                ns.clone(),
                name.clone(),
                "foregroundDeletion",
            ));
        }
        if finalizers.iter().any(|f| f == "orphan") && !refs_to_me(false) {
            actions.push(Action::RemoveFinalizer(
                def.clone(),
                ns.clone(),
                name.clone(),
                "orphan",
            ));
        }
        if def.group.is_empty() && def.kind == "Namespace" {
            let mut remaining = false;
            for (d, o) in objects.iter().filter(|(d, _)| d.namespaced) {
                if meta::namespace(o) == Some(name.as_str()) {
                    remaining = true;
                    if !meta::is_deleting(o) {
                        let oname = meta::name(o).unwrap_or_default().to_string();
                        actions.push(Action::Delete(d.clone(), name.clone(), oname, None));
                    }
                }
            }
            if !remaining {
                actions.push(Action::FinalizeNamespace(name.clone()));
            }
        }
        if crate::write::is_crd(def)
            && finalizers
                .iter()
                .any(|f| f == crate::crd::CLEANUP_FINALIZER)
        {
            let group = meta::get_path(obj, "spec.group")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let plural = meta::get_path(obj, "spec.names.plural")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let gr = GroupResource::new(group, plural);
            let mut remaining = false;
            for (d, o) in objects.iter().filter(|(d, _)| d.gr() == gr) {
                remaining = true;
                if !meta::is_deleting(o) {
                    let ons = meta::namespace(o).unwrap_or_default().to_string();
                    let oname = meta::name(o).unwrap_or_default().to_string();
                    actions.push(Action::Delete(d.clone(), ons, oname, None));
                }
            }
            if !remaining {
                actions.push(Action::RemoveFinalizer(
                    def.clone(),
                    String::new(),
                    name.clone(),
                    crate::crd::CLEANUP_FINALIZER,
                ));
            }
        }
    }
    let before = state.rv;
    for a in actions {
        if let Err(e) = execute(state, a) {
            tracing::debug!(error = %e.message, "garbage collector action failed");
        }
    }
    state.rv != before
}

fn execute(state: &mut State, action: Action) -> Result<(), crate::status::ApiError> {
    match action {
        Action::Delete(def, ns, name, policy) => {
            // Like the real collector and namespace controller: an explicit policy, so that
            // kinds whose default is Orphan (batch/v1 Jobs) still take their dependents along.
            let opts = DeleteOptions {
                propagation: Some(policy.unwrap_or("Background").to_string()),
                ..Default::default()
            };
            delete(state, &def, &ns, &name, &opts).map(|_| ())
        }
        Action::SetOwnerRefs(def, ns, name, refs) => {
            let Some(old) = state.get(&def.gr(), &ns, &name).cloned() else {
                return Ok(());
            };
            let mut new = old.clone();
            let m = meta::meta_mut(&mut new);
            if refs.is_empty() {
                m.remove("ownerReferences");
            } else {
                m.insert("ownerReferences".into(), Value::Array(refs));
            }
            commit(state, &def, &old, new, "", Fields::Record(MANAGER)).map(|_| ())
        }
        Action::RemoveFinalizer(def, ns, name, finalizer) => {
            let Some(old) = state.get(&def.gr(), &ns, &name).cloned() else {
                return Ok(());
            };
            let mut new = old.clone();
            let f: Vec<String> = meta::finalizers(&old)
                .into_iter()
                .filter(|x| x != finalizer)
                .collect();
            meta::set_finalizers(&mut new, &f);
            commit(state, &def, &old, new, "", Fields::Record(MANAGER)).map(|_| ())
        }
        Action::FinalizeNamespace(name) => {
            let gr = GroupResource::new("", "namespaces");
            let Some(def) = state.registry.storage_def(&gr) else {
                return Ok(());
            };
            let Some(old) = state.get(&gr, "", &name).cloned() else {
                return Ok(());
            };
            let mut new = old.clone();
            meta::set_path(&mut new, "spec.finalizers", json!([]));
            commit(state, &def, &old, new, "finalize", Fields::Record(MANAGER)).map(|_| ())
        }
    }
}
