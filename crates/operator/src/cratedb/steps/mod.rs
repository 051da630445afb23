//! The CrateDB pipeline's steps, one per file, in pipeline order (see [`super::pipeline`]).

pub mod apply_budgets;
pub mod apply_services;
pub mod apply_statefulsets;
pub mod bootstrap;
pub mod ensure_system_secret;
pub mod observe_cluster;
pub mod reconcile_users;
pub mod rolling_restart;
pub mod scale_nodes;
pub mod update_status;
pub mod validate_spec;

#[cfg(test)]
mod tests;

use std::time::Duration;

use crate::cratedb::CratePass;
use crate::cratedb::admin::CrateError;
use crate::cratedb::validate::ValidatedCrateCluster;
use crate::error::Error;

/// How soon to look again while waiting on the cluster.
pub const SOON: Duration = Duration::from_secs(2);

/// The validated spec, or an internal error when a step runs before `ValidateSpec`.
pub fn validated(pass: &CratePass) -> Result<ValidatedCrateCluster, Error> {
    pass.validated.clone().ok_or_else(|| Error::Internal {
        message: "a CrateDB step ran before ValidateSpec".into(),
    })
}

/// A CrateDB failure as the operator's error (category `Database`).
pub fn database(pass: &CratePass, e: &CrateError) -> Error {
    Error::Database {
        cluster: format!("{}/{}", pass.core.namespace, pass.core.name),
        message: e.to_string(),
    }
}
