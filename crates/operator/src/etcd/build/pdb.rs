//! (pure) The PodDisruptionBudget of a cluster's members, from quorum math: at most
//! `replicas − quorum` members may be voluntarily disrupted at once (0 for one member).

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use steward_api::etcd::EtcdCluster;

use crate::etcd::build::service::MEMBER_COMPONENT;
use crate::etcd::topology::quorum;
use crate::etcd::validate::ValidatedEtcdCluster;
use crate::resources::{Labels, child_meta};

/// Members that may be down at once without losing quorum.
pub fn max_unavailable(replicas: i32) -> i32 {
    let n = usize::try_from(replicas.max(0)).unwrap_or(0);
    i32::try_from(n.saturating_sub(quorum(n))).unwrap_or(0)
}

/// The budget, named `<cluster>`. `None` when the owner was never stored.
pub fn budget(owner: &EtcdCluster, cluster: &ValidatedEtcdCluster) -> Option<PodDisruptionBudget> {
    let labels = Labels::new("etcd", &cluster.name, "budget");
    let metadata = child_meta(owner, cluster.name.clone(), &labels, &BTreeMap::new())?;
    Some(PodDisruptionBudget {
        metadata,
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(max_unavailable(cluster.replicas))),
            selector: Some(LabelSelector {
                match_labels: Some(Labels::new("etcd", &cluster.name, MEMBER_COMPONENT).to_map()),
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

    #[test]
    fn quorum_decides_the_budget() {
        let got: Vec<i32> = (1..=7).map(max_unavailable).collect();
        assert_eq!(got, [0, 0, 1, 1, 2, 2, 3]);
    }
}
