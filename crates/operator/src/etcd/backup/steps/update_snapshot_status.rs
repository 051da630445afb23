//! UpdateSnapshotStatus — runs first and last. The first run reads the backup's cluster (an
//! unfinished backup of a cluster that does not exist waits, `Pending` with
//! `Degraded=ClusterNotFound`, and the pass stops); both runs set the `Completed` condition
//! from the phase, with the snapshot's revision, keys and size or the reason it waits or
//! failed.

use std::time::Duration;

use async_trait::async_trait;
use kube::api::Api;
use steward_api::etcd::{EtcdCluster, SnapshotPhase};

use crate::conditions::Status;
use crate::error::Error;
use crate::etcd::backup::SnapshotPass;
use crate::pipeline::{Outcome, SubReconciler};

/// See the module documentation.
pub struct UpdateSnapshotStatus;

/// The condition this step keeps.
pub const COMPLETED: &str = "Completed";

#[async_trait]
impl SubReconciler<SnapshotPass> for UpdateSnapshotStatus {
    fn name(&self) -> &'static str {
        "UpdateSnapshotStatus"
    }

    async fn reconcile(&self, pass: &mut SnapshotPass) -> Result<Outcome, Error> {
        let first = !pass.looked;
        pass.looked = true;
        if first && !pass.finished() {
            let api: Api<EtcdCluster> = pass.ctx.api(&pass.core.namespace);
            let name = pass.backup.spec.cluster.clone();
            let cluster = api.get_opt(&name).await.map_err(|source| {
                Error::kube(
                    "get",
                    format!("EtcdCluster {}/{name}", pass.core.namespace),
                    source,
                )
            })?;
            match cluster {
                Some(c) => pass.cluster = Some(c),
                None => {
                    let message = format!(
                        "EtcdCluster {name} does not exist in namespace {}",
                        pass.core.namespace
                    );
                    if pass.status.phase.is_none() {
                        pass.status.phase = Some(SnapshotPhase::Pending);
                    }
                    pass.status.message = Some(message.clone());
                    pass.core.degrade("ClusterNotFound", message.clone());
                    set_completed(pass);
                    return Ok(Outcome::stop(Duration::from_secs(30), message));
                }
            }
        }
        set_completed(pass);
        Ok(Outcome::Continue)
    }
}

fn set_completed(pass: &mut SnapshotPass) {
    let s = &pass.status;
    let (status, reason, message) = match s.phase {
        Some(SnapshotPhase::Completed) => (
            Status::True,
            "SnapshotTaken",
            format!(
                "revision {} ({} keys, {} bytes) in {} on claim {}",
                s.revision.unwrap_or_default(),
                s.total_keys.unwrap_or_default(),
                s.size_bytes.unwrap_or_default(),
                s.location.as_ref().map_or("?", |l| l.file.as_str()),
                s.location.as_ref().map_or("?", |l| l.claim.as_str()),
            ),
        ),
        Some(SnapshotPhase::Failed) => (
            Status::False,
            "SnapshotFailed",
            s.error.clone().unwrap_or_else(|| "failed".into()),
        ),
        Some(SnapshotPhase::Running) => (
            Status::False,
            "SnapshotRunning",
            s.message
                .clone()
                .unwrap_or_else(|| "the snapshot Job runs".into()),
        ),
        Some(SnapshotPhase::Pending) | None => (
            Status::False,
            "SnapshotPending",
            s.message.clone().unwrap_or_else(|| "not started".into()),
        ),
    };
    pass.core.set_condition(COMPLETED, status, reason, message);
}
