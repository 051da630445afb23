//! UpdateSidecarVersions — sets the image of every Pod's sidecar container to the spec's version
//! (seed 002), in place: a container's image is the one field of a running Pod that may
//! change, and the kubelet restarts that container alone. The sidecar (the unified image in
//! sidecar mode) then provides its version's binaries in the shared directory, where the
//! monitor finds them when its configuration names that version: the processes move to it at
//! BounceProcesses, and the main container follows through UpdatePods once the cluster runs
//! it. Which image a sidecar runs is read from the Pod's status (until the kubelet restarts
//! it, the patch is sent again: it changes nothing). Groups marked for removal and terminating
//! Pods are skipped; a Pod without the sidecar (made by an older Steward) is left to
//! UpdatePods (`IncorrectPodSpec`).

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{SOON, group_pods};
use crate::error::Error;
use crate::foundationdb::FdbPass;
use crate::foundationdb::build::{SIDECAR, sidecar_image};
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct UpdateSidecarVersions;

/// (pure) The image `status` reports for the sidecar container (what the kubelet runs; the
/// cache keeps Pods' status, not their containers' specs), if it reports one.
pub fn sidecar_image_of(status: Option<&PodStatus>) -> Option<&str> {
    status?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == SIDECAR)
        .map(|c| c.image.as_str())
}

#[async_trait]
impl SubReconciler<FdbPass> for UpdateSidecarVersions {
    fn name(&self) -> &'static str {
        "UpdateSidecarVersions"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let want = sidecar_image(&pass.cluster);
        let pods = group_pods(pass);
        let stale: Vec<String> = pass
            .status
            .process_groups
            .iter()
            .filter(|g| g.removal_timestamp.is_none())
            .filter_map(|g| pods.get(&g.process_group_id))
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| sidecar_image_of(p.status.as_ref()).is_some_and(|i| i != want))
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        if stale.is_empty() {
            return Ok(Outcome::Continue);
        }
        let api: Api<Pod> = Api::namespaced(pass.ctx.client.clone(), &pass.core.namespace);
        let patch = json!({"spec": {"containers": [{"name": SIDECAR, "image": want}]}});
        for name in &stale {
            match api
                .patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(source) => {
                    return Err(Error::kube(
                        "patch",
                        format!("Pod {}/{name}", pass.core.namespace),
                        source,
                    ));
                }
            }
        }
        pass.core.event(
            EventType::Normal,
            "SidecarsUpdated",
            "UpdateSidecarVersions",
            format!("sidecar image {want} on {}", stale.join(", ")),
        );
        Ok(Outcome::requeue(SOON, "sidecar images updated"))
    }
}
