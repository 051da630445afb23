//! ApplyRetention — once the snapshot is `Completed`, deletes the cluster's older `Completed`
//! `EtcdBackup`s on the same claim beyond the backup's `spec.retain` (their files were removed
//! by this snapshot's Job, which listed the same backups). Newer snapshots are never touched;
//! a backup without `retain` deletes nothing. Idempotent: a later pass finds nothing left.

use async_trait::async_trait;
use kube::api::{Api, DeleteParams};
use steward_api::etcd::{EtcdBackup, SnapshotPhase};

use super::{beyond_retention, siblings};
use crate::error::Error;
use crate::etcd::backup::SnapshotPass;
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct ApplyRetention;

#[async_trait]
impl SubReconciler<SnapshotPass> for ApplyRetention {
    fn name(&self) -> &'static str {
        "ApplyRetention"
    }

    fn destructive(&self) -> bool {
        true
    }

    async fn reconcile(&self, pass: &mut SnapshotPass) -> Result<Outcome, Error> {
        if pass.status.phase != Some(SnapshotPhase::Completed) || pass.backup.spec.retain.is_none()
        {
            return Ok(Outcome::Continue);
        }
        let mut this = (*pass.backup).clone();
        this.status = Some(pass.status.clone());
        let drop = beyond_retention(&this, &siblings(pass).await?);
        if drop.is_empty() {
            return Ok(Outcome::Continue);
        }
        let api: Api<EtcdBackup> = pass.ctx.api(&pass.core.namespace);
        let mut gone = Vec::new();
        for (name, _) in &drop {
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => gone.push(name.clone()),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(source) => {
                    return Err(Error::kube(
                        "delete",
                        format!("EtcdBackup {}/{name}", pass.core.namespace),
                        source,
                    ));
                }
            }
        }
        if !gone.is_empty() {
            pass.core.event(
                EventType::Normal,
                "SnapshotsPruned",
                "Backup",
                format!(
                    "retain {}: deleted the older snapshots {}",
                    pass.backup.spec.retain.unwrap_or_default(),
                    gone.join(", ")
                ),
            );
        }
        Ok(Outcome::Continue)
    }
}
