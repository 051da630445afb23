//! The Job controller (batch/v1, NonIndexed Jobs): runs `plan` for every Job over the Pods it
//! controls and applies the result through the normal write path (finalizer removals, graceful
//! Pod deletions, Pod creations, then one status write). It also removes the tracking finalizer
//! from Pods whose Job is gone or that no Job controls any more (orphaned). Pods run only if a node agent runs them; without one they stay
//! `Pending` and the Job stays active. Indexed Jobs are left alone.

pub mod plan;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use serde_json::Value;

use self::plan::{Backoff, TRACKING_FINALIZER, plan, pod_for};
use super::Changes;
use crate::meta;
use crate::registry::{GroupResource, ResourceDef};
use crate::status::ApiResult;
use crate::store::{EventType, State};
use crate::write::create::create;
use crate::write::delete::{DeleteOptions, delete};
use crate::write::{Fields, commit};

const MANAGER: &str = "job-controller";

/// What the controller remembers between passes: failure back-off per Job uid, and the
/// orphaned Pods whose release failed (tried again on the next pass).
#[derive(Default)]
pub struct Memory {
    backoff: HashMap<String, Backoff>,
    retry: BTreeSet<(String, String)>,
}

/// The uid of a Pod's controlling Job, if any.
fn controller_job(pod: &Value) -> Option<&str> {
    // Borrowed: a pass looks at every Pod.
    meta::owner_references_ref(pod)
        .iter()
        .find(|r| r["controller"] == true && r["kind"] == "Job" && r["apiVersion"] == "batch/v1")
        .and_then(|r| r["uid"].as_str())
}

/// Whether the Pod carries the Job controller's tracking finalizer (without copying the list).
fn tracked(pod: &Value) -> bool {
    meta::get_path(pod, "metadata.finalizers")
        .and_then(Value::as_array)
        .is_some_and(|fs| fs.iter().any(|f| f == TRACKING_FINALIZER))
}

fn release(state: &mut State, def: &ResourceDef, ns: &str, name: &str) -> ApiResult<()> {
    let Some(old) = state.get(&def.gr(), ns, name).cloned() else {
        return Ok(());
    };
    let mut new = old.clone();
    let kept: Vec<String> = meta::finalizers(&old)
        .into_iter()
        .filter(|f| f != TRACKING_FINALIZER)
        .collect();
    meta::set_finalizers(&mut new, &kept);
    commit(state, def, &old, new, "", Fields::Record(MANAGER)).map(|_| ())
}

/// The tracked Pods that may have lost their Job: every Pod on a full pass; else the Pods
/// that changed, the dependents of the Jobs deleted (the store's owner index), and those whose
/// release failed. A pass costs what changed, not the Pods stored.
fn orphan_candidates(state: &State, changes: &Changes, memory: &Memory) -> Vec<(String, String)> {
    let (jobs_gr, pods_gr) = (
        GroupResource::new("batch", "jobs"),
        GroupResource::new("", "pods"),
    );
    let key = State::key_of;
    let Changes::Events(events) = changes else {
        return state
            .list(&pods_gr, None)
            .filter(|p| tracked(p))
            .map(key)
            .collect();
    };
    let mut out = memory.retry.clone();
    out.extend(changes.objects(&pods_gr).map(key));
    for e in events
        .iter()
        .filter(|e| e.gr == jobs_gr && e.etype == EventType::Deleted)
    {
        let uid = meta::uid(&e.object).unwrap_or_default();
        out.extend(
            state
                .indexes()
                .dependents_of(uid)
                .filter(|(gr, _, _)| *gr == pods_gr)
                .map(|(_, ns, name)| (ns.clone(), name.clone())),
        );
    }
    out.into_iter().collect()
}

/// One pass over all Jobs, each with the Pods it controls (from the store's owner index), and
/// over the tracked Pods that may have lost their Job; returns when the next time-based action
/// is due.
pub fn reconcile(
    state: &mut State,
    changes: &Changes,
    now: jiff::Timestamp,
    memory: &mut Memory,
) -> Option<Duration> {
    let jobs_gr = GroupResource::new("batch", "jobs");
    let pods_gr = GroupResource::new("", "pods");
    let (Some(job_def), Some(pod_def)) = (
        state.registry.storage_def(&jobs_gr),
        state.registry.storage_def(&pods_gr),
    ) else {
        return None;
    };
    let jobs: Vec<Value> = state.list(&jobs_gr, None).cloned().collect();
    let uids: HashSet<&str> = jobs.iter().filter_map(meta::uid).collect();
    let mut owned: HashMap<String, Vec<Value>> = HashMap::new();
    for uid in &uids {
        let pods = state
            .indexes()
            .dependents_of(uid)
            .filter(|(gr, _, _)| *gr == pods_gr)
            .filter_map(|(gr, ns, name)| state.get(gr, ns, name))
            .filter(|p| controller_job(p) == Some(uid))
            .cloned()
            .collect();
        owned.insert((*uid).to_owned(), pods);
    }
    let orphans: Vec<(String, String)> = orphan_candidates(state, changes, memory)
        .into_iter()
        .filter(|(ns, name)| {
            state
                .get(&pods_gr, ns, name)
                .is_some_and(|p| tracked(p) && !controller_job(p).is_some_and(|u| uids.contains(u)))
        })
        .collect();
    let mut errors = Vec::new();
    memory.retry.clear();
    for (ns, name) in orphans {
        if let Err(e) = release(state, &pod_def, &ns, &name) {
            errors.push(e);
            memory.retry.insert((ns, name));
        }
    }
    memory.backoff.retain(|uid, _| uids.contains(uid.as_str()));
    let mut requeue: Option<Duration> = None;
    for job in &jobs {
        if meta::get_path(job, "spec.completionMode").and_then(Value::as_str) == Some("Indexed") {
            continue;
        }
        let uid = meta::uid(job).unwrap_or_default().to_string();
        let ns = meta::namespace(job).unwrap_or_default().to_string();
        let pods = owned.remove(&uid).unwrap_or_default();
        let backoff = memory.backoff.entry(uid).or_default();
        let p = plan(job, &pods, now, *backoff);
        if p.new_succeeded > 0 {
            *backoff = Backoff::default();
        }
        if p.new_failed > 0 {
            backoff.failures += u32::try_from(p.new_failed).unwrap_or(u32::MAX);
            backoff.last_failure = Some(now);
        }
        for name in &p.release {
            errors.extend(release(state, &pod_def, &ns, name).err());
        }
        for name in &p.delete {
            errors.extend(delete(state, &pod_def, &ns, name, &DeleteOptions::default()).err());
        }
        for _ in 0..p.create {
            let pod = pod_for(job);
            errors.extend(create(state, &pod_def, &ns, pod, Fields::Record(MANAGER)).err());
        }
        let name = meta::name(job).unwrap_or_default();
        if let Some(current) = state.get(&jobs_gr, &ns, name).cloned() {
            let mut new = current.clone();
            new["status"] = p.status;
            errors.extend(
                commit(
                    state,
                    &job_def,
                    &current,
                    new,
                    "status",
                    Fields::Record(MANAGER),
                )
                .err(),
            );
        }
        if let Some(r) = p.requeue {
            requeue = Some(requeue.map_or(r, |q| q.min(r)));
        }
    }
    for e in errors {
        tracing::debug!(error = %e.message, "job controller write failed");
    }
    requeue
}
