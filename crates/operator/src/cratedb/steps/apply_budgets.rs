//! ApplyBudgets — one PodDisruptionBudget per node set, `maxUnavailable: 1`, so a drain never
//! takes more than one master or one node of a data set at a time.

use async_trait::async_trait;

use crate::cratedb::steps::validated;
use crate::cratedb::{CratePass, build};
use crate::error::Error;
use crate::pipeline::{Outcome, SubReconciler};

/// See the module documentation.
pub struct ApplyBudgets;

#[async_trait]
impl SubReconciler<CratePass> for ApplyBudgets {
    fn name(&self) -> &'static str {
        "ApplyBudgets"
    }

    async fn reconcile(&self, pass: &mut CratePass) -> Result<Outcome, Error> {
        let valid = validated(pass)?;
        for set in &valid.sets {
            let Some(budget) = build::pdb::budget(&pass.cluster, &pass.names, set) else {
                return Err(Error::Internal {
                    message: "cluster has no UID or namespace".into(),
                });
            };
            pass.applier
                .apply_unless_current(&budget, &pass.stores.budgets, &mut pass.applied)
                .await?;
        }
        Ok(Outcome::Continue)
    }
}
