//! The etcd engine as the REST API sees it ([`ClusterApi`]): `EtcdCluster`, sized by
//! `spec.replicas`; no users, no fail-over (etcd elects its leader); backups are snapshots
//! (`EtcdBackup`) and a restore seeds a new cluster from one (`backups_api.rs`).

use kube::api::ApiResource;
use serde_json::{Value, json};
use steward_api::etcd::{EtcdCluster, EtcdClusterSpec};

use crate::api::engine::{
    BackupsApi, Capability, ClusterApi, NewCluster, Size, normalize_as, parts_as, to_json,
};
use crate::api::server::ApiError;
use crate::etcd::engine::Etcd;

/// The version a create request gets when it names none.
pub const DEFAULT_VERSION: &str = "3.4.23";

impl ClusterApi for Etcd {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn resource(&self) -> ApiResource {
        ApiResource::erase::<EtcdCluster>(&())
    }

    fn size(&self) -> Size {
        Size::Field("replicas")
    }

    fn create_spec(&self, request: &NewCluster<'_>) -> Result<Value, ApiError> {
        let spec = EtcdClusterSpec::new(
            request.instances,
            request.version.unwrap_or(DEFAULT_VERSION).to_owned(),
        );
        let mut spec = to_json(&spec)?;
        if let Some(size) = request.storage {
            crate::api::clusters::merge(&mut spec, &json!({"storage": {"size": size}}));
        }
        Ok(spec)
    }

    fn normalize(&self, spec: Value) -> Result<Value, ApiError> {
        normalize_as::<EtcdClusterSpec>(spec)
    }

    fn parts(&self, object: &Value) -> Result<(Value, Option<Value>), ApiError> {
        parts_as::<EtcdCluster, _, _>(object, |c| &c.spec, |c| c.status.as_ref())
    }

    fn refuses(&self, capability: Capability, what: &str) -> Option<String> {
        match capability {
            Capability::Failover => Some(format!(
                "{what} is for PostgreSQL clusters: etcd elects its leader itself"
            )),
            Capability::Backups => None,
            Capability::Users => Some(
                "users are for PostgreSQL and CrateDB clusters: Steward's etcd clusters have none"
                    .to_owned(),
            ),
        }
    }

    fn backups(&self) -> Option<&dyn BackupsApi> {
        Some(self)
    }
}
