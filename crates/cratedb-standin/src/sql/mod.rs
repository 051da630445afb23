//! The SQL front: parses CrateDB statements ([`parse`]) and runs them against the cluster
//! model as a logged-in user ([`execute`]), answering CrateDB's result and error shapes.

mod error;
mod eval;
mod functions;
mod parse;
mod parse_ddl;
mod relations;
mod typing;
mod write;

pub use error::{ErrorCode, SqlError};
pub use eval::Output;
pub use parse::{Secret, Statement, parse, parse_in};

use serde_json::Value;
use sqlparser::ast;

use crate::model::{Cluster, DataType, Privilege, Replicas};

/// Shards of a table created without `CLUSTERED INTO n SHARDS`. CrateDB derives its default
/// from the number of data nodes; the stand-in uses a fixed 4.
pub const DEFAULT_SHARDS: u32 = 4;
/// `number_of_replicas` when not given: `0-1`, as CrateDB documents.
pub const DEFAULT_REPLICAS: Replicas = Replicas::Range {
    min: 0,
    max: Some(1),
};

/// What a statement returned: CrateDB's `cols`, `col_types`, `rows` and `rowcount`.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryResult {
    /// The statement's kind (`SELECT`, `CREATE`, …), as crash prints it.
    pub kind: &'static str,
    pub cols: Vec<String>,
    /// The type of each column (see `typing.rs`).
    pub types: Vec<DataType>,
    pub rows: Vec<Vec<Value>>,
    pub rowcount: i64,
}

impl QueryResult {
    fn count(kind: &'static str, rowcount: i64) -> Self {
        Self {
            kind,
            cols: Vec::new(),
            types: Vec::new(),
            rows: Vec::new(),
            rowcount,
        }
    }
}

/// Who runs a statement, and in which default schema (`doc` unless the client names one:
/// HTTP's `Default-Schema` header, the PostgreSQL `database`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub user: String,
    pub schema: String,
}

impl Session {
    pub fn new(user: impl Into<String>, schema: Option<&str>) -> Self {
        Self {
            user: user.into(),
            schema: schema
                .filter(|s| !s.is_empty())
                .unwrap_or(DEFAULT_SCHEMA)
                .to_owned(),
        }
    }
}

/// The default schema: `doc`.
pub const DEFAULT_SCHEMA: &str = "doc";

/// Parses and runs `sql` as `user` (already authenticated) in the schema `doc`.
pub fn execute(
    cluster: &mut Cluster,
    user: &str,
    sql: &str,
    args: &[Value],
) -> Result<QueryResult, SqlError> {
    execute_in(cluster, &Session::new(user, None), sql, args)
}

/// Parses and runs `sql` in `session` (its user already authenticated).
pub fn execute_in(
    cluster: &mut Cluster,
    session: &Session,
    sql: &str,
    args: &[Value],
) -> Result<QueryResult, SqlError> {
    let user = session.user.as_str();
    let stmt = parse_in(sql, args, &session.schema)?;
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
        Statement::Refresh { tables } => {
            cluster.ensure_license()?;
            cluster.require(user, Privilege::Dql)?;
            for t in &tables {
                if cluster.table(t).is_none() {
                    return Err(crate::model::ModelError::TableUnknown(t.clone()).into());
                }
            }
            Ok(QueryResult::count(
                kind,
                i64::try_from(tables.len()).unwrap_or(i64::MAX),
            ))
        }
        Statement::NoOp(kind) => Ok(QueryResult::count(kind, 0)),
        Statement::Query(q) => query(cluster, session, &q, args),
        Statement::Insert(i) => write::insert(cluster, session, &i, args),
        Statement::Update(u) => write::update(cluster, session, &u, args),
        Statement::Delete(d) => write::delete(cluster, session, &d, args),
    }
}

/// A relation name with the session's schema for an unqualified one.
fn qualified(session: &Session, parts: &[String]) -> Vec<String> {
    match parts {
        [t] => vec![session.schema.clone(), t.clone()],
        other => other.to_vec(),
    }
}

fn query(
    cluster: &mut Cluster,
    session: &Session,
    q: &ast::Query,
    args: &[Value],
) -> Result<QueryResult, SqlError> {
    let snapshot: &Cluster = cluster;
    let user = session.user.as_str();
    let mut load = |parts: &[String]| {
        let parts = qualified(session, parts);
        if !parts.is_empty() && !relations::is_system(&parts) {
            snapshot.ensure_license()?;
            snapshot.require(user, Privilege::Dql)?;
        }
        let mut relation = relations::load(snapshot, &parts)?;
        for row in &mut relation.rows {
            row.insert(eval::SESSION_USER_KEY.to_owned(), Value::from(user));
            row.insert(
                eval::SESSION_SCHEMA_KEY.to_owned(),
                Value::from(session.schema.as_str()),
            );
        }
        Ok(relation)
    };
    let out = eval::select(q, args, &mut load)?;
    let rowcount = i64::try_from(out.rows.len()).unwrap_or(i64::MAX);
    Ok(QueryResult {
        kind: "SELECT",
        cols: out.cols,
        types: out.types,
        rows: out.rows,
        rowcount,
    })
}

#[cfg(test)]
mod tests;
