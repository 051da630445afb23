//! Small helpers to read and write `metadata` fields of objects held as `serde_json::Value`,
//! plus timestamps and UIDs. No policy lives here: callers decide what to set.

use serde_json::{Map, Value, json};

pub fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

/// The metadata map, created if absent (and replaced if it is not an object).
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let root = match obj {
        Value::Object(m) => m,
        _ => unreachable_map(),
    };
    let entry = root.entry("metadata").or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    match entry {
        Value::Object(m) => m,
        _ => unreachable_map(),
    }
}

/// Never reached: both call sites make sure the value is an object first. Kept total so that no
/// `unwrap` is needed.
fn unreachable_map() -> &'static mut Map<String, Value> {
    Box::leak(Box::new(Map::new()))
}

pub fn str_field<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj)
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

pub fn name(obj: &Value) -> Option<&str> {
    str_field(obj, "name")
}

pub fn namespace(obj: &Value) -> Option<&str> {
    str_field(obj, "namespace")
}

pub fn uid(obj: &Value) -> Option<&str> {
    str_field(obj, "uid")
}

pub fn resource_version(obj: &Value) -> Option<&str> {
    str_field(obj, "resourceVersion")
}

pub fn is_deleting(obj: &Value) -> bool {
    str_field(obj, "deletionTimestamp").is_some()
}

/// The strings of a JSON array (non-strings skipped); empty when absent or not an array.
pub fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    strings(meta(obj).and_then(|m| m.get("finalizers")))
}

pub fn set_finalizers(obj: &mut Value, list: &[String]) {
    let m = meta_mut(obj);
    if list.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert("finalizers".into(), json!(list));
    }
}

/// The object's labels, borrowed (an empty map when it has none).
pub fn labels_ref(obj: &Value) -> &Map<String, Value> {
    static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
    meta(obj)
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .unwrap_or(&EMPTY)
}

pub fn labels(obj: &Value) -> Map<String, Value> {
    meta(obj)
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// The owner references, borrowed (empty when absent).
pub fn owner_references_ref(obj: &Value) -> &[Value] {
    meta(obj)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

pub fn owner_references(obj: &Value) -> Vec<Value> {
    meta(obj)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

pub fn generation(obj: &Value) -> i64 {
    meta(obj)
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// RFC 3339 timestamp with second precision, as metav1.Time serialises.
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

pub fn new_uid() -> String {
    let b: [u8; 16] = rand::random();
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// Five random lowercase alphanumerics, as `generateName` appends.
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| {
            let i = rand::random_range(0..ALPHABET.len());
            char::from(ALPHABET[i])
        })
        .collect()
}

/// Reads a dotted path (`.spec.replicas` or `spec.replicas`).
pub fn get_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for part in path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
    {
        cur = cur.get(part)?;
    }
    Some(cur)
}

/// Writes a dotted path, creating intermediate objects.
pub fn set_path(obj: &mut Value, path: &str, value: Value) {
    let parts: Vec<&str> = path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
        .collect();
    let mut cur = obj;
    for (i, part) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let Value::Object(m) = cur else { return };
        if i + 1 == parts.len() {
            m.insert((*part).to_string(), value);
            return;
        }
        cur = m.entry((*part).to_string()).or_insert_with(|| json!({}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_uids() {
        let mut v = json!({});
        set_path(&mut v, ".spec.replicas", json!(3));
        assert_eq!(get_path(&v, "spec.replicas"), Some(&json!(3)));
        assert_eq!(new_uid().len(), 36);
        assert_eq!(random_suffix().len(), 5);
        meta_mut(&mut v).insert("name".into(), json!("x"));
        assert_eq!(name(&v), Some("x"));
    }
}
