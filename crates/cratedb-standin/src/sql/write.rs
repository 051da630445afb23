//! `INSERT`, `UPDATE` and `DELETE`.
//!
//! Rows of user tables follow "Inserting data", "Updating data" and "Deleting data"
//! (<https://cratedb.com/docs/crate/reference/en/latest/general/dml.html>): a written value is
//! converted to its column's type ([`DataType::coerce`]; a value that does not convert fails
//! the statement, code 4000); `UPDATE … SET col = expr [WHERE …]` and `DELETE FROM t [WHERE
//! …]` answer the number of rows they changed. Writes need `DML`, a master and every primary
//! of the table active. `UPDATE sys.node_checks SET acknowledged = …` acknowledges node
//! checks (`admin/system-information.html`, "Acknowledge failed checks").

use serde_json::{Map, Value};
use sqlparser::ast;

use super::eval::{self, Row};
use super::{QueryResult, Session, SqlError, relations};
use crate::model::{Cluster, DataType, ModelError, Privilege, Table, TableName};

fn table_name(session: &Session, parts: &[String]) -> Result<TableName, SqlError> {
    match parts {
        [t] => Ok(TableName::new(session.schema.clone(), t.clone())),
        [s, t] => Ok(TableName::new(s.clone(), t.clone())),
        _ => Err(SqlError::parse("invalid table name")),
    }
}

fn count(kind: &'static str, n: usize) -> QueryResult {
    QueryResult::count(kind, i64::try_from(n).unwrap_or(i64::MAX))
}

/// `value` as column `column` of `table` stores it.
fn coerce(table: &Table, column: &str, value: Value) -> Result<Value, SqlError> {
    let ty = table.types.get(column).unwrap_or(&DataType::Undefined);
    ty.coerce(value)
        .map_err(|e| SqlError::parse(format!("{e} (column '{column}')")))
}

/// A user table the session may write to.
fn writable<'c>(
    cluster: &'c mut Cluster,
    session: &Session,
    name: &TableName,
) -> Result<&'c Table, SqlError> {
    cluster.ensure_writable()?;
    cluster.require(&session.user, Privilege::Dml)?;
    cluster
        .table(name)
        .ok_or_else(|| SqlError::from(ModelError::TableUnknown(name.clone())))
}

pub(super) fn insert(
    cluster: &mut Cluster,
    session: &Session,
    i: &ast::Insert,
    args: &[Value],
) -> Result<QueryResult, SqlError> {
    let ast::TableObject::TableName(name) = &i.table else {
        return Err(SqlError::unsupported("INSERT into a table function"));
    };
    let name = table_name(session, &eval::object_name(name))?;
    let table = writable(cluster, session, &name)?;
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
            let value = eval::eval(e, &Map::new(), args)?;
            row.insert(c.clone(), coerce(table, c, value)?);
        }
        rows.push(row);
    }
    let n = cluster.insert_rows(&name, rows)?;
    Ok(count("INSERT", n))
}

/// The single table an `UPDATE` or `DELETE` names.
fn target(session: &Session, relation: &ast::TableFactor) -> Result<Vec<String>, SqlError> {
    match relation {
        ast::TableFactor::Table { name, .. } => {
            let parts = eval::object_name(name);
            Ok(match parts.as_slice() {
                [t] => vec![session.schema.clone(), t.clone()],
                _ => parts,
            })
        }
        _ => Err(SqlError::unsupported("UPDATE or DELETE of this relation")),
    }
}

/// Whether `row` matches an optional `WHERE`.
fn matches(selection: Option<&ast::Expr>, row: &Row, args: &[Value]) -> Result<bool, SqlError> {
    match selection {
        Some(w) => Ok(eval::eval(w, row, args)? == Value::Bool(true)),
        None => Ok(true),
    }
}

/// A user table's rows, every column present (NULL when never written).
fn full_rows(table: &Table) -> Vec<Row> {
    table
        .rows
        .iter()
        .map(|r| {
            let mut full: Row = table
                .columns
                .iter()
                .map(|c| (c.clone(), Value::Null))
                .collect();
            full.extend(r.clone());
            full
        })
        .collect()
}

pub(super) fn update(
    cluster: &mut Cluster,
    session: &Session,
    u: &ast::Update,
    args: &[Value],
) -> Result<QueryResult, SqlError> {
    let parts = target(session, &u.table.relation)?;
    if parts == ["sys", "node_checks"] {
        return acknowledge_checks(cluster, session, u, args);
    }
    let name = table_name(session, &parts)?;
    let table = writable(cluster, session, &name)?;
    let mut assignments = Vec::new();
    for a in &u.assignments {
        let column = match &a.target {
            ast::AssignmentTarget::ColumnName(n) => eval::object_name(n).join("."),
            ast::AssignmentTarget::Tuple(_) => {
                return Err(SqlError::unsupported("tuple assignments"));
            }
        };
        if !table.columns.contains(&column) {
            return Err(SqlError::new(
                super::ErrorCode::UnknownColumn,
                format!("ColumnUnknownException[Column {column} unknown]"),
            ));
        }
        assignments.push((column, &a.value));
    }
    let mut rows = Vec::new();
    let mut changed = 0;
    for row in full_rows(table) {
        if !matches(u.selection.as_ref(), &row, args)? {
            rows.push(row);
            continue;
        }
        let mut new = row.clone();
        for (column, expr) in &assignments {
            let value = eval::eval(expr, &row, args)?;
            new.insert(column.clone(), coerce(table, column, value)?);
        }
        rows.push(new);
        changed += 1;
    }
    cluster.replace_rows(&name, rows)?;
    Ok(count("UPDATE", changed))
}

pub(super) fn delete(
    cluster: &mut Cluster,
    session: &Session,
    d: &ast::Delete,
    args: &[Value],
) -> Result<QueryResult, SqlError> {
    let from = match &d.from {
        ast::FromTable::WithFromKeyword(t) | ast::FromTable::WithoutKeyword(t) => t,
    };
    let [t] = from.as_slice() else {
        return Err(SqlError::unsupported("DELETE from several tables"));
    };
    let name = table_name(session, &target(session, &t.relation)?)?;
    let table = writable(cluster, session, &name)?;
    let mut kept = Vec::new();
    let mut deleted = 0;
    for row in full_rows(table) {
        if matches(d.selection.as_ref(), &row, args)? {
            deleted += 1;
        } else {
            kept.push(row);
        }
    }
    cluster.replace_rows(&name, kept)?;
    Ok(count("DELETE", deleted))
}

/// `UPDATE sys.node_checks SET acknowledged = … [WHERE …]`.
fn acknowledge_checks(
    cluster: &mut Cluster,
    session: &Session,
    u: &ast::Update,
    args: &[Value],
) -> Result<QueryResult, SqlError> {
    let parts = ["sys".to_owned(), "node_checks".to_owned()];
    cluster.ensure_license()?;
    cluster.require(&session.user, Privilege::Al)?;
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
    let mut updated = 0;
    for (row, check) in relation.rows.iter().zip(checks) {
        if matches(u.selection.as_ref(), row, args)?
            && cluster.set_check_acknowledged(check.id, &check.node_name, value)?
        {
            updated += 1;
        }
    }
    Ok(count("UPDATE", updated))
}
