//! JSON merge patch, RFC 7386: objects merge recursively, `null` deletes, everything else
//! (arrays included) replaces.

use serde_json::Value;

pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rfc7386_examples() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(
            &mut t,
            &json!({"a": "z", "c": {"f": null}, "l": [3], "n": {"x": null, "y": 1}}),
        );
        assert_eq!(
            t,
            json!({"a": "z", "c": {"d": "e"}, "l": [3], "n": {"y": 1}})
        );
        let mut s = json!("x");
        merge_patch(&mut s, &json!({"a": 1}));
        assert_eq!(s, json!({"a": 1}));
    }
}
