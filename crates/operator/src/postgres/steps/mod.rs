//! The PostgreSQL pipeline's steps, one per file, in pipeline order.

pub mod apply_config;
pub mod apply_policies;
pub mod apply_services;
pub mod clone_from_source;
pub mod ensure_secrets;
pub mod failover;
pub mod observe_instances;
pub mod provision_instances;
pub mod provision_repository;
pub mod reconcile_users;
pub mod restore_cluster;
pub mod rolling_restart;
pub mod run_backups;
pub mod update_status;
pub mod upgrade_cluster;
pub mod validate_spec;

#[cfg(test)]
mod backup_tests;
#[cfg(test)]
mod tests;

use std::time::Duration;

use crate::error::Error;
use crate::postgres::PostgresPass;
use crate::postgres::admin::PgAdminError;
use crate::postgres::validate::ValidatedPostgresCluster;

/// How soon a pass looks again while something is moving.
pub(crate) const SOON: Duration = Duration::from_secs(1);

/// The validated spec, or an internal error when a step runs before `ValidateSpec`.
pub(crate) fn validated(pass: &PostgresPass) -> Result<ValidatedPostgresCluster, Error> {
    pass.validated.clone().ok_or_else(|| Error::Internal {
        message: "a PostgreSQL step ran before ValidateSpec".into(),
    })
}

/// A database error as the pipeline's error (its message never holds a password).
pub(crate) fn database(pass: &PostgresPass, err: &PgAdminError) -> Error {
    Error::Database {
        cluster: pass.object(),
        message: err.to_string(),
    }
}
