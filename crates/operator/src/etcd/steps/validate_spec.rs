//! ValidateSpec — parses the spec once into `ValidatedEtcdCluster`. An invalid spec degrades the
//! cluster with `InvalidSpec`, emits one Warning Event per distinct problem, and stops the pass
//! until the spec changes. It never deletes or changes anything.

use async_trait::async_trait;

use crate::error::Error;
use crate::etcd::{EtcdPass, validate};
use crate::pipeline::{Outcome, SubReconciler};

/// See the module documentation.
pub struct ValidateSpec;

#[async_trait]
impl SubReconciler<EtcdPass> for ValidateSpec {
    fn name(&self) -> &'static str {
        "ValidateSpec"
    }

    async fn reconcile(&self, pass: &mut EtcdPass) -> Result<Outcome, Error> {
        match validate::validate(&pass.cluster) {
            Ok(valid) => {
                pass.validated = Some(valid);
                Ok(pass.core.record_validation(None))
            }
            Err(message) => Ok(pass.core.record_validation(Some(&message))),
        }
    }
}
