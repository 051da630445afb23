//! Bootstrap — seed 000's order, once per cluster, as the `Bootstrap` operation (deadline
//! `BOOTSTRAP_TIMEOUT`, 1800 s, or `spec.timeouts.bootstrapSeconds`):
//!
//! 1. the license from `spec.cluster.license` (if any), set **first** with `crash` in a ready
//!    master over `pods/exec` — a cluster may start with more nodes than the free license
//!    allows;
//! 2. the `system` user with `ALL` privileges, the same way; "already exists" is fine;
//! 3. the users of the spec, created by `ReconcileUsers` over the PostgreSQL protocol as
//!    `system`; bootstrap is done once every one of them is ready.
//!
//! Progress is recorded in `status.bootstrap` after each step, so an operator that restarts
//! continues with the next one and never sets the license or creates `system` twice.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use steward_api::common::{OperationChange, OperationKind, OperationPhase};

use crate::cratedb::CratePass;
use crate::cratedb::admin::{CrateError, ops};
use crate::cratedb::steps::{SOON, database, validated};
use crate::error::Error;
use crate::operation::{OperationRequest, Started};
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::resources::secrets::key_of;

/// See the module documentation.
pub struct Bootstrap;

/// What a CrateDB failure means for bootstrap: unreachable → wait; else the operator's error.
fn failed(pass: &CratePass, what: &str, e: &CrateError) -> Result<Outcome, Error> {
    match e {
        CrateError::Unavailable(_) => Ok(Outcome::requeue(SOON, format!("{what}: {e}"))),
        _ => Err(database(pass, e)),
    }
}

#[async_trait]
impl SubReconciler<CratePass> for Bootstrap {
    fn name(&self) -> &'static str {
        "Bootstrap"
    }

    async fn reconcile(&self, pass: &mut CratePass) -> Result<Outcome, Error> {
        if pass.status.bootstrap.done {
            return Ok(Outcome::Continue);
        }
        let valid = validated(pass)?;
        let started = pass.core.start_operation(OperationRequest {
            kind: OperationKind::Bootstrap,
            step: "License".into(),
            total: 3,
            change: OperationChange::default(),
            message: format!(
                "bootstrapping {} master and {} data nodes",
                valid.masters().replicas,
                valid.data_nodes()
            ),
        });
        match started {
            Started::New | Started::Resumed => {}
            Started::Busy(kind) => {
                return Ok(Outcome::requeue(
                    SOON,
                    format!("waiting for {kind:?} to finish"),
                ));
            }
            Started::Blocked(why) => return Ok(Outcome::stop(SOON * 30, why)),
        }
        if pass.masters.is_empty() {
            pass.core.advance_operation(
                OperationKind::Bootstrap,
                "WaitForMaster",
                0,
                "waiting for a ready master node",
            );
            // A master's Pod becoming ready wakes the cluster (its Pod events are watched).
            return Ok(Outcome::requeue(
                SOON * 15,
                "waiting for a ready master node",
            ));
        }
        let channels = pass.channels()?;
        let masters = pass.masters.clone();
        if !pass.status.bootstrap.license {
            if let Some(license) = &valid.license {
                let api: Api<Secret> = pass.ctx.api(&pass.core.namespace);
                let secret = api.get_opt(&license.name).await.map_err(|source| {
                    Error::kube(
                        "get Secret",
                        format!("{}/{}", pass.core.namespace, license.name),
                        source,
                    )
                })?;
                let Some(key) = secret.as_ref().and_then(|s| key_of(s, &license.key)) else {
                    let why = format!(
                        "the license Secret {} has no key {:?} (or does not exist)",
                        license.name, license.key
                    );
                    pass.core.degrade("LicenseSecretMissing", why.clone());
                    return Ok(Outcome::requeue(SOON * 15, why));
                };
                if let Err(e) = ops::set_license(channels.as_ref(), &masters, &key).await {
                    return failed(pass, "setting the license", &e);
                }
                pass.core.event(
                    EventType::Normal,
                    "LicenseSet",
                    "Bootstrap",
                    format!("set the license from Secret {} with crash", license.name),
                );
            }
            pass.status.bootstrap.license = true;
            pass.core
                .advance_operation(OperationKind::Bootstrap, "SystemUser", 1, "license set");
        }
        if !pass.status.bootstrap.system_user {
            let Some(system) = pass.system.clone() else {
                return Ok(Outcome::requeue(
                    SOON,
                    "the system user's Secret is not read yet",
                ));
            };
            if let Err(e) =
                ops::create_system_user(channels.as_ref(), &masters, &system.password).await
            {
                return failed(pass, "creating the system user", &e);
            }
            pass.core.event(
                EventType::Normal,
                "SystemUserCreated",
                "Bootstrap",
                "created the system user with ALL privileges with crash",
            );
            pass.status.bootstrap.system_user = true;
            pass.core.advance_operation(
                OperationKind::Bootstrap,
                "Users",
                2,
                "system user created; creating users",
            );
            // ReconcileUsers (next) creates the users on this pass.
            return Ok(Outcome::requeue(SOON, "creating users"));
        }
        let waiting: Vec<String> = valid
            .users
            .iter()
            .filter(|u| {
                !pass
                    .status
                    .users
                    .iter()
                    .any(|s| s.name == u.name && s.ready)
            })
            .map(|u| u.name.clone())
            .collect();
        if !waiting.is_empty() {
            return Ok(Outcome::requeue(
                SOON,
                format!("waiting for users {}", waiting.join(", ")),
            ));
        }
        pass.status.bootstrap.done = true;
        pass.core.finish_operation(
            OperationKind::Bootstrap,
            OperationPhase::Succeeded,
            format!(
                "license {}, system user and {} users created",
                if valid.license.is_some() {
                    "set"
                } else {
                    "not configured"
                },
                valid.users.len()
            ),
        );
        Ok(Outcome::Continue)
    }
}
