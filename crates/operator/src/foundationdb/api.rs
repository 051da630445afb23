//! The FoundationDB engine as the REST API sees it ([`ClusterApi`]): a `FoundationDBCluster` is
//! sized by process class (`storage`, `log`, `stateless`: the "node sets" of a scale request),
//! create builds a spec from the storage count and the version, an update may not change the
//! process counts (they go through scale), and a restart recreates the Pods one fault domain at
//! a time (UpdatePods; FoundationDB's `kill` bounce is what a changed knob gets). No users, no
//! fail-over; backups are `FoundationDBBackup` resources, not yet served here.

use axum::http::StatusCode;
use kube::api::ApiResource;
use serde_json::{Value, json};
use steward_api::foundationdb::{FoundationDBCluster, FoundationDBClusterSpec, ProcessClass};

use super::engine::FoundationDb;
use crate::api::engine::{Capability, ClusterApi, NewCluster, Size, normalize_as, parts_as};
use crate::api::server::ApiError;

/// The version a create request gets when it names none.
pub const DEFAULT_VERSION: &str = "7.1.57";

/// (pure) The spec of a create request: `instances` storage process groups (at least 2, as the
/// default `double` redundancy needs), 2 log and 1 stateless.
pub fn create_spec(r: &NewCluster<'_>) -> Result<Value, ApiError> {
    if let Some(set) = r.node_set
        && set != ProcessClass::Storage.as_str()
    {
        return Err(ApiError::bad_request(format!(
            "a FoundationDB cluster is created with its storage count (nodeSet \"storage\" or none), not {set:?}; log and stateless counts are set with scale"
        )));
    }
    if r.instances < 2 {
        return Err(ApiError::bad_request(format!(
            "a FoundationDB cluster with redundancy double needs at least 2 storage processes, not {}",
            r.instances
        )));
    }
    let mut spec = json!({
        "version": r.version.unwrap_or(DEFAULT_VERSION),
        "processCounts": {"storage": r.instances, "log": 2, "stateless": 1},
    });
    if let Some(size) = r.storage {
        spec["storage"] = json!({"size": size});
    }
    Ok(spec)
}

/// (pure) `spec` with `class`'s count at `replicas`; a `400` naming the classes otherwise.
pub fn scale_spec(
    spec: &mut FoundationDBClusterSpec,
    cluster: &str,
    class: Option<&str>,
    replicas: i32,
) -> Result<(), ApiError> {
    let names = ProcessClass::ALL.map(ProcessClass::as_str).join(", ");
    let Some(class) = class else {
        return Err(ApiError::bad_request(format!(
            "{cluster} is a FoundationDB cluster sized by process class ({names}): name one with \"nodeSet\" (CLI: --node-set)"
        )));
    };
    let Some(class) = ProcessClass::ALL.into_iter().find(|c| c.as_str() == class) else {
        return Err(ApiError::bad_request(format!(
            "{cluster} has no process class {class:?}: its classes are {names}"
        )));
    };
    let replication =
        i32::try_from(spec.database_configuration.redundancy_mode.replication()).unwrap_or(3);
    let minimum = if class == ProcessClass::Stateless {
        0
    } else {
        replication
    };
    if replicas < minimum {
        return Err(ApiError::bad_request(format!(
            "{cluster} keeps {replication} copies (redundancy {}): {} needs at least {minimum} process groups, not {replicas}",
            spec.database_configuration.redundancy_mode.as_str(),
            class.as_str()
        )));
    }
    let n = u32::try_from(replicas).unwrap_or(0);
    match class {
        ProcessClass::Storage => spec.process_counts.storage = n,
        ProcessClass::Log => spec.process_counts.log = n,
        ProcessClass::Stateless => spec.process_counts.stateless = n,
    }
    Ok(())
}

impl ClusterApi for FoundationDb {
    fn name(&self) -> &'static str {
        "foundationdb"
    }

    fn resource(&self) -> ApiResource {
        ApiResource::erase::<FoundationDBCluster>(&())
    }

    fn size(&self) -> Size {
        Size::NodeSets
    }

    fn create_spec(&self, request: &NewCluster<'_>) -> Result<Value, ApiError> {
        create_spec(request)
    }

    fn normalize(&self, spec: Value) -> Result<Value, ApiError> {
        normalize_as::<FoundationDBClusterSpec>(spec)
    }

    fn parts(&self, object: &Value) -> Result<(Value, Option<Value>), ApiError> {
        parts_as::<FoundationDBCluster, _, _>(object, |c| &c.spec, |c| c.status.as_ref())
    }

    fn check_update(&self, _current: &Value, patch: &Value) -> Result<(), ApiError> {
        if patch.get("processCounts").is_some() {
            return Err(ApiError::bad_request(
                "spec.processCounts changes through POST …/scale with \"nodeSet\" naming the class (permission ScaleCluster)",
            ));
        }
        Ok(())
    }

    fn scale_node_set(
        &self,
        spec: &mut Value,
        cluster: &str,
        node_set: Option<&str>,
        replicas: i32,
    ) -> Result<(), ApiError> {
        let mut typed: FoundationDBClusterSpec =
            serde_json::from_value(spec.clone()).map_err(|e| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("reading the cluster's spec: {e}"),
                )
            })?;
        scale_spec(&mut typed, cluster, node_set, replicas)?;
        *spec = serde_json::to_value(&typed).map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("writing the spec: {e}"),
            )
        })?;
        Ok(())
    }

    fn refuses(&self, capability: Capability, what: &str) -> Option<String> {
        Some(match capability {
            Capability::Failover => {
                "a FoundationDB cluster has no primary to fail over to: its cluster controller is elected by the coordinators".to_owned()
            }
            Capability::Users => "FoundationDB has no database users".to_owned(),
            Capability::Backups => format!(
                "{what} of FoundationDB clusters are not served by the REST API yet: use FoundationDBBackup and FoundationDBRestore resources (kubectl apply; examples/foundationdb-backup.yaml)"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(instances: i32, node_set: Option<&'static str>) -> NewCluster<'static> {
        NewCluster {
            name: "demo",
            instances,
            version: None,
            storage: Some("2Gi"),
            node_set,
            extra: None,
        }
    }

    #[test]
    fn create_and_scale_name_the_process_class() {
        let spec = create_spec(&request(3, None)).unwrap();
        let mut typed: FoundationDBClusterSpec = serde_json::from_value(spec).unwrap();
        assert_eq!(typed.process_counts.storage, 3);
        assert_eq!(typed.storage.size, "2Gi");
        assert!(create_spec(&request(1, None)).is_err());
        assert!(create_spec(&request(3, Some("log"))).is_err());
        scale_spec(&mut typed, "demo", Some("storage"), 5).unwrap();
        assert_eq!(typed.process_counts.storage, 5);
        assert!(scale_spec(&mut typed, "demo", None, 5).is_err());
        assert!(scale_spec(&mut typed, "demo", Some("proxy"), 5).is_err());
        assert!(scale_spec(&mut typed, "demo", Some("log"), 1).is_err());
        scale_spec(&mut typed, "demo", Some("stateless"), 0).unwrap();
        assert_eq!(typed.process_counts.stateless, 0);
        assert!(
            FoundationDb
                .refuses(Capability::Backups, "backups")
                .is_some()
        );
    }
}
