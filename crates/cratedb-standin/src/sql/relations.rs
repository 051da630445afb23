//! The relations a `SELECT` reads: CrateDB's system tables, as the cluster model shows them,
//! and user tables.
//!
//! Columns follow "System information"
//! (<https://cratedb.com/docs/crate/reference/en/latest/admin/system-information.html>) and
//! "Information schema" (`information_schema.tables`); only the columns listed here exist.

use serde_json::{Map, Value, json};

use super::error::{ErrorCode, SqlError};
use super::eval::{Relation, Row};
use crate::model::{Cluster, TableName};

/// System tables the stand-in serves, as `(schema, name)`.
pub const SYSTEM_TABLES: &[(&str, &str)] = &[
    ("sys", "cluster"),
    ("sys", "nodes"),
    ("sys", "shards"),
    ("sys", "health"),
    ("sys", "cluster_health"),
    ("sys", "node_checks"),
    ("sys", "checks"),
    ("sys", "users"),
    ("sys", "privileges"),
    ("information_schema", "tables"),
];

/// Whether a name is a system relation (readable without privileges, also while the license
/// is violated).
pub fn is_system(parts: &[String]) -> bool {
    matches!(
        parts.first().map(String::as_str),
        Some("sys" | "information_schema" | "pg_catalog")
    ) && parts.len() == 2
}

fn relation(columns: &[&str], rows: Vec<Value>) -> Relation {
    Relation {
        columns: columns.iter().map(|c| (*c).to_owned()).collect(),
        rows: rows
            .into_iter()
            .map(|v| match v {
                Value::Object(m) => m,
                _ => Map::new(),
            })
            .collect(),
    }
}

/// Nests dotted setting keys into an object (`a.b = 1` → `{"a": {"b": 1}}`).
fn nest(settings: impl IntoIterator<Item = (String, Value)>) -> Value {
    let mut root = Map::new();
    for (key, value) in settings {
        let parts: Vec<&str> = key.split('.').collect();
        let mut cur = &mut root;
        for (i, p) in parts.iter().enumerate() {
            if i + 1 == parts.len() {
                cur.insert((*p).to_owned(), value.clone());
            } else {
                let entry = cur
                    .entry((*p).to_owned())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !entry.is_object() {
                    *entry = Value::Object(Map::new());
                }
                match entry {
                    Value::Object(m) => cur = m,
                    _ => break,
                }
            }
        }
    }
    Value::Object(root)
}

/// Loads a relation by its (schema-qualified) name.
pub fn load(cluster: &Cluster, parts: &[String]) -> Result<Relation, SqlError> {
    let name = match parts {
        [t] => TableName::new("doc", t.clone()),
        [s, t] => TableName::new(s.clone(), t.clone()),
        _ => {
            return Err(SqlError::parse(format!(
                "invalid relation name {}",
                parts.join(".")
            )));
        }
    };
    let node_ref = |n: &Option<String>| match n.as_ref().and_then(|n| cluster.node(n)) {
        Some(node) => json!({"id": node.id, "name": node.spec.name}),
        None => json!({"id": null, "name": null}),
    };
    Ok(match (name.schema.as_str(), name.name.as_str()) {
        ("sys", "cluster") => {
            let master_id = cluster.master().and_then(|m| cluster.node(m)).map(|n| n.id.clone());
            let license = match cluster.license() {
                crate::model::License::None => Value::Null,
                crate::model::License::Enterprise { issued_to, max_nodes } => {
                    json!({"issued_to": issued_to, "max_nodes": u64::try_from(*max_nodes).unwrap_or(u64::MAX), "expiry_date": null})
                }
            };
            relation(
                &["id", "name", "master_node", "settings", "license"],
                vec![json!({
                    "id": crate::model::node_id(&cluster.config().cluster_name),
                    "name": cluster.config().cluster_name,
                    "master_node": master_id,
                    "settings": nest(cluster.settings().effective()),
                    "license": license,
                })],
            )
        }
        ("sys", "nodes") => relation(
            &["id", "name", "hostname", "version", "attributes"],
            cluster
                .nodes()
                .map(|n| {
                    json!({
                        "id": n.id, "name": n.spec.name, "hostname": n.spec.name,
                        "version": {"number": n.spec.version},
                        "attributes": n.spec.attributes,
                    })
                })
                .collect(),
        ),
        ("sys", "shards") => relation(
            &["table_name", "schema_name", "id", "partition_ident", "primary", "state", "routing_state", "relocating_node", "node", "num_docs"],
            cluster
                .shards()
                .iter()
                .map(|s| {
                    let docs = cluster.table(&s.table).map_or(0, |t| {
                        let n = t.rows.len() as u64;
                        let shards = u64::from(t.number_of_shards.max(1));
                        n / shards + u64::from(u64::from(s.shard) < n % shards)
                    });
                    let relocating = s.relocating_node.as_ref().and_then(|n| cluster.node(n)).map(|n| n.id.clone());
                    json!({
                        "table_name": s.table.name, "schema_name": s.table.schema, "id": s.shard,
                        "partition_ident": "", "primary": s.primary,
                        "state": if s.state == crate::model::ShardState::Initializing { "RECOVERING" } else { s.state.as_str() },
                        "routing_state": s.state.as_str(), "relocating_node": relocating,
                        "node": node_ref(&s.node), "num_docs": docs,
                    })
                })
                .collect(),
        ),
        ("sys", "health") => relation(
            &["table_name", "table_schema", "partition_ident", "health", "severity", "missing_shards", "underreplicated_shards"],
            cluster
                .table_health()
                .into_iter()
                .map(|h| {
                    json!({
                        "table_name": h.table.name, "table_schema": h.table.schema, "partition_ident": null,
                        "health": h.health.as_str(), "severity": h.health.severity(),
                        "missing_shards": h.missing_shards, "underreplicated_shards": h.underreplicated_shards,
                    })
                })
                .collect(),
        ),
        ("sys", "cluster_health") => {
            let rows = cluster.table_health();
            let known = cluster.master().is_some();
            let sum = |f: fn(&crate::model::TableHealth) -> i64| if known { rows.iter().map(f).sum::<i64>() } else { -1 };
            let health = cluster.health();
            relation(
                &["health", "severity", "description", "pending_tasks", "missing_shards", "underreplicated_shards"],
                vec![json!({
                    "health": health.as_str(), "severity": health.severity(),
                    "description": if known { "" } else { "No master node elected" },
                    "pending_tasks": 0,
                    "missing_shards": sum(|h| h.missing_shards),
                    "underreplicated_shards": sum(|h| h.underreplicated_shards),
                })],
            )
        }
        ("sys", "node_checks") => relation(
            &["id", "node_id", "severity", "description", "passed", "acknowledged"],
            cluster
                .node_checks()
                .into_iter()
                .map(|c| {
                    json!({
                        "id": c.id, "node_id": c.node_id, "severity": c.severity,
                        "description": c.description, "passed": c.passed, "acknowledged": c.acknowledged,
                    })
                })
                .collect(),
        ),
        ("sys", "checks") => relation(&["id", "severity", "description", "passed"], Vec::new()),
        ("sys", "users") => relation(
            &["name", "superuser", "password"],
            cluster
                .users()
                .map(|u| json!({"name": u.name, "superuser": u.superuser, "password": u.has_password().then_some("********")}))
                .collect(),
        ),
        ("sys", "privileges") => relation(
            &["grantee", "grantor", "state", "type", "class", "ident"],
            cluster
                .users()
                .flat_map(|u| {
                    u.privileges.iter().map(move |p| {
                        json!({"grantee": u.name, "grantor": crate::model::SUPERUSER, "state": "GRANT",
                               "type": p.to_string(), "class": "CLUSTER", "ident": null})
                    })
                })
                .collect(),
        ),
        ("information_schema", "tables") => {
            let mut rows: Vec<Value> = SYSTEM_TABLES
                .iter()
                .map(|(s, t)| {
                    json!({"table_schema": s, "table_name": t, "table_type": "BASE TABLE",
                           "number_of_shards": null, "number_of_replicas": null})
                })
                .collect();
            rows.extend(cluster.tables().map(|t| {
                json!({"table_schema": t.name.schema, "table_name": t.name.name, "table_type": "BASE TABLE",
                       "number_of_shards": t.number_of_shards, "number_of_replicas": t.number_of_replicas.to_string()})
            }));
            relation(&["table_schema", "table_name", "table_type", "number_of_shards", "number_of_replicas"], rows)
        }
        _ => match cluster.table(&name) {
            Some(t) => Relation {
                columns: t.columns.clone(),
                rows: t
                    .rows
                    .iter()
                    .map(|r| {
                        let mut full: Row = t.columns.iter().map(|c| (c.clone(), Value::Null)).collect();
                        full.extend(r.clone());
                        full
                    })
                    .collect(),
            },
            None => {
                return Err(SqlError::new(ErrorCode::UnknownRelation, format!("RelationUnknown[Relation '{name}' unknown]")));
            }
        },
    })
}
