//! AddServices — the seed (002) creates the Services the cluster needs: none by default, a
//! headless Service named like the cluster when `routing.headlessService` is set, and one
//! Service per process group when `routing.publicIPSource` is `service`. Steward implements
//! the headless Service only (`publicIPSource` is not in the spec: processes are reached at
//! their Pod's IP): with `spec.routing.headlessService` it server-side applies the Service
//! (`clusterIP: None`, not-ready addresses published, selecting every Pod of the cluster, owned
//! by it); otherwise it does nothing (RemoveServices deletes a Service no longer wanted).
//!
//! It never takes over a Service of that name that Steward did not make for this cluster (no
//! controller reference to the cluster, or not Steward's labels): the cluster is degraded with
//! `ServiceNameTaken`, naming `spec.routing.headlessService` (a Warning Event when it becomes
//! so, from the pipeline), and the other steps go on.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;

use crate::error::Error;
use crate::foundationdb::{FdbPass, build};
use crate::pipeline::{Outcome, SubReconciler};
use crate::resources::packed::PackedMap;

/// See the module documentation.
pub struct AddServices;

/// The degradation reason of a Service name another object holds.
pub const NAME_TAKEN: &str = "ServiceNameTaken";

#[async_trait]
impl SubReconciler<FdbPass> for AddServices {
    fn name(&self) -> &'static str {
        "AddServices"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        if !pass.cluster.spec.routing.headless_service {
            return Ok(Outcome::Continue);
        }
        let Some(service) = build::headless_service(&pass.cluster) else {
            return Err(Error::Internal {
                message: "cluster has no UID or namespace".into(),
            });
        };
        let name = pass.core.name.clone();
        let ns = pass.core.namespace.clone();
        // The cache holds Steward's Services only: a user's Service of that name is looked up
        // before the first apply (the forced apply would take it over).
        let cached = pass.stores.services.get(&ObjectRef::new(&name).within(&ns));
        let own = match &cached {
            Some(s) => build::is_own_headless_service(
                &pass.cluster,
                s.labels(),
                s.metadata.owner_references.as_deref(),
            ),
            None => {
                let api: Api<Service> = Api::namespaced(pass.ctx.client.clone(), &ns);
                match api.get_opt(&name).await {
                    Ok(None) => true,
                    Ok(Some(s)) => build::is_own_headless_service(
                        &pass.cluster,
                        &PackedMap::new(s.labels()),
                        s.metadata.owner_references.as_deref(),
                    ),
                    Err(source) => {
                        return Err(Error::kube("get", format!("Service {ns}/{name}"), source));
                    }
                }
            }
        };
        if !own {
            let message = format!(
                "spec.routing.headlessService: Service {ns}/{name} exists and was not made by \
                 Steward for this cluster; it is left alone (rename or delete it, or turn \
                 headlessService off)"
            );
            tracing::warn!(cluster = %format!("{ns}/{name}"), "{message}");
            pass.core.degrade(NAME_TAKEN, message);
            return Ok(Outcome::Continue);
        }
        pass.applier
            .apply_unless_current(&service, &pass.stores.services, &mut pass.applied)
            .await?;
        Ok(Outcome::Continue)
    }
}
