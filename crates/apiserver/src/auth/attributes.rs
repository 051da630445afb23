//! Request attributes for authorization, derived from the method, path and query as the real
//! server's `RequestInfoFactory` does: `/api/v1/...` and `/apis/{group}/{version}/...` with at
//! least a resource are resource requests; everything else (discovery, `/version`, `/healthz`)
//! is a non-resource request on its path. GET without a name is `list` (`watch` with
//! `watch=true` or the `/watch/` prefix), DELETE without a name `deletecollection`; a
//! `metadata.name=` field selector on list/watch supplies the name. For `namespaces`, the
//! namespace is the object's own name.

use std::collections::HashMap;

use axum::http::Method;
use serde_json::json;

use crate::registry::GroupResource;
use crate::status::ApiError;

/// What a request asks to do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    pub resource_request: bool,
    /// The URL path (non-resource requests).
    pub path: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// Pod subresources that stream a session: the real server (1.35+) requires `create` on them
/// whichever method opens the connection.
const SESSION_SUBRESOURCES: [&str; 3] = ["exec", "attach", "portforward"];

impl Attributes {
    pub fn from_request(method: &Method, path: &str, query: &HashMap<String, String>) -> Self {
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let non_resource = || Self {
            verb: method_verb(method).to_string(),
            path: path.to_string(),
            ..Self::default()
        };
        let (group, rest) = match segs.as_slice() {
            ["api", _version, rest @ ..] if !rest.is_empty() => ("", rest),
            ["apis", group, _version, rest @ ..] if !rest.is_empty() => (*group, rest),
            _ => return non_resource(),
        };
        let (mut verb, rest) = match rest {
            ["watch", r @ ..] if !r.is_empty() => ("watch".to_string(), r),
            r => (method_verb(method).to_string(), r),
        };
        let mut namespace = String::new();
        let mut parts = rest;
        if let ["namespaces", ns, tail @ ..] = rest {
            namespace = ns.to_string();
            if !tail.is_empty() && !matches!(tail[0], "status" | "finalize") {
                parts = tail;
            }
        }
        let resource = parts.first().copied().unwrap_or_default().to_string();
        let mut name = parts.get(1).copied().unwrap_or_default().to_string();
        let subresource = parts.get(2).copied().unwrap_or_default().to_string();
        if name.is_empty() && verb == "get" {
            verb = if matches!(query.get("watch").map(String::as_str), Some("true" | "1")) {
                "watch".into()
            } else {
                "list".into()
            };
        }
        if (verb == "list" || verb == "watch")
            && name.is_empty()
            && let Some(n) = query.get("fieldSelector").and_then(|f| name_selector(f))
        {
            name = n;
        }
        if name.is_empty() && verb == "delete" {
            verb = "deletecollection".into();
        }
        if group.is_empty()
            && resource == "pods"
            && SESSION_SUBRESOURCES.contains(&subresource.as_str())
        {
            verb = "create".into();
        }
        Self {
            verb,
            resource_request: true,
            path: path.to_string(),
            group: group.to_string(),
            resource,
            subresource,
            namespace,
            name,
        }
    }

    /// The 403 for this request, worded as upstream (`pods is forbidden: User "u" cannot list
    /// resource "pods" in API group "" in the namespace "ns"`), with `reason` appended.
    pub fn forbidden(&self, user: &str, reason: &str) -> ApiError {
        let mut msg = if self.resource_request {
            let mut resource = self.resource.clone();
            if !self.subresource.is_empty() {
                resource = format!("{resource}/{}", self.subresource);
            }
            let scope = if self.namespace.is_empty() {
                "at the cluster scope".to_string()
            } else {
                format!("in the namespace \"{}\"", self.namespace)
            };
            format!(
                "User \"{user}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
                self.verb, self.group
            )
        } else {
            format!(
                "User \"{user}\" cannot {} path \"{}\"",
                self.verb, self.path
            )
        };
        if !reason.is_empty() {
            msg = format!("{msg}: {reason}");
        }
        let gr = GroupResource::new(&self.group, &self.resource);
        let message = match (self.resource.is_empty(), self.name.is_empty()) {
            (true, _) => format!("forbidden: {msg}"),
            (false, true) => format!("{} is forbidden: {msg}", gr.qualified()),
            (false, false) => format!("{} \"{}\" is forbidden: {msg}", gr.qualified(), self.name),
        };
        let mut details = json!({"name": self.name, "kind": self.resource});
        if !self.group.is_empty() {
            details["group"] = json!(self.group);
        }
        ApiError::forbidden(message).with_details(details)
    }
}

fn method_verb(method: &Method) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::GET | Method::HEAD => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    }
}

/// `metadata.name=x` (or `==`) in a field selector.
fn name_selector(selector: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        let (k, v) = term.split_once("==").or_else(|| term.split_once('='))?;
        (k.trim() == "metadata.name").then(|| v.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: Method, path: &str, query: &[(&str, &str)]) -> Attributes {
        let q = query
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Attributes::from_request(&method, path, &q)
    }

    #[test]
    fn verbs_resources_and_namespaces_as_upstream() {
        let a = attrs(Method::GET, "/api/v1/namespaces/ns/pods", &[]);
        assert_eq!(
            (a.verb.as_str(), a.resource.as_str(), a.namespace.as_str()),
            ("list", "pods", "ns")
        );
        let a = attrs(Method::GET, "/api/v1/pods", &[("watch", "true")]);
        assert_eq!((a.verb.as_str(), a.namespace.as_str()), ("watch", ""));
        let a = attrs(Method::GET, "/api/v1/watch/namespaces/ns/pods/p", &[]);
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("watch", "p"));
        let a = attrs(
            Method::DELETE,
            "/apis/apps/v1/namespaces/ns/deployments",
            &[],
        );
        assert_eq!(
            (a.verb.as_str(), a.group.as_str()),
            ("deletecollection", "apps")
        );
        let a = attrs(
            Method::PATCH,
            "/apis/steward.dev/v1alpha1/namespaces/n/etcdclusters/c/status",
            &[],
        );
        assert_eq!(
            (
                a.verb.as_str(),
                a.resource.as_str(),
                a.subresource.as_str(),
                a.name.as_str()
            ),
            ("patch", "etcdclusters", "status", "c")
        );
        let a = attrs(Method::GET, "/api/v1/namespaces/foo", &[]);
        assert_eq!(
            (
                a.verb.as_str(),
                a.resource.as_str(),
                a.name.as_str(),
                a.namespace.as_str()
            ),
            ("get", "namespaces", "foo", "foo")
        );
        let a = attrs(Method::PUT, "/api/v1/namespaces/foo/finalize", &[]);
        assert_eq!(
            (a.resource.as_str(), a.subresource.as_str()),
            ("namespaces", "finalize")
        );
        let a = attrs(
            Method::GET,
            "/apis/coordination.k8s.io/v1/namespaces/n/leases",
            &[("fieldSelector", "metadata.name=l")],
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("list", "l"));
        let a = attrs(Method::GET, "/api/v1/namespaces/n/pods/p/exec", &[]);
        assert_eq!(
            (a.verb.as_str(), a.subresource.as_str()),
            ("create", "exec")
        );
        for p in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps",
            "/apis/apps/v1",
            "/version",
            "/healthz",
        ] {
            let a = attrs(Method::GET, p, &[]);
            assert!(!a.resource_request, "{p}");
            assert_eq!(a.verb, "get");
        }
    }

    #[test]
    fn forbidden_messages_match_upstream() {
        let a = attrs(Method::GET, "/api/v1/namespaces/ns/pods", &[]);
        let e = a.forbidden("system:serviceaccount:ns:sa", "");
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "pods is forbidden: User \"system:serviceaccount:ns:sa\" cannot list resource \"pods\" in API group \"\" in the namespace \"ns\""
        );
        let a = attrs(
            Method::GET,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/x",
            &[],
        );
        assert_eq!(
            a.forbidden("u", "").message,
            "clusterroles.rbac.authorization.k8s.io \"x\" is forbidden: User \"u\" cannot get resource \"clusterroles\" in API group \"rbac.authorization.k8s.io\" at the cluster scope"
        );
        let a = attrs(Method::GET, "/version", &[]);
        assert_eq!(
            a.forbidden("system:anonymous", "").message,
            "forbidden: User \"system:anonymous\" cannot get path \"/version\""
        );
    }
}
