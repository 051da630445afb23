//! The snapshot pipeline's steps, one per file, in pipeline order, and the pure decisions
//! they share.

mod apply_retention;
mod ensure_snapshot_claim;
mod take_snapshot;
mod update_snapshot_status;

pub use apply_retention::ApplyRetention;
pub use ensure_snapshot_claim::EnsureSnapshotClaim;
pub use take_snapshot::TakeSnapshot;
pub use update_snapshot_status::UpdateSnapshotStatus;

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, ListParams};
use steward_api::etcd::{EtcdBackup, EtcdMemberStatus, SnapshotPhase};

use super::SnapshotPass;
use crate::error::Error;
use crate::etcd::build::snapshot::claim_name;

/// How soon to look again while a snapshot runs.
pub const SOON: Duration = Duration::from_secs(3);

/// The other `EtcdBackup`s of this backup's cluster, read from the API server.
pub async fn siblings(pass: &SnapshotPass) -> Result<Vec<EtcdBackup>, Error> {
    let api: Api<EtcdBackup> = pass.ctx.api(&pass.core.namespace);
    let all = api.list(&ListParams::default()).await.map_err(|source| {
        Error::kube(
            "list",
            format!("EtcdBackups in {}", pass.core.namespace),
            source,
        )
    })?;
    Ok(all
        .items
        .into_iter()
        .filter(|b| b.spec.cluster == pass.backup.spec.cluster && b.uid() != pass.backup.uid())
        .collect())
}

fn phase(b: &EtcdBackup) -> Option<SnapshotPhase> {
    b.status.as_ref().and_then(|s| s.phase)
}

/// (pure) The member to take a snapshot from: a healthy voter, a follower before the leader
/// (a snapshot streams the whole keyspace; the leader has the cluster's work to do), by name.
pub fn pick_member(members: &[EtcdMemberStatus]) -> Option<String> {
    let mut healthy: Vec<&EtcdMemberStatus> = members
        .iter()
        .filter(|m| m.healthy && !m.learner && !m.name.is_empty())
        .collect();
    healthy.sort_by_key(|m| (m.leader, m.name.clone()));
    healthy.first().map(|m| m.name.clone())
}

/// (pure) The completed backups of `this`'s cluster on its claim that its `retain` drops once
/// it completes: of those that completed before it, newest first, all but the newest
/// `retain - 1`. Names and files. Nothing without `retain`.
pub fn beyond_retention(this: &EtcdBackup, others: &[EtcdBackup]) -> Vec<(String, String)> {
    let Some(retain) = this.spec.retain else {
        return Vec::new();
    };
    let claim = claim_name(this);
    let done_at = |b: &EtcdBackup| {
        b.status
            .as_ref()
            .and_then(|s| s.completion_time.clone())
            .unwrap_or_default()
    };
    let this_done = this.status.as_ref().and_then(|s| s.completion_time.clone());
    let mut older: Vec<&EtcdBackup> = others
        .iter()
        .filter(|b| b.spec.cluster == this.spec.cluster && b.uid() != this.uid())
        .filter(|b| phase(b) == Some(SnapshotPhase::Completed))
        .filter(|b| b.metadata.deletion_timestamp.is_none())
        .filter(|b| {
            b.status
                .as_ref()
                .and_then(|s| s.location.as_ref())
                .is_some_and(|l| l.claim == claim)
        })
        .filter(|b| this_done.as_ref().is_none_or(|t| done_at(b) <= *t))
        .collect();
    older.sort_by_key(|b| std::cmp::Reverse((done_at(b), b.name_any())));
    let keep = usize::try_from(retain.saturating_sub(1)).unwrap_or(usize::MAX);
    older
        .into_iter()
        .skip(keep)
        .filter_map(|b| {
            let file = b.status.as_ref()?.location.as_ref()?.file.clone();
            Some((b.name_any(), file))
        })
        .collect()
}

/// The backup of this cluster that runs now, other than this one.
pub fn running_sibling(others: &[EtcdBackup]) -> Option<String> {
    let mut running: Vec<String> = others
        .iter()
        .filter(|b| phase(b) == Some(SnapshotPhase::Running))
        .map(ResourceExt::name_any)
        .collect();
    running.sort();
    running.into_iter().next()
}

#[cfg(test)]
mod tests;
