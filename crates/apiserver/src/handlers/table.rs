//! Server-side printing: `meta.k8s.io/v1 Table` responses for clients that ask for them
//! (`Accept: application/json;as=Table;...`, as kubectl get does). Columns: Name, a few
//! kind-specific ones (Pods, Namespaces, Nodes, Services, core Events, CRD
//! `additionalPrinterColumns` with simple JSONPath), and Age. Rows carry the object's metadata
//! (`includeObject=Metadata`, default), the whole object (`Object`) or nothing (`None`).
//! Watches are always served as plain objects.

use serde_json::{Value, json};

use crate::meta;
use crate::registry::ResourceDef;

pub fn wants_table(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',')
            .next()
            .is_some_and(|first| first.contains("as=Table"))
    })
}

fn column(name: &str, ty: &str, format: &str, priority: i64) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": "", "priority": priority})
}

/// `5s`, `3m`, `2h`, `4d` like kubectl.
pub fn age(ts: Option<&str>) -> String {
    let Some(t) = ts.and_then(|t| t.parse::<jiff::Timestamp>().ok()) else {
        return "<unknown>".into();
    };
    let secs = (jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 8 * 3600 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s if s < 8 * 86400 => format!("{}d{}h", s / 86400, (s % 86400) / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// A small JSONPath subset: `.a.b`, `.a[0]`, `.a[?(@.k=="v")].b`.
pub fn json_path(obj: &Value, path: &str) -> Option<Value> {
    let mut cur = obj.clone();
    let mut rest = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('.');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            rest = r[end + 1..].trim_start_matches('.');
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (k, v) = filter.split_once("==")?;
                let v = v.trim().trim_matches('"').trim_matches('\'');
                cur = cur
                    .as_array()?
                    .iter()
                    .find(|i| i.get(k.trim()).and_then(Value::as_str) == Some(v))?
                    .clone();
            } else {
                cur = cur.get(inner.parse::<usize>().ok()?)?.clone();
            }
            continue;
        }
        let end = rest.find(['.', '[']).unwrap_or(rest.len());
        cur = cur.get(&rest[..end])?.clone();
        rest = rest[end..].trim_start_matches('.');
    }
    Some(cur)
}

fn cell(v: Option<Value>) -> Value {
    match v {
        None | Some(Value::Null) => json!("<none>"),
        Some(Value::String(s)) => json!(s),
        Some(Value::Array(a)) => json!(
            a.iter()
                .map(|x| x
                    .as_str()
                    .map(String::from)
                    .unwrap_or_else(|| x.to_string()))
                .collect::<Vec<_>>()
                .join(",")
        ),
        Some(other) => other,
    }
}

/// Computes the extra cells of one row.
type CellsFn = Box<dyn Fn(&Value) -> Vec<Value>>;

/// The `STATUS` column as kubectl's pod printer computes it: the phase, or the Pod's
/// `status.reason`, or the reason of the last container (in spec order) that is waiting or
/// terminated (`ExitCode:N` / `Signal:N` without one); `Completed` with a container still
/// running reads `Running`; a Pod being deleted reads `Terminating` (`Unknown` on a lost Node).
fn pod_status(o: &Value, statuses: &[Value]) -> Value {
    let mut reason = meta::get_path(o, "status.phase")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if let Some(r) = meta::get_path(o, "status.reason").and_then(Value::as_str)
        && !r.is_empty()
    {
        reason = r.to_owned();
    }
    let mut running = false;
    for c in statuses.iter().rev() {
        let state = &c["state"];
        if let Some(r) = state["waiting"]["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
        {
            reason = r.to_owned();
        } else if state["terminated"].is_object() {
            let t = &state["terminated"];
            reason = match t["reason"].as_str().filter(|r| !r.is_empty()) {
                Some(r) => r.to_owned(),
                None => match t["signal"].as_i64().filter(|s| *s != 0) {
                    Some(sig) => format!("Signal:{sig}"),
                    None => format!("ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0)),
                },
            };
        } else if state["running"].is_object() && c["ready"] == true {
            running = true;
        }
    }
    if reason == "Completed" && running {
        reason = "Running".to_owned();
    }
    if meta::is_deleting(o) {
        reason = if reason == "NodeLost" {
            "Unknown"
        } else {
            "Terminating"
        }
        .to_owned();
    }
    if reason.is_empty() {
        Value::Null
    } else {
        json!(reason)
    }
}

/// An integer field of `o`, 0 when absent (as kube-apiserver's printers show it).
fn count(o: &Value, path: &str) -> i64 {
    meta::get_path(o, path).and_then(Value::as_i64).unwrap_or(0)
}

/// The Pod template's container names and images, comma-separated.
fn containers_and_images(o: &Value) -> (String, String) {
    let containers = meta::get_path(o, "spec.template.spec.containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let field = |k: &str| {
        containers
            .iter()
            .map(|c| c[k].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
            .join(",")
    };
    (field("name"), field("image"))
}

fn kind_columns(def: &ResourceDef) -> (Vec<Value>, CellsFn) {
    let core = def.group.is_empty();
    match (core, def.kind.as_str()) {
        (true, "Pod") => (
            vec![
                column("Ready", "string", "", 0),
                column("Status", "string", "", 0),
                column("Restarts", "string", "", 0),
                column("IP", "string", "", 1),
                column("Node", "string", "", 1),
            ],
            Box::new(|o: &Value| {
                let total = meta::get_path(o, "spec.containers")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
                let statuses = meta::get_path(o, "status.containerStatuses")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let ready = statuses.iter().filter(|s| s["ready"] == true).count();
                let restarts: i64 = statuses
                    .iter()
                    .filter_map(|s| s["restartCount"].as_i64())
                    .sum();
                vec![
                    json!(format!("{ready}/{total}")),
                    pod_status(o, &statuses),
                    json!(restarts.to_string()),
                    cell(meta::get_path(o, "status.podIP").cloned()),
                    cell(meta::get_path(o, "spec.nodeName").cloned()),
                ]
            }),
        ),
        (true, "Namespace") | (true, "PersistentVolumeClaim") => (
            vec![column("Status", "string", "", 0)],
            Box::new(|o: &Value| vec![cell(meta::get_path(o, "status.phase").cloned())]),
        ),
        (true, "Node") => (
            vec![column("Status", "string", "", 0)],
            Box::new(|o: &Value| {
                let ready = json_path(o, ".status.conditions[?(@.type==\"Ready\")].status");
                vec![json!(if ready == Some(json!("True")) {
                    "Ready"
                } else {
                    "NotReady"
                })]
            }),
        ),
        (true, "Service") => (
            vec![
                column("Type", "string", "", 0),
                column("Cluster-IP", "string", "", 0),
                column("Ports", "string", "", 0),
            ],
            Box::new(|o: &Value| {
                let ports: Vec<String> = meta::get_path(o, "spec.ports")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .map(|p| format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP")))
                    .collect();
                vec![
                    cell(meta::get_path(o, "spec.type").cloned()),
                    cell(meta::get_path(o, "spec.clusterIP").cloned()),
                    json!(if ports.is_empty() {
                        "<none>".to_string()
                    } else {
                        ports.join(",")
                    }),
                ]
            }),
        ),
        (true, "Event") => (
            vec![
                column("Type", "string", "", 0),
                column("Reason", "string", "", 0),
                column("Object", "string", "", 0),
                column("Message", "string", "", 0),
            ],
            Box::new(|o: &Value| {
                let obj = format!(
                    "{}/{}",
                    o["involvedObject"]["kind"]
                        .as_str()
                        .unwrap_or_default()
                        .to_lowercase(),
                    o["involvedObject"]["name"].as_str().unwrap_or_default()
                );
                vec![
                    cell(o.get("type").cloned()),
                    cell(o.get("reason").cloned()),
                    json!(obj),
                    cell(o.get("message").cloned()),
                ]
            }),
        ),
        // As kube-apiserver's printers: `kubectl get sts|deploy|rs`.
        (false, "StatefulSet") if def.group == "apps" => (
            vec![
                column("Ready", "string", "", 0),
                column("Containers", "string", "", 1),
                column("Images", "string", "", 1),
            ],
            Box::new(|o: &Value| {
                let (containers, images) = containers_and_images(o);
                vec![
                    json!(format!(
                        "{}/{}",
                        count(o, "status.readyReplicas"),
                        count(o, "spec.replicas")
                    )),
                    json!(containers),
                    json!(images),
                ]
            }),
        ),
        (false, "Deployment") if def.group == "apps" => (
            vec![
                column("Ready", "string", "", 0),
                column("Up-to-date", "integer", "", 0),
                column("Available", "integer", "", 0),
                column("Containers", "string", "", 1),
                column("Images", "string", "", 1),
            ],
            Box::new(|o: &Value| {
                let (containers, images) = containers_and_images(o);
                vec![
                    json!(format!(
                        "{}/{}",
                        count(o, "status.readyReplicas"),
                        count(o, "spec.replicas")
                    )),
                    json!(count(o, "status.updatedReplicas")),
                    json!(count(o, "status.availableReplicas")),
                    json!(containers),
                    json!(images),
                ]
            }),
        ),
        (false, "ReplicaSet") if def.group == "apps" => (
            vec![
                column("Desired", "integer", "", 0),
                column("Current", "integer", "", 0),
                column("Ready", "integer", "", 0),
                column("Containers", "string", "", 1),
                column("Images", "string", "", 1),
            ],
            Box::new(|o: &Value| {
                let (containers, images) = containers_and_images(o);
                vec![
                    json!(count(o, "spec.replicas")),
                    json!(count(o, "status.replicas")),
                    json!(count(o, "status.readyReplicas")),
                    json!(containers),
                    json!(images),
                ]
            }),
        ),
        _ if !def.printer_columns.is_empty() => {
            let cols = def.printer_columns.clone();
            let defs = cols
                .iter()
                .map(|c| {
                    column(
                        c["name"].as_str().unwrap_or_default(),
                        c["type"].as_str().unwrap_or("string"),
                        c["format"].as_str().unwrap_or_default(),
                        c["priority"].as_i64().unwrap_or(0),
                    )
                })
                .collect();
            (
                defs,
                Box::new(move |o: &Value| {
                    cols.iter()
                        .map(|c| {
                            let v = json_path(o, c["jsonPath"].as_str().unwrap_or_default());
                            if c["type"] == "date" {
                                json!(age(v.as_ref().and_then(Value::as_str)))
                            } else {
                                cell(v)
                            }
                        })
                        .collect()
                }),
            )
        }
        _ => (Vec::new(), Box::new(|_: &Value| Vec::new())),
    }
}

pub fn table(
    def: &ResourceDef,
    objects: &[Value],
    list_meta: Value,
    include: Option<&str>,
) -> Value {
    let (extra, cells) = kind_columns(def);
    let mut columns = vec![column("Name", "string", "name", 0)];
    columns.extend(extra);
    let crd_has_age = def.printer_columns.iter().any(|c| c["name"] == "Age");
    if !crd_has_age {
        columns.push(column("Age", "string", "", 0));
    }
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut c = vec![json!(meta::name(o).unwrap_or_default())];
            c.extend(cells(o));
            if !crd_has_age {
                c.push(json!(age(meta::str_field(o, "creationTimestamp"))));
            }
            let mut row = json!({"cells": c});
            match include.unwrap_or("Metadata") {
                "None" => {}
                "Object" => row["object"] = o.clone(),
                _ => {
                    row["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                        "metadata": o.get("metadata").cloned().unwrap_or(json!({}))});
                }
            }
            row
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "columnDefinitions": columns, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    #[test]
    fn json_path_subset() {
        let o = json!({"status": {"conditions": [{"type": "A", "status": "x"}, {"type": "Ready", "status": "True"}]}, "spec": {"n": [5]}});
        assert_eq!(
            json_path(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(json!("True"))
        );
        assert_eq!(json_path(&o, ".spec.n[0]"), Some(json!(5)));
        assert_eq!(json_path(&o, ".spec.missing"), None);
    }

    #[test]
    fn workload_tables_show_readiness_as_kubectl_does() {
        let registry = Registry::with_builtins();
        let sts = registry.lookup("apps", "v1", "statefulsets").unwrap();
        let template = json!({"spec": {"containers": [{"name": "crate", "image": "crate:4.8.4"}]}});
        let o = json!({"metadata": {"name": "s", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"replicas": 3, "template": template}, "status": {"readyReplicas": 2}});
        let t = table(&sts, std::slice::from_ref(&o), json!({}), None);
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["priority"] == 0)
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "Ready", "Age"]);
        assert_eq!(t["rows"][0]["cells"][1], "2/3");
        assert_eq!(t["rows"][0]["cells"][3], "crate:4.8.4");
        let deploy = registry.lookup("apps", "v1", "deployments").unwrap();
        let t = table(&deploy, std::slice::from_ref(&o), json!({}), None);
        assert_eq!(t["rows"][0]["cells"][1], "2/3");
        assert_eq!(t["rows"][0]["cells"][3], 0, "no available replicas");
        let rs = registry.lookup("apps", "v1", "replicasets").unwrap();
        let t = table(&rs, &[o], json!({}), None);
        assert_eq!(t["rows"][0]["cells"][1], 3);
        assert_eq!(t["rows"][0]["cells"][3], 2);
    }

    #[test]
    fn pod_table() {
        let pods = Registry::with_builtins().lookup("", "v1", "pods").unwrap();
        let p = json!({"metadata": {"name": "p", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"containers": [{}], "nodeName": "n1"}, "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2}]}});
        let t = table(&pods, &[p], json!({}), None);
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "p",
                "1/1",
                "Running",
                "2",
                "<none>",
                "n1",
                age(Some("2020-01-01T00:00:00Z"))
            ])
        );
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        let status = |pod: Value| {
            let statuses = meta::get_path(&pod, "status.containerStatuses")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            pod_status(&pod, &statuses)
        };
        let done = json!({"status": {"phase": "Succeeded", "containerStatuses": [
            {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}});
        assert_eq!(status(done), json!("Completed"));
        let crashing = json!({"status": {"phase": "Running", "containerStatuses": [
            {"state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        assert_eq!(status(crashing), json!("CrashLoopBackOff"));
        let failed = json!({"status": {"phase": "Failed", "containerStatuses": [
            {"state": {"terminated": {"exitCode": 2}}}]}});
        assert_eq!(status(failed), json!("ExitCode:2"));
        let evicted = json!({"status": {"phase": "Failed", "reason": "Evicted"}});
        assert_eq!(status(evicted), json!("Evicted"));
        let deleting = json!({"metadata": {"deletionTimestamp": "2020-01-01T00:00:00Z"},
            "status": {"phase": "Running"}});
        assert_eq!(status(deleting), json!("Terminating"));
        assert!(wants_table(Some(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        )));
        assert!(!wants_table(Some("application/json")));
    }
}
