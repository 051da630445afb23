//! The garbage collector and namespace/CRD cleanup, run asynchronously after deletions (and
//! every second): deletes dependents whose owners are all gone (background), deletes dependents
//! of owners being deleted in the foreground and removes `foregroundDeletion` once no dependent
//! with `blockOwnerDeletion` remains, strips owner references for `orphan` deletions, removes
//! dangling references when other owners remain, empties terminating namespaces before removing
//! them, deletes a CRD's objects before the CRD, and (like the real PodGC) removes terminating
//! Pods whose Node no longer exists. Pods are deleted gracefully like any client's delete: on a
//! namespace or owner deletion, Pods on a node wait for their node agent. Owners are matched by
//! uid (and namespace), not by kind/name, like the real collector.
//!
//! Like the real collector's graph, it works from what changed: a pass looks at the objects
//! written since the previous one, the dependents of those deleted or being deleted (the
//! store's owner index), and the deleted objects that still wait on others ([`scope`]), so it
//! costs what changed, not what is stored. A full pass over every object runs first, when the
//! watch history no longer holds the changes, and at least every [`FULL_EVERY`] as a resync;
//! on a large store the collector paces itself ([`PACE`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::controllers::Changes;
use crate::index::Loc;
use crate::meta;
use crate::registry::{GroupResource, ResourceDef};
use crate::server::Server;
use crate::store::{EventType, State, WatchEvent};
use crate::write::delete::{DeleteOptions, delete, is_pod, pod_node_exists};
use crate::write::grace;
use crate::write::{Fields, commit};

const MANAGER: &str = "kube-controller-manager";

/// A full pass looks at every stored object under the store's lock, so on a large store the
/// collector paces itself: the next pass starts no sooner than `PACE` times the last one's
/// duration after it ended, and never sooner than 20 ms after the change that woke it (so the
/// request that triggered it returns first).
const PACE: u32 = 4;

/// A full pass at least this often (when anything changed), beside the passes over what
/// changed: the resync that catches what a failed action left behind.
const FULL_EVERY: Duration = Duration::from_secs(60);

pub async fn run(server: Arc<Server>, notify: Arc<Notify>) {
    let mut last_rv = 0;
    let mut rest = Duration::ZERO;
    let mut memory = Memory::default();
    let mut last_full: Option<std::time::Instant> = None;
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
        let full_due = last_full.is_none_or(|t| t.elapsed() >= FULL_EVERY);
        for i in 0..50 {
            let changes = Changes::since(&state, memory.seen);
            let scope = match &changes {
                Changes::Events(events) if !(i == 0 && full_due) => {
                    Scope::Only(scope(&state, events, &memory))
                }
                _ => {
                    last_full = Some(std::time::Instant::now());
                    Scope::All
                }
            };
            memory.seen = Some(state.rv);
            if !server.metrics.timed("garbage-collector", || {
                pass(&mut state, &scope, &mut memory)
            }) {
                break;
            }
        }
        last_rv = state.rv;
        rest = started.elapsed() * PACE;
    }
}

/// What the collector keeps between passes.
#[derive(Debug, Default)]
pub struct Memory {
    /// The resourceVersion the last pass saw.
    seen: Option<u64>,
    /// Objects being deleted that wait on others (a `foregroundDeletion` or `orphan`
    /// finalizer, a terminating Namespace, a CRD being cleaned up): looked at on every pass
    /// until they are gone.
    waiting: BTreeSet<Loc>,
    /// Objects whose action failed: looked at again on the next pass.
    retry: BTreeSet<Loc>,
}

/// Which objects a pass looks at.
pub enum Scope {
    All,
    Only(BTreeSet<Loc>),
}

fn loc_of(gr: &GroupResource, obj: &Value) -> Loc {
    let (ns, name) = State::key_of(obj);
    (gr.clone(), ns, name)
}

/// The objects the changes concern: every changed object still stored (it may name an owner
/// that is gone, be an owner being deleted, or a terminating Pod); the dependents of every
/// object deleted or being deleted; the Namespace of every object deleted (it may have been
/// the last in a terminating one); on a Node's deletion, its terminating Pods; and those
/// waiting or to retry.
fn scope(state: &State, events: &[Arc<WatchEvent>], memory: &Memory) -> BTreeSet<Loc> {
    let mut out: BTreeSet<Loc> = memory.waiting.union(&memory.retry).cloned().collect();
    let namespaces = GroupResource::new("", "namespaces");
    let pods = GroupResource::new("", "pods");
    for e in events {
        let obj = &*e.object;
        let deleted = e.etype == EventType::Deleted;
        if !deleted {
            out.insert(loc_of(&e.gr, obj));
        }
        if (deleted || meta::is_deleting(obj))
            && let Some(uid) = meta::uid(obj)
        {
            out.extend(state.indexes().dependents_of(uid).cloned());
        }
        if deleted && let Some(ns) = meta::namespace(obj).filter(|ns| !ns.is_empty()) {
            out.insert((namespaces.clone(), String::new(), ns.to_owned()));
        }
        if deleted && e.gr.group.is_empty() && e.gr.resource == "nodes" {
            let node = meta::name(obj).unwrap_or_default();
            out.extend(
                state
                    .list(&pods, None)
                    .filter(|p| {
                        meta::is_deleting(p)
                            && meta::get_path(p, "spec.nodeName").and_then(Value::as_str)
                                == Some(node)
                    })
                    .map(|p| loc_of(&pods, p)),
            );
        }
    }
    out
}

/// What the collector needs of an owner.
struct Owner<'a> {
    namespaced: bool,
    ns: &'a str,
    deleting: bool,
    orphan: bool,
    foreground: bool,
}

/// The owner with this uid, from the store's uid index.
fn owner<'a>(state: &'a State, uid: &str) -> Option<Owner<'a>> {
    let (gr, ns, name) = state.indexes().by_uid(uid)?;
    let obj = state.get(gr, ns, name)?;
    let finalizers = meta::get_path(obj, "metadata.finalizers")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    Some(Owner {
        namespaced: !ns.is_empty(),
        ns: meta::namespace(obj).unwrap_or_default(),
        deleting: meta::is_deleting(obj),
        orphan: finalizers.iter().any(|f| f == "orphan"),
        foreground: finalizers.iter().any(|f| f == "foregroundDeletion"),
    })
}

enum Action {
    Delete(Arc<ResourceDef>, String, String, Option<&'static str>),
    SetOwnerRefs(Arc<ResourceDef>, String, String, Vec<Value>),
    RemoveFinalizer(Arc<ResourceDef>, String, String, &'static str),
    FinalizeNamespace(String),
}

impl Action {
    fn loc(&self) -> Loc {
        match self {
            Self::Delete(d, ns, name, _)
            | Self::SetOwnerRefs(d, ns, name, _)
            | Self::RemoveFinalizer(d, ns, name, _) => (d.gr(), ns.clone(), name.clone()),
            Self::FinalizeNamespace(name) => (
                GroupResource::new("", "namespaces"),
                String::new(),
                name.clone(),
            ),
        }
    }
}

/// Whether a deleted object waits on others, so that later passes look at it again.
fn waits(def: &ResourceDef, obj: &Value) -> bool {
    meta::is_deleting(obj)
        && ((def.group.is_empty() && def.kind == "Namespace")
            || meta::finalizers(obj).iter().any(|f| {
                f == "orphan" || f == "foregroundDeletion" || f == crate::crd::CLEANUP_FINALIZER
            }))
}

/// One collection pass over the objects in `scope`; returns whether anything changed.
pub fn pass(state: &mut State, scope: &Scope, memory: &mut Memory) -> bool {
    let defs = state.registry.storage_resources();
    // Shared handles, not copies.
    let mut objects: Vec<(Arc<ResourceDef>, Arc<Value>)> = Vec::new();
    match scope {
        Scope::All => {
            for def in &defs {
                for obj in state.list_shared(&def.gr(), None) {
                    objects.push((def.clone(), obj.clone()));
                }
            }
            memory.waiting.clear();
        }
        Scope::Only(locs) => {
            let by_gr: HashMap<GroupResource, &Arc<ResourceDef>> =
                defs.iter().map(|d| (d.gr(), d)).collect();
            for (gr, ns, name) in locs {
                if let (Some(def), Some(obj)) = (by_gr.get(gr), state.get_shared(gr, ns, name)) {
                    objects.push(((*def).clone(), obj.clone()));
                }
            }
            // Looked at again below; kept if they still wait.
            memory.waiting.retain(|l| !locs.contains(l));
        }
    }
    memory.retry.clear();
    let mut actions = Vec::new();
    // Dependents.
    for (def, obj) in &objects {
        if waits(def, obj) {
            memory.waiting.insert(loc_of(&def.gr(), obj));
        }
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
                .and_then(|u| owner(state, u));
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
        // The dependents that still name this owner (and block its deletion).
        let refs_to_me = |blocking_only: bool| {
            state.indexes().dependents_of(uid).any(|(gr, dns, dname)| {
                state.get(gr, dns, dname).is_some_and(|d| {
                    meta::owner_references_ref(d).iter().any(|r| {
                        r.get("uid").and_then(Value::as_str) == Some(uid)
                            && (!blocking_only
                                || r.get("blockOwnerDeletion").and_then(Value::as_bool)
                                    == Some(true))
                    })
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
            for d in defs.iter().filter(|d| d.namespaced) {
                for o in state.list(&d.gr(), Some(name.as_str())) {
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
            for d in defs.iter().filter(|d| d.gr() == gr) {
                for o in state.list(&gr, None) {
                    remaining = true;
                    if !meta::is_deleting(o) {
                        let ons = meta::namespace(o).unwrap_or_default().to_string();
                        let oname = meta::name(o).unwrap_or_default().to_string();
                        actions.push(Action::Delete(d.clone(), ons, oname, None));
                    }
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
    drop(objects);
    let before = state.rv;
    for a in actions {
        let loc = a.loc();
        if let Err(e) = execute(state, a) {
            tracing::debug!(error = %e.message, "garbage collector action failed");
            memory.retry.insert(loc);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(name: &str, uid: &str, owner: Option<&str>) -> Value {
        let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "uid": uid}});
        if let Some(owner) = owner {
            o["metadata"]["ownerReferences"] =
                json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner}]);
        }
        o
    }

    #[test]
    fn a_pass_looks_at_what_changed_and_collects_the_orphans_it_made() {
        let mut state = State::new(
            tokio::sync::watch::channel(0).0,
            Arc::new(tokio::sync::Notify::new()),
        );
        let gr = GroupResource::new("", "configmaps");
        state.put(&gr, cm("owner", "u-owner", None), EventType::Added);
        state.put(&gr, cm("dep", "u-dep", Some("u-owner")), EventType::Added);
        for i in 0..20 {
            let (name, uid) = (format!("other-{i}"), format!("u-{i}"));
            state.put(&gr, cm(&name, &uid, None), EventType::Added);
        }
        let mut memory = Memory::default();
        assert!(
            !pass(&mut state, &Scope::All, &mut memory),
            "nothing to collect"
        );
        memory.seen = Some(state.rv);

        // The owner goes: the pass looks at its dependent (and the namespace), nothing else.
        let owner = state.get(&gr, "default", "owner").cloned();
        state.remove(&gr, owner.unwrap_or_default());
        let Changes::Events(events) = Changes::since(&state, memory.seen) else {
            panic!("the history holds the change");
        };
        let looked_at = scope(&state, &events, &memory);
        let names: Vec<&str> = looked_at.iter().map(|(_, _, n)| n.as_str()).collect();
        assert_eq!(names, ["dep", "default"]);
        assert!(pass(&mut state, &Scope::Only(looked_at), &mut memory));
        assert!(
            state.get(&gr, "default", "dep").is_none(),
            "the orphan is collected"
        );
        assert!(state.get(&gr, "default", "other-3").is_some());
    }
}
