//! The types of a query's output columns: CrateDB answers them as HTTP `col_types` and as
//! the PostgreSQL `RowDescription`'s type OIDs.
//!
//! A column that names a relation's column has that column's type; a cast its target; a
//! literal, an aggregate or a comparison the type CrateDB gives it (an integer literal is an
//! `integer`, `count` a `bigint`, `avg` a `double precision`, a comparison a `boolean`). What
//! the stand-in cannot type so (object subscripts, columns of types it does not model) is
//! typed by its first non-NULL value, and is `undefined` without one.

use serde_json::Value;
use sqlparser::ast::{self, BinaryOperator, Expr, FunctionArgExpr, UnaryOperator};

use super::eval::{Relation, aggregate_name, function_args, function_name, ident_name};
use crate::model::DataType;

/// The type of output column `index`, computed by `e`, over `rows`.
pub fn output_type(
    e: &Expr,
    relation: &Relation,
    args: &[Value],
    rows: &[Vec<Value>],
    index: usize,
) -> DataType {
    static_type(e, relation, args)
        .filter(|t| *t != DataType::Undefined)
        .unwrap_or_else(|| {
            rows.iter()
                .filter_map(|r| r.get(index))
                .map(DataType::of_value)
                .find(|t| *t != DataType::Undefined)
                .unwrap_or(DataType::Undefined)
        })
}

fn column_type(relation: &Relation, name: &str) -> Option<DataType> {
    match name {
        _ if relation.types.contains_key(name) => relation.types.get(name).cloned(),
        "current_schema" | "current_user" | "session_user"
            if !relation.columns.iter().any(|c| c == name) =>
        {
            Some(DataType::Text)
        }
        _ => None,
    }
}

fn first_arg_type(f: &ast::Function, relation: &Relation, args: &[Value]) -> Option<DataType> {
    match function_args(f).first() {
        Some(FunctionArgExpr::Expr(e)) => static_type(e, relation, args),
        _ => None,
    }
}

/// The type of `e` known without evaluating it; `None` when only values tell.
pub fn static_type(e: &Expr, relation: &Relation, args: &[Value]) -> Option<DataType> {
    match e {
        Expr::Identifier(id) => column_type(relation, &ident_name(id)),
        Expr::CompoundIdentifier(parts) => parts
            .last()
            .and_then(|id| column_type(relation, &ident_name(id))),
        Expr::Value(v) => match &v.value {
            ast::Value::Number(n, _) => Some(match n.parse::<i64>() {
                Ok(i) if i32::try_from(i).is_ok() => DataType::Integer,
                Ok(_) => DataType::BigInt,
                Err(_) => DataType::Double,
            }),
            ast::Value::SingleQuotedString(_)
            | ast::Value::DoubleQuotedString(_)
            | ast::Value::DollarQuotedString(_) => Some(DataType::Text),
            ast::Value::Boolean(_) => Some(DataType::Boolean),
            ast::Value::Placeholder(p) => p
                .trim_start_matches('$')
                .parse::<usize>()
                .ok()
                .and_then(|i| args.get(i.wrapping_sub(1)))
                .map(DataType::of_value),
            _ => None,
        },
        Expr::Nested(e) => static_type(e, relation, args),
        Expr::Cast { data_type, .. } => DataType::from_sql(&data_type.to_string()),
        Expr::UnaryOp {
            op: UnaryOperator::Not,
            ..
        }
        | Expr::IsNull(_)
        | Expr::IsNotNull(_)
        | Expr::IsTrue(_)
        | Expr::IsFalse(_)
        | Expr::In { .. }
        | Expr::AnyOp { .. }
        | Expr::Like { .. }
        | Expr::ILike { .. } => Some(DataType::Boolean),
        Expr::UnaryOp { expr, .. } => static_type(expr, relation, args),
        Expr::BinaryOp { left, op, right } => match op {
            BinaryOperator::Plus | BinaryOperator::Minus | BinaryOperator::Multiply => {
                let l = static_type(left, relation, args)?;
                let r = static_type(right, relation, args)?;
                Some(l.widen(r))
            }
            BinaryOperator::Divide | BinaryOperator::Modulo => None,
            _ => Some(DataType::Boolean),
        },
        Expr::Function(f) => {
            let name = function_name(f);
            match aggregate_name(f) {
                Some("count") => Some(DataType::BigInt),
                Some("avg") => Some(DataType::Double),
                Some("sum") => match first_arg_type(f, relation, args)? {
                    DataType::Real | DataType::Double => Some(DataType::Double),
                    _ => Some(DataType::BigInt),
                },
                Some(_) => first_arg_type(f, relation, args),
                None => match name.trim_start_matches("pg_catalog.") {
                    "lower" | "upper" | "current_user" | "session_user" | "user"
                    | "current_schema" | "current_database" => Some(DataType::Text),
                    "array_length" => Some(DataType::Integer),
                    "coalesce" => first_arg_type(f, relation, args),
                    _ => None,
                },
            }
        }
        _ => None,
    }
}
