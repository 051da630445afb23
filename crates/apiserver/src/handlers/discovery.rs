//! Discovery documents in the legacy (non-aggregated) format: `/version`, `/api`, `/api/v1`,
//! `/apis`, `/apis/{group}`, `/apis/{group}/{version}`, and the root path list. Requests for the
//! aggregated format get the legacy one (clients fall back on the content type). OpenAPI is in
//! `openapi.rs`.

use std::cmp::Ordering;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::{Request, json_response};
use crate::auth::reviews;
use crate::registry::ResourceDef;
use crate::status::{ApiError, ApiResult};

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

pub fn root() -> Response {
    json_response(
        StatusCode::OK,
        &json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/metrics", "/openapi/v2", "/openapi/v3", "/openapi/v3/", "/readyz", "/version"]}),
    )
}

/// The Kubernetes release whose API the embedded server implements: `k8s-openapi`'s `v1_36`
/// schemas, the v1.36 protobuf definitions, and the conformance suite passing against a real
/// kube-apiserver v1.36.2. Every version string the control plane reports derives from it.
pub const KUBERNETES_MINOR: u32 = 36;
/// `/version`'s `gitVersion` (and the OpenAPI documents' `info.version`).
pub const GIT_VERSION: &str = "v1.36.2+steward";

pub fn version() -> Response {
    json_response(
        StatusCode::OK,
        &json!({
            "major": "1", "minor": KUBERNETES_MINOR.to_string(),
            "emulationMajor": "1", "emulationMinor": KUBERNETES_MINOR.to_string(),
            "minCompatibilityMajor": "1",
            "minCompatibilityMinor": (KUBERNETES_MINOR - 1).to_string(),
            "gitVersion": GIT_VERSION, "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "none",
            "compiler": "rustc", "platform": "linux/amd64"
        }),
    )
}

pub fn api_versions(req: &Request) -> Response {
    let host = req.header("host").unwrap_or("127.0.0.1").to_string();
    json_response(
        StatusCode::OK,
        &json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}]}),
    )
}

/// Kubernetes version priority: GA > beta > alpha, higher numbers first.
fn version_key(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    let (stage, minor) = if tail.is_empty() {
        (3, 0)
    } else if let Some(n) = tail.strip_prefix("beta") {
        (2, n.parse().unwrap_or(0))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n.parse().unwrap_or(0))
    } else {
        (0, 0)
    };
    if digits.is_empty() {
        (0, 0, 0)
    } else {
        (stage, major, minor)
    }
}

fn sort_versions(vs: &mut [String]) {
    vs.sort_by(|a, b| match version_key(b).cmp(&version_key(a)) {
        Ordering::Equal => a.cmp(b),
        o => o,
    });
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let mut vs = versions.to_vec();
    sort_versions(&mut vs);
    let entries: Vec<Value> = vs
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": entries, "preferredVersion": entries.first().cloned().unwrap_or(Value::Null)})
}

/// The registry's groups plus those of the review endpoints (which store nothing) and
/// `metrics.k8s.io` (served as the aggregated metrics-server would be).
fn groups(req: &Request) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut groups = req.server.lock().registry.groups();
    groups.insert(
        super::metrics_api::GROUP.to_string(),
        vec![super::metrics_api::VERSION.to_string()],
    );
    for (group, ..) in reviews::DISCOVERY {
        let versions = groups.entry(group.to_string()).or_default();
        if !versions.iter().any(|v| v == "v1") {
            versions.push("v1".into());
        }
    }
    groups
}

pub fn group_list(req: &Request) -> Response {
    let groups = groups(req);
    let list: Vec<Value> = groups
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json_response(
        StatusCode::OK,
        &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": list}),
    )
}

pub fn group(req: &Request, name: &str) -> ApiResult<Response> {
    let groups = groups(req);
    let vs = groups
        .get(name)
        .filter(|_| !name.is_empty())
        .ok_or_else(ApiError::no_route)?;
    let mut g = group_json(name, vs);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Ok(json_response(StatusCode::OK, &g))
}

fn resource_entries(d: &ResourceDef) -> Vec<Value> {
    let mut main = json!({
        "name": d.plural, "singularName": d.singular, "namespaced": d.namespaced, "kind": d.kind,
        "verbs": VERBS,
    });
    if !d.short_names.is_empty() {
        main["shortNames"] = json!(d.short_names);
    }
    if !d.categories.is_empty() {
        main["categories"] = json!(d.categories);
    }
    let mut out = vec![main];
    if d.status_subresource {
        out.push(json!({"name": format!("{}/status", d.plural), "singularName": "", "namespaced": d.namespaced,
            "kind": d.kind, "verbs": ["get", "patch", "update"]}));
    }
    if d.scale.is_some() {
        out.push(json!({"name": format!("{}/scale", d.plural), "singularName": "", "namespaced": d.namespaced,
            "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
    }
    for (sub, kind, verbs) in &d.extra_subresources {
        let mut entry = json!({"name": format!("{}/{sub}", d.plural), "singularName": "", "namespaced": d.namespaced,
            "kind": kind, "verbs": verbs});
        if *kind == "Eviction" {
            // As the real server lists it; kubectl drain looks for this group/version.
            entry["group"] = json!("policy");
            entry["version"] = json!("v1");
        }
        out.push(entry);
    }
    out
}

pub fn resource_list(req: &Request, group: &str, version: &str) -> ApiResult<Response> {
    if (group, version) == (super::metrics_api::GROUP, super::metrics_api::VERSION) {
        return Ok(json_response(
            StatusCode::OK,
            &super::metrics_api::resource_list(),
        ));
    }
    let defs: Vec<_> = req
        .server
        .lock()
        .registry
        .all()
        .filter(|d| d.group == group && d.version == version)
        .cloned()
        .collect();
    let mut resources: Vec<Value> = defs.iter().flat_map(|d| resource_entries(d)).collect();
    if version == "v1" {
        for (g, plural, kind, namespaced) in reviews::DISCOVERY {
            if g == group {
                resources.push(
                    json!({"name": plural, "singularName": "", "namespaced": namespaced,
                    "kind": kind, "verbs": ["create"]}),
                );
            }
        }
    }
    if resources.is_empty() {
        return Err(ApiError::no_route());
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Ok(json_response(
        StatusCode::OK,
        &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_priority() {
        let mut v: Vec<String> = ["v1alpha1", "v1beta1", "v2", "v1", "v1beta2", "foo"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        sort_versions(&mut v);
        assert_eq!(v, ["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]);
    }
}
