//! (pure) The PodDisruptionBudget `<cluster>-replicas`: at most one replica Pod is voluntarily
//! disrupted (drained, evicted) at a time, so a node drain never takes every read replica — and
//! every fail-over candidate — away at once.
//!
//! **The primary is not covered**, on purpose. A budget over the single primary Pod would have
//! to say `maxUnavailable: 0` to protect it, and that blocks every drain of its node forever
//! (an eviction that can never succeed), which the Kubernetes docs warn against for singletons.
//! With `maxUnavailable: 1` it would protect nothing. Instead, an evicted primary is handled
//! like any lost primary: it stays not ready for `failover.detectionDelaySeconds` and the
//! engine fails over to the most up-to-date replica (or, with one instance or automatic
//! fail-over off, waits for the Pod to come back on another node with its claim). The budget
//! over the replicas keeps a candidate for that fail-over.
//!
//! The budget selects by the role label, so after a fail-over it follows the new roles
//! without a change. With one instance it selects no Pod and allows everything.
//!
//! It says `minAvailable: replicas − 1` as an **integer**, not `maxUnavailable: 1`: with
//! `maxUnavailable` Kubernetes' disruption controller takes the expected count from the scale
//! of the Pods' controller — the `PostgresCluster`, whose scale is every instance, primary
//! included — while the budget selects only the replicas, so it would never allow a
//! disruption. An integer `minAvailable` counts the selected Pods themselves.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use steward_api::postgres::{InstanceRole, PostgresCluster};

use crate::postgres::names::ENGINE;
use crate::postgres::validate::ValidatedPostgresCluster;
use crate::resources::{Labels, child_meta};

/// Replicas that may be voluntarily disrupted at once.
pub const MAX_UNAVAILABLE_REPLICAS: i32 = 1;

/// Replicas that must stay available: all wanted replicas but [`MAX_UNAVAILABLE_REPLICAS`].
pub fn min_available(instances: u32) -> i32 {
    let replicas = i32::try_from(instances.saturating_sub(1)).unwrap_or(i32::MAX);
    (replicas - MAX_UNAVAILABLE_REPLICAS).max(0)
}

/// The budget `<cluster>-replicas`. `None` when the owner was never stored.
pub fn budget(
    owner: &PostgresCluster,
    cluster: &ValidatedPostgresCluster,
) -> Option<PodDisruptionBudget> {
    let names = cluster.names();
    let labels = Labels::new(ENGINE, &cluster.name, "budget");
    let metadata = child_meta(owner, names.budget(), &labels, &BTreeMap::new())?;
    Some(PodDisruptionBudget {
        metadata,
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(min_available(cluster.instances))),
            selector: Some(LabelSelector {
                match_labels: Some(names.role_selector(InstanceRole::Replica)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::names::ROLE_LABEL;
    use crate::postgres::validate::tests::{cluster, validated};

    #[test]
    fn one_replica_at_a_time_and_never_the_primary() {
        let owner = cluster("demo", 3, "16");
        let v = validated(&owner);
        let pdb = budget(&owner, &v).unwrap();
        assert_eq!(pdb.metadata.name.as_deref(), Some("demo-replicas"));
        let spec = pdb.spec.unwrap();
        assert_eq!(spec.min_available, Some(IntOrString::Int(1)));
        assert_eq!(spec.max_unavailable, None);
        let selector = spec.selector.unwrap().match_labels.unwrap();
        assert_eq!(selector[ROLE_LABEL], "replica");
        assert_eq!(selector, v.names().role_selector(InstanceRole::Replica));
        assert_eq!(
            pdb.metadata.owner_references.unwrap()[0].kind,
            "PostgresCluster"
        );
    }

    #[test]
    fn every_replica_but_one_stays_available() {
        let got: Vec<i32> = (1..=5).map(min_available).collect();
        assert_eq!(got, [0, 0, 1, 2, 3]);
    }

    #[test]
    fn unsaved_owners_have_no_budget() {
        let mut owner = cluster("demo", 3, "16");
        let v = validated(&owner);
        owner.metadata.uid = None;
        assert!(budget(&owner, &v).is_none());
    }
}
