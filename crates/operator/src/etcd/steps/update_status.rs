//! UpdateStatus — runs first and last. Computes the engine's status fields and conditions from
//! what was observed (the cached children). Never writes; the runtime writes status once, after
//! the pass. Without member management, membership is reported as unknown rather than guessed.

use async_trait::async_trait;
use steward_api::common::condition_types;

use crate::conditions::Status;
use crate::error::Error;
use crate::etcd::EtcdPass;
use crate::pipeline::{Outcome, SubReconciler};
use crate::resources::Labels;

/// See the module documentation.
pub struct UpdateStatus;

#[async_trait]
impl SubReconciler<EtcdPass> for UpdateStatus {
    fn name(&self) -> &'static str {
        "UpdateStatus"
    }

    async fn reconcile(&self, pass: &mut EtcdPass) -> Result<Outcome, Error> {
        let name = pass.core.name.clone();
        pass.status.selector = format!(
            "{},{}",
            Labels::cluster_selector("etcd", &name),
            "app.kubernetes.io/component=member"
        );
        let generation = pass.core.generation;
        let wanted = pass.cluster.spec.replicas;
        // Members are not observed yet (member management is not implemented), so the cluster
        // is never reported available, and a scale is always pending.
        pass.core.status.generations.needs_scale =
            (pass.status.replicas != wanted).then_some(generation);
        pass.core.set_condition(
            condition_types::AVAILABLE,
            Status::Unknown,
            "MembersNotObserved",
            "etcd member management is not implemented yet; membership is not observed",
        );
        Ok(Outcome::Continue)
    }
}
