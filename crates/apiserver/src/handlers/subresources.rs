//! Subresources other than status: `scale` (autoscaling/v1 Scale mapped through the kind's
//! replica and selector paths; GET, PUT, and merge/JSON/strategic PATCH — apply is refused with
//! 415), and the Pod subresource `binding` (sets `spec.nodeName` and `PodScheduled`);
//! `eviction` is in `eviction`; `portforward` answers 501. `log`, `exec` and `attach` are in `proxy`.

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::patch::{kind_of, patched};
use super::{Request, Target, json_response};
use crate::meta;
use crate::patch::PatchKind;
use crate::registry::{ResourceDef, ScaleDef};
use crate::status::{ApiError, ApiResult};
use crate::write::{self as w, Fields};

fn scale_of(def: &ResourceDef, sc: &ScaleDef, obj: &Value) -> Value {
    let md = meta::meta(obj).cloned().unwrap_or_default();
    let mut meta_out = serde_json::Map::new();
    for k in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = md.get(k) {
            meta_out.insert(k.into(), v.clone());
        }
    }
    let spec = meta::get_path(obj, &sc.spec_replicas_path)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let status = meta::get_path(obj, &sc.status_replicas_path)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let mut st = json!({"replicas": status});
    if let Some(sel) = sc
        .label_selector_path
        .as_deref()
        .and_then(|p| meta::get_path(obj, p))
        .and_then(Value::as_str)
    {
        st["selector"] = json!(sel);
    }
    let _ = def;
    json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": meta_out, "spec": {"replicas": spec}, "status": st})
}

pub fn scale(req: &Request, t: &Target) -> ApiResult<Response> {
    let Some(sc) = t.def.scale.clone() else {
        return Err(ApiError::no_route());
    };
    let gr = t.def.gr();
    let mut state = req.server.lock();
    let old = state
        .get(&gr, t.ns(), t.name())
        .cloned()
        .ok_or_else(|| ApiError::not_found(&gr, t.name()))?;
    let current = scale_of(&t.def, &sc, &old);
    let wanted = match req.method {
        Method::GET => return Ok(json_response(StatusCode::OK, &current)),
        Method::PUT => req.json_body()?,
        Method::PATCH => {
            req.reject_dry_run()?;
            let kind = kind_of(req, &t.def).or_else(|e| {
                if req
                    .header("content-type")
                    .is_some_and(|c| c.starts_with("application/strategic-merge-patch"))
                {
                    Ok(PatchKind::Merge)
                } else {
                    Err(e)
                }
            })?;
            if kind == PatchKind::Apply {
                return Err(ApiError::unsupported_media_type(
                    "server-side apply on the scale subresource is not supported by this server",
                ));
            }
            let kind = if kind == PatchKind::Strategic {
                PatchKind::Merge
            } else {
                kind
            };
            patched(&t.def, kind, &current, &req.json_body()?)?
        }
        _ => {
            return Err(ApiError::method_not_allowed(
                "scale supports get, update and patch",
            ));
        }
    };
    req.reject_dry_run()?;
    if let Some(rv) = meta::resource_version(&wanted)
        && Some(rv) != meta::resource_version(&old)
    {
        return Err(ApiError::stale(&gr, t.name()));
    }
    let replicas = meta::get_path(&wanted, "spec.replicas")
        .cloned()
        .unwrap_or(json!(0));
    if !replicas.is_i64() || replicas.as_i64().is_some_and(|r| r < 0) {
        return Err(ApiError::new(
            422,
            "Invalid",
            format!(
                "Scale.autoscaling \"{}\" is invalid: spec.replicas: Invalid value: {replicas}: must be greater than or equal to 0",
                t.name()
            ),
        ));
    }
    let mut new = w::to_version(&t.def, &old);
    meta::set_path(&mut new, &sc.spec_replicas_path, replicas);
    let manager = req.manager();
    w::commit(&mut state, &t.def, &old, new, "", Fields::Record(&manager))?;
    let stored = state.get(&gr, t.ns(), t.name()).cloned().unwrap_or(old);
    Ok(json_response(
        StatusCode::OK,
        &scale_of(&t.def, &sc, &stored),
    ))
}

pub fn pod(req: &Request, t: &Target, sub: &str) -> ApiResult<Response> {
    match (sub, &req.method) {
        ("binding", &Method::POST) => binding(req, t),
        ("eviction", &Method::POST) => super::eviction::evict(req, t),
        ("portforward", _) => Err(ApiError::not_implemented(format!(
            "pods/{sub} is not implemented by the Steward local control plane"
        ))),
        _ => Err(ApiError::no_route()),
    }
}

fn binding(req: &Request, t: &Target) -> ApiResult<Response> {
    req.reject_dry_run()?;
    let body = req.json_body()?;
    let node = meta::get_path(&body, "target.name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if node.is_empty() {
        return Err(ApiError::new(
            422,
            "Invalid",
            "Binding \"\" is invalid: target.name: Required value",
        ));
    }
    let gr = t.def.gr();
    let manager = req.manager();
    let mut state = req.server.lock();
    let old = state
        .get(&gr, t.ns(), t.name())
        .cloned()
        .ok_or_else(|| ApiError::not_found(&gr, t.name()))?;
    if let Some(current) = meta::get_path(&old, "spec.nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        return Err(ApiError::conflict(
            &gr,
            t.name(),
            &format!("pod {} is already assigned to node \"{current}\"", t.name()),
        ));
    }
    let mut new = old.clone();
    meta::set_path(&mut new, "spec.nodeName", json!(node));
    let spec_done = w::commit(&mut state, &t.def, &old, new, "", Fields::Record(&manager))?;
    let stored = state
        .get(&gr, t.ns(), t.name())
        .cloned()
        .unwrap_or(spec_done);
    let mut with_status = stored.clone();
    let mut conditions: Vec<Value> = meta::get_path(&stored, "status.conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c.get("type").and_then(Value::as_str) != Some("PodScheduled"));
    conditions.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": meta::now()}));
    meta::set_path(
        &mut with_status,
        "status.conditions",
        Value::Array(conditions),
    );
    w::commit(
        &mut state,
        &t.def,
        &stored,
        with_status,
        "status",
        Fields::Record(&manager),
    )?;
    Ok(json_response(
        StatusCode::CREATED,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}
