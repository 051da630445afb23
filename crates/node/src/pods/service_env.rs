//! Kubelet's Service environment variables (`<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT`,
//! `<NAME>_SERVICE_PORT_<PORT>` and the Docker-link style `<NAME>_PORT_…`) for the Services of
//! the pod's namespace with a ClusterIP (all of them with `enableServiceLinks`, otherwise only
//! `kubernetes` from `default`).

use crate::endpoints::ServiceView;

fn env_name(s: &str) -> String {
    s.to_ascii_uppercase().replace('-', "_")
}

fn one(v: &ServiceView, ip: &str, out: &mut Vec<(String, String)>) {
    let name = env_name(&v.name);
    out.push((format!("{name}_SERVICE_HOST"), ip.to_string()));
    let Some(first) = v.ports.first() else {
        return;
    };
    out.push((format!("{name}_SERVICE_PORT"), first.port.to_string()));
    for p in v.ports.iter().filter(|p| !p.name.is_empty()) {
        out.push((
            format!("{name}_SERVICE_PORT_{}", env_name(&p.name)),
            p.port.to_string(),
        ));
    }
    let proto = |p: &str| p.to_ascii_lowercase();
    out.push((
        format!("{name}_PORT"),
        format!("{}://{ip}:{}", proto(&first.protocol), first.port),
    ));
    for p in &v.ports {
        let prefix = format!("{name}_PORT_{}_{}", p.port, p.protocol.to_ascii_uppercase());
        out.push((
            prefix.clone(),
            format!("{}://{ip}:{}", proto(&p.protocol), p.port),
        ));
        out.push((format!("{prefix}_PROTO"), proto(&p.protocol)));
        out.push((format!("{prefix}_PORT"), p.port.to_string()));
        out.push((format!("{prefix}_ADDR"), ip.to_string()));
    }
}

/// The variables for a pod in `namespace`.
pub fn service_env(views: &[ServiceView], namespace: &str, links: bool) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for v in views {
        let Some(ip) = v.cluster_ip.as_deref() else {
            continue;
        };
        let master = v.namespace == "default" && v.name == "kubernetes";
        if master || (links && v.namespace == namespace) {
            one(v, ip, &mut out);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoints::Port;

    #[test]
    fn variables_follow_kubelet() {
        let view = |ns: &str, name: &str, ip: Option<&str>| ServiceView {
            namespace: ns.into(),
            name: name.into(),
            cluster_ip: ip.map(String::from),
            publish_not_ready: false,
            ports: vec![
                Port {
                    name: "client".into(),
                    port: 2379,
                    protocol: "TCP".into(),
                },
                Port {
                    name: "peer-x".into(),
                    port: 2380,
                    protocol: "TCP".into(),
                },
            ],
            endpoints: vec![],
        };
        let views = vec![
            view("ns", "my-db", Some("127.96.0.5")),
            view("ns", "headless", None),
            view("other", "x", Some("127.96.0.6")),
        ];
        let env = service_env(&views, "ns", true);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("MY_DB_SERVICE_HOST"), Some("127.96.0.5"));
        assert_eq!(get("MY_DB_SERVICE_PORT"), Some("2379"));
        assert_eq!(get("MY_DB_SERVICE_PORT_PEER_X"), Some("2380"));
        assert_eq!(get("MY_DB_PORT"), Some("tcp://127.96.0.5:2379"));
        assert_eq!(get("MY_DB_PORT_2380_TCP_ADDR"), Some("127.96.0.5"));
        assert_eq!(get("HEADLESS_SERVICE_HOST"), None);
        assert_eq!(get("X_SERVICE_HOST"), None);
        assert!(service_env(&views, "ns", false).is_empty());
    }
}
