//! ApplyServices — server-side applies the headless Service (seed step 1) and the
//! `<cluster>-client` Service applications connect to. Does nothing new when
//! the Service already matches (the API server treats an identical apply as a no-op). Never
//! deletes; removal of stale Services is the orphan sweep's job.

use async_trait::async_trait;

use crate::error::Error;
use crate::etcd::{EtcdPass, build};
use crate::pipeline::{Outcome, SubReconciler};

/// See the module documentation.
pub struct ApplyServices;

#[async_trait]
impl SubReconciler<EtcdPass> for ApplyServices {
    fn name(&self) -> &'static str {
        "ApplyServices"
    }

    async fn reconcile(&self, pass: &mut EtcdPass) -> Result<Outcome, Error> {
        let Some(valid) = &pass.validated else {
            return Err(Error::Internal {
                message: "ApplyServices ran before ValidateSpec".into(),
            });
        };
        let services = [
            build::service::headless_service(&pass.cluster, valid),
            build::service::client_service(&pass.cluster, valid),
        ];
        for service in services {
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
