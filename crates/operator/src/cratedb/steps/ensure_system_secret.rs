//! EnsureSystemSecret — the `system` user's Secret, `user-system-<cluster>` (`username`,
//! `password`), created once with a generated password and immutable afterwards: the password
//! is also in CrateDB, so a new one in the Secret would lock the operator out. The pass keeps
//! the login for the steps that talk to CrateDB.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};

use crate::cratedb::CratePass;
use crate::cratedb::admin::Login;
use crate::cratedb::names::{ENGINE, SYSTEM_USER};
use crate::error::Error;
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::resources::secrets::{Password, credential_secret, password_of};
use crate::runtime::stores::cached_or_get;

/// See the module documentation.
pub struct EnsureSystemSecret;

#[async_trait]
impl SubReconciler<CratePass> for EnsureSystemSecret {
    fn name(&self) -> &'static str {
        "EnsureSystemSecret"
    }

    async fn reconcile(&self, pass: &mut CratePass) -> Result<Outcome, Error> {
        let namespace = pass.core.namespace.clone();
        let name = pass.names.system_secret();
        let object = format!("{namespace}/{name}");
        let api: Api<Secret> = pass.ctx.api(&namespace);
        let found = cached_or_get(&pass.stores.secrets, &api, &namespace, &name)
            .await
            .map_err(|source| Error::kube("get Secret", object.clone(), source))?;
        let secret = match found {
            Some(s) => s,
            None => {
                let password = Password::generate();
                let Some(secret) = credential_secret(
                    pass.cluster.as_ref(),
                    ENGINE,
                    name.clone(),
                    "system-user",
                    SYSTEM_USER,
                    &password,
                ) else {
                    return Err(Error::Internal {
                        message: "cluster has no UID or namespace".into(),
                    });
                };
                match api.create(&PostParams::default(), secret.secret()).await {
                    Ok(s) => {
                        pass.core.event(
                            EventType::Normal,
                            "SecretCreated",
                            "EnsureSystemSecret",
                            format!("generated the system user's password in Secret {name}"),
                        );
                        s
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => api
                        .get(&name)
                        .await
                        .map_err(|source| Error::kube("get Secret", object.clone(), source))?,
                    Err(source) => return Err(Error::kube("create Secret", object, source)),
                }
            }
        };
        let Some(password) = password_of(&secret) else {
            pass.core.degrade(
                "SystemSecretInvalid",
                format!("Secret {name} has no password; delete it to have a new one generated before bootstrap"),
            );
            return Ok(Outcome::stop(
                std::time::Duration::from_secs(60),
                format!("Secret {name} has no password"),
            ));
        };
        pass.system = Some(Login {
            user: SYSTEM_USER.to_owned(),
            password,
        });
        Ok(Outcome::Continue)
    }
}
