//! PATCH: JSON merge patch, JSON patch, strategic merge patch (built-in kinds only; custom
//! resources answer 415 like the real server) and server-side apply (JSON or YAML bodies,
//! `fieldManager` required, `force`), on the main resource and on `/status`. Apply creates the
//! object when it does not exist.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::openapi::{
    BodyKind, check_apply_fields, check_patch_fields, go_value, strict_patch_error, with_warnings,
};
use super::{Request, Target, json_response};
use crate::meta;
use crate::openapi::fields::Directive;
use crate::patch::json::{JsonPatchError, json_patch};
use crate::patch::merge::merge_patch;
use crate::patch::strategic::strategic_patch;
use crate::patch::{PatchKind, apply};
use crate::registry::ResourceDef;
use crate::status::{ApiError, ApiResult};
use crate::write::create::{check_namespace, check_type};
use crate::write::{self as w, Fields, to_version};

const ACCEPTED: &str = "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml";

pub fn kind_of(req: &Request, def: &ResourceDef) -> ApiResult<PatchKind> {
    let ct = req.header("content-type").unwrap_or_default();
    match PatchKind::from_content_type(ct) {
        Some(PatchKind::Strategic) if def.is_custom() => {
            Err(ApiError::unsupported_media_type(ACCEPTED))
        }
        Some(k) => Ok(k),
        None if def.is_custom() => Err(ApiError::unsupported_media_type(ACCEPTED)),
        None => Err(ApiError::unsupported_media_type(format!(
            "{ACCEPTED}, application/strategic-merge-patch+json"
        ))),
    }
}

/// Applies a non-apply patch document to `current` (an object in the request version).
pub fn patched(
    def: &ResourceDef,
    kind: PatchKind,
    current: &Value,
    patch: &Value,
) -> ApiResult<Value> {
    match kind {
        PatchKind::Merge => {
            let mut out = current.clone();
            merge_patch(&mut out, patch);
            Ok(out)
        }
        PatchKind::Json => json_patch(current, patch).map_err(|e| match e {
            JsonPatchError::BadRequest(m) => ApiError::bad_request(m),
            JsonPatchError::Invalid(m) => ApiError::new(422, "Invalid", m),
        }),
        PatchKind::Strategic => strategic_patch(def, current, patch).map_err(ApiError::bad_request),
        PatchKind::Apply => Err(ApiError::unsupported_media_type(
            "apply patches are handled separately",
        )),
    }
}

fn parse_body(req: &Request, kind: PatchKind) -> ApiResult<Value> {
    if kind != PatchKind::Apply {
        return req.json_body();
    }
    if let Ok(v) = serde_json::from_slice::<Value>(&req.body) {
        return Ok(v);
    }
    let text = std::str::from_utf8(&req.body)
        .map_err(|_| ApiError::bad_request("apply body is neither JSON nor UTF-8 YAML"))?;
    serde_saphyr::from_str::<Value>(text)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

pub fn patch(req: &Request, t: &Target, sub: &str) -> ApiResult<Response> {
    let dry = req.dry_run()?;
    let kind = kind_of(req, &t.def)?;
    let mut body = parse_body(req, kind)?;
    if kind == PatchKind::Apply {
        return server_side_apply(req, t, sub, body);
    }
    // Under `Strict`, upstream refuses a patch once it has applied it (its message carries the
    // patched object), a strategic one with the patch itself.
    let checked = match kind {
        PatchKind::Merge | PatchKind::Strategic => {
            check_patch_fields(req, &t.def, &mut body, BodyKind::Patch)?
        }
        PatchKind::Json | PatchKind::Apply => Ok(Vec::new()),
    };
    let warnings = match checked {
        Ok(warnings) => warnings,
        Err(strict) if kind == PatchKind::Strategic => {
            return Err(strict_patch_error(go_value(&body), &strict));
        }
        Err(strict) => {
            let state = req.server.lock();
            let gr = t.def.gr();
            let old = state
                .get(&gr, t.ns(), t.name())
                .ok_or_else(|| ApiError::not_found(&gr, t.name()))?;
            let candidate = patched(&t.def, kind, &to_version(&t.def, old), &body)?;
            return Err(strict_patch_error(candidate.to_string(), &strict));
        }
    };
    let manager = req.manager();
    let gr = t.def.gr();
    let mut state = req.server.lock();
    state.dry_run = dry;
    let old = state
        .get(&gr, t.ns(), t.name())
        .cloned()
        .ok_or_else(|| ApiError::not_found(&gr, t.name()))?;
    let mut candidate = patched(&t.def, kind, &to_version(&t.def, &old), &body)?;
    // A JSON patch says nothing about fields by itself: its result is checked (upstream
    // checks the patched object for every patch type).
    let warnings = if kind == PatchKind::Json {
        check_patch_fields(req, &t.def, &mut candidate, BodyKind::Patched)?
            .map_err(|strict| strict_patch_error(candidate.to_string(), &strict))?
    } else {
        warnings
    };
    if let Some(rv) = meta::resource_version(&candidate)
        && Some(rv) != meta::resource_version(&old)
    {
        return Err(ApiError::stale(&gr, t.name()));
    }
    if meta::name(&candidate) != Some(t.name()) {
        return Err(ApiError::bad_request(
            "the name of the object cannot be changed by a patch",
        ));
    }
    let obj = w::commit(
        &mut state,
        &t.def,
        &old,
        candidate,
        sub,
        Fields::Record(&manager),
    )?;
    Ok(with_warnings(
        json_response(StatusCode::OK, &obj),
        &warnings,
    ))
}

fn server_side_apply(req: &Request, t: &Target, sub: &str, mut body: Value) -> ApiResult<Response> {
    let dry = req.dry_run()?;
    let manager = req.q("fieldManager").filter(|m| !m.is_empty()).ok_or_else(|| {
        ApiError::new(422, "Invalid", "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch")
    })?;
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the apply configuration must be an object",
        ));
    }
    for field in ["apiVersion", "kind"] {
        if body
            .get(field)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(ApiError::bad_request(format!(
                "Object '{}' is missing in the apply configuration",
                if field == "kind" {
                    "Kind"
                } else {
                    "apiVersion"
                }
            )));
        }
    }
    if let Some((field, _, _)) = crate::objmeta::wrong_type(&body) {
        let value = match body["metadata"].pointer(&format!("/{}", field.replace('.', "/"))) {
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => String::new(),
        };
        return Err(ApiError::internal(format!(
            "failed to create typed patch object ({}, Kind={}): .metadata.{field}: expected string, got &value.valueUnstructured{{Value:{value}}}",
            t.def.api_version(),
            t.def.kind
        )));
    }
    check_type(&t.def, &body)?;
    match meta::name(&body) {
        Some(n) if n == t.name() => {}
        Some(n) => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({})",
                t.name()
            )));
        }
        None => {
            meta::meta_mut(&mut body).insert("name".into(), json!(t.name()));
        }
    }
    let own_namespace = meta::namespace(&body).unwrap_or_default().to_string();
    check_namespace(&t.def, t.ns(), &mut body)?;
    if meta::meta(&body).is_some_and(|m| m.get("managedFields").is_some_and(|v| !v.is_null())) {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    Directive::parse(req.q("fieldValidation"), "PatchOptions")?;
    check_apply_fields(&t.def, &own_namespace, t.name(), &body)?;
    let force = req.flag("force");
    let gr = t.def.gr();
    let mut state = req.server.lock();
    state.dry_run = dry;
    let Some(old) = state.get(&gr, t.ns(), t.name()).cloned() else {
        if !sub.is_empty() {
            return Err(ApiError::not_found(&gr, t.name()));
        }
        let mut skeleton = json!({"apiVersion": t.def.api_version(), "kind": t.def.kind, "metadata": {"name": t.name()}});
        if t.def.namespaced {
            skeleton["metadata"]["namespace"] = json!(t.ns());
        }
        let mut merged = apply::apply(&t.def, &skeleton, &body, manager, force, "")
            .map_err(|c| conflict(t, &c))?;
        meta::meta_mut(&mut merged).remove("resourceVersion");
        let obj = w::create::create(&mut state, &t.def, t.ns(), merged, Fields::Keep)?;
        return Ok(json_response(StatusCode::CREATED, &obj));
    };
    if let Some(rv) = meta::resource_version(&body)
        && Some(rv) != meta::resource_version(&old)
    {
        return Err(ApiError::stale(&gr, t.name()));
    }
    let live = to_version(&t.def, &old);
    let merged =
        apply::apply(&t.def, &live, &body, manager, force, sub).map_err(|c| conflict(t, &c))?;
    let obj = w::commit(&mut state, &t.def, &old, merged, sub, Fields::Keep)?;
    Ok(json_response(StatusCode::OK, &obj))
}

fn conflict(t: &Target, conflicts: &[apply::Conflict]) -> ApiError {
    let (message, causes) = apply::conflict_message(conflicts);
    let mut details = json!({"name": t.name(), "kind": t.def.plural, "causes": causes});
    if !t.def.group.is_empty() {
        details["group"] = json!(t.def.group);
    }
    ApiError::new(409, "Conflict", message).with_details(details)
}
