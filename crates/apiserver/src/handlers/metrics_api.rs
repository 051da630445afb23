//! `metrics.k8s.io/v1beta1` as metrics-server serves it behind a real API server
//! (`pkg/api/node.go`, `pod.go`, `table.go`): `nodes` (cluster-scoped) and `pods` (namespaced,
//! or across namespaces), `get` and `list` only, with label and field selectors; `NodeMetrics`
//! and `PodMetrics` built from the embedded scraper's points (`crate::resource_metrics`), for
//! the Nodes and Running Pods the store holds that have them; `as=Table` answers with
//! metrics-server's columns. RBAC has already been applied to the request like any other.

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::{Request, json_response, table};
use crate::meta;
use crate::registry::GroupResource;
use crate::resource_metrics::{PodKey, TimeInfo, Usage, format};
use crate::selectors::{FieldSelector, LabelSelector, Selectors};
use crate::status::{ApiError, ApiResult};

pub const GROUP: &str = "metrics.k8s.io";
pub const VERSION: &str = "v1beta1";
const API_VERSION: &str = "metrics.k8s.io/v1beta1";

/// The group's discovery document, as the aggregated metrics-server publishes it.
pub fn resource_list() -> Value {
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": API_VERSION,
    "resources": [
        {"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get", "list"]},
        {"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": ["get", "list"]}
    ]})
}

/// `/apis/metrics.k8s.io/v1beta1/<rest>`.
pub fn serve(req: &Request, rest: &[&str]) -> ApiResult<Response> {
    enum What<'a> {
        Nodes(Option<&'a str>),
        Pods(Option<&'a str>, Option<&'a str>),
    }
    let what = match rest {
        ["nodes"] => What::Nodes(None),
        ["nodes", name] => What::Nodes(Some(name)),
        ["pods"] => What::Pods(None, None),
        ["namespaces", ns, "pods"] => What::Pods(Some(ns), None),
        ["namespaces", ns, "pods", name] => What::Pods(Some(ns), Some(name)),
        _ => return Err(ApiError::no_route()),
    };
    if req.method != Method::GET || req.flag("watch") {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({}{})",
            req.method,
            if req.flag("watch") { " watch" } else { "" }
        )));
    }
    match what {
        What::Nodes(None) => list(req, "nodes", None),
        What::Nodes(Some(name)) => get(req, "nodes", "", name),
        What::Pods(ns, None) => list(req, "pods", ns),
        What::Pods(ns, Some(name)) => get(req, "pods", ns.unwrap_or_default(), name),
    }
}

fn selectors(req: &Request, plural: &str) -> ApiResult<Selectors> {
    let labels = match req.q("labelSelector") {
        Some(s) => LabelSelector::parse(s).map_err(ApiError::bad_request)?,
        None => LabelSelector::default(),
    };
    let fields = match req.q("fieldSelector") {
        Some(s) => {
            let def = req
                .server
                .lock()
                .registry
                .lookup("", "v1", plural)
                .ok_or_else(ApiError::no_route)?;
            FieldSelector::parse(s, &def).map_err(ApiError::bad_request)?
        }
        None => FieldSelector::default(),
    };
    Ok(Selectors { labels, fields })
}

fn list(req: &Request, plural: &str, ns: Option<&str>) -> ApiResult<Response> {
    let sel = selectors(req, plural)?;
    let mut objects: Vec<Value> = {
        let state = req.server.lock();
        state
            .list(&GroupResource::new("", plural), ns)
            .filter(|o| sel.matches(o))
            .cloned()
            .collect()
    };
    objects.sort_by(|a, b| {
        (meta::namespace(a), meta::name(a)).cmp(&(meta::namespace(b), meta::name(b)))
    });
    let items: Vec<(Value, Usage)> = objects
        .iter()
        .filter_map(|o| metrics_of(req, plural, o))
        .collect();
    if table::wants_table(req.header("accept")) {
        return Ok(json_response(
            StatusCode::OK,
            &to_table(&items, req.q("includeObject")),
        ));
    }
    let items: Vec<Value> = items.into_iter().map(|(item, _)| item).collect();
    let kind = if plural == "nodes" {
        "NodeMetricsList"
    } else {
        "PodMetricsList"
    };
    Ok(json_response(
        StatusCode::OK,
        &json!({"kind": kind, "apiVersion": API_VERSION, "metadata": {}, "items": items}),
    ))
}

fn get(req: &Request, plural: &str, ns: &str, name: &str) -> ApiResult<Response> {
    let object = req
        .server
        .lock()
        .get(&GroupResource::new("", plural), ns, name)
        .cloned();
    // The object's own absence is the informer lister's error (singular resource name).
    let singular = plural.trim_end_matches('s');
    let object =
        object.ok_or_else(|| ApiError::not_found(&GroupResource::new("", singular), name))?;
    let metrics_name = if ns.is_empty() {
        name.to_string()
    } else {
        format!("{ns}/{name}")
    };
    let found = metrics_of(req, plural, &object)
        .ok_or_else(|| ApiError::not_found(&GroupResource::new(GROUP, plural), &metrics_name))?;
    if table::wants_table(req.header("accept")) {
        return Ok(json_response(
            StatusCode::OK,
            &to_table(std::slice::from_ref(&found), req.q("includeObject")),
        ));
    }
    let mut item = found.0;
    item["kind"] = json!(if plural == "nodes" {
        "NodeMetrics"
    } else {
        "PodMetrics"
    });
    item["apiVersion"] = json!(API_VERSION);
    Ok(json_response(StatusCode::OK, &item))
}

fn usage_json(u: &Usage) -> Value {
    json!({"cpu": format::cpu(u.cpu_nanocores), "memory": format::memory(u.memory)})
}

fn metadata(object: &Value, namespaced: bool) -> Value {
    let mut md = json!({"name": meta::name(object).unwrap_or_default()});
    if namespaced {
        md["namespace"] = json!(meta::namespace(object).unwrap_or_default());
    }
    md["creationTimestamp"] = json!(meta::now());
    let labels = meta::labels(object);
    if !labels.is_empty() {
        md["labels"] = Value::Object(labels);
    }
    md
}

fn times(ti: &TimeInfo) -> (Value, Value) {
    let at = ti.at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    (json!(at), json!(format::go_duration(ti.window)))
}

/// The metrics item of a Node or a Pod (only Running Pods have one), when it has figures, and
/// its total usage (a Pod's summed over its containers).
fn metrics_of(req: &Request, plural: &str, object: &Value) -> Option<(Value, Usage)> {
    let name = meta::name(object)?;
    let store = &req.server.resource_metrics;
    if plural == "nodes" {
        let (ti, usage) = store.node(name)?;
        let (timestamp, window) = times(&ti);
        let item = json!({"metadata": metadata(object, false), "timestamp": timestamp,
            "window": window, "usage": usage_json(&usage)});
        return Some((item, usage));
    }
    if meta::get_path(object, "status.phase").and_then(Value::as_str) != Some("Running") {
        return None;
    }
    let key: PodKey = (
        meta::namespace(object).unwrap_or_default().to_string(),
        name.to_string(),
    );
    let (ti, containers) = store.pod(&key)?;
    let (timestamp, window) = times(&ti);
    let total = Usage {
        cpu_nanocores: containers.iter().map(|(_, u)| u.cpu_nanocores).sum(),
        memory: containers.iter().map(|(_, u)| u.memory).sum(),
    };
    let containers: Vec<Value> = containers
        .iter()
        .map(|(c, u)| json!({"name": c, "usage": usage_json(u)}))
        .collect();
    let item = json!({"metadata": metadata(object, true), "timestamp": timestamp,
        "window": window, "containers": containers});
    Some((item, total))
}

/// metrics-server's table: Name, cpu, memory (a Pod's summed over its containers), Window.
fn to_table(items: &[(Value, Usage)], include: Option<&str>) -> Value {
    let column = |name: &str, format: &str, description: &str| json!({"name": name, "type": "string", "format": format, "description": description, "priority": 0});
    let columns = vec![
        column("Name", "name", "Name of the resource"),
        column("cpu", "quantity", ""),
        column("memory", "quantity", ""),
        column("Window", "duration", ""),
    ];
    let rows: Vec<Value> = items
        .iter()
        .map(|(item, total)| {
            let cells = json!([
                item["metadata"]["name"],
                format::cpu(total.cpu_nanocores),
                format::memory(total.memory),
                item["window"]
            ]);
            let mut row = json!({"cells": cells});
            match include.unwrap_or("Metadata") {
                "None" => {}
                "Object" => row["object"] = item.clone(),
                _ => {
                    row["object"] = json!({"kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1", "metadata": item["metadata"]});
                }
            }
            row
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {},
        "columnDefinitions": columns, "rows": rows})
}
