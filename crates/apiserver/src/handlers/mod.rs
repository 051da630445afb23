//! HTTP routing: parses Kubernetes API paths (`/api/v1/...`, `/apis/{group}/{version}/...`,
//! namespaced, cluster-scoped and all-namespace forms, subresources, the legacy `/watch/`
//! prefix) and dispatches to discovery, read, write, patch, watch and subresource handlers;
//! the streaming Pod subresources (log, exec, attach) go to `proxy`; `metrics.k8s.io` to
//! `metrics_api`.
//! Every failure is answered with a `metav1.Status` body.

pub(crate) mod discovery;
mod eviction;
mod metrics_api;
mod openapi;
mod patch;
mod proxy;
mod read;
mod subresources;
mod table;
mod write;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::auth::{self, Attributes, User, index::Decision, reviews};
use crate::proto;
use crate::registry::ResourceDef;
use crate::server::Server;
use crate::status::{ApiError, ApiResult};

pub use proxy::{connect_kubelet, kubelet_addr};

pub fn router(server: Arc<Server>) -> Router {
    Router::new()
        .fallback(dispatch)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(server)
}

/// Everything a resource handler needs to know about the request.
pub struct Request {
    pub server: Arc<Server>,
    /// The authenticated user (already authorized for this request).
    pub user: User,
    pub method: Method,
    pub query: HashMap<String, String>,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Request {
    pub fn q(&self, key: &str) -> Option<&str> {
        self.query.get(key).map(String::as_str)
    }

    pub fn flag(&self, key: &str) -> bool {
        matches!(self.q(key), Some("true" | "1"))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The field manager of a non-apply write: the query parameter or the user agent prefix.
    pub fn manager(&self) -> String {
        match self.q("fieldManager").filter(|m| !m.is_empty()) {
            Some(m) => m.to_string(),
            None => crate::managed_fields::manager_from_user_agent(self.header("user-agent")),
        }
    }

    /// The body as JSON (or YAML, when sent as `application/yaml`).
    pub fn json_body(&self) -> ApiResult<Value> {
        let ct = self.header("content-type").unwrap_or_default();
        if ct.starts_with("application/yaml") {
            let text = std::str::from_utf8(&self.body)
                .map_err(|_| ApiError::bad_request("the YAML body is not UTF-8"))?;
            return serde_saphyr::from_str::<Value>(text)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")));
        }
        serde_json::from_slice(&self.body).map_err(|e| {
            ApiError::bad_request(format!(
                "the body of the request was in an unknown format: {e}"
            ))
        })
    }

    /// `dryRun=All` (the only value the API defines).
    pub fn dry_run(&self) -> ApiResult<bool> {
        match self.q("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "Invalid value: \"{other}\": supported values: \"All\""
            ))),
        }
    }

    /// For endpoints that do not support dry runs.
    pub fn reject_dry_run(&self) -> ApiResult<()> {
        if self.dry_run()? {
            return Err(ApiError::bad_request(
                "dryRun is not supported on this subresource by the Steward local control plane",
            ));
        }
        Ok(())
    }
}

/// A resolved resource URL.
pub struct Target {
    pub def: Arc<ResourceDef>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
    pub watch_prefix: bool,
}

impl Target {
    pub fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or_default()
    }

    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }
}

pub fn json_response(code: StatusCode, v: &Value) -> Response {
    (
        code,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

/// Largest accepted request body.
const BODY_LIMIT: usize = 4 * 1024 * 1024;

async fn dispatch(State(server): State<Arc<Server>>, request: axum::extract::Request) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let query = Query::<HashMap<String, String>>::try_from_uri(request.uri())
        .map(|q| q.0)
        .unwrap_or_default();
    let attrs = Attributes::from_request(&method, &path, &query);
    let response = serve(server.clone(), request, query).await;
    server
        .metrics
        .record(&method, &path, &attrs, response.status().as_u16());
    response
}

async fn serve(
    server: Arc<Server>,
    request: axum::extract::Request,
    query: HashMap<String, String>,
) -> Response {
    let (parts, body) = request.into_parts();
    let user = match admit_user(&server, &parts, &query) {
        Ok(user) => user,
        Err(e) => return e.into_response(),
    };
    if let Some(target) = proxy::match_path(parts.uri.path()) {
        return proxy::serve(server, parts, target).await;
    }
    let Ok(body) = axum::body::to_bytes(body, BODY_LIMIT).await else {
        return ApiError::new(
            413,
            "RequestEntityTooLarge",
            "the request body is too large (limit 4 MiB)",
        )
        .into_response();
    };
    let (method, uri, mut headers) = (parts.method, parts.uri, parts.headers);
    let body = match protobuf_body(&method, &mut headers, body) {
        Ok(body) => body,
        Err(e) => return e.into_response(),
    };
    let segs: Vec<String> = uri
        .path()
        .split('/')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let req = Request {
        server,
        user,
        method,
        query,
        headers,
        body,
    };
    let negotiated = proto::negotiate(req.header("accept"));
    let response = match auth::as_requester(&req.user, || route(&req, &segs)) {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    match negotiated {
        proto::Negotiated::Protobuf { json_ok } => protobuf_response(response, json_ok).await,
        proto::Negotiated::Json => response,
    }
}

/// A protobuf request body (create, update, delete options, reviews) read into the JSON every
/// handler works on; CBOR, protobuf patches and custom kinds are `415` as upstream answers.
fn protobuf_body(method: &Method, headers: &mut HeaderMap, body: Bytes) -> ApiResult<Bytes> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let unsupported = || {
        ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (not {ct})"
        ))
    };
    if ct.starts_with("application/cbor") {
        return Err(unsupported());
    }
    if !ct.starts_with(proto::MEDIA_TYPE) || body.is_empty() {
        return Ok(body);
    }
    if *method == Method::PATCH {
        return Err(unsupported());
    }
    let obj = proto::decode(&body).map_err(|e| {
        if e.is_no_form() {
            unsupported()
        } else {
            ApiError::bad_request(format!("the body of the request could not be read: {e}"))
        }
    })?;
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(Bytes::from(obj.to_string()))
}

/// A handler's JSON answer written as protobuf when its kind has a protobuf form; JSON when it
/// has none and the client accepts JSON too, `406` otherwise. Streams (watches) encode their
/// own frames.
async fn protobuf_response(response: Response, json_ok: bool) -> Response {
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/json");
    if !is_json
        || response
            .extensions()
            .get::<crate::watch::Streamed>()
            .is_some()
    {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return ApiError::internal("the response could not be read for protobuf encoding")
            .into_response();
    };
    let encoded = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| proto::encode(&v));
    match encoded {
        Some(Ok(wire)) => {
            parts.headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(proto::MEDIA_TYPE),
            );
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, axum::body::Body::from(wire))
        }
        Some(Err(e)) => {
            tracing::warn!(error = %e, "a response could not be encoded as protobuf");
            ApiError::internal(format!(
                "the response could not be encoded as protobuf: {e}"
            ))
            .into_response()
        }
        None if json_ok => Response::from_parts(parts, axum::body::Body::from(bytes)),
        None => not_acceptable().into_response(),
    }
}

/// `406`: the client accepts only protobuf and the kind has no protobuf form.
pub fn not_acceptable() -> ApiError {
    ApiError::new(
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json, application/yaml",
    )
}

/// Authenticates the request and authorizes it with RBAC: the user, or the 401/403 Status.
fn admit_user(
    server: &Server,
    parts: &axum::http::request::Parts,
    query: &HashMap<String, String>,
) -> ApiResult<User> {
    let attrs = Attributes::from_request(&parts.method, parts.uri.path(), query);
    let mut state = server.lock();
    let requester = auth::authenticate(&state, &parts.headers)?;
    let user = auth::impersonation::impersonate(&mut state, requester, &parts.headers, &attrs)?;
    match auth::authorize(&mut state, &user, &attrs) {
        Decision::Allow(_) => Ok(user),
        Decision::Deny => {
            tracing::debug!(user = %user.name, verb = %attrs.verb, group = %attrs.group,
                resource = %attrs.resource, subresource = %attrs.subresource,
                namespace = %attrs.namespace, path = %attrs.path, "request forbidden by RBAC");
            Err(auth::forbidden(&user, &attrs))
        }
    }
}

/// A review endpoint: POST only.
fn post(
    req: &Request,
    handler: impl FnOnce(&Request) -> ApiResult<Response>,
) -> ApiResult<Response> {
    if req.method != Method::POST {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({})",
            req.method
        )));
    }
    handler(req)
}

fn route(req: &Request, segs: &[String]) -> ApiResult<Response> {
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    match s.as_slice() {
        [] => Ok(discovery::root()),
        ["version"] => Ok(discovery::version()),
        ["healthz" | "livez" | "readyz", ..] => Ok((StatusCode::OK, "ok").into_response()),
        ["metrics"] => Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            req.server.metrics.render(),
        )
            .into_response()),
        ["openapi", "v3"] => Ok(openapi::v3_index(req)),
        ["openapi", "v3", rest @ ..] => Ok(openapi::v3_group_version(req, &rest.join("/"))),
        ["openapi", "v2"] => Ok(openapi::v2(req)),
        ["api"] => Ok(discovery::api_versions(req)),
        ["apis"] => Ok(discovery::group_list(req)),
        ["api", "v1"] => discovery::resource_list(req, "", "v1"),
        [
            "apis",
            "authorization.k8s.io",
            "v1",
            "selfsubjectaccessreviews",
        ] => post(req, reviews::self_subject_access_review),
        ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"] => {
            post(req, |r| reviews::subject_access_review(r, None))
        }
        [
            "apis",
            "authorization.k8s.io",
            "v1",
            "namespaces",
            ns,
            "localsubjectaccessreviews",
        ] => post(req, |r| reviews::subject_access_review(r, Some(ns))),
        ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"] => {
            post(req, reviews::self_subject_review)
        }
        ["apis", group] => discovery::group(req, group),
        ["apis", group, version] => discovery::resource_list(req, group, version),
        ["apis", metrics_api::GROUP, metrics_api::VERSION, rest @ ..] => {
            metrics_api::serve(req, rest)
        }
        ["api", "v1", rest @ ..] => resource(req, "", "v1", rest),
        ["apis", group, version, rest @ ..] => resource(req, group, version, rest),
        _ => Err(ApiError::no_route()),
    }
}

fn resource(req: &Request, group: &str, version: &str, rest: &[&str]) -> ApiResult<Response> {
    let (watch_prefix, rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    let namespace_sub = rest.len() == 3 && matches!(rest[2], "status" | "finalize");
    let (namespace, rest) = match rest {
        ["namespaces", ns, r @ ..] if !r.is_empty() && !namespace_sub => (Some(ns.to_string()), r),
        r => (None, r),
    };
    let (plural, name, sub) = match rest {
        [p] => (*p, None, None),
        [p, n] => (*p, Some(n.to_string()), None),
        [p, n, s] => (*p, Some(n.to_string()), Some(s.to_string())),
        _ => return Err(ApiError::no_route()),
    };
    let def = req
        .server
        .lock()
        .registry
        .lookup(group, version, plural)
        .ok_or_else(ApiError::no_route)?;
    if (def.namespaced && namespace.is_none() && name.is_some())
        || (!def.namespaced && namespace.is_some())
    {
        return Err(ApiError::no_route());
    }
    let t = Target {
        def,
        namespace,
        name,
        sub,
        watch_prefix,
    };
    let is_watch = t.watch_prefix || req.flag("watch");
    match (&req.method, t.name.is_some(), t.sub.as_deref()) {
        (&Method::GET, false, None) if is_watch => read::watch(req, &t),
        (&Method::GET, false, None) => read::list(req, &t),
        (&Method::POST, false, None) => write::create(req, &t),
        (&Method::DELETE, false, None) => write::delete_collection(req, &t),
        (&Method::GET, true, None) if is_watch => read::watch(req, &t),
        (&Method::GET, true, None) => read::get(req, &t),
        (&Method::PUT, true, None) => write::replace(req, &t, ""),
        (&Method::PATCH, true, None) => patch::patch(req, &t, ""),
        (&Method::DELETE, true, None) => write::delete(req, &t),
        (_, true, Some("status")) if t.def.status_subresource => match req.method {
            Method::GET => read::get(req, &t),
            Method::PUT => write::replace(req, &t, "status"),
            Method::PATCH => patch::patch(req, &t, "status"),
            _ => Err(ApiError::method_not_allowed(format!(
                "{} is not supported on status",
                req.method
            ))),
        },
        (&Method::PUT, true, Some("finalize"))
            if t.def.group.is_empty() && t.def.kind == "Namespace" =>
        {
            write::replace(req, &t, "finalize")
        }
        (_, true, Some("scale")) if t.def.scale.is_some() => subresources::scale(req, &t),
        (&Method::POST, true, Some("token"))
            if t.def.group.is_empty() && t.def.kind == "ServiceAccount" =>
        {
            reviews::token_request(req, t.ns(), t.name())
        }
        (_, true, Some(sub)) if t.def.group.is_empty() && t.def.kind == "Pod" => {
            subresources::pod(req, &t, sub)
        }
        (_, _, Some(_)) => Err(ApiError::no_route()),
        (m, _, None) => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({m})"
        ))),
    }
}
