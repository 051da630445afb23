//! Hosts-file records for Services and Pods (pure): what cluster DNS would answer, as
//! `/etc/hosts` lines.

use crate::endpoints::ServiceView;

pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// One hosts line: an address, its fully qualified names, and names that only resolve from
/// the record's own namespace (the bare Service name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub ip: String,
    pub namespace: String,
    pub names: Vec<String>,
    pub local_names: Vec<String>,
}

fn service_names(name: &str, ns: &str) -> Vec<String> {
    vec![
        format!("{name}.{ns}.svc.{CLUSTER_DOMAIN}"),
        format!("{name}.{ns}.svc"),
        format!("{name}.{ns}"),
    ]
}

/// The records of every Service: its ClusterIP, or for headless Services one record per
/// published endpoint plus `<hostname>.<service>` records.
pub fn records(views: &[ServiceView]) -> Vec<Record> {
    let mut out = Vec::new();
    for v in views {
        let record = |ip: &str, names: Vec<String>, local: Vec<String>| Record {
            ip: ip.to_string(),
            namespace: v.namespace.clone(),
            names,
            local_names: local,
        };
        match &v.cluster_ip {
            Some(ip) => out.push(record(
                ip,
                service_names(&v.name, &v.namespace),
                vec![v.name.clone()],
            )),
            None => {
                for ep in v.published() {
                    out.push(record(
                        &ep.ip,
                        service_names(&v.name, &v.namespace),
                        vec![v.name.clone()],
                    ));
                    if let Some(h) = &ep.hostname {
                        let sub = format!("{h}.{}", v.name);
                        out.push(record(
                            &ep.ip,
                            service_names(&sub, &v.namespace),
                            vec![sub.clone()],
                        ));
                    }
                }
            }
        }
    }
    out
}

const HEADER: &str = "# Kubernetes-managed hosts file (steward-node).\n\
127.0.0.1\tlocalhost\n\
::1\tlocalhost ip6-localhost ip6-loopback\n\
fe00::0\tip6-localnet\n\
fe00::0\tip6-mcastprefix\n\
fe00::1\tip6-allnodes\n\
fe00::2\tip6-allrouters\n";

/// A pod's own identity in its hosts file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodIdentity {
    pub ip: String,
    pub namespace: String,
    pub name: String,
    pub hostname: String,
    pub subdomain: Option<String>,
}

/// The hosts file of a pod: its own line, then every record (with bare names for its own
/// namespace).
pub fn pod_file(pod: &PodIdentity, records: &[Record]) -> String {
    let mut out = String::from(HEADER);
    let mut own = Vec::new();
    if let Some(sub) = &pod.subdomain {
        own.push(format!(
            "{}.{sub}.{}.svc.{CLUSTER_DOMAIN}",
            pod.hostname, pod.namespace
        ));
    }
    own.push(pod.hostname.clone());
    if pod.name != pod.hostname {
        own.push(pod.name.clone());
    }
    out.push_str(&format!("{}\t{}\n", pod.ip, own.join(" ")));
    for r in records {
        let mut names = r.names.clone();
        if r.namespace == pod.namespace {
            names.extend(r.local_names.iter().cloned());
        }
        out.push_str(&format!("{}\t{}\n", r.ip, names.join(" ")));
    }
    out
}

/// The cluster-wide hosts file (fully qualified names only).
pub fn cluster_file(records: &[Record]) -> String {
    let mut out = String::from(HEADER);
    for r in records {
        out.push_str(&format!("{}\t{}\n", r.ip, r.names.join(" ")));
    }
    out
}

/// Looks `name` up like a resolver with search domains would: as written, then with
/// `.svc.cluster.local` or `.cluster.local` appended.
pub fn resolve<'a>(records: &'a [Record], name: &str) -> Option<&'a str> {
    let name = name.trim_end_matches('.');
    let candidates = [
        name.to_string(),
        format!("{name}.svc.{CLUSTER_DOMAIN}"),
        format!("{name}.{CLUSTER_DOMAIN}"),
    ];
    candidates.iter().find_map(|c| {
        records
            .iter()
            .find(|r| r.names.iter().any(|n| n.eq_ignore_ascii_case(c)))
            .map(|r| r.ip.as_str())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoints::{Endpoint, ServiceView};

    fn views() -> Vec<ServiceView> {
        let ep = |ip: &str, ready: bool, host: Option<&str>| Endpoint {
            ip: ip.into(),
            ready,
            hostname: host.map(String::from),
            ports: Default::default(),
        };
        vec![
            ServiceView {
                namespace: "ns".into(),
                name: "etcd".into(),
                cluster_ip: Some("127.96.0.10".into()),
                publish_not_ready: false,
                ports: vec![],
                endpoints: vec![ep("127.1.0.2", true, None)],
            },
            ServiceView {
                namespace: "other".into(),
                name: "peers".into(),
                cluster_ip: None,
                publish_not_ready: false,
                ports: vec![],
                endpoints: vec![
                    ep("127.1.0.2", true, Some("m-0")),
                    ep("127.1.0.3", false, Some("m-1")),
                ],
            },
        ]
    }

    #[test]
    fn pod_file_has_own_line_services_and_headless_records() {
        let pod = PodIdentity {
            ip: "127.1.0.2".into(),
            namespace: "ns".into(),
            name: "etcd-0".into(),
            hostname: "etcd-0".into(),
            subdomain: Some("etcd".into()),
        };
        let file = pod_file(&pod, &records(&views()));
        assert!(
            file.contains("127.1.0.2\tetcd-0.etcd.ns.svc.cluster.local etcd-0\n"),
            "{file}"
        );
        assert!(
            file.contains("127.96.0.10\tetcd.ns.svc.cluster.local etcd.ns.svc etcd.ns etcd\n"),
            "{file}"
        );
        assert!(
            file.contains("127.1.0.2\tpeers.other.svc.cluster.local peers.other.svc peers.other\n")
        );
        assert!(file.contains("127.1.0.2\tm-0.peers.other.svc.cluster.local"));
        assert!(
            !file.contains("127.1.0.3"),
            "not-ready endpoints are not published: {file}"
        );
        assert!(file.starts_with("# Kubernetes-managed hosts file"));
    }

    #[test]
    fn resolve_uses_search_suffixes() {
        let r = records(&views());
        assert_eq!(
            resolve(&r, "etcd.ns.svc.cluster.local"),
            Some("127.96.0.10")
        );
        assert_eq!(resolve(&r, "etcd.ns"), Some("127.96.0.10"));
        assert_eq!(resolve(&r, "m-0.peers.other"), Some("127.1.0.2"));
        assert_eq!(resolve(&r, "etcd"), None);
        assert!(
            cluster_file(&r)
                .contains("127.96.0.10\tetcd.ns.svc.cluster.local etcd.ns.svc etcd.ns\n")
        );
    }
}
