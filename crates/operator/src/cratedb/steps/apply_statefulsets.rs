//! ApplyStatefulSets — server-side applies one StatefulSet per node set (masters first, then
//! the data sets in spec order). The Pod template follows the spec; the replica count does not:
//! it is the StatefulSet's own (the `ScaleNodes` step changes it in the seed's order). A set
//! that does not exist yet is created with the spec's replicas while the cluster has not been
//! bootstrapped, and with none afterwards (a data set added later grows in scale step 2).
//! With `updateStrategy: OnDelete`, a new template restarts nothing by itself.
//!
//! Removing a data set from `spec.nodes.data` is not implemented: its StatefulSet keeps running
//! (it still holds data), and the cluster is degraded with `NodeSetRemoved` naming it, until the
//! set is put back (and scaled down to what it may lose, the seed's way).

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::cratedb::names::NODE_SET_LABEL;
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

/// Node sets that have a StatefulSet but are no longer in the spec, sorted.
pub fn removed_sets<'a>(
    existing: impl IntoIterator<Item = &'a str>,
    wanted: &[String],
) -> Vec<String> {
    let mut removed: Vec<String> = existing
        .into_iter()
        .filter(|s| !wanted.iter().any(|w| w == s))
        .map(str::to_owned)
        .collect();
    removed.sort();
    removed.dedup();
    removed
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
        let existing: Vec<std::sync::Arc<StatefulSet>> = pass
            .stores
            .statefulsets
            .of_instance(&pass.core.namespace, &pass.core.name);
        let wanted: Vec<String> = valid.sets.iter().map(|s| s.name.clone()).collect();
        let removed = removed_sets(
            existing
                .iter()
                .filter_map(|s| s.labels().get(NODE_SET_LABEL).map(String::as_str)),
            &wanted,
        );
        if !removed.is_empty() {
            pass.core.degrade(
                "NodeSetRemoved",
                format!(
                    "data set(s) {} were removed from spec.nodes.data; removing a data set is not \
                     implemented, so their StatefulSets keep running: put them back, and scale \
                     them down instead",
                    removed.join(", ")
                ),
            );
        }
        Ok(Outcome::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_set_dropped_from_the_spec_is_named() {
        let wanted = vec!["master".to_owned(), "hot".to_owned()];
        assert_eq!(
            removed_sets(["master", "hot", "cold", "cold"], &wanted),
            ["cold"]
        );
        assert!(removed_sets(["master", "hot"], &wanted).is_empty());
    }
}
