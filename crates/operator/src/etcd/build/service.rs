//! (pure) The headless Service that gives members stable DNS names and lets the operator dial
//! the cluster (seed step 1).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use steward_api::etcd::EtcdCluster;

use crate::etcd::validate::ValidatedEtcdCluster;
use crate::resources::{Labels, child_meta};

/// etcd client port.
pub const CLIENT_PORT: i32 = 2379;
/// etcd peer port.
pub const PEER_PORT: i32 = 2380;

/// The label value of member Pods' component.
pub const MEMBER_COMPONENT: &str = "member";

/// Builds the headless Service. `None` when the owner was never stored.
pub fn headless_service(owner: &EtcdCluster, cluster: &ValidatedEtcdCluster) -> Option<Service> {
    let labels = Labels::new("etcd", &cluster.name, "headless");
    let metadata = child_meta(
        owner,
        cluster.headless_service_name(),
        &labels,
        &BTreeMap::new(),
    )?;
    let selector = Labels::new("etcd", &cluster.name, MEMBER_COMPONENT).to_map();
    Some(Service {
        metadata,
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            // Members must find each other before they are ready, or bootstrap never finishes.
            publish_not_ready_addresses: Some(true),
            selector: Some(selector),
            ports: Some(vec![
                ServicePort {
                    name: Some("client".into()),
                    port: CLIENT_PORT,
                    ..Default::default()
                },
                ServicePort {
                    name: Some("peer".into()),
                    port: PEER_PORT,
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
        status: None,
    })
}

/// Builds the client Service `<cluster>-client`: a ClusterIP in front of ready members, for
/// applications. `None` when the owner was never stored.
pub fn client_service(owner: &EtcdCluster, cluster: &ValidatedEtcdCluster) -> Option<Service> {
    let labels = Labels::new("etcd", &cluster.name, "client");
    let metadata = child_meta(
        owner,
        format!("{}-client", cluster.name),
        &labels,
        &BTreeMap::new(),
    )?;
    let selector = Labels::new("etcd", &cluster.name, MEMBER_COMPONENT).to_map();
    Some(Service {
        metadata,
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(vec![ServicePort {
                name: Some("client".into()),
                port: CLIENT_PORT,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::validate::{tests::cluster, validate};

    #[test]
    fn headless_service_selects_members_and_publishes_not_ready_addresses() {
        let owner = cluster("demo", 3, "3.5.17");
        let svc = headless_service(&owner, &validate(&owner).unwrap()).unwrap();
        let spec = svc.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        assert_eq!(
            spec.selector.unwrap()["app.kubernetes.io/component"],
            "member"
        );
        assert_eq!(svc.metadata.name.as_deref(), Some("demo"));
        let ports: Vec<i32> = spec.ports.unwrap().iter().map(|p| p.port).collect();
        assert_eq!(ports, [2379, 2380]);
        let client = client_service(&owner, &validate(&owner).unwrap()).unwrap();
        assert_eq!(client.metadata.name.as_deref(), Some("demo-client"));
        let spec = client.spec.unwrap();
        assert_eq!(
            spec.cluster_ip, None,
            "a ClusterIP, allocated by Kubernetes"
        );
        assert_eq!(spec.publish_not_ready_addresses, None, "ready members only");
    }
}
