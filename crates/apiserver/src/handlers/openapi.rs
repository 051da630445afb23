//! HTTP side of the OpenAPI documents, as kube-openapi's handlers serve them: `/openapi/v3`
//! (the index, JSON), `/openapi/v3/{gv}` (JSON; `ETag`, `If-None-Match` → 304, a `hash` that
//! matches → immutable caching headers, a stale `hash` → 301 to the current one) and
//! `/openapi/v2` (JSON; `ETag`, 304). Protobuf is not produced: a request that accepts only
//! protobuf gets 406, and kubectl falls back to what it can use. Also the field-validation
//! glue of the write handlers (`check_fields`, `with_warnings`).

use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Request, json_response};
use crate::openapi::fields::{self, Directive, Schema};
use crate::openapi::{self, Serialized};
use crate::registry::ResourceDef;
use crate::status::{ApiError, ApiResult, Cause};

/// The formats the OpenAPI handlers produce.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    /// gnostic's `openapi_v2.Document` (v2 only).
    ProtoV2,
}

const PROTO_V2: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// What upstream answers protobuf in (the `@` form is not a valid media type for Go's parser).
const PROTO_V2_RETURNED: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// Content negotiation as kube-openapi's: the Accept clauses by preference (`q`, then order),
/// the first one a produced format matches wins (`*/*` and `application/*` are JSON).
fn negotiate(req: &Request, offered: &[Format]) -> Option<Format> {
    let accept = req.header("accept").unwrap_or("*/*");
    let mut clauses: Vec<(f32, &str)> = accept
        .split(',')
        .map(|part| {
            let mut it = part.split(';');
            let media = it.next().unwrap_or_default().trim();
            let q = it
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            (q, if media.is_empty() { "*/*" } else { media })
        })
        .filter(|(q, _)| *q > 0.0)
        .collect();
    clauses.sort_by(|a, b| b.0.total_cmp(&a.0));
    clauses.into_iter().find_map(|(_, media)| {
        offered.iter().copied().find(|f| {
            matches!(
                (f, media),
                (Format::Json, "*/*" | "application/*" | "application/json")
                    | (Format::ProtoV2, PROTO_V2 | PROTO_V2_RETURNED)
            )
        })
    })
}

fn not_acceptable() -> Response {
    (
        StatusCode::NOT_ACCEPTABLE,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "406 - Not Acceptable\n",
    )
        .into_response()
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "404 page not found\n",
    )
        .into_response()
}

fn etag_matches(req: &Request, etag: &str) -> bool {
    req.header("if-none-match").is_some_and(|v| {
        v.split(',')
            .any(|t| t.trim().trim_start_matches("W/") == etag || t.trim() == "*")
    })
}

fn serve(req: &Request, doc: &Serialized, content_type: &'static str, immutable: bool) -> Response {
    let etag = format!("\"{}\"", doc.hash);
    let mut resp = if etag_matches(req, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, content_type)],
            doc.body.clone(),
        )
            .into_response()
    };
    let headers = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, v);
    }
    headers.insert(header::VARY, HeaderValue::from_static("Accept"));
    if immutable {
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, immutable"),
        );
        let expires = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_hours(24 * 365))
            .unwrap_or_else(|_| jiff::Timestamp::now());
        let text =
            jiff::fmt::strtime::format("%a, %d %b %Y %H:%M:%S GMT", expires).unwrap_or_default();
        if let Ok(v) = HeaderValue::from_str(&text) {
            headers.insert(header::EXPIRES, v);
        }
    } else {
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache, private"),
        );
    }
    resp
}

/// `/openapi/v3`: every group-version with the URL of its current document.
pub fn v3_index(req: &Request) -> Response {
    let gvs = openapi::group_versions(&req.server.lock().registry);
    let paths: serde_json::Map<String, Value> = gvs
        .iter()
        .map(|(key, gv)| {
            let doc = openapi::v3_serialized(gv);
            (
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={}", doc.hash)}),
            )
        })
        .collect();
    json_response(StatusCode::OK, &json!({"paths": paths}))
}

/// `/openapi/v3/{key}`.
pub fn v3_group_version(req: &Request, key: &str) -> Response {
    let gv = openapi::group_versions(&req.server.lock().registry).remove(key);
    let Some(gv) = gv else {
        return not_found();
    };
    if negotiate(req, &[Format::Json]).is_none() {
        return not_acceptable();
    }
    let doc = openapi::v3_serialized(&gv);
    match req.q("hash") {
        Some(h) if !h.is_empty() && h != doc.hash => {
            let location = format!("/openapi/v3/{key}?hash={}", doc.hash);
            let mut resp = StatusCode::MOVED_PERMANENTLY.into_response();
            if let Ok(v) = HeaderValue::from_str(&location) {
                resp.headers_mut().insert(header::LOCATION, v);
            }
            resp
        }
        Some(h) if !h.is_empty() => serve(req, &doc, "application/json", true),
        _ => serve(req, &doc, "application/json", false),
    }
}

/// `/openapi/v2`: JSON, or protobuf (what kubectl asks for).
pub fn v2(req: &Request) -> Response {
    let Some(format) = negotiate(req, &[Format::Json, Format::ProtoV2]) else {
        return not_acceptable();
    };
    let gvs = openapi::group_versions(&req.server.lock().registry);
    let doc = openapi::v2_document(&gvs);
    match format {
        Format::Json => serve(req, &openapi::serialize(&doc), "application/json", false),
        Format::ProtoV2 => serve(
            req,
            &openapi::hashed(openapi::proto::encode(&doc)),
            PROTO_V2_RETURNED,
            false,
        ),
    }
}

/// How a body is checked: a full object, a merge or strategic merge patch (partial object,
/// `$` directives allowed), or the object a JSON patch produced.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    Object,
    Patch,
    Patched,
}

/// Server-side field validation of a write body against the kind's schema: unknown fields are
/// pruned (as decoding into the Go types drops them), and under `Strict` unknown or duplicate
/// fields fail the request with upstream's wording; under `Warn` (the default) they become
/// `Warning` headers, returned here.
pub fn check_fields(
    req: &Request,
    def: &ResourceDef,
    body: &mut Value,
    kind: BodyKind,
) -> ApiResult<Vec<String>> {
    match check_patch_fields(req, def, body, kind)? {
        Ok(warnings) => Ok(warnings),
        Err(strict) => Err(ApiError::bad_request(match kind {
            BodyKind::Object => format!(
                "{} in version \"{}\" cannot be handled as a {}: {strict}",
                def.kind, def.version, def.kind
            ),
            BodyKind::Patch | BodyKind::Patched => strict,
        })),
    }
}

/// As [`check_fields`], but a `Strict` refusal is handed back as its `strict decoding error: …`
/// text (the inner `Err`), for a patch to word as upstream does ([`strict_patch_error`]).
pub fn check_patch_fields(
    req: &Request,
    def: &ResourceDef,
    body: &mut Value,
    kind: BodyKind,
) -> ApiResult<Result<Vec<String>, String>> {
    let options = match req.method {
        Method::POST => "CreateOptions",
        Method::PUT => "UpdateOptions",
        _ => "PatchOptions",
    };
    let directive = Directive::parse(req.q("fieldValidation"), options)?;
    let patch = kind == BodyKind::Patch;
    let checked = with_schema(def, |schema| {
        let problems = if directive == Directive::Ignore {
            Vec::new()
        } else if kind != BodyKind::Patched
            && serde_json::from_slice::<serde::de::IgnoredAny>(&req.body).is_ok()
        {
            fields::problems(&req.body, schema, patch)
        } else {
            // A YAML body (duplicates are gone once parsed; unknown fields are still found) or
            // the result of a JSON patch.
            fields::problems(body.to_string().as_bytes(), schema, patch)
        };
        if directive == Directive::Strict && !problems.is_empty() {
            return Err(problems);
        }
        fields::prune(body, schema, patch);
        Ok(problems)
    });
    Ok(match checked {
        None => Ok(Vec::new()),
        Some(Ok(warnings)) => Ok(warnings),
        Some(Err(problems)) => Err(format!("strict decoding error: {}", problems.join(", "))),
    })
}

/// A patch refused under `fieldValidation=Strict`, worded as 1.36 does: 422 `Invalid` on the
/// field `patch` of a nameless, kindless object (`" \"\" is invalid: patch: Invalid value: …"`),
/// whose value is what upstream failed to decode: the patched object's JSON for JSON and merge
/// patches, the patch as Go prints a map (`map[spec:map[x:1]]`) for a strategic merge patch
/// (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go`).
pub fn strict_patch_error(shown: String, strict: &str) -> ApiError {
    let cause = Cause::invalid("patch", &Value::String(shown), strict);
    ApiError::new(422, "Invalid", format!(" \"\" is invalid: {}", cause.render())).with_details(
        json!({"causes": [{"reason": cause.reason, "message": cause.message, "field": cause.field}]}),
    )
}

/// A JSON value as Go's `fmt` prints the `interface{}` it decodes to: maps with sorted keys,
/// strings bare, `<nil>` for null.
pub fn go_value(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::String(s) => s.clone(),
        Value::Bool(_) | Value::Number(_) => v.to_string(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_value).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{k}:{}", go_value(&map[k])))
                .collect();
            format!("map[{}]", items.join(" "))
        }
    }
}

/// The schema of a kind: a CRD's stored `openAPIV3Schema` (`custom_root`), or a reference into
/// the built-in components; `None` for a built-in kind without one.
fn with_schema<T>(def: &ResourceDef, f: impl FnOnce(Schema<'_>) -> T) -> Option<T> {
    let components = &openapi::builtins().schemas;
    if def.is_custom() {
        let untyped = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        let root = def.schema.as_deref().unwrap_or(&untyped);
        return Some(f(Schema {
            root,
            components,
            custom_root: true,
        }));
    }
    let name = openapi::builtins()
        .names
        .get(&def.group, &def.version, &def.kind)?;
    let root = json!({"$ref": format!("#/components/schemas/{name}")});
    Some(f(Schema {
        root: &root,
        components,
        custom_root: false,
    }))
}

/// Server-side apply: structured-merge-diff cannot type an apply configuration with fields its
/// schema does not declare, whatever `fieldValidation` says, and the request fails as upstream's
/// does (a plain error, hence 500 without a reason; kubernetes/kubernetes#122480). The message
/// names the object as the apply configuration does: `ns` is the namespace the body itself
/// gave (none: `(/name; …)`, as 1.36 words it), not the URL's.
pub fn check_apply_fields(def: &ResourceDef, ns: &str, name: &str, body: &Value) -> ApiResult<()> {
    let undeclared = with_schema(def, |schema| {
        fields::undeclared(body, schema, &|path| crate::hints::list_type(def, path))
    })
    .unwrap_or_default();
    let errors: Vec<String> = undeclared
        .iter()
        .map(|p| format!("{p}: field not declared in schema"))
        .collect();
    let message = match errors.as_slice() {
        [] => return Ok(()),
        [one] => one.clone(),
        many => format!("errors:\n  {}", many.join("\n  ")),
    };
    Err(ApiError::new(
        500,
        "",
        format!(
            "failed to create typed patch object ({ns}/{name}; {}/{}, Kind={}): {message}",
            def.group, def.version, def.kind
        ),
    ))
}

/// Adds one `Warning: 299 - "..."` header per message.
pub fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        if let Ok(v) = HeaderValue::from_str(&fields::warning_header(w)) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}
