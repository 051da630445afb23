//! Validation of `metadata` common to every kind: name format per kind (`NameRule`), label keys
//! and values, annotation size, and the `generateName` expansion. Kind-specific validation of
//! spec fields is not done for built-in kinds (see the docs).

use serde_json::Value;

use crate::meta;
use crate::registry::NameRule;
use crate::status::Cause;

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_label)
}

pub fn check_name(rule: NameRule, name: &str) -> Option<String> {
    match rule {
        NameRule::Subdomain if !is_subdomain(name) => Some(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".into(),
        ),
        NameRule::Label if !is_label(name) => Some(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character".into(),
        ),
        NameRule::PathSegment if name == "." || name == ".." || name.contains('/') || name.contains('%') => {
            Some("may not be '.' or '..' and may not contain '/' or '%'".into())
        }
        _ => None,
    }
}

fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    name_ok && prefix.is_none_or(is_subdomain)
}

fn is_label_value(s: &str) -> bool {
    s.is_empty()
        || (s.len() <= 63
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// Validates name, labels and annotations of a complete object.
pub fn validate(rule: NameRule, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    match meta::name(obj) {
        None => causes.push(Cause::required("metadata.name")),
        Some(n) => {
            if let Some(why) = check_name(rule, n) {
                causes.push(Cause::invalid(
                    "metadata.name",
                    &Value::String(n.into()),
                    why.as_str(),
                ));
            }
        }
    }
    if let Some(labels) = meta::meta(obj).and_then(|m| m.get("labels")) {
        match labels.as_object() {
            Some(m) => {
                for (k, v) in m {
                    if !is_qualified_name(k) {
                        causes.push(Cause::invalid("metadata.labels", &Value::String(k.clone()), "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
                    }
                    match v.as_str() {
                        Some(s) if is_label_value(s) => {}
                        _ => causes.push(Cause::invalid("metadata.labels", v, "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")),
                    }
                }
            }
            None if !labels.is_null() => {
                causes.push(Cause::type_invalid("metadata.labels", labels, "object"))
            }
            None => {}
        }
    }
    if let Some(ann) = meta::meta(obj)
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
    {
        let total: usize = ann
            .iter()
            .map(|(k, v)| k.len() + v.as_str().map_or(usize::MAX / 4, str::len))
            .sum();
        if total > 256 * 1024 {
            causes.push(Cause {
                reason: "FieldValueTooLong",
                field: "metadata.annotations".into(),
                message: "Too long: must have at most 262144 bytes".into(),
            });
        }
        if ann.values().any(|v| !v.is_string()) {
            causes.push(Cause::invalid(
                "metadata.annotations",
                &Value::Null,
                "annotation values must be strings",
            ));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_and_labels() {
        assert!(check_name(NameRule::Subdomain, "a.b-c").is_none());
        assert!(check_name(NameRule::Subdomain, "A").is_some());
        assert!(check_name(NameRule::Label, "a.b").is_some());
        assert!(check_name(NameRule::PathSegment, "system:x").is_none());
        let ok =
            json!({"metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "x", "e": ""}}});
        assert!(validate(NameRule::Subdomain, &ok).is_empty());
        let bad = json!({"metadata": {"name": "a", "labels": {"-x": "y", "k": "white space"}}});
        assert_eq!(validate(NameRule::Subdomain, &bad).len(), 2);
        assert_eq!(validate(NameRule::Subdomain, &json!({})).len(), 1);
    }
}

/// A `metadata` field whose JSON type the Go type cannot hold: (field, JSON type, Go type). Go's
/// decoder refuses such a body before anything else looks at it; YAML 1.1 bodies meet this
/// often (`name: y` is a boolean).
pub fn wrong_type(obj: &Value) -> Option<(String, &'static str, &'static str)> {
    fn json_type(v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }
    let md = obj.get("metadata")?.as_object()?;
    for field in [
        "name",
        "generateName",
        "namespace",
        "resourceVersion",
        "uid",
    ] {
        if let Some(v) = md.get(field).filter(|v| !v.is_null() && !v.is_string()) {
            return Some((field.to_string(), json_type(v), "string"));
        }
    }
    for field in ["labels", "annotations"] {
        match md.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                if let Some((key, v)) = map.iter().find(|(_, v)| !v.is_string()) {
                    return Some((format!("{field}.{key}"), json_type(v), "string"));
                }
            }
            Some(v) => return Some((field.to_string(), json_type(v), "map[string]string")),
        }
    }
    None
}

#[cfg(test)]
mod type_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn metadata_of_the_wrong_json_type_is_found() {
        assert_eq!(
            wrong_type(&json!({"metadata": {"name": "a", "labels": {"x": "y"}}})),
            None
        );
        assert_eq!(
            wrong_type(&json!({"metadata": {"name": true}})),
            Some(("name".into(), "bool", "string"))
        );
        assert_eq!(
            wrong_type(&json!({"metadata": {"name": "a", "labels": {"on": true}}})),
            Some(("labels.on".into(), "bool", "string"))
        );
        assert_eq!(
            wrong_type(&json!({"metadata": {"annotations": ["a"]}})),
            Some(("annotations".into(), "array", "map[string]string"))
        );
    }
}
