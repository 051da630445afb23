//! EnsureSnapshotClaim — creates the claim the snapshot is written to when it is missing
//! (`<cluster>-snapshots` unless the spec names one). The claim has no owner and Steward never
//! deletes it. A claim being deleted holds the backup (`Pending`).

use async_trait::async_trait;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, PostParams};
use steward_api::etcd::SnapshotPhase;

use super::SOON;
use crate::error::Error;
use crate::etcd::backup::SnapshotPass;
use crate::etcd::build::snapshot::{claim, claim_name};
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct EnsureSnapshotClaim;

#[async_trait]
impl SubReconciler<SnapshotPass> for EnsureSnapshotClaim {
    fn name(&self) -> &'static str {
        "EnsureSnapshotClaim"
    }

    async fn reconcile(&self, pass: &mut SnapshotPass) -> Result<Outcome, Error> {
        if pass.finished() || pass.status.phase == Some(SnapshotPhase::Running) {
            return Ok(Outcome::Continue);
        }
        let name = claim_name(&pass.backup);
        let object = format!("PersistentVolumeClaim {}/{name}", pass.core.namespace);
        let api: Api<PersistentVolumeClaim> = pass.ctx.api(&pass.core.namespace);
        match api
            .get_opt(&name)
            .await
            .map_err(|source| Error::kube("get", object.clone(), source))?
        {
            Some(c) if c.metadata.deletion_timestamp.is_some() => {
                let why = format!("claim {name} is being deleted");
                pass.status.phase = Some(SnapshotPhase::Pending);
                pass.status.message = Some(why.clone());
                Ok(Outcome::stop(SOON * 10, why))
            }
            Some(_) => Ok(Outcome::Continue),
            None => {
                match api
                    .create(&PostParams::default(), &claim(&pass.backup))
                    .await
                {
                    Ok(_) => pass.core.event(
                        EventType::Normal,
                        "ClaimCreated",
                        "Backup",
                        format!("created claim {name} for the cluster's snapshots"),
                    ),
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(source) => return Err(Error::kube("create", object, source)),
                }
                Ok(Outcome::Continue)
            }
        }
    }
}
