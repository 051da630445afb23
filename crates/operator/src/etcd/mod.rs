//! The etcd engine (seed 003): `EtcdCluster` reconciled by an ordered pipeline that treats the
//! etcd member list as the truth, and `EtcdPeer` reconciled by the peer controller (claim, Pod,
//! member status).

pub mod admin;
pub mod api;
pub mod backup;
pub mod backups_api;
pub mod build;
pub mod controller;
pub mod engine;
pub mod names;
pub mod peer;
pub mod steps;
pub mod topology;
pub mod validate;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
use steward_api::etcd::{EtcdCluster, EtcdClusterStatus, EtcdPeer};

use crate::pipeline::{Pass, PassCore, Pipeline};
use crate::resources::{AppliedSet, Applier};
use crate::runtime::context::Context;
use admin::EtcdAdmin;
use names::ClusterNames;
use topology::Observed;
use validate::ValidatedEtcdCluster;

/// The shared caches the etcd controllers read (objects labelled `managed-by=steward`).
#[derive(Clone)]
pub struct EtcdStores {
    /// Services.
    pub services: crate::runtime::stores::Indexed<crate::resources::packed::CachedMeta<Service>>,
    /// Member Pods.
    pub pods: crate::runtime::stores::Indexed<crate::resources::pods::CachedPod>,
    /// Member claims.
    pub claims: crate::runtime::stores::Indexed<
        crate::resources::packed::CachedMeta<PersistentVolumeClaim>,
    >,
    /// Peers.
    pub peers: crate::runtime::stores::Indexed<EtcdPeer>,
    /// Every Node of the cluster, slimmed (`resources::nodes`).
    pub nodes: kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Node>,
    /// Disruption budgets, metadata only (to skip applies that would change nothing).
    pub budgets:
        crate::runtime::stores::MetaStore<k8s_openapi::api::policy::v1::PodDisruptionBudget>,
}

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
    /// Shared caches.
    pub stores: EtcdStores,
    /// Names and URLs of this cluster's members.
    pub names: ClusterNames,
    /// The cluster as seen through the etcd API on this pass; `None` when unreachable.
    pub observed: Option<Observed>,
    /// The admin session opened by `ObserveCluster`, reused by later steps.
    pub admin: Option<Box<dyn EtcdAdmin>>,
    /// Whether `ObserveCluster` ran on this pass.
    pub observe_done: bool,
    /// Why the cluster could not be observed.
    pub observe_error: Option<String>,
    /// The scheduler's message for member Pods it cannot place, when no member runs.
    pub unschedulable: Option<String>,
    /// Member client URLs (by Pod IP), by member name.
    pub endpoints: std::collections::BTreeMap<String, String>,
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
            Box::new(steps::apply_budget::ApplyBudget),
            Box::new(steps::observe_cluster::ObserveCluster),
            Box::new(steps::recover_members::RecoverMembers),
            Box::new(steps::scale_members::ScaleMembers),
            Box::new(steps::reconcile_peers::ReconcilePeers),
            Box::new(steps::rolling_update::RollingUpdate),
            Box::new(steps::sweep_orphans::SweepOrphans),
        ],
    )
}
