//! (pure) The two Services: `crate-discovery-<cluster>`, headless, through which nodes find each
//! other (stable Pod DNS names for the StatefulSets, transport 4300; it publishes not-ready
//! addresses, since a node must be found before it can be ready), and `crate-<cluster>`, the
//! clients' Service (HTTP 4200, PostgreSQL 5432) over every node.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use steward_api::cratedb::CrateCluster;

use crate::cratedb::names::{ClusterNames, ENGINE, HTTP_PORT, PSQL_PORT, TRANSPORT_PORT};
use crate::resources::{Labels, child_meta};

fn port(name: &str, port: i32) -> ServicePort {
    ServicePort {
        name: Some(name.to_owned()),
        port,
        target_port: Some(IntOrString::Int(port)),
        protocol: Some("TCP".to_owned()),
        ..Default::default()
    }
}

/// The headless discovery Service. `None` when the owner was never stored.
pub fn discovery(owner: &CrateCluster, names: &ClusterNames) -> Option<Service> {
    let labels = Labels::new(ENGINE, &names.name, "discovery");
    let metadata = child_meta(owner, names.discovery_service(), &labels, &BTreeMap::new())?;
    Some(Service {
        metadata,
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            publish_not_ready_addresses: Some(true),
            selector: Some(Labels::cluster_labels(ENGINE, &names.name)),
            ports: Some(vec![port("transport", TRANSPORT_PORT)]),
            ..Default::default()
        }),
        status: None,
    })
}

/// The client Service. `None` when the owner was never stored.
pub fn client(owner: &CrateCluster, names: &ClusterNames) -> Option<Service> {
    let labels = Labels::new(ENGINE, &names.name, "client");
    let metadata = child_meta(owner, names.client_service(), &labels, &BTreeMap::new())?;
    Some(Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(Labels::cluster_labels(ENGINE, &names.name)),
            ports: Some(vec![port("http", HTTP_PORT), port("postgres", PSQL_PORT)]),
            ..Default::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cratedb::validate::tests::cluster;

    #[test]
    fn discovery_is_headless_and_clients_get_http_and_postgres() {
        let names = ClusterNames::new("c1", "db", "cluster.local");
        let d = discovery(&cluster(), &names).unwrap();
        let spec = d.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        assert_eq!(spec.ports.unwrap()[0].port, 4300);
        let c = client(&cluster(), &names).unwrap();
        assert_eq!(c.metadata.name.as_deref(), Some("crate-c1"));
        let ports: Vec<i32> = c
            .spec
            .unwrap()
            .ports
            .unwrap()
            .iter()
            .map(|p| p.port)
            .collect();
        assert_eq!(ports, [4200, 5432]);
    }
}
