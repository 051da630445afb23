//! (pure) One PodDisruptionBudget per node set, `maxUnavailable: 1`: a drain takes at most one
//! master (a majority of three or more stays) and one node of each data set at a time. The
//! Pods are controlled by StatefulSets, which have the scale subresource the disruption
//! controller needs for `maxUnavailable`.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use steward_api::cratedb::CrateCluster;

use crate::cratedb::build::statefulset::selector_labels;
use crate::cratedb::names::{ClusterNames, ENGINE};
use crate::cratedb::validate::NodeSet;
use crate::resources::{Labels, child_meta};

/// The budget of `set`. `None` when the owner was never stored.
pub fn budget(
    owner: &CrateCluster,
    names: &ClusterNames,
    set: &NodeSet,
) -> Option<PodDisruptionBudget> {
    let labels = Labels::new(ENGINE, &names.name, "budget");
    let metadata = child_meta(owner, names.budget(&set.name), &labels, &BTreeMap::new())?;
    Some(PodDisruptionBudget {
        metadata,
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(&names.name, set)),
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
    use crate::cratedb::validate::{tests::cluster, validate};

    #[test]
    fn one_node_of_a_set_at_a_time() {
        let owner = cluster();
        let v = validate(&owner).unwrap();
        let names = ClusterNames::new("c1", "db", "cluster.local");
        let b = budget(&owner, &names, v.set("cold").unwrap()).unwrap();
        assert_eq!(b.metadata.name.as_deref(), Some("crate-data-cold-c1"));
        let spec = b.spec.unwrap();
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(
            spec.selector.unwrap().match_labels.unwrap()["steward.dev/node-set"],
            "cold"
        );
    }
}
