//! ApplyBudget — server-side applies the members' PodDisruptionBudget, sized by quorum math
//! (`maxUnavailable = replicas − quorum`), so that voluntary disruptions (node drains) never
//! take a quorum of members down at once.

use async_trait::async_trait;

use crate::error::Error;
use crate::etcd::{EtcdPass, build};
use crate::pipeline::{Outcome, SubReconciler};

/// See the module documentation.
pub struct ApplyBudget;

#[async_trait]
impl SubReconciler<EtcdPass> for ApplyBudget {
    fn name(&self) -> &'static str {
        "ApplyBudget"
    }

    async fn reconcile(&self, pass: &mut EtcdPass) -> Result<Outcome, Error> {
        let Some(valid) = &pass.validated else {
            return Err(Error::Internal {
                message: "ApplyBudget ran before ValidateSpec".into(),
            });
        };
        let Some(budget) = build::pdb::budget(&pass.cluster, valid) else {
            return Err(Error::Internal {
                message: "cluster has no UID or namespace".into(),
            });
        };
        pass.applier
            .apply_unless_current(&budget, &pass.stores.budgets, &mut pass.applied)
            .await?;
        Ok(Outcome::Continue)
    }
}
