//! Service endpoints as DNS and the service proxy see them (pure). Services with a selector
//! take the matching Pods directly (podIP set, not deleting, not finished; ready by the Pod's
//! Ready condition; `hostname` when the Pod's `subdomain` is the Service), so headless records
//! and `publishNotReadyAddresses` work without relying on the Endpoints controller; Services
//! without a selector use their Endpoints object.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// One Service port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    pub name: String,
    pub port: u16,
    pub protocol: String,
}

/// One endpoint address with its target port per Service port name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: String,
    pub ready: bool,
    pub hostname: Option<String>,
    pub ports: BTreeMap<String, u16>,
}

/// A Service and its endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceView {
    pub namespace: String,
    pub name: String,
    /// `None` for headless Services (and ExternalName ones).
    pub cluster_ip: Option<String>,
    pub publish_not_ready: bool,
    pub ports: Vec<Port>,
    pub endpoints: Vec<Endpoint>,
}

impl ServiceView {
    /// Endpoints DNS publishes: ready ones, plus not-ready ones with publishNotReadyAddresses.
    pub fn published(&self) -> impl Iterator<Item = &Endpoint> {
        self.endpoints
            .iter()
            .filter(|e| e.ready || self.publish_not_ready)
    }
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn resolve_target(pod: &Pod, target: Option<&IntOrString>, port: u16) -> Option<u16> {
    match target {
        None => Some(port),
        Some(IntOrString::Int(n)) => u16::try_from(*n).ok(),
        Some(IntOrString::String(s)) => s.parse().ok().or_else(|| {
            pod.spec
                .iter()
                .flat_map(|sp| &sp.containers)
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| p.name.as_deref() == Some(s.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
        }),
    }
}

fn selected(svc: &Service, pods: &[Arc<Pod>]) -> Option<Vec<Endpoint>> {
    let spec = svc.spec.as_ref()?;
    let selector = spec.selector.as_ref().filter(|s| !s.is_empty())?;
    let ns = svc.metadata.namespace.as_deref().unwrap_or("default");
    let name = svc.metadata.name.as_deref().unwrap_or_default();
    let mut out: Vec<Endpoint> = pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            let labels = p.metadata.labels.as_ref();
            selector
                .iter()
                .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        })
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            phase != Some("Succeeded") && phase != Some("Failed")
        })
        .filter_map(|p| {
            let ip = p
                .status
                .as_ref()?
                .pod_ip
                .clone()
                .filter(|ip| !ip.is_empty())?;
            let ports = spec
                .ports
                .iter()
                .flatten()
                .filter_map(|sp| {
                    let port = u16::try_from(sp.port).ok()?;
                    let target = resolve_target(p, sp.target_port.as_ref(), port)?;
                    Some((sp.name.clone().unwrap_or_default(), target))
                })
                .collect();
            let ps = p.spec.as_ref();
            let hostname = ps
                .filter(|s| s.subdomain.as_deref() == Some(name))
                .and_then(|s| s.hostname.clone());
            Some(Endpoint {
                ip,
                ready: pod_ready(p),
                hostname,
                ports,
            })
        })
        .collect();
    out.sort_by(|a, b| a.ip.cmp(&b.ip));
    Some(out)
}

fn from_endpoints(ep: Option<&Arc<Endpoints>>) -> Vec<Endpoint> {
    let mut out = Vec::new();
    for subset in ep.iter().flat_map(|e| e.subsets.iter().flatten()) {
        let ports: BTreeMap<String, u16> = subset
            .ports
            .iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    p.name.clone().unwrap_or_default(),
                    u16::try_from(p.port).ok()?,
                ))
            })
            .collect();
        for (addrs, ready) in [
            (&subset.addresses, true),
            (&subset.not_ready_addresses, false),
        ] {
            for a in addrs.iter().flatten() {
                out.push(Endpoint {
                    ip: a.ip.clone(),
                    ready,
                    hostname: a.hostname.clone(),
                    ports: ports.clone(),
                });
            }
        }
    }
    out
}

/// The latest Service views, shared by the proxy and container environments.
#[derive(Debug)]
pub struct ServiceCache {
    views: Mutex<Arc<Vec<ServiceView>>>,
    synced: tokio::sync::watch::Sender<bool>,
}

impl Default for ServiceCache {
    fn default() -> Self {
        Self {
            views: Mutex::new(Arc::new(Vec::new())),
            synced: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl ServiceCache {
    pub fn set(&self, views: Vec<ServiceView>) {
        if let Ok(mut v) = self.views.lock() {
            *v = Arc::new(views);
        }
        self.synced.send_replace(true);
    }

    pub fn get(&self) -> Arc<Vec<ServiceView>> {
        self.views.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Waits (up to `timeout`) until the first complete view is in, as kubelet waits for its
    /// Service informer before starting containers.
    pub async fn wait_synced(&self, timeout: Duration) {
        let mut rx = self.synced.subscribe();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|s| *s)).await;
    }
}

/// Every Service with its endpoints.
pub fn views(
    services: &[Arc<Service>],
    pods: &[Arc<Pod>],
    endpoints: &[Arc<Endpoints>],
) -> Vec<ServiceView> {
    let mut out: Vec<ServiceView> = services
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .map(|svc| {
            let spec = svc.spec.clone().unwrap_or_default();
            let namespace = svc
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let name = svc.metadata.name.clone().unwrap_or_default();
            let eps = selected(svc, pods).unwrap_or_else(|| {
                from_endpoints(endpoints.iter().find(|e| {
                    e.metadata.namespace.as_deref() == Some(namespace.as_str())
                        && e.metadata.name.as_deref() == Some(name.as_str())
                }))
            });
            let cluster_ip = spec
                .cluster_ip
                .clone()
                .filter(|ip| !ip.is_empty() && ip != "None")
                .filter(|_| spec.type_.as_deref() != Some("ExternalName"));
            ServiceView {
                namespace,
                name,
                cluster_ip,
                publish_not_ready: spec.publish_not_ready_addresses.unwrap_or(false),
                ports: spec
                    .ports
                    .iter()
                    .flatten()
                    .filter_map(|p| {
                        Some(Port {
                            name: p.name.clone().unwrap_or_default(),
                            port: u16::try_from(p.port).ok()?,
                            protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                        })
                    })
                    .collect(),
                endpoints: eps,
            }
        })
        .collect();
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(v: serde_json::Value) -> Arc<Service> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn pod(name: &str, ip: &str, ready: bool, extra: serde_json::Value) -> Arc<Pod> {
        let mut v = json!({
            "metadata": {"name": name, "namespace": "ns", "labels": {"app": "db"}},
            "spec": {"containers": [{"name": "c", "ports": [{"name": "client", "containerPort": 2379}]}]},
            "status": {"podIP": ip, "phase": "Running",
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        });
        if let Some(spec) = extra.get("spec") {
            for (k, val) in spec.as_object().unwrap() {
                v["spec"][k] = val.clone();
            }
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn selector_services_use_pods_with_named_ports_and_hostnames() {
        let s = svc(json!({"metadata": {"name": "db", "namespace": "ns"},
            "spec": {"clusterIP": "None", "selector": {"app": "db"}, "publishNotReadyAddresses": true,
                "ports": [{"name": "client", "port": 2379, "targetPort": "client"}]}}));
        let pods = vec![
            pod(
                "db-0",
                "127.1.0.2",
                true,
                json!({"spec": {"hostname": "db-0", "subdomain": "db"}}),
            ),
            pod("db-1", "127.1.0.3", false, json!({})),
        ];
        let v = views(&[s], &pods, &[]);
        assert_eq!(v[0].cluster_ip, None);
        assert_eq!(v[0].endpoints.len(), 2);
        assert_eq!(v[0].endpoints[0].hostname.as_deref(), Some("db-0"));
        assert_eq!(v[0].endpoints[0].ports["client"], 2379);
        assert_eq!(v[0].published().count(), 2);
    }

    #[test]
    fn selectorless_services_use_endpoints() {
        let s = svc(json!({"metadata": {"name": "ext", "namespace": "ns"},
            "spec": {"clusterIP": "127.96.0.9", "ports": [{"port": 80}]}}));
        let ep: Arc<Endpoints> = Arc::new(serde_json::from_value(json!({
            "metadata": {"name": "ext", "namespace": "ns"},
            "subsets": [{"addresses": [{"ip": "127.1.0.9"}], "notReadyAddresses": [{"ip": "127.1.0.10"}],
                "ports": [{"port": 8080}]}]})).unwrap());
        let v = views(&[s], &[], &[ep]);
        assert_eq!(v[0].cluster_ip.as_deref(), Some("127.96.0.9"));
        assert_eq!(
            v[0].published().map(|e| e.ip.as_str()).collect::<Vec<_>>(),
            vec!["127.1.0.9"]
        );
        assert_eq!(v[0].endpoints[0].ports[""], 8080);
    }
}
