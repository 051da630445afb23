//! EnsureSecrets — creates the Secrets of the operator's `steward` superuser and of the
//! `replicator` replication user when they are missing, each with a generated password, and
//! reads both passwords for later steps. A Secret that exists is never rewritten: its password
//! is what the database has. The passwords go into no log, Event, status or message.
//! With backups on, it also creates the Secret with pgBackRest's TLS certificates once
//! (`build::pgbackrest`); its keys are never read back or shown. A cluster created with
//! `dataSource` gets the source cluster's two passwords instead of generated ones: its data is
//! a restore of the source's, roles and passwords included. Secrets are read from the cache of
//! Steward's own Secrets, so a settled cluster's pass makes no request here; one the cache does
//! not hold is created at once (a new cluster's: no read first) and read only if the create
//! conflicts.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::ObjectRef;

use crate::error::Error;
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::postgres::build::{pgbackrest, secrets};
use crate::postgres::names::ClusterNames;
use crate::postgres::steps::{SOON, validated};
use crate::postgres::{Credentials, PostgresPass};
use crate::runtime::stores::cached_or_get;

/// See the module documentation.
pub struct EnsureSecrets;

/// Steward's Secret `name` of this cluster from the cache of its labelled Secrets.
fn cached(pass: &PostgresPass, name: &str) -> Option<Arc<Secret>> {
    let key = ObjectRef::<Secret>::new(name).within(&pass.core.namespace);
    pass.stores.secrets.get(&key)
}

async fn ensure(
    pass: &mut PostgresPass,
    name: &str,
    build: Option<Secret>,
) -> Result<Option<String>, Error> {
    let api: Api<Secret> = pass.ctx.api(&pass.core.namespace);
    let object = format!("{}/{name}", pass.core.namespace);
    // Not in the cache: a new cluster's, most likely, so it is created without a read first; an
    // existing Secret the cache does not hold yet answers the create with a conflict and is
    // read then.
    let secret = match cached(pass, name) {
        Some(s) => Arc::unwrap_or_clone(s),
        None => {
            let Some(desired) = build else {
                return Err(Error::Internal {
                    message: "cluster has no UID or namespace".into(),
                });
            };
            match api.create(&PostParams::default(), &desired).await {
                Ok(created) => {
                    pass.core.event(
                        EventType::Normal,
                        "SecretCreated",
                        "EnsureSecrets",
                        format!("created Secret {name} with a generated password"),
                    );
                    created
                }
                Err(kube::Error::Api(e)) if e.code == 409 => api
                    .get(name)
                    .await
                    .map_err(|source| Error::kube("get Secret", object, source))?,
                Err(source) => return Err(Error::kube("create Secret", object, source)),
            }
        }
    };
    Ok(secrets::key_of(&secret, secrets::PASSWORD_KEY).map(|p| p.expose().to_owned()))
}

/// The password in a `dataSource` cluster's generated Secret, or why it cannot be read.
async fn source_password(
    pass: &PostgresPass,
    name: String,
) -> Result<Result<secrets::Password, String>, Error> {
    let api: Api<Secret> = pass.ctx.api(&pass.core.namespace);
    let object = format!("{}/{name}", pass.core.namespace);
    let secret = cached_or_get(&pass.stores.secrets, &api, &pass.core.namespace, &name)
        .await
        .map_err(|source| Error::kube("get Secret", object.clone(), source))?;
    Ok(match secret {
        None => Err(format!(
            "dataSource: Secret {object} of the source cluster does not exist (the clone's data has the source's passwords)"
        )),
        Some(s) => secrets::key_of(&s, secrets::PASSWORD_KEY)
            .map(|p| secrets::Password::new(p.expose()))
            .ok_or_else(|| format!("dataSource: Secret {object} has no `password` key")),
    })
}

/// Creates `<cluster>-pgbackrest-tls` with fresh certificates when it is missing.
async fn ensure_tls(
    pass: &mut PostgresPass,
    valid: &crate::postgres::validate::ValidatedPostgresCluster,
) -> Result<(), Error> {
    let name = pass.names.pgbackrest_tls_secret();
    let api: Api<Secret> = pass.ctx.api(&pass.core.namespace);
    let object = format!("{}/{name}", pass.core.namespace);
    let exists = cached_or_get(&pass.stores.secrets, &api, &pass.core.namespace, &name)
        .await
        .map_err(|source| Error::kube("get Secret", object.clone(), source))?
        .is_some();
    if exists {
        return Ok(());
    }
    let material = pgbackrest::TlsMaterial::generate(&pass.names).map_err(|e| Error::Internal {
        message: format!("generating pgBackRest's certificates: {e}"),
    })?;
    let Some(secret) = pgbackrest::tls_secret(&pass.cluster, valid, &material) else {
        return Err(Error::Internal {
            message: "cluster has no UID or namespace".into(),
        });
    };
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            pass.core.event(
                EventType::Normal,
                "SecretCreated",
                "EnsureSecrets",
                format!("created Secret {name} with generated TLS certificates for pgBackRest"),
            );
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(source) => Err(Error::kube("create Secret", object, source)),
    }
}

#[async_trait]
impl SubReconciler<PostgresPass> for EnsureSecrets {
    fn name(&self) -> &'static str {
        "EnsureSecrets"
    }

    async fn reconcile(&self, pass: &mut PostgresPass) -> Result<Outcome, Error> {
        let superuser_name = pass.names.superuser_secret();
        let replication_name = pass.names.replication_secret();
        let valid = validated(pass)?;
        // A clone's data has the source's roles and passwords: its Secrets start with them.
        // (A Secret the cache does not hold yet is created with the source's password, which
        // the create's conflict discards.)
        let missing = [&superuser_name, &replication_name]
            .iter()
            .any(|name| cached(pass, name).is_none());
        let (superuser_pw, replication_pw) = match valid.source_cluster() {
            Some(source) if missing => {
                let source = ClusterNames::new(source, &pass.core.namespace);
                let read = |name: String| source_password(pass, name);
                match (
                    read(source.superuser_secret()).await?,
                    read(source.replication_secret()).await?,
                ) {
                    (Ok(s), Ok(r)) => (s, r),
                    (Err(why), _) | (_, Err(why)) => {
                        pass.core.degrade("DataSourceUnavailable", why.clone());
                        return Ok(Outcome::stop(SOON * 10, why));
                    }
                }
            }
            _ => (secrets::Password::generate(), secrets::Password::generate()),
        };
        let superuser = ensure(
            pass,
            &superuser_name,
            secrets::superuser_secret(&pass.cluster, &valid, &superuser_pw)
                .map(secrets::CredentialSecret::into_secret),
        )
        .await?;
        let replication = ensure(
            pass,
            &replication_name,
            secrets::replication_secret(&pass.cluster, &valid, &replication_pw)
                .map(secrets::CredentialSecret::into_secret),
        )
        .await?;
        if valid.pgbackrest.is_some() {
            ensure_tls(pass, &valid).await?;
        }
        match (superuser, replication) {
            (Some(superuser), Some(replication)) => {
                pass.credentials = Some(Credentials {
                    superuser,
                    replication,
                });
                Ok(Outcome::Continue)
            }
            _ => {
                let why = format!(
                    "Secrets {superuser_name} and {replication_name} must hold a UTF-8 `password` key"
                );
                pass.core.degrade("InvalidSecret", why.clone());
                Ok(Outcome::stop(SOON * 10, why))
            }
        }
    }
}
