//! Evaluating compiled rules against an object (and, on update, the stored object), as the
//! real server does after defaulting and structural validation: `self` is the value at the
//! rule's node, `oldSelf` the value at the same path in the old object. Old values are found by
//! property name, map key, or (only in `map` lists) by the items' keys; a transition rule runs
//! only where an old value exists, unless it sets `optionalOldSelf`. A rule that does not read
//! `oldSelf` and fails on a value equal to its old value is ratcheted (not reported), as with
//! upstream's `CRDValidationRatcheting` (on by default since 1.30). No cost limit is applied.

use ::cel::common::types::CelOptional;
use ::cel::common::value::Val;
use ::cel::{Context, ExecutionError, Value as Cel};
use serde_json::{Value, json};

use super::compile::{Node, Reason, Rule};
use super::library;
use super::value;
use crate::status::{Cause, short_value};

/// Where a node is, in field-error notation (`spec.items[0]`, `spec.labels[app]`).
#[derive(Clone, Copy)]
pub struct At<'a> {
    pub path: &'a str,
    pub root: bool,
}

fn shown(path: &str) -> String {
    if path.is_empty() {
        "<nil>".into()
    } else {
        path.to_string()
    }
}

fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}.{child}")
    }
}

/// `rule.message` or the rule itself, as upstream names a rule in errors.
fn rule_text(rule: &Rule) -> String {
    match &rule.message {
        Some(m) if !m.trim().is_empty() => m.trim().to_string(),
        _ => rule.source.trim().to_string(),
    }
}

fn default_message(rule: &Rule) -> String {
    match &rule.message {
        Some(m) if !m.trim().is_empty() => m.trim().to_string(),
        _ => format!("failed rule: {}", rule.source.trim()),
    }
}

fn runtime_error(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::IndexOutOfBounds(i) => format!("index out of bounds: {i:?}"),
        ExecutionError::DivisionByZero(_) => "division by zero".into(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".into(),
        other => other.to_string(),
    }
}

fn context(self_val: &Cel, old: Option<&Cel>, rule: &Rule) -> Context<'static, 'static> {
    let mut ctx = Context::with_env(library::env());
    ctx.add_variable_from_value("self", self_val.clone());
    if rule.uses_old {
        if rule.optional_old {
            let opt = match old.cloned().map(Box::<dyn Val>::try_from) {
                Some(Ok(v)) => CelOptional::of(v),
                _ => CelOptional::none(),
            };
            ctx.add_variable_as_val("oldSelf", Box::new(opt));
        } else if let Some(o) = old {
            ctx.add_variable_from_value("oldSelf", o.clone());
        }
    }
    ctx
}

/// The failure message: `messageExpression` when it yields a usable string, else the default.
fn message(rule: &Rule, ctx: &Context<'_, '_>) -> String {
    if let Some(expr) = &rule.message_expression
        && let Ok(Cel::String(s)) = expr.execute(ctx)
    {
        let s = s.trim();
        if !s.is_empty() && !s.contains(['\n', '\r']) {
            return s.to_string();
        }
    }
    default_message(rule)
}

/// A failed rule as a cause. 1.36 shows the value the rule ran on when it is a scalar
/// (`Invalid value: "web-1": …`, `Invalid value: 2: …`) and leaves an object's or a list's out
/// (`Invalid value: port is immutable`), and likewise for `Duplicate value`; earlier releases
/// showed the schema type instead. Runtime errors still show the type (`Invalid value:
/// "object": no such key: …`).
fn failure(rule: &Rule, field: &str, value: &Value, msg: String) -> Cause {
    match rule.reason {
        Reason::Invalid if value.is_object() || value.is_array() => Cause {
            reason: "FieldValueInvalid",
            field: field.to_string(),
            message: format!("Invalid value: {msg}"),
        },
        Reason::Invalid => Cause::invalid(field, value, &msg),
        Reason::Forbidden => Cause::forbidden(field, &msg),
        Reason::Required => Cause {
            reason: "FieldValueRequired",
            field: field.to_string(),
            message: format!("Required value: {msg}"),
        },
        Reason::Duplicate => Cause {
            reason: "FieldValueDuplicate",
            field: field.to_string(),
            message: if value.is_object() || value.is_array() {
                "Duplicate value".to_string()
            } else {
                format!("Duplicate value: {}", short_value(value))
            },
        },
    }
}

fn run_rules(node: &Node, new: &Value, old: Option<&Value>, at: At<'_>, out: &mut Vec<Cause>) {
    let convert = |v: &Value| {
        if at.root {
            value::root(&node.schema, v)
        } else {
            value::to_cel(Some(&node.schema), v)
        }
    };
    let self_val = convert(new);
    let old_val = old.filter(|o| !o.is_null()).map(convert);
    let ty = node
        .schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let unchanged = old == Some(new);
    for rule in &node.rules {
        if rule.uses_old && old_val.is_none() && !rule.optional_old {
            continue;
        }
        let ctx = context(&self_val, old_val.as_ref(), rule);
        match rule.program.execute(&ctx) {
            Ok(Cel::Bool(true)) => {}
            Ok(Cel::Bool(false)) => {
                if unchanged && !rule.uses_old {
                    continue;
                }
                let field = match &rule.field_path {
                    Some(fp) => join(at.path, fp),
                    None => shown(at.path),
                };
                out.push(failure(rule, &field, new, message(rule, &ctx)));
            }
            Ok(other) => {
                let detail = format!(
                    "rule evaluated to {other:?}, not a bool, evaluating rule: {}",
                    rule_text(rule)
                );
                out.push(Cause::invalid(&shown(at.path), &json!(ty), &detail));
            }
            Err(ExecutionError::NoSuchOverload(_)) => {
                let detail = format!(
                    "'no such overload': call arguments did not match a supported operator, \
                     function or macro signature for rule: {}",
                    rule_text(rule)
                );
                out.push(Cause::invalid(&shown(at.path), &json!(ty), &detail));
            }
            Err(e) => {
                let detail = format!("{} evaluating rule: {}", runtime_error(&e), rule_text(rule));
                out.push(Cause::invalid(&shown(at.path), &json!(ty), &detail));
            }
        }
    }
}

/// The old item of a `map` list with the same keys as `item`.
fn correlate<'a>(keys: &[String], item: &Value, old: Option<&'a Value>) -> Option<&'a Value> {
    let old = old?.as_array()?;
    old.iter()
        .find(|o| keys.iter().all(|k| o.get(k) == item.get(k)))
}

/// Runs the rules of `node` and its descendants on `new` (with `old` at the same path).
pub fn walk(node: &Node, new: &Value, old: Option<&Value>, at: At<'_>, out: &mut Vec<Cause>) {
    if new.is_null() {
        return;
    }
    if !node.rules.is_empty() {
        run_rules(node, new, old, at, out);
    }
    match new {
        Value::Object(m) => {
            for (k, child) in &node.properties {
                if let Some(v) = m.get(k) {
                    let path = join(at.path, k);
                    let o = old.and_then(|o| o.get(k));
                    walk(
                        child,
                        v,
                        o,
                        At {
                            path: &path,
                            root: false,
                        },
                        out,
                    );
                }
            }
            if let Some(child) = &node.additional {
                for (k, v) in m {
                    let path = format!("{}[{k}]", at.path);
                    let o = old.and_then(|o| o.get(k));
                    walk(
                        child,
                        v,
                        o,
                        At {
                            path: &path,
                            root: false,
                        },
                        out,
                    );
                }
            }
        }
        Value::Array(items) => {
            if let Some(child) = &node.items {
                for (i, v) in items.iter().enumerate() {
                    let path = format!("{}[{i}]", at.path);
                    let o = node.map_keys.as_deref().and_then(|k| correlate(k, v, old));
                    walk(
                        child,
                        v,
                        o,
                        At {
                            path: &path,
                            root: false,
                        },
                        out,
                    );
                }
            }
        }
        _ => {}
    }
}
