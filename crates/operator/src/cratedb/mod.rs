//! The CrateDB engine (seeds 000 and 001): a `CrateCluster` is reconciled by an ordered pipeline
//! into one StatefulSet per node set, two Services and a disruption budget per set; it is
//! bootstrapped (license, `system` user, users), its users follow their Secrets, and it is
//! scaled and restarted in the seeds' order. See `docs/technical_design.md`, "The CrateDB
//! engine".

pub mod admin;
pub mod api;
pub mod build;
pub mod controller;
pub mod engine;
pub mod names;
pub mod plan;
pub mod steps;
pub mod validate;

#[cfg(test)]
mod sim;

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::runtime::reflector::Store;
use steward_api::cratedb::{CrateCluster, CrateClusterStatus};

use crate::pipeline::{Pass, PassCore, Pipeline};
use crate::resources::{AppliedSet, Applier};
use crate::runtime::context::Context;
use crate::runtime::stores::{Indexed, MetaStore};
use admin::ops::Observed;
use admin::{Endpoint, Login};
use names::ClusterNames;
use validate::ValidatedCrateCluster;

/// The controller name used in metrics, logs and field managers.
pub const CONTROLLER: &str = "cratedb";

/// The shared caches the CrateDB controller reads.
#[derive(Clone)]
pub struct CrateStores {
    /// Services.
    pub services: Indexed<crate::resources::packed::CachedMeta<Service>>,
    /// Node Pods.
    pub pods: Indexed<crate::resources::pods::CachedPod>,
    /// StatefulSets.
    pub statefulsets: Indexed<StatefulSet>,
    /// Disruption budgets, metadata only.
    pub budgets: MetaStore<k8s_openapi::api::policy::v1::PodDisruptionBudget>,
    /// Steward's own Secrets (the `system` user's, the applied-passwords record).
    pub secrets: Indexed<Secret>,
    /// The users' password Secrets (labelled `steward.dev/user-password`).
    pub user_secrets: Store<Secret>,
}

/// One reconcile pass over a `CrateCluster`.
pub struct CratePass {
    /// Shared pass state.
    pub core: PassCore,
    /// The cluster as read from the cache.
    pub cluster: Arc<CrateCluster>,
    /// The validated spec, once `ValidateSpec` ran.
    pub validated: Option<ValidatedCrateCluster>,
    /// Engine status fields being computed.
    pub status: CrateClusterStatus,
    /// Shared caches.
    pub stores: CrateStores,
    /// Child names.
    pub names: ClusterNames,
    /// The `system` user's login, once its Secret was read.
    pub system: Option<Login>,
    /// Ready node Pods with an address, masters first.
    pub nodes: Vec<Endpoint>,
    /// Ready master Pods with an address.
    pub masters: Vec<Endpoint>,
    /// What the cluster said on this pass; `None` when not asked or unreachable.
    pub observed: Option<Observed>,
    /// Why it could not be observed.
    pub observe_error: Option<String>,
    /// Whether `ObserveCluster` ran on this pass.
    pub observe_done: bool,
    /// The scheduler's message for node Pods it cannot place, when no node is ready.
    pub unschedulable: Option<String>,
    /// Applies children.
    pub applier: Applier,
    /// What this pass applied.
    pub applied: AppliedSet,
    /// Shared context.
    pub ctx: Arc<Context>,
}

impl Pass for CratePass {
    fn core(&self) -> &PassCore {
        &self.core
    }
    fn core_mut(&mut self) -> &mut PassCore {
        &mut self.core
    }
}

impl CratePass {
    /// The CrateDB channels (real, or the model in tests).
    pub fn channels(&self) -> Result<Arc<dyn admin::CrateChannels>, crate::error::Error> {
        self.ctx.seam::<Arc<dyn admin::CrateChannels>>()
    }
}

/// The pipeline, in order. `UpdateStatus` runs first and last.
pub fn pipeline() -> Pipeline<CratePass> {
    Pipeline::new(
        CONTROLLER,
        Box::new(steps::update_status::UpdateStatus),
        vec![
            Box::new(steps::validate_spec::ValidateSpec),
            Box::new(steps::ensure_system_secret::EnsureSystemSecret),
            Box::new(steps::apply_services::ApplyServices),
            Box::new(steps::apply_budgets::ApplyBudgets),
            Box::new(steps::apply_statefulsets::ApplyStatefulSets),
            Box::new(steps::observe_cluster::ObserveCluster),
            Box::new(steps::bootstrap::Bootstrap),
            Box::new(steps::reconcile_users::ReconcileUsers),
            Box::new(steps::scale_nodes::ScaleNodes),
            Box::new(steps::rolling_restart::RollingRestart),
        ],
    )
}
