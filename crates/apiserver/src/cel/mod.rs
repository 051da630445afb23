//! CRD validation rules (`x-kubernetes-validations`) written in CEL, compiled once per CRD
//! version when the CRD is written (`compile`) and evaluated on every write of a custom
//! resource and of its `/status` (`validate`), with the `cel` crate as the interpreter.
//! `library` says which functions exist; `value` how JSON becomes CEL values; `eval` how
//! rules are run and old values correlated; `cost` what a rule is estimated to cost, held to
//! upstream's budgets when the CRD is written.

mod check;
mod compile;
mod cost;
mod eval;
mod library;
mod value;

#[cfg(test)]
mod tests;

use serde_json::Value;

use crate::status::Cause;

/// The compiled rules of one CRD version's schema.
#[derive(Debug)]
pub struct Validations {
    root: compile::Node,
}

/// Compiles the rules of `schema` (the `openAPIV3Schema` found at `path` inside the CRD).
/// `Ok(None)`: the schema has no rules. `Err`: the CRD's causes, one per bad rule.
pub fn compile(schema: &Value, path: &str) -> Result<Option<Validations>, Vec<Cause>> {
    let mut out = compile::Findings::default();
    let place = compile::Place {
        root: true,
        correlatable: true,
        cardinality: Some(1),
    };
    let root = compile::node(schema, path, place, &mut out);
    let mut causes = out.causes;
    causes.extend(out.total.causes(path));
    if !causes.is_empty() {
        return Err(causes);
    }
    if root.rules.is_empty()
        && root.properties.is_empty()
        && root.additional.is_none()
        && root.items.is_none()
    {
        return Ok(None);
    }
    Ok(Some(Validations { root }))
}

/// The reasons of structural errors after which upstream does not run rules.
const BLOCKING: &[&str] = &[
    "FieldValueNotSupported",
    "FieldValueRequired",
    "FieldValueTooLong",
    "FieldValueTooMany",
    "FieldValueTypeInvalid",
];

/// Runs the rules on `obj` (and `old`, the stored object, on updates). `earlier` are the
/// causes structural validation found: after a blocking one, rules are not run and one cause
/// says so, as upstream.
pub fn validate(
    v: &Validations,
    obj: &Value,
    old: Option<&Value>,
    earlier: &[Cause],
) -> Vec<Cause> {
    if earlier.iter().any(|c| BLOCKING.contains(&c.reason)) {
        return vec![Cause {
            reason: "FieldValueInvalid",
            field: "<nil>".into(),
            message: "Invalid value: \"null\": some validation rules were not checked because \
                      the object was invalid; correct the existing errors to complete validation"
                .into(),
        }];
    }
    let mut out = Vec::new();
    let at = eval::At {
        path: "",
        root: true,
    };
    eval::walk(&v.root, obj, old, at, &mut out);
    out
}
