//! The SQL front: parses CrateDB statements ([`parse`]) and runs them against the cluster
//! model as a logged-in user ([`execute`]), answering CrateDB's result and error shapes.

mod error;
mod eval;
mod parse;
mod relations;

pub use error::{ErrorCode, SqlError};
pub use eval::Output;
pub use parse::{Secret, Statement, parse};

use serde_json::{Map, Value};
use sqlparser::ast;

use crate::model::{Cluster, Privilege, Replicas, TableName};

/// Shards of a table created without `CLUSTERED INTO n SHARDS`. CrateDB derives its default
/// from the number of data nodes; the stand-in uses a fixed 4.
pub const DEFAULT_SHARDS: u32 = 4;
/// `number_of_replicas` when not given: `0-1`, as CrateDB documents.
pub const DEFAULT_REPLICAS: Replicas = Replicas::Range {
    min: 0,
    max: Some(1),
};

/// What a statement returned: CrateDB's `cols`, `rows` and `rowcount`.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryResult {
    /// The statement's kind (`SELECT`, `CREATE`, …), as crash prints it.
    pub kind: &'static str,
    pub cols: Vec<String>,
    pub rows: Vec<Vec<Value>>,
    pub rowcount: i64,
}

impl QueryResult {
    fn count(kind: &'static str, rowcount: i64) -> Self {
        Self {
            kind,
            cols: Vec::new(),
            rows: Vec::new(),
            rowcount,
        }
    }
}

/// Parses and runs `sql` as `user` (already authenticated).
pub fn execute(
    cluster: &mut Cluster,
    user: &str,
    sql: &str,
    args: &[Value],
) -> Result<QueryResult, SqlError> {
    let stmt = parse(sql, args)?;
    let kind = stmt.kind();
    tracing::debug!(user, kind, "executing statement");
    match stmt {
        Statement::CreateUser { name, password } => {
            cluster.create_user(user, &name, password.as_ref().map(|s| s.0.as_str()))?;
            Ok(QueryResult::count(kind, 1))
        }
        Statement::AlterUserPassword { name, password } => {
            cluster.alter_user_password(user, &name, password.as_ref().map(|s| s.0.as_str()))?;
            Ok(QueryResult::count(kind, 1))
        }
        Statement::DropUser { name, if_exists } => {
            let dropped = cluster.drop_user(user, &name, if_exists)?;
            Ok(QueryResult::count(kind, i64::from(dropped)))
        }
        Statement::Grant {
            privileges,
            users,
            revoke,
        } => {
            let mut changed = 0;
            for u in &users {
                changed += cluster.grant(user, &privileges, u, revoke)?;
            }
            Ok(QueryResult::count(
                kind,
                i64::try_from(changed).unwrap_or(i64::MAX),
            ))
        }
        Statement::SetGlobal {
            persistent,
            settings,
        } => {
            for (key, value) in settings {
                cluster.set_global_as(user, persistent, &key, value)?;
            }
            Ok(QueryResult::count(kind, 1))
        }
        Statement::ResetGlobal { keys } => {
            for key in keys {
                cluster.reset_global_as(user, &key)?;
            }
            Ok(QueryResult::count(kind, 1))
        }
        Statement::SetLicense { key } => {
            cluster.require(user, Privilege::Al)?;
            cluster.set_license_key(&key.0)?;
            Ok(QueryResult::count(kind, 1))
        }
        Statement::CreateTable {
            name,
            if_not_exists,
            shards,
            replicas,
            columns,
        } => {
            cluster.ensure_writable()?;
            cluster.require(user, Privilege::Ddl)?;
            let created = cluster.create_table(
                name,
                shards.unwrap_or(DEFAULT_SHARDS),
                replicas.unwrap_or(DEFAULT_REPLICAS),
                columns,
                if_not_exists,
            )?;
            Ok(QueryResult::count(kind, i64::from(created)))
        }
        Statement::AlterTableReplicas { name, replicas } => {
            cluster.ensure_writable()?;
            cluster.require(user, Privilege::Ddl)?;
            cluster.set_replicas(&name, replicas)?;
            Ok(QueryResult::count(kind, -1))
        }
        Statement::DropTable { name, if_exists } => {
            cluster.ensure_writable()?;
            cluster.require(user, Privilege::Ddl)?;
            let dropped = cluster.drop_table(&name, if_exists)?;
            Ok(QueryResult::count(kind, i64::from(dropped)))
        }
        Statement::NoOp(kind) => Ok(QueryResult::count(kind, 0)),
        Statement::Query(q) => query(cluster, user, &q, args),
        Statement::Insert(i) => insert(cluster, user, &i, args),
        Statement::Update(u) => update(cluster, user, &u, args),
    }
}

fn query(
    cluster: &mut Cluster,
    user: &str,
    q: &ast::Query,
    args: &[Value],
) -> Result<QueryResult, SqlError> {
    let snapshot: &Cluster = cluster;
    let mut load = |parts: &[String]| {
        if !relations::is_system(parts) {
            snapshot.ensure_license()?;
            snapshot.require(user, Privilege::Dql)?;
        }
        relations::load(snapshot, parts)
    };
    let out = eval::select(q, args, &mut load)?;
    let rowcount = i64::try_from(out.rows.len()).unwrap_or(i64::MAX);
    Ok(QueryResult {
        kind: "SELECT",
        cols: out.cols,
        rows: out.rows,
        rowcount,
    })
}

fn table_name(parts: &[String]) -> Result<TableName, SqlError> {
    match parts {
        [t] => Ok(TableName::new("doc", t.clone())),
        [s, t] => Ok(TableName::new(s.clone(), t.clone())),
        _ => Err(SqlError::parse("invalid table name")),
    }
}

fn insert(
    cluster: &mut Cluster,
    user: &str,
    i: &ast::Insert,
    args: &[Value],
) -> Result<QueryResult, SqlError> {
    let ast::TableObject::TableName(name) = &i.table else {
        return Err(SqlError::unsupported("INSERT into a table function"));
    };
    let name = table_name(&eval::object_name(name))?;
    cluster.ensure_writable()?;
    cluster.require(user, Privilege::Dml)?;
    let table = cluster
        .table(&name)
        .ok_or_else(|| SqlError::from(crate::model::ModelError::TableUnknown(name.clone())))?;
    let columns: Vec<String> = if i.columns.is_empty() {
        table.columns.clone()
    } else {
        i.columns
            .iter()
            .map(|c| eval::object_name(c).join("."))
            .collect()
    };
    let Some(source) = &i.source else {
        return Err(SqlError::unsupported("INSERT without VALUES"));
    };
    let ast::SetExpr::Values(values) = source.body.as_ref() else {
        return Err(SqlError::unsupported("INSERT … SELECT"));
    };
    let mut rows = Vec::new();
    for tuple in &values.rows {
        let exprs: &[ast::Expr] = tuple;
        if exprs.len() != columns.len() {
            return Err(SqlError::parse(format!(
                "Number of target columns ({}) of insert statement doesn't match number of source columns ({})",
                columns.len(),
                exprs.len()
            )));
        }
        let mut row = Map::new();
        for (c, e) in columns.iter().zip(exprs) {
            row.insert(c.clone(), eval::eval(e, &Map::new(), args)?);
        }
        rows.push(row);
    }
    let n = cluster.insert_rows(&name, rows)?;
    Ok(QueryResult::count(
        "INSERT",
        i64::try_from(n).unwrap_or(i64::MAX),
    ))
}

/// `UPDATE sys.node_checks SET acknowledged = … [WHERE …]`, the only update the stand-in
/// models (node check acknowledgement).
fn update(
    cluster: &mut Cluster,
    user: &str,
    u: &ast::Update,
    args: &[Value],
) -> Result<QueryResult, SqlError> {
    let ast::TableFactor::Table { name, .. } = &u.table.relation else {
        return Err(SqlError::unsupported("UPDATE of this relation"));
    };
    let parts = eval::object_name(name);
    if parts != ["sys", "node_checks"] {
        return Err(SqlError::unsupported(
            "UPDATE of tables other than sys.node_checks",
        ));
    }
    cluster.ensure_license()?;
    cluster.require(user, Privilege::Al)?;
    let [assignment] = u.assignments.as_slice() else {
        return Err(SqlError::unsupported(
            "only `SET acknowledged = …` on sys.node_checks",
        ));
    };
    let target = match &assignment.target {
        ast::AssignmentTarget::ColumnName(n) => eval::object_name(n).join("."),
        ast::AssignmentTarget::Tuple(_) => String::new(),
    };
    if target != "acknowledged" {
        return Err(SqlError::unsupported(format!(
            "Column '{target}' of sys.node_checks is read-only"
        )));
    }
    let value = match eval::eval(&assignment.value, &Map::new(), args)? {
        Value::Bool(b) => b,
        _ => return Err(SqlError::parse("acknowledged must be a boolean")),
    };
    let relation = relations::load(cluster, &parts)?;
    let checks = cluster.node_checks();
    let mut updated = 0i64;
    for (row, check) in relation.rows.iter().zip(checks) {
        let matches = match &u.selection {
            Some(w) => eval::eval(w, row, args)? == Value::Bool(true),
            None => true,
        };
        if matches && cluster.set_check_acknowledged(check.id, &check.node_name, value)? {
            updated += 1;
        }
    }
    Ok(QueryResult::count("UPDATE", updated))
}

#[cfg(test)]
mod tests;
