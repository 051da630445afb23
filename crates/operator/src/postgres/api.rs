//! The PostgreSQL engine as the REST API sees it ([`ClusterApi`]): `PostgresCluster`, sized by
//! `spec.instances`, with database users (`spec.users`, passwords in Secrets), fail-over to a
//! named replica (`spec.switchover`), backups, restores, schedules and policies.

use axum::http::StatusCode;
use kube::api::ApiResource;
use serde_json::{Value, json};
use steward_api::postgres::{
    InstanceRole, PostgresCluster, PostgresClusterSpec, PostgresClusterStatus, PostgresUser,
    SecretKeyRef, UserOptions,
};

use crate::api::clusters::{Candidate, Candidates, merge};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use steward_api::pgbackrest::{
    BackupMethod, BackupType, PostgresBackup, PostgresBackupSpec, PostgresRestore,
    PostgresRestoreSpec, RestoreTarget,
};

use crate::api::engine::{
    BackupsApi, Capability, ClusterApi, FailoverApi, NewBackup, NewCluster, NewRestore, NewUpgrade,
    NewUser, Size, UpgradeApi, UsersApi, create_as, list_of_cluster, normalize_as, parts_as,
    show_of_cluster, to_json, user_ready,
};
use crate::api::resources::{BackupInfo, RestoreInfo, UpgradeInfo, UserInfo, stamped};
use crate::api::server::ApiError;
use crate::postgres::engine::Postgres;
use steward_api::pgupgrade::{PostgresUpgrade, PostgresUpgradeSpec};

/// The version a create request gets when it names none.
pub const DEFAULT_VERSION: &str = "15";

impl ClusterApi for Postgres {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn resource(&self) -> ApiResource {
        ApiResource::erase::<PostgresCluster>(&())
    }

    fn size(&self) -> Size {
        Size::Field("instances")
    }

    fn create_spec(&self, request: &NewCluster<'_>) -> Result<Value, ApiError> {
        let spec = PostgresClusterSpec::new(
            request.instances,
            request.version.unwrap_or(DEFAULT_VERSION).to_owned(),
        );
        let mut spec = to_json(&spec)?;
        if let Some(size) = request.storage {
            merge(&mut spec, &json!({"storage": {"size": size}}));
        }
        Ok(spec)
    }

    fn normalize(&self, spec: Value) -> Result<Value, ApiError> {
        normalize_as::<PostgresClusterSpec>(spec)
    }

    fn parts(&self, object: &Value) -> Result<(Value, Option<Value>), ApiError> {
        parts_as::<PostgresCluster, _, _>(object, |c| &c.spec, |c| c.status.as_ref())
    }

    fn refuses(&self, _capability: Capability, _what: &str) -> Option<String> {
        None
    }

    fn users(&self) -> Option<&dyn UsersApi> {
        Some(self)
    }

    fn backups(&self) -> Option<&dyn BackupsApi> {
        Some(self)
    }

    fn failover(&self) -> Option<&dyn FailoverApi> {
        Some(self)
    }

    fn upgrades(&self) -> Option<&dyn UpgradeApi> {
        Some(self)
    }
}

/// A PostgreSQL major-version upgrade is a `PostgresUpgrade` the cluster's controller runs.
#[async_trait::async_trait]
impl UpgradeApi for Postgres {
    async fn upgrade(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
        request: &NewUpgrade<'_>,
        stamp: &str,
    ) -> Result<Value, ApiError> {
        let to = request.to_version;
        if to.len() != 2 || !to.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ApiError::bad_request(format!(
                "toVersion {to:?} is not a PostgreSQL major version such as \"16\""
            )));
        }
        let mut object = PostgresUpgrade::new(
            &stamped(cluster, &format!("upgrade-{to}"), stamp),
            PostgresUpgradeSpec {
                cluster: cluster.to_owned(),
                to_version: to.to_owned(),
                image: request.image.map(str::to_owned),
                upgrade_image: None,
                without_backup: request.without_backup,
            },
        );
        object.metadata.namespace = Some(namespace.to_owned());
        let made = Api::<PostgresUpgrade>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &object)
            .await
            .map_err(|e| ApiError::kube("create PostgresUpgrade", &e))?;
        to_json(&upgrade_info(&made))
    }

    async fn show(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
        name: &str,
    ) -> Result<Option<Value>, ApiError> {
        show_of_cluster(
            client,
            namespace,
            name,
            |u: &PostgresUpgrade| u.spec.cluster == cluster,
            upgrade_info,
        )
        .await
    }
}

/// (pure) The API's view of an upgrade.
fn upgrade_info(upgrade: &PostgresUpgrade) -> UpgradeInfo {
    let status = upgrade.status.clone().unwrap_or_default();
    UpgradeInfo {
        name: upgrade.name_any(),
        cluster: upgrade.spec.cluster.clone(),
        to_version: upgrade.spec.to_version.clone(),
        phase: status.phase.map(|p| format!("{p:?}")),
        step: status.step,
        message: status.message,
        error: status.error,
    }
}

/// (pure) Whether `name` can be a PostgreSQL role Steward creates.
fn valid_role_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && name.len() <= 63
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl UsersApi for Postgres {
    fn check_new(&self, request: &NewUser<'_>) -> Result<(), ApiError> {
        if valid_role_name(request.name) {
            return Ok(());
        }
        Err(ApiError::bad_request(format!(
            "user {} is not a valid role name: lower case letters, digits and _, starting with a letter or _",
            request.name
        )))
    }

    fn entry(&self, request: &NewUser<'_>, secret: &str, key: &str) -> Result<Value, ApiError> {
        let user = PostgresUser {
            name: request.name.to_owned(),
            databases: request.databases.to_vec(),
            password_secret: SecretKeyRef {
                name: secret.to_owned(),
                key: key.to_owned(),
            },
            options: UserOptions {
                superuser: request.superuser,
                createdb: request.createdb,
                connection_limit: None,
            },
        };
        to_json(&user)
    }

    fn secret_of(&self, entry: &Value) -> Option<(String, String)> {
        let user: PostgresUser = serde_json::from_value(entry.clone()).ok()?;
        Some((user.password_secret.name, user.password_secret.key))
    }

    fn info(&self, entry: &Value, status: Option<&Value>) -> Result<Value, ApiError> {
        let u: PostgresUser = serde_json::from_value(entry.clone()).map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading a user: {e}"),
            )
        })?;
        let ready = user_ready(status, &u.name);
        to_json(&UserInfo {
            name: u.name,
            databases: u.databases,
            superuser: u.options.superuser,
            createdb: u.options.createdb,
            secret: u.password_secret.name,
            secret_key: u.password_secret.key,
            ready,
            privileges: None,
        })
    }
}

/// (pure) The cluster's status, as its type reads it.
fn status_of(object: &Value) -> Result<PostgresClusterStatus, ApiError> {
    let (_, status) = Postgres.parts(object)?;
    Ok(status
        .and_then(|s| serde_json::from_value(s).ok())
        .unwrap_or_default())
}

impl FailoverApi for Postgres {
    fn candidates(&self, object: &Value) -> Result<Candidates, ApiError> {
        let status = status_of(object)?;
        let mut candidates: Vec<Candidate> = status
            .instances
            .iter()
            .filter(|i| i.role == InstanceRole::Replica)
            .map(|i| Candidate {
                name: i.name.clone(),
                ready: i.ready,
                streaming: i.streaming,
                lag_bytes: i.lag_bytes,
            })
            .collect();
        candidates.sort_by_key(|c| (!c.ready, c.lag_bytes.unwrap_or(u64::MAX), c.name.clone()));
        Ok(Candidates {
            primary: status.current_primary,
            candidates,
        })
    }

    fn check_target(&self, object: &Value, cluster: &str, target: &str) -> Result<(), ApiError> {
        let status = status_of(object)?;
        let Some(instance) = status.instances.iter().find(|i| i.name == target) else {
            return Err(ApiError::bad_request(format!(
                "{target} is not an instance of {cluster} (GET …/failover lists the candidates)"
            )));
        };
        if instance.role == InstanceRole::Primary {
            return Err(ApiError::bad_request(format!(
                "{target} is already the primary"
            )));
        }
        Ok(())
    }

    fn request(&self, id: &str, target: Option<&str>) -> Value {
        json!({"switchover": {"id": id, "target": target}})
    }
}

/// (pure) A backup as the API answers it.
fn backup_info(b: &PostgresBackup) -> BackupInfo {
    let status = b.status.clone().unwrap_or_default();
    BackupInfo {
        name: b.name_any(),
        cluster: b.spec.cluster.clone(),
        type_: b.spec.type_.as_str().to_owned(),
        method: match b.spec.method {
            BackupMethod::Pgbackrest => "pgbackrest",
            BackupMethod::Pgbasebackup => "pgbasebackup",
        }
        .to_owned(),
        phase: status.phase.map(|p| format!("{p:?}")),
        label: status.label,
        message: status.message,
        error: status.error,
        start_time: status.start_time,
        completion_time: status.stop_time,
        size_bytes: None,
    }
}

/// PostgreSQL's backups are `PostgresBackup` objects (full, diff or incr; pgBackRest or
/// pg_basebackup), its restores `PostgresRestore` objects (to a time, a backup set, or the end
/// of the archive).
#[async_trait::async_trait]
impl BackupsApi for Postgres {
    async fn list(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
    ) -> Result<Vec<Value>, ApiError> {
        list_of_cluster(client, namespace, |b: &PostgresBackup| {
            b.spec.cluster == cluster
        })
        .await?
        .iter()
        .map(|b| to_json(&backup_info(b)))
        .collect()
    }

    async fn create(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
        request: &NewBackup<'_>,
        stamp: &str,
    ) -> Result<Value, ApiError> {
        let type_ = match request.type_ {
            None => BackupType::Full,
            Some(t) => BackupType::parse(t)
                .ok_or_else(|| ApiError::bad_request(format!("type {t:?}: full, diff or incr")))?,
        };
        let method = match request.method {
            None | Some("pgbackrest") => BackupMethod::Pgbackrest,
            Some("pgbasebackup") => BackupMethod::Pgbasebackup,
            Some(m) => {
                return Err(ApiError::bad_request(format!(
                    "method {m:?}: pgbackrest or pgbasebackup"
                )));
            }
        };
        let mut backup = PostgresBackup::new(
            &stamped(cluster, type_.as_str(), stamp),
            PostgresBackupSpec {
                cluster: cluster.to_owned(),
                type_,
                method,
            },
        );
        backup.metadata.namespace = Some(namespace.to_owned());
        create_as(client, namespace, &backup, backup_info).await
    }

    async fn show(
        &self,
        client: &kube::Client,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ApiError> {
        show_of_cluster(
            client,
            namespace,
            name,
            |_: &PostgresBackup| true,
            backup_info,
        )
        .await
    }

    async fn restore(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
        request: &NewRestore<'_>,
        stamp: &str,
    ) -> Result<Value, ApiError> {
        if request.version.is_some() {
            return Err(ApiError::bad_request(
                "version is FoundationDB's: a PostgreSQL restore takes targetTime or backup",
            ));
        }
        let target = request.target_time.map(|time| RestoreTarget {
            time: Some(time.to_owned()),
            ..Default::default()
        });
        let mut object = PostgresRestore::new(
            &stamped(cluster, "restore", stamp),
            PostgresRestoreSpec {
                cluster: cluster.to_owned(),
                target,
                backup_set: request.backup.map(str::to_owned),
                node_label: None,
            },
        );
        object.metadata.namespace = Some(namespace.to_owned());
        let made = Api::<PostgresRestore>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &object)
            .await
            .map_err(|e| ApiError::kube("create PostgresRestore", &e))?;
        to_json(&restore_info(&made))
    }

    async fn show_restore(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
        name: &str,
    ) -> Result<Option<Value>, ApiError> {
        show_of_cluster(
            client,
            namespace,
            name,
            |r: &PostgresRestore| r.spec.cluster == cluster,
            restore_info,
        )
        .await
    }
}

/// (pure) The API's view of a restore.
fn restore_info(restore: &PostgresRestore) -> RestoreInfo {
    let status = restore.status.clone().unwrap_or_default();
    RestoreInfo {
        name: restore.name_any(),
        cluster: restore.spec.cluster.clone(),
        phase: status.phase.map(|p| format!("{p:?}")),
        step: status.step,
        message: status.message,
        error: status.error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_names_are_lower_case_identifiers() {
        assert!(valid_role_name("app_1"));
        assert!(!valid_role_name("App"));
        assert!(!valid_role_name("1app"));
        assert!(!valid_role_name(""));
    }
}
