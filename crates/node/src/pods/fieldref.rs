//! Values of `fieldRef` and `resourceFieldRef` selectors (downward API), computed from the Pod.

use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector};

use super::status::HOST_IP;

/// The value of a `fieldRef.fieldPath` for `pod` with the agent-assigned `pod_ip`.
pub fn field(pod: &Pod, path: &str, pod_ip: &str) -> Result<String, String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let map_key = |prefix: &str| -> Option<String> {
        let rest = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(rest.to_string())
    };
    if let Some(key) = map_key("metadata.labels['") {
        return Ok(meta
            .labels
            .as_ref()
            .and_then(|l| l.get(&key))
            .cloned()
            .unwrap_or_default());
    }
    if let Some(key) = map_key("metadata.annotations['") {
        return Ok(meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(&key))
            .cloned()
            .unwrap_or_default());
    }
    let joined = |m: Option<&std::collections::BTreeMap<String, String>>| {
        m.map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}=\"{v}\""))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
    };
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => joined(meta.labels.as_ref()),
        "metadata.annotations" => joined(meta.annotations.as_ref()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.podIPs" => pod_ip.to_string(),
        "status.hostIP" | "status.hostIPs" => HOST_IP.to_string(),
        other => return Err(format!("unsupported fieldPath {other:?}")),
    })
}

/// The value of a `resourceFieldRef`: the container's request or limit as written, or the
/// node's capacity for an unset limit (as kubelet reports it), divided by `divisor` for the
/// common cases (`1`, `1m` for cpu; `1`, `1Ki`, `1Mi`, `1Gi` for memory).
pub fn resource(
    container: &Container,
    sel: &ResourceFieldSelector,
    node_cpus: u64,
    node_memory_bytes: u64,
) -> Result<String, String> {
    let resources = container.resources.as_ref();
    let (kind, name) = sel
        .resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported resource {:?}", sel.resource))?;
    let set = match kind {
        "limits" => resources.and_then(|r| r.limits.as_ref()),
        "requests" => resources.and_then(|r| r.requests.as_ref()),
        _ => return Err(format!("unsupported resource {:?}", sel.resource)),
    };
    let quantity = set.and_then(|m| m.get(name)).map(|q| q.0.clone());
    let divisor = sel.divisor.as_ref().map(|d| d.0.as_str()).unwrap_or("1");
    match name {
        "cpu" => {
            let millis = match &quantity {
                Some(q) => parse_cpu_millis(q)?,
                None if kind == "limits" => node_cpus * 1000,
                None => 0,
            };
            Ok(match divisor {
                "1m" => millis.to_string(),
                _ => millis.div_ceil(1000).to_string(),
            })
        }
        "memory" | "ephemeral-storage" => {
            let bytes = match &quantity {
                Some(q) => parse_bytes(q)?,
                None if kind == "limits" => node_memory_bytes,
                None => 0,
            };
            let div = parse_bytes(divisor)?.max(1);
            Ok(bytes.div_ceil(div).to_string())
        }
        _ => Ok(quantity.unwrap_or_else(|| "0".into())),
    }
}

fn parse_cpu_millis(q: &str) -> Result<u64, String> {
    if let Some(m) = q.strip_suffix('m') {
        return m.parse().map_err(|_| format!("bad cpu quantity {q:?}"));
    }
    q.parse::<f64>()
        .map(|c| (c * 1000.0).ceil() as u64)
        .map_err(|_| format!("bad cpu quantity {q:?}"))
}

fn parse_bytes(q: &str) -> Result<u64, String> {
    const SUFFIXES: [(&str, u64); 12] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("Ei", 1 << 60),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("E", 1_000_000_000_000_000_000),
    ];
    for (s, mult) in SUFFIXES {
        if let Some(n) = q.strip_suffix(s) {
            return n
                .parse::<u64>()
                .map(|n| n * mult)
                .map_err(|_| format!("bad quantity {q:?}"));
        }
    }
    q.parse().map_err(|_| format!("bad quantity {q:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use kube::api::ObjectMeta;

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                uid: Some("u-1".into()),
                labels: Some([("app".to_string(), "db".to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn field_paths() {
        let p = pod();
        assert_eq!(field(&p, "metadata.name", "127.1.0.2").unwrap(), "p");
        assert_eq!(field(&p, "metadata.labels['app']", "").unwrap(), "db");
        assert_eq!(field(&p, "metadata.annotations['x']", "").unwrap(), "");
        assert_eq!(field(&p, "status.podIP", "127.1.0.2").unwrap(), "127.1.0.2");
        assert_eq!(field(&p, "status.hostIP", "").unwrap(), "127.0.0.1");
        assert_eq!(field(&p, "spec.nodeName", "").unwrap(), "n1");
        assert!(field(&p, "spec.bogus", "").is_err());
    }

    #[test]
    fn resources() {
        let c = Container {
            resources: Some(ResourceRequirements {
                limits: Some([("memory".to_string(), Quantity("64Mi".into()))].into()),
                requests: Some([("cpu".to_string(), Quantity("250m".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let sel = |r: &str, d: Option<&str>| ResourceFieldSelector {
            resource: r.into(),
            divisor: d.map(|d| Quantity(d.into())),
            container_name: None,
        };
        assert_eq!(
            resource(&c, &sel("limits.memory", Some("1Mi")), 2, 0).unwrap(),
            "64"
        );
        assert_eq!(
            resource(&c, &sel("requests.cpu", Some("1m")), 2, 0).unwrap(),
            "250"
        );
        assert_eq!(resource(&c, &sel("requests.cpu", None), 2, 0).unwrap(), "1");
        assert_eq!(resource(&c, &sel("limits.cpu", None), 2, 0).unwrap(), "2");
    }
}
