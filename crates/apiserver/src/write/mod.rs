//! The write path shared by every endpoint (PUT, PATCH, apply, status, GC): admission
//! (defaults, CRD handling, schema validation, metadata validation, CEL rules), system-metadata
//! preservation, the status-subresource split, generation bumps, managedFields for `Update`
//! operations, the no-op rule, and deletion once the last finalizer is gone. Transport concerns
//! (parsing requests, preconditions from URLs) live in `handlers`.

pub mod create;
pub mod delete;
pub mod grace;

use serde_json::{Value, json};

use crate::cel;
use crate::crd;
use crate::defaults;
use crate::ipam::Allocator;
use crate::managed_fields;
use crate::meta;
use crate::objmeta;
use crate::registry::ResourceDef;
use crate::status::{ApiError, ApiResult, Cause};
use crate::store::{EventType, State};
use crate::validation;

/// How a write treats `metadata.managedFields`.
#[derive(Clone, Copy, Debug)]
pub enum Fields<'a> {
    /// Record an `Update` operation by this manager.
    Record(&'a str),
    /// The caller computed managedFields already (server-side apply).
    Keep,
}

pub fn is_crd(def: &ResourceDef) -> bool {
    def.group == "apiextensions.k8s.io" && def.plural == "customresourcedefinitions"
}

/// Sets apiVersion/kind of the storage version.
pub fn to_storage(def: &ResourceDef, obj: &mut Value) {
    if crate::convert::is_events_v1(def) {
        crate::convert::event_to_core(obj);
        return;
    }
    if let Value::Object(m) = obj {
        m.insert("apiVersion".into(), json!(def.storage_api_version()));
        m.insert("kind".into(), json!(def.kind));
    }
}

/// A stored object as seen through the requested version.
pub fn to_version(def: &ResourceDef, obj: &Value) -> Value {
    let mut v = obj.clone();
    if crate::convert::is_events_v1(def) {
        crate::convert::event_from_core(&mut v);
        return v;
    }
    if let Value::Object(m) = &mut v {
        m.insert("apiVersion".into(), json!(def.api_version()));
        m.insert("kind".into(), json!(def.kind));
    }
    v
}

/// Defaults and validation for a complete object about to be stored.
pub fn admit(
    state: &mut State,
    def: &ResourceDef,
    old: Option<&Value>,
    obj: &mut Value,
) -> Vec<Cause> {
    let mut next_ip = state.next_cluster_ip;
    let mut ips = Allocator {
        cidr: state.service_cidr,
        next: &mut next_ip,
        in_use: if def.group.is_empty() && def.kind == "Service" {
            state.cluster_ips_in_use()
        } else {
            Default::default()
        },
    };
    let mut causes = match old {
        None => defaults::on_create(def, obj, &mut ips),
        Some(o) => defaults::on_update(def, o, obj, &mut ips),
    };
    if causes.is_empty() && !state.dry_run {
        state.next_cluster_ip = next_ip;
    }
    if is_crd(def) {
        if let Err(c) = crd::defs(obj) {
            causes.extend(c);
        }
        if old.is_none() {
            let mut f = meta::finalizers(obj);
            if !f.iter().any(|x| x == crd::CLEANUP_FINALIZER) {
                f.push(crd::CLEANUP_FINALIZER.into());
                meta::set_finalizers(obj, &f);
            }
        }
        crd::set_status(obj);
    }
    if let Some(schema) = def.schema.as_deref() {
        causes.extend(validation::process(schema, obj));
    }
    causes.extend(objmeta::validate(def.name_rule, obj));
    if let Some(rules) = def.validations.as_deref() {
        let more = cel::validate(rules, obj, old, &causes);
        causes.extend(more);
    }
    causes
}

/// Keeps the registry in line with stored CRDs.
pub fn after_write(state: &mut State, def: &ResourceDef, stored: Option<&Value>, name: &str) {
    if !is_crd(def) || state.dry_run {
        return;
    }
    state.registry.remove_crd(name);
    if let Some(obj) = stored
        && let Ok(defs) = crd::defs(obj)
    {
        for d in defs {
            state.registry.insert(d);
        }
    }
}

fn without_volatile(obj: &Value) -> Value {
    let mut v = obj.clone();
    let m = meta::meta_mut(&mut v);
    m.remove("resourceVersion");
    if let Some(Value::Array(list)) = m.get_mut("managedFields") {
        for e in list {
            if let Value::Object(e) = e {
                e.remove("time");
            }
        }
    }
    v
}

/// The part of an object whose change bumps `metadata.generation`.
fn generation_view(def: &ResourceDef, obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Value::Object(m) = &mut v {
        m.remove("metadata");
        if def.status_subresource {
            m.remove("status");
        }
    }
    v
}

fn blocks_deletion(def: &ResourceDef, obj: &Value) -> bool {
    !meta::finalizers(obj).is_empty()
        || (def.group.is_empty()
            && def.kind == "Namespace"
            && meta::get_path(obj, "spec.finalizers")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty()))
}

/// Stores `candidate` as the new version of `old` through endpoint `sub` (`""`, `status`,
/// `finalize`). Preconditions on resourceVersion are the caller's job.
pub fn commit(
    state: &mut State,
    def: &ResourceDef,
    old: &Value,
    candidate: Value,
    sub: &str,
    fields: Fields<'_>,
) -> ApiResult<Value> {
    let gr = def.gr();
    let name = meta::name(old).unwrap_or_default().to_string();
    if !candidate.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    let mut new = candidate;
    {
        let om = meta::meta(old).cloned().unwrap_or_default();
        let nm = meta::meta_mut(&mut new);
        for k in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match om.get(k) {
                Some(v) => nm.insert(k.into(), v.clone()),
                None => nm.remove(k),
            };
        }
    }
    to_storage(def, &mut new);
    if sub == "status" || sub == "finalize" {
        // Only status (or a Namespace's spec.finalizers) changes; managedFields come along.
        let mut base = old.clone();
        let (path, value) = if sub == "status" {
            ("status", new.get("status").cloned())
        } else {
            (
                "spec.finalizers",
                meta::get_path(&new, "spec.finalizers").cloned(),
            )
        };
        match value {
            Some(v) => meta::set_path(&mut base, path, v),
            None => {
                if let Some(m) = base.as_object_mut() {
                    m.remove(path);
                }
            }
        }
        match meta::meta(&new)
            .and_then(|m| m.get("managedFields"))
            .cloned()
        {
            Some(mf) => meta::meta_mut(&mut base).insert("managedFields".into(), mf),
            None => meta::meta_mut(&mut base).remove("managedFields"),
        };
        new = base;
    } else if def.status_subresource {
        match old.get("status") {
            Some(s) => new["status"] = s.clone(),
            None => {
                if let Some(m) = new.as_object_mut() {
                    m.remove("status");
                }
            }
        }
    }
    if meta::is_deleting(old) {
        let before = meta::finalizers(old);
        if meta::finalizers(&new).iter().any(|f| !before.contains(f)) {
            return Err(ApiError::invalid(
                def,
                &name,
                vec![Cause::forbidden(
                    "metadata.finalizers",
                    "no new finalizers can be added if the object is being deleted",
                )],
            ));
        }
    }
    if sub.is_empty() {
        crate::auth::escalation::check(state, def, Some(old), &new)?;
        let causes = admit(state, def, Some(old), &mut new);
        if !causes.is_empty() {
            return Err(ApiError::invalid(def, &name, causes));
        }
    } else if sub == "status"
        && let Some(rules) = def.validations.as_deref()
    {
        // Upstream runs every rule of the object on status writes too; the spec is the stored
        // one, so spec rules pass (transition rules see no change, others are ratcheted).
        let causes = cel::validate(rules, &new, Some(old), &[]);
        if !causes.is_empty() {
            return Err(ApiError::invalid(def, &name, causes));
        }
    }
    if def.generation {
        let g = meta::generation(old).max(1);
        let g = if generation_view(def, old) != generation_view(def, &new) {
            g + 1
        } else {
            g
        };
        meta::meta_mut(&mut new).insert("generation".into(), json!(g));
    }
    if let Fields::Record(manager) = fields {
        managed_fields::record_update(def, old, &mut new, manager, sub);
    }
    if without_volatile(old) == without_volatile(&new) {
        return Ok(to_version(def, old));
    }
    if meta::is_deleting(&new) && !blocks_deletion(def, &new) && grace::seconds(&new) == 0 {
        let last = state.remove(&gr, new);
        after_write(state, def, None, &name);
        return Ok(to_version(def, &last));
    }
    let stored = state.put(&gr, new, EventType::Modified);
    after_write(state, def, Some(&stored), &name);
    if meta::is_deleting(&stored) {
        state.kick_gc();
    }
    Ok(to_version(def, &stored))
}
