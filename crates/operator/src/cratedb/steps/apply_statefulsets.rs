//! ApplyStatefulSets — server-side applies one StatefulSet per node set (masters first, then
//! the data sets in spec order). The Pod template follows the spec; the replica count does not:
//! it is the StatefulSet's own (the `ScaleNodes` step changes it in the seed's order). A set
//! that does not exist yet is created with the spec's replicas while the cluster has not been
//! bootstrapped, and with none afterwards (a data set added later grows in scale step 2).
//! With `updateStrategy: OnDelete`, a new template restarts nothing by itself.

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::runtime::reflector::ObjectRef;

use crate::cratedb::steps::validated;
use crate::cratedb::{CratePass, build};
use crate::error::Error;
use crate::pipeline::{Outcome, SubReconciler};

/// See the module documentation.
pub struct ApplyStatefulSets;

/// The StatefulSet `name` of the pass's namespace, from the cache.
pub fn cached(pass: &CratePass, name: &str) -> Option<std::sync::Arc<StatefulSet>> {
    pass.stores
        .statefulsets
        .get(&ObjectRef::new(name).within(&pass.core.namespace))
}

/// The replicas a StatefulSet has now (`spec.replicas`).
pub fn current_replicas(set: &StatefulSet) -> i32 {
    set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

#[async_trait]
impl SubReconciler<CratePass> for ApplyStatefulSets {
    fn name(&self) -> &'static str {
        "ApplyStatefulSets"
    }

    async fn reconcile(&self, pass: &mut CratePass) -> Result<Outcome, Error> {
        let valid = validated(pass)?;
        let bootstrapped = pass.status.bootstrap.done;
        for set in &valid.sets {
            let name = pass.names.statefulset(&set.name);
            let replicas = match cached(pass, &name) {
                Some(existing) => current_replicas(&existing),
                None if !bootstrapped => set.replicas,
                None => 0,
            };
            let Some(sts) =
                build::statefulset::statefulset(&pass.cluster, &valid, &pass.names, set, replicas)
            else {
                return Err(Error::Internal {
                    message: "cluster has no UID or namespace".into(),
                });
            };
            pass.applier
                .apply_unless_current(&sts, &pass.stores.statefulsets, &mut pass.applied)
                .await?;
        }
        Ok(Outcome::Continue)
    }
}
