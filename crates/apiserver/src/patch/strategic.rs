//! Strategic merge patch for built-in kinds: like a JSON merge patch, except that lists with a
//! merge key (containers by `name`, container ports by `containerPort`, conditions by `type`, ...,
//! see `hints`) merge item by item, primitive merge lists (finalizers) take the union — both in
//! upstream's order (`normalize_order`) — and the
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
        let original = list.clone();
        for i in items {
            if !list.contains(i) {
                list.push(i.clone());
            }
        }
        let patched: Vec<Value> = items.to_vec();
        *list = normalize_order(std::mem::take(list), &patched, &original, |v| {
            Some(v.clone())
        });
        return Ok(());
    }
    let id = |v: &Value| v.get(&key).cloned();
    for item in items {
        let Some(k) = item.get(&key) else {
            return Err(format!(
                "map: {item} does not contain declared merge key: {key}"
            ));
        };
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            list.retain(|x| x.get(&key) != Some(k));
        }
    }
    let original = list.clone();
    let mut patched = Vec::new();
    for item in items.iter().filter(|i| !is_directive(i)) {
        let k = item.get(&key);
        patched.push(item.clone());
        match list.iter().position(|x| x.get(&key) == k) {
            Some(i) => merge_value(def, &mut list[i], item, names)?,
            None => {
                let mut fresh = Value::Object(Map::new());
                merge_value(def, &mut fresh, item, names)?;
                list.push(fresh);
            }
        }
    }
    *list = normalize_order(std::mem::take(list), &patched, &original, id);
    Ok(())
}

/// The order upstream's strategic merge gives a merged list (`normalizeElementOrder`): the
/// items the patch names, in the patch's order, interleaved with the items only the live list
/// has, in their live order; a patch item the live list does not have goes before the next
/// live-only item (so a finalizer patched onto `[a]` gives `[b, a]`).
fn normalize_order(
    merged: Vec<Value>,
    patch: &[Value],
    original: &[Value],
    id: impl Fn(&Value) -> Option<Value>,
) -> Vec<Value> {
    let position = |list: &[Value], v: &Value| {
        let want = id(v);
        list.iter().position(|x| want.is_some() && id(x) == want)
    };
    let (mut patched, server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|v| position(patch, v).is_some());
    patched.sort_by_key(|v| position(patch, v));
    let mut out = Vec::with_capacity(patched.len() + server_only.len());
    let (mut left, mut right) = (
        server_only.into_iter().peekable(),
        patched.into_iter().peekable(),
    );
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!(
                (position(original, l), position(original, r)),
                (Some(li), Some(ri)) if li < ri
            ),
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
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
            json!({"metadata": {"finalizers": ["b", "a"]}, "spec": {
            "containers": [{"name": "a", "image": "2", "ports": [{"containerPort": 81}, {"containerPort": 80, "name": "http"}]},
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

    #[test]
    fn orders_merged_lists_as_upstream() {
        let pod = Registry::with_builtins().lookup("", "v1", "pods").unwrap();
        let live = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        // A new item goes before the next live-only item.
        let patch = json!({"spec": {"containers": [{"name": "a", "image": "2"}, {"name": "c"}]}});
        let out = strategic_patch(&pod, &live, &patch).unwrap();
        let names: Vec<&str> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "c", "b"]);
    }
}
