//! (pure) The PodDisruptionBudget of a cluster's members, from quorum math: a quorum of the
//! wanted members must stay healthy, so at most `replicas − quorum` members may be voluntarily
//! disrupted at once (0 for one member), fewer while a member is already down.
//!
//! The budget says `minAvailable` as an **integer**: Kubernetes' disruption controller then
//! counts the selected Pods themselves. With `maxUnavailable` (or a percentage) it needs the
//! scale of the Pods' controller, and member Pods are controlled by `EtcdPeer`, which has no
//! scale subresource: the controller would fail safe (`disruptionsAllowed: 0`) and every
//! `kubectl drain` of a member's node would wait forever.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use steward_api::etcd::EtcdCluster;

use crate::etcd::build::service::MEMBER_COMPONENT;
use crate::etcd::topology::quorum;
use crate::etcd::validate::ValidatedEtcdCluster;
use crate::resources::{Labels, child_meta};

/// Members that must stay healthy: a quorum of the wanted members.
pub fn min_available(replicas: i32) -> i32 {
    let n = usize::try_from(replicas.max(0)).unwrap_or(0);
    if n == 0 {
        return 0;
    }
    i32::try_from(quorum(n)).unwrap_or(i32::MAX)
}

/// The budget, named `<cluster>`. `None` when the owner was never stored.
pub fn budget(owner: &EtcdCluster, cluster: &ValidatedEtcdCluster) -> Option<PodDisruptionBudget> {
    let labels = Labels::new("etcd", &cluster.name, "budget");
    let metadata = child_meta(owner, cluster.name.clone(), &labels, &BTreeMap::new())?;
    Some(PodDisruptionBudget {
        metadata,
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(min_available(cluster.replicas))),
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
        let got: Vec<i32> = (1..=7).map(min_available).collect();
        assert_eq!(got, [1, 2, 2, 3, 3, 4, 4]);
        // Disruptions allowed with every member healthy: replicas − quorum.
        let allowed: Vec<i32> = (1..=7).map(|n| n - min_available(n)).collect();
        assert_eq!(allowed, [0, 0, 1, 1, 2, 2, 3]);
    }
}
