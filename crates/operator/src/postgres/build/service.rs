//! (pure) The two client Services of a cluster, both ClusterIP on port 5432:
//! - `<cluster>-primary` (read-write) selects the Pod labelled `steward.dev/role=primary`. Only
//!   the operator moves that label (fail-over: demote or delete the old primary, then label and
//!   promote the new one), so clients follow the primary without a Service change;
//! - `<cluster>-replicas` (read-only) selects the ready replicas.
//!
//! Neither publishes not-ready addresses: instances reach the primary through the `-primary`
//! Service only once it is ready, and a replica that is catching up takes no reads.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use steward_api::postgres::{InstanceRole, PostgresCluster};

use crate::postgres::names::{ENGINE, PORT};
use crate::postgres::validate::ValidatedPostgresCluster;
use crate::resources::{Labels, child_meta};

/// Name of the PostgreSQL port on Services and containers.
pub const PORT_NAME: &str = "postgres";

fn role_service(
    owner: &PostgresCluster,
    cluster: &ValidatedPostgresCluster,
    name: String,
    component: &str,
    role: InstanceRole,
) -> Option<Service> {
    let labels = Labels::new(ENGINE, &cluster.name, component);
    let metadata = child_meta(owner, name, &labels, &BTreeMap::new())?;
    Some(Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(cluster.names().role_selector(role)),
            ports: Some(vec![ServicePort {
                name: Some(PORT_NAME.into()),
                port: PORT,
                target_port: Some(IntOrString::Int(PORT)),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    })
}

/// The read-write Service `<cluster>-primary`. `None` when the owner was never stored.
pub fn primary_service(
    owner: &PostgresCluster,
    cluster: &ValidatedPostgresCluster,
) -> Option<Service> {
    let name = cluster.names().primary_service();
    let mut svc = role_service(owner, cluster, name, "primary", InstanceRole::Primary)?;
    if cluster.pgbackrest.is_some()
        && let Some(ports) = svc.spec.as_mut().and_then(|s| s.ports.as_mut())
    {
        // The repository side reaches the primary's pgBackRest sidecar here.
        ports.push(super::pgbackrest::service_port());
    }
    Some(svc)
}

/// The read-only Service `<cluster>-replicas`. `None` when the owner was never stored.
pub fn replicas_service(
    owner: &PostgresCluster,
    cluster: &ValidatedPostgresCluster,
) -> Option<Service> {
    let name = cluster.names().replicas_service();
    role_service(owner, cluster, name, "replicas", InstanceRole::Replica)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::names::ROLE_LABEL;
    use crate::postgres::validate::tests::{cluster, validated};

    fn selector(svc: &Service) -> BTreeMap<String, String> {
        svc.spec.as_ref().unwrap().selector.clone().unwrap()
    }

    #[test]
    fn the_primary_service_selects_the_primary_on_5432() {
        let owner = cluster("demo", 3, "16");
        let v = validated(&owner);
        let svc = primary_service(&owner, &v).unwrap();
        assert_eq!(svc.metadata.name.as_deref(), Some("demo-primary"));
        assert_eq!(svc.metadata.namespace.as_deref(), Some("db"));
        let spec = svc.spec.as_ref().unwrap();
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
        assert_eq!(spec.cluster_ip, None, "allocated by Kubernetes");
        assert_eq!(spec.publish_not_ready_addresses, None);
        let port = &spec.ports.as_ref().unwrap()[0];
        assert_eq!((port.name.as_deref(), port.port), (Some("postgres"), 5432));
        assert_eq!(selector(&svc)[ROLE_LABEL], "primary");
        assert_eq!(
            selector(&svc),
            v.names().role_selector(InstanceRole::Primary)
        );
        let owner_ref = &svc.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner_ref.controller, Some(true));
    }

    #[test]
    fn the_replicas_service_selects_replicas_only() {
        let owner = cluster("demo", 3, "16");
        let v = validated(&owner);
        let replicas = replicas_service(&owner, &v).unwrap();
        let primary = primary_service(&owner, &v).unwrap();
        assert_eq!(replicas.metadata.name.as_deref(), Some("demo-replicas"));
        assert_eq!(selector(&replicas)[ROLE_LABEL], "replica");
        assert_ne!(selector(&replicas), selector(&primary));
        assert_ne!(
            replicas.metadata.labels, primary.metadata.labels,
            "each Service has its own component"
        );
    }

    #[test]
    fn unsaved_owners_have_no_services() {
        let mut owner = cluster("demo", 1, "16");
        let v = validated(&owner);
        owner.metadata.uid = None;
        assert!(primary_service(&owner, &v).is_none());
        assert!(replicas_service(&owner, &v).is_none());
    }
}
