//! ReconcilePeers — makes the `EtcdPeer` resources match the member list (seed step 4): a member
//! without a peer gets one that joins the existing cluster; a peer without a member is deleted
//! (its claim too when `storage.retainOnScaleDown` is `Delete`). Without a quorate cluster,
//! peers are created only to complete the initial bootstrap set — the first pass of a new
//! cluster creates all `replicas` peers with `initial-cluster-state: new` (a `Bootstrap`
//! operation). Every new peer carries the ID of the member it runs (`spec.memberId`), which
//! names its data directory. Peers are created, never re-applied: a peer's spec changes only
//! through `RollingUpdate`, one member at a time.
//!
//! A new cluster with `spec.dataSource` bootstraps from a snapshot: only its first member is
//! created, alone in its initial cluster, restoring the `EtcdBackup`'s file
//! (`EtcdPeer.spec.restore`); once it answers, `ScaleMembers` adds the others as for any
//! scale-up. A backup that is missing, failed or not completed holds the bootstrap
//! (`Degraded=SnapshotNotReady`, an Event) and nothing is created. A cluster that has peers
//! never reads its data source again.

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use steward_api::common::{OperationChange, OperationKind, RetentionPolicy};
use steward_api::etcd::EtcdPeer;

use crate::error::Error;
use crate::etcd::names::claim_name;
use crate::etcd::steps::scale_members::group;
use crate::etcd::topology::{PeerView, plan_peers};
use crate::etcd::{EtcdPass, build};
use crate::operation::OperationRequest;
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::resources::sweep;

/// See the module documentation.
pub struct ReconcilePeers;

/// This cluster's peers, from the cache.
pub fn cluster_peers(pass: &EtcdPass) -> Vec<std::sync::Arc<EtcdPeer>> {
    let uid = pass.cluster.uid();
    pass.stores
        .peers
        .of_instance(&pass.core.namespace, &pass.core.name)
        .into_iter()
        .filter(|p| p.spec.cluster_name == pass.core.name)
        .filter(|p| {
            p.owner_references()
                .iter()
                .any(|o| Some(&o.uid) == uid.as_ref())
        })
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

#[async_trait]
impl SubReconciler<EtcdPass> for ReconcilePeers {
    fn name(&self) -> &'static str {
        "ReconcilePeers"
    }

    async fn reconcile(&self, pass: &mut EtcdPass) -> Result<Outcome, Error> {
        let peers = cluster_peers(pass);
        let views: Vec<PeerView> = peers
            .iter()
            .map(|p| PeerView {
                name: p.name_any(),
                bootstrap: p.spec.bootstrap.clone(),
            })
            .collect();
        let replicas = usize::try_from(pass.cluster.spec.replicas.max(1)).unwrap_or(1);
        let token = pass.cluster.uid().unwrap_or_default();
        let restore = match &pass.cluster.spec.data_source {
            Some(source) if views.is_empty() => match snapshot_of(pass, &source.backup).await? {
                Ok(file) => Some(file),
                Err(why) => {
                    let repeated = pass.status.common.conditions.iter().any(|c| {
                        c.type_ == steward_api::common::condition_types::DEGRADED
                            && c.message == why
                    });
                    if !repeated {
                        pass.core
                            .event(EventType::Warning, "SnapshotNotReady", "Bootstrap", &why);
                    }
                    pass.core.degrade("SnapshotNotReady", why.clone());
                    return Ok(Outcome::stop(
                        Duration::from_secs(10),
                        format!("the bootstrap waits: {why}"),
                    ));
                }
            },
            _ => None,
        };
        let plan = plan_peers(
            pass.observed.as_ref(),
            &views,
            if restore.is_some() { 1 } else { replicas },
            &pass.names,
            &token,
        );
        if let Some(held) = &plan.held {
            pass.core.degrade("Unreachable", held.clone());
        }
        if views.is_empty() && !plan.create.is_empty() {
            pass.core.start_operation(OperationRequest {
                kind: OperationKind::Bootstrap,
                step: "CreatePeers".into(),
                total: u32::try_from(plan.create.len()).unwrap_or(1),
                change: OperationChange {
                    new_replicas: group(replicas),
                    ..OperationChange::default()
                },
                message: match (&restore, &pass.cluster.spec.data_source) {
                    (Some(file), Some(source)) => format!(
                        "bootstrapping a new cluster from snapshot {} (EtcdBackup {}): its \
                         first member restores it, {} more join it",
                        file.file,
                        source.backup,
                        replicas - 1
                    ),
                    _ => format!(
                        "bootstrapping a new cluster of {} members",
                        plan.create.len()
                    ),
                },
            });
        }
        let api: Api<EtcdPeer> = pass.ctx.api(&pass.core.namespace);
        let object = format!("{}/{}", pass.core.namespace, pass.core.name);
        for new in &plan.create {
            let name = &new.name;
            let Some(peer) = build::member::peer(
                &pass.cluster,
                name,
                new.bootstrap.clone(),
                Some(new.member_id.clone()),
                restore.clone(),
            ) else {
                return Err(Error::Internal {
                    message: "cluster has no UID or namespace".into(),
                });
            };
            match api.create(&PostParams::default(), &peer).await {
                Ok(_) => pass.core.event(
                    EventType::Normal,
                    "PeerCreated",
                    "ReconcilePeers",
                    format!("created peer {name} (member {})", new.member_id),
                ),
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(source) => return Err(Error::kube("create EtcdPeer", object, source)),
            }
        }
        let mut deleted = Vec::new();
        if !plan.delete.is_empty() {
            if let Some(why) = pass.core.destructive_block() {
                return Ok(Outcome::requeue(Duration::from_secs(30), why));
            }
            deleted = sweep::delete_named::<EtcdPeer>(
                &pass.ctx.client,
                &pass.core.namespace,
                plan.delete,
            )
            .await?;
            for name in &deleted {
                pass.core.event(
                    EventType::Normal,
                    "PeerDeleted",
                    "ReconcilePeers",
                    format!("deleted peer {name}: it is no longer a member"),
                );
            }
            if pass.cluster.spec.storage.retain_on_scale_down == RetentionPolicy::Delete {
                let claims: Vec<String> = deleted.iter().map(|n| claim_name(n)).collect();
                sweep::delete_named::<PersistentVolumeClaim>(
                    &pass.ctx.client,
                    &pass.core.namespace,
                    claims,
                )
                .await?;
            }
        }
        if plan.create.is_empty() && deleted.is_empty() {
            Ok(Outcome::Continue)
        } else {
            Ok(Outcome::requeue(Duration::from_secs(2), "peers changed"))
        }
    }
}

/// The snapshot file of `EtcdBackup` `name` in the cluster's namespace, or why it cannot seed
/// the cluster.
async fn snapshot_of(
    pass: &EtcdPass,
    name: &str,
) -> Result<Result<steward_api::etcd::SnapshotFile, String>, Error> {
    let api: Api<steward_api::etcd::EtcdBackup> = pass.ctx.api(&pass.core.namespace);
    let backup = api.get_opt(name).await.map_err(|source| {
        Error::kube(
            "get",
            format!("EtcdBackup {}/{name}", pass.core.namespace),
            source,
        )
    })?;
    Ok(build::snapshot::restorable(backup.as_ref(), name))
}
