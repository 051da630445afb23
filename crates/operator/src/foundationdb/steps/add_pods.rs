//! AddPods — creates the Pod of every process group that has none (seed 002). A group marked
//! for removal gets its Pod back unless its exclusion was seen complete: a storage process that
//! crashed while draining must come back to finish. A stateful group waits for its claim.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};

use super::{SOON, class_of, group_claim, group_pods};
use crate::error::Error;
use crate::foundationdb::{FdbPass, build};
use crate::pipeline::{Outcome, SubReconciler};

/// See the module documentation.
pub struct AddPods;

#[async_trait]
impl SubReconciler<FdbPass> for AddPods {
    fn name(&self) -> &'static str {
        "AddPods"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let api: Api<Pod> = Api::namespaced(pass.ctx.client.clone(), &pass.core.namespace);
        let pods = group_pods(pass);
        let mut waiting = Vec::new();
        for g in pass.status.process_groups.clone() {
            let Some(class) = class_of(pass, &g) else {
                continue;
            };
            if pods.contains_key(&g.process_group_id)
                || (g.removal_timestamp.is_some()
                    && (g.exclusion_timestamp.is_some() || g.exclusion_skipped))
            {
                continue;
            }
            if class.is_stateful() && group_claim(pass, &g.process_group_id).is_none() {
                waiting.push(g.process_group_id.clone());
                continue;
            }
            let Some(pod) = build::pod(
                &pass.cluster,
                &g.process_group_id,
                class,
                pass.status.running_version.as_deref(),
            ) else {
                return Err(Error::Internal {
                    message: "cluster has no UID or namespace".into(),
                });
            };
            match api.create(&PostParams::default(), &pod).await {
                Ok(_) => pass.created_pods.push(g.process_group_id.clone()),
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(source) => {
                    return Err(Error::kube(
                        "create",
                        format!("Pod {}/{}", pass.core.namespace, g.process_group_id),
                        source,
                    ));
                }
            }
        }
        if waiting.is_empty() {
            Ok(Outcome::Continue)
        } else {
            Ok(Outcome::requeue(
                SOON,
                format!("waiting for the claims of {}", waiting.join(", ")),
            ))
        }
    }
}
