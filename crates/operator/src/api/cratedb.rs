//! What the REST API does differently for a `CrateCluster`: it has several node sets (the
//! masters and named data sets) instead of one size, so create builds a minimal spec of 3
//! masters and one data set, scale names the node set, update keeps the sets' sizes for scale,
//! and its users are `spec.users` entries whose passwords live in Secrets (`ALL` privileges,
//! no databases). The routes themselves stay in `clusters.rs` and `resources.rs`.

use axum::http::StatusCode;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde::Serialize;
use serde_json::{Value, json};
use steward_api::cratedb::{
    CrateCluster, CrateClusterSpec, CrateUser, SecretKeySelector, SecretValue,
};

use super::clusters::Engine;
use super::server::ApiError;
use crate::cratedb::names::{MASTER_SET, SUPERUSER, SYSTEM_USER};

/// The version a create request gets when it names none.
pub const DEFAULT_VERSION: &str = "4.8.4";
/// The data set's name when a create request names none.
pub const DEFAULT_DATA_SET: &str = "data";
/// Masters of a created cluster (CrateDB's minimum, seed 000).
pub const MASTERS: i32 = 3;

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, message)
}

/// (pure) Whether `name` can be a CrateDB `cluster.name` (the schema's pattern: a DNS label of
/// at most 40 characters).
fn valid_cluster_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=40).contains(&bytes.len())
        && bytes.first().is_some_and(ok)
        && bytes.last().is_some_and(ok)
        && bytes.iter().all(|c| ok(c) || *c == b'-')
}

/// What a create request says about a CrateDB cluster.
pub struct CreateRequest<'a> {
    /// The resource's name, also `spec.cluster.name`.
    pub name: &'a str,
    /// The data set's nodes.
    pub replicas: i32,
    /// The version.
    pub version: Option<&'a str>,
    /// The data set's disk size.
    pub storage: Option<&'a str>,
    /// The data set's name.
    pub node_set: Option<&'a str>,
    /// Extra spec fields (merged over the result by the caller).
    pub extra: Option<&'a Value>,
}

/// (pure) The minimal spec of a create request: `cluster.name` = the resource's name, the
/// version, 3 masters and one data set; or a `400` saying what the request cannot express.
pub fn create_spec(r: &CreateRequest<'_>) -> Result<Value, ApiError> {
    let set = r.node_set.unwrap_or(DEFAULT_DATA_SET);
    if set == MASTER_SET {
        return Err(bad_request(format!(
            "nodeSet {MASTER_SET:?} names the masters ({MASTERS} at creation): name the data set, e.g. \"hot\""
        )));
    }
    let named = r
        .extra
        .and_then(|e| e.pointer("/cluster/name"))
        .is_some_and(Value::is_string);
    if !named && !valid_cluster_name(r.name) {
        return Err(bad_request(format!(
            "{:?} cannot be the CrateDB cluster name (spec.cluster.name, the resource's name by default): \
             lower case letters, digits and '-', at most 40 characters; pass spec.cluster.name",
            r.name
        )));
    }
    let mut data = json!({"name": set, "replicas": r.replicas});
    if let Some(size) = r.storage {
        data["disk"] = json!({"size": size});
    }
    Ok(json!({
        "cluster": {"name": r.name, "version": r.version.unwrap_or(DEFAULT_VERSION)},
        "nodes": {"master": {"replicas": MASTERS}, "data": [data]},
    }))
}

/// (pure) The names of the node sets: `master`, then the data sets in order.
pub fn node_sets(spec: &CrateClusterSpec) -> Vec<String> {
    std::iter::once(MASTER_SET.to_owned())
        .chain(spec.nodes.data.iter().map(|d| d.name.clone()))
        .collect()
}

/// (pure) Sets node set `node_set`'s replicas in `spec`; a `400` naming the sets when none or
/// an unknown one is named, or when the masters would be fewer than 3.
pub fn scale_spec(
    spec: &mut CrateClusterSpec,
    cluster: &str,
    node_set: Option<&str>,
    replicas: i32,
) -> Result<(), ApiError> {
    let sets = node_sets(spec).join(", ");
    let Some(set) = node_set else {
        return Err(bad_request(format!(
            "{cluster} is a CrateDB cluster with several node sets ({sets}): name one with \"nodeSet\" (CLI: --node-set)"
        )));
    };
    if set == MASTER_SET {
        if replicas < MASTERS {
            return Err(bad_request(format!(
                "a CrateDB cluster needs at least {MASTERS} masters, not {replicas}"
            )));
        }
        spec.nodes.master.replicas = replicas;
        return Ok(());
    }
    match spec.nodes.data.iter_mut().find(|d| d.name == set) {
        Some(d) => {
            d.replicas = replicas;
            Ok(())
        }
        None => Err(bad_request(format!(
            "{cluster} has no node set {set:?}: its node sets are {sets}"
        ))),
    }
}

/// (pure) Refuses a merge patch of a CrateDB spec that changes what scale changes: the masters'
/// replicas, or the data sets' names and replicas (a patch of `nodes.data` replaces the list, so
/// it must give every set, in order, with its current name and replicas).
pub fn check_update(current: &CrateClusterSpec, patch: &Value) -> Result<(), ApiError> {
    let scale = "change through POST …/scale with \"nodeSet\" (permission ScaleCluster)";
    if patch.get("replicas").is_some() {
        return Err(bad_request(format!(
            "spec.replicas is not a CrateDB field: node sets' sizes {scale}"
        )));
    }
    let Some(nodes) = patch.get("nodes") else {
        return Ok(());
    };
    if nodes.pointer("/master/replicas").is_some() {
        return Err(bad_request(format!(
            "spec.nodes.master.replicas: node sets' sizes {scale}"
        )));
    }
    if let Some(data) = nodes.get("data") {
        let given: Vec<(Option<&str>, Option<i64>)> = data
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| {
                (
                    d.get("name").and_then(Value::as_str),
                    d.get("replicas").and_then(Value::as_i64),
                )
            })
            .collect();
        let now: Vec<(Option<&str>, Option<i64>)> = current
            .nodes
            .data
            .iter()
            .map(|d| (Some(d.name.as_str()), Some(i64::from(d.replicas))))
            .collect();
        if given != now {
            let sets: Vec<String> = current
                .nodes
                .data
                .iter()
                .map(|d| format!("{}={}", d.name, d.replicas))
                .collect();
            return Err(bad_request(format!(
                "spec.nodes.data replaces the whole list: give every data set in order with its current name and replicas ({}); \
                 sizes {scale}, and data sets are added or removed with kubectl",
                sets.join(", ")
            )));
        }
    }
    Ok(())
}

/// The `CrateCluster`, or 404.
pub async fn get(client: &Client, namespace: &str, name: &str) -> Result<CrateCluster, ApiError> {
    Api::<CrateCluster>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| ApiError::kube("get CrateCluster", &e))?
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!(
                    "{} cluster {namespace}/{name} does not exist",
                    Engine::Cratedb.as_str()
                ),
            )
        })
}

/// Writes the cluster's spec back (with the read `resourceVersion`: a concurrent edit is a
/// `409`, never a lost update).
pub async fn replace(client: &Client, mut cluster: CrateCluster) -> Result<CrateCluster, ApiError> {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    cluster.status = None;
    cluster.metadata.managed_fields = None;
    Api::<CrateCluster>::namespaced(client.clone(), &namespace)
        .replace(&name, &PostParams::default(), &cluster)
        .await
        .map_err(|e| ApiError::kube("update CrateCluster", &e))
}

/// A CrateDB user as the users routes answer it (the shape of `resources::UserInfo`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CrateUserInfo<'a> {
    name: &'a str,
    databases: [&'a str; 0],
    superuser: bool,
    createdb: bool,
    secret: &'a str,
    secret_key: &'a str,
    ready: Option<bool>,
    privileges: &'a str,
}

/// (pure) A user of the cluster as JSON (never its password).
pub fn user_info(cluster: &CrateCluster, u: &CrateUser) -> Value {
    let ready = cluster
        .status
        .as_ref()
        .and_then(|s| s.users.iter().find(|s| s.name == u.name))
        .map(|s| s.ready);
    json!(CrateUserInfo {
        name: &u.name,
        databases: [],
        superuser: false,
        createdb: false,
        secret: &u.password.secret_key_ref.name,
        secret_key: &u.password.secret_key_ref.key,
        ready,
        privileges: "ALL",
    })
}

/// (pure) A `400` when a create-user request asks for what CrateDB users do not have, or names
/// a user CrateDB cannot have.
pub fn check_new_user(
    name: &str,
    databases: &[String],
    superuser: bool,
    createdb: bool,
) -> Result<(), ApiError> {
    let mut chars = name.chars();
    let valid = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && name.len() <= 63
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(bad_request(format!(
            "user {name} is not a valid CrateDB user name: letters, digits and _, starting with a letter or _"
        )));
    }
    if name == SYSTEM_USER || name == SUPERUSER {
        return Err(bad_request(format!(
            "user {name} is reserved in a CrateDB cluster (Steward manages it as {SYSTEM_USER}; {SUPERUSER} is CrateDB's own)"
        )));
    }
    if !databases.is_empty() || superuser || createdb {
        return Err(bad_request(
            "CrateDB users are created with ALL privileges and own no databases: databases, superuser and createdb are PostgreSQL's",
        ));
    }
    Ok(())
}

/// A new user entry whose password is key `password` of Secret `secret`.
pub fn new_user(name: &str, secret: &str) -> CrateUser {
    CrateUser {
        name: name.to_owned(),
        password: SecretValue {
            secret_key_ref: SecretKeySelector {
                name: secret.to_owned(),
                key: "password".to_owned(),
            },
        },
    }
}

/// Creates user `user`: the Secret (already made by the caller as `secret`) is referenced from
/// a new `spec.users` entry; on failure the Secret is taken back.
pub async fn add_user(
    client: &Client,
    mut cluster: CrateCluster,
    user: CrateUser,
    secret: &str,
) -> Result<Value, ApiError> {
    let namespace = cluster.namespace().unwrap_or_default();
    cluster.spec.users.push(user.clone());
    match replace(client, cluster).await {
        Ok(updated) => Ok(user_info(&updated, &user)),
        Err(e) => {
            // Nothing references the new Secret: take it back.
            let _ = Api::<Secret>::namespaced(client.clone(), &namespace)
                .delete(secret, &DeleteParams::default())
                .await;
            Err(e)
        }
    }
}

/// Writes `password` into the user's Secret; the operator follows it (logging in with the old
/// password to change it).
pub async fn rotate(
    client: &Client,
    cluster: &CrateCluster,
    user: &str,
    password: String,
) -> Result<Value, ApiError> {
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let Some(entry) = cluster.spec.users.iter().find(|u| u.name == user) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("{name} has no user {user}"),
        ));
    };
    let r = &entry.password.secret_key_ref;
    let encoded = json!(k8s_openapi::ByteString(password.into_bytes()));
    let patch = Patch::Merge(json!({"data": {&r.key: encoded}}));
    Api::<Secret>::namespaced(client.clone(), &namespace)
        .patch(&r.name, &PatchParams::default(), &patch)
        .await
        .map_err(|e| ApiError::kube(&format!("update Secret {}", r.name), &e))?;
    Ok(user_info(cluster, entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> CrateClusterSpec {
        let v = create_spec(&CreateRequest {
            name: "demo",
            replicas: 1,
            version: None,
            storage: Some("2Gi"),
            node_set: Some("hot"),
            extra: None,
        })
        .unwrap();
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_create_request_becomes_three_masters_and_one_data_set() {
        let s = spec();
        assert_eq!(s.cluster.name, "demo");
        assert_eq!(s.cluster.version, DEFAULT_VERSION);
        assert_eq!(s.nodes.master.replicas, 3);
        assert_eq!(s.nodes.data.len(), 1);
        assert_eq!(
            (s.nodes.data[0].name.as_str(), s.nodes.data[0].replicas),
            ("hot", 1)
        );
        assert_eq!(s.nodes.data[0].disk.size, "2Gi");
        let plain = create_spec(&CreateRequest {
            name: "c",
            replicas: 2,
            version: Some("5.1.0"),
            storage: None,
            node_set: None,
            extra: None,
        })
        .unwrap();
        assert_eq!(plain["nodes"]["data"][0]["name"], DEFAULT_DATA_SET);
        assert_eq!(plain["cluster"]["version"], "5.1.0");
        // What a request cannot say is refused with the reason.
        let master = CreateRequest {
            name: "c",
            replicas: 2,
            version: None,
            storage: None,
            node_set: Some("master"),
            extra: None,
        };
        let e = format!("{:?}", create_spec(&master).unwrap_err());
        assert!(e.contains("masters"), "{e}");
        let long = "a".repeat(41);
        let too_long = CreateRequest {
            name: &long,
            node_set: None,
            ..master
        };
        let e = format!("{:?}", create_spec(&too_long).unwrap_err());
        assert!(e.contains("spec.cluster.name"), "{e}");
        let extra = json!({"cluster": {"name": "short"}});
        let named = CreateRequest {
            extra: Some(&extra),
            ..too_long
        };
        assert!(create_spec(&named).is_ok());
    }

    #[test]
    fn scale_needs_a_known_node_set_and_keeps_three_masters() {
        let mut s = spec();
        let e = format!("{:?}", scale_spec(&mut s, "demo", None, 2).unwrap_err());
        assert!(e.contains("master, hot") && e.contains("nodeSet"), "{e}");
        let e = format!(
            "{:?}",
            scale_spec(&mut s, "demo", Some("cold"), 2).unwrap_err()
        );
        assert!(e.contains("no node set \\\"cold\\\""), "{e}");
        assert!(scale_spec(&mut s, "demo", Some("master"), 2).is_err());
        scale_spec(&mut s, "demo", Some("hot"), 2).unwrap();
        scale_spec(&mut s, "demo", Some("master"), 5).unwrap();
        assert_eq!((s.nodes.master.replicas, s.nodes.data[0].replicas), (5, 2));
    }

    #[test]
    fn an_update_may_not_change_what_scale_changes() {
        let s = spec();
        assert!(check_update(&s, &json!({"restart": {"greenReadings": 1}})).is_ok());
        assert!(check_update(&s, &json!({"nodes": {"master": {"heapRatio": 0.5}}})).is_ok());
        let same = json!({"nodes": {"data": [{"name": "hot", "replicas": 1, "heapRatio": 0.5}]}});
        assert!(check_update(&s, &same).is_ok());
        for bad in [
            json!({"replicas": 4}),
            json!({"nodes": {"master": {"replicas": 5}}}),
            json!({"nodes": {"data": [{"name": "hot", "replicas": 3}]}}),
            json!({"nodes": {"data": [{"name": "hot", "replicas": 1}, {"name": "cold", "replicas": 1}]}}),
            json!({"nodes": {"data": null}}),
        ] {
            assert!(check_update(&s, &bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn new_users_are_crate_names_without_postgres_options() {
        assert!(check_new_user("App_1", &[], false, false).is_ok());
        for (name, dbs, su, cdb) in [
            ("system", vec![], false, false),
            ("crate", vec![], false, false),
            ("1app", vec![], false, false),
            ("app", vec!["db".to_owned()], false, false),
            ("app", vec![], true, false),
            ("app", vec![], false, true),
        ] {
            assert!(check_new_user(name, &dbs, su, cdb).is_err(), "{name}");
        }
    }
}
