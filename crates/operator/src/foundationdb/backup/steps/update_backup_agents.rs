//! UpdateBackupAgents — creates the backup's claim unless it exists (a create answered 409) and server-side applies the
//! agents' Deployment (`backup_agent` in FoundationDB's image, the cluster's cluster file from
//! its ConfigMap, the claim at `/var/fdb/backup`) when it differs from the spec (seed 002).

use async_trait::async_trait;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, PostParams};

use crate::error::Error;
use crate::foundationdb::backup::BackupPass;
use crate::foundationdb::backup::build::{claim, claim_name, deployment};
use crate::pipeline::{Outcome, SubReconciler};
use crate::resources::{AppliedSet, Applier};

/// See the module documentation.
pub struct UpdateBackupAgents;

#[async_trait]
impl SubReconciler<BackupPass> for UpdateBackupAgents {
    fn name(&self) -> &'static str {
        "UpdateBackupAgents"
    }

    async fn reconcile(&self, pass: &mut BackupPass) -> Result<Outcome, Error> {
        let Some(cluster) = pass.cluster.clone() else {
            return Ok(Outcome::Continue);
        };
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(pass.ctx.client.clone(), &pass.core.namespace);
        // Created unless it exists (409): the claim is never changed or read back. Only while
        // the agents are not all up: a settled backup sends no request.
        let settled = pass.status.deployment_configured
            && pass.status.agent_count == i32::try_from(pass.backup.spec.agent_count).unwrap_or(0);
        let name = claim_name(&pass.core.name);
        if !settled {
            match claims
                .create(&PostParams::default(), &claim(&pass.backup))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(source) => {
                    return Err(Error::kube(
                        "create",
                        format!("PersistentVolumeClaim {name}"),
                        source,
                    ));
                }
            }
        }
        if pass.status.deployment_configured {
            return Ok(Outcome::Continue);
        }
        let Some(d) = deployment(&pass.backup, &cluster) else {
            return Err(Error::Internal {
                message: "backup has no UID or namespace".into(),
            });
        };
        Applier::new(pass.ctx.client.clone(), super::super::CONTROLLER)
            .apply(&d, &mut AppliedSet::default())
            .await?;
        pass.status.deployment_configured = true;
        Ok(Outcome::requeue(super::SOON, "backup agents updated"))
    }
}
