//! Compiling a CRD version's `x-kubernetes-validations` once, when the CRD is written: every
//! rule (and `messageExpression`) is parsed, checked for functions this server lacks, its cost
//! estimated and held to upstream's budgets (`cost`), and kept in a tree that mirrors the schema
//! but holds only the branches with rules. Failures are the CRD's `422` causes, with the path of
//! the rule inside the CRD.

use ::cel::Program;
use serde_json::{Value, json};

use super::cost::{self, Site};
use super::{check, library};
use crate::status::Cause;

/// `reason` of a rule: the kind of field error a failure becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Invalid,
    Forbidden,
    Required,
    Duplicate,
}

/// One compiled rule.
#[derive(Debug)]
pub struct Rule {
    pub source: String,
    pub program: Program,
    pub message: Option<String>,
    pub message_expression: Option<Program>,
    pub reason: Reason,
    /// `fieldPath` without its leading dot, appended to the node's path on failure.
    pub field_path: Option<String>,
    /// Whether the rule reads `oldSelf` (a transition rule).
    pub uses_old: bool,
    pub optional_old: bool,
}

/// A schema node with rules, or on the way to one.
#[derive(Debug, Default)]
pub struct Node {
    /// The schema at this node, for typing values (only where there are rules).
    pub schema: Value,
    pub rules: Vec<Rule>,
    pub properties: Vec<(String, Node)>,
    pub additional: Option<Box<Node>>,
    pub items: Option<Box<Node>>,
    /// `x-kubernetes-list-map-keys` of a `map` list: the only lists whose items correlate
    /// with old items.
    pub map_keys: Option<Vec<String>>,
}

impl Node {
    fn is_empty(&self) -> bool {
        self.rules.is_empty()
            && self.properties.is_empty()
            && self.additional.is_none()
            && self.items.is_none()
    }
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(String::from)
}

/// The rule as 1.36 prints it as the invalid value: Go's JSON of `apiextensions.ValidationRule`
/// (exported field names in declaration order, `null` for unset pointers, `<`, `>` and `&`
/// escaped as Go's encoder does); earlier releases printed a Go dump
/// (`apiextensions.ValidationRule{Rule:"…", …}`).
fn dump(rule: &Value) -> String {
    let go = |v: Value| {
        v.to_string()
            .replace('<', "\\u003c")
            .replace('>', "\\u003e")
            .replace('&', "\\u0026")
    };
    let string = |key: &str| go(Value::String(text(rule, key).unwrap_or_default()));
    let reason = text(rule, "reason").map_or(Value::Null, Value::String);
    let optional = rule
        .get("optionalOldSelf")
        .and_then(Value::as_bool)
        .map_or(Value::Null, Value::Bool);
    format!(
        "{{\"Rule\":{},\"Message\":{},\"MessageExpression\":{},\"Reason\":{},\"FieldPath\":{},\"OptionalOldSelf\":{}}}",
        string("rule"),
        string("message"),
        string("messageExpression"),
        go(reason),
        string("fieldPath"),
        go(optional),
    )
}

fn invalid_rule(field: String, rule: &Value, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid",
        field,
        message: format!("Invalid value: {}: {detail}", dump(rule)),
    }
}

/// What compiling a schema finds: the CRD's causes, and the estimated cost of its rules.
#[derive(Default)]
pub struct Findings {
    pub causes: Vec<Cause>,
    pub total: cost::Total,
}

/// Holds the estimated cost of the rule (or `messageExpression`) at `field` to the per-rule
/// budget, and counts it toward the schema's.
fn budget(field: &str, what: &str, estimate: u64, out: &mut Findings) {
    if estimate > cost::RULE_LIMIT {
        let message = cost::over_budget(
            &format!("estimated {what} cost"),
            estimate,
            cost::RULE_LIMIT,
        );
        out.causes.push(Cause::forbidden(field, &message));
    }
    out.total.observe(field, estimate);
}

/// Parses `source` and checks the functions it calls and the fields it selects.
fn parse(source: &str, site: Site<'_>) -> Result<(Program, bool), String> {
    let program = library::env().compile(source).map_err(|e| e.to_string())?;
    check::check(&program, source, site.schema, site.root, site.optional_old)?;
    let references = program.references();
    if let Some(why) = references
        .functions()
        .into_iter()
        .find_map(library::unsupported)
    {
        return Err(why);
    }
    let uses_old = references.has_variable("oldSelf");
    Ok((program, uses_old))
}

/// Checks a `fieldPath` against the schema: `.a.b` or `['a.b']` steps through properties and
/// map values; list indexes are not allowed (as upstream).
fn field_path(schema: &Value, path: &str) -> Result<String, String> {
    let mut node = schema;
    let mut rest = path;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (name, next) = if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']").ok_or("unterminated ['")?;
            (&r[..end], &r[end + 2..])
        } else if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            (&r[..end], &r[end..])
        } else {
            return Err(format!("expected [ or . at {rest}"));
        };
        if name.is_empty() {
            return Err("empty field name".into());
        }
        node = node
            .get("properties")
            .and_then(|p| p.get(name))
            .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()))
            .ok_or_else(|| format!("does not refer to a valid field: {name}"))?;
        out.push(name.to_string());
        rest = next;
    }
    Ok(out.join("."))
}

fn reason(rule: &Value) -> Result<Reason, ()> {
    match rule.get("reason").and_then(Value::as_str) {
        None | Some("FieldValueInvalid") => Ok(Reason::Invalid),
        Some("FieldValueForbidden") => Ok(Reason::Forbidden),
        Some("FieldValueRequired") => Ok(Reason::Required),
        Some("FieldValueDuplicate") => Ok(Reason::Duplicate),
        Some(_) => Err(()),
    }
}

/// Compiles the rules of one schema node. `path` is the node's path inside the CRD,
/// `correlatable` whether an old value can be found for it (not inside non-map lists).
fn rules(schema: &Value, path: &str, place: Place, out: &mut Findings) -> Vec<Rule> {
    let list = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut compiled = Vec::new();
    for (i, r) in list.iter().enumerate() {
        let at = format!("{path}.x-kubernetes-validations[{i}]");
        let source = text(r, "rule").unwrap_or_default();
        if source.trim().is_empty() {
            out.causes.push(Cause::required(&format!("{at}.rule")));
            continue;
        }
        let optional_old = r.get("optionalOldSelf").and_then(Value::as_bool) == Some(true);
        let site = Site {
            schema,
            root: place.root,
            optional_old,
        };
        let (program, uses_old) = match parse(&source, site) {
            Ok(p) => p,
            Err(e) => {
                let detail = format!("compilation failed: {e}");
                out.causes
                    .push(invalid_rule(format!("{at}.rule"), r, &detail));
                continue;
            }
        };
        // As upstream: the rule's cost, then its messageExpression's, then oldSelf's use.
        let times = place
            .cardinality
            .unwrap_or_else(|| cost::unbounded_cardinality(site));
        let rule_cost = cost::times(cost::estimate(program.expression(), site), times);
        budget(&format!("{at}.rule"), "rule", rule_cost, out);
        let mut failed = false;
        let message_expression = match text(r, "messageExpression") {
            None => None,
            Some(m) => match parse(&m, site) {
                Ok((p, _)) => {
                    let at = format!("{at}.messageExpression");
                    budget(
                        &at,
                        "messageExpression",
                        cost::estimate(p.expression(), site),
                        out,
                    );
                    Some(p)
                }
                Err(e) => {
                    let detail = format!("messageExpression compilation failed: {e}");
                    out.causes
                        .push(invalid_rule(format!("{at}.messageExpression"), r, &detail));
                    failed = true;
                    None
                }
            },
        };
        if uses_old && !place.correlatable {
            let detail = format!(
                "oldSelf cannot be used on the uncorrelatable portion of the schema within {path}"
            );
            out.causes
                .push(invalid_rule(format!("{at}.rule"), r, &detail));
            failed = true;
        }
        if failed {
            continue;
        }
        let Ok(reason) = reason(r) else {
            let allowed = [
                "FieldValueDuplicate",
                "FieldValueForbidden",
                "FieldValueInvalid",
                "FieldValueRequired",
            ]
            .map(|a| json!(a));
            out.causes.push(Cause::not_supported(
                &format!("{at}.reason"),
                r.get("reason").unwrap_or(&Value::Null),
                &allowed,
            ));
            continue;
        };
        let field_path = match text(r, "fieldPath") {
            None => None,
            Some(p) => match self::field_path(schema, &p) {
                Ok(p) => Some(p),
                Err(e) => {
                    let detail = format!("fieldPath must be a valid path: {e}");
                    out.causes.push(Cause::invalid(
                        &format!("{at}.fieldPath"),
                        &json!(p),
                        &detail,
                    ));
                    continue;
                }
            },
        };
        compiled.push(Rule {
            source,
            program,
            message: text(r, "message"),
            message_expression,
            reason,
            field_path,
            uses_old,
            optional_old,
        });
    }
    compiled
}

/// Where a schema node is: the resource's root or not, and whether old values can be found
/// for it (not inside lists other than `map` lists).
#[derive(Clone, Copy)]
pub struct Place {
    pub root: bool,
    pub correlatable: bool,
    /// How many times the node can occur in one object (`None`: unbounded), from the
    /// `maxItems`/`maxProperties` of the lists and maps above it.
    pub cardinality: Option<u64>,
}

/// Builds the rule tree under `schema` (at `path` inside the CRD).
pub fn node(schema: &Value, path: &str, place: Place, out: &mut Findings) -> Node {
    let mut n = Node {
        rules: rules(schema, path, place, out),
        ..Node::default()
    };
    let cardinality = place
        .cardinality
        .zip(cost::fan_out(schema))
        .map(|(n, each)| cost::times(n, each));
    let child = Place {
        root: false,
        correlatable: place.correlatable,
        cardinality,
    };
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, sub) in props {
            let child = node(sub, &format!("{path}.properties[{k}]"), child, out);
            if !child.is_empty() {
                n.properties.push((k.clone(), child));
            }
        }
    }
    if let Some(sub) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        let at = format!("{path}.additionalProperties");
        let child = node(sub, &at, child, out);
        n.additional = (!child.is_empty()).then(|| Box::new(child));
    }
    if let Some(sub) = schema.get("items").filter(|a| a.is_object()) {
        let is_map = schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map");
        if is_map {
            n.map_keys = Some(crate::meta::strings(
                schema.get("x-kubernetes-list-map-keys"),
            ));
        }
        let items = Place {
            root: false,
            correlatable: place.correlatable && is_map,
            cardinality,
        };
        let child = node(sub, &format!("{path}.items"), items, out);
        n.items = (!child.is_empty()).then(|| Box::new(child));
    }
    if !n.rules.is_empty() {
        n.schema = schema.clone();
    }
    n
}
