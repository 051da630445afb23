//! The PostgreSQL engine (seed 004, with the user/password and restart concepts of seed 000):
//! `PostgresCluster` reconciled by an ordered pipeline — one primary and streaming replicas
//! as Pods the operator manages directly, a `-primary` Service that follows the primary,
//! users from labelled Secrets, automatic fail-over with fencing, rolling restarts.
//! [`admin`] is the database seam; [`topology`] holds the pure decisions; [`build`] the pure
//! builders of desired objects.

pub mod admin;
pub mod api;
pub mod build;
pub mod controller;
pub mod engine;
pub mod names;
pub mod policy;
pub mod repository;
pub mod steps;
pub mod topology;
pub mod validate;

use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
use steward_api::postgres::{PostgresCluster, PostgresClusterStatus};

use crate::pipeline::{Pass, PassCore, Pipeline};
use crate::resources::{AppliedSet, Applier};
use crate::runtime::context::Context;
use admin::{ConnectionTarget, PgAdminError, PostgresAdmin, PostgresConnector};
use names::{ClusterNames, PORT, SUPERUSER};
use topology::InstanceView;
use validate::ValidatedPostgresCluster;

/// The controller name used in metrics, logs and field managers.
pub const CONTROLLER: &str = "postgres";

/// The shared caches the PostgreSQL controller reads (objects labelled `managed-by=steward`).
#[derive(Clone)]
pub struct PostgresStores {
    /// Services.
    pub services: crate::runtime::stores::Indexed<crate::resources::packed::CachedMeta<Service>>,
    /// Instance Pods.
    pub pods: crate::runtime::stores::Indexed<crate::resources::pods::CachedPod>,
    /// Instance claims.
    pub claims: crate::runtime::stores::Indexed<
        crate::resources::packed::CachedMeta<PersistentVolumeClaim>,
    >,
    /// Every Node of the cluster, slimmed (`resources::nodes`).
    pub nodes: kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Node>,
    /// Every `PostgresBackup` in the watched namespaces.
    pub backups: kube::runtime::reflector::Store<steward_api::pgbackrest::PostgresBackup>,
    /// Every `PostgresRestore` in the watched namespaces.
    pub restores: kube::runtime::reflector::Store<steward_api::pgbackrest::PostgresRestore>,
    /// Every `PostgresUpgrade` in the watched namespaces.
    pub upgrades: kube::runtime::reflector::Store<steward_api::pgupgrade::PostgresUpgrade>,
    /// Every `PostgresPolicy` in the watched namespaces.
    pub policies: kube::runtime::reflector::Store<steward_api::policy::PostgresPolicy>,
    /// Disruption budgets, metadata only (to skip applies that would change nothing).
    pub budgets:
        crate::runtime::stores::MetaStore<k8s_openapi::api::policy::v1::PodDisruptionBudget>,
    /// Steward's own Secrets (the generated passwords, the applied-passwords record, the
    /// pgBackRest certificates): read from here, not with a GET per pass.
    pub secrets: crate::runtime::stores::Indexed<k8s_openapi::api::core::v1::Secret>,
    /// The users' password Secrets (labelled `steward.dev/user-password`); a change wakes
    /// the clusters that reference it, and the pass reads the new password from here.
    pub user_secrets: kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Secret>,
    /// Configuration ConfigMaps, metadata only (to skip applies that would change nothing).
    pub config_maps: crate::runtime::stores::MetaStore<k8s_openapi::api::core::v1::ConfigMap>,
}

/// The generated passwords of the operator's superuser and the replication user. `Debug`
/// shows neither.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The `steward` superuser's password.
    pub superuser: String,
    /// The `replicator` user's password.
    pub replication: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credentials { <redacted> }")
    }
}

/// One reconcile pass over a `PostgresCluster`.
pub struct PostgresPass {
    /// Shared pass state.
    pub core: PassCore,
    /// The cluster as read from the cache.
    pub cluster: Arc<PostgresCluster>,
    /// The validated spec, once `ValidateSpec` ran.
    pub validated: Option<ValidatedPostgresCluster>,
    /// Engine status fields being computed (the shared part lives in `core.status`).
    pub status: PostgresClusterStatus,
    /// Shared caches.
    pub stores: PostgresStores,
    /// Names of this cluster's children.
    pub names: ClusterNames,
    /// Passwords, once `EnsureSecrets` read them.
    pub credentials: Option<Credentials>,
    /// Hash of the ConfigMap's content, once `ApplyConfig` ran.
    pub config_hash: Option<String>,
    /// Instances as observed on this pass.
    pub instances: Vec<InstanceView>,
    /// Whether `ObserveInstances` ran on this pass.
    pub observed: bool,
    /// Applies children.
    pub applier: Applier,
    /// What this pass applied.
    pub applied: AppliedSet,
    /// Shared context.
    pub ctx: Arc<Context>,
}

impl Pass for PostgresPass {
    fn core(&self) -> &PassCore {
        &self.core
    }
    fn core_mut(&mut self) -> &mut PassCore {
        &mut self.core
    }
}

impl PostgresPass {
    /// `namespace/name`, for messages.
    pub fn object(&self) -> String {
        format!("{}/{}", self.core.namespace, self.core.name)
    }

    /// The current primary's name, as recorded in status.
    pub fn primary(&self) -> Option<String> {
        self.status.current_primary.clone()
    }

    /// The observed instance of this name.
    pub fn instance(&self, name: &str) -> Option<&InstanceView> {
        self.instances.iter().find(|i| i.name == name)
    }

    /// The superuser connection target of an instance (by Pod IP), once credentials are known.
    pub fn target(&self, ip: &str) -> Option<ConnectionTarget> {
        let creds = self.credentials.as_ref()?;
        Some(ConnectionTarget::new(
            ip,
            u16::try_from(PORT).unwrap_or(5432),
            SUPERUSER,
            creds.superuser.clone(),
        ))
    }

    /// Opens a superuser session on the named (observed) instance.
    pub async fn admin(&self, instance: &str) -> Result<Box<dyn PostgresAdmin>, PgAdminError> {
        let ip = self
            .instance(instance)
            .and_then(|i| i.ip.clone())
            .ok_or_else(|| PgAdminError::Unavailable(format!("{instance} has no Pod IP")))?;
        self.admin_at(&ip).await
    }

    /// Opens a superuser session on the instance at this Pod IP.
    pub async fn admin_at(&self, ip: &str) -> Result<Box<dyn PostgresAdmin>, PgAdminError> {
        let target = self
            .target(ip)
            .ok_or_else(|| PgAdminError::Unavailable("credentials not read yet".into()))?;
        self.connector()
            .map_err(|e| PgAdminError::Unavailable(e.to_string()))?
            .connect(&target, self.ctx.database_timeout)
            .await
    }

    /// The PostgreSQL connector (real, or the model in tests).
    pub fn connector(&self) -> Result<Arc<dyn PostgresConnector>, crate::error::Error> {
        admin::connector(&self.ctx)
    }

    /// The pgBackRest repository reader (real, or the model in tests).
    pub fn repository(
        &self,
    ) -> Result<Arc<dyn crate::postgres::repository::Repository>, crate::error::Error> {
        self.ctx
            .seam::<Arc<dyn crate::postgres::repository::Repository>>()
    }
}

/// The pipeline, in order. `UpdateStatus` runs first and last.
pub fn pipeline() -> Pipeline<PostgresPass> {
    Pipeline::new(
        CONTROLLER,
        Box::new(steps::update_status::UpdateStatus),
        vec![
            Box::new(steps::validate_spec::ValidateSpec),
            Box::new(steps::ensure_secrets::EnsureSecrets),
            Box::new(steps::apply_config::ApplyConfig),
            Box::new(steps::apply_services::ApplyServices),
            Box::new(steps::observe_instances::ObserveInstances),
            Box::new(steps::failover::Failover),
            Box::new(steps::restore_cluster::RestoreCluster),
            Box::new(steps::upgrade_cluster::UpgradeCluster),
            Box::new(steps::clone_from_source::CloneFromSource),
            Box::new(steps::provision_instances::ProvisionInstances),
            Box::new(steps::provision_repository::ProvisionRepository),
            Box::new(steps::run_backups::RunBackups),
            Box::new(steps::reconcile_users::ReconcileUsers),
            Box::new(steps::apply_policies::ApplyPolicies),
            Box::new(steps::rolling_restart::RollingRestart),
        ],
    )
}
