//! The REST API's routes for what a cluster has besides its spec size: database users (the
//! labelled Secrets and `spec.users`, through the engine's `UsersApi`), backups
//! (`PostgresBackup`), restores (`PostgresRestore`), schedules (`Schedule`) and SQL policies
//! (`PostgresPolicy`). Each is one or two Kubernetes API calls; the controllers do the work.
//! Passwords go into Secrets and never into an answer. An engine without users, backups,
//! restores, schedules or policies answers `400` saying so (`ClusterApi::refuses`). Backups and
//! restores go through the engine's `BackupsApi` (PostgreSQL's `PostgresBackup`/`PostgresRestore`,
//! FoundationDB's `FoundationDBBackup`/`FoundationDBRestore`, etcd's `EtcdBackup` and a new
//! `EtcdCluster` seeded from it); schedules and policies are
//! PostgreSQL's objects: the routes name them, and take the engine's word on whether a cluster
//! has them.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use steward_api::policy::PostgresPolicy;
use steward_api::schedule::Schedule;

use super::clusters::{self, engine_with};
use super::engine::{
    BackupsApi, Capability, ClusterApi, NewBackup, NewRestore, NewUpgrade, NewUser, UsersApi,
};
use super::server::{ApiError, ApiJson, ApiState};
use crate::clock::format_time;
use crate::resources::secrets::generate_password;

/// The label on the Secrets the API created for users (and so may delete with them).
pub const API_MANAGED_LABEL: &str = "steward.dev/api-managed";

/// A database user (never its password).
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserInfo {
    /// The user's name.
    pub name: String,
    /// Databases it owns (PostgreSQL; always empty for CrateDB).
    pub databases: Vec<String>,
    /// `SUPERUSER`.
    pub superuser: bool,
    /// `CREATEDB`.
    pub createdb: bool,
    /// The Secret that holds the password.
    pub secret: String,
    /// Its key.
    pub secret_key: String,
    /// Whether the operator has applied the current password (`status.users`).
    pub ready: Option<bool>,
    /// CrateDB: `ALL` (every CrateDB user gets them); absent for PostgreSQL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub privileges: Option<String>,
}

/// `GET …/users`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct UserList {
    users: Vec<UserInfo>,
}

/// The engine named `engine` and its users, or the `400` of an engine without users.
fn users_of(engine: &str) -> Result<(&'static dyn ClusterApi, &'static dyn UsersApi), ApiError> {
    let engine = engine_with(engine, Capability::Users, "users")?;
    let users = engine.users().ok_or_else(|| {
        ApiError::bad_request(format!(
            "users are not supported for {} clusters",
            engine.name()
        ))
    })?;
    Ok((engine, users))
}

/// The cluster's `spec.users` entries.
fn entries(cluster: &DynamicObject) -> Vec<Value> {
    cluster
        .data
        .pointer("/spec/users")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// (pure) The name of a `spec.users` entry.
fn entry_name(entry: &Value) -> Option<&str> {
    entry.get("name").and_then(Value::as_str)
}

/// The cluster's database users.
#[utoipa::path(get, path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/users",
    tag = "users",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`postgres` or `cratedb` (`etcd`: 400)"),
        ("name" = String, Path, description = "The cluster")),
    responses((status = 200, body = UserList), (status = 400, body = super::server::ErrorBody),
        (status = 401, body = super::server::ErrorBody), (status = 403, body = super::server::ErrorBody),
        (status = 404, body = super::server::ErrorBody)))]
pub async fn list_users(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let (engine, users) = users_of(&engine)?;
    let c = clusters::get(&state.client, engine, &namespace, &name).await?;
    let status = c.data.get("status");
    let list = entries(&c)
        .iter()
        .map(|u| users.info(u, status))
        .collect::<Result<Vec<Value>, ApiError>>()?;
    Ok(Json(json!({"users": list})))
}

/// `POST …/users`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUser {
    /// The role name.
    name: String,
    /// Databases it owns (created if missing).
    #[serde(default)]
    databases: Vec<String>,
    /// `SUPERUSER`.
    #[serde(default)]
    superuser: bool,
    /// `CREATEDB`.
    #[serde(default)]
    createdb: bool,
    /// Its password; generated when absent (read it from the Secret the answer names).
    #[serde(default)]
    password: Option<String>,
}

impl CreateUser {
    fn new_user(&self) -> NewUser<'_> {
        NewUser {
            name: &self.name,
            databases: &self.databases,
            superuser: self.superuser,
            createdb: self.createdb,
        }
    }
}

/// (pure) The Secret name for a user of a cluster (DNS-1123: `_` becomes `-`, lower case).
fn secret_name(cluster: &str, user: &str) -> String {
    format!("{cluster}-user-{}", user.replace('_', "-").to_lowercase())
}

fn password_secret(namespace: &str, name: &str, key: &str, password: &str) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                API_MANAGED_LABEL.to_owned(),
                "true".to_owned(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            key.to_owned(),
            ByteString(password.as_bytes().to_vec()),
        )])),
        ..Default::default()
    }
}

/// Replaces the cluster's `spec.users` (read, change, write with the read `resourceVersion`:
/// a concurrent edit is a `409`, never a lost update).
async fn replace_users(
    client: &Client,
    engine: &dyn ClusterApi,
    mut cluster: DynamicObject,
    users: Vec<Value>,
) -> Result<DynamicObject, ApiError> {
    if !cluster.data.get("spec").is_some_and(Value::is_object) {
        cluster.data["spec"] = json!({});
    }
    cluster.data["spec"]["users"] = Value::Array(users);
    clusters::replace(client, engine, cluster).await
}

/// Creates a database user: its password Secret, then the entry in `spec.users`; the operator
/// creates the role (and its databases).
#[utoipa::path(post, path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/users",
    tag = "users",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`postgres` or `cratedb` (`etcd`: 400)"),
        ("name" = String, Path, description = "The cluster")),
    request_body = CreateUser,
    responses((status = 201, body = UserInfo), (status = 400, body = super::server::ErrorBody),
        (status = 401, body = super::server::ErrorBody), (status = 403, body = super::server::ErrorBody),
        (status = 404, body = super::server::ErrorBody), (status = 409, body = super::server::ErrorBody)))]
pub async fn create_user(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name)): Path<(String, String, String)>,
    ApiJson(request): ApiJson<CreateUser>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (engine, users) = users_of(&engine)?;
    users.check_new(&request.new_user())?;
    let cluster = clusters::get(&state.client, engine, &namespace, &name).await?;
    let mut list = entries(&cluster);
    if list
        .iter()
        .any(|u| entry_name(u) == Some(request.name.as_str()))
    {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("{name} already has a user {}", request.name),
        ));
    }
    let secret = secret_name(&name, &request.name);
    let entry = users.entry(&request.new_user(), &secret, "password")?;
    let password = request.password.clone().unwrap_or_else(generate_password);
    let secrets: Api<Secret> = Api::namespaced(state.client.clone(), &namespace);
    secrets
        .create(
            &PostParams::default(),
            &password_secret(&namespace, &secret, "password", &password),
        )
        .await
        .map_err(|e| ApiError::kube(&format!("create Secret {secret}"), &e))?;
    list.push(entry.clone());
    match replace_users(&state.client, engine, cluster, list).await {
        Ok(updated) => {
            let info = users.info(&entry, updated.data.get("status"))?;
            Ok((StatusCode::CREATED, Json(info)))
        }
        Err(e) => {
            // Nothing references the new Secret: take it back.
            let _ = secrets.delete(&secret, &DeleteParams::default()).await;
            Err(e)
        }
    }
}

/// `PUT …/users/{user}/password`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotatePassword {
    /// The new password; generated when absent.
    #[serde(default)]
    password: Option<String>,
}

/// The entry of user `user` in the cluster, or 404.
fn entry_of(cluster: &DynamicObject, name: &str, user: &str) -> Result<Value, ApiError> {
    entries(cluster)
        .into_iter()
        .find(|u| entry_name(u) == Some(user))
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("{name} has no user {user}")))
}

/// The Secret (name, key) of a user entry, or a `500` when the entry names none.
fn secret_of(
    users: &dyn UsersApi,
    entry: &Value,
    user: &str,
) -> Result<(String, String), ApiError> {
    users.secret_of(entry).ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("user {user} names no password Secret"),
        )
    })
}

/// Rotates a user's password: writes it into the user's Secret; the operator follows the
/// Secret and changes the role's password.
#[utoipa::path(put,
    path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/users/{user}/password",
    tag = "users",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`postgres` or `cratedb` (`etcd`: 400)"),
        ("name" = String, Path, description = "The cluster"),
        ("user" = String, Path, description = "The user")),
    request_body = RotatePassword,
    responses((status = 200, body = UserInfo), (status = 400, body = super::server::ErrorBody),
        (status = 401, body = super::server::ErrorBody), (status = 403, body = super::server::ErrorBody),
        (status = 404, body = super::server::ErrorBody)))]
pub async fn rotate_password(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name, user)): Path<(String, String, String, String)>,
    ApiJson(request): ApiJson<RotatePassword>,
) -> Result<Json<Value>, ApiError> {
    let (engine, users) = users_of(&engine)?;
    let cluster = clusters::get(&state.client, engine, &namespace, &name).await?;
    let entry = entry_of(&cluster, &name, &user)?;
    let (secret, key) = secret_of(users, &entry, &user)?;
    let password = request.password.unwrap_or_else(generate_password);
    let encoded = json!(ByteString(password.into_bytes()));
    let patch = Patch::Merge(json!({"data": {key: encoded}}));
    Api::<Secret>::namespaced(state.client.clone(), &namespace)
        .patch(&secret, &PatchParams::default(), &patch)
        .await
        .map_err(|e| ApiError::kube(&format!("update Secret {secret}"), &e))?;
    Ok(Json(users.info(&entry, cluster.data.get("status"))?))
}

/// Deletes a database user: its entry in `spec.users`, and its Secret when the API made it.
#[utoipa::path(delete,
    path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/users/{user}",
    tag = "users",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`postgres` or `cratedb` (`etcd`: 400)"),
        ("name" = String, Path, description = "The cluster"),
        ("user" = String, Path, description = "The user")),
    responses((status = 200, body = Message), (status = 400, body = super::server::ErrorBody),
        (status = 401, body = super::server::ErrorBody), (status = 403, body = super::server::ErrorBody),
        (status = 404, body = super::server::ErrorBody), (status = 409, body = super::server::ErrorBody)))]
pub async fn delete_user(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name, user)): Path<(String, String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let (engine, users) = users_of(&engine)?;
    let cluster = clusters::get(&state.client, engine, &namespace, &name).await?;
    let entry = entry_of(&cluster, &name, &user)?;
    let (secret, _) = secret_of(users, &entry, &user)?;
    let rest: Vec<Value> = entries(&cluster)
        .into_iter()
        .filter(|u| entry_name(u) != Some(user.as_str()))
        .collect();
    replace_users(&state.client, engine, cluster, rest).await?;
    let note = users.delete_note();
    let secrets: Api<Secret> = Api::namespaced(state.client.clone(), &namespace);
    let secret = &secret;
    let ours = secrets
        .get_opt(secret)
        .await
        .map_err(|e| ApiError::kube(&format!("get Secret {secret}"), &e))?
        .is_some_and(|s| {
            s.labels()
                .get(API_MANAGED_LABEL)
                .is_some_and(|v| v == "true")
        });
    if ours {
        secrets
            .delete(secret, &DeleteParams::default())
            .await
            .map_err(|e| ApiError::kube(&format!("delete Secret {secret}"), &e))?;
    }
    let kept = if ours {
        ""
    } else {
        " (its Secret was not made by the API and is kept)"
    };
    Ok(Json(
        json!({"message": format!("user {user} removed from {name}{kept}{note}")}),
    ))
}

/// A plain answer.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Message {
    message: String,
}

/// A backup.
#[derive(Default, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupInfo {
    /// Its resource's name.
    pub name: String,
    /// The cluster.
    pub cluster: String,
    /// `full`, `diff` or `incr` (PostgreSQL); `continuous` (FoundationDB); `full` (etcd).
    #[serde(rename = "type")]
    pub type_: String,
    /// `pgbackrest` or `pgbasebackup` (PostgreSQL); `backup_agent` (FoundationDB); `snapshot`
    /// (etcd).
    pub method: String,
    /// `Pending`, `Running`, `Completed` or `Failed` (FoundationDB: `Completed` once the
    /// continuous backup is restorable; it keeps running).
    pub phase: Option<String>,
    /// pgBackRest's label of the backup set; FoundationDB's latest restorable version; the
    /// keyspace revision an etcd snapshot holds.
    pub label: Option<String>,
    /// What the engine says of it.
    pub message: Option<String>,
    /// Why it failed (PostgreSQL, etcd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When it started (RFC 3339; PostgreSQL, etcd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// When it finished (RFC 3339; PostgreSQL, etcd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    /// The snapshot file's size in bytes (etcd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,
}

/// `GET …/backups`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct BackupList {
    backups: Vec<BackupInfo>,
}

/// The cluster's backups (its `PostgresBackup`s, `FoundationDBBackup`s or `EtcdBackup`s),
/// oldest first.
#[utoipa::path(get, path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/backups",
    tag = "backups",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`postgres`, `foundationdb` or `etcd` (`cratedb`: 400)"),
        ("name" = String, Path, description = "The cluster")),
    responses((status = 200, body = BackupList), (status = 400, body = super::server::ErrorBody),
        (status = 401, body = super::server::ErrorBody), (status = 403, body = super::server::ErrorBody)))]
pub async fn list_backups(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let (_, backups) = backups_of(&engine, "backups")?;
    let list = backups.list(&state.client, &namespace, &name).await?;
    Ok(Json(json!({"backups": list})))
}

/// The engine and its backups, unless it refuses them (a `400` with its reason).
fn backups_of(
    engine: &str,
    what: &str,
) -> Result<(&'static dyn ClusterApi, &'static dyn BackupsApi), ApiError> {
    let e = engine_with(engine, Capability::Backups, what)?;
    let backups = e.backups().ok_or_else(|| {
        ApiError::bad_request(format!(
            "{what} are not supported for {} clusters",
            e.name()
        ))
    })?;
    Ok((e, backups))
}

/// `POST …/backups`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBackup {
    /// `full` (default), `diff` or `incr` (PostgreSQL; FoundationDB and etcd: `full` only).
    #[serde(rename = "type", default)]
    type_: Option<String>,
    /// `pgbackrest` (default) or `pgbasebackup` (PostgreSQL); `backup_agent` (FoundationDB);
    /// `snapshot` (etcd).
    #[serde(default)]
    method: Option<String>,
}

/// (pure) The digits of an RFC 3339 time that name objects made then: `yyyymmddhhmmss`.
pub fn stamp_digits(now: &str) -> String {
    now.chars().filter(char::is_ascii_digit).take(14).collect()
}

/// (pure) A name for an object made now for a cluster: `<cluster>-<what>-<yyyymmddhhmmss>`.
pub fn stamped(cluster: &str, what: &str, now: &str) -> String {
    format!("{cluster}-{what}-{}", stamp_digits(now))
}

/// (pure) `<cluster><suffix>` in at most `max` characters: the cluster's name is cut (and a
/// `-` it then ends with dropped) to make room for the suffix, which is always whole. For
/// names that must stay DNS labels once the engine adds its own suffixes.
pub fn name_within(cluster: &str, suffix: &str, max: usize) -> String {
    let room = max.saturating_sub(suffix.len());
    let cut = cluster.get(..room.min(cluster.len())).unwrap_or(cluster);
    format!("{}{suffix}", cut.trim_end_matches('-'))
}

/// Starts a backup (a `PostgresBackup`, the cluster's `FoundationDBBackup`, or an `EtcdBackup`:
/// one snapshot); `GET` it for its phase.
#[utoipa::path(post, path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/backups",
    tag = "backups",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`postgres`, `foundationdb` or `etcd` (`cratedb`: 400)"),
        ("name" = String, Path, description = "The cluster")),
    request_body = CreateBackup,
    responses((status = 202, body = BackupInfo), (status = 400, body = super::server::ErrorBody),
        (status = 401, body = super::server::ErrorBody), (status = 403, body = super::server::ErrorBody),
        (status = 404, body = super::server::ErrorBody), (status = 409, body = super::server::ErrorBody)))]
pub async fn create_backup(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name)): Path<(String, String, String)>,
    ApiJson(request): ApiJson<CreateBackup>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (engine, backups) = backups_of(&engine, "backups")?;
    clusters::get(&state.client, engine, &namespace, &name).await?;
    let now = format_time(state.clock.now());
    let made = backups
        .create(
            &state.client,
            &namespace,
            &name,
            &NewBackup {
                type_: request.type_.as_deref(),
                method: request.method.as_deref(),
            },
            &now,
        )
        .await?;
    Ok((StatusCode::ACCEPTED, Json(made)))
}

/// One backup.
#[utoipa::path(get, path = "/api/v1/namespaces/{namespace}/backups/{backup}", tag = "backups",
    params(("namespace" = String, Path, description = "The namespace"),
        ("backup" = String, Path, description = "The PostgresBackup, FoundationDBBackup or EtcdBackup")),
    responses((status = 200, body = BackupInfo), (status = 401, body = super::server::ErrorBody),
        (status = 403, body = super::server::ErrorBody), (status = 404, body = super::server::ErrorBody)))]
pub async fn show_backup(
    State(state): State<Arc<ApiState>>,
    Path((namespace, backup)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    for engine in clusters::engines() {
        if let Some(backups) = engine.backups()
            && let Some(found) = backups.show(&state.client, &namespace, &backup).await?
        {
            return Ok(Json(found));
        }
    }
    Err(ApiError::new(
        StatusCode::NOT_FOUND,
        format!("backup {namespace}/{backup} does not exist"),
    ))
}

/// `POST …/restore`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestoreRequest {
    /// Recover to this time (RFC 3339); the end of the archive when absent (PostgreSQL only).
    #[serde(default)]
    target_time: Option<String>,
    /// Restore this backup set (PostgreSQL: its pgBackRest label; FoundationDB: the
    /// `FoundationDBBackup`, else the cluster's only one; etcd: the `EtcdBackup`, else the
    /// cluster's newest `Completed` one).
    #[serde(default)]
    backup: Option<String>,
    /// Restore to this version (FoundationDB; its backup's latest restorable one when absent).
    #[serde(default)]
    version: Option<u64>,
}

/// A restore.
#[derive(Serialize, utoipa::ToSchema)]
pub struct RestoreInfo {
    /// Its resource's name.
    pub name: String,
    /// The cluster restored (etcd: the new cluster the snapshot seeds).
    pub cluster: String,
    /// Where it is: `Pending`, `Running`, `Completed` or `Failed` (a refusal too).
    pub phase: Option<String>,
    /// Its step, when the engine records one.
    pub step: Option<String>,
    /// The last thing that happened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Why it was refused or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Restores the cluster in place (a `PostgresRestore` or a `FoundationDBRestore`; the cluster's
/// status shows progress) — or, for etcd, into a new cluster seeded from a snapshot (an
/// `EtcdCluster` `<cluster>-restore-<stamp>` with `spec.dataSource`; the cluster asked for is
/// not changed).
#[utoipa::path(post, path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/restore",
    tag = "backups",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`postgres`, `foundationdb` or `etcd` (`cratedb`: 400)"),
        ("name" = String, Path, description = "The cluster")),
    request_body = RestoreRequest,
    responses((status = 202, body = RestoreInfo), (status = 400, body = super::server::ErrorBody),
        (status = 401, body = super::server::ErrorBody), (status = 403, body = super::server::ErrorBody),
        (status = 404, body = super::server::ErrorBody), (status = 422, body = super::server::ErrorBody)))]
pub async fn restore(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name)): Path<(String, String, String)>,
    ApiJson(request): ApiJson<RestoreRequest>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (engine, backups) = backups_of(&engine, "restores")?;
    clusters::get(&state.client, engine, &namespace, &name).await?;
    let now = format_time(state.clock.now());
    let made = backups
        .restore(
            &state.client,
            &namespace,
            &name,
            &NewRestore {
                target_time: request.target_time.as_deref(),
                version: request.version,
                backup: request.backup.as_deref(),
            },
            &now,
        )
        .await?;
    Ok((StatusCode::ACCEPTED, Json(made)))
}

/// One restore of the cluster: where it is, and why it was refused or failed (what `steward
/// restore --wait` follows).
#[utoipa::path(get, path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/restores/{restore}",
    tag = "backups",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`postgres`, `foundationdb` or `etcd` (`cratedb`: 400)"),
        ("name" = String, Path, description = "The cluster"),
        ("restore" = String, Path, description = "The restore (the `name` a `POST …/restore` answered)")),
    responses((status = 200, body = RestoreInfo), (status = 400, body = super::server::ErrorBody),
        (status = 401, body = super::server::ErrorBody), (status = 403, body = super::server::ErrorBody),
        (status = 404, body = super::server::ErrorBody)))]
pub async fn show_restore(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name, restore)): Path<(String, String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let (_, backups) = backups_of(&engine, "restores")?;
    backups
        .show_restore(&state.client, &namespace, &name, &restore)
        .await?
        .map(Json)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("cluster {namespace}/{name} has no restore {restore}"),
            )
        })
}

/// `POST …/upgrade`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpgradeRequest {
    /// The major version to move to (PostgreSQL: e.g. `16`).
    to_version: String,
    /// The image to run afterwards (default: the engine's image of that version).
    #[serde(default)]
    image: Option<String>,
    /// Upgrade even though no backup was taken since the cluster's last operation.
    #[serde(default)]
    without_backup: bool,
}

/// A major-version upgrade.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeInfo {
    /// Its resource's name.
    pub name: String,
    /// The cluster upgraded.
    pub cluster: String,
    /// The version it moves to.
    pub to_version: String,
    /// Where it is: `Pending`, `Running`, `Completed` or `Failed` (a refusal too).
    pub phase: Option<String>,
    /// Its step.
    pub step: Option<String>,
    /// The last thing that happened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Why it was refused or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Upgrades the cluster to a new major version (a `PostgresUpgrade`: `pg_upgrade` into new
/// claims; the cluster's status shows progress, the old claims are kept).
#[utoipa::path(post, path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/upgrade",
    tag = "actions",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`postgres` (others: 400)"),
        ("name" = String, Path, description = "The cluster")),
    request_body = UpgradeRequest,
    responses((status = 202, body = UpgradeInfo), (status = 400, body = super::server::ErrorBody),
        (status = 401, body = super::server::ErrorBody), (status = 403, body = super::server::ErrorBody),
        (status = 404, body = super::server::ErrorBody), (status = 422, body = super::server::ErrorBody)))]
pub async fn upgrade(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name)): Path<(String, String, String)>,
    ApiJson(request): ApiJson<UpgradeRequest>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let e = clusters::engine(&engine)?;
    let upgrades = e.upgrades().ok_or_else(|| {
        ApiError::bad_request(format!(
            "major-version upgrades as objects are not supported for {} clusters: change spec.version (PATCH)",
            e.name()
        ))
    })?;
    clusters::get(&state.client, e, &namespace, &name).await?;
    let now = format_time(state.clock.now());
    let made = upgrades
        .upgrade(
            &state.client,
            &namespace,
            &name,
            &NewUpgrade {
                to_version: &request.to_version,
                image: request.image.as_deref(),
                without_backup: request.without_backup,
            },
            &now,
        )
        .await?;
    Ok((StatusCode::ACCEPTED, Json(made)))
}

/// One major-version upgrade of the cluster: where it is, and why it was refused or failed
/// (what `steward upgrade cluster --wait` follows).
#[utoipa::path(get, path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/upgrades/{upgrade}",
    tag = "actions",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`postgres` (others: 400)"),
        ("name" = String, Path, description = "The cluster"),
        ("upgrade" = String, Path, description = "The upgrade (the `name` a `POST …/upgrade` answered)")),
    responses((status = 200, body = UpgradeInfo), (status = 400, body = super::server::ErrorBody),
        (status = 401, body = super::server::ErrorBody), (status = 403, body = super::server::ErrorBody),
        (status = 404, body = super::server::ErrorBody)))]
pub async fn show_upgrade(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name, upgrade)): Path<(String, String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let e = clusters::engine(&engine)?;
    let upgrades = e.upgrades().ok_or_else(|| {
        ApiError::bad_request(format!(
            "{} clusters have no upgrade objects: their version is spec.version",
            e.name()
        ))
    })?;
    upgrades
        .show(&state.client, &namespace, &name, &upgrade)
        .await?
        .map(Json)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("cluster {namespace}/{name} has no upgrade {upgrade}"),
            )
        })
}

/// `POST` of a schedule or a policy: its name and its spec (as in its YAML).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NamedSpec {
    name: String,
    #[schema(value_type = Object)]
    spec: Value,
}

/// `{name, spec, status}` of a schedule or a policy.
fn named<K: ResourceExt + Serialize>(o: &K) -> Value {
    let v = serde_json::to_value(o).unwrap_or_default();
    json!({"name": o.name_any(), "spec": v["spec"], "status": v["status"]})
}

/// Bounds of the kinds [`list_named`], [`create_named`] and [`delete_named`] serve.
trait Named:
    kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + Serialize
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl Named for Schedule {}
impl Named for PostgresPolicy {}

/// The namespace's `K`s as `{key: [{name, spec, status}]}`.
async fn list_named<K: Named>(
    client: &Client,
    namespace: &str,
    key: &str,
) -> Result<Json<Value>, ApiError> {
    let kind = K::kind(&());
    let all = Api::<K>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(|e| ApiError::kube(&format!("list {kind}"), &e))?;
    let items: Vec<Value> = all.items.iter().map(named).collect();
    Ok(Json(json!({key: items})))
}

/// Creates a `K` from a request's name and spec (the spec's shape checked by its Rust type
/// first, then by the API server's schema and CEL rules).
async fn create_named<K: Named>(
    client: &Client,
    namespace: &str,
    request: NamedSpec,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let kind = K::kind(&());
    let object: K = serde_json::from_value(json!({
        "apiVersion": K::api_version(&()),
        "kind": kind,
        "metadata": {"name": request.name, "namespace": namespace},
        "spec": request.spec,
    }))
    .map_err(|e| ApiError::bad_request(format!("spec: {e}")))?;
    let made = Api::<K>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &object)
        .await
        .map_err(|e| ApiError::kube(&format!("create {kind}"), &e))?;
    Ok((StatusCode::CREATED, Json(named(&made))))
}

/// The namespace's schedules.
#[utoipa::path(get, path = "/api/v1/namespaces/{namespace}/schedules", tag = "schedules",
    params(("namespace" = String, Path, description = "The namespace")),
    responses((status = 200, description = "`{\"schedules\": [{name, spec, status}]}`"),
        (status = 401, body = super::server::ErrorBody), (status = 403, body = super::server::ErrorBody)))]
pub async fn list_schedules(
    State(state): State<Arc<ApiState>>,
    Path(namespace): Path<String>,
) -> Result<Json<Value>, ApiError> {
    list_named::<Schedule>(&state.client, &namespace, "schedules").await
}

/// Creates a schedule.
#[utoipa::path(post, path = "/api/v1/namespaces/{namespace}/schedules", tag = "schedules",
    params(("namespace" = String, Path, description = "The namespace")),
    request_body = NamedSpec,
    responses((status = 201, description = "`{name, spec, status}`"),
        (status = 400, body = super::server::ErrorBody), (status = 401, body = super::server::ErrorBody),
        (status = 403, body = super::server::ErrorBody), (status = 409, body = super::server::ErrorBody),
        (status = 422, body = super::server::ErrorBody)))]
pub async fn create_schedule(
    State(state): State<Arc<ApiState>>,
    Path(namespace): Path<String>,
    ApiJson(request): ApiJson<NamedSpec>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    if let Some(cluster) = request.spec.get("cluster").and_then(Value::as_str) {
        refuse_schedule_of(&state.client, &namespace, cluster).await?;
    }
    create_named::<Schedule>(&state.client, &namespace, request).await
}

/// A `400` when a schedule's cluster is only a cluster of engines without backups (and no
/// engine that has them has a cluster of that name): every schedule type (pgBackRest, policy,
/// verify) needs them. The refusing engine's reason is the answer.
async fn refuse_schedule_of(
    client: &Client,
    namespace: &str,
    cluster: &str,
) -> Result<(), ApiError> {
    let valid = !cluster.is_empty()
        && cluster.len() <= 253
        && cluster
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    if !valid {
        // Not a name: the API server's validation says what is wrong.
        return Ok(());
    }
    let mut refusal = None;
    for engine in clusters::engines() {
        let exists = clusters::get(client, engine, namespace, cluster).await;
        let exists = match exists {
            Ok(_) => true,
            Err(e) if e.is_not_found() => false,
            Err(e) => return Err(e),
        };
        if !exists {
            continue;
        }
        match engine.refuses(Capability::Backups, "schedules") {
            None => return Ok(()),
            Some(why) => refusal = refusal.or(Some(why)),
        }
    }
    match refusal {
        Some(why) => Err(ApiError::bad_request(why)),
        None => Ok(()),
    }
}

async fn delete_named<K: Named>(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Json<Value>, ApiError> {
    let kind = K::kind(&());
    Api::<K>::namespaced(client.clone(), namespace)
        .delete(name, &DeleteParams::default())
        .await
        .map_err(|e| match &e {
            kube::Error::Api(s) if s.code == 404 => ApiError::new(
                StatusCode::NOT_FOUND,
                format!("{kind} {namespace}/{name} does not exist"),
            ),
            _ => ApiError::kube(&format!("delete {kind}"), &e),
        })?;
    Ok(Json(
        json!({"message": format!("{kind} {namespace}/{name} deleted")}),
    ))
}

/// Deletes a schedule (running work finishes).
#[utoipa::path(delete, path = "/api/v1/namespaces/{namespace}/schedules/{schedule}",
    tag = "schedules",
    params(("namespace" = String, Path, description = "The namespace"),
        ("schedule" = String, Path, description = "The schedule")),
    responses((status = 200, body = Message), (status = 401, body = super::server::ErrorBody),
        (status = 403, body = super::server::ErrorBody), (status = 404, body = super::server::ErrorBody)))]
pub async fn delete_schedule(
    State(state): State<Arc<ApiState>>,
    Path((namespace, schedule)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    delete_named::<Schedule>(&state.client, &namespace, &schedule).await
}

/// The namespace's SQL policies.
#[utoipa::path(get, path = "/api/v1/namespaces/{namespace}/policies", tag = "policies",
    params(("namespace" = String, Path, description = "The namespace")),
    responses((status = 200, description = "`{\"policies\": [{name, spec, status}]}`"),
        (status = 401, body = super::server::ErrorBody), (status = 403, body = super::server::ErrorBody)))]
pub async fn list_policies(
    State(state): State<Arc<ApiState>>,
    Path(namespace): Path<String>,
) -> Result<Json<Value>, ApiError> {
    list_named::<PostgresPolicy>(&state.client, &namespace, "policies").await
}

/// Creates a SQL policy (`PostgresPolicy`); clusters run it once listed in `spec.policies`.
#[utoipa::path(post, path = "/api/v1/namespaces/{namespace}/policies", tag = "policies",
    params(("namespace" = String, Path, description = "The namespace")),
    request_body = NamedSpec,
    responses((status = 201, description = "`{name, spec, status}`"),
        (status = 400, body = super::server::ErrorBody), (status = 401, body = super::server::ErrorBody),
        (status = 403, body = super::server::ErrorBody), (status = 409, body = super::server::ErrorBody),
        (status = 422, body = super::server::ErrorBody)))]
pub async fn create_policy(
    State(state): State<Arc<ApiState>>,
    Path(namespace): Path<String>,
    ApiJson(request): ApiJson<NamedSpec>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    create_named::<PostgresPolicy>(&state.client, &namespace, request).await
}

/// Deletes a SQL policy.
#[utoipa::path(delete, path = "/api/v1/namespaces/{namespace}/policies/{policy}",
    tag = "policies",
    params(("namespace" = String, Path, description = "The namespace"),
        ("policy" = String, Path, description = "The policy")),
    responses((status = 200, body = Message), (status = 401, body = super::server::ErrorBody),
        (status = 403, body = super::server::ErrorBody), (status = 404, body = super::server::ErrorBody)))]
pub async fn delete_policy(
    State(state): State<Arc<ApiState>>,
    Path((namespace, policy)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    delete_named::<PostgresPolicy>(&state.client, &namespace, &policy).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_secrets_and_stamped_objects_are_dns_names() {
        assert_eq!(secret_name("demo", "app_user"), "demo-user-app-user");
        assert_eq!(
            stamped("demo", "full", "2026-11-26T10:11:12.345Z"),
            "demo-full-20261126101112"
        );
    }

    #[test]
    fn a_name_within_a_limit_cuts_the_cluster_never_the_suffix() {
        assert_eq!(
            name_within("demo", "-20261126101112", 54),
            "demo-20261126101112"
        );
        let long = "a".repeat(50);
        let cut = name_within(&long, "-restore-20261126101112", 60);
        assert_eq!(cut.len(), 60);
        assert!(cut.ends_with("-restore-20261126101112"), "{cut}");
        // A cut that ends on a `-` drops it: the name stays a DNS label.
        assert_eq!(name_within("ab-cd", "-x", 5), "ab-x");
        assert_eq!(stamp_digits("2026-11-26T10:11:12Z"), "20261126101112");
    }
}
