//! ValidateSpec — parses the spec once into `ValidatedPostgresCluster`. An invalid spec
//! degrades the cluster with `InvalidSpec`, emits one Warning Event per distinct problem, and
//! stops the pass until the spec changes. It never deletes or changes anything. While a major
//! upgrade runs the instances on the new version (`status.upgrade`, from `StartPrimary`), the
//! validated image and version are the upgrade's.

use async_trait::async_trait;

use crate::error::Error;
use crate::pipeline::{Outcome, SubReconciler};
use crate::postgres::{PostgresPass, validate};

/// See the module documentation.
pub struct ValidateSpec;

#[async_trait]
impl SubReconciler<PostgresPass> for ValidateSpec {
    fn name(&self) -> &'static str {
        "ValidateSpec"
    }

    async fn reconcile(&self, pass: &mut PostgresPass) -> Result<Outcome, Error> {
        match validate::validate(&pass.cluster) {
            Ok(mut valid) => {
                // From its StartPrimary step on, a major upgrade runs the instances on the new
                // version; the spec says so only once it is done.
                if let Some(upgrade) = pass
                    .status
                    .upgrade
                    .as_ref()
                    .filter(|u| crate::postgres::steps::upgrade_cluster::runs_new_version(u))
                {
                    valid.image.clone_from(&upgrade.image);
                    if let Ok(version) = upgrade.to_version.parse() {
                        valid.version = version;
                    }
                }
                pass.validated = Some(valid);
                Ok(pass.core.record_validation(None))
            }
            Err(message) => Ok(pass.core.record_validation(Some(&message))),
        }
    }
}
