//! A small evaluator for `SELECT` over one relation: projections, `WHERE`, `GROUP BY` with
//! `count` / `sum` / `min` / `max` / `avg`, `ORDER BY`, `LIMIT` / `OFFSET`; and the scalar
//! expressions the operator's queries use (comparisons, `AND` / `OR` / `NOT`, `IN`, `= ANY`,
//! `IS [NOT] NULL`, casts, object subscripts such as `node['name']`).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde_json::{Map, Value};
use sqlparser::ast::{
    self, AccessExpr, BinaryOperator, Expr, FunctionArg, FunctionArgExpr, FunctionArguments,
    GroupByExpr, LimitClause, OrderByKind, SelectItem, SetExpr, Subscript, UnaryOperator,
};

use super::error::{ErrorCode, SqlError};
use super::parse::placeholder;
use crate::model::{DataType, parse_timestamp};

pub type Row = Map<String, Value>;

/// Where a row carries the session's user (`current_user`, `session_user`, `user`): a key no
/// column can have, added to every row a query reads.
pub const SESSION_USER_KEY: &str = "\u{0}current_user";
/// Where a row carries the session's default schema (`current_schema`).
pub const SESSION_SCHEMA_KEY: &str = "\u{0}current_schema";

/// Rows with their column order and the columns' types (a column without one is typed by
/// its values).
#[derive(Debug, Clone, Default)]
pub struct Relation {
    pub columns: Vec<String>,
    pub types: BTreeMap<String, DataType>,
    pub rows: Vec<Row>,
}

/// The result of a query: CrateDB's `cols`, `col_types` and `rows`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    pub cols: Vec<String>,
    pub types: Vec<DataType>,
    pub rows: Vec<Vec<Value>>,
}

/// An unquoted identifier folded to lower case, a quoted one as written.
pub fn ident_name(id: &ast::Ident) -> String {
    if id.quote_style.is_some() {
        id.value.clone()
    } else {
        id.value.to_lowercase()
    }
}

pub fn object_name(name: &ast::ObjectName) -> Vec<String> {
    name.0
        .iter()
        .map(|p| match p {
            ast::ObjectNamePart::Identifier(id) => ident_name(id),
            other => other.to_string(),
        })
        .collect()
}

/// Evaluates a scalar expression on one row.
pub fn eval(e: &Expr, row: &Row, args: &[Value]) -> Result<Value, SqlError> {
    Ok(match e {
        Expr::Identifier(id) => column(row, &ident_name(id))?,
        Expr::CompoundIdentifier(parts) => match parts.last() {
            Some(id) => column(row, &ident_name(id))?,
            None => Value::Null,
        },
        Expr::CompoundFieldAccess { root, access_chain } => {
            let mut v = eval(root, row, args)?;
            for access in access_chain {
                let key = match access {
                    AccessExpr::Subscript(Subscript::Index { index }) => eval(index, row, args)?,
                    AccessExpr::Dot(Expr::Identifier(id)) => Value::String(ident_name(id)),
                    other => return Err(SqlError::unsupported(format!("access {other}"))),
                };
                v = match (v, key) {
                    (Value::Object(mut o), Value::String(k)) => o.remove(&k).unwrap_or(Value::Null),
                    (Value::Array(a), Value::Number(i)) => i
                        .as_u64()
                        .and_then(|i| usize::try_from(i).ok())
                        .and_then(|i| a.get(i.wrapping_sub(1)).cloned())
                        .unwrap_or(Value::Null),
                    _ => Value::Null,
                };
            }
            v
        }
        Expr::Value(v) => literal(&v.value, args)?,
        Expr::Nested(e) => eval(e, row, args)?,
        Expr::UnaryOp {
            op: UnaryOperator::Not,
            expr,
        } => not(eval(expr, row, args)?),
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match eval(expr, row, args)? {
            Value::Number(n) => n
                .as_i64()
                .map(|i| Value::from(-i))
                .or_else(|| n.as_f64().map(|f| Value::from(-f)))
                .unwrap_or(Value::Null),
            _ => Value::Null,
        },
        Expr::IsNull(e) => Value::Bool(eval(e, row, args)?.is_null()),
        Expr::IsNotNull(e) => Value::Bool(!eval(e, row, args)?.is_null()),
        Expr::IsTrue(e) => Value::Bool(eval(e, row, args)? == Value::Bool(true)),
        Expr::IsFalse(e) => Value::Bool(eval(e, row, args)? == Value::Bool(false)),
        Expr::In {
            expr,
            target: ast::InTarget::List(list),
            negated,
            ..
        } => {
            let v = eval(expr, row, args)?;
            let mut found = false;
            for item in list {
                if compare(&v, &eval(item, row, args)?) == Some(Ordering::Equal) {
                    found = true;
                }
            }
            if v.is_null() {
                Value::Null
            } else {
                Value::Bool(found != *negated)
            }
        }
        Expr::AnyOp {
            left,
            compare_op,
            right,
            ..
        } => {
            let l = eval(left, row, args)?;
            match eval(right, row, args)? {
                Value::Array(items) => Value::Bool(
                    items
                        .iter()
                        .any(|i| cmp_op(compare_op, &l, i) == Value::Bool(true)),
                ),
                Value::Null => Value::Null,
                other => cmp_op(compare_op, &l, &other),
            }
        }
        Expr::Like {
            negated,
            expr,
            pattern,
            ..
        }
        | Expr::ILike {
            negated,
            expr,
            pattern,
            ..
        } => {
            let insensitive = matches!(e, Expr::ILike { .. });
            match (eval(expr, row, args)?, eval(pattern, row, args)?) {
                (Value::String(v), Value::String(p)) => {
                    let (v, p) = if insensitive {
                        (v.to_lowercase(), p.to_lowercase())
                    } else {
                        (v, p)
                    };
                    Value::Bool(super::functions::like(&v, &p) != *negated)
                }
                _ => Value::Null,
            }
        }
        Expr::Array(a) => Value::Array(
            a.elem
                .iter()
                .map(|e| eval(e, row, args))
                .collect::<Result<_, _>>()?,
        ),
        Expr::Cast {
            expr, data_type, ..
        } => cast(eval(expr, row, args)?, &data_type.to_string()),
        Expr::BinaryOp { left, op, right } => {
            let l = eval(left, row, args)?;
            match op {
                BinaryOperator::And => and(l, eval(right, row, args)?),
                BinaryOperator::Or => or(l, eval(right, row, args)?),
                BinaryOperator::Plus | BinaryOperator::Minus | BinaryOperator::Multiply => {
                    arith(op, &l, &eval(right, row, args)?)
                }
                op => cmp_op(op, &l, &eval(right, row, args)?),
            }
        }
        Expr::Function(f) if aggregate_name(f).is_none() => {
            super::functions::scalar_function(f, row, args)?
        }
        Expr::Function(_) => {
            return Err(SqlError::parse("aggregate functions are not allowed here"));
        }
        other => return Err(SqlError::unsupported(format!("expression {other}"))),
    })
}

pub(super) fn column(row: &Row, name: &str) -> Result<Value, SqlError> {
    let special = match name {
        "current_schema" => row.get(SESSION_SCHEMA_KEY),
        "current_user" | "session_user" => row.get(SESSION_USER_KEY),
        _ => None,
    };
    row.get(name).or(special).cloned().ok_or_else(|| {
        SqlError::new(
            ErrorCode::UnknownColumn,
            format!("ColumnUnknownException[Column {name} unknown]"),
        )
    })
}

fn literal(v: &ast::Value, args: &[Value]) -> Result<Value, SqlError> {
    Ok(match v {
        ast::Value::Number(n, _) => n
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| n.parse::<f64>().map(Value::from))
            .map_err(|_| SqlError::parse(format!("bad number {n}")))?,
        ast::Value::SingleQuotedString(s) | ast::Value::DoubleQuotedString(s) => {
            Value::String(s.clone())
        }
        ast::Value::DollarQuotedString(s) => Value::String(s.value.clone()),
        ast::Value::Boolean(b) => Value::Bool(*b),
        ast::Value::Null => Value::Null,
        ast::Value::Placeholder(p) => placeholder(p, args)?,
        other => return Err(SqlError::unsupported(format!("literal {other}"))),
    })
}

fn not(v: Value) -> Value {
    match v {
        Value::Bool(b) => Value::Bool(!b),
        _ => Value::Null,
    }
}

fn and(l: Value, r: Value) -> Value {
    match (l, r) {
        (Value::Bool(false), _) | (_, Value::Bool(false)) => Value::Bool(false),
        (Value::Bool(true), Value::Bool(true)) => Value::Bool(true),
        _ => Value::Null,
    }
}

fn or(l: Value, r: Value) -> Value {
    match (l, r) {
        (Value::Bool(true), _) | (_, Value::Bool(true)) => Value::Bool(true),
        (Value::Bool(false), Value::Bool(false)) => Value::Bool(false),
        _ => Value::Null,
    }
}

/// Compares two non-null values of comparable types.
pub fn compare(l: &Value, r: &Value) -> Option<Ordering> {
    match (l, r) {
        (Value::Number(a), Value::Number(b)) => a.as_f64()?.partial_cmp(&b.as_f64()?),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
        // CrateDB casts a string literal to the column's type; numbers in text compare as numbers.
        // A timestamp (milliseconds) compares with a date-time in text.
        (Value::Number(a), Value::String(b)) => a.as_f64()?.partial_cmp(&text_number(b)?),
        (Value::String(a), Value::Number(b)) => text_number(a)?.partial_cmp(&b.as_f64()?),
        _ => None,
    }
}

/// A number in text, or the milliseconds of a date-time in text.
fn text_number(text: &str) -> Option<f64> {
    text.trim()
        .parse::<f64>()
        .ok()
        .or_else(|| parse_timestamp(text, true).map(|ms| ms as f64))
}

fn cmp_op(op: &BinaryOperator, l: &Value, r: &Value) -> Value {
    if l.is_null() || r.is_null() {
        return Value::Null;
    }
    let Some(ord) = compare(l, r) else {
        return Value::Bool(matches!(op, BinaryOperator::NotEq));
    };
    Value::Bool(match op {
        BinaryOperator::Eq => ord == Ordering::Equal,
        BinaryOperator::NotEq => ord != Ordering::Equal,
        BinaryOperator::Lt => ord == Ordering::Less,
        BinaryOperator::LtEq => ord != Ordering::Greater,
        BinaryOperator::Gt => ord == Ordering::Greater,
        BinaryOperator::GtEq => ord != Ordering::Less,
        _ => return Value::Null,
    })
}

fn arith(op: &BinaryOperator, l: &Value, r: &Value) -> Value {
    match (l.as_i64(), r.as_i64()) {
        (Some(a), Some(b)) => match op {
            BinaryOperator::Plus => Value::from(a.wrapping_add(b)),
            BinaryOperator::Minus => Value::from(a.wrapping_sub(b)),
            _ => Value::from(a.wrapping_mul(b)),
        },
        _ => match (l.as_f64(), r.as_f64()) {
            (Some(a), Some(b)) => Value::from(match op {
                BinaryOperator::Plus => a + b,
                BinaryOperator::Minus => a - b,
                _ => a * b,
            }),
            _ => Value::Null,
        },
    }
}

/// `CAST(v AS ty)`: the value converted as a write to a column of the type would be; NULL
/// when it does not convert; unchanged for types the stand-in does not model.
fn cast(v: Value, ty: &str) -> Value {
    match DataType::from_sql(ty) {
        Some(t) => t.coerce(v).unwrap_or(Value::Null),
        None => v,
    }
}

pub(super) fn function_args(f: &ast::Function) -> Vec<&FunctionArgExpr> {
    match &f.args {
        FunctionArguments::List(l) => l
            .args
            .iter()
            .map(|a| match a {
                FunctionArg::Unnamed(e)
                | FunctionArg::Named { arg: e, .. }
                | FunctionArg::ExprNamed { arg: e, .. } => e,
            })
            .collect(),
        _ => Vec::new(),
    }
}

pub(super) fn function_name(f: &ast::Function) -> String {
    f.name.to_string().to_lowercase()
}

pub(super) fn aggregate_name(f: &ast::Function) -> Option<&'static str> {
    match function_name(f).as_str() {
        "count" => Some("count"),
        "sum" => Some("sum"),
        "min" => Some("min"),
        "max" => Some("max"),
        "avg" => Some("avg"),
        _ => None,
    }
}

fn is_aggregate(e: &Expr) -> bool {
    match e {
        Expr::Function(f) => aggregate_name(f).is_some(),
        Expr::Cast { expr, .. } | Expr::Nested(expr) => is_aggregate(expr),
        _ => false,
    }
}

/// Evaluates an expression over a group of rows: aggregates over all, others on the first.
fn eval_group(e: &Expr, rows: &[&Row], args: &[Value]) -> Result<Value, SqlError> {
    match e {
        Expr::Function(f) if aggregate_name(f).is_some() => {
            let kind = aggregate_name(f).unwrap_or("count");
            let arg = function_args(f).into_iter().next();
            let mut values = Vec::new();
            for r in rows {
                let v = match arg {
                    None | Some(FunctionArgExpr::Wildcard) => Value::Bool(true),
                    Some(FunctionArgExpr::Expr(e)) => eval(e, r, args)?,
                    Some(other) => {
                        return Err(SqlError::unsupported(format!("aggregate argument {other}")));
                    }
                };
                if !v.is_null() {
                    values.push(v);
                }
            }
            Ok(match kind {
                "count" => Value::from(values.len()),
                "min" => values
                    .into_iter()
                    .min_by(|a, b| compare(a, b).unwrap_or(Ordering::Equal))
                    .unwrap_or(Value::Null),
                "max" => values
                    .into_iter()
                    .max_by(|a, b| compare(a, b).unwrap_or(Ordering::Equal))
                    .unwrap_or(Value::Null),
                "sum" if values.is_empty() => Value::Null,
                "sum" if values.iter().all(|v| v.as_i64().is_some()) => {
                    Value::from(values.iter().filter_map(Value::as_i64).sum::<i64>())
                }
                "sum" => Value::from(values.iter().filter_map(Value::as_f64).sum::<f64>()),
                _ if values.is_empty() => Value::Null,
                _ => Value::from(
                    values.iter().filter_map(Value::as_f64).sum::<f64>() / values.len() as f64,
                ),
            })
        }
        Expr::Cast {
            expr, data_type, ..
        } => Ok(cast(eval_group(expr, rows, args)?, &data_type.to_string())),
        Expr::Nested(e) => eval_group(e, rows, args),
        other => match rows.first() {
            Some(r) => eval(other, r, args),
            None => Ok(Value::Null),
        },
    }
}

/// The output column name CrateDB shows for an expression.
fn output_name(e: &Expr) -> String {
    match e {
        Expr::Identifier(id) => ident_name(id),
        Expr::CompoundIdentifier(parts) => parts.last().map(ident_name).unwrap_or_default(),
        other => other.to_string(),
    }
}

/// Runs a `SELECT` against `load(schema_and_name)` (no joins, no sub-queries).
pub fn select(
    query: &ast::Query,
    args: &[Value],
    load: &mut dyn FnMut(&[String]) -> Result<Relation, SqlError>,
) -> Result<Output, SqlError> {
    let SetExpr::Select(s) = query.body.as_ref() else {
        return Err(SqlError::unsupported("only plain SELECT statements"));
    };
    let relation = match s.from.as_slice() {
        [] => load(&[])?,
        [t] if t.joins.is_empty() => match &t.relation {
            ast::TableFactor::Table { name, .. } => load(&object_name(name))?,
            _ => return Err(SqlError::unsupported("sub-queries in FROM")),
        },
        _ => return Err(SqlError::unsupported("joins")),
    };
    let mut rows = Vec::new();
    for r in &relation.rows {
        let keep = match &s.selection {
            Some(w) => eval(w, r, args)? == Value::Bool(true),
            None => true,
        };
        if keep {
            rows.push(r);
        }
    }
    // Projection as (name, expr); `*` expands to the relation's columns.
    let mut projection: Vec<(String, Expr)> = Vec::new();
    for item in &s.projection {
        match item {
            SelectItem::UnnamedExpr(e) => projection.push((output_name(e), e.clone())),
            SelectItem::ExprWithAlias { expr, alias } => {
                projection.push((ident_name(alias), expr.clone()))
            }
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                for c in &relation.columns {
                    projection.push((
                        c.clone(),
                        Expr::Identifier(ast::Ident::with_quote('"', c.clone())),
                    ));
                }
            }
            other => return Err(SqlError::unsupported(format!("select item {other}"))),
        }
    }
    let resolve = |e: &Expr| -> Expr {
        if let Expr::Value(v) = e
            && let ast::Value::Number(n, _) = &v.value
            && let Ok(i) = n.parse::<usize>()
            && let Some((_, p)) = projection.get(i.wrapping_sub(1))
        {
            return p.clone();
        }
        if let Expr::Identifier(id) = e
            && let Some((_, p)) = projection.iter().find(|(name, _)| *name == ident_name(id))
            && !relation.columns.contains(&ident_name(id))
        {
            return p.clone();
        }
        e.clone()
    };
    let group_exprs: Vec<Expr> = match &s.group_by {
        GroupByExpr::Expressions(exprs, _) => exprs.iter().map(resolve).collect(),
        GroupByExpr::All(_) => return Err(SqlError::unsupported("GROUP BY ALL")),
    };
    let grouped = !group_exprs.is_empty() || projection.iter().any(|(_, e)| is_aggregate(e));
    let groups: Vec<Vec<&Row>> = if grouped {
        let mut groups: Vec<(Vec<Value>, Vec<&Row>)> = Vec::new();
        for r in rows {
            let key = group_exprs
                .iter()
                .map(|e| eval(e, r, args))
                .collect::<Result<Vec<_>, _>>()?;
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, members)) => members.push(r),
                None => groups.push((key, vec![r])),
            }
        }
        if groups.is_empty() && group_exprs.is_empty() {
            groups.push((Vec::new(), Vec::new()));
        }
        groups.into_iter().map(|(_, m)| m).collect()
    } else {
        rows.into_iter().map(|r| vec![r]).collect()
    };
    let order: Vec<(Expr, bool)> = match &query.order_by {
        Some(ob) => match &ob.kind {
            OrderByKind::Expressions(exprs) => exprs
                .iter()
                .map(|o| {
                    (
                        resolve(&o.expr),
                        matches!(o.options.sort, Some(ast::OrderBySort::Desc)),
                    )
                })
                .collect(),
            OrderByKind::All(_) => return Err(SqlError::unsupported("ORDER BY ALL")),
        },
        None => Vec::new(),
    };
    let mut out: Vec<(Vec<Value>, Vec<Value>)> = Vec::new();
    for g in &groups {
        let values = projection
            .iter()
            .map(|(_, e)| eval_group(e, g, args))
            .collect::<Result<Vec<_>, _>>()?;
        let keys = order
            .iter()
            .map(|(e, _)| eval_group(e, g, args))
            .collect::<Result<Vec<_>, _>>()?;
        out.push((values, keys));
    }
    out.sort_by(|(_, a), (_, b)| {
        for (i, (_, desc)) in order.iter().enumerate() {
            let ord = match (&a[i], &b[i]) {
                // NULLs sort last ascending, first descending, as in CrateDB.
                (Value::Null, Value::Null) => Ordering::Equal,
                (Value::Null, _) => Ordering::Greater,
                (_, Value::Null) => Ordering::Less,
                (x, y) => compare(x, y).unwrap_or(Ordering::Equal),
            };
            let ord = if *desc { ord.reverse() } else { ord };
            if ord != Ordering::Equal {
                return ord;
            }
        }
        Ordering::Equal
    });
    let (mut offset, mut limit) = (0usize, usize::MAX);
    if let Some(LimitClause::LimitOffset {
        limit: l,
        offset: o,
        ..
    }) = &query.limit_clause
    {
        if let Some(l) = l {
            limit = eval(l, &Row::new(), args)?
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(usize::MAX);
        }
        if let Some(o) = o {
            offset = eval(&o.value, &Row::new(), args)?
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(0);
        }
    }
    let rows: Vec<Vec<Value>> = out
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|(v, _)| v)
        .collect();
    let types = projection
        .iter()
        .enumerate()
        .map(|(i, (_, e))| super::typing::output_type(e, &relation, args, &rows, i))
        .collect();
    Ok(Output {
        cols: projection.into_iter().map(|(n, _)| n).collect(),
        types,
        rows,
    })
}
