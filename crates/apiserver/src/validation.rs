//! Structural-schema processing of custom resources against their CRD's `openAPIV3Schema`, in
//! the real server's order: drop `null`s of non-nullable fields, apply `default`s, prune unknown
//! fields (unless `x-kubernetes-preserve-unknown-fields`), then validate types, `required`,
//! `enum`, numeric bounds, `multipleOf`, string lengths, `pattern`, item and property counts,
//! `uniqueItems`, `x-kubernetes-int-or-string` and `allOf`/`anyOf`/`oneOf`/`not`.
//! Not enforced: `format` and `x-kubernetes-list-type` uniqueness of keys. CEL
//! `x-kubernetes-validations` run after this, in `cel`. `metadata` is validated by `objmeta`.

use serde_json::{Map, Value};

use crate::status::Cause;

/// Defaults, prunes and validates `obj` in place; returns the validation failures.
pub fn process(schema: &Value, obj: &mut Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Value::Object(root) = obj else {
        causes.push(Cause::type_invalid("", obj, "object"));
        return causes;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let preserve = preserves(schema);
    let keys: Vec<String> = root.keys().cloned().collect();
    for k in keys {
        if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match props.and_then(|p| p.get(&k)) {
            Some(sub) => {
                if let Some(v) = root.get_mut(&k) {
                    if v.is_null() && !nullable(sub) {
                        root.remove(&k);
                        continue;
                    }
                    walk(sub, v, &k, &mut causes, true);
                }
            }
            None if !preserve => {
                root.remove(&k);
            }
            None => {}
        }
    }
    apply_defaults(schema, root, "", &mut causes);
    for r in required(schema) {
        if !root.contains_key(&r) {
            causes.push(Cause::required(&r));
        }
    }
    causes
}

fn preserves(s: &Value) -> bool {
    s.get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

fn nullable(s: &Value) -> bool {
    s.get("nullable").and_then(Value::as_bool) == Some(true)
}

fn required(s: &Value) -> Vec<String> {
    crate::meta::strings(s.get("required"))
}

fn child_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

fn apply_defaults(schema: &Value, m: &mut Map<String, Value>, path: &str, causes: &mut Vec<Cause>) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (k, sub) in props {
        if m.contains_key(k) {
            continue;
        }
        if let Some(d) = sub.get("default") {
            let mut v = d.clone();
            walk(sub, &mut v, &child_path(path, k), causes, true);
            m.insert(k.clone(), v);
        }
    }
}

fn is_integer(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

fn type_ok(ty: &str, v: &Value) -> bool {
    match ty {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => is_integer(v),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        _ => true,
    }
}

/// `mutate`: whether to prune and default (false inside `anyOf`/`oneOf`/`not` checks).
fn walk(schema: &Value, v: &mut Value, path: &str, causes: &mut Vec<Cause>, mutate: bool) {
    if v.is_null() {
        if !nullable(schema) && schema.get("type").is_some() {
            let ty = schema
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("object");
            causes.push(Cause::type_invalid(path, v, ty));
        }
        return;
    }
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    if int_or_string {
        if !(is_integer(v) || v.is_string()) {
            causes.push(Cause::type_invalid(path, v, "integer or string"));
            return;
        }
    } else if let Some(ty) = schema.get("type").and_then(Value::as_str)
        && !type_ok(ty, v)
    {
        causes.push(Cause::type_invalid(path, v, ty));
        return;
    }
    match v {
        Value::Object(m) => walk_object(schema, m, path, causes, mutate),
        Value::Array(items) => {
            let n = items.len() as u64;
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && n > max
            {
                causes.push(Cause {
                    reason: "FieldValueTooMany",
                    field: path.into(),
                    message: format!("Too many: {n}: must have at most {max} items"),
                });
            }
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && n < min
            {
                causes.push(Cause::invalid(
                    path,
                    &Value::from(n),
                    &format!("{path} in body should have at least {min} items"),
                ));
            }
            if schema.get("uniqueItems").and_then(Value::as_bool) == Some(true) {
                for (i, a) in items.iter().enumerate() {
                    if items[..i].contains(a) {
                        causes.push(Cause {
                            reason: "FieldValueDuplicate",
                            field: format!("{path}[{i}]"),
                            message: format!("Duplicate value: {a}"),
                        });
                    }
                }
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    walk(item_schema, item, &format!("{path}[{i}]"), causes, mutate);
                }
            }
        }
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                causes.push(Cause {
                    reason: "FieldValueTooLong",
                    field: path.into(),
                    message: format!("Too long: may not be more than {max} bytes"),
                });
            }
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                causes.push(Cause::invalid(
                    path,
                    &Value::String(s.clone()),
                    &format!("{path} in body should be at least {min} chars long"),
                ));
            }
            if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
                match regex::Regex::new(p) {
                    Ok(re) if !re.is_match(s) => causes.push(Cause::invalid(
                        path,
                        &Value::String(s.clone()),
                        &format!("{path} in body should match '{p}'"),
                    )),
                    _ => {}
                }
            }
        }
        Value::Number(n) => check_number(
            schema,
            n.as_f64().unwrap_or_default(),
            v.clone(),
            path,
            causes,
        ),
        _ => {}
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(v)
    {
        causes.push(Cause::not_supported(path, v, allowed));
    }
    check_combinators(schema, v, path, causes);
}

fn walk_object(
    schema: &Value,
    m: &mut Map<String, Value>,
    path: &str,
    causes: &mut Vec<Cause>,
    mutate: bool,
) {
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let preserve = preserves(schema)
        || schema
            .get("x-kubernetes-embedded-resource")
            .and_then(Value::as_bool)
            == Some(true);
    let keys: Vec<String> = m.keys().cloned().collect();
    for k in keys {
        let sub = props
            .and_then(|p| p.get(&k))
            .or(additional.filter(|a| a.is_object()));
        match sub {
            Some(sub) => {
                if mutate && m.get(&k).is_some_and(Value::is_null) && !nullable(sub) {
                    m.remove(&k);
                    continue;
                }
                if let Some(v) = m.get_mut(&k) {
                    walk(sub, v, &child_path(path, &k), causes, mutate);
                }
            }
            None if mutate && !preserve && additional.and_then(Value::as_bool) != Some(true) => {
                m.remove(&k);
            }
            None => {}
        }
    }
    if mutate {
        apply_defaults(schema, m, path, causes);
    }
    for r in required(schema) {
        if !m.contains_key(&r) {
            causes.push(Cause::required(&child_path(path, &r)));
        }
    }
    let n = m.len() as u64;
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && n > max
    {
        causes.push(Cause {
            reason: "FieldValueTooMany",
            field: path.into(),
            message: format!("Too many: {n}: must have at most {max} items"),
        });
    }
    if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
        && n < min
    {
        causes.push(Cause::invalid(
            path,
            &Value::from(n),
            &format!("{path} in body should have at least {min} properties"),
        ));
    }
}

fn check_number(schema: &Value, x: f64, v: Value, path: &str, causes: &mut Vec<Cause>) {
    let excl = |k: &str| schema.get(k).and_then(Value::as_bool) == Some(true);
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        if excl("exclusiveMaximum") && x >= max {
            causes.push(Cause::invalid(
                path,
                &v,
                &format!("{path} in body should be less than {}", fmt_num(max)),
            ));
        } else if x > max {
            causes.push(Cause::invalid(
                path,
                &v,
                &format!(
                    "{path} in body should be less than or equal to {}",
                    fmt_num(max)
                ),
            ));
        }
    }
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        if excl("exclusiveMinimum") && x <= min {
            causes.push(Cause::invalid(
                path,
                &v,
                &format!("{path} in body should be greater than {}", fmt_num(min)),
            ));
        } else if x < min {
            causes.push(Cause::invalid(
                path,
                &v,
                &format!(
                    "{path} in body should be greater than or equal to {}",
                    fmt_num(min)
                ),
            ));
        }
    }
    if let Some(m) = schema.get("multipleOf").and_then(Value::as_f64)
        && m != 0.0
        && (x / m).fract() != 0.0
    {
        causes.push(Cause::invalid(
            path,
            &v,
            &format!("{path} in body should be a multiple of {}", fmt_num(m)),
        ));
    }
}

fn fmt_num(f: f64) -> String {
    if f.fract() == 0.0 {
        format!("{}", f as i64)
    } else {
        f.to_string()
    }
}

fn errors_for(schema: &Value, v: &Value, path: &str) -> Vec<Cause> {
    let mut copy = v.clone();
    let mut c = Vec::new();
    walk(schema, &mut copy, path, &mut c, false);
    c
}

fn check_combinators(schema: &Value, v: &Value, path: &str, causes: &mut Vec<Cause>) {
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for s in all {
            causes.extend(errors_for(s, v, path));
        }
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array)
        && !any.iter().any(|s| errors_for(s, v, path).is_empty())
    {
        causes.push(Cause::invalid(
            path,
            v,
            &format!("{path} in body must match at least one schema in anyOf"),
        ));
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
        let ok = one
            .iter()
            .filter(|s| errors_for(s, v, path).is_empty())
            .count();
        if ok != 1 {
            causes.push(Cause::invalid(
                path,
                v,
                &format!("{path} in body must match exactly one schema in oneOf"),
            ));
        }
    }
    if let Some(not) = schema.get("not")
        && errors_for(not, v, path).is_empty()
    {
        causes.push(Cause::invalid(
            path,
            v,
            &format!("{path} in body must not match the schema in not"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["replicas"], "properties": {
                "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
                "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                "name": {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[a-z]+$"},
                "port": {"x-kubernetes-int-or-string": true},
                "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "opt": {"type": "string", "nullable": true}}},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}}})
    }

    #[test]
    fn prunes_and_defaults() {
        let mut o = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"}, "junk": 1,
            "spec": {"replicas": 2, "unknown": true, "free": {"any": {"thing": 1}}, "labels": {"a": "b"},
                     "opt": null, "port": "http", "tags": null}});
        assert_eq!(process(&schema(), &mut o), vec![]);
        assert_eq!(
            o,
            json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
            "spec": {"replicas": 2, "mode": "a", "free": {"any": {"thing": 1}}, "labels": {"a": "b"},
                     "opt": null, "port": "http"}})
        );
    }

    #[test]
    fn reports_field_paths() {
        let mut o = json!({"spec": {"replicas": 11, "mode": "c", "name": "ABCDEFG", "port": 1.5, "tags": ["a", "b", "c"]},
            "status": {"ready": "yes"}});
        let causes = process(&schema(), &mut o);
        let rendered: Vec<String> = causes.iter().map(Cause::render).collect();
        assert!(rendered.contains(&"spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10".to_string()), "{rendered:?}");
        assert!(
            rendered
                .iter()
                .any(|r| r.starts_with("spec.mode: Unsupported value: \"c\""))
        );
        assert!(
            rendered
                .iter()
                .any(|r| r.starts_with("spec.name: Too long"))
        );
        assert!(
            rendered
                .iter()
                .any(|r| r.contains("should match '^[a-z]+$'"))
        );
        assert!(
            rendered
                .iter()
                .any(|r| r.starts_with("spec.port: Invalid value"))
        );
        assert!(
            rendered
                .iter()
                .any(|r| r.starts_with("spec.tags: Too many: 3"))
        );
        assert!(
            rendered
                .iter()
                .any(|r| r.starts_with("status.ready: Invalid value"))
        );
        let mut missing = json!({"spec": {}});
        let causes = process(&schema(), &mut missing);
        assert_eq!(causes[0].render(), "spec.replicas: Required value");
    }
}
