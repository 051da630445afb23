//! `GET /metrics`: the request counter kube-apiserver publishes, `apiserver_request_total`,
//! with its labels (`verb` as upstream reports it: the HTTP method, `LIST`/`WATCH` for
//! collection reads; `group`, `version`, `resource`, `subresource`, `scope` —
//! `resource`/`namespace`/`cluster` —, `component="apiserver"`, `code`), in Prometheus' text
//! format. Resource requests only; non-resource requests (discovery, `/healthz`) are not
//! counted. Benchmarks and tests read it to count what a client (the operator) asked.
//!
//! Beside it, what kube-controller-manager would publish on its own port: the time the built-in
//! controllers and the garbage collector spent in their passes (`steward_dev_controller_passes_total`
//! and `steward_dev_controller_seconds_total`, by `controller`). They run under the store's lock,
//! so that time is time no request was answered: the scale benchmark prints it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use axum::http::Method;

use crate::auth::attributes::Attributes;

/// The labels of one counter.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    code: u16,
    group: String,
    resource: String,
    scope: &'static str,
    subresource: String,
    verb: &'static str,
    version: String,
}

/// The counters.
#[derive(Debug, Default)]
pub struct RequestMetrics {
    counts: Mutex<BTreeMap<Key, u64>>,
    /// Passes and seconds by controller.
    controllers: Mutex<BTreeMap<&'static str, (u64, f64)>>,
}

/// The verb as upstream's metrics report it.
fn reported_verb(method: &Method, attrs: &Attributes) -> &'static str {
    match (attrs.verb.as_str(), method.as_str()) {
        ("list", _) => "LIST",
        ("watch", _) => "WATCH",
        (_, "GET") => "GET",
        (_, "POST") => "POST",
        (_, "PUT") => "PUT",
        (_, "PATCH") => "PATCH",
        (_, "DELETE") => "DELETE",
        _ => "OTHER",
    }
}

/// The API version in a resource path (`/api/v1/...`, `/apis/<group>/<version>/...`).
fn version_of(path: &str) -> String {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["api", v, ..] => (*v).to_owned(),
        ["apis", _, v, ..] => (*v).to_owned(),
        _ => String::new(),
    }
}

impl RequestMetrics {
    /// Counts one answered request.
    pub fn record(&self, method: &Method, path: &str, attrs: &Attributes, code: u16) {
        if !attrs.resource_request {
            return;
        }
        // Upstream's `CleanScope`: a named object, or a create, is `resource`.
        let scope = if !attrs.name.is_empty() || attrs.verb == "create" {
            "resource"
        } else if !attrs.namespace.is_empty() {
            "namespace"
        } else {
            "cluster"
        };
        let key = Key {
            code,
            group: attrs.group.clone(),
            resource: attrs.resource.clone(),
            scope,
            subresource: attrs.subresource.clone(),
            verb: reported_verb(method, attrs),
            version: version_of(path),
        };
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *counts.entry(key).or_insert(0) += 1;
    }

    /// Counts one pass of a built-in controller that took `took`.
    pub fn controller_pass(&self, controller: &'static str, took: std::time::Duration) {
        let mut m = self
            .controllers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let e = m.entry(controller).or_insert((0, 0.0));
        e.0 += 1;
        e.1 += took.as_secs_f64();
    }

    /// Runs `f` as one pass of `controller`, counted.
    pub fn timed<T>(&self, controller: &'static str, f: impl FnOnce() -> T) -> T {
        let started = std::time::Instant::now();
        let out = f();
        self.controller_pass(controller, started.elapsed());
        out
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let counts = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = String::from(
            "# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, group, version, resource, scope, component, and HTTP response code.\n\
             # TYPE apiserver_request_total counter\n",
        );
        for (k, n) in counts.iter() {
            let _ = writeln!(
                out,
                "apiserver_request_total{{code=\"{}\",component=\"apiserver\",dry_run=\"\",group=\"{}\",resource=\"{}\",scope=\"{}\",subresource=\"{}\",verb=\"{}\",version=\"{}\"}} {n}",
                k.code, k.group, k.resource, k.scope, k.subresource, k.verb, k.version
            );
        }
        drop(counts);
        let controllers = self
            .controllers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        out.push_str(
            "# HELP steward_dev_controller_passes_total Passes of the embedded control plane's built-in controllers.\n\
             # TYPE steward_dev_controller_passes_total counter\n",
        );
        for (c, (n, _)) in controllers.iter() {
            let _ = writeln!(
                out,
                "steward_dev_controller_passes_total{{controller=\"{c}\"}} {n}"
            );
        }
        out.push_str(
            "# HELP steward_dev_controller_seconds_total Time the built-in controllers spent in their passes, under the store's lock.\n\
             # TYPE steward_dev_controller_seconds_total counter\n",
        );
        for (c, (_, secs)) in controllers.iter() {
            let _ = writeln!(
                out,
                "steward_dev_controller_seconds_total{{controller=\"{c}\"}} {secs:.6}"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn requests_are_counted_with_upstreams_labels() {
        let m = RequestMetrics::default();
        let q = HashMap::new();
        let record = |method: Method, path: &str, code| {
            let attrs = Attributes::from_request(&method, path, &q);
            m.record(&method, path, &attrs, code);
        };
        record(Method::GET, "/api/v1/namespaces/a/pods", 200);
        record(Method::GET, "/api/v1/namespaces/a/pods", 200);
        record(Method::POST, "/api/v1/namespaces/a/pods", 201);
        record(
            Method::PATCH,
            "/apis/apps/v1/namespaces/a/deployments/d/status",
            200,
        );
        record(Method::GET, "/healthz", 200);
        let text = m.render();
        assert!(text.contains("apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 2"), "{text}");
        assert!(text.contains("resource=\"pods\",scope=\"resource\",subresource=\"\",verb=\"POST\",version=\"v1\"} 1"), "{text}");
        assert!(text.contains("group=\"apps\",resource=\"deployments\",scope=\"resource\",subresource=\"status\",verb=\"PATCH\",version=\"v1\"} 1"), "{text}");
        assert!(!text.contains("healthz"));
        assert_eq!(m.timed("scheduler", || 7), 7);
        m.controller_pass("scheduler", std::time::Duration::from_millis(500));
        let text = m.render();
        assert!(
            text.contains("steward_dev_controller_passes_total{controller=\"scheduler\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("steward_dev_controller_seconds_total{controller=\"scheduler\"} 0.50"),
            "{text}"
        );
    }
}
