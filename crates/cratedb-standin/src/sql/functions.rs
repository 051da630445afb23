//! Scalar functions and `LIKE`: `lower`, `upper`, `coalesce`, `array_length`, and the session
//! functions CrateDB's clients ask for on connect — `current_user` (also `session_user`,
//! `user`), `current_schema` (also `current_schema()`) and `current_database()` (`crate`)
//! (<https://cratedb.com/docs/crate/reference/en/latest/general/builtins/scalar-functions.html>).

use serde_json::Value;
use sqlparser::ast::{self, FunctionArgExpr};

use super::error::SqlError;
use super::eval::{Row, column, eval, function_args, function_name};

/// SQL `LIKE`: `%` any run of characters, `_` one character, `\\` escapes.
pub(super) fn like(value: &str, pattern: &str) -> bool {
    let v: Vec<char> = value.chars().collect();
    let p: Vec<char> = pattern.chars().collect();
    fn matches(v: &[char], p: &[char]) -> bool {
        match p.split_first() {
            None => v.is_empty(),
            Some(('%', rest)) => (0..=v.len()).any(|i| matches(&v[i..], rest)),
            Some(('_', rest)) => !v.is_empty() && matches(&v[1..], rest),
            Some(('\\', rest)) if !rest.is_empty() => {
                v.first() == rest.first() && matches(&v[1..], &rest[1..])
            }
            Some((c, rest)) => v.first() == Some(c) && matches(&v[1..], rest),
        }
    }
    matches(&v, &p)
}

pub(super) fn scalar_function(
    f: &ast::Function,
    row: &Row,
    args: &[Value],
) -> Result<Value, SqlError> {
    let name = function_name(f);
    let mut values = Vec::new();
    for a in function_args(f) {
        match a {
            FunctionArgExpr::Expr(e) => values.push(eval(e, row, args)?),
            _ => return Err(SqlError::unsupported(format!("argument of {name}"))),
        }
    }
    Ok(match (name.as_str(), values.as_slice()) {
        ("lower", [Value::String(s)]) => Value::String(s.to_lowercase()),
        ("upper", [Value::String(s)]) => Value::String(s.to_uppercase()),
        ("coalesce", vals) => vals
            .iter()
            .find(|v| !v.is_null())
            .cloned()
            .unwrap_or(Value::Null),
        ("array_length", [Value::Array(a), _]) => Value::from(a.len()),
        ("current_user" | "session_user" | "user", []) => column(row, "current_user")?,
        ("current_schema" | "pg_catalog.current_schema", []) => column(row, "current_schema")?,
        ("current_database" | "pg_catalog.current_database", []) => Value::from("crate"),
        (_, _) => return Err(SqlError::unsupported(format!("function {name}"))),
    })
}
