//! Server-side field validation (`fieldValidation=Strict|Warn|Ignore`): unknown and duplicate
//! fields of a request body, found in one pass over the JSON text against the kind's OpenAPI
//! schema, in document order and worded as upstream's strict decoder words them
//! (`unknown field "spec.template.spec.containers[0].foo"`, `duplicate field "spec.paused"`).
//! `prune` drops the unknown fields, as decoding into the Go types does upstream.

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value, json};

use crate::hints::ListType;
use crate::status::{ApiError, Cause};

/// What to do with unknown and duplicate fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Directive {
    Ignore,
    /// The default since Kubernetes 1.23.
    Warn,
    Strict,
}

impl Directive {
    /// The `fieldValidation` query parameter of a request whose options are `options`
    /// (`CreateOptions`, `UpdateOptions`, `PatchOptions`); an unsupported value is `422`, as
    /// upstream's options validation answers.
    pub fn parse(value: Option<&str>, options: &str) -> Result<Self, ApiError> {
        match value {
            None | Some("") | Some("Warn") => Ok(Self::Warn),
            Some("Ignore") => Ok(Self::Ignore),
            Some("Strict") => Ok(Self::Strict),
            Some(other) => {
                let cause = Cause::not_supported(
                    "fieldValidation",
                    &json!(other),
                    &[json!(""), json!("Ignore"), json!("Strict"), json!("Warn")],
                );
                Err(ApiError::new(
                    422,
                    "Invalid",
                    format!("{options}.meta.k8s.io \"\" is invalid: {}", cause.render()),
                )
                .with_details(json!({"group": "meta.k8s.io", "kind": options, "causes": [
                    {"reason": cause.reason, "message": cause.message, "field": cause.field}]})))
            }
        }
    }
}

/// A schema and the components its references point into.
#[derive(Clone, Copy)]
pub struct Schema<'a> {
    pub root: &'a Value,
    pub components: &'a Map<String, Value>,
    /// `root` is a CRD's `openAPIV3Schema` as stored: `apiVersion` and `kind` are strings and
    /// `metadata` is an ObjectMeta whatever it says (upstream's rule for custom resources).
    pub custom_root: bool,
}

/// A position in a schema: the (unresolved) schema, and whether it lies inside a built-in
/// type (reached through a `$ref`), where an object without properties holds anything (a Go
/// `RawExtension`, `JSON`, `FieldsV1`); in a CRD's schema such an object holds nothing.
#[derive(Clone, Copy)]
struct At<'a> {
    schema: &'a Value,
    builtin: bool,
}

impl<'a> Schema<'a> {
    /// Follows `$ref` and single-element `allOf` wrappers.
    fn resolve(&self, at: At<'a>) -> At<'a> {
        let At {
            schema: mut s,
            mut builtin,
        } = at;
        for _ in 0..32 {
            if let Some(r) = s.get("$ref").and_then(Value::as_str) {
                match self.components.get(r.trim_start_matches(super::SCHEMAS)) {
                    Some(target) => {
                        s = target;
                        builtin = true;
                    }
                    None => break,
                }
            } else if let Some(first) = s
                .get("allOf")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                && s.get("properties").is_none()
            {
                s = first;
            } else {
                break;
            }
        }
        At { schema: s, builtin }
    }

    /// The schema of `key` inside an object schema: `Ok(None)` when anything goes (unknown
    /// fields preserved, untyped), `Err(())` when the field is unknown.
    fn field(&self, at: At<'a>, key: &str) -> Result<Option<At<'a>>, ()> {
        let at = self.resolve(at);
        let s = at.schema;
        if self.custom_root && std::ptr::eq(s, self.root) {
            match key {
                "apiVersion" | "kind" => return Ok(None),
                "metadata" => {
                    return Ok(self.components.get(super::OBJECT_META).map(|schema| At {
                        schema,
                        builtin: true,
                    }));
                }
                _ => {}
            }
        }
        let child = |schema| {
            Ok(Some(At {
                schema,
                builtin: at.builtin,
            }))
        };
        if let Some(p) = s.get("properties").and_then(|p| p.get(key)) {
            return child(p);
        }
        if s.get("x-kubernetes-embedded-resource")
            .and_then(Value::as_bool)
            == Some(true)
            && matches!(key, "apiVersion" | "kind" | "metadata")
        {
            return Ok(None);
        }
        match s.get("additionalProperties") {
            Some(Value::Bool(true)) => return Ok(None),
            Some(a @ Value::Object(_)) => return child(a),
            _ => {}
        }
        let preserve = s
            .get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            == Some(true);
        let typed_object = s.get("type").and_then(Value::as_str) == Some("object");
        if preserve || (s.get("properties").is_none() && (at.builtin || !typed_object)) {
            return Ok(None);
        }
        Err(())
    }

    fn items(&self, at: At<'a>) -> Option<At<'a>> {
        let at = self.resolve(at);
        at.schema.get("items").map(|schema| At {
            schema,
            builtin: at.builtin,
        })
    }

    fn root(&self) -> At<'a> {
        At {
            schema: self.root,
            builtin: false,
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Unknown and duplicate fields of a JSON body, in document order. Keys starting with `$`
/// (strategic-merge-patch directives) are skipped when `patch_directives` is set.
pub fn problems(body: &[u8], schema: Schema<'_>, patch_directives: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    let seed = Walk {
        schema,
        at: Some(schema.root()),
        path: String::new(),
        out: &mut out,
        patch_directives,
    };
    // A body that is not JSON is reported by the decoder of the write path.
    let _ = seed.deserialize(&mut de);
    out
}

struct Walk<'s, 'o> {
    schema: Schema<'s>,
    /// `None`: anything goes below here.
    at: Option<At<'s>>,
    path: String,
    out: &'o mut Vec<String>,
    patch_directives: bool,
}

impl<'de> DeserializeSeed<'de> for Walk<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let items = self.at.and_then(|s| self.schema.items(s));
        let mut i = 0usize;
        loop {
            let seed = Walk {
                schema: self.schema,
                at: items,
                path: format!("{}[{i}]", self.path),
                out: &mut *self.out,
                patch_directives: self.patch_directives,
            };
            if seq.next_element_seed(seed)?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen: HashSet<String> = HashSet::new();
        let mut unknown: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = join(&self.path, &key);
            if self.patch_directives && key.starts_with('$') {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let child = match self.at {
                None => Ok(None),
                Some(s) => self.schema.field(s, &key),
            };
            match child {
                Err(()) if self.patch_directives => {
                    // A patch may remove an unknown field (`"field": null`): only what the
                    // patch would add counts, as upstream checks the patched object.
                    let value = map.next_value::<Value>()?;
                    if !value.is_null() && unknown.insert(key.clone()) {
                        self.out.push(format!("unknown field \"{path}\""));
                    }
                }
                Err(()) => {
                    if unknown.insert(key.clone()) {
                        self.out.push(format!("unknown field \"{path}\""));
                    }
                    map.next_value::<IgnoredAny>()?;
                }
                Ok(at) => {
                    if !seen.insert(key.clone()) {
                        self.out.push(format!("duplicate field \"{path}\""));
                    }
                    map.next_value_seed(Walk {
                        schema: self.schema,
                        at,
                        path,
                        out: &mut *self.out,
                        patch_directives: self.patch_directives,
                    })?;
                }
            }
        }
        Ok(())
    }
}

/// Removes the fields `problems` calls unknown (what decoding into typed objects drops).
pub fn prune(value: &mut Value, schema: Schema<'_>, patch_directives: bool) {
    prune_at(value, schema, Some(schema.root()), patch_directives);
}

fn prune_at(value: &mut Value, schema: Schema<'_>, at: Option<At<'_>>, directives: bool) {
    let Some(s) = at else { return };
    match value {
        Value::Object(o) => {
            o.retain(|k, _| (directives && k.starts_with('$')) || schema.field(s, k).is_ok());
            for (k, v) in o.iter_mut() {
                if let Ok(child) = schema.field(s, k) {
                    prune_at(v, schema, child, directives);
                }
            }
        }
        Value::Array(a) => {
            let items = schema.items(s);
            for v in a {
                prune_at(v, schema, items, directives);
            }
        }
        _ => {}
    }
}

/// Fields of an apply configuration the schema does not declare, named as
/// structured-merge-diff names them: list elements by their keys (`[name="c"]`) in associative
/// lists, by index elsewhere. `list_type` gives the list semantics of a field path.
pub fn undeclared(
    value: &Value,
    schema: Schema<'_>,
    list_type: &dyn Fn(&[String]) -> ListType,
) -> Vec<String> {
    let mut out = Vec::new();
    undeclared_at(
        value,
        schema,
        Some(schema.root()),
        &mut String::new(),
        &mut Vec::new(),
        list_type,
        &mut out,
    );
    out
}

fn undeclared_at(
    value: &Value,
    schema: Schema<'_>,
    at: Option<At<'_>>,
    path: &mut String,
    fields: &mut Vec<String>,
    list_type: &dyn Fn(&[String]) -> ListType,
    out: &mut Vec<String>,
) {
    let Some(s) = at else { return };
    match value {
        Value::Object(o) => {
            for (k, v) in o {
                let len = path.len();
                path.push('.');
                path.push_str(k);
                match schema.field(s, k) {
                    Err(()) => out.push(path.clone()),
                    Ok(child) => {
                        fields.push(k.clone());
                        undeclared_at(v, schema, child, path, fields, list_type, out);
                        fields.pop();
                    }
                }
                path.truncate(len);
            }
        }
        Value::Array(a) => {
            let items = schema.items(s);
            let keys = match list_type(fields) {
                ListType::Map(keys) => keys,
                ListType::Set | ListType::Atomic => Vec::new(),
            };
            for (i, v) in a.iter().enumerate() {
                let segment = if keys.is_empty() {
                    format!("[{i}]")
                } else {
                    let parts: Vec<String> = keys
                        .iter()
                        .filter_map(|k| v.get(k).map(|kv| format!("{k}={kv}")))
                        .collect();
                    format!("[{}]", parts.join(","))
                };
                let len = path.len();
                path.push_str(&segment);
                undeclared_at(v, schema, items, path, fields, list_type, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// The `Warning` header value upstream sends for one problem.
pub fn warning_header(problem: &str) -> String {
    format!("299 - {}", serde_json::Value::String(problem.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn components() -> Map<String, Value> {
        let Value::Object(m) = json!({
            "Obj": {"type": "object", "properties": {
                "spec": {"allOf": [{"$ref": "#/components/schemas/Spec"}], "description": "d"},
                "metadata": {"type": "object", "properties": {"name": {"type": "string"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}}},
            "Spec": {"type": "object", "properties": {
                "paused": {"type": "boolean"},
                "containers": {"type": "array", "items": {"$ref": "#/components/schemas/C"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
            "C": {"type": "object", "properties": {"name": {"type": "string"}}},
        }) else {
            unreachable!()
        };
        m
    }

    #[test]
    fn reports_unknown_and_duplicate_fields_in_document_order() {
        let comps = components();
        let root = json!({"$ref": "#/components/schemas/Obj"});
        let schema = Schema {
            root: &root,
            components: &comps,
            custom_root: false,
        };
        let body = br#"{"metadata": {"name": "a", "labels": {"x": "1"}, "bogus": 1},
            "spec": {"paused": true, "paused": false, "unknown1": {"deep": 1},
                "containers": [{"name": "c", "unknownNested": "v"}], "free": {"any": 1}}}"#;
        assert_eq!(
            problems(body, schema, false),
            [
                "unknown field \"metadata.bogus\"",
                "duplicate field \"spec.paused\"",
                "unknown field \"spec.unknown1\"",
                "unknown field \"spec.containers[0].unknownNested\"",
            ]
        );
        let mut v: Value = serde_json::from_slice(body).unwrap();
        prune(&mut v, schema, false);
        assert_eq!(
            v,
            json!({"metadata": {"name": "a", "labels": {"x": "1"}},
                "spec": {"paused": false, "containers": [{"name": "c"}], "free": {"any": 1}}})
        );
        let patch =
            br#"{"spec": {"$setElementOrder/containers": [{"name": "c"}], "paused": true}}"#;
        assert!(problems(patch, schema, true).is_empty());
    }

    #[test]
    fn names_undeclared_fields_as_structured_merge_diff() {
        let comps = components();
        let root = json!({"$ref": "#/components/schemas/Obj"});
        let schema = Schema {
            root: &root,
            components: &comps,
            custom_root: false,
        };
        let v = json!({"spec": {"bogus": 1, "containers": [{"name": "c", "x": 1}]}});
        let by_name = |p: &[String]| {
            if p.last().map(String::as_str) == Some("containers") {
                ListType::Map(vec!["name".into()])
            } else {
                ListType::Atomic
            }
        };
        assert_eq!(
            undeclared(&v, schema, &by_name),
            [".spec.bogus", ".spec.containers[name=\"c\"].x"]
        );
        assert_eq!(
            undeclared(&v, schema, &|_| ListType::Atomic),
            [".spec.bogus", ".spec.containers[0].x"]
        );
    }

    #[test]
    fn directive_defaults_to_warn() {
        assert_eq!(
            Directive::parse(None, "CreateOptions").unwrap(),
            Directive::Warn
        );
        assert_eq!(
            Directive::parse(Some("Strict"), "CreateOptions").unwrap(),
            Directive::Strict
        );
        let e = Directive::parse(Some("strict"), "PatchOptions").unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: \"strict\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
        );
    }
}
