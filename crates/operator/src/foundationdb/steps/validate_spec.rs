//! ValidateSpec — checks what the schema cannot (`foundationdb::validate`). An invalid spec
//! degrades the cluster with `InvalidSpec`, emits one Warning Event per distinct problem, and
//! stops the pass until the spec changes: nothing is created, excluded or deleted. (Not a step
//! of seed 002, whose webhook does this; Steward's steps after it can rely on a valid spec.)

use async_trait::async_trait;

use crate::error::Error;
use crate::foundationdb::{FdbPass, validate};
use crate::pipeline::{Outcome, SubReconciler};

/// See the module documentation.
pub struct ValidateSpec;

#[async_trait]
impl SubReconciler<FdbPass> for ValidateSpec {
    fn name(&self) -> &'static str {
        "ValidateSpec"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        match validate::validate(&pass.cluster, pass.status.running_version.as_deref()) {
            Ok(()) => {
                pass.valid = true;
                Ok(pass.core.record_validation(None))
            }
            Err(message) => Ok(pass.core.record_validation(Some(&message))),
        }
    }
}
