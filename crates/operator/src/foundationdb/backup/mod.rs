//! The backup and restore reconcilers (seed 002, "Backup Reconciliation", "Restore
//! Reconciliation"). A `FoundationDBBackup` runs backup agents in a Deployment (they write to a
//! directory on the backup's claim: a `file://` backup URL) and drives the backup with
//! `fdbbackup` run in a Pod of its cluster; a `FoundationDBRestore` runs `fdbrestore` once, in
//! an agent's Pod (where the backup's files are). The decisions are pure ([`plan`]).

pub mod build;
pub mod controller;
pub mod plan;
pub mod restore;
pub mod steps;

use std::sync::Arc;

use steward_api::foundationdb::{
    FoundationDBBackup, FoundationDBBackupStatus, FoundationDBCluster,
};

use super::admin::{FdbAdmin, FdbError, Target};
use crate::pipeline::{Pass, PassCore, Pipeline};
use crate::resources::pods::CachedPod;
use crate::runtime::context::Context;
use crate::runtime::stores::Indexed;

/// The controller name used in metrics, logs and field managers.
pub const CONTROLLER: &str = "foundationdb-backup";

/// The tag every backup uses (FoundationDB's default).
pub const TAG: &str = "default";

/// One pass over a `FoundationDBBackup`.
pub struct BackupPass {
    /// Shared pass state.
    pub core: PassCore,
    /// The backup as read from the cache.
    pub backup: Arc<FoundationDBBackup>,
    /// Its cluster, once read.
    pub cluster: Option<FoundationDBCluster>,
    /// Status being computed.
    pub status: FoundationDBBackupStatus,
    /// Pods (the cluster's and the agents').
    pub pods: Indexed<CachedPod>,
    /// What `fdbbackup status` said on this pass.
    pub live: Option<plan::LiveStatus>,
    /// Shared context.
    pub ctx: Arc<Context>,
}

impl Pass for BackupPass {
    fn core(&self) -> &PassCore {
        &self.core
    }
    fn core_mut(&mut self) -> &mut PassCore {
        &mut self.core
    }
}

/// The running Pods of `instance` with an address, of `component` (`None`: any).
pub fn running_pods(
    pods: &Indexed<CachedPod>,
    namespace: &str,
    instance: &str,
    component: Option<&str>,
) -> Vec<Target> {
    let mut names: Vec<String> = pods
        .of_instance(namespace, instance)
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status
                    .as_ref()
                    .is_some_and(|s| s.phase.as_deref() == Some("Running") && s.pod_ip.is_some())
                && component
                    .is_none_or(|c| p.labels().get(crate::resources::labels::COMPONENT) == Some(c))
        })
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|pod| Target {
            namespace: namespace.to_owned(),
            pod,
        })
        .collect()
}

impl BackupPass {
    /// The admin seam.
    pub fn admin(&self) -> Result<Arc<dyn FdbAdmin>, crate::error::Error> {
        self.ctx.seam::<Arc<dyn FdbAdmin>>()
    }

    /// The cluster's running Pods (where `fdbbackup` runs).
    pub fn cluster_targets(&self) -> Vec<Target> {
        running_pods(
            &self.pods,
            &self.core.namespace,
            &self.backup.spec.cluster_name,
            None,
        )
        .into_iter()
        .filter(|t| t.pod != build::deployment_name(&self.core.name))
        .collect()
    }

    /// Runs `fdbbackup <args>` in a Pod of the cluster.
    pub async fn fdbbackup(&self, args: &[String]) -> Result<String, crate::error::Error> {
        let admin = self.admin()?;
        let mut last = FdbError::Unavailable(format!(
            "no Pod of cluster {} is running",
            self.backup.spec.cluster_name
        ));
        for t in self.cluster_targets() {
            let mut argv = vec!["fdbbackup".to_owned()];
            argv.extend(args.iter().cloned());
            argv.extend(["-C".to_owned(), super::build::CLUSTER_FILE.to_owned()]);
            match admin.tool(&t, argv).await {
                Err(FdbError::Unavailable(why)) => last = FdbError::Unavailable(why),
                Ok(out) => return Ok(out),
                Err(e) => return Err(self.database_error(&e)),
            }
        }
        Err(self.database_error(&last))
    }

    /// A failed FoundationDB call (category `Database`).
    pub fn database_error(&self, e: &FdbError) -> crate::error::Error {
        crate::error::Error::Database {
            cluster: format!("{}/{}", self.core.namespace, self.backup.spec.cluster_name),
            message: e.to_string(),
        }
    }
}

/// The backup pipeline, in the seed's order; `UpdateBackupStatus` runs first and last.
pub fn pipeline() -> Pipeline<BackupPass> {
    Pipeline::new(
        CONTROLLER,
        Box::new(steps::UpdateBackupStatus),
        vec![
            Box::new(steps::UpdateBackupAgents),
            Box::new(steps::StartBackup),
            Box::new(steps::StopBackup),
            Box::new(steps::ToggleBackupPaused),
            Box::new(steps::ModifyBackup),
        ],
    )
}
