//! RemoveServices — the seed (002) deletes the Services the cluster no longer needs. Steward
//! makes one Service at most, the headless one (AddServices): when `spec.routing.
//! headlessService` is off and the cache holds a Service named like the cluster that Steward
//! made for it (its labels and a controller reference to the cluster's UID), it is deleted
//! (already gone is fine). A Service of that name Steward did not make for this cluster is
//! never deleted: it is left alone with a log line. Nothing to do when the Service is wanted or
//! absent.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;

use super::delete;
use crate::error::Error;
use crate::foundationdb::{FdbPass, build};
use crate::pipeline::{Outcome, SubReconciler};

/// See the module documentation.
pub struct RemoveServices;

#[async_trait]
impl SubReconciler<FdbPass> for RemoveServices {
    fn name(&self) -> &'static str {
        "RemoveServices"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        if pass.cluster.spec.routing.headless_service {
            return Ok(Outcome::Continue);
        }
        let (ns, name) = (pass.core.namespace.clone(), pass.core.name.clone());
        let Some(cached) = pass.stores.services.get(&ObjectRef::new(&name).within(&ns)) else {
            return Ok(Outcome::Continue);
        };
        if cached.metadata.deletion_timestamp.is_some() {
            return Ok(Outcome::Continue);
        }
        if !build::is_own_headless_service(
            &pass.cluster,
            cached.labels(),
            cached.metadata.owner_references.as_deref(),
        ) {
            tracing::debug!(
                cluster = %format!("{ns}/{name}"),
                "Service {ns}/{name} was not made by Steward for this cluster; not deleted"
            );
            return Ok(Outcome::Continue);
        }
        let api: Api<Service> = Api::namespaced(pass.ctx.client.clone(), &ns);
        delete(&api, &name, "Service", &ns).await?;
        tracing::info!(
            cluster = %format!("{ns}/{name}"),
            "headless Service deleted (spec.routing.headlessService is off)"
        );
        Ok(Outcome::Continue)
    }
}
