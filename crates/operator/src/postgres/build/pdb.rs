//! (pure) The PodDisruptionBudgets of a PostgreSQL cluster.
//!
//! `<cluster>-replicas`: at most one replica Pod is voluntarily disrupted (drained, evicted) at
//! a time, so a node drain never takes every read replica — and every fail-over candidate —
//! away at once.
//!
//! `<cluster>-primary`: the primary Pod is never evicted while the cluster has replicas
//! (`minAvailable: 1`). A drain of the primary's Node therefore waits instead of killing the
//! primary; the operator sees the Node cordoned (`kubectl drain` cordons first) and switches
//! over to a replica on another Node (`Failover`, reason `nodeCordoned`). The role label then
//! moves, this budget selects the new primary, the old one is a replica the other budget lets
//! go, and the drain's retries succeed. The write gap is a switchover's, not a fail-over's
//! detection delay plus promotion. With one instance there is nothing to switch to: the budget
//! says `minAvailable: 0`, so a drain evicts the single instance (a budget that can never allow
//! an eviction would block the drain forever, which the Kubernetes docs warn against); it comes
//! back when its claim's Node is schedulable again.
//!
//! Both budgets select by the role label, so they follow fail-overs without a change.
//!
//! Both say `minAvailable` as an **integer**, not `maxUnavailable`: with `maxUnavailable`
//! Kubernetes' disruption controller takes the expected count from the scale of the Pods'
//! controller — the `PostgresCluster`, whose scale is every instance — while each budget
//! selects only some of them, so it would never allow a disruption. An integer `minAvailable`
//! counts the selected Pods themselves.

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

/// The primary that must stay available: one while a replica could take over, else none.
pub fn primary_min_available(instances: u32) -> i32 {
    i32::from(instances > 1)
}

/// The budget `<cluster>-primary`. `None` when the owner was never stored.
pub fn primary_budget(
    owner: &PostgresCluster,
    cluster: &ValidatedPostgresCluster,
) -> Option<PodDisruptionBudget> {
    let name = cluster.names().primary_budget();
    let min = primary_min_available(cluster.instances);
    role_budget(owner, cluster, name, InstanceRole::Primary, min)
}

/// The budget `<cluster>-replicas`. `None` when the owner was never stored.
pub fn budget(
    owner: &PostgresCluster,
    cluster: &ValidatedPostgresCluster,
) -> Option<PodDisruptionBudget> {
    let name = cluster.names().budget();
    let min = min_available(cluster.instances);
    role_budget(owner, cluster, name, InstanceRole::Replica, min)
}

/// A budget over the Pods labelled `role`, keeping `min` of them available.
fn role_budget(
    owner: &PostgresCluster,
    cluster: &ValidatedPostgresCluster,
    name: String,
    role: InstanceRole,
    min: i32,
) -> Option<PodDisruptionBudget> {
    let labels = Labels::new(ENGINE, &cluster.name, "budget");
    let metadata = child_meta(owner, name, &labels, &BTreeMap::new())?;
    Some(PodDisruptionBudget {
        metadata,
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(min)),
            selector: Some(LabelSelector {
                match_labels: Some(cluster.names().role_selector(role)),
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
    fn the_primary_stays_unless_nothing_could_take_over() {
        let owner = cluster("demo", 3, "16");
        let v = validated(&owner);
        let pdb = primary_budget(&owner, &v).unwrap();
        assert_eq!(pdb.metadata.name.as_deref(), Some("demo-primary"));
        let spec = pdb.spec.unwrap();
        assert_eq!(spec.min_available, Some(IntOrString::Int(1)));
        assert_eq!(spec.max_unavailable, None);
        let selector = spec.selector.unwrap().match_labels.unwrap();
        assert_eq!(selector, v.names().role_selector(InstanceRole::Primary));
        assert_eq!(primary_min_available(1), 0);
        assert_eq!(primary_min_available(2), 1);
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
