//! The cluster routes of the REST API: list, show, create, update, delete, and the day-2
//! actions — scale, restart, fail-over. Every write is one Kubernetes API call on the
//! engine's custom resource (the operator's controllers do the work), so the API needs no
//! leader and its answers are what the Kubernetes API said, validation errors included. No
//! route names an engine: what differs between them is each engine's `ClusterApi`
//! (`api::engine`), found by name in `crate::engines::all()`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::engine::{Capability, ClusterApi, NewCluster, Size, to_json};
use super::server::{ApiError, ApiJson, ApiState, Caller};
use crate::clock::format_time;

pub use super::engine::RESTARTED_AT;

/// Every engine the API serves, in the order of `crate::engines::all()`.
pub fn engines() -> impl Iterator<Item = &'static dyn ClusterApi> {
    crate::engines::all()
        .iter()
        .copied()
        .map(|e| -> &'static dyn ClusterApi { e })
}

/// The engines' names, for messages: `etcd, postgres or cratedb`.
pub fn engine_names() -> String {
    let names: Vec<&str> = engines().map(|e| e.name()).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => (*last).to_owned(),
        None => String::new(),
    }
}

/// The engine named in a path or body, or `404`.
pub fn engine(name: &str) -> Result<&'static dyn ClusterApi, ApiError> {
    engines().find(|e| e.name() == name).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("unknown engine {name:?}: {}", engine_names()),
        )
    })
}

/// The engines sized by node sets, for messages (`cratedb`).
fn node_set_engines() -> String {
    let names: Vec<&str> = engines()
        .filter(|e| e.size() == Size::NodeSets)
        .map(|e| e.name())
        .collect();
    names.join(" and ")
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

/// (pure) A list line from a cluster object of any engine (its status's common part).
fn summary(engine: &dyn ClusterApi, o: &DynamicObject) -> ClusterSummary {
    let status = o.data.get("status");
    let available = status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Available"))
        })
        .and_then(|c| c.get("status").and_then(Value::as_str))
        .map(str::to_owned);
    ClusterSummary {
        engine: engine.name(),
        namespace: o.namespace().unwrap_or_default(),
        name: o.name_any(),
        available,
        operation: status
            .and_then(|s| s.pointer("/operation/kind"))
            .and_then(Value::as_str)
            .map(str::to_owned),
    }
}

/// The engine's resource in `namespace` (or all).
fn api(client: &Client, engine: &dyn ClusterApi, namespace: Option<&str>) -> Api<DynamicObject> {
    let resource = engine.resource();
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// The clusters of every engine, in a namespace or in all.
pub async fn clusters_in(
    client: &Client,
    namespace: Option<&str>,
) -> Result<Vec<ClusterSummary>, ApiError> {
    let lp = ListParams::default();
    let mut out = Vec::new();
    for engine in engines() {
        let kind = engine.resource().kind;
        let listed = api(client, engine, namespace)
            .list(&lp)
            .await
            .map_err(|e| ApiError::kube(&format!("list {kind}s"), &e))?;
        out.extend(listed.items.iter().map(|c| summary(engine, c)));
    }
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

/// (pure) The answer about one cluster: its spec and status as the engine's type reads them.
pub fn detail(engine: &dyn ClusterApi, o: &DynamicObject) -> Result<Value, ApiError> {
    let object = to_json(o)?;
    let (spec, status) = engine.parts(&object)?;
    Ok(json!({
        "engine": engine.name(),
        "namespace": o.namespace().unwrap_or_default(),
        "name": o.name_any(),
        "generation": o.metadata.generation,
        "spec": spec,
        "status": status,
    }))
}

fn not_found(engine: &dyn ClusterApi, namespace: &str, name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "{} cluster {namespace}/{name} does not exist",
            engine.name()
        ),
    )
}

/// The cluster object, or 404.
pub async fn get(
    client: &Client,
    engine: &dyn ClusterApi,
    namespace: &str,
    name: &str,
) -> Result<DynamicObject, ApiError> {
    let kind = engine.resource().kind;
    api(client, engine, Some(namespace))
        .get_opt(name)
        .await
        .map_err(|e| ApiError::kube(&format!("get {kind}"), &e))?
        .ok_or_else(|| not_found(engine, namespace, name))
}

/// Writes a cluster object back with its read `resourceVersion` (a concurrent edit is a `409`,
/// never a lost update), without its status and managed fields.
pub async fn replace(
    client: &Client,
    engine: &dyn ClusterApi,
    mut object: DynamicObject,
) -> Result<DynamicObject, ApiError> {
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let kind = engine.resource().kind;
    if let Some(data) = object.data.as_object_mut() {
        data.remove("status");
    }
    object.metadata.managed_fields = None;
    api(client, engine, Some(&namespace))
        .replace(&name, &PostParams::default(), &object)
        .await
        .map_err(|e| ApiError::kube(&format!("update {kind}"), &e))
}

/// The cluster's detail, or 404.
pub async fn get_detail(
    client: &Client,
    engine: &dyn ClusterApi,
    namespace: &str,
    name: &str,
) -> Result<Value, ApiError> {
    detail(engine, &get(client, engine, namespace, name).await?)
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
    Path((namespace, engine_name, name)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let engine = engine(&engine_name)?;
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
pub fn merge(target: &mut Value, patch: &Value) {
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

/// (pure) The spec a create request asks for, as the engine's type writes it.
fn spec_of(request: &CreateCluster, engine: &dyn ClusterApi) -> Result<Value, ApiError> {
    if request.node_set.is_some() && engine.size() != Size::NodeSets {
        return Err(ApiError::bad_request(format!(
            "nodeSet is for {} clusters: a {} cluster has one size (instances)",
            node_set_engines(),
            engine.name()
        )));
    }
    let mut spec = engine.create_spec(&NewCluster {
        name: &request.name,
        instances: request.instances,
        version: request.version.as_deref(),
        storage: request.storage.as_deref(),
        node_set: request.node_set.as_deref(),
        extra: request.spec.as_ref(),
    })?;
    if let Some(extra) = &request.spec {
        if !extra.is_object() {
            return Err(ApiError::bad_request("spec must be an object"));
        }
        merge(&mut spec, extra);
    }
    engine.normalize(spec)
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
    let engine = engine(&request.engine).map_err(|_| {
        ApiError::bad_request(format!(
            "unknown engine {:?}: {}",
            request.engine,
            engine_names()
        ))
    })?;
    let spec = spec_of(&request, engine)?;
    let resource = engine.resource();
    let mut object = DynamicObject::new(&request.name, &resource).within(&namespace);
    object.data = json!({"spec": spec});
    let made = api(&state.client, engine, Some(&namespace))
        .create(&PostParams::default(), &object)
        .await
        .map_err(|e| ApiError::kube(&format!("create {}", resource.kind), &e))?;
    Ok((StatusCode::CREATED, Json(detail(engine, &made)?)))
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
pub async fn patch_spec(
    client: &Client,
    engine: &dyn ClusterApi,
    namespace: &str,
    name: &str,
    spec: &Value,
) -> Result<Value, ApiError> {
    let patch = Patch::Merge(json!({"spec": spec}));
    let what = format!("patch {}", engine.resource().kind);
    let patched = api(client, engine, Some(namespace))
        .patch(name, &PatchParams::default(), &patch)
        .await
        .map_err(|e| match &e {
            kube::Error::Api(s) if s.code == 404 => not_found(engine, namespace, name),
            _ => ApiError::kube(&what, &e),
        })?;
    detail(engine, &patched)
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
    Path((namespace, engine_name, name)): Path<(String, String, String)>,
    ApiJson(request): ApiJson<UpdateCluster>,
) -> Result<Json<Value>, ApiError> {
    let engine = engine(&engine_name)?;
    let Some(fields) = request.spec.as_object() else {
        return Err(ApiError::bad_request(
            "spec must be an object (a JSON merge patch)",
        ));
    };
    match engine.size() {
        Size::Field(size) if fields.contains_key(size) => {
            return Err(ApiError::bad_request(format!(
                "spec.{size} is changed with POST …/{name}/scale (permission ScaleCluster)"
            )));
        }
        Size::Field(_) => {}
        Size::NodeSets => {
            let current = get(&state.client, engine, &namespace, &name).await?;
            let empty = Value::Null;
            let spec = current.data.get("spec").unwrap_or(&empty);
            engine.check_update(spec, &request.spec)?;
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
    Path((namespace, engine_name, name)): Path<(String, String, String)>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let engine = engine(&engine_name)?;
    let what = format!("delete {}", engine.resource().kind);
    api(&state.client, engine, Some(&namespace))
        .delete(&name, &DeleteParams::default())
        .await
        .map_err(|e| match &e {
            kube::Error::Api(s) if s.code == 404 => not_found(engine, &namespace, &name),
            _ => ApiError::kube(&what, &e),
        })?;
    let d =
        json!({"engine": engine.name(), "namespace": namespace, "name": name, "generation": null});
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
    Path((namespace, engine_name, name)): Path<(String, String, String)>,
    ApiJson(request): ApiJson<ScaleRequest>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let engine = engine(&engine_name)?;
    let replicas = request.instances;
    let Size::Field(size) = engine.size() else {
        let mut c = get(&state.client, engine, &namespace, &name).await?;
        let set = request.node_set.as_deref();
        let spec = c
            .data
            .get_mut("spec")
            .ok_or_else(|| not_found(engine, &namespace, &name))?;
        engine.scale_node_set(spec, &name, set, replicas)?;
        let c = replace(&state.client, engine, c).await?;
        let d = detail(engine, &c)?;
        let message = format!("scaling node set {} to {replicas}", set.unwrap_or_default());
        return Ok(accepted(&d, "scale", None, message));
    };
    if request.node_set.is_some() {
        return Err(ApiError::bad_request(format!(
            "nodeSet is for {} clusters: a {} cluster has one size",
            node_set_engines(),
            engine.name()
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
    Path((namespace, engine_name, name)): Path<(String, String, String)>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let engine = engine(&engine_name)?;
    let now = format_time(state.clock.now());
    let spec = engine.restart_patch(&now);
    let d = patch_spec(&state.client, engine, &namespace, &name, &spec).await?;
    Ok(accepted(
        &d,
        "restart",
        None,
        "rolling restart requested".into(),
    ))
}

/// The engine, unless it refuses `capability` (a `400` with its reason).
pub fn engine_with(
    name: &str,
    capability: Capability,
    what: &str,
) -> Result<&'static dyn ClusterApi, ApiError> {
    let engine = engine(name)?;
    match engine.refuses(capability, what) {
        Some(why) => Err(ApiError::bad_request(why)),
        None => Ok(engine),
    }
}

/// A fail-over candidate.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// The member.
    pub name: String,
    /// Whether it is ready.
    pub ready: bool,
    /// Whether it streams from the primary.
    pub streaming: bool,
    /// Bytes of WAL behind the primary.
    pub lag_bytes: Option<u64>,
}

/// `GET …/failover`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Candidates {
    /// The current primary.
    pub primary: Option<String>,
    /// The replicas that can be promoted, best first (ready, least lag).
    pub candidates: Vec<Candidate>,
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
    Path((namespace, engine_name, name)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let engine = engine_with(&engine_name, Capability::Failover, "fail-over")?;
    let failover = engine.failover().ok_or_else(|| no_failover(engine))?;
    let c = get(&state.client, engine, &namespace, &name).await?;
    let object = to_json(&c)?;
    Ok(Json(json!(failover.candidates(&object)?)))
}

fn no_failover(engine: &dyn ClusterApi) -> ApiError {
    ApiError::bad_request(format!(
        "fail-over is not supported for {} clusters",
        engine.name()
    ))
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
    Path((namespace, engine_name, name)): Path<(String, String, String)>,
    ApiJson(request): ApiJson<FailoverRequest>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let engine = engine_with(&engine_name, Capability::Failover, "fail-over")?;
    let failover = engine.failover().ok_or_else(|| no_failover(engine))?;
    let c = get(&state.client, engine, &namespace, &name).await?;
    if let Some(target) = &request.target {
        let object = to_json(&c)?;
        failover.check_target(&object, &name, target)?;
    }
    let id = format!(
        "api-{}",
        format_time(state.clock.now())
            .replace([':', '-'], "")
            .to_lowercase()
    );
    let spec = failover.request(&id, request.target.as_deref());
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
    use steward_api::etcd::EtcdClusterSpec;
    use steward_api::postgres::PostgresClusterSpec;

    #[test]
    fn a_create_request_becomes_the_engines_spec_with_extra_fields_merged() {
        let request: CreateCluster = serde_json::from_value(json!({
            "engine": "postgres", "name": "demo", "instances": 3, "storage": "2Gi",
            "spec": {"parameters": {"max_connections": "50"}, "failover": {"automatic": false}}
        }))
        .unwrap();
        let spec = spec_of(&request, engine("postgres").unwrap()).unwrap();
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
            serde_json::from_value(spec_of(&etcd, engine("etcd").unwrap()).unwrap()).unwrap();
        assert_eq!((typed.replicas, typed.version.as_str()), (5, "3.5.9"));
        let bad: CreateCluster = serde_json::from_value(
            json!({"engine": "etcd", "name": "e", "instances": 1, "spec": [1]}),
        )
        .unwrap();
        assert!(spec_of(&bad, engine("etcd").unwrap()).is_err());
    }

    /// The routes find engines by name in `engines::all()` and say what each lacks in its own
    /// words: the answers of the per-engine arms this replaced.
    #[test]
    fn engines_are_found_by_name_and_refuse_in_their_own_words() {
        assert_eq!(engine_names(), "etcd, postgres, cratedb or foundationdb");
        assert_eq!(node_set_engines(), "cratedb and foundationdb");
        let unknown = format!("{:?}", engine("mysql").err().unwrap());
        assert!(
            unknown.contains("404")
                && unknown.contains("unknown engine")
                && unknown.contains("mysql")
                && unknown.contains("etcd, postgres, cratedb or foundationdb"),
            "{unknown}"
        );
        let (etcd, postgres, cratedb) = (
            engine("etcd").unwrap(),
            engine("postgres").unwrap(),
            engine("cratedb").unwrap(),
        );
        assert_eq!(etcd.size(), Size::Field("replicas"));
        assert_eq!(postgres.size(), Size::Field("instances"));
        assert_eq!(cratedb.size(), Size::NodeSets);
        for capability in [Capability::Failover, Capability::Backups, Capability::Users] {
            assert_eq!(postgres.refuses(capability, "x"), None, "{capability:?}");
        }
        assert!(postgres.users().is_some() && postgres.failover().is_some());
        assert!(cratedb.users().is_some() && cratedb.failover().is_none());
        assert!(etcd.users().is_none() && etcd.failover().is_none());
        assert!(etcd.backups().is_some());
        for what in ["backups", "restores", "schedules"] {
            assert_eq!(etcd.refuses(Capability::Backups, what), None, "{what}");
        }
        assert_eq!(
            etcd.refuses(Capability::Failover, "fail-over").as_deref(),
            Some("fail-over is for PostgreSQL clusters: etcd elects its leader itself")
        );
        assert_eq!(
            cratedb.refuses(Capability::Backups, "backups").as_deref(),
            Some(
                "backups are not supported for cratedb clusters: Steward does not take CrateDB snapshots yet"
            )
        );
        assert_eq!(cratedb.refuses(Capability::Users, "users"), None);
        assert!(
            etcd.refuses(Capability::Users, "users")
                .is_some_and(|m| m.contains("etcd clusters have none"))
        );
        // A restart is a new annotation on the Pod template, in every engine's spec.
        let patch = etcd.restart_patch("2026-11-28T00:00:00Z");
        assert_eq!(
            patch["podTemplate"]["annotations"][RESTARTED_AT],
            "2026-11-28T00:00:00Z"
        );
    }

    #[test]
    fn a_merge_patch_removes_nulls_and_replaces_scalars() {
        let mut target = json!({"a": {"b": 1, "c": 2}, "d": [1]});
        merge(&mut target, &json!({"a": {"b": null, "e": 3}, "d": [2]}));
        assert_eq!(target, json!({"a": {"c": 2, "e": 3}, "d": [2]}));
    }
}
