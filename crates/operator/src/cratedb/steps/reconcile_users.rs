//! ReconcileUsers — once the `system` user exists, brings every `spec.users` entry in step with
//! its Secret (seed 000, "User Passwords"):
//!
//! - the Secret gets the `steward.dev/user-password` label (also Secrets referenced before
//!   Steward labelled them), so only labelled Secrets are watched and a change wakes the
//!   cluster;
//! - a user not created yet is created **over the PostgreSQL wire protocol as `system`** with
//!   the Secret's password and `ALL` privileges (seed 000, bootstrap); one that exists already
//!   is checked by logging in with the Secret's password;
//! - when the Secret's `resourceVersion` differs from the one handled
//!   (`status.users[].appliedVersion`), Steward logs in **as the user with the old password**
//!   (from the cluster's applied-passwords record, Secret `crate-passwords-<cluster>`) and runs
//!   `ALTER USER … SET (password = …)` (`PasswordRotated`). If the old password no longer logs in
//!   (it was changed inside CrateDB), the user is reported not ready, once, with the reason,
//!   and nothing is retried until the Secret changes again.
//!
//! On a converged cluster it only reads Secrets from the cache. Users removed from the spec are
//! left in CrateDB (dropping them could break applications).

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use steward_api::common::UserStatus;
use steward_api::cratedb::CrateUser;

use crate::cratedb::CratePass;
use crate::cratedb::admin::{CrateError, Login, ops};
use crate::cratedb::names::ENGINE;
use crate::cratedb::steps::{SOON, database};
use crate::error::Error;
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::resources::passwords::{self, UserSecret, user_secret};
use crate::resources::secrets::Password;

/// See the module documentation.
pub struct ReconcileUsers;

#[async_trait]
impl SubReconciler<CratePass> for ReconcileUsers {
    fn name(&self) -> &'static str {
        "ReconcileUsers"
    }

    async fn reconcile(&self, pass: &mut CratePass) -> Result<Outcome, Error> {
        if !pass.status.bootstrap.system_user || pass.nodes.is_empty() {
            return Ok(Outcome::Continue);
        }
        let Some(system) = pass.system.clone() else {
            return Ok(Outcome::Continue);
        };
        let users = pass.cluster.spec.users.clone();
        if users.is_empty() {
            pass.status.users.clear();
            return Ok(Outcome::Continue);
        }
        let api: Api<Secret> = pass.ctx.api(&pass.core.namespace);
        let record = pass.names.applied_passwords();
        let mut applied =
            passwords::read_applied(&api, &pass.stores.secrets, &pass.core.namespace, &record)
                .await?;
        let before = applied.clone();
        let mut statuses = Vec::new();
        let mut unreachable = None;
        for user in &users {
            let previous = pass
                .status
                .users
                .iter()
                .find(|u| u.name == user.name)
                .cloned();
            match reconcile_user(pass, &api, &system, user, previous.clone(), &mut applied).await? {
                Ok(status) => statuses.push(status),
                Err(e) => {
                    unreachable = Some(e.to_string());
                    statuses.push(previous.unwrap_or_else(|| UserStatus {
                        name: user.name.clone(),
                        secret: user.password.secret_key_ref.name.clone(),
                        ready: false,
                        applied_version: None,
                        message: e.to_string(),
                    }));
                }
            }
        }
        if applied != before {
            passwords::write_applied(&api, pass.cluster.as_ref(), ENGINE, &record, &applied)
                .await?;
        }
        pass.status.users = statuses;
        match unreachable {
            Some(why) => Ok(Outcome::requeue(SOON, format!("users: {why}"))),
            None => Ok(Outcome::Continue),
        }
    }
}

/// One user. The inner error is a transient CrateDB failure (try again soon).
async fn reconcile_user(
    pass: &mut CratePass,
    api: &Api<Secret>,
    system: &Login,
    user: &CrateUser,
    previous: Option<UserStatus>,
    applied: &mut BTreeMap<String, String>,
) -> Result<Result<UserStatus, CrateError>, Error> {
    let secret_name = user.password.secret_key_ref.name.clone();
    let mut status = UserStatus {
        name: user.name.clone(),
        secret: secret_name.clone(),
        ready: false,
        applied_version: previous.as_ref().and_then(|p| p.applied_version.clone()),
        message: String::new(),
    };
    let found = user_secret(
        api,
        &pass.stores.user_secrets,
        &pass.core.namespace,
        &secret_name,
        &user.password.secret_key_ref.key,
    )
    .await?;
    let (version, password) = match found {
        UserSecret::Found { version, password } => (version, password),
        UserSecret::Missing(message) | UserSecret::Invalid(message) => {
            status.message = message;
            pass.core.degrade(
                "UserSecretMissing",
                format!("user {}: {}", user.name, status.message),
            );
            return Ok(Ok(status));
        }
    };
    let channels = pass.channels()?;
    let nodes = pass.nodes.clone();
    let as_user = |p: &Password| Login {
        user: user.name.clone(),
        password: p.clone(),
    };
    let known = previous
        .as_ref()
        .is_some_and(|p| p.applied_version.is_some());
    if !known {
        match ops::create_user(channels.as_ref(), &nodes, system, &user.name, &password).await {
            Ok(true) => {
                pass.core.event(
                    EventType::Normal,
                    "UserCreated",
                    "ReconcileUsers",
                    format!(
                        "created user {} with ALL privileges over the PostgreSQL protocol",
                        user.name
                    ),
                );
            }
            Ok(false) => {
                // It existed: is the Secret's password its password?
                match ops::can_log_in(channels.as_ref(), &nodes, &as_user(&password)).await {
                    Ok(true) => {}
                    Ok(false) => {
                        status.message = format!(
                            "user {} exists in CrateDB with another password than Secret {secret_name}'s; \
                             set it to the Secret's value by hand",
                            user.name
                        );
                        status.applied_version = version;
                        pass.core.event(
                            EventType::Warning,
                            "UserPasswordMismatch",
                            "ReconcileUsers",
                            status.message.clone(),
                        );
                        return Ok(Ok(status));
                    }
                    Err(e) => return Ok(Err(e)),
                }
            }
            Err(e @ CrateError::Unavailable(_)) => return Ok(Err(e)),
            Err(e) => return Err(database(pass, &e)),
        }
        applied.insert(user.name.clone(), password.expose().to_owned());
        status.applied_version = version;
    } else if status.applied_version != version {
        // The Secret changed: already in place?
        match ops::can_log_in(channels.as_ref(), &nodes, &as_user(&password)).await {
            Ok(true) => {}
            Ok(false) => {
                let Some(old) = applied.get(&user.name).cloned() else {
                    status.message = format!(
                        "user {}: Steward does not know its current password and the Secret's \
                         does not log in; set it to the Secret's value by hand",
                        user.name
                    );
                    status.applied_version = version;
                    return Ok(Ok(status));
                };
                let old = as_user(&Password::new(old));
                match ops::change_password(channels.as_ref(), &nodes, &old, &password).await {
                    Ok(()) => pass.core.event(
                        EventType::Normal,
                        "PasswordRotated",
                        "ReconcileUsers",
                        format!(
                            "changed the password of user {} from Secret {secret_name}, logged in \
                             with the old one",
                            user.name
                        ),
                    ),
                    Err(CrateError::AuthFailed(_)) => {
                        status.message = format!(
                            "user {}: the previous password no longer logs in (was it changed \
                             inside CrateDB?); Steward cannot rotate it — set it to the Secret's \
                             value by hand",
                            user.name
                        );
                        status.applied_version = version;
                        pass.core.event(
                            EventType::Warning,
                            "PasswordRotationFailed",
                            "ReconcileUsers",
                            status.message.clone(),
                        );
                        return Ok(Ok(status));
                    }
                    Err(e @ CrateError::Unavailable(_)) => return Ok(Err(e)),
                    Err(e) => return Err(database(pass, &e)),
                }
            }
            Err(e) => return Ok(Err(e)),
        }
        applied.insert(user.name.clone(), password.expose().to_owned());
        status.applied_version = version;
    } else if previous
        .as_ref()
        .is_some_and(|p| !p.ready && !p.message.is_empty())
    {
        // Handled before and failed: reported once, not retried until the Secret changes.
        status.message = previous.map(|p| p.message).unwrap_or_default();
        return Ok(Ok(status));
    }
    status.ready = true;
    Ok(Ok(status))
}
