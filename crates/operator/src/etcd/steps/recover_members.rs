//! RecoverMembers — replaces a member whose data is lost. The peer controller marks such a peer
//! `DataLost=True` (its claim was deleted, is being deleted or was replaced) and keeps its Pod
//! down; this step removes the member from the cluster and deletes its peer, so that
//! `ScaleMembers` adds a new member in its place through the learner path: it gets the lowest
//! free name (usually the same), a new member ID and so a new data directory, and its peer
//! controller creates a fresh claim.
//!
//! It acts as decided by the pure `plan_recovery`: one member per pass, only with a quorate
//! cluster, only when no other membership change is in flight (no member that has not started,
//! no learner), only once the member no longer answers, and only if the remaining healthy
//! voters still form a quorum of the smaller cluster. A done removal is recorded as a `Recover`
//! operation (`SCALING_TIMEOUT` deadline; `ScaleMembers` finishes it once the new member is a
//! voter), or as a step of the operation already running. It emits `MemberDataLost` and
//! `MemberRemoved`.
//!
//! It never removes a member that answers, never acts while a failed operation blocks
//! destructive work, and never touches claims. When it cannot act — the cluster is not
//! quorate, or its only member lost its data (which needs a restore from a backup) — it says so
//! with `Degraded=True/DataLost`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kube::ResourceExt;
use steward_api::common::{OperationChange, OperationKind};
use steward_api::etcd::EtcdPeer;

use crate::conditions;
use crate::error::Error;
use crate::etcd::EtcdPass;
use crate::etcd::admin::AdminError;
use crate::etcd::peer::DATA_LOST;
use crate::etcd::steps::reconcile_peers::cluster_peers;
use crate::etcd::steps::scale_members::{database, group};
use crate::etcd::topology::{LostPeer, Recovery, plan_recovery};
use crate::operation::{OperationRequest, Started};
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::resources::sweep;

/// See the module documentation.
pub struct RecoverMembers;

const SOON: Duration = Duration::from_secs(2);
const LATER: Duration = Duration::from_secs(30);

/// The peers whose member lost its data, with the member ID each ran.
pub fn lost_peers(peers: &[Arc<EtcdPeer>]) -> Vec<LostPeer> {
    peers
        .iter()
        .filter(|p| {
            p.status
                .as_ref()
                .is_some_and(|s| conditions::is_true(&s.conditions, DATA_LOST))
        })
        .map(|p| LostPeer {
            name: p.name_any(),
            member_id: p
                .spec
                .member_id
                .clone()
                .or_else(|| p.status.as_ref().and_then(|s| s.member_id.clone()))
                .and_then(|id| u64::from_str_radix(&id, 16).ok()),
        })
        .collect()
}

/// The peer's `DataLost` message.
fn why_lost(peers: &[Arc<EtcdPeer>], name: &str) -> String {
    peers
        .iter()
        .find(|p| p.name_any() == name)
        .and_then(|p| p.status.as_ref())
        .and_then(|s| conditions::get(&s.conditions, DATA_LOST))
        .map(|c| c.message.clone())
        .unwrap_or_else(|| "its data is lost".to_owned())
}

#[async_trait]
impl SubReconciler<EtcdPass> for RecoverMembers {
    fn name(&self) -> &'static str {
        "RecoverMembers"
    }

    async fn reconcile(&self, pass: &mut EtcdPass) -> Result<Outcome, Error> {
        let peers = cluster_peers(pass);
        let lost = lost_peers(&peers);
        match plan_recovery(pass.observed.as_ref(), &lost, peers.len(), &pass.names) {
            Recovery::Idle => Ok(Outcome::Continue),
            Recovery::Wait(why) => Ok(Outcome::requeue(Duration::from_secs(5), why)),
            Recovery::Blocked(why) => {
                pass.core.degrade("DataLost", why.clone());
                Ok(Outcome::requeue(LATER, why))
            }
            Recovery::DeletePeer { name } => {
                if let Some(why) = pass.core.destructive_block() {
                    pass.core.degrade(
                        "DataLost",
                        format!("deleting peer {name}, whose data is lost, is blocked: {why}"),
                    );
                    return Ok(Outcome::requeue(LATER, why));
                }
                delete_peer(pass, &name).await?;
                Ok(Outcome::requeue(SOON, format!("deleted peer {name}")))
            }
            Recovery::Remove { id, name } => {
                let why = why_lost(&peers, &name);
                remove(pass, id, &name, &why, lost.len()).await
            }
        }
    }
}

async fn remove(
    pass: &mut EtcdPass,
    id: u64,
    name: &str,
    why: &str,
    lost: usize,
) -> Result<Outcome, Error> {
    if let Some(block) = pass.core.destructive_block() {
        pass.core.degrade(
            "DataLost",
            format!("{name} lost its data; replacing it is blocked: {block}"),
        );
        return Ok(Outcome::requeue(LATER, block));
    }
    let Some(admin) = pass.admin.take() else {
        return Ok(Outcome::requeue(SOON, "no admin session"));
    };
    pass.core.event(
        EventType::Warning,
        "MemberDataLost",
        "RecoverMembers",
        format!("{name}: {why}"),
    );
    let voters = pass.observed.as_ref().map_or(0, |o| o.voters().count());
    let result = admin.member_remove(id).await;
    pass.admin = Some(admin);
    match result {
        Ok(()) | Err(AdminError::MemberNotFound(_)) => {}
        Err(err) if err.is_transient() => return Ok(Outcome::requeue(SOON, err.to_string())),
        Err(err) => return Err(database(pass, &err)),
    }
    // The operation starts once the member is out, so that a failed attempt never leaves a
    // `Recover` that ScaleMembers would find converged.
    let started = pass.core.start_operation(OperationRequest {
        kind: OperationKind::Recover,
        step: "RemoveMember".into(),
        // Each lost member is removed, then a new one joins.
        total: u32::try_from(lost.saturating_mul(2)).unwrap_or(u32::MAX),
        change: OperationChange {
            old_replicas: group(voters),
            new_replicas: group(voters),
            ..OperationChange::default()
        },
        message: format!("replacing {name}, which lost its data"),
    });
    // Under another running operation (a scale that cannot finish while a member is down, an
    // update waiting for a healthy cluster) the removal is a step of that operation. (A failed
    // `Recover` cannot block here: `destructive_block` answered first.)
    let (kind, counts) = match started {
        Started::Busy(other) => (other, false),
        Started::New | Started::Resumed | Started::Blocked(_) => (OperationKind::Recover, true),
    };
    pass.core.event(
        EventType::Normal,
        "MemberRemoved",
        "RecoverMembers",
        format!("removed {name}, which lost its data; a new member will be added in its place"),
    );
    let done = pass
        .core
        .status
        .operation
        .as_ref()
        .map_or(0, |op| op.done + u32::from(counts));
    pass.core.advance_operation(
        kind,
        "RemoveMember",
        done,
        format!("removed {name}, which lost its data; adding a new member in its place"),
    );
    // The later steps of this pass see the member gone: ScaleMembers adds its replacement.
    if let Some(obs) = pass.observed.as_mut() {
        obs.members.retain(|m| m.id != id);
        obs.statuses.remove(&id);
    }
    delete_peer(pass, name).await?;
    Ok(Outcome::requeue(SOON, format!("{name} removed")))
}

async fn delete_peer(pass: &mut EtcdPass, name: &str) -> Result<(), Error> {
    let deleted = sweep::delete_named::<EtcdPeer>(
        &pass.ctx.client,
        &pass.core.namespace,
        vec![name.to_owned()],
    )
    .await?;
    for name in &deleted {
        pass.core.event(
            EventType::Normal,
            "PeerDeleted",
            "RecoverMembers",
            format!("deleted peer {name}: its member lost its data and was removed"),
        );
    }
    Ok(())
}
