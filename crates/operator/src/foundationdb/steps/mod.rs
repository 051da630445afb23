//! The FoundationDB pipeline's steps, one per file, in pipeline order (see [`super::pipeline`]).

pub mod add_pods;
pub mod add_process_groups;
pub mod add_pvcs;
pub mod add_services;
pub mod bounce_processes;
pub mod change_coordinators;
pub mod check_client_compatibility;
pub mod choose_removals;
pub mod delete_pods_for_buggification;
pub mod exclude_processes;
pub mod generate_initial_cluster_file;
pub mod remove_incompatible_processes;
pub mod remove_process_groups;
pub mod remove_services;
pub mod replace_failed;
pub mod replace_misconfigured;
pub mod update_config_map;
pub mod update_database_configuration;
pub mod update_labels;
pub mod update_lock_configuration;
pub mod update_pod_config;
pub mod update_pods;
pub mod update_sidecar_versions;
pub mod update_status;
pub mod validate_spec;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use steward_api::foundationdb::{ProcessClass, ProcessGroupCondition, ProcessGroupStatus};

use super::FdbPass;
use super::build::{GROUP_LABEL, claim_name, parse_group_id};
use super::plan::Group;
use crate::resources::packed::CachedMeta;
use crate::resources::pods::CachedPod;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

/// How soon to look again while waiting on Pods or the database.
pub const SOON: Duration = Duration::from_secs(3);

/// Process group condition types (FoundationDB's `ProcessGroupConditionType`).
pub mod conditions {
    /// No process of the group reports to the database.
    pub const MISSING_PROCESSES: &str = "MissingProcesses";
    /// The group has no Pod.
    pub const MISSING_POD: &str = "MissingPod";
    /// A stateful group has no claim.
    pub const MISSING_PVC: &str = "MissingPVC";
    /// Its process runs another command line than the spec asks for.
    pub const INCORRECT_COMMAND_LINE: &str = "IncorrectCommandLine";
    /// Its claim was created with another size or StorageClass than `spec.storage`
    /// (Steward's: ReplaceMisconfiguredProcessGroups replaces the group).
    pub const INCORRECT_PVC_SPEC: &str = "IncorrectPVCSpec";
    /// Its Pod was built from another spec.
    pub const INCORRECT_POD_SPEC: &str = "IncorrectPodSpec";
    /// Its monitor runs another configuration than the ConfigMap's.
    pub const INCORRECT_CONFIG_MAP: &str = "IncorrectConfigMap";
    /// Its Pod failed or its container is not running.
    pub const POD_FAILING: &str = "PodFailing";
    /// Its Pod is not scheduled or not started.
    pub const POD_PENDING: &str = "PodPending";
    /// Its process is excluded.
    pub const EXCLUDED: &str = "ProcessIsMarkedAsExcluded";
    /// Its Pod or claim is being deleted.
    pub const TERMINATING: &str = "ResourcesTerminating";
}

/// The group's condition `type_`, if it has it.
pub fn condition<'a>(g: &'a ProcessGroupStatus, type_: &str) -> Option<&'a ProcessGroupCondition> {
    g.conditions.iter().find(|c| c.type_ == type_)
}

/// Sets or clears the group's condition `type_`; a condition already set keeps its timestamp.
pub fn set_condition(g: &mut ProcessGroupStatus, type_: &str, on: bool, now: i64) {
    let has = g.conditions.iter().any(|c| c.type_ == type_);
    if on && !has {
        g.conditions.push(ProcessGroupCondition {
            type_: type_.to_owned(),
            timestamp: now,
        });
        g.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    } else if !on && has {
        g.conditions.retain(|c| c.type_ != type_);
    }
}

/// This cluster's Pods by process group ID.
pub fn group_pods(pass: &FdbPass) -> BTreeMap<String, Arc<CachedPod>> {
    pass.stores
        .pods
        .of_instance(&pass.core.namespace, &pass.core.name)
        .into_iter()
        .filter_map(|p| Some((p.labels().get(GROUP_LABEL)?.to_owned(), p)))
        .collect()
}

/// Process group `id`'s claim, from the cache.
pub fn group_claim(pass: &FdbPass, id: &str) -> Option<Arc<CachedMeta<PersistentVolumeClaim>>> {
    pass.stores.claims.get(
        &kube::runtime::reflector::ObjectRef::new(&claim_name(id)).within(&pass.core.namespace),
    )
}

/// The class of a process group recorded in status (or parsed from its ID).
pub fn class_of(pass: &FdbPass, g: &ProcessGroupStatus) -> Option<ProcessClass> {
    g.process_class
        .or_else(|| parse_group_id(&pass.prefix, &g.process_group_id).map(|(c, _)| c))
}

/// The desired count of `class`.
pub fn desired(pass: &FdbPass, class: ProcessClass) -> usize {
    let c = &pass.cluster.spec.process_counts;
    let n = match class {
        ProcessClass::Storage => c.storage,
        ProcessClass::Log => c.log,
        ProcessClass::Stateless => c.stateless,
    };
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// The status's process groups of `class`, as the planners see them.
pub fn plan_groups(pass: &FdbPass, class: ProcessClass) -> Vec<Group> {
    let now = pass.core.now.as_second();
    pass.status
        .process_groups
        .iter()
        .filter(|g| class_of(pass, g) == Some(class))
        .map(|g| Group {
            id: g.process_group_id.clone(),
            class,
            n: parse_group_id(&pass.prefix, &g.process_group_id).map_or(0, |(_, n)| n),
            zone: g.fault_domain.clone(),
            removing: g.removal_timestamp.is_some(),
            missing_for: condition(g, conditions::MISSING_PROCESSES).map(|c| now - c.timestamp),
            excluded: condition(g, conditions::EXCLUDED).is_some(),
        })
        .collect()
}

/// The fdbcli argument that excludes (or includes) process group `g`: its locality, or its
/// addresses.
pub fn exclusion_targets(pass: &FdbPass, g: &ProcessGroupStatus) -> Vec<String> {
    if pass.cluster.spec.use_localities_for_exclusion {
        vec![format!("locality_instance_id:{}", g.process_group_id)]
    } else {
        g.addresses
            .iter()
            .map(|ip| format!("{ip}:{}", super::build::PORT))
            .collect()
    }
}

/// Deletes `name` (a `what`, e.g. "Pod", in `ns`); one already gone is fine.
pub async fn delete<K>(
    api: &kube::Api<K>,
    name: &str,
    what: &str,
    ns: &str,
) -> Result<(), crate::error::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &kube::api::DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(crate::error::Error::kube(
            "delete",
            format!("{what} {ns}/{name}"),
            source,
        )),
    }
}

/// RFC 3339 of the pass's now.
pub fn now_text(pass: &FdbPass) -> String {
    pass.core.now.to_string()
}
