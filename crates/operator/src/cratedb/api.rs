//! The CrateDB engine as the REST API sees it ([`ClusterApi`]): a `CrateCluster` has several
//! node sets (the masters and named data sets) instead of one size, so create builds a minimal
//! spec of 3 masters and one data set, scale names the node set, update keeps the sets' sizes
//! for scale, and its users are `spec.users` entries whose passwords live in Secrets (`ALL`
//! privileges, no databases). No fail-over (no primary), no backups yet.

use axum::http::StatusCode;
use kube::api::ApiResource;
use serde::Serialize;
use serde_json::{Value, json};
use steward_api::cratedb::{
    CrateCluster, CrateClusterSpec, CrateUser, SecretKeySelector, SecretValue,
};

use crate::api::engine::{
    Capability, ClusterApi, NewCluster, NewUser, Size, UsersApi, normalize_as, parts_as, to_json,
    user_ready,
};
use crate::api::server::ApiError;
use crate::cratedb::engine::CrateDb;
use crate::cratedb::names::{MASTER_SET, SUPERUSER, SYSTEM_USER};

/// The version a create request gets when it names none.
pub const DEFAULT_VERSION: &str = "4.8.4";
/// The data set's name when a create request names none.
pub const DEFAULT_DATA_SET: &str = "data";
/// Masters of a created cluster (CrateDB's minimum, seed 000).
pub const MASTERS: i32 = 3;

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

/// (pure) The minimal spec of a create request: `cluster.name` = the resource's name, the
/// version, 3 masters and one data set; or a `400` saying what the request cannot express.
pub fn create_spec(r: &NewCluster<'_>) -> Result<Value, ApiError> {
    let set = r.node_set.unwrap_or(DEFAULT_DATA_SET);
    if set == MASTER_SET {
        return Err(ApiError::bad_request(format!(
            "nodeSet {MASTER_SET:?} names the masters ({MASTERS} at creation): name the data set, e.g. \"hot\""
        )));
    }
    let named = r
        .extra
        .and_then(|e| e.pointer("/cluster/name"))
        .is_some_and(Value::is_string);
    if !named && !valid_cluster_name(r.name) {
        return Err(ApiError::bad_request(format!(
            "{:?} cannot be the CrateDB cluster name (spec.cluster.name, the resource's name by default): \
             lower case letters, digits and '-', at most 40 characters; pass spec.cluster.name",
            r.name
        )));
    }
    let mut data = json!({"name": set, "replicas": r.instances});
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
        return Err(ApiError::bad_request(format!(
            "{cluster} is a CrateDB cluster with several node sets ({sets}): name one with \"nodeSet\" (CLI: --node-set)"
        )));
    };
    if set == MASTER_SET {
        if replicas < MASTERS {
            return Err(ApiError::bad_request(format!(
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
        None => Err(ApiError::bad_request(format!(
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
        return Err(ApiError::bad_request(format!(
            "spec.replicas is not a CrateDB field: node sets' sizes {scale}"
        )));
    }
    let Some(nodes) = patch.get("nodes") else {
        return Ok(());
    };
    if nodes.pointer("/master/replicas").is_some() {
        return Err(ApiError::bad_request(format!(
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
            return Err(ApiError::bad_request(format!(
                "spec.nodes.data replaces the whole list: give every data set in order with its current name and replicas ({}); \
                 sizes {scale}, and data sets are added or removed with kubectl",
                sets.join(", ")
            )));
        }
    }
    Ok(())
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

/// (pure) A user of the cluster as JSON (never its password), `ready` from the cluster's
/// status.
pub fn user_info(u: &CrateUser, status: Option<&Value>) -> Result<Value, ApiError> {
    let ready = user_ready(status, &u.name);
    to_json(&CrateUserInfo {
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
        return Err(ApiError::bad_request(format!(
            "user {name} is not a valid CrateDB user name: letters, digits and _, starting with a letter or _"
        )));
    }
    if name == SYSTEM_USER || name == SUPERUSER {
        return Err(ApiError::bad_request(format!(
            "user {name} is reserved in a CrateDB cluster (Steward manages it as {SYSTEM_USER}; {SUPERUSER} is CrateDB's own)"
        )));
    }
    if !databases.is_empty() || superuser || createdb {
        return Err(ApiError::bad_request(
            "CrateDB users are created with ALL privileges and own no databases: databases, superuser and createdb are PostgreSQL's",
        ));
    }
    Ok(())
}

/// A new user entry whose password is key `key` of Secret `secret`.
pub fn new_user(name: &str, secret: &str, key: &str) -> CrateUser {
    CrateUser {
        name: name.to_owned(),
        password: SecretValue {
            secret_key_ref: SecretKeySelector {
                name: secret.to_owned(),
                key: key.to_owned(),
            },
        },
    }
}

/// (pure) A typed spec from the stored one.
fn typed(spec: &Value) -> Result<CrateClusterSpec, ApiError> {
    serde_json::from_value(spec.clone()).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("reading the cluster's spec: {e}"),
        )
    })
}

impl ClusterApi for CrateDb {
    fn name(&self) -> &'static str {
        "cratedb"
    }

    fn resource(&self) -> ApiResource {
        ApiResource::erase::<CrateCluster>(&())
    }

    fn size(&self) -> Size {
        Size::NodeSets
    }

    fn create_spec(&self, request: &NewCluster<'_>) -> Result<Value, ApiError> {
        create_spec(request)
    }

    fn normalize(&self, spec: Value) -> Result<Value, ApiError> {
        normalize_as::<CrateClusterSpec>(spec)
    }

    fn parts(&self, object: &Value) -> Result<(Value, Option<Value>), ApiError> {
        parts_as::<CrateCluster, _, _>(object, |c| &c.spec, |c| c.status.as_ref())
    }

    fn check_update(&self, current: &Value, patch: &Value) -> Result<(), ApiError> {
        check_update(&typed(current)?, patch)
    }

    fn scale_node_set(
        &self,
        spec: &mut Value,
        cluster: &str,
        node_set: Option<&str>,
        replicas: i32,
    ) -> Result<(), ApiError> {
        let mut typed = typed(spec)?;
        scale_spec(&mut typed, cluster, node_set, replicas)?;
        *spec = to_json(&typed)?;
        Ok(())
    }

    fn refuses(&self, capability: Capability, what: &str) -> Option<String> {
        match capability {
            Capability::Failover => Some(format!(
                "{what} is for PostgreSQL clusters: CrateDB has no primary (every node takes reads and writes, and the masters elect the cluster's master themselves)"
            )),
            Capability::Backups => Some(format!(
                "{what} are not supported for cratedb clusters: Steward does not take CrateDB snapshots yet"
            )),
            Capability::Users => None,
        }
    }

    fn users(&self) -> Option<&dyn UsersApi> {
        Some(self)
    }
}

impl UsersApi for CrateDb {
    fn check_new(&self, request: &NewUser<'_>) -> Result<(), ApiError> {
        check_new_user(
            request.name,
            request.databases,
            request.superuser,
            request.createdb,
        )
    }

    fn entry(&self, request: &NewUser<'_>, secret: &str, key: &str) -> Result<Value, ApiError> {
        to_json(&new_user(request.name, secret, key))
    }

    fn secret_of(&self, entry: &Value) -> Option<(String, String)> {
        let user: CrateUser = serde_json::from_value(entry.clone()).ok()?;
        let r = user.password.secret_key_ref;
        Some((r.name, r.key))
    }

    fn info(&self, entry: &Value, status: Option<&Value>) -> Result<Value, ApiError> {
        let user: CrateUser = serde_json::from_value(entry.clone()).map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading a user: {e}"),
            )
        })?;
        user_info(&user, status)
    }

    fn delete_note(&self) -> &'static str {
        "; CrateDB keeps the user itself (Steward never drops users: applications may use them)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> CrateClusterSpec {
        let v = create_spec(&NewCluster {
            name: "demo",
            instances: 1,
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
        let plain = create_spec(&NewCluster {
            name: "c",
            instances: 2,
            version: Some("5.1.0"),
            storage: None,
            node_set: None,
            extra: None,
        })
        .unwrap();
        assert_eq!(plain["nodes"]["data"][0]["name"], DEFAULT_DATA_SET);
        assert_eq!(plain["cluster"]["version"], "5.1.0");
        // What a request cannot say is refused with the reason.
        let master = NewCluster {
            name: "c",
            instances: 2,
            version: None,
            storage: None,
            node_set: Some("master"),
            extra: None,
        };
        let e = format!("{:?}", create_spec(&master).unwrap_err());
        assert!(e.contains("masters"), "{e}");
        let long = "a".repeat(41);
        let too_long = NewCluster {
            name: &long,
            node_set: None,
            ..master
        };
        let e = format!("{:?}", create_spec(&too_long).unwrap_err());
        assert!(e.contains("spec.cluster.name"), "{e}");
        let extra = json!({"cluster": {"name": "short"}});
        let named = NewCluster {
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
