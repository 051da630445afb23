//! Strategic merge patch for built-in kinds: like a JSON merge patch, except that lists with a
//! merge key (containers by `name`, container ports by `containerPort`, conditions by `type`, ...,
//! see `hints`) merge item by item, primitive merge lists (finalizers) take the union, and the
//! directives `$patch: delete` (list items), `$patch: replace` (maps and lists),
//! `$deleteFromPrimitiveList/<field>` and `$setElementOrder/<field>` are honoured (the latter is
//! accepted and ignored: order follows the live list). `$retainKeys` is not supported and is
//! rejected. Custom resources do not support strategic merge patch (the caller answers 415).

use serde_json::{Map, Value};

use crate::hints::smp_merge_key;
use crate::registry::ResourceDef;

pub fn strategic_patch(def: &ResourceDef, target: &Value, patch: &Value) -> Result<Value, String> {
    let mut out = target.clone();
    merge_value(def, &mut out, patch, &mut Vec::new())?;
    Ok(out)
}

fn merge_value(
    def: &ResourceDef,
    target: &mut Value,
    patch: &Value,
    names: &mut Vec<String>,
) -> Result<(), String> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut clean = p.clone();
        clean.remove("$patch");
        *target = Value::Object(clean);
        return Ok(());
    }
    if p.get("$patch").and_then(Value::as_str) == Some("delete") {
        *target = Value::Object(Map::new());
        return Ok(());
    }
    if p.contains_key("$retainKeys") {
        return Err("$retainKeys is not supported by this server".into());
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        return Ok(());
    };
    for (k, v) in p {
        if k == "$patch" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(del)) = (t.get_mut(field), v.as_array()) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        names.push(k.clone());
        let entry = t.entry(k.clone()).or_insert(Value::Null);
        match v {
            Value::Array(items) => merge_list(def, entry, items, names)?,
            Value::Object(_) => merge_value(def, entry, v, names)?,
            _ => *entry = v.clone(),
        }
        names.pop();
    }
    Ok(())
}

fn merge_list(
    def: &ResourceDef,
    target: &mut Value,
    items: &[Value],
    names: &mut Vec<String>,
) -> Result<(), String> {
    let Some(key) = smp_merge_key(def, names) else {
        *target = Value::Array(items.iter().filter(|i| !is_directive(i)).cloned().collect());
        return Ok(());
    };
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *target = Value::Array(items.iter().filter(|i| !is_directive(i)).cloned().collect());
        return Ok(());
    }
    if !target.is_array() {
        *target = Value::Array(Vec::new());
    }
    let Value::Array(list) = target else {
        return Ok(());
    };
    if key.is_empty() {
        for i in items {
            if !list.contains(i) {
                list.push(i.clone());
            }
        }
        return Ok(());
    }
    for item in items {
        let Some(k) = item.get(&key) else {
            return Err(format!(
                "map: {item} does not contain declared merge key: {key}"
            ));
        };
        let pos = list.iter().position(|x| x.get(&key) == Some(k));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                list.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => merge_value(def, &mut list[i], item, names)?,
            (None, false) => {
                let mut fresh = Value::Object(Map::new());
                merge_value(def, &mut fresh, item, names)?;
                list.push(fresh);
            }
        }
    }
    Ok(())
}

fn is_directive(v: &Value) -> bool {
    v.get("$patch").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    #[test]
    fn merges_by_keys() {
        let pod = Registry::with_builtins().lookup("", "v1", "pods").unwrap();
        let live = json!({"metadata": {"finalizers": ["a"]}, "spec": {
            "containers": [{"name": "a", "image": "1", "ports": [{"containerPort": 80, "name": "http"}]},
                           {"name": "b", "image": "1"}],
            "tolerations": [{"key": "x"}]}});
        let patch = json!({"metadata": {"finalizers": ["b"]}, "spec": {
            "containers": [{"name": "a", "image": "2", "ports": [{"containerPort": 81}]},
                           {"name": "b", "$patch": "delete"},
                           {"name": "c", "image": "3"}],
            "tolerations": [{"key": "y"}]}});
        let out = strategic_patch(&pod, &live, &patch).unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"finalizers": ["a", "b"]}, "spec": {
            "containers": [{"name": "a", "image": "2", "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 81}]},
                           {"name": "c", "image": "3"}],
            "tolerations": [{"key": "y"}]}})
        );
        let del = strategic_patch(
            &pod,
            &out,
            &json!({"$deleteFromPrimitiveList/metadata": null,
            "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        )
        .unwrap();
        assert_eq!(del["metadata"]["finalizers"], json!(["b"]));
    }
}
