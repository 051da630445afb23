//! The FoundationDB engine as the REST API sees it ([`ClusterApi`]): a `FoundationDBCluster` is
//! sized by process class (`storage`, `log`, `stateless`: the "node sets" of a scale request),
//! create builds a spec from the storage count and the version, an update may not change the
//! process counts (they go through scale), and a restart recreates the Pods one fault domain at
//! a time (UpdatePods; FoundationDB's `kill` bounce is what a changed knob gets). No users, no
//! fail-over. Backups are continuous `FoundationDBBackup`s (one per cluster, `<cluster>-backup`),
//! restores `FoundationDBRestore`s to a version.

use axum::http::StatusCode;
use kube::api::ApiResource;
use serde_json::{Value, json};
use steward_api::foundationdb::{FoundationDBCluster, FoundationDBClusterSpec, ProcessClass};

use kube::ResourceExt;
use kube::api::{Api, PostParams};
use steward_api::foundationdb::{
    BackupState, FoundationDBBackup, FoundationDBBackupSpec, FoundationDBRestore,
    FoundationDBRestoreSpec, RestoreState,
};

use super::engine::FoundationDb;
use crate::api::engine::{
    BackupsApi, Capability, ClusterApi, NewBackup, NewCluster, NewRestore, Size, list_of_cluster,
    normalize_as, parts_as, show_of_cluster, to_json,
};
use crate::api::resources::{BackupInfo, RestoreInfo, stamped};
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
        match capability {
            Capability::Failover => Some(
                "a FoundationDB cluster has no primary to fail over to: its cluster controller is elected by the coordinators".to_owned(),
            ),
            Capability::Users => Some("FoundationDB has no database users".to_owned()),
            Capability::Backups if what == "backups" || what == "restores" => None,
            Capability::Backups => Some(format!(
                "{what} are not supported for foundationdb clusters: a FoundationDB backup is continuous (FoundationDBBackup)"
            )),
        }
    }

    fn backups(&self) -> Option<&dyn BackupsApi> {
        Some(self)
    }
}

/// (pure) A backup as the API answers it: `Completed` once restorable (it keeps running),
/// `Running` before, `Failed` when its agents cannot run it (`Available` says why), `Pending`
/// before anything is known; the label is the latest restorable version.
pub fn backup_info(b: &FoundationDBBackup) -> BackupInfo {
    let status = b.status.clone().unwrap_or_default();
    let details = status.backup_details.clone();
    let available = status
        .common
        .conditions
        .iter()
        .find(|c| c.type_ == "Available");
    let phase = match (&details, available) {
        (Some(d), _) if d.restorable => "Completed",
        (Some(d), _) if d.running => "Running",
        (_, Some(c)) if c.reason == "ClusterNotFound" => "Failed",
        (Some(_), _) => "Running",
        (None, _) => "Pending",
    };
    BackupInfo {
        name: b.name_any(),
        cluster: b.spec.cluster_name.clone(),
        type_: "continuous".to_owned(),
        method: "backup_agent".to_owned(),
        phase: Some(phase.to_owned()),
        label: details
            .as_ref()
            .and_then(|d| d.latest_restorable_version)
            .map(|v| v.to_string()),
        message: available.map(|c| c.message.clone()),
        ..BackupInfo::default()
    }
}

/// The name of the backup the API makes for `cluster`.
pub fn backup_name(cluster: &str) -> String {
    format!("{cluster}-backup")
}

async fn backups_of(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
) -> Result<Vec<FoundationDBBackup>, ApiError> {
    list_of_cluster(client, namespace, |b: &FoundationDBBackup| {
        b.spec.cluster_name == cluster
    })
    .await
}

/// A FoundationDB backup is continuous: a create starts the cluster's `FoundationDBBackup`
/// (`<cluster>-backup`, or sets a stopped one running again); a restore makes a
/// `FoundationDBRestore` of the named (or only) backup, to a version.
#[async_trait::async_trait]
impl BackupsApi for FoundationDb {
    async fn list(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
    ) -> Result<Vec<Value>, ApiError> {
        backups_of(client, namespace, cluster)
            .await?
            .iter()
            .map(|b| to_json(&backup_info(b)))
            .collect()
    }

    async fn create(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
        request: &NewBackup<'_>,
        _stamp: &str,
    ) -> Result<Value, ApiError> {
        if request.type_.is_some_and(|t| t != "full")
            || request.method.is_some_and(|m| m != "backup_agent")
        {
            return Err(ApiError::bad_request(
                "a FoundationDB backup is continuous (a full snapshot, then every mutation): type full and method backup_agent only",
            ));
        }
        let api = Api::<FoundationDBBackup>::namespaced(client.clone(), namespace);
        if let Some(running) = backups_of(client, namespace, cluster)
            .await?
            .into_iter()
            .find(|b| b.spec.backup_state != BackupState::Stopped)
        {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "{cluster} already has a backup that is not stopped: {} (FoundationDB runs one backup per tag)",
                    running.name_any()
                ),
            ));
        }
        let name = backup_name(cluster);
        let made = match api
            .get_opt(&name)
            .await
            .map_err(|e| ApiError::kube("get FoundationDBBackup", &e))?
        {
            Some(_) => api
                .patch(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"spec": {"backupState": "Running"}})),
                )
                .await
                .map_err(|e| ApiError::kube("patch FoundationDBBackup", &e))?,
            None => {
                let mut backup = FoundationDBBackup::new(
                    &name,
                    serde_json::from_value::<FoundationDBBackupSpec>(
                        json!({"clusterName": cluster}),
                    )
                    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?,
                );
                backup.metadata.namespace = Some(namespace.to_owned());
                api.create(&PostParams::default(), &backup)
                    .await
                    .map_err(|e| ApiError::kube("create FoundationDBBackup", &e))?
            }
        };
        to_json(&backup_info(&made))
    }

    async fn show(
        &self,
        client: &kube::Client,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ApiError> {
        show_of_cluster(
            client,
            namespace,
            name,
            |_: &FoundationDBBackup| true,
            backup_info,
        )
        .await
    }

    async fn restore(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
        request: &NewRestore<'_>,
        stamp: &str,
    ) -> Result<Value, ApiError> {
        if request.target_time.is_some() {
            return Err(ApiError::bad_request(
                "a FoundationDB restore goes to a version (\"version\"), not a time",
            ));
        }
        let backups = backups_of(client, namespace, cluster).await?;
        let backup = match request.backup {
            Some(b) => backups
                .iter()
                .find(|x| x.name_any() == b)
                .ok_or_else(|| ApiError::bad_request(format!("{cluster} has no backup {b:?}")))?,
            None => match backups.as_slice() {
                [one] => one,
                [] => {
                    return Err(ApiError::bad_request(format!(
                        "{cluster} has no backup to restore"
                    )));
                }
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "{cluster} has several backups: name one with \"backup\""
                    )));
                }
            },
        };
        let mut object = FoundationDBRestore::new(
            &stamped(cluster, "restore", stamp),
            FoundationDBRestoreSpec {
                destination_cluster_name: cluster.to_owned(),
                backup_name: backup.name_any(),
                version: request.version,
            },
        );
        object.metadata.namespace = Some(namespace.to_owned());
        let made = Api::<FoundationDBRestore>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &object)
            .await
            .map_err(|e| ApiError::kube("create FoundationDBRestore", &e))?;
        to_json(&restore_info(&made))
    }

    async fn show_restore(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
        name: &str,
    ) -> Result<Option<Value>, ApiError> {
        show_of_cluster(
            client,
            namespace,
            name,
            |r: &FoundationDBRestore| r.spec.destination_cluster_name == cluster,
            restore_info,
        )
        .await
    }
}

/// (pure) The API's view of a restore: its state, and its message — why it failed when it did.
fn restore_info(restore: &FoundationDBRestore) -> RestoreInfo {
    let status = restore.status.clone().unwrap_or_default();
    let message = Some(status.message).filter(|m| !m.is_empty());
    RestoreInfo {
        name: restore.name_any(),
        cluster: restore.spec.destination_cluster_name.clone(),
        phase: Some(format!("{:?}", status.state)),
        step: None,
        error: message
            .clone()
            .filter(|_| status.state == RestoreState::Failed),
        message,
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
        assert_eq!(FoundationDb.refuses(Capability::Backups, "backups"), None);
        assert_eq!(FoundationDb.refuses(Capability::Backups, "restores"), None);
        assert!(
            FoundationDb
                .refuses(Capability::Backups, "schedules")
                .is_some()
        );
        assert!(FoundationDb.backups().is_some());
    }
}
