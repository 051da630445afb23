//! The etcd engine: `EtcdCluster` reconciled by an ordered pipeline (seed 003).
//!
//! Implemented so far: status, validation, the headless Service and the orphan sweep. Member
//! management (peers, Pods, PVCs, the member list through the etcd API) is not implemented yet;
//! the `ManageMembers` step says so in the `Degraded` condition and an Event.

pub mod build;
pub mod controller;
pub mod steps;
pub mod validate;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::Store;
use steward_api::etcd::{EtcdCluster, EtcdClusterStatus};

use crate::pipeline::{Pass, PassCore, Pipeline};
use crate::resources::{AppliedSet, Applier};
use crate::runtime::context::Context;
use validate::ValidatedEtcdCluster;

/// The controller name used in metrics, logs and field managers.
pub const CONTROLLER: &str = "etcd";

/// One reconcile pass over an `EtcdCluster`.
pub struct EtcdPass {
    /// Shared pass state.
    pub core: PassCore,
    /// The cluster as read from the cache.
    pub cluster: Arc<EtcdCluster>,
    /// The validated spec, once `ValidateSpec` ran.
    pub validated: Option<ValidatedEtcdCluster>,
    /// Engine status fields being computed (the shared part lives in `core.status`).
    pub status: EtcdClusterStatus,
    /// Services cache (shared reflector).
    pub services: Store<Service>,
    /// Applies children.
    pub applier: Applier,
    /// What this pass applied.
    pub applied: AppliedSet,
    /// Shared context.
    pub ctx: Arc<Context>,
}

impl Pass for EtcdPass {
    fn core(&self) -> &PassCore {
        &self.core
    }
    fn core_mut(&mut self) -> &mut PassCore {
        &mut self.core
    }
}

/// The pipeline, in order. `UpdateStatus` runs first and last.
pub fn pipeline() -> Pipeline<EtcdPass> {
    Pipeline::new(
        CONTROLLER,
        Box::new(steps::update_status::UpdateStatus),
        vec![
            Box::new(steps::validate_spec::ValidateSpec),
            Box::new(steps::apply_services::ApplyServices),
            Box::new(steps::manage_members::ManageMembers),
            Box::new(steps::sweep_orphans::SweepOrphans),
        ],
    )
}
