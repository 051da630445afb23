//! Where a streaming Pod request goes, decided from the store alone with the real server's
//! checks, order and wording: the URL, the Pod, the container (`validateContainer`), the
//! binding, the Node and its kubelet address; and the query passed to the kubelet. Pure.

use std::net::SocketAddr;

use serde_json::Value;

use crate::meta;
use crate::registry::GroupResource;
use crate::status::{ApiError, ApiResult};

/// kubelet's default port, used when a Node does not publish one.
const DEFAULT_KUBELET_PORT: i64 = 10250;

/// A streaming subresource request: `/api/v1/namespaces/{ns}/pods/{name}/{log|exec|attach}`.
pub struct StreamTarget {
    pub ns: String,
    pub name: String,
    pub sub: Sub,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sub {
    Log,
    Exec,
    Attach,
}

impl Sub {
    pub fn kubelet_path(self) -> &'static str {
        match self {
            Self::Log => "containerLogs",
            Self::Exec => "exec",
            Self::Attach => "attach",
        }
    }
}

/// Recognises the streaming subresource URLs (other Pod subresources go through `route`).
pub fn match_path(path: &str) -> Option<StreamTarget> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["api", "v1", "namespaces", ns, "pods", name, sub] => {
            let sub = match *sub {
                "log" => Sub::Log,
                "exec" => Sub::Exec,
                "attach" => Sub::Attach,
                _ => return None,
            };
            Some(StreamTarget {
                ns: (*ns).to_string(),
                name: (*name).to_string(),
                sub,
            })
        }
        _ => None,
    }
}

/// Where a streaming request goes.
#[derive(Debug, PartialEq)]
pub struct Location {
    pub addr: SocketAddr,
    pub container: String,
}

/// The container the request names (or the Pod's only container), as the real
/// `validateContainer` decides: several containers and none named → 400 listing all of them
/// (init, regular, ephemeral); an unknown name → 400.
pub fn container_for(pod: &Value, requested: Option<&str>) -> ApiResult<String> {
    let pod_name = meta::name(pod).unwrap_or_default();
    let names_of = |field: &str| -> Vec<String> {
        meta::get_path(pod, field)
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c.get("name").and_then(Value::as_str).map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let regular = names_of("spec.containers");
    let mut all = names_of("spec.initContainers");
    all.extend(regular.iter().cloned());
    all.extend(names_of("spec.ephemeralContainers"));
    match requested.filter(|c| !c.is_empty()) {
        Some(c) if all.iter().any(|n| n == c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {pod_name}"
        ))),
        None => match regular.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {pod_name}"
            ))),
            _ => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                all.join(" ")
            ))),
        },
    }
}

/// The kubelet address of a Node: the first InternalIP (then ExternalIP, Hostname,
/// InternalDNS, ExternalDNS) and `status.daemonEndpoints.kubeletEndpoint.Port` (10250 when
/// unset).
pub fn kubelet_addr(node: &Value) -> ApiResult<SocketAddr> {
    let addresses = meta::get_path(node, "status.addresses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let port = meta::get_path(node, "status.daemonEndpoints.kubeletEndpoint.Port")
        .and_then(Value::as_i64)
        .filter(|p| *p > 0)
        .unwrap_or(DEFAULT_KUBELET_PORT);
    let port = u16::try_from(port)
        .map_err(|_| ApiError::internal(format!("invalid kubelet port {port}")))?;
    for kind in [
        "InternalIP",
        "ExternalIP",
        "Hostname",
        "InternalDNS",
        "ExternalDNS",
    ] {
        for a in addresses.iter().filter(|a| a["type"] == kind) {
            if let Some(ip) = a["address"].as_str().and_then(|s| s.parse().ok()) {
                return Ok(SocketAddr::new(ip, port));
            }
        }
    }
    let known: Vec<String> = addresses
        .iter()
        .map(|a| {
            format!(
                "{{{} {}}}",
                a["type"].as_str().unwrap_or_default(),
                a["address"].as_str().unwrap_or_default()
            )
        })
        .collect();
    Err(ApiError::internal(format!(
        "no preferred addresses found; known addresses: [{}]",
        known.join(" ")
    )))
}

/// Resolves a request against the store: the Pod (404), the container (400), the binding
/// (logs of an unbound Pod are empty: `Ok(None)`; exec/attach → 400) and the Node (404).
pub fn locate(
    sub: Sub,
    pod: Option<&Value>,
    name: &str,
    container: Option<&str>,
    node: impl FnOnce(&str) -> Option<Value>,
) -> ApiResult<Option<Location>> {
    let pod = pod.ok_or_else(|| ApiError::not_found(&GroupResource::new("", "pods"), name))?;
    let container = container_for(pod, container)?;
    let Some(node_name) = meta::get_path(pod, "spec.nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    else {
        return match sub {
            Sub::Log => Ok(None),
            Sub::Exec | Sub::Attach => Err(ApiError::bad_request(format!(
                "pod {name} does not have a host assigned"
            ))),
        };
    };
    let node = node(node_name)
        .ok_or_else(|| ApiError::not_found(&GroupResource::new("", "nodes"), node_name))?;
    Ok(Some(Location {
        addr: kubelet_addr(&node)?,
        container,
    }))
}

fn truthy(v: &str) -> bool {
    matches!(v, "true" | "1" | "True" | "TRUE")
}

/// The kubelet query for a request's parameters: log options as the real server passes them
/// (`follow`, `previous`, `timestamps`, `sinceSeconds`, `sinceTime`, `tailLines`,
/// `limitBytes`, `stream`), or for exec and attach the kubelet's own parameter names, as the
/// real server's pod strategy (`streamParams`) writes them: `command` (repeated, exec only),
/// then `error`, `input`, `output`, `tty` set to `1` for each of the client's `stderr`,
/// `stdin`, `stdout`, `tty` that is true and left out otherwise (keys in Go's sorted order).
pub fn kubelet_query(sub: Sub, params: &[(String, String)]) -> ApiResult<String> {
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let mut q = form_urlencoded::Serializer::new(String::new());
    match sub {
        Sub::Log => {
            for flag in ["follow", "previous", "timestamps"] {
                if get(flag).is_some_and(truthy) {
                    q.append_pair(flag, "true");
                }
            }
            for num in ["sinceSeconds", "tailLines", "limitBytes"] {
                if let Some(v) = get(num) {
                    let n: i64 = v
                        .parse()
                        .map_err(|_| ApiError::bad_request(format!("invalid {num} value {v:?}")))?;
                    q.append_pair(num, &n.to_string());
                }
            }
            for passed in ["sinceTime", "stream"] {
                if let Some(v) = get(passed) {
                    q.append_pair(passed, v);
                }
            }
        }
        Sub::Exec | Sub::Attach => {
            if sub == Sub::Exec {
                for (_, c) in params.iter().filter(|(n, _)| n == "command") {
                    q.append_pair("command", c);
                }
            }
            // k8s.io/api/core/v1: ExecStderrParam, ExecStdinParam, ExecStdoutParam, ExecTTYParam.
            for (client, kubelet) in [
                ("stderr", "error"),
                ("stdin", "input"),
                ("stdout", "output"),
                ("tty", "tty"),
            ] {
                if get(client).is_some_and(truthy) {
                    q.append_pair(kubelet, "1");
                }
            }
        }
    }
    Ok(q.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: &[&str], init: &[&str], node: Option<&str>) -> Value {
        let list = |names: &[&str]| -> Value {
            names
                .iter()
                .map(|n| json!({"name": n, "image": "busybox:1"}))
                .collect()
        };
        let mut p = json!({"metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": list(containers), "initContainers": list(init)}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        p
    }

    fn node(addresses: Value, port: Option<i64>) -> Value {
        let mut n = json!({"metadata": {"name": "n1"}, "status": {"addresses": addresses}});
        if let Some(p) = port {
            n["status"]["daemonEndpoints"] = json!({"kubeletEndpoint": {"Port": p}});
        }
        n
    }

    #[test]
    fn containers_default_and_errors_match_the_real_server() {
        let one = pod(&["app"], &[], None);
        assert_eq!(container_for(&one, None).unwrap(), "app");
        let two = pod(&["a", "b"], &["setup"], None);
        assert_eq!(
            container_for(&two, None).unwrap_err().message,
            "a container name must be specified for pod web, choose one of: [setup a b]"
        );
        assert_eq!(container_for(&two, Some("setup")).unwrap(), "setup");
        let bad = container_for(&two, Some("zz")).unwrap_err();
        assert_eq!(
            (bad.code, bad.message.as_str()),
            (400, "container zz is not valid for pod web")
        );
    }

    #[test]
    fn location_needs_a_bound_pod_and_an_existing_node() {
        let missing = locate(Sub::Log, None, "web", None, |_| None).unwrap_err();
        assert_eq!(
            (missing.code, missing.message.as_str()),
            (404, "pods \"web\" not found")
        );
        let unbound = pod(&["app"], &[], None);
        assert_eq!(
            locate(Sub::Log, Some(&unbound), "web", None, |_| None),
            Ok(None)
        );
        let e = locate(Sub::Exec, Some(&unbound), "web", None, |_| None).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "pod web does not have a host assigned")
        );
        let bound = pod(&["app"], &[], Some("n1"));
        let e = locate(Sub::Exec, Some(&bound), "web", None, |_| None).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (404, "nodes \"n1\" not found")
        );
        let n = node(
            json!([{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "127.0.0.9"}]),
            Some(10999),
        );
        let loc = locate(Sub::Exec, Some(&bound), "web", None, |_| Some(n.clone()))
            .unwrap()
            .unwrap();
        assert_eq!(loc.addr, "127.0.0.9:10999".parse().unwrap());
        assert_eq!(loc.container, "app");
        let no_port = node(
            json!([{"type": "InternalIP", "address": "127.0.0.9"}]),
            None,
        );
        assert_eq!(kubelet_addr(&no_port).unwrap().port(), 10250);
        assert_eq!(
            kubelet_addr(&node(json!([{"type": "Hostname", "address": "n1"}]), None))
                .unwrap_err()
                .message,
            "no preferred addresses found; known addresses: [{Hostname n1}]"
        );
    }

    #[test]
    fn kubelet_queries() {
        let p = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect()
        };
        assert_eq!(
            kubelet_query(
                Sub::Log,
                &p(&[
                    ("follow", "true"),
                    ("tailLines", "10"),
                    ("container", "c"),
                    ("previous", "false")
                ])
            )
            .unwrap(),
            "follow=true&tailLines=10"
        );
        assert!(kubelet_query(Sub::Log, &p(&[("tailLines", "x")])).is_err());
        assert_eq!(
            kubelet_query(
                Sub::Exec,
                &p(&[
                    ("command", "sh"),
                    ("command", "-c"),
                    ("command", "echo hi"),
                    ("stdout", "true"),
                    ("stdin", "1")
                ])
            )
            .unwrap(),
            "command=sh&command=-c&command=echo+hi&input=1&output=1"
        );
        assert_eq!(
            kubelet_query(
                Sub::Attach,
                &p(&[
                    ("command", "ignored"),
                    ("stderr", "true"),
                    ("stdout", "false"),
                    ("tty", "true")
                ])
            )
            .unwrap(),
            "error=1&tty=1"
        );
        assert!(match_path("/api/v1/namespaces/default/pods/web/exec").is_some());
        assert!(match_path("/api/v1/namespaces/default/pods/web/status").is_none());
    }
}
