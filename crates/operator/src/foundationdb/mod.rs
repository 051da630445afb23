//! The FoundationDB engine (seed 002): a `FoundationDBCluster` is reconciled by the seed's
//! cluster reconciler, its subreconcilers in the seed's order, into one Pod (and claim) per
//! process group and a ConfigMap with each class's monitor configuration and the cluster file.
//! The machine-readable status is read once per pass (`UpdateStatus`) and shared by every step;
//! steps that change the database take the global lock. See `docs/technical_design.md`, "The
//! FoundationDB engine", for what each step does and which of the seed's steps are not
//! implemented yet.

pub mod admin;
pub mod api;
pub mod backup;
pub mod build;
pub mod controller;
pub mod engine;
pub mod lock;
pub mod plan;
#[cfg(test)]
mod sim;
pub mod steps;
pub mod validate;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Service};
use steward_api::foundationdb::{FoundationDBCluster, FoundationDBClusterStatus};

use crate::pipeline::{Pass, PassCore, Pipeline, SubReconciler};
use crate::resources::packed::CachedMeta;
use crate::resources::pods::CachedPod;
use crate::resources::{AppliedSet, Applier};
use crate::runtime::context::Context;
use crate::runtime::stores::{Indexed, MetaStore};
use admin::status::DbStatus;
use admin::{FdbAdmin, Target};

/// The controller name used in metrics, logs and field managers.
pub const CONTROLLER: &str = "foundationdb";

/// The operator-wide settings of the engine (FoundationDB's operator takes them as flags:
/// `--minimum-recovery-time-for-exclusion` and `--minimum-recovery-time-for-inclusion`); here
/// `--engine-setting foundationdb.<name>=<seconds>`, see `docs/configuration.md`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// An exclusion waits until the last recovery is this old
    /// (`foundationdb.minimumRecoveryTimeForExclusion`, 120 as FoundationDB's operator).
    pub min_recovery_seconds_for_exclusion: f64,
    /// An inclusion waits until the last recovery is this old
    /// (`foundationdb.minimumRecoveryTimeForInclusion`, 600).
    pub min_recovery_seconds_for_inclusion: f64,
    /// Exclusions wait while more transaction-system generations are alive.
    pub max_active_generations: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            min_recovery_seconds_for_exclusion: 120.0,
            min_recovery_seconds_for_inclusion: 600.0,
            max_active_generations: 10,
        }
    }
}

impl Settings {
    /// The defaults with the operator's `--engine-setting`s (an unreadable value keeps the
    /// default, with a warning).
    pub fn from_settings(settings: &crate::config::EngineSettings) -> Self {
        let read = |name: &str, default: f64| {
            match settings.get(name) {
            Some(v) => v.parse::<f64>().ok().filter(|s| *s >= 0.0).unwrap_or_else(|| {
                tracing::warn!(setting = name, value = %v, "not a number of seconds; default kept");
                default
            }),
            None => default,
        }
        };
        let d = Self::default();
        Self {
            min_recovery_seconds_for_exclusion: read(
                "foundationdb.minimumRecoveryTimeForExclusion",
                d.min_recovery_seconds_for_exclusion,
            ),
            min_recovery_seconds_for_inclusion: read(
                "foundationdb.minimumRecoveryTimeForInclusion",
                d.min_recovery_seconds_for_inclusion,
            ),
            ..d
        }
    }
}

/// The shared caches the FoundationDB controller reads.
#[derive(Clone)]
pub struct FdbStores {
    /// Pods (process groups).
    pub pods: Indexed<CachedPod>,
    /// Claims, metadata only.
    pub claims: Indexed<CachedMeta<PersistentVolumeClaim>>,
    /// ConfigMaps, metadata only.
    pub config_maps: MetaStore<ConfigMap>,
    /// Services, metadata only (Steward's: the headless Service of `spec.routing`).
    pub services: Indexed<CachedMeta<Service>>,
}

/// One reconcile pass over a `FoundationDBCluster`.
pub struct FdbPass {
    /// Shared pass state.
    pub core: PassCore,
    /// The cluster as read from the cache.
    pub cluster: Arc<FoundationDBCluster>,
    /// The spec passed validation (`ValidateSpec` ran).
    pub valid: bool,
    /// Engine status fields being computed.
    pub status: FoundationDBClusterStatus,
    /// Shared caches.
    pub stores: FdbStores,
    /// The process group ID prefix, also the lock ID.
    pub prefix: String,
    /// The machine-readable status, read once by the first `UpdateStatus`.
    pub db: Option<DbStatus>,
    /// Why it could not be read.
    pub db_error: Option<String>,
    /// Whether the first `UpdateStatus` ran.
    pub observed: bool,
    /// The spec hash of each process group's desired Pod, computed once per pass (the spec
    /// does not change within a pass; `UpdateStatus` runs twice).
    pub pod_hashes: std::collections::BTreeMap<String, Option<String>>,
    /// The process groups whose Pods AddPods created on this pass (not in the cache yet).
    pub created_pods: Vec<String>,
    /// This pass holds the global lock (or locks are disabled).
    pub locked: bool,
    /// Applies children.
    pub applier: Applier,
    /// What this pass applied.
    pub applied: AppliedSet,
    /// Operator-wide settings.
    pub settings: Settings,
    /// Shared context.
    pub ctx: Arc<Context>,
}

impl Pass for FdbPass {
    fn core(&self) -> &PassCore {
        &self.core
    }
    fn core_mut(&mut self) -> &mut PassCore {
        &mut self.core
    }
}

impl FdbPass {
    /// The admin seam (real, or the model in tests).
    pub fn admin(&self) -> Result<Arc<dyn FdbAdmin>, crate::error::Error> {
        self.ctx.seam::<Arc<dyn FdbAdmin>>()
    }

    /// The Pods to run tools in: this cluster's running Pods with an address, those of process
    /// groups not being removed first.
    pub fn targets(&self) -> Vec<Target> {
        let mut pods: Vec<(bool, String)> = self
            .stores
            .pods
            .of_instance(&self.core.namespace, &self.core.name)
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().is_some_and(|s| {
                        s.phase.as_deref() == Some("Running") && s.pod_ip.is_some()
                    })
            })
            .filter_map(|p| {
                let name = p.metadata.name.clone()?;
                let removing = self
                    .status
                    .process_groups
                    .iter()
                    .any(|g| g.process_group_id == name && g.removal_timestamp.is_some());
                Some((removing, name))
            })
            .collect();
        pods.sort();
        pods.into_iter()
            .map(|(_, pod)| Target {
                namespace: self.core.namespace.clone(),
                pod,
            })
            .collect()
    }

    /// How many coordinators the spec's redundancy mode wants (`2R − 1`).
    pub fn coordinators_wanted(&self) -> usize {
        plan::coordinator_count(
            self.cluster
                .spec
                .database_configuration
                .redundancy_mode
                .replication(),
        )
    }

    /// The error of a failed FoundationDB call (category `Database`).
    pub fn database_error(&self, e: &admin::FdbError) -> crate::error::Error {
        crate::error::Error::Database {
            cluster: format!("{}/{}", self.core.namespace, self.core.name),
            message: e.to_string(),
        }
    }
}

/// The pipeline, in the seed's order. `UpdateStatus` runs first and last. Steps of the seed
/// that are not implemented are not listed (`docs/technical_design.md` names them).
pub fn pipeline() -> Pipeline<FdbPass> {
    Pipeline::new(
        CONTROLLER,
        Box::new(steps::update_status::UpdateStatus),
        steps(),
    )
}

/// The steps between the two `UpdateStatus` runs, in the seed's order.
pub fn steps() -> Vec<Box<dyn SubReconciler<FdbPass>>> {
    vec![
        Box::new(steps::validate_spec::ValidateSpec),
        Box::new(steps::update_lock_configuration::UpdateLockConfiguration),
        Box::new(steps::update_config_map::UpdateConfigMap),
        Box::new(steps::check_client_compatibility::CheckClientCompatibility),
        Box::new(steps::delete_pods_for_buggification::DeletePodsForBuggification),
        Box::new(steps::replace_misconfigured::ReplaceMisconfiguredProcessGroups),
        Box::new(steps::replace_failed::ReplaceFailedProcessGroups),
        Box::new(steps::add_process_groups::AddProcessGroups),
        Box::new(steps::add_services::AddServices),
        Box::new(steps::add_pvcs::AddPvcs),
        Box::new(steps::add_pods::AddPods),
        Box::new(steps::generate_initial_cluster_file::GenerateInitialClusterFile),
        Box::new(steps::remove_incompatible_processes::RemoveIncompatibleProcesses),
        Box::new(steps::update_sidecar_versions::UpdateSidecarVersions),
        Box::new(steps::update_pod_config::UpdatePodConfig),
        Box::new(steps::update_labels::UpdateLabels),
        Box::new(steps::update_database_configuration::UpdateDatabaseConfiguration),
        Box::new(steps::choose_removals::ChooseRemovals),
        Box::new(steps::exclude_processes::ExcludeProcesses),
        Box::new(steps::change_coordinators::ChangeCoordinators),
        Box::new(steps::bounce_processes::BounceProcesses),
        Box::new(steps::update_pods::UpdatePods),
        Box::new(steps::remove_process_groups::RemoveProcessGroups),
        Box::new(steps::remove_services::RemoveServices),
    ]
}
