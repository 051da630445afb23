//! SweepOrphans — deletes Services carrying this cluster's labels and owner UID that this pass
//! did not apply. Reached only when no earlier step stopped the pass, so a partial pass never
//! deletes what it did not get to. Destructive: skipped while a failed operation blocks the
//! cluster.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;

use crate::error::Error;
use crate::etcd::EtcdPass;
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::resources::{Labels, sweep};

/// See the module documentation.
pub struct SweepOrphans;

#[async_trait]
impl SubReconciler<EtcdPass> for SweepOrphans {
    fn name(&self) -> &'static str {
        "SweepOrphans"
    }

    fn destructive(&self) -> bool {
        true
    }

    async fn reconcile(&self, pass: &mut EtcdPass) -> Result<Outcome, Error> {
        let Some(uid) = pass.cluster.uid() else {
            return Ok(Outcome::Continue);
        };
        let ours = Labels::cluster_labels("etcd", &pass.core.name);
        let candidates: Vec<_> = pass
            .stores
            .services
            .of_instance(&pass.core.namespace, &pass.core.name)
            .iter()
            .filter(|svc| svc.labels().has_all(&ours))
            .map(|svc| svc.metadata.clone())
            .collect();
        let orphans = sweep::plan_orphans(&candidates, "Service", &uid, &pass.applied);
        let deleted =
            sweep::delete_named::<Service>(&pass.ctx.client, &pass.core.namespace, orphans).await?;
        if !deleted.is_empty() {
            pass.core.event(
                EventType::Normal,
                "OrphansDeleted",
                "SweepOrphans",
                format!("deleted Services no longer wanted: {}", deleted.join(", ")),
            );
        }
        Ok(Outcome::Continue)
    }
}
