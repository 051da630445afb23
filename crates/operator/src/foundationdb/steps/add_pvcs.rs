//! AddPVCs — creates the claim of every stateful process group that has none and is not marked
//! for removal (seed 002). An existing claim is never modified.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, PostParams};

use super::{class_of, group_claim};
use crate::error::Error;
use crate::foundationdb::{FdbPass, build};
use crate::pipeline::{Outcome, SubReconciler};

/// See the module documentation.
pub struct AddPvcs;

#[async_trait]
impl SubReconciler<FdbPass> for AddPvcs {
    fn name(&self) -> &'static str {
        "AddPVCs"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(pass.ctx.client.clone(), &pass.core.namespace);
        for g in pass.status.process_groups.clone() {
            let Some(class) = class_of(pass, &g) else {
                continue;
            };
            if !class.is_stateful()
                || g.removal_timestamp.is_some()
                || group_claim(pass, &g.process_group_id).is_some()
            {
                continue;
            }
            let claim = build::claim(&pass.cluster, &g.process_group_id, class);
            match api.create(&PostParams::default(), &claim).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(source) => {
                    return Err(Error::kube(
                        "create",
                        format!(
                            "PersistentVolumeClaim {}/{}",
                            pass.core.namespace,
                            build::claim_name(&g.process_group_id)
                        ),
                        source,
                    ));
                }
            }
        }
        Ok(Outcome::Continue)
    }
}
