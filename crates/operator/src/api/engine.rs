//! What the REST API needs of an engine (style.md §11): the routes in `clusters.rs` and
//! `resources.rs` name no engine; each engine describes itself with a [`ClusterApi`] (its
//! custom resource, how a create request becomes its spec, how it is sized and scaled, what it
//! refuses) and, when its clusters have database users, a [`UsersApi`]. The list is
//! `crate::engines::all()`.
//!
//! The routes read and write the engines' resources as JSON (`DynamicObject`); an engine
//! checks a spec against its own type ([`ClusterApi::normalize`]) so that an answer shows the
//! spec and status as its type reads them, defaults filled in.

use axum::http::StatusCode;
use kube::api::ApiResource;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::server::ApiError;

/// The annotation a restart puts on every Pod (through `spec.podTemplate.annotations`): a new
/// value changes the Pods' spec hash, so the engine's rolling restart replaces them one at a
/// time, in its safe order — as `kubectl rollout restart` does for a Deployment.
pub const RESTARTED_AT: &str = "steward.dev/restarted-at";

/// What a create request says, as the engine sees it.
#[derive(Clone, Copy, Debug)]
pub struct NewCluster<'a> {
    /// The resource's name.
    pub name: &'a str,
    /// Members, instances, or the nodes of the first node set.
    pub instances: i32,
    /// The version; the engine's default when absent.
    pub version: Option<&'a str>,
    /// Each member's volume size.
    pub storage: Option<&'a str>,
    /// The node set to create (engines sized by node sets).
    pub node_set: Option<&'a str>,
    /// Extra spec fields, merged over the engine's spec by the caller.
    pub extra: Option<&'a Value>,
}

/// How an engine's clusters are sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// One number, this spec field (`replicas`, `instances`).
    Field(&'static str),
    /// Several node sets, each with its own size: a scale names the set.
    NodeSets,
}

/// What a route may ask of an engine that not every engine has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    /// A fail-over or switchover to a named member.
    Failover,
    /// Backups, restores, schedules and SQL policies (`what` names which).
    Backups,
    /// Database users.
    Users,
}

/// One engine as the REST API sees it.
pub trait ClusterApi: Send + Sync {
    /// Its name in paths and bodies (`etcd`).
    fn name(&self) -> &'static str;

    /// Its cluster resource.
    fn resource(&self) -> ApiResource;

    /// How its clusters are sized.
    fn size(&self) -> Size;

    /// (pure) The spec a create request asks for (before the request's extra fields are
    /// merged over it), or a `400` saying what the request cannot express.
    fn create_spec(&self, request: &NewCluster<'_>) -> Result<Value, ApiError>;

    /// (pure) `spec` checked against the engine's type and written as the type writes it
    /// (defaults filled in); a `400` naming the problem when it does not fit.
    fn normalize(&self, spec: Value) -> Result<Value, ApiError>;

    /// (pure) The spec and status of an object of the resource (its JSON), as the engine's type
    /// reads them.
    fn parts(&self, object: &Value) -> Result<(Value, Option<Value>), ApiError>;

    /// (pure) Refuses a merge patch of the spec that the engine changes only through another
    /// route; `current` is the stored spec. Engines sized by one field are checked by the
    /// caller (the field goes through scale).
    fn check_update(&self, _current: &Value, _patch: &Value) -> Result<(), ApiError> {
        Ok(())
    }

    /// (pure) For engines sized by node sets: `spec` with node set `node_set` at `replicas`,
    /// or a `400` naming the sets.
    fn scale_node_set(
        &self,
        _spec: &mut Value,
        _cluster: &str,
        _node_set: Option<&str>,
        _replicas: i32,
    ) -> Result<(), ApiError> {
        Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("a {} cluster has no node sets", self.name()),
        ))
    }

    /// (pure) The merge patch of the spec that restarts every member in the engine's safe
    /// order: by default a new [`RESTARTED_AT`] on the Pod template.
    fn restart_patch(&self, now: &str) -> Value {
        json!({"podTemplate": {"annotations": {RESTARTED_AT: now}}})
    }

    /// Why the engine refuses `capability` (`what` names the route's objects, e.g.
    /// "backups"); `None` when it has it.
    fn refuses(&self, capability: Capability, what: &str) -> Option<String>;

    /// Its database users, when its clusters have them.
    fn users(&self) -> Option<&dyn UsersApi> {
        None
    }

    /// Its fail-over to a named member, when it has one.
    fn failover(&self) -> Option<&dyn FailoverApi> {
        None
    }

    /// Its backups and restores, when it has them.
    fn backups(&self) -> Option<&dyn BackupsApi> {
        None
    }

    /// Its major-version upgrades, when it runs them as objects of their own.
    fn upgrades(&self) -> Option<&dyn UpgradeApi> {
        None
    }
}

/// What an upgrade request says.
#[derive(Clone, Copy, Debug, Default)]
pub struct NewUpgrade<'a> {
    /// The version to move to.
    pub to_version: &'a str,
    /// The image to run afterwards, when given.
    pub image: Option<&'a str>,
    /// Upgrade without a recent backup.
    pub without_backup: bool,
}

/// An engine's major-version upgrade, run by its controller from an object of its own (a
/// `PostgresUpgrade`); the answer is the API's `UpgradeInfo` shape.
#[async_trait::async_trait]
pub trait UpgradeApi: Send + Sync {
    /// Starts an upgrade of the cluster (which exists); `stamp` names the object.
    async fn upgrade(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
        request: &NewUpgrade<'_>,
        stamp: &str,
    ) -> Result<Value, ApiError>;

    /// Upgrade `name` of the cluster, as the API's `UpgradeInfo` (phase, step, message, error);
    /// `None` when there is no such upgrade of that cluster.
    async fn show(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
        name: &str,
    ) -> Result<Option<Value>, ApiError>;
}

/// What a backup request says.
#[derive(Clone, Copy, Debug, Default)]
pub struct NewBackup<'a> {
    /// `full`, `diff` or `incr`, when given.
    pub type_: Option<&'a str>,
    /// The engine's backup method, when given.
    pub method: Option<&'a str>,
}

/// What a restore request says.
#[derive(Clone, Copy, Debug, Default)]
pub struct NewRestore<'a> {
    /// A time to recover to (RFC 3339).
    pub target_time: Option<&'a str>,
    /// A version to restore to (engines that count versions).
    pub version: Option<u64>,
    /// Which backup (set or resource) to restore.
    pub backup: Option<&'a str>,
}

/// An engine's backups and restores as the REST API sees them: each makes or reads the
/// engine's own resources; the answers are the API's `BackupInfo` and `RestoreInfo` shapes.
#[async_trait::async_trait]
pub trait BackupsApi: Send + Sync {
    /// The cluster's backups, oldest first.
    async fn list(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
    ) -> Result<Vec<Value>, ApiError>;

    /// Starts a backup of the cluster (which exists); `stamp` names objects made now.
    async fn create(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
        request: &NewBackup<'_>,
        stamp: &str,
    ) -> Result<Value, ApiError>;

    /// One backup by name, `None` when this engine has no backup of that name.
    async fn show(
        &self,
        client: &kube::Client,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ApiError>;

    /// Starts a restore of the cluster (which exists).
    async fn restore(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
        request: &NewRestore<'_>,
        stamp: &str,
    ) -> Result<Value, ApiError>;

    /// Restore `name` of the cluster, as the API's `RestoreInfo` (phase, step, message,
    /// error); `None` when the cluster has no restore of that name.
    async fn show_restore(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &str,
        name: &str,
    ) -> Result<Option<Value>, ApiError>;
}

/// An engine's fail-over (a switchover when the primary is healthy) to a named member.
pub trait FailoverApi: Send + Sync {
    /// (pure) The current primary and the members that can take over, best first, from the
    /// cluster object (its JSON).
    fn candidates(&self, object: &Value) -> Result<super::clusters::Candidates, ApiError>;

    /// (pure) A `400` when `target` cannot take over (not a member, already the primary).
    fn check_target(&self, object: &Value, cluster: &str, target: &str) -> Result<(), ApiError>;

    /// (pure) The merge patch of the spec that asks for it, with request id `id`.
    fn request(&self, id: &str, target: Option<&str>) -> Value;
}

/// What a create-user request says.
#[derive(Clone, Copy, Debug)]
pub struct NewUser<'a> {
    /// The user's name.
    pub name: &'a str,
    /// Databases it owns.
    pub databases: &'a [String],
    /// `SUPERUSER`.
    pub superuser: bool,
    /// `CREATEDB`.
    pub createdb: bool,
}

/// An engine's database users: entries of `spec.users` whose passwords live in Secrets.
pub trait UsersApi: Send + Sync {
    /// (pure) A `400` when the request names a user the engine cannot have or asks for what
    /// its users do not have.
    fn check_new(&self, request: &NewUser<'_>) -> Result<(), ApiError>;

    /// (pure) The `spec.users` entry of a new user whose password is key `key` of Secret
    /// `secret`.
    fn entry(&self, request: &NewUser<'_>, secret: &str, key: &str) -> Result<Value, ApiError>;

    /// (pure) The Secret (name, key) holding an entry's password.
    fn secret_of(&self, entry: &Value) -> Option<(String, String)>;

    /// (pure) A user as the routes answer it (never its password), from its entry and the
    /// cluster's status.
    fn info(&self, entry: &Value, status: Option<&Value>) -> Result<Value, ApiError>;

    /// (pure) What the answer to a delete adds (what the database keeps).
    fn delete_note(&self) -> &'static str {
        ""
    }
}

/// (pure) A value as JSON (a `500` if it cannot be: it always can for Steward's types).
pub fn to_json<T: Serialize>(value: &T) -> Result<Value, ApiError> {
    serde_json::to_value(value)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// Object `name` of kind `K`, when `of_cluster` says it is the cluster's (`None` when there is
/// no such object, or it is another cluster's).
pub async fn get_of_cluster<K>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    of_cluster: impl Fn(&K) -> bool,
) -> Result<Option<K>, ApiError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    Ok(kube::Api::<K>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| ApiError::kube(&format!("get {}", K::kind(&())), &e))?
        .filter(|o| of_cluster(o)))
}

/// The objects of kind `K` in `namespace` that `of_cluster` says are the cluster's, oldest
/// first (creation time, then name): an engine's backups as its `list` reads them.
pub async fn list_of_cluster<K>(
    client: &kube::Client,
    namespace: &str,
    of_cluster: impl Fn(&K) -> bool,
) -> Result<Vec<K>, ApiError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let mut all = kube::Api::<K>::namespaced(client.clone(), namespace)
        .list(&kube::api::ListParams::default())
        .await
        .map_err(|e| ApiError::kube(&format!("list {}s", K::kind(&())), &e))?
        .items;
    all.retain(|o| of_cluster(o));
    all.sort_by_key(|o| (o.meta().creation_timestamp.clone(), o.meta().name.clone()));
    Ok(all)
}

/// Creates `object` and answers it as the API shows it (`info`): an engine's new backup.
pub async fn create_as<K, I: Serialize>(
    client: &kube::Client,
    namespace: &str,
    object: &K,
    info: impl Fn(&K) -> I,
) -> Result<Value, ApiError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug,
{
    let made = kube::Api::<K>::namespaced(client.clone(), namespace)
        .create(&kube::api::PostParams::default(), object)
        .await
        .map_err(|e| ApiError::kube(&format!("create {}", K::kind(&())), &e))?;
    to_json(&info(&made))
}

/// Object `name` of kind `K` as the API shows it (`info`), when `of_cluster` says it is the
/// cluster's (`None` when there is no such object, or it is another cluster's): what an engine's
/// `show` of one of its upgrades or restores answers.
pub async fn show_of_cluster<K, I: Serialize>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    of_cluster: impl Fn(&K) -> bool,
    info: impl Fn(&K) -> I,
) -> Result<Option<Value>, ApiError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    get_of_cluster(client, namespace, name, of_cluster)
        .await?
        .map(|o| to_json(&info(&o)))
        .transpose()
}

/// (pure) [`ClusterApi::normalize`] for an engine whose spec type is `S`.
pub fn normalize_as<S: Serialize + DeserializeOwned>(spec: Value) -> Result<Value, ApiError> {
    let typed: S =
        serde_json::from_value(spec).map_err(|e| ApiError::bad_request(format!("spec: {e}")))?;
    serde_json::to_value(typed)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// (pure) [`ClusterApi::parts`] for an engine whose resource type is `K`, with `spec` and
/// `status` reading them.
pub fn parts_as<K, S, T>(
    object: &Value,
    spec: impl Fn(&K) -> &S,
    status: impl Fn(&K) -> Option<&T>,
) -> Result<(Value, Option<Value>), ApiError>
where
    K: DeserializeOwned,
    S: Serialize,
    T: Serialize,
{
    let internal = |e: serde_json::Error| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("reading the cluster: {e}"),
        )
    };
    let typed: K = serde_json::from_value(object.clone()).map_err(internal)?;
    let spec = serde_json::to_value(spec(&typed)).map_err(internal)?;
    let status = status(&typed)
        .map(serde_json::to_value)
        .transpose()
        .map_err(internal)?;
    Ok((spec, status))
}

/// (pure) The `ready` of user `name` in a cluster status's `users` list.
pub fn user_ready(status: Option<&Value>, name: &str) -> Option<bool> {
    status?
        .get("users")?
        .as_array()?
        .iter()
        .find(|u| u.get("name").and_then(Value::as_str) == Some(name))?
        .get("ready")?
        .as_bool()
}
