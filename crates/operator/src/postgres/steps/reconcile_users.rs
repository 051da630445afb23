//! ReconcileUsers — with a writable primary: makes sure the `replicator` role exists with the
//! replication Secret's password, then brings every `spec.users` entry in step with its
//! Secret (seed 000, "User Passwords", for PostgreSQL):
//!
//! - the Secret gets the `steward.dev/user-password` label (also Secrets of clusters created
//!   before Steward labelled them), so the controller is woken when it changes; the version
//!   recorded is the one the label patch returned, so labelling is not mistaken for a change;
//! - a missing role is created with the Secret's password and role attributes, and its
//!   databases are created (owned by it); a role lacking all privileges on one of its databases
//!   (one that existed with another owner, or a `REVOKE` by hand) is granted them;
//! - when the Secret's `resourceVersion` differs from the one last handled
//!   (`status.users[].appliedVersion`), Steward first checks whether the Secret's password
//!   already logs in (nothing to change: `PasswordAlreadySet` if Steward's record said
//!   otherwise); if not, it logs in **as the user with the old password** and runs `ALTER USER
//!   … PASSWORD` (`PasswordRotated`). The old password comes from the cluster's
//!   `<cluster>-applied-passwords` Secret, Steward's record of what the database holds. If the
//!   old password no longer logs in (it was changed inside the database), the user is reported
//!   not ready with the reason and the version is marked handled: nothing loops until the
//!   Secret changes again.
//!
//! On a converged cluster it only reads: the Secrets, `role_exists` and
//! `has_database_privileges`; it neither logs in as a user nor writes.
//!
//! Roles of users removed from the spec are left in the database (dropping them could break
//! applications and lose ownership of data); docs/technical_design.md says so.

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use steward_api::postgres::{PostgresUser, UserStatus};

use crate::error::Error;
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::postgres::PostgresPass;
use crate::postgres::admin::{PgAdminError, PostgresAdmin, RoleOptions};
use crate::postgres::names::REPLICATION_USER;
use crate::postgres::steps::{SOON, database, validated};
use crate::resources::passwords::{self, UserSecret, user_secret};

/// See the module documentation.
pub struct ReconcileUsers;

#[async_trait]
impl SubReconciler<PostgresPass> for ReconcileUsers {
    fn name(&self) -> &'static str {
        "ReconcileUsers"
    }

    async fn reconcile(&self, pass: &mut PostgresPass) -> Result<Outcome, Error> {
        let valid = validated(pass)?;
        let Some(primary) = pass.primary() else {
            return Ok(Outcome::Continue);
        };
        if valid.paused || !pass.instance(&primary).is_some_and(|v| v.writable()) {
            return Ok(Outcome::Continue);
        }
        let admin = match pass.admin(&primary).await {
            Ok(a) => a,
            Err(e) if e.is_transient() => return Ok(Outcome::requeue(SOON, e.to_string())),
            Err(e) => return Err(database(pass, &e)),
        };
        ensure_replicator(pass, admin.as_ref()).await?;
        let users = pass.cluster.spec.users.clone();
        // Without users there is nothing to compare with the record (which then never
        // exists): no read.
        let mut applied = if users.is_empty() {
            BTreeMap::new()
        } else {
            read_applied(pass).await?
        };
        let before = applied.clone();
        let mut statuses = Vec::new();
        for user in &users {
            let previous = pass
                .status
                .users
                .iter()
                .find(|u| u.name == user.name)
                .cloned();
            let status = reconcile_user(pass, admin.as_ref(), user, previous, &mut applied).await?;
            statuses.push(status);
        }
        if applied != before {
            write_applied(pass, &applied).await?;
        }
        let waiting = statuses
            .iter()
            .any(|s| !s.ready && s.applied_version.is_none());
        pass.status.users = statuses;
        if waiting {
            Ok(Outcome::requeue(
                SOON * 5,
                "users waiting for their Secrets",
            ))
        } else {
            Ok(Outcome::Continue)
        }
    }
}

async fn ensure_replicator(
    pass: &mut PostgresPass,
    admin: &dyn PostgresAdmin,
) -> Result<(), Error> {
    let Some(password) = pass.credentials.as_ref().map(|c| c.replication.clone()) else {
        return Ok(());
    };
    let exists = admin
        .role_exists(REPLICATION_USER)
        .await
        .map_err(|e| database(pass, &e))?;
    if !exists {
        let options = RoleOptions {
            replication: true,
            ..RoleOptions::default()
        };
        match admin
            .create_role(REPLICATION_USER, &password, &options)
            .await
        {
            Ok(()) | Err(PgAdminError::AlreadyExists(_)) => {}
            Err(e) => return Err(database(pass, &e)),
        }
        pass.core.event(
            EventType::Normal,
            "RoleCreated",
            "ReconcileUsers",
            format!("created the {REPLICATION_USER} role for streaming replication"),
        );
    }
    Ok(())
}

/// One user: label its Secret, create or rotate its role, create its databases.
async fn reconcile_user(
    pass: &mut PostgresPass,
    admin: &dyn PostgresAdmin,
    user: &PostgresUser,
    previous: Option<UserStatus>,
    applied: &mut BTreeMap<String, String>,
) -> Result<UserStatus, Error> {
    let mut status = UserStatus {
        name: user.name.clone(),
        secret: user.password_secret.name.clone(),
        ready: false,
        applied_version: previous.as_ref().and_then(|p| p.applied_version.clone()),
        message: String::new(),
    };
    let api: Api<Secret> = pass.ctx.api(&pass.core.namespace);
    let found = user_secret(
        &api,
        &pass.stores.user_secrets,
        &pass.core.namespace,
        &user.password_secret.name,
        &user.password_secret.key,
    )
    .await?;
    let (version, new_password) = match found {
        UserSecret::Found { version, password } => (version, password.expose().to_owned()),
        UserSecret::Missing(message) => {
            status.message = message;
            pass.core.degrade(
                "UserSecretMissing",
                format!("user {}: {}", user.name, status.message),
            );
            return Ok(status);
        }
        UserSecret::Invalid(message) => {
            status.message = message;
            pass.core.degrade(
                "UserSecretInvalid",
                format!("user {}: {}", user.name, status.message),
            );
            return Ok(status);
        }
    };
    let exists = admin
        .role_exists(&user.name)
        .await
        .map_err(|e| database(pass, &e))?;
    if !exists {
        let options = RoleOptions {
            superuser: user.options.superuser,
            createdb: user.options.createdb,
            connection_limit: user.options.connection_limit,
            ..RoleOptions::default()
        };
        match admin.create_role(&user.name, &new_password, &options).await {
            Ok(()) | Err(PgAdminError::AlreadyExists(_)) => {}
            Err(e) => return Err(database(pass, &e)),
        }
        applied.insert(user.name.clone(), new_password.clone());
        pass.core.event(
            EventType::Normal,
            "UserCreated",
            "ReconcileUsers",
            format!("created user {}", user.name),
        );
        status.applied_version = version.clone();
    } else if status.applied_version != version || !applied.contains_key(&user.name) {
        let old = applied.get(&user.name).cloned();
        match rotate(pass, user, old.as_deref(), &new_password).await? {
            Ok(Rotation::Changed) => {
                applied.insert(user.name.clone(), new_password.clone());
                pass.core.event(
                    EventType::Normal,
                    "PasswordRotated",
                    "ReconcileUsers",
                    format!(
                        "changed the password of user {} from Secret {}",
                        user.name, user.password_secret.name
                    ),
                );
            }
            Ok(Rotation::AlreadySet) => {
                // Nothing was altered. Say so when Steward's record was something else (the
                // database was set to the Secret's value by hand, or the record was lost); a
                // Secret rewritten with the same password is no news.
                if old.as_deref() != Some(new_password.as_str()) {
                    pass.core.event(
                        EventType::Normal,
                        "PasswordAlreadySet",
                        "ReconcileUsers",
                        format!(
                            "user {} already logs in with the password in Secret {}; nothing \
                             was changed in the database",
                            user.name, user.password_secret.name
                        ),
                    );
                }
                applied.insert(user.name.clone(), new_password.clone());
            }
            Err(why) => {
                status.message = why.clone();
                status.applied_version = version;
                pass.core.event(
                    EventType::Warning,
                    "PasswordRotationFailed",
                    "ReconcileUsers",
                    why,
                );
                return Ok(status);
            }
        }
        status.applied_version = version.clone();
    } else if previous
        .as_ref()
        .is_some_and(|p| !p.ready && !p.message.is_empty())
    {
        // Handled before and failed: stay failed until the Secret changes.
        status.message = previous.map(|p| p.message).unwrap_or_default();
        return Ok(status);
    }
    for db in &user.databases {
        match admin.create_database(db, &user.name).await {
            Ok(true) => pass.core.event(
                EventType::Normal,
                "DatabaseCreated",
                "ReconcileUsers",
                format!("created database {db} owned by {}", user.name),
            ),
            Ok(false) => {}
            Err(e) => return Err(database(pass, &e)),
        }
        // Read before writing: the owner (the database was created for the user) or a
        // superuser holds every privilege already, and so does a role granted them on an
        // earlier pass, so a converged cluster writes nothing. Checked on every pass, not only
        // after a create, so a grant lost to a crash or revoked by hand comes back.
        let granted = admin
            .has_database_privileges(&user.name, db)
            .await
            .map_err(|e| database(pass, &e))?;
        if !granted {
            admin
                .grant_database(&user.name, db)
                .await
                .map_err(|e| database(pass, &e))?;
            pass.core.event(
                EventType::Normal,
                "DatabaseGranted",
                "ReconcileUsers",
                format!("granted user {} all privileges on database {db}", user.name),
            );
        }
    }
    status.ready = true;
    Ok(status)
}

/// What [`rotate`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rotation {
    /// The new password logged in already: nothing was altered.
    AlreadySet,
    /// `ALTER ROLE … PASSWORD` ran, logged in as the user with the old password.
    Changed,
}

/// Changes a user's password by logging in as the user with the old one, unless the new one
/// logs in already. The inner error is the reason it cannot be done (never containing a
/// password).
async fn rotate(
    pass: &PostgresPass,
    user: &PostgresUser,
    old: Option<&str>,
    new: &str,
) -> Result<Result<Rotation, String>, Error> {
    let Some(primary) = pass.primary() else {
        return Ok(Err("no primary".into()));
    };
    let Some(ip) = pass.instance(&primary).and_then(|v| v.ip.clone()) else {
        return Ok(Err("the primary has no IP".into()));
    };
    let Some(base) = pass.target(&ip) else {
        return Ok(Err("credentials not read yet".into()));
    };
    let timeout = pass.ctx.database_timeout;
    // Already in place (first sight of an existing role, or a Secret rewritten unchanged)?
    match pass
        .connector()?
        .check_login(&base.as_user(&user.name, new), timeout)
        .await
    {
        Ok(true) => return Ok(Ok(Rotation::AlreadySet)),
        Ok(false) => {}
        Err(e) if e.is_transient() => return Err(database(pass, &e)),
        Err(e) => return Ok(Err(format!("user {}: {e}", user.name))),
    }
    let Some(old) = old else {
        return Ok(Err(format!(
            "user {} exists but Steward does not know its current password and the Secret's does \
             not log in; set the password in the database to the Secret's value by hand",
            user.name
        )));
    };
    let session = match pass
        .connector()?
        .connect(&base.as_user(&user.name, old), timeout)
        .await
    {
        Ok(s) => s,
        Err(PgAdminError::AuthFailed(_)) => {
            return Ok(Err(format!(
                "user {}: the previous password no longer logs in (was it changed inside the \
                 database?); Steward cannot rotate it — set it to the Secret's value by hand",
                user.name
            )));
        }
        Err(e) if e.is_transient() => return Err(database(pass, &e)),
        Err(e) => return Ok(Err(format!("user {}: {e}", user.name))),
    };
    match session.alter_password(&user.name, new).await {
        Ok(()) => Ok(Ok(Rotation::Changed)),
        Err(e) if e.is_transient() => Err(database(pass, &e)),
        Err(e) => Ok(Err(format!("user {}: {e}", user.name))),
    }
}

async fn read_applied(pass: &PostgresPass) -> Result<BTreeMap<String, String>, Error> {
    let api: Api<Secret> = pass.ctx.api(&pass.core.namespace);
    let name = pass.names.applied_passwords_secret();
    passwords::read_applied(&api, &pass.stores.secrets, &pass.core.namespace, &name).await
}

async fn write_applied(
    pass: &PostgresPass,
    applied: &BTreeMap<String, String>,
) -> Result<(), Error> {
    let api: Api<Secret> = pass.ctx.api(&pass.core.namespace);
    let name = pass.names.applied_passwords_secret();
    passwords::write_applied(
        &api,
        pass.cluster.as_ref(),
        crate::postgres::names::ENGINE,
        &name,
        applied,
    )
    .await
}
