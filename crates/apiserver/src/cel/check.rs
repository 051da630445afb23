//! A light stand-in for the type checker a real server runs when a CRD is written: every
//! identifier must be a variable in scope (`self`, `oldSelf`, a comprehension's variables) or a
//! type name, and field selections on `self`/`oldSelf` (and on comprehension variables ranging
//! over their lists) must name fields of the schema. Anything whose schema is not known here
//! (map values reached by index, `x-kubernetes-preserve-unknown-fields`, function results) is
//! not checked. Types of operands are not checked.

use ::cel::common::ast::{EntryExpr, Expr, IdedExpr};
use serde_json::Value;

use super::value::escape;

/// Identifiers that name types.
const TYPE_NAMES: &[&str] = &[
    "int",
    "uint",
    "double",
    "string",
    "bool",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
    "optional_type",
];

/// What an expression's schema is, when known.
type Schema<'a> = Option<&'a Value>;

struct Checker<'a> {
    source: &'a str,
    offsets: &'a dyn Fn(u64) -> Option<u32>,
    /// Variables in scope, innermost last, with their schema when known.
    scope: Vec<(String, Schema<'a>)>,
    root: bool,
}

impl<'a> Checker<'a> {
    fn error(&self, id: u64, msg: &str) -> String {
        let offset = (self.offsets)(id).unwrap_or(0) as usize;
        let before: String = self.source.chars().take(offset).collect();
        let line = before.matches('\n').count() + 1;
        let col = before.chars().rev().take_while(|c| *c != '\n').count() + 1;
        format!("ERROR: <input>:{line}:{col}: {msg}")
    }

    /// The schema of field `field` of a value with schema `schema`; `Err` when it has none.
    fn field(&self, schema: &'a Value, field: &str, at_root: bool) -> Result<Schema<'a>, ()> {
        let embedded = schema.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true));
        if (at_root || embedded) && matches!(field, "apiVersion" | "kind" | "metadata") {
            return Ok(schema.get("properties").and_then(|p| p.get(field)));
        }
        if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
            return Ok(None);
        }
        if let Some(props) = schema.get("properties").and_then(Value::as_object)
            && let Some((_, sub)) = props
                .iter()
                .find(|(k, _)| escape(k).as_deref() == Some(field))
        {
            return Ok(Some(sub));
        }
        match schema.get("additionalProperties") {
            Some(a) if a.is_object() => Ok(Some(a)),
            Some(Value::Bool(true)) => Ok(None),
            _ if schema.get("x-kubernetes-int-or-string").is_some() => Ok(None),
            _ => Err(()),
        }
    }

    fn walk(&mut self, e: &IdedExpr) -> Result<Schema<'a>, String> {
        match &e.expr {
            Expr::Ident(name) => {
                if let Some((_, s)) = self.scope.iter().rev().find(|(n, _)| n == name) {
                    return Ok(*s);
                }
                if TYPE_NAMES.contains(&name.as_str()) {
                    return Ok(None);
                }
                Err(self.error(
                    e.id,
                    &format!("undeclared reference to '{name}' (in container '')"),
                ))
            }
            Expr::Select(s) => {
                let at_root = self.root
                    && matches!(&s.operand.expr, Expr::Ident(n) if n == "self" || n == "oldSelf");
                let Some(schema) = self.walk(&s.operand)? else {
                    return Ok(None);
                };
                self.field(schema, &s.field, at_root)
                    .map_err(|()| self.error(e.id, &format!("undefined field '{}'", s.field)))
            }
            Expr::Call(c) => {
                if let Some(t) = &c.target {
                    self.walk(t)?;
                }
                for a in &c.args {
                    self.walk(a)?;
                }
                Ok(None)
            }
            Expr::Comprehension(c) => {
                let range = self.walk(&c.iter_range)?;
                let item = range.and_then(|r| r.get("items"));
                self.walk(&c.accu_init)?;
                let depth = self.scope.len();
                self.scope.push((c.accu_var.clone(), None));
                match &c.iter_var2 {
                    // Two variables: index or key, then the value.
                    Some(v2) => {
                        self.scope.push((c.iter_var.clone(), None));
                        self.scope.push((v2.clone(), item));
                    }
                    None => self.scope.push((c.iter_var.clone(), item)),
                }
                let result = [&c.loop_cond, &c.loop_step, &c.result]
                    .into_iter()
                    .try_for_each(|x| self.walk(x).map(|_| ()));
                self.scope.truncate(depth);
                result.map(|()| None)
            }
            Expr::List(l) => {
                for x in &l.elements {
                    self.walk(x)?;
                }
                Ok(None)
            }
            Expr::Map(m) => {
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        self.walk(&me.key)?;
                        self.walk(&me.value)?;
                    }
                }
                Ok(None)
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        self.walk(&f.value)?;
                    }
                }
                Ok(None)
            }
            Expr::Literal(_) | Expr::Unspecified => Ok(None),
        }
    }
}

/// Checks `program` (compiled from `source`) as a rule on `schema`. `root`: the schema is the
/// resource's root; `optional_old`: `oldSelf` is an optional, whose fields are not checked.
pub fn check(
    program: &::cel::Program,
    source: &str,
    schema: &Value,
    root: bool,
    optional_old: bool,
) -> Result<(), String> {
    let info = program.source_info();
    let offsets = |id: u64| info.offset_for(id).map(|(start, _)| start);
    let mut checker = Checker {
        source,
        offsets: &offsets,
        scope: vec![
            ("self".into(), Some(schema)),
            ("oldSelf".into(), (!optional_old).then_some(schema)),
        ],
        root,
    };
    checker.walk(program.expression()).map(|_| ())
}
