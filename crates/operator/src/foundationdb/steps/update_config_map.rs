//! UpdateConfigMap — server-side applies the cluster's ConfigMap: each class's monitor
//! configuration (`config.json-<class>`) and, once chosen, the cluster file (`fdb.cluster`),
//! with Steward's labels (seed 002). Skipped for an unchanged body already in place.

use async_trait::async_trait;

use crate::error::Error;
use crate::foundationdb::{FdbPass, build};
use crate::pipeline::{Outcome, SubReconciler};

/// See the module documentation.
pub struct UpdateConfigMap;

#[async_trait]
impl SubReconciler<FdbPass> for UpdateConfigMap {
    fn name(&self) -> &'static str {
        "UpdateConfigMap"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let Some(cm) = build::config_map(&pass.cluster, pass.status.connection_string.as_deref())
        else {
            return Err(Error::Internal {
                message: "cluster has no UID or namespace".into(),
            });
        };
        pass.applier
            .apply_unless_current(&cm, &pass.stores.config_maps, &mut pass.applied)
            .await?;
        Ok(Outcome::Continue)
    }
}
