//! ApplyServices — server-side applies the discovery Service (headless, transport) and the
//! client Service (HTTP, PostgreSQL), skipping applies whose result is already in place.

use async_trait::async_trait;

use crate::cratedb::{CratePass, build};
use crate::error::Error;
use crate::pipeline::{Outcome, SubReconciler};

/// See the module documentation.
pub struct ApplyServices;

#[async_trait]
impl SubReconciler<CratePass> for ApplyServices {
    fn name(&self) -> &'static str {
        "ApplyServices"
    }

    async fn reconcile(&self, pass: &mut CratePass) -> Result<Outcome, Error> {
        for service in [
            build::service::discovery(&pass.cluster, &pass.names),
            build::service::client(&pass.cluster, &pass.names),
        ] {
            let Some(service) = service else {
                return Err(Error::Internal {
                    message: "cluster has no UID or namespace".into(),
                });
            };
            pass.applier
                .apply_unless_current(&service, &pass.stores.services, &mut pass.applied)
                .await?;
        }
        Ok(Outcome::Continue)
    }
}
