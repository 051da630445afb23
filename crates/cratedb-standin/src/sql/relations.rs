//! The relations a `SELECT` reads: CrateDB's system tables, as the cluster model shows them,
//! and user tables.
//!
//! Columns follow "System information"
//! (<https://cratedb.com/docs/crate/reference/en/latest/admin/system-information.html>) and
//! "Information schema" (`information_schema.tables`); only the columns listed here exist.

use serde_json::{Map, Value, json};

use super::error::{ErrorCode, SqlError};
use super::eval::{Relation, Row};
use crate::model::DataType as T;
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
    ("information_schema", "schemata"),
    ("information_schema", "columns"),
];

/// The schemas every cluster has (`information_schema.schemata`).
const BUILTIN_SCHEMAS: &[&str] = &["blob", "doc", "information_schema", "pg_catalog", "sys"];

/// Whether a name is a system relation (readable without privileges, also while the license
/// is violated).
pub fn is_system(parts: &[String]) -> bool {
    matches!(
        parts.first().map(String::as_str),
        Some("sys" | "information_schema" | "pg_catalog")
    ) && parts.len() == 2
}

fn relation(columns: &[(&str, T)], rows: Vec<Value>) -> Relation {
    Relation {
        columns: columns.iter().map(|(c, _)| (*c).to_owned()).collect(),
        types: columns
            .iter()
            .map(|(c, t)| ((*c).to_owned(), t.clone()))
            .collect(),
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
        // `SELECT` without `FROM`: one row without columns.
        [] => {
            return Ok(Relation {
                rows: vec![Row::new()],
                ..Relation::default()
            });
        }
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
                &[("id", T::Text), ("name", T::Text), ("master_node", T::Text), ("settings", T::Object), ("license", T::Object)],
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
            &[("id", T::Text), ("name", T::Text), ("hostname", T::Text), ("version", T::Object), ("attributes", T::Object)],
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
            &[("table_name", T::Text), ("schema_name", T::Text), ("id", T::Integer), ("partition_ident", T::Text), ("primary", T::Boolean), ("state", T::Text), ("routing_state", T::Text), ("relocating_node", T::Text), ("node", T::Object), ("num_docs", T::BigInt)],
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
            &[("table_name", T::Text), ("table_schema", T::Text), ("partition_ident", T::Text), ("health", T::Text), ("severity", T::Integer), ("missing_shards", T::BigInt), ("underreplicated_shards", T::BigInt)],
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
                &[("health", T::Text), ("severity", T::Integer), ("description", T::Text), ("pending_tasks", T::BigInt), ("missing_shards", T::BigInt), ("underreplicated_shards", T::BigInt)],
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
            &[("id", T::Integer), ("node_id", T::Text), ("severity", T::Integer), ("description", T::Text), ("passed", T::Boolean), ("acknowledged", T::Boolean)],
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
        ("sys", "checks") => relation(&[("id", T::Integer), ("severity", T::Integer), ("description", T::Text), ("passed", T::Boolean)], Vec::new()),
        ("sys", "users") => relation(
            &[("name", T::Text), ("superuser", T::Boolean), ("password", T::Text)],
            cluster
                .users()
                .map(|u| json!({"name": u.name, "superuser": u.superuser, "password": u.has_password().then_some("********")}))
                .collect(),
        ),
        ("sys", "privileges") => relation(
            &[("grantee", T::Text), ("grantor", T::Text), ("state", T::Text), ("type", T::Text), ("class", T::Text), ("ident", T::Text)],
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
            relation(&[("table_schema", T::Text), ("table_name", T::Text), ("table_type", T::Text), ("number_of_shards", T::Integer), ("number_of_replicas", T::Text)], rows)
        }
        ("information_schema", "schemata") => {
            let mut names: Vec<String> = BUILTIN_SCHEMAS.iter().map(|s| (*s).to_owned()).collect();
            names.extend(cluster.tables().map(|t| t.name.schema.clone()));
            names.sort();
            names.dedup();
            relation(&[("schema_name", T::Text)], names.into_iter().map(|n| json!({"schema_name": n})).collect())
        }
        ("information_schema", "columns") => relation(
            &[("table_schema", T::Text), ("table_name", T::Text), ("column_name", T::Text), ("ordinal_position", T::Integer), ("data_type", T::Text), ("is_nullable", T::Boolean)],
            cluster
                .tables()
                .flat_map(|t| {
                    t.columns.iter().enumerate().map(move |(i, c)| {
                        let ty = t.types.get(c).unwrap_or(&T::Undefined);
                        json!({"table_schema": t.name.schema, "table_name": t.name.name, "column_name": c,
                               "ordinal_position": i + 1, "data_type": ty.name(), "is_nullable": true})
                    })
                })
                .collect(),
        ),
        _ => match cluster.table(&name) {
            Some(t) => Relation {
                columns: t.columns.clone(),
                types: t.types.clone(),
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
