//! The endpoints that create nothing: `SelfSubjectAccessReview`, `SubjectAccessReview` and
//! `LocalSubjectAccessReview` (authorization.k8s.io/v1; `kubectl auth can-i`),
//! `SelfSubjectReview` (authentication.k8s.io/v1; `kubectl auth whoami`) and `TokenRequest`
//! (`POST .../serviceaccounts/{name}/token`). Each answers `201 Created` with the request
//! object and its `status`, as upstream.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::index::Decision;
use super::{Attributes, User, authorize};
use crate::handlers::{Request, json_response};
use crate::meta;
use crate::registry::GroupResource;
use crate::status::{ApiError, ApiResult, Cause};

/// Review resources for discovery: (group, plural, kind, namespaced).
pub const DISCOVERY: [(&str, &str, &str, bool); 4] = [
    (
        "authentication.k8s.io",
        "selfsubjectreviews",
        "SelfSubjectReview",
        false,
    ),
    (
        "authorization.k8s.io",
        "localsubjectaccessreviews",
        "LocalSubjectAccessReview",
        true,
    ),
    (
        "authorization.k8s.io",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        false,
    ),
    (
        "authorization.k8s.io",
        "subjectaccessreviews",
        "SubjectAccessReview",
        false,
    ),
];

fn body_of(req: &Request, kind: &str, group: &str) -> ApiResult<Value> {
    let mut body = req.json_body()?;
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    body["apiVersion"] = json!(format!("{group}/v1"));
    body["kind"] = json!(kind);
    if body.get("metadata").is_none_or(Value::is_null) {
        body["metadata"] = json!({});
    }
    body["metadata"]["creationTimestamp"] = Value::Null;
    Ok(body)
}

fn invalid(kind: &str, field: &str, detail: &str) -> ApiError {
    let cause = Cause::invalid(field, &Value::Null, detail);
    ApiError::new(
        422,
        "Invalid",
        format!(
            "{kind}.authorization.k8s.io \"\" is invalid: {}",
            cause.render()
        ),
    )
}

fn attributes(kind: &str, spec: &Value) -> ApiResult<Attributes> {
    let s = |v: &Value, k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    match (
        spec.get("resourceAttributes"),
        spec.get("nonResourceAttributes"),
    ) {
        (Some(r), None) if r.is_object() => Ok(Attributes {
            verb: s(r, "verb"),
            resource_request: true,
            path: String::new(),
            group: s(r, "group"),
            resource: s(r, "resource"),
            subresource: s(r, "subresource"),
            namespace: s(r, "namespace"),
            name: s(r, "name"),
        }),
        (None, Some(n)) if n.is_object() => Ok(Attributes {
            verb: s(n, "verb"),
            path: s(n, "path"),
            ..Attributes::default()
        }),
        _ => Err(invalid(
            kind,
            "spec.resourceAttributes",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
    }
}

fn answer(req: &Request, mut body: Value, user: &User, attrs: &Attributes) -> Response {
    let decision = authorize(&mut req.server.lock(), user, attrs);
    body["status"] = match decision {
        Decision::Allow(reason) if reason.is_empty() => json!({"allowed": true}),
        Decision::Allow(reason) => json!({"allowed": true, "reason": reason}),
        Decision::Deny => json!({"allowed": false}),
    };
    json_response(StatusCode::CREATED, &body)
}

/// `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`.
pub fn self_subject_access_review(req: &Request) -> ApiResult<Response> {
    let body = body_of(req, "SelfSubjectAccessReview", "authorization.k8s.io")?;
    let attrs = attributes("SelfSubjectAccessReview", &body["spec"])?;
    Ok(answer(req, body, &req.user, &attrs))
}

/// `POST .../subjectaccessreviews` and `.../namespaces/{ns}/localsubjectaccessreviews`.
pub fn subject_access_review(req: &Request, namespace: Option<&str>) -> ApiResult<Response> {
    let kind = if namespace.is_some() {
        "LocalSubjectAccessReview"
    } else {
        "SubjectAccessReview"
    };
    let mut body = body_of(req, kind, "authorization.k8s.io")?;
    let spec = body["spec"].clone();
    let attrs = attributes(kind, &spec)?;
    if let Some(ns) = namespace {
        if attrs.namespace != ns {
            return Err(invalid(
                kind,
                "spec.resourceAttributes.namespace",
                "must match metadata.namespace",
            ));
        }
        body["metadata"]["namespace"] = json!(ns);
    }
    let user = User {
        name: spec["user"].as_str().unwrap_or_default().to_string(),
        uid: spec["uid"].as_str().unwrap_or_default().to_string(),
        groups: meta::strings(spec.get("groups")),
    };
    if user.name.is_empty() && user.groups.is_empty() {
        return Err(invalid(
            kind,
            "spec.user",
            "at least one of user or group must be specified",
        ));
    }
    Ok(answer(req, body, &user, &attrs))
}

/// `POST /apis/authentication.k8s.io/v1/selfsubjectreviews`.
pub fn self_subject_review(req: &Request) -> ApiResult<Response> {
    let mut body = body_of(req, "SelfSubjectReview", "authentication.k8s.io")?;
    let mut info = json!({"username": req.user.name, "groups": req.user.groups});
    if !req.user.uid.is_empty() {
        info["uid"] = json!(req.user.uid);
    }
    body["status"] = json!({"userInfo": info});
    Ok(json_response(StatusCode::CREATED, &body))
}

/// `POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`: a token for the account,
/// `spec.expirationSeconds` (default 3600, at least 600) long.
pub fn token_request(req: &Request, ns: &str, name: &str) -> ApiResult<Response> {
    req.reject_dry_run()?;
    let mut body = body_of(req, "TokenRequest", "authentication.k8s.io")?;
    // As upstream: the account is looked up before the request is validated.
    let mut state = req.server.lock();
    let gr = GroupResource::new("", "serviceaccounts");
    let uid = state
        .get(&gr, ns, name)
        .and_then(|sa| meta::uid(sa).map(String::from))
        .ok_or_else(|| ApiError::not_found(&gr, name))?;
    let seconds = match body["spec"].get("expirationSeconds") {
        None | Some(Value::Null) => 3600,
        Some(v) => v
            .as_i64()
            .ok_or_else(|| ApiError::bad_request("spec.expirationSeconds must be an integer"))?,
    };
    let too = if seconds < 600 {
        Some("less than 10 minutes")
    } else if seconds > 1 << 32 {
        Some("larger than 2^32 seconds")
    } else {
        None
    };
    if let Some(too) = too {
        return Err(ApiError::new(
            422,
            "Invalid",
            format!(
                "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration {too}"
            ),
        ));
    }
    let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(seconds);
    let token = state.auth.tokens.issue(ns, name, &uid, expires);
    body["metadata"]["name"] = json!(name);
    body["metadata"]["namespace"] = json!(ns);
    body["metadata"]["creationTimestamp"] = json!(meta::now());
    body["spec"]["expirationSeconds"] = json!(seconds);
    if body["spec"]
        .get("audiences")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        body["spec"]["audiences"] = json!(["https://kubernetes.default.svc.cluster.local"]);
    }
    body["status"] = json!({
        "token": token,
        "expirationTimestamp": expires.round(jiff::Unit::Second).unwrap_or(expires).strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    });
    Ok(json_response(StatusCode::CREATED, &body))
}
