//! What the operator keeps of a Service.

use k8s_openapi::api::core::v1::Service;

/// Drops what no step reads before a Service enters the shared cache: besides managed fields,
/// the spec and status. Steps only apply Services; whether an apply can be skipped is decided
/// from the metadata (`resourceVersion`, [`crate::resources::apply::Applier::apply_unless_current`]),
/// and the controllers that own Services are woken by their owner references.
pub fn slim(service: &mut Service) {
    crate::runtime::stores::slim(service);
    service.spec = None;
    service.status = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ServiceSpec;
    use kube::api::ObjectMeta;

    #[test]
    fn a_slim_service_keeps_its_metadata_only() {
        let mut service = Service {
            metadata: ObjectMeta {
                name: Some("c0".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some("None".into()),
                ..ServiceSpec::default()
            }),
            status: Some(Default::default()),
        };
        slim(&mut service);
        assert_eq!(service.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(service.metadata.name.as_deref(), Some("c0"));
        assert!(service.spec.is_none() && service.status.is_none());
    }
}
