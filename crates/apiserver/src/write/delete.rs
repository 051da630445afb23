//! Delete: preconditions, propagation policy (Background/Foreground/Orphan via the
//! `foregroundDeletion`/`orphan` finalizers, handled by `gc`), deletionTimestamp while
//! finalizers remain, immediate removal otherwise. Pods are deleted gracefully (see `grace`):
//! a Pod on a node stays, marked, until the node agent deletes it with grace 0. The default
//! namespaces cannot be deleted.

use serde_json::{Value, json};

use super::grace::{self, Grace};
use super::{after_write, blocks_deletion, to_version};
use crate::meta;
use crate::registry::{GroupResource, ResourceDef};
use crate::status::{ApiError, ApiResult};
use crate::store::{EventType, State};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeleteOptions {
    pub propagation: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// `dryRun: ["All"]` in the body.
    pub dry_run: bool,
    /// `gracePeriodSeconds` (only Pods support graceful deletion).
    pub grace_period: Option<i64>,
}

impl DeleteOptions {
    /// From a `DeleteOptions` body and/or query parameters.
    pub fn parse(body: Option<&Value>, query_policy: Option<&str>) -> ApiResult<Self> {
        let b = body.cloned().unwrap_or(Value::Null);
        let mut propagation = b
            .get("propagationPolicy")
            .and_then(Value::as_str)
            .map(String::from);
        if propagation.is_none() {
            propagation = query_policy.map(String::from);
        }
        if propagation.is_none()
            && let Some(orphan) = b.get("orphanDependents").and_then(Value::as_bool)
        {
            propagation = Some(if orphan { "Orphan" } else { "Background" }.into());
        }
        if let Some(p) = &propagation
            && !matches!(p.as_str(), "Background" | "Foreground" | "Orphan")
        {
            return Err(ApiError::new(
                422,
                "Invalid",
                format!(
                    "Unsupported value: \"{p}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
                ),
            ));
        }
        let pre = b.get("preconditions");
        Ok(Self {
            propagation,
            uid: pre
                .and_then(|p| p.get("uid"))
                .and_then(Value::as_str)
                .map(String::from),
            resource_version: pre
                .and_then(|p| p.get("resourceVersion"))
                .and_then(Value::as_str)
                .map(String::from),
            dry_run: b
                .get("dryRun")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|x| x == "All")),
            grace_period: b.get("gracePeriodSeconds").and_then(Value::as_i64),
        })
    }
}

pub fn delete(
    state: &mut State,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    opts: &DeleteOptions,
) -> ApiResult<Value> {
    let gr = def.gr();
    let ns = if def.namespaced { ns } else { "" };
    let old = state
        .get(&gr, ns, name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(&gr, name))?;
    if def.group.is_empty()
        && def.kind == "Namespace"
        && matches!(name, "default" | "kube-system" | "kube-public")
    {
        return Err(ApiError::forbidden(format!(
            "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
        )));
    }
    if let Some(uid) = &opts.uid
        && Some(uid.as_str()) != meta::uid(&old)
    {
        return Err(ApiError::conflict(
            &gr,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta::uid(&old).unwrap_or_default()
            ),
        ));
    }
    if let Some(rv) = &opts.resource_version
        && Some(rv.as_str()) != meta::resource_version(&old)
    {
        return Err(ApiError::conflict(
            &gr,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta::resource_version(&old).unwrap_or_default()
            ),
        ));
    }
    let mut new = old.clone();
    let graceful = is_pod(def);
    let mut grace_seconds = 0;
    if graceful {
        let node_exists = pod_node_exists(state, &old);
        let period = grace::pod_grace_period(&old, opts.grace_period, node_exists);
        match grace::decide(&old, opts.grace_period, period, jiff::Timestamp::now()) {
            Grace::Pending => {
                // Finalizers cannot change through DeleteOptions while a deletion is pending.
                state.kick_gc();
                return Ok(to_version(def, &old));
            }
            Grace::Set { timestamp, seconds } => {
                grace::mark(&mut new, &timestamp, seconds);
                grace_seconds = seconds;
            }
            Grace::Now => {}
        }
    }
    let mut finalizers = meta::finalizers(&new);
    // batch/v1 Jobs orphan their Pods unless a policy is given (kept for compatibility by the
    // real server; kubectl always sends Background).
    let default_policy = (def.group == "batch" && def.kind == "Job").then_some("Orphan");
    let policy_finalizer = match opts.propagation.as_deref().or(default_policy) {
        Some("Foreground") => Some("foregroundDeletion"),
        Some("Orphan") => Some("orphan"),
        _ => None,
    };
    if let Some(f) = policy_finalizer
        && !finalizers.iter().any(|x| x == f)
    {
        finalizers.retain(|x| x != "foregroundDeletion" && x != "orphan");
        finalizers.push(f.into());
    }
    meta::set_finalizers(&mut new, &finalizers);
    if !blocks_deletion(def, &new) && grace_seconds == 0 {
        // A graceful delete with grace 0 is written first, then removed (two events, as the
        // real registry emits).
        let last = if graceful && new != old {
            state.put(&gr, new, EventType::Modified)
        } else {
            new
        };
        let last = state.remove(&gr, last);
        after_write(state, def, None, name);
        return Ok(to_version(def, &last));
    }
    if !meta::is_deleting(&new) {
        let m = meta::meta_mut(&mut new);
        m.insert("deletionTimestamp".into(), json!(meta::now()));
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
        if def.generation {
            let g = meta::generation(&old) + 1;
            m.insert("generation".into(), json!(g));
        }
        if def.group.is_empty() && def.kind == "Namespace" {
            new["status"]["phase"] = json!("Terminating");
        }
        if super::is_crd(def) {
            crate::crd::set_status(&mut new);
        }
    }
    if new == old {
        state.kick_gc();
        return Ok(to_version(def, &old));
    }
    let stored = state.put(&gr, new, EventType::Modified);
    after_write(state, def, Some(&stored), name);
    state.kick_gc();
    Ok(to_version(def, &stored))
}

pub fn is_pod(def: &ResourceDef) -> bool {
    def.group.is_empty() && def.kind == "Pod"
}

/// Whether the Node a Pod is bound to exists (true for unbound Pods).
pub fn pod_node_exists(state: &State, pod: &Value) -> bool {
    match meta::get_path(pod, "spec.nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        Some(node) => state
            .get(&GroupResource::new("", "nodes"), "", node)
            .is_some(),
        None => true,
    }
}
