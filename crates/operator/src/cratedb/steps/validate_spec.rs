//! ValidateSpec — parses the spec once into `ValidatedCrateCluster`. An invalid spec degrades
//! the cluster with `InvalidSpec`, emits one Warning Event per distinct problem, and stops the
//! pass until the spec changes: nothing is applied, scaled or deleted.

use async_trait::async_trait;

use crate::cratedb::{CratePass, validate};
use crate::error::Error;
use crate::pipeline::{Outcome, SubReconciler};

/// See the module documentation.
pub struct ValidateSpec;

#[async_trait]
impl SubReconciler<CratePass> for ValidateSpec {
    fn name(&self) -> &'static str {
        "ValidateSpec"
    }

    async fn reconcile(&self, pass: &mut CratePass) -> Result<Outcome, Error> {
        match validate::validate(&pass.cluster) {
            Ok(valid) => {
                pass.validated = Some(valid);
                Ok(pass.core.record_validation(None))
            }
            Err(message) => Ok(pass.core.record_validation(Some(&message))),
        }
    }
}
