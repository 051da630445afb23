//! HTTP side of create (POST), replace (PUT, also `/status` and a Namespace's `/finalize`),
//! delete and deletecollection: request parsing, URL/body consistency, resourceVersion
//! preconditions; the semantics are in `crate::write`.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::openapi::{BodyKind, check_fields, with_warnings};
use super::{Request, Target, json_response, read};
use crate::meta;
use crate::status::{ApiError, ApiResult};
use crate::write::create::{check_namespace, check_type};
use crate::write::delete::DeleteOptions;
use crate::write::{self as w, Fields};

pub fn create(req: &Request, t: &Target) -> ApiResult<Response> {
    let dry = req.dry_run()?;
    if t.def.namespaced && t.namespace.is_none() {
        return Err(ApiError::method_not_allowed(
            "create requires a namespace in the URL",
        ));
    }
    let mut body = req.json_body()?;
    refuse_wrong_types(&t.def, &body)?;
    let warnings = check_fields(req, &t.def, &mut body, BodyKind::Object)?;
    let manager = req.manager();
    let mut state = req.server.lock();
    state.dry_run = dry;
    let obj = w::create::create(&mut state, &t.def, t.ns(), body, Fields::Record(&manager))?;
    Ok(with_warnings(
        json_response(StatusCode::CREATED, &obj),
        &warnings,
    ))
}

/// A create or update body whose metadata Go's JSON decoder could not read: `400`, worded as
/// upstream's decoder error.
pub fn refuse_wrong_types(def: &crate::registry::ResourceDef, body: &Value) -> ApiResult<()> {
    match crate::objmeta::wrong_type(body) {
        None => Ok(()),
        Some((field, got, want)) => {
            let key = field.split('.').next().unwrap_or_default();
            Err(ApiError::bad_request(format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: json: cannot unmarshal {got} into Go struct field ObjectMeta.metadata.{key} of type {want}",
                kind = def.kind,
                version = def.version,
            )))
        }
    }
}

/// Checks a full-object body against the URL and returns the stored object it replaces.
pub fn prepare_replace(
    state: &crate::store::State,
    t: &Target,
    body: &mut Value,
) -> ApiResult<Value> {
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    check_type(&t.def, body)?;
    match meta::name(body) {
        Some(n) if n != t.name() => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({})",
                t.name()
            )));
        }
        Some(_) => {}
        None => {
            meta::meta_mut(body).insert("name".into(), json!(t.name()));
        }
    }
    check_namespace(&t.def, t.ns(), body)?;
    let gr = t.def.gr();
    let old = state
        .get(&gr, t.ns(), t.name())
        .cloned()
        .ok_or_else(|| ApiError::not_found(&gr, t.name()))?;
    if let Some(rv) = meta::resource_version(body)
        && Some(rv) != meta::resource_version(&old)
    {
        return Err(ApiError::stale(&gr, t.name()));
    }
    Ok(old)
}

pub fn replace(req: &Request, t: &Target, sub: &str) -> ApiResult<Response> {
    let dry = req.dry_run()?;
    let mut body = req.json_body()?;
    refuse_wrong_types(&t.def, &body)?;
    let warnings = check_fields(req, &t.def, &mut body, BodyKind::Object)?;
    let manager = req.manager();
    let mut state = req.server.lock();
    state.dry_run = dry;
    let old = prepare_replace(&state, t, &mut body)?;
    let obj = w::commit(
        &mut state,
        &t.def,
        &old,
        body,
        sub,
        Fields::Record(&manager),
    )?;
    Ok(with_warnings(
        json_response(StatusCode::OK, &obj),
        &warnings,
    ))
}

fn delete_options(req: &Request) -> ApiResult<DeleteOptions> {
    let body = if req.body.is_empty() {
        None
    } else {
        Some(req.json_body()?)
    };
    let mut opts = DeleteOptions::parse(body.as_ref(), req.q("propagationPolicy"))?;
    if opts.propagation.is_none()
        && let Some(orphan) = req.q("orphanDependents")
    {
        opts.propagation = Some(
            if orphan == "true" {
                "Orphan"
            } else {
                "Background"
            }
            .into(),
        );
    }
    if opts.grace_period.is_none()
        && let Some(g) = req.q("gracePeriodSeconds")
    {
        opts.grace_period =
            Some(g.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid gracePeriodSeconds: {g:?}"))
            })?);
    }
    Ok(opts)
}

pub fn delete(req: &Request, t: &Target) -> ApiResult<Response> {
    let opts = delete_options(req)?;
    let dry = req.dry_run()? || opts.dry_run;
    let mut state = req.server.lock();
    state.dry_run = dry;
    let obj = w::delete::delete(&mut state, &t.def, t.ns(), t.name(), &opts)?;
    Ok(json_response(StatusCode::OK, &obj))
}

pub fn delete_collection(req: &Request, t: &Target) -> ApiResult<Response> {
    let opts = delete_options(req)?;
    let dry = req.dry_run()? || opts.dry_run;
    let sel = read::selectors(req, t)?;
    let mut state = req.server.lock();
    state.dry_run = dry;
    let targets: Vec<(String, String)> = state
        .list(&t.def.gr(), t.namespace.as_deref())
        .filter(|o| sel.matches(o))
        .map(|o| {
            (
                meta::namespace(o).unwrap_or_default().to_string(),
                meta::name(o).unwrap_or_default().to_string(),
            )
        })
        .collect();
    let mut items = Vec::new();
    for (ns, name) in targets {
        items.push(w::delete::delete(&mut state, &t.def, &ns, &name, &opts)?);
    }
    let rv = state.rv.to_string();
    Ok(json_response(
        StatusCode::OK,
        &json!({"kind": t.def.list_kind, "apiVersion": t.def.api_version(), "metadata": {"resourceVersion": rv}, "items": items}),
    ))
}
