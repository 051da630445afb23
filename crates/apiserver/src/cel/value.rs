//! JSON values as CEL rules see them, following the schema the value sits under: `number`
//! fields are doubles even when written without a fraction, `integer` fields are ints, object
//! properties (not map keys) are escaped as upstream escapes them (`foo-bar` is
//! `self.foo__dash__bar`, a property named like a keyword, such as `namespace`, is
//! `self.__namespace__`), and the root object exposes only `apiVersion`, `kind`,
//! `metadata.name` and `metadata.generateName` besides its schema's fields.

use std::collections::HashMap;
use std::sync::Arc;

use ::cel::Value as Cel;
use ::cel::objects::{Key, Map};
use serde_json::Value;

/// CEL's reserved words, escaped as `__word__` when they name a property.
const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// The identifier a property is reachable under, or `None` when it cannot be one.
pub fn escape(name: &str) -> Option<String> {
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let escaped = name
        .replace("__", "__underscores__")
        .replace('.', "__dot__")
        .replace('-', "__dash__")
        .replace('/', "__slash__");
    let mut chars = escaped.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    (first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')).then_some(escaped)
}

fn string(s: &str) -> Cel {
    Cel::String(Arc::new(s.to_string()))
}

fn number(schema: Option<&Value>, n: &serde_json::Number) -> Cel {
    let ty = schema.and_then(|s| s.get("type")).and_then(Value::as_str);
    if ty == Some("number") {
        return Cel::Float(n.as_f64().unwrap_or_default());
    }
    if let Some(i) = n.as_i64() {
        return Cel::Int(i);
    }
    if let Some(u) = n.as_u64() {
        return Cel::UInt(u);
    }
    let f = n.as_f64().unwrap_or_default();
    if ty == Some("integer") && f.fract() == 0.0 && f.abs() < 9.0e18 {
        // Whole numbers written with a fraction (`2.0`) are integers for an integer field.
        #[allow(clippy::cast_possible_truncation)]
        return Cel::Int(f as i64);
    }
    Cel::Float(f)
}

/// `v` as a CEL value, typed by `schema` (the schema node `v` sits under).
pub fn to_cel(schema: Option<&Value>, v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => number(schema, n),
        Value::String(s) => string(s),
        Value::Array(items) => {
            let sub = schema.and_then(|s| s.get("items"));
            Cel::List(Arc::new(items.iter().map(|x| to_cel(sub, x)).collect()))
        }
        Value::Object(m) => {
            let props = schema
                .and_then(|s| s.get("properties"))
                .and_then(Value::as_object);
            let additional = schema
                .and_then(|s| s.get("additionalProperties"))
                .filter(|a| a.is_object());
            let mut out = HashMap::with_capacity(m.len());
            for (k, x) in m {
                let (name, sub) = match props.and_then(|p| p.get(k)) {
                    Some(sub) => match escape(k) {
                        Some(name) => (name, Some(sub)),
                        None => continue,
                    },
                    None => (k.clone(), additional),
                };
                out.insert(Key::String(Arc::new(name)), to_cel(sub, x));
            }
            Cel::Map(Map { map: Arc::new(out) })
        }
    }
}

/// The whole custom resource as `self` of a rule on the schema's root.
pub fn root(schema: &Value, obj: &Value) -> Cel {
    let mut view = obj.clone();
    if let Some(Value::Object(meta)) = view.get_mut("metadata") {
        meta.retain(|k, _| k == "name" || k == "generateName");
    }
    to_cel(Some(schema), &view)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escapes_like_upstream() {
        assert_eq!(escape("foo-bar").as_deref(), Some("foo__dash__bar"));
        assert_eq!(escape("a.b/c").as_deref(), Some("a__dot__b__slash__c"));
        assert_eq!(escape("x__y").as_deref(), Some("x__underscores__y"));
        assert_eq!(escape("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(escape("1abc"), None);
        assert_eq!(escape("has space"), None);
    }

    #[test]
    fn numbers_follow_the_schema() {
        let schema = json!({"type": "object", "properties": {
            "d": {"type": "number"}, "i": {"type": "integer"}}});
        let v = to_cel(Some(&schema), &json!({"d": 2, "i": 3.0, "free": 1}));
        let Cel::Map(m) = v else { panic!("not a map") };
        let get = |k: &str| m.map.get(&Key::String(Arc::new(k.into()))).cloned();
        assert_eq!(get("d"), Some(Cel::Float(2.0)));
        assert_eq!(get("i"), Some(Cel::Int(3)));
        assert_eq!(get("free"), Some(Cel::Int(1)));
    }

    #[test]
    fn root_keeps_only_name_and_generate_name_of_metadata() {
        let obj = json!({"apiVersion": "a/v1", "kind": "K",
            "metadata": {"name": "n", "namespace": "ns", "labels": {"a": "b"}}});
        let Cel::Map(m) = root(&json!({"type": "object"}), &obj) else {
            panic!("not a map")
        };
        let meta = m.map.get(&Key::String(Arc::new("metadata".into())));
        let Some(Cel::Map(meta)) = meta else {
            panic!("no metadata")
        };
        assert_eq!(meta.map.len(), 1);
    }
}
