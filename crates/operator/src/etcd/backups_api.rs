//! The etcd engine's backups and restores as the REST API sees them ([`BackupsApi`]).
//!
//! A backup is one `EtcdBackup`: a snapshot taken once from a healthy member and kept on the
//! cluster's snapshot claim (`etcd/backup/`). A restore never touches the cluster asked for: it
//! creates a **new** `EtcdCluster` `<cluster>-restore-<stamp>` with the source's replicas,
//! version, repository, storage and Pod template and `spec.dataSource.backup` naming the
//! snapshot; its first member restores the file and the others join it (`ReconcilePeers`). The
//! new cluster carries the label [`RESTORED_FROM`] naming the source, which is how
//! `GET …/restores/{name}` knows it for a restore of that cluster; its state is read from the
//! new cluster's status. Which snapshot: the one named by `backup`, else the cluster's newest
//! `Completed` one. A snapshot is restored as it was taken: no time, no version.

use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::Value;
use steward_api::common::condition_types::{AVAILABLE, DEGRADED};
use steward_api::common::{Condition, OperationPhase};
use steward_api::etcd::{
    EtcdBackup, EtcdBackupSpec, EtcdCluster, EtcdClusterSpec, EtcdDataSource, SnapshotDestination,
    SnapshotPhase,
};

use crate::api::engine::{
    BackupsApi, NewBackup, NewRestore, create_as, get_of_cluster, list_of_cluster, show_of_cluster,
    to_json,
};
use crate::api::resources::{BackupInfo, RestoreInfo, name_within, stamp_digits};
use crate::api::server::ApiError;
use crate::etcd::build::snapshot::job_name;
use crate::etcd::engine::Etcd;
use crate::etcd::validate::MAX_NAME_LEN;

/// The label on a cluster a restore made: the name of the cluster whose snapshot seeds it.
pub const RESTORED_FROM: &str = "steward.dev/restored-from";

/// The reason of the `Degraded` condition of a cluster whose snapshot cannot seed it (yet).
const SNAPSHOT_NOT_READY: &str = "SnapshotNotReady";

/// (pure) The backup a create request makes: `<cluster>-<yyyymmddhhmmss>`, the cluster's name
/// cut so that its Job (`<backup>-snapshot`) is still a DNS label.
pub fn backup_name(cluster: &str, stamp: &str) -> String {
    let longest = 63 - job_name("").len();
    name_within(cluster, &format!("-{}", stamp_digits(stamp)), longest)
}

/// (pure) The cluster a restore makes: `<cluster>-restore-<yyyymmddhhmmss>`, the cluster's name
/// cut so that the new one is a valid etcd cluster name.
pub fn restore_name(cluster: &str, stamp: &str) -> String {
    name_within(
        cluster,
        &format!("-restore-{}", stamp_digits(stamp)),
        MAX_NAME_LEN,
    )
}

/// (pure) A `400` when a backup request asks for something an etcd snapshot is not.
pub fn check_backup_request(request: &NewBackup<'_>) -> Result<(), ApiError> {
    if request.type_.is_some_and(|t| t != "full") || request.method.is_some_and(|m| m != "snapshot")
    {
        return Err(ApiError::bad_request(
            "an etcd backup is a snapshot of the whole keyspace: type full and method snapshot only",
        ));
    }
    Ok(())
}

/// (pure) A `400` when a restore request asks for something a snapshot cannot give.
pub fn check_restore_request(request: &NewRestore<'_>) -> Result<(), ApiError> {
    if request.target_time.is_some() || request.version.is_some() {
        return Err(ApiError::bad_request(
            "etcd restores a snapshot as it was taken: no targetTime or version (name the snapshot with \"backup\")",
        ));
    }
    Ok(())
}

fn phase(b: &EtcdBackup) -> Option<SnapshotPhase> {
    b.status.as_ref().and_then(|s| s.phase)
}

/// (pure) A backup as the API answers it: `type: full`, `method: snapshot`, the revision the
/// snapshot holds as its label, its times and size.
pub fn backup_info(b: &EtcdBackup) -> BackupInfo {
    let status = b.status.clone().unwrap_or_default();
    BackupInfo {
        name: b.name_any(),
        cluster: b.spec.cluster.clone(),
        type_: "full".to_owned(),
        method: "snapshot".to_owned(),
        phase: status.phase.map(|p| format!("{p:?}")),
        label: status.revision.map(|r| format!("revision {r}")),
        message: status.message,
        error: status.error,
        start_time: status.start_time,
        completion_time: status.completion_time,
        size_bytes: status.size_bytes,
    }
}

/// (pure) The snapshot a restore of `cluster` seeds its new cluster from: `named`, which must
/// be one of the cluster's backups and `Completed`, else the newest `Completed` one (by
/// completion time). `backups` are the cluster's.
pub fn choose_backup<'a>(
    cluster: &str,
    backups: &'a [EtcdBackup],
    named: Option<&str>,
) -> Result<&'a EtcdBackup, ApiError> {
    if let Some(name) = named {
        let backup = backups
            .iter()
            .find(|b| b.name_any() == name)
            .ok_or_else(|| ApiError::bad_request(format!("{cluster} has no backup {name:?}")))?;
        return match phase(backup) {
            Some(SnapshotPhase::Completed) => Ok(backup),
            Some(SnapshotPhase::Failed) => Err(ApiError::bad_request(format!(
                "backup {name} failed ({}): only a Completed snapshot can seed a cluster",
                backup
                    .status
                    .as_ref()
                    .and_then(|s| s.error.as_deref())
                    .unwrap_or("no reason given")
            ))),
            other => Err(ApiError::bad_request(format!(
                "backup {name} is {}, not Completed: only a Completed snapshot can seed a cluster",
                other.map_or("Pending".to_owned(), |p| format!("{p:?}"))
            ))),
        };
    }
    backups
        .iter()
        .filter(|b| phase(b) == Some(SnapshotPhase::Completed))
        .max_by_key(|b| {
            (
                b.status.as_ref().and_then(|s| s.completion_time.clone()),
                b.metadata.creation_timestamp.clone(),
                b.name_any(),
            )
        })
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "{cluster} has no Completed backup to restore: take one first (POST …/backups)"
            ))
        })
}

/// (pure) The new cluster a restore of `source` from `backup` makes: the source's replicas,
/// version, repository, storage and Pod template, seeded from the snapshot, labelled with the
/// source's name.
pub fn restored_cluster(source: &EtcdCluster, name: &str, backup: &str) -> EtcdCluster {
    let from = &source.spec;
    let mut spec = EtcdClusterSpec::new(from.replicas, from.version.clone());
    spec.repository = from.repository.clone();
    spec.storage = from.storage.clone();
    spec.pod_template = from.pod_template.clone();
    spec.data_source = Some(EtcdDataSource {
        backup: backup.to_owned(),
    });
    let mut cluster = EtcdCluster::new(name, spec);
    cluster.metadata.namespace = source.namespace();
    cluster.metadata.labels = Some(BTreeMap::from([(
        RESTORED_FROM.to_owned(),
        source.name_any(),
    )]));
    cluster
}

/// (pure) The condition saying the new cluster's snapshot cannot seed it, while it says so.
pub fn waiting_for_snapshot(restored: &EtcdCluster) -> Option<&Condition> {
    restored
        .status
        .as_ref()?
        .common
        .conditions
        .iter()
        .find(|c| c.type_ == DEGRADED && c.status == "True" && c.reason == SNAPSHOT_NOT_READY)
}

/// (pure) Whether a restore's snapshot is lost for good: its backup is gone or failed.
pub fn snapshot_lost(backup: Option<&EtcdBackup>) -> bool {
    backup.is_none_or(|b| phase(b) == Some(SnapshotPhase::Failed))
}

/// (pure) A restore as the API answers it, read from the cluster it made: `Completed` once it
/// is `Available` with every member it asks for healthy and voting and no operation running;
/// `Failed` when its bootstrap failed or its snapshot is lost (`snapshot_lost`: read only while
/// the cluster waits for it); `Pending` before the operator bootstrapped it; `Running` between.
pub fn restore_info(restored: &EtcdCluster, snapshot_lost: bool) -> RestoreInfo {
    let name = restored.name_any();
    let backup = restored
        .spec
        .data_source
        .as_ref()
        .map(|d| d.backup.clone())
        .unwrap_or_default();
    let source = restored
        .labels()
        .get(RESTORED_FROM)
        .cloned()
        .unwrap_or_default();
    let info =
        |phase: &str, step: Option<String>, message: String, error: Option<String>| RestoreInfo {
            name: name.clone(),
            cluster: name.clone(),
            phase: Some(phase.to_owned()),
            step,
            message: Some(message),
            error,
        };
    if let Some(waiting) = waiting_for_snapshot(restored) {
        return if snapshot_lost {
            info(
                "Failed",
                None,
                format!(
                    "{name} cannot bootstrap from EtcdBackup {backup}: delete it and restore another snapshot of {source}"
                ),
                Some(waiting.message.clone()),
            )
        } else {
            info("Pending", None, waiting.message.clone(), None)
        };
    }
    let Some(status) = restored.status.as_ref() else {
        return info(
            "Pending",
            None,
            format!("{name} waits for the operator to bootstrap it from EtcdBackup {backup}"),
            None,
        );
    };
    if let Some(op) = &status.common.operation {
        let step = Some(if op.step.is_empty() {
            format!("{:?}", op.kind)
        } else {
            format!("{:?} {}", op.kind, op.step)
        });
        return if op.phase == OperationPhase::Failed {
            info(
                "Failed",
                step,
                format!("{name} did not come up from EtcdBackup {backup}"),
                Some(op.message.clone()).filter(|m| !m.is_empty()),
            )
        } else {
            info("Running", step, op.message.clone(), None)
        };
    }
    let want = restored.spec.replicas;
    let healthy = status
        .members
        .iter()
        .filter(|m| m.healthy && !m.learner)
        .count();
    let available = status
        .common
        .conditions
        .iter()
        .any(|c| c.type_ == AVAILABLE && c.status == "True");
    let settled = available
        && status.ready_members == want
        && status.members.len() == healthy
        && i32::try_from(healthy).is_ok_and(|h| h == want);
    if settled {
        return info(
            "Completed",
            None,
            format!(
                "{name} holds the keys of EtcdBackup {backup} (a snapshot of {source}): {want} healthy members"
            ),
            None,
        );
    }
    info(
        "Running",
        None,
        format!(
            "{name} comes up from EtcdBackup {backup}: {}/{want} members ready",
            status.ready_members
        ),
        None,
    )
}

/// The cluster's `EtcdBackup`s, oldest first.
async fn backups_of(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
) -> Result<Vec<EtcdBackup>, ApiError> {
    list_of_cluster(client, namespace, |b: &EtcdBackup| {
        b.spec.cluster == cluster
    })
    .await
}

/// An etcd backup is an `EtcdBackup` (one snapshot); a restore is a new `EtcdCluster` seeded
/// from one.
#[async_trait::async_trait]
impl BackupsApi for Etcd {
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
        stamp: &str,
    ) -> Result<Value, ApiError> {
        check_backup_request(request)?;
        let mut backup = EtcdBackup::new(
            &backup_name(cluster, stamp),
            EtcdBackupSpec {
                cluster: cluster.to_owned(),
                destination: SnapshotDestination::default(),
                retain: None,
            },
        );
        backup.metadata.namespace = Some(namespace.to_owned());
        create_as(client, namespace, &backup, backup_info).await
    }

    async fn show(
        &self,
        client: &kube::Client,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ApiError> {
        show_of_cluster(client, namespace, name, |_: &EtcdBackup| true, backup_info).await
    }

    async fn restore(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
        request: &NewRestore<'_>,
        stamp: &str,
    ) -> Result<Value, ApiError> {
        check_restore_request(request)?;
        let source = Api::<EtcdCluster>::namespaced(client.clone(), namespace)
            .get(cluster)
            .await
            .map_err(|e| ApiError::kube("get EtcdCluster", &e))?;
        let backups = backups_of(client, namespace, cluster).await?;
        let backup = choose_backup(cluster, &backups, request.backup)?;
        let object = restored_cluster(&source, &restore_name(cluster, stamp), &backup.name_any());
        let made = Api::<EtcdCluster>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &object)
            .await
            .map_err(|e| ApiError::kube("create EtcdCluster", &e))?;
        let mut info = restore_info(&made, false);
        info.message = Some(format!(
            "a new cluster {} bootstraps from EtcdBackup {}{} of {cluster}, which is not changed",
            made.name_any(),
            backup.name_any(),
            backup
                .status
                .as_ref()
                .and_then(|s| s.revision)
                .map(|r| format!(" (revision {r})"))
                .unwrap_or_default()
        ));
        to_json(&info)
    }

    async fn show_restore(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
        name: &str,
    ) -> Result<Option<Value>, ApiError> {
        let Some(restored) = get_of_cluster(client, namespace, name, |c: &EtcdCluster| {
            c.labels().get(RESTORED_FROM).map(String::as_str) == Some(cluster)
        })
        .await?
        else {
            return Ok(None);
        };
        // The snapshot is read only while the new cluster waits for it: once bootstrapped,
        // the cluster never reads it again (and retention may have dropped it).
        let lost = match (waiting_for_snapshot(&restored), &restored.spec.data_source) {
            (Some(_), Some(source)) => snapshot_lost(
                Api::<EtcdBackup>::namespaced(client.clone(), namespace)
                    .get_opt(&source.backup)
                    .await
                    .map_err(|e| ApiError::kube("get EtcdBackup", &e))?
                    .as_ref(),
            ),
            (Some(_), None) => true,
            (None, _) => false,
        };
        to_json(&restore_info(&restored, lost)).map(Some)
    }
}

#[cfg(test)]
#[path = "backups_api_tests.rs"]
mod tests;
