//! The cluster routes of the REST API: list, show, create, update, delete, and the day-2
//! actions — scale, restart, fail-over. Every write is one Kubernetes API call on the
//! engine's custom resource (the operator's controllers do the work), so the API needs no
//! leader and its answers are what the Kubernetes API said, validation errors included.
//! CrateDB's node sets (create, scale, update) are handled in `cratedb.rs`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use steward_api::cratedb::CrateCluster;
use steward_api::etcd::{EtcdCluster, EtcdClusterSpec};
use steward_api::postgres::{PostgresCluster, PostgresClusterSpec};

use super::cratedb;
use super::server::{ApiError, ApiJson, ApiState, Caller};
use crate::clock::format_time;

/// The annotation a restart puts on every Pod (through `spec.podTemplate.annotations`): a new
/// value changes the Pods' spec hash, so the engine's rolling restart replaces them one at a
/// time, in its safe order — as `kubectl rollout restart` does for a Deployment.
pub const RESTARTED_AT: &str = "steward.dev/restarted-at";

/// The engines the API knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// `EtcdCluster`.
    Etcd,
    /// `PostgresCluster`.
    Postgres,
    /// `CrateCluster`.
    Cratedb,
}

/// The engines' names, for messages.
pub const ENGINES: &str = "etcd, postgres or cratedb";

impl Engine {
    /// The engine named in a path or body.
    pub fn parse(name: &str) -> Result<Self, ApiError> {
        match name {
            "etcd" => Ok(Self::Etcd),
            "postgres" => Ok(Self::Postgres),
            "cratedb" => Ok(Self::Cratedb),
            other => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("unknown engine {other:?}: {ENGINES}"),
            )),
        }
    }

    /// Its name in paths.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Etcd => "etcd",
            Self::Postgres => "postgres",
            Self::Cratedb => "cratedb",
        }
    }

    /// The spec field that holds the size (a CrateDB cluster has one per node set).
    fn size_field(self) -> Option<&'static str> {
        match self {
            Self::Etcd => Some("replicas"),
            Self::Postgres => Some("instances"),
            Self::Cratedb => None,
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Self::Etcd => "EtcdCluster",
            Self::Postgres => "PostgresCluster",
            Self::Cratedb => "CrateCluster",
        }
    }
}

/// One line of a cluster list.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSummary {
    engine: &'static str,
    namespace: String,
    name: String,
    /// The `Available` condition's status.
    available: Option<String>,
    /// The kind of the operation in progress.
    operation: Option<String>,
}

fn summary<K: ResourceExt>(
    engine: Engine,
    o: &K,
    common: Option<&steward_api::common::CommonStatus>,
) -> ClusterSummary {
    let available = common.and_then(|c| {
        c.conditions
            .iter()
            .find(|c| c.type_ == "Available")
            .map(|c| c.status.clone())
    });
    ClusterSummary {
        engine: engine.as_str(),
        namespace: o.namespace().unwrap_or_default(),
        name: o.name_any(),
        available,
        operation: common
            .and_then(|c| c.operation.as_ref())
            .map(|op| op.kind.as_str().to_owned()),
    }
}

fn apis<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The clusters of every engine, in a namespace or in all.
pub async fn clusters_in(
    client: &Client,
    namespace: Option<&str>,
) -> Result<Vec<ClusterSummary>, ApiError> {
    let lp = ListParams::default();
    let etcd: Api<EtcdCluster> = apis(client, namespace);
    let postgres: Api<PostgresCluster> = apis(client, namespace);
    let crates: Api<CrateCluster> = apis(client, namespace);
    let mut out: Vec<ClusterSummary> = etcd
        .list(&lp)
        .await
        .map_err(|e| ApiError::kube("list EtcdClusters", &e))?
        .items
        .iter()
        .map(|c| summary(Engine::Etcd, c, c.status.as_ref().map(|s| &s.common)))
        .collect();
    out.extend(
        postgres
            .list(&lp)
            .await
            .map_err(|e| ApiError::kube("list PostgresClusters", &e))?
            .items
            .iter()
            .map(|c| summary(Engine::Postgres, c, c.status.as_ref().map(|s| &s.common))),
    );
    out.extend(
        crates
            .list(&lp)
            .await
            .map_err(|e| ApiError::kube("list CrateClusters", &e))?
            .items
            .iter()
            .map(|c| summary(Engine::Cratedb, c, c.status.as_ref().map(|s| &s.common))),
    );
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Ok(out)
}

/// A list of clusters.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ClusterList {
    /// The clusters, by namespace and name.
    clusters: Vec<ClusterSummary>,
}

/// Clusters of every engine in the caller's namespaces.
#[utoipa::path(get, path = "/api/v1/clusters", tag = "clusters",
    responses((status = 200, body = ClusterList), (status = 401, body = super::server::ErrorBody),
        (status = 403, body = super::server::ErrorBody)))]
pub async fn list_all(
    State(state): State<Arc<ApiState>>,
    axum::Extension(Caller(user)): axum::Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    let mut all = clusters_in(&state.client, None).await?;
    all.retain(|c| user.in_namespace(Some(&c.namespace)));
    Ok(Json(json!({"clusters": all})))
}

/// Clusters of every engine in a namespace.
#[utoipa::path(get, path = "/api/v1/namespaces/{namespace}/clusters", tag = "clusters",
    params(("namespace" = String, Path, description = "The namespace")),
    responses((status = 200, body = ClusterList), (status = 401, body = super::server::ErrorBody),
        (status = 403, body = super::server::ErrorBody)))]
pub async fn list_namespace(
    State(state): State<Arc<ApiState>>,
    Path(namespace): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let all = clusters_in(&state.client, Some(&namespace)).await?;
    Ok(Json(json!({"clusters": all})))
}

/// One cluster.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ClusterDetail {
    /// `etcd`, `postgres` or `cratedb`.
    engine: String,
    /// Its namespace.
    namespace: String,
    /// Its name.
    name: String,
    /// `metadata.generation`: an action is done once `status.observedGeneration` reaches it.
    generation: Option<i64>,
    /// Its spec (the engine's custom resource's).
    spec: Value,
    /// Its status: conditions, the operation in progress and its progress.
    status: Option<Value>,
}

fn detail<K>(engine: Engine, o: &K, spec: &impl Serialize, status: Option<&impl Serialize>) -> Value
where
    K: ResourceExt,
{
    json!({
        "engine": engine.as_str(),
        "namespace": o.namespace().unwrap_or_default(),
        "name": o.name_any(),
        "generation": o.meta().generation,
        "spec": spec,
        "status": status,
    })
}

fn not_found(engine: Engine, namespace: &str, name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "{} cluster {namespace}/{name} does not exist",
            engine.as_str()
        ),
    )
}

/// The cluster's detail, or 404.
pub async fn get_detail(
    client: &Client,
    engine: Engine,
    namespace: &str,
    name: &str,
) -> Result<Value, ApiError> {
    Ok(match engine {
        Engine::Etcd => {
            let c = Api::<EtcdCluster>::namespaced(client.clone(), namespace)
                .get_opt(name)
                .await
                .map_err(|e| ApiError::kube("get EtcdCluster", &e))?
                .ok_or_else(|| not_found(engine, namespace, name))?;
            detail(engine, &c, &c.spec, c.status.as_ref())
        }
        Engine::Postgres => {
            let c = postgres(client, namespace, name).await?;
            detail(engine, &c, &c.spec, c.status.as_ref())
        }
        Engine::Cratedb => {
            let c = cratedb::get(client, namespace, name).await?;
            detail(engine, &c, &c.spec, c.status.as_ref())
        }
    })
}

/// The `PostgresCluster`, or 404.
pub async fn postgres(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<PostgresCluster, ApiError> {
    Api::<PostgresCluster>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| ApiError::kube("get PostgresCluster", &e))?
        .ok_or_else(|| not_found(Engine::Postgres, namespace, name))
}

/// One cluster: its spec and status (conditions, operation and progress).
#[utoipa::path(get, path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}",
    tag = "clusters",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`etcd`, `postgres` or `cratedb`"),
        ("name" = String, Path, description = "The cluster")),
    responses((status = 200, body = ClusterDetail), (status = 401, body = super::server::ErrorBody),
        (status = 403, body = super::server::ErrorBody), (status = 404, body = super::server::ErrorBody)))]
pub async fn show(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let engine = Engine::parse(&engine)?;
    Ok(Json(
        get_detail(&state.client, engine, &namespace, &name).await?,
    ))
}

/// `POST /api/v1/namespaces/{namespace}/clusters`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateCluster {
    /// `etcd`, `postgres` or `cratedb`.
    engine: String,
    /// The cluster's name (for CrateDB also `spec.cluster.name`).
    name: String,
    /// PostgreSQL instances, etcd members, or the nodes of a CrateDB cluster's data set (it
    /// also gets 3 masters).
    instances: i32,
    /// The version; default PostgreSQL `15`, etcd `3.4.23`, CrateDB `4.8.4`.
    #[serde(default)]
    version: Option<String>,
    /// Each member's volume size, e.g. `1Gi` (CrateDB: each data node's disk).
    #[serde(default)]
    storage: Option<String>,
    /// CrateDB only: the data set's name (default `data`).
    #[serde(default)]
    node_set: Option<String>,
    /// More spec fields of the engine's resource (as in its YAML), merged over the above.
    #[serde(default)]
    #[schema(value_type = Object)]
    spec: Option<Value>,
}

/// RFC 7386 JSON merge patch of `patch` into `target`.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, message)
}

/// (pure) The spec a create request asks for, as the engine's JSON.
fn spec_of(request: &CreateCluster, engine: Engine) -> Result<Value, ApiError> {
    let mut spec = match engine {
        Engine::Etcd => serde_json::to_value(EtcdClusterSpec::new(
            request.instances,
            request.version.clone().unwrap_or_else(|| "3.4.23".into()),
        )),
        Engine::Postgres => serde_json::to_value(PostgresClusterSpec::new(
            request.instances,
            request.version.clone().unwrap_or_else(|| "15".into()),
        )),
        Engine::Cratedb => Ok(cratedb::create_spec(&cratedb::CreateRequest {
            name: &request.name,
            replicas: request.instances,
            version: request.version.as_deref(),
            storage: request.storage.as_deref(),
            node_set: request.node_set.as_deref(),
            extra: request.spec.as_ref(),
        })?),
    }
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    if engine != Engine::Cratedb {
        if request.node_set.is_some() {
            return Err(bad_request(format!(
                "nodeSet is for cratedb clusters: a {} cluster has one size (instances)",
                engine.as_str()
            )));
        }
        if let Some(size) = &request.storage {
            merge(&mut spec, &json!({"storage": {"size": size}}));
        }
    }
    if let Some(extra) = &request.spec {
        if !extra.is_object() {
            return Err(bad_request("spec must be an object"));
        }
        merge(&mut spec, extra);
    }
    Ok(spec)
}

/// Creates a cluster; the operator bootstraps it (`GET` it for progress).
#[utoipa::path(post, path = "/api/v1/namespaces/{namespace}/clusters", tag = "clusters",
    params(("namespace" = String, Path, description = "The namespace")),
    request_body = CreateCluster,
    responses((status = 201, body = ClusterDetail), (status = 400, body = super::server::ErrorBody),
        (status = 401, body = super::server::ErrorBody), (status = 403, body = super::server::ErrorBody),
        (status = 409, body = super::server::ErrorBody), (status = 422, body = super::server::ErrorBody)))]
pub async fn create(
    State(state): State<Arc<ApiState>>,
    Path(namespace): Path<String>,
    ApiJson(request): ApiJson<CreateCluster>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let engine = Engine::parse(&request.engine)
        .map_err(|_| bad_request(format!("unknown engine {:?}: {ENGINES}", request.engine)))?;
    let spec = spec_of(&request, engine)?;
    let invalid = |e: serde_json::Error| bad_request(format!("spec: {e}"));
    let pp = PostParams::default();
    let body = match engine {
        Engine::Etcd => {
            let mut c = EtcdCluster::new(
                &request.name,
                serde_json::from_value(spec).map_err(invalid)?,
            );
            c.metadata.namespace = Some(namespace.clone());
            let made = Api::<EtcdCluster>::namespaced(state.client.clone(), &namespace)
                .create(&pp, &c)
                .await
                .map_err(|e| ApiError::kube("create EtcdCluster", &e))?;
            detail(engine, &made, &made.spec, made.status.as_ref())
        }
        Engine::Postgres => {
            let mut c = PostgresCluster::new(
                &request.name,
                serde_json::from_value(spec).map_err(invalid)?,
            );
            c.metadata.namespace = Some(namespace.clone());
            let made = Api::<PostgresCluster>::namespaced(state.client.clone(), &namespace)
                .create(&pp, &c)
                .await
                .map_err(|e| ApiError::kube("create PostgresCluster", &e))?;
            detail(engine, &made, &made.spec, made.status.as_ref())
        }
        Engine::Cratedb => {
            let mut c = CrateCluster::new(
                &request.name,
                serde_json::from_value(spec).map_err(invalid)?,
            );
            c.metadata.namespace = Some(namespace.clone());
            let made = Api::<CrateCluster>::namespaced(state.client.clone(), &namespace)
                .create(&pp, &c)
                .await
                .map_err(|e| ApiError::kube("create CrateCluster", &e))?;
            detail(engine, &made, &made.spec, made.status.as_ref())
        }
    };
    Ok((StatusCode::CREATED, Json(body)))
}

/// `PATCH` of a cluster.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateCluster {
    /// A JSON merge patch (RFC 7386) of the spec. The size goes through `…/scale`.
    #[schema(value_type = Object)]
    spec: Value,
}

/// Merge-patches the custom resource's spec and answers with the patched object.
async fn patch_spec(
    client: &Client,
    engine: Engine,
    namespace: &str,
    name: &str,
    spec: &Value,
) -> Result<Value, ApiError> {
    let patch = Patch::Merge(json!({"spec": spec}));
    let pp = PatchParams::default();
    let what = format!("patch {}", engine.kind());
    let missing = |e: kube::Error| match &e {
        kube::Error::Api(s) if s.code == 404 => not_found(engine, namespace, name),
        _ => ApiError::kube(&what, &e),
    };
    Ok(match engine {
        Engine::Etcd => {
            let c = Api::<EtcdCluster>::namespaced(client.clone(), namespace)
                .patch(name, &pp, &patch)
                .await
                .map_err(missing)?;
            detail(engine, &c, &c.spec, c.status.as_ref())
        }
        Engine::Postgres => {
            let c = Api::<PostgresCluster>::namespaced(client.clone(), namespace)
                .patch(name, &pp, &patch)
                .await
                .map_err(missing)?;
            detail(engine, &c, &c.spec, c.status.as_ref())
        }
        Engine::Cratedb => {
            let c = Api::<CrateCluster>::namespaced(client.clone(), namespace)
                .patch(name, &pp, &patch)
                .await
                .map_err(missing)?;
            detail(engine, &c, &c.spec, c.status.as_ref())
        }
    })
}

/// Changes a cluster's spec (a JSON merge patch); the operator rolls it out.
#[utoipa::path(patch, path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}",
    tag = "clusters",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`etcd`, `postgres` or `cratedb`"),
        ("name" = String, Path, description = "The cluster")),
    request_body = UpdateCluster,
    responses((status = 200, body = ClusterDetail), (status = 400, body = super::server::ErrorBody),
        (status = 401, body = super::server::ErrorBody), (status = 403, body = super::server::ErrorBody),
        (status = 404, body = super::server::ErrorBody), (status = 422, body = super::server::ErrorBody)))]
pub async fn update(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name)): Path<(String, String, String)>,
    ApiJson(request): ApiJson<UpdateCluster>,
) -> Result<Json<Value>, ApiError> {
    let engine = Engine::parse(&engine)?;
    let Some(fields) = request.spec.as_object() else {
        return Err(bad_request("spec must be an object (a JSON merge patch)"));
    };
    match engine.size_field() {
        Some(size) if fields.contains_key(size) => {
            return Err(bad_request(format!(
                "spec.{size} is changed with POST …/{name}/scale (permission ScaleCluster)"
            )));
        }
        Some(_) => {}
        None => {
            let current = cratedb::get(&state.client, &namespace, &name).await?;
            cratedb::check_update(&current.spec, &request.spec)?;
        }
    }
    Ok(Json(
        patch_spec(&state.client, engine, &namespace, &name, &request.spec).await?,
    ))
}

/// What a long action answers at once (`202`); `GET` of the cluster shows its progress.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Accepted {
    engine: String,
    namespace: String,
    name: String,
    /// `scale`, `restart`, `failover` or `delete`.
    action: String,
    /// The generation that carries the request: done once `status.observedGeneration`
    /// reaches it, no operation runs and the cluster is `Available`.
    generation: Option<i64>,
    /// A fail-over's request id: done once `status.lastSwitchover` equals it.
    switchover_id: Option<String>,
    /// What happens next.
    message: String,
}

fn accepted(
    detail: &Value,
    action: &str,
    switchover_id: Option<String>,
    message: String,
) -> (StatusCode, Json<Value>) {
    (
        StatusCode::ACCEPTED,
        Json(json!({
            "engine": detail["engine"],
            "namespace": detail["namespace"],
            "name": detail["name"],
            "action": action,
            "generation": detail["generation"],
            "switchoverId": switchover_id,
            "message": message,
        })),
    )
}

/// Deletes a cluster (its claims follow the cluster's retention policy).
#[utoipa::path(delete, path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}",
    tag = "clusters",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`etcd`, `postgres` or `cratedb`"),
        ("name" = String, Path, description = "The cluster")),
    responses((status = 202, body = Accepted), (status = 401, body = super::server::ErrorBody),
        (status = 403, body = super::server::ErrorBody), (status = 404, body = super::server::ErrorBody)))]
pub async fn delete(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name)): Path<(String, String, String)>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let engine = Engine::parse(&engine)?;
    let dp = DeleteParams::default();
    let what = format!("delete {}", engine.kind());
    let missing = |e: kube::Error| match &e {
        kube::Error::Api(s) if s.code == 404 => not_found(engine, &namespace, &name),
        _ => ApiError::kube(&what, &e),
    };
    match engine {
        Engine::Etcd => {
            Api::<EtcdCluster>::namespaced(state.client.clone(), &namespace)
                .delete(&name, &dp)
                .await
                .map_err(missing)?;
        }
        Engine::Postgres => {
            Api::<PostgresCluster>::namespaced(state.client.clone(), &namespace)
                .delete(&name, &dp)
                .await
                .map_err(missing)?;
        }
        Engine::Cratedb => {
            Api::<CrateCluster>::namespaced(state.client.clone(), &namespace)
                .delete(&name, &dp)
                .await
                .map_err(missing)?;
        }
    }
    let d = json!({"engine": engine.as_str(), "namespace": namespace, "name": name, "generation": null});
    Ok(accepted(
        &d,
        "delete",
        None,
        "deleting: done when GET answers 404".into(),
    ))
}

/// `POST …/scale`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScaleRequest {
    /// The new number of instances (PostgreSQL), members (etcd) or nodes of the node set
    /// (CrateDB); `replicas` is accepted for it too.
    #[serde(alias = "replicas")]
    instances: i32,
    /// CrateDB only, and needed there: the node set to scale, `master` (at least 3) or a data
    /// set's name.
    #[serde(default)]
    node_set: Option<String>,
}

/// Scales a cluster: the operator adds or removes members one at a time, safely.
#[utoipa::path(post, path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/scale",
    tag = "actions",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`etcd`, `postgres` or `cratedb`"),
        ("name" = String, Path, description = "The cluster")),
    request_body = ScaleRequest,
    responses((status = 202, body = Accepted), (status = 400, body = super::server::ErrorBody),
        (status = 401, body = super::server::ErrorBody), (status = 403, body = super::server::ErrorBody),
        (status = 404, body = super::server::ErrorBody), (status = 409, body = super::server::ErrorBody),
        (status = 422, body = super::server::ErrorBody)))]
pub async fn scale(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name)): Path<(String, String, String)>,
    ApiJson(request): ApiJson<ScaleRequest>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let engine = Engine::parse(&engine)?;
    let replicas = request.instances;
    let Some(size) = engine.size_field() else {
        let mut c = cratedb::get(&state.client, &namespace, &name).await?;
        let set = request.node_set.as_deref();
        cratedb::scale_spec(&mut c.spec, &name, set, replicas)?;
        let c = cratedb::replace(&state.client, c).await?;
        let d = detail(engine, &c, &c.spec, c.status.as_ref());
        let message = format!("scaling node set {} to {replicas}", set.unwrap_or_default());
        return Ok(accepted(&d, "scale", None, message));
    };
    if request.node_set.is_some() {
        return Err(bad_request(format!(
            "nodeSet is for cratedb clusters: a {} cluster has one size",
            engine.as_str()
        )));
    }
    let spec = json!({size: replicas});
    let d = patch_spec(&state.client, engine, &namespace, &name, &spec).await?;
    let message = format!("scaling to {replicas}");
    Ok(accepted(&d, "scale", None, message))
}

/// Restarts every member or instance, one at a time, in the engine's safe order.
#[utoipa::path(post, path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/restart",
    tag = "actions",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`etcd`, `postgres` or `cratedb`"),
        ("name" = String, Path, description = "The cluster")),
    responses((status = 202, body = Accepted), (status = 401, body = super::server::ErrorBody),
        (status = 403, body = super::server::ErrorBody), (status = 404, body = super::server::ErrorBody)))]
pub async fn restart(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name)): Path<(String, String, String)>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let engine = Engine::parse(&engine)?;
    let now = format_time(state.clock.now());
    let spec = json!({"podTemplate": {"annotations": {RESTARTED_AT: now}}});
    let d = patch_spec(&state.client, engine, &namespace, &name, &spec).await?;
    Ok(accepted(
        &d,
        "restart",
        None,
        "rolling restart requested".into(),
    ))
}

/// A fail-over candidate.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    name: String,
    ready: bool,
    streaming: bool,
    /// Bytes of WAL behind the primary.
    lag_bytes: Option<u64>,
}

/// `GET …/failover`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Candidates {
    /// The current primary.
    primary: Option<String>,
    /// The replicas that can be promoted, best first (ready, least lag).
    candidates: Vec<Candidate>,
}

fn postgres_only(engine: Engine, what: &str) -> Result<(), ApiError> {
    match engine {
        Engine::Postgres => Ok(()),
        Engine::Etcd => Err(bad_request(format!(
            "{what} is for PostgreSQL clusters: etcd elects its leader itself"
        ))),
        Engine::Cratedb => Err(bad_request(format!(
            "{what} is for PostgreSQL clusters: CrateDB has no primary (every node takes reads and writes, and the masters elect the cluster's master themselves)"
        ))),
    }
}

/// The fail-over candidates: the replicas, best first.
#[utoipa::path(get, path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/failover",
    tag = "actions",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`postgres` (`etcd` and `cratedb`: 400)"),
        ("name" = String, Path, description = "The cluster")),
    responses((status = 200, body = Candidates), (status = 400, body = super::server::ErrorBody),
        (status = 401, body = super::server::ErrorBody), (status = 403, body = super::server::ErrorBody),
        (status = 404, body = super::server::ErrorBody)))]
pub async fn candidates(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let engine = Engine::parse(&engine)?;
    postgres_only(engine, "fail-over")?;
    let c = postgres(&state.client, &namespace, &name).await?;
    let status = c.status.unwrap_or_default();
    let mut candidates: Vec<Candidate> = status
        .instances
        .iter()
        .filter(|i| i.role == steward_api::postgres::InstanceRole::Replica)
        .map(|i| Candidate {
            name: i.name.clone(),
            ready: i.ready,
            streaming: i.streaming,
            lag_bytes: i.lag_bytes,
        })
        .collect();
    candidates.sort_by_key(|c| (!c.ready, c.lag_bytes.unwrap_or(u64::MAX), c.name.clone()));
    Ok(Json(json!(Candidates {
        primary: status.current_primary,
        candidates,
    })))
}

/// `POST …/failover`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FailoverRequest {
    /// The instance to promote; the most up-to-date replica when absent.
    #[serde(default)]
    target: Option<String>,
}

/// Switches over (the primary is healthy) or fails over (it is not) to a replica.
#[utoipa::path(post, path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/failover",
    tag = "actions",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`postgres` (`etcd` and `cratedb`: 400)"),
        ("name" = String, Path, description = "The cluster")),
    request_body = FailoverRequest,
    responses((status = 202, body = Accepted), (status = 400, body = super::server::ErrorBody),
        (status = 401, body = super::server::ErrorBody), (status = 403, body = super::server::ErrorBody),
        (status = 404, body = super::server::ErrorBody), (status = 422, body = super::server::ErrorBody)))]
pub async fn failover(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name)): Path<(String, String, String)>,
    ApiJson(request): ApiJson<FailoverRequest>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let engine = Engine::parse(&engine)?;
    postgres_only(engine, "fail-over")?;
    let c = postgres(&state.client, &namespace, &name).await?;
    if let Some(target) = &request.target {
        let status = c.status.unwrap_or_default();
        let Some(instance) = status.instances.iter().find(|i| &i.name == target) else {
            return Err(bad_request(format!(
                "{target} is not an instance of {name} (GET …/failover lists the candidates)"
            )));
        };
        if instance.role == steward_api::postgres::InstanceRole::Primary {
            return Err(bad_request(format!("{target} is already the primary")));
        }
    }
    let id = format!(
        "api-{}",
        format_time(state.clock.now())
            .replace([':', '-'], "")
            .to_lowercase()
    );
    let spec = json!({"switchover": {"id": id, "target": request.target}});
    let d = patch_spec(&state.client, engine, &namespace, &name, &spec).await?;
    let message = match &request.target {
        Some(t) => format!("fail-over to {t} requested"),
        None => "fail-over to the most up-to-date replica requested".into(),
    };
    Ok(accepted(&d, "failover", Some(id), message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_request_becomes_the_engines_spec_with_extra_fields_merged() {
        let request: CreateCluster = serde_json::from_value(json!({
            "engine": "postgres", "name": "demo", "instances": 3, "storage": "2Gi",
            "spec": {"parameters": {"max_connections": "50"}, "failover": {"automatic": false}}
        }))
        .unwrap();
        let spec = spec_of(&request, Engine::Postgres).unwrap();
        let typed: PostgresClusterSpec = serde_json::from_value(spec).unwrap();
        assert_eq!(typed.instances, 3);
        assert_eq!(typed.version, "15");
        assert_eq!(typed.storage.size, "2Gi");
        assert_eq!(typed.parameters["max_connections"], "50");
        assert!(!typed.failover.automatic);
        let etcd: CreateCluster = serde_json::from_value(
            json!({"engine": "etcd", "name": "e", "instances": 5, "version": "3.5.9"}),
        )
        .unwrap();
        let typed: EtcdClusterSpec =
            serde_json::from_value(spec_of(&etcd, Engine::Etcd).unwrap()).unwrap();
        assert_eq!((typed.replicas, typed.version.as_str()), (5, "3.5.9"));
        let bad: CreateCluster = serde_json::from_value(
            json!({"engine": "etcd", "name": "e", "instances": 1, "spec": [1]}),
        )
        .unwrap();
        assert!(spec_of(&bad, Engine::Etcd).is_err());
    }

    #[test]
    fn a_merge_patch_removes_nulls_and_replaces_scalars() {
        let mut target = json!({"a": {"b": 1, "c": 2}, "d": [1]});
        merge(&mut target, &json!({"a": {"b": null, "e": 3}, "d": [2]}));
        assert_eq!(target, json!({"a": {"c": 2, "e": 3}, "d": [2]}));
    }
}
