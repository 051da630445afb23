//! `EtcdBackup`: one snapshot of a cluster's keyspace, taken once with etcd's snapshot API from
//! a healthy member by a Job (`build::snapshot::job`), checked with `snapshot status`, kept on
//! a claim; older snapshots of the cluster pruned by the backup's `retain`. It runs as the
//! backup's own `Backup` operation: progress, the operator's backup deadline, the Events and
//! the `backup` webhook of every operation. Restoring one is the cluster's business
//! (`EtcdCluster.spec.dataSource`, `ReconcilePeers`).

pub mod controller;
pub mod steps;

use std::sync::Arc;

use steward_api::etcd::{EtcdBackup, EtcdBackupStatus, EtcdCluster, SnapshotPhase};

use crate::pipeline::{Pass, PassCore, Pipeline};
use crate::runtime::context::Context;

/// The controller name used in metrics, logs and field managers.
pub const CONTROLLER: &str = "etcd-backup";

/// One pass over an `EtcdBackup`.
pub struct SnapshotPass {
    /// Shared pass state.
    pub core: PassCore,
    /// The backup as read from the cache.
    pub backup: Arc<EtcdBackup>,
    /// Its cluster, once read (not read for a finished backup).
    pub cluster: Option<EtcdCluster>,
    /// Status being computed.
    pub status: EtcdBackupStatus,
    /// Whether the status step ran once on this pass.
    pub looked: bool,
    /// Shared context.
    pub ctx: Arc<Context>,
}

impl Pass for SnapshotPass {
    fn core(&self) -> &PassCore {
        &self.core
    }
    fn core_mut(&mut self) -> &mut PassCore {
        &mut self.core
    }
}

impl SnapshotPass {
    /// Whether the backup is over (`Completed` or `Failed`): nothing runs for it again but
    /// its retention.
    pub fn finished(&self) -> bool {
        matches!(
            self.status.phase,
            Some(SnapshotPhase::Completed | SnapshotPhase::Failed)
        )
    }
}

/// The pipeline, in order; `UpdateSnapshotStatus` runs first and last.
pub fn pipeline() -> Pipeline<SnapshotPass> {
    Pipeline::new(
        CONTROLLER,
        Box::new(steps::UpdateSnapshotStatus),
        vec![
            Box::new(steps::EnsureSnapshotClaim),
            Box::new(steps::TakeSnapshot),
            Box::new(steps::ApplyRetention),
        ],
    )
}
