//! Server-side apply: merges an applied configuration into the live object, tracks ownership in
//! `metadata.managedFields` (operation `Apply`), removes fields the same manager applied before
//! and no longer applies (unless another manager owns them too), and reports conflicts with
//! other managers whose fields would change value, unless forced (then ownership moves).
//! Associative lists and sets merge per item (see `hints`); other lists and all scalars are
//! replaced. Type-aware details of structured-merge-diff (defaulted key fields, atomic maps,
//! unions) are not modelled.

use serde_json::{Map, Value};

use crate::fieldpath::{FieldSet, compare, item_element, render_path, to_set};
use crate::hints::{ListType, list_type};
use crate::managed_fields::{self, Entry};
use crate::meta;
use crate::registry::ResourceDef;

#[derive(Clone, Debug, PartialEq)]
pub struct Conflict {
    pub manager: String,
    pub api_version: String,
    pub path: String,
}

/// Applies `applied` (already parsed) as `manager` onto `live` (`{}`-like skeleton when the
/// object does not exist yet). Returns the new object with managedFields updated.
pub fn apply(
    def: &ResourceDef,
    live: &Value,
    applied: &Value,
    manager: &str,
    force: bool,
    subresource: &str,
) -> Result<Value, Vec<Conflict>> {
    let effective = effective_config(def, applied, subresource);
    let applied_set = to_set(def, &effective);
    let mut entries = managed_fields::read(live);
    let before = entries.clone();
    let is_mine = |e: &Entry| e.same_slot(manager, "Apply", subresource);
    let previous = entries
        .iter()
        .find(|e| is_mine(e))
        .map(|e| e.set.clone())
        .unwrap_or_default();
    let others = entries
        .iter()
        .filter(|e| !is_mine(e))
        .fold(FieldSet::default(), |acc, e| acc.union(&e.set));

    let mut merged = live.clone();
    merge(def, &mut merged, &effective, &mut Vec::new());
    let stale = previous.difference(&applied_set).difference(&others);
    for path in stale.members() {
        if !others.has_descendants(&path) && !applied_set.has_descendants(&path) {
            remove_path(&mut merged, &path);
            // A map the manager's fields implied disappears with its last field, as
            // structured-merge-diff does, unless someone owns the map itself.
            let mut parent = path.clone();
            while parent.len() > 1 {
                parent.pop();
                if !parent.last().is_some_and(|p| p.starts_with("f:"))
                    || others.contains(&parent)
                    || others.has_descendants(&parent)
                    || applied_set.contains(&parent)
                    || applied_set.has_descendants(&parent)
                    || !is_empty_map(&merged, &parent)
                {
                    break;
                }
                remove_path(&mut merged, &parent);
            }
        }
    }

    let cmp = compare(def, live, &merged);
    let changed = cmp.modified.union(&cmp.added);
    let mut conflicts = Vec::new();
    for e in entries
        .iter_mut()
        .filter(|e| !e.same_slot(manager, "Apply", subresource))
    {
        let clash = e.set.intersection(&changed).intersection(&applied_set);
        if clash.is_empty() {
            continue;
        }
        if force {
            e.set = e.set.difference(&clash);
        } else {
            for p in clash.members() {
                conflicts.push(Conflict {
                    manager: e.manager.clone(),
                    api_version: e.api_version.clone(),
                    path: render_path(&p),
                });
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(conflicts);
    }
    for e in entries.iter_mut() {
        e.set = e.set.without_subtrees(&cmp.removed);
    }
    let api_version = def.api_version();
    match entries.iter_mut().find(|e| is_mine(e)) {
        Some(e) => {
            e.set = applied_set;
            e.api_version = api_version;
            e.time = meta::now();
        }
        None => entries.push(Entry {
            manager: manager.to_string(),
            operation: "Apply".into(),
            api_version,
            time: meta::now(),
            subresource: subresource.to_string(),
            set: applied_set,
        }),
    }
    entries.retain(|e| !e.set.is_empty());
    managed_fields::keep_times(&before, &mut entries);
    managed_fields::write(&mut merged, &entries);
    Ok(merged)
}

/// The part of the applied configuration that the endpoint may change: everything but status on
/// the main resource of kinds with a status subresource, only status on `/status`.
fn effective_config(def: &ResourceDef, applied: &Value, subresource: &str) -> Value {
    if subresource == "status" {
        let mut out = Map::new();
        if let Some(s) = applied.get("status") {
            out.insert("status".into(), s.clone());
        }
        return Value::Object(out);
    }
    let mut cfg = applied.clone();
    if let Value::Object(m) = &mut cfg {
        if def.status_subresource {
            m.remove("status");
        }
        if let Some(md) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            md.remove("managedFields");
            md.remove("resourceVersion");
        }
    }
    cfg
}

fn merge(def: &ResourceDef, live: &mut Value, applied: &Value, names: &mut Vec<String>) {
    match applied {
        Value::Object(a) => {
            if !live.is_object() {
                *live = Value::Object(Map::new());
            }
            let Value::Object(l) = live else { return };
            for (k, v) in a {
                if v.is_null() {
                    l.remove(k);
                    continue;
                }
                names.push(k.clone());
                merge(def, l.entry(k.clone()).or_insert(Value::Null), v, names);
                names.pop();
            }
        }
        Value::Array(items) => {
            let lt = list_type(def, names);
            let Value::Array(l) = live else {
                *live = applied.clone();
                return;
            };
            match &lt {
                ListType::Atomic => *live = applied.clone(),
                ListType::Set => {
                    for i in items {
                        if !l.contains(i) {
                            l.push(i.clone());
                        }
                    }
                }
                ListType::Map(_) => {
                    let keyed: Option<Vec<String>> = items
                        .iter()
                        .enumerate()
                        .map(|(i, v)| item_element(&lt, v, i))
                        .collect();
                    let Some(keys) = keyed else {
                        *live = applied.clone();
                        return;
                    };
                    for (item, key) in items.iter().zip(keys) {
                        let pos = l.iter().enumerate().position(|(i, x)| {
                            item_element(&lt, x, i).as_deref() == Some(key.as_str())
                        });
                        match pos {
                            Some(p) => merge(def, &mut l[p], item, names),
                            None => l.push(item.clone()),
                        }
                    }
                }
            }
        }
        other => *live = other.clone(),
    }
}

/// Whether the field a path designates is an empty JSON object.
fn is_empty_map(obj: &Value, path: &[String]) -> bool {
    let mut cur = obj;
    for p in path {
        let next = match cur {
            Value::Object(m) => p.strip_prefix("f:").and_then(|f| m.get(f)),
            Value::Array(a) => a.iter().find(|x| element_matches(x, p)),
            _ => None,
        };
        match next {
            Some(n) => cur = n,
            None => return false,
        }
    }
    cur.as_object().is_some_and(serde_json::Map::is_empty)
}

/// Removes the field, list item or set element a member path designates.
pub fn remove_path(obj: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for p in parents {
        let next = match cur {
            Value::Object(m) => p.strip_prefix("f:").and_then(|f| m.get_mut(f)),
            Value::Array(a) => a.iter_mut().find(|x| element_matches(x, p)),
            _ => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match cur {
        Value::Object(m) => {
            if let Some(f) = last.strip_prefix("f:") {
                m.remove(f);
            }
        }
        Value::Array(a) => a.retain(|x| !element_matches(x, last)),
        _ => {}
    }
}

fn element_matches(item: &Value, pe: &str) -> bool {
    if let Some(k) = pe.strip_prefix("k:") {
        let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(k) else {
            return false;
        };
        keys.iter().all(|(f, v)| item.get(f) == Some(v))
    } else if let Some(v) = pe.strip_prefix("v:") {
        serde_json::from_str::<Value>(v).is_ok_and(|x| &x == item)
    } else {
        false
    }
}

/// The message and Status details of an apply conflict, as the real server words them.
pub fn conflict_message(conflicts: &[Conflict]) -> (String, Vec<Value>) {
    let causes = conflicts
        .iter()
        .map(|c| {
            serde_json::json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with \"{}\" using {}", c.manager, c.api_version),
                "field": c.path,
            })
        })
        .collect();
    let msg = if let [c] = conflicts {
        format!(
            "Apply failed with 1 conflict: conflict with \"{}\" using {}: {}",
            c.manager, c.api_version, c.path
        )
    } else {
        let lines: Vec<String> = conflicts
            .iter()
            .map(|c| {
                format!(
                    "conflict with \"{}\" using {}: {}",
                    c.manager, c.api_version, c.path
                )
            })
            .collect();
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    (msg, causes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    fn cm() -> ResourceDef {
        Registry::with_builtins()
            .lookup("", "v1", "configmaps")
            .unwrap()
            .as_ref()
            .clone()
    }

    fn cfg(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": data})
    }

    #[test]
    fn a_map_left_empty_by_a_manager_disappears_with_its_fields() {
        let def = Registry::with_builtins()
            .lookup("", "v1", "configmaps")
            .unwrap()
            .as_ref()
            .clone();
        let live = json!({"metadata": {"name": "a"}});
        let with = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a",
            "annotations": {"k": "v"}}, "data": {"x": "1"}});
        let v1 = apply(&def, &live, &with, "alice", false, "").unwrap();
        let without = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"},
            "data": {"x": "1"}});
        let v2 = apply(&def, &v1, &without, "alice", false, "").unwrap();
        assert!(v2["metadata"].get("annotations").is_none(), "{v2}");
        // A map someone else still has fields in stays.
        let bob = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a",
            "annotations": {"b": "1"}}});
        let v3 = apply(&def, &v1, &bob, "bob", false, "").unwrap();
        let v4 = apply(&def, &v3, &without, "alice", false, "").unwrap();
        assert_eq!(v4["metadata"]["annotations"], json!({"b": "1"}));
    }

    #[test]
    fn ownership_removal_and_conflicts() {
        let def = cm();
        let live = json!({"metadata": {"name": "a"}});
        let v1 = apply(
            &def,
            &live,
            &cfg(json!({"x": "1", "y": "1"})),
            "alice",
            false,
            "",
        )
        .unwrap();
        assert_eq!(v1["data"], json!({"x": "1", "y": "1"}));
        let mf = &v1["metadata"]["managedFields"][0];
        assert_eq!(mf["operation"], "Apply");
        assert_eq!(mf["fieldsV1"], json!({"f:data": {"f:x": {}, "f:y": {}}}));

        // Bob shares x with the same value: no conflict.
        let v2 = apply(
            &def,
            &v1,
            &cfg(json!({"x": "1", "z": "2"})),
            "bob",
            false,
            "",
        )
        .unwrap();
        // Alice drops x and y: y goes, x stays because Bob owns it.
        let v3 = apply(&def, &v2, &cfg(json!({})), "alice", false, "").unwrap();
        assert_eq!(v3["data"], json!({"x": "1", "z": "2"}));

        // Alice sets z to another value: conflict with Bob, unless forced.
        let err = apply(&def, &v3, &cfg(json!({"z": "3"})), "alice", false, "").unwrap_err();
        assert_eq!(
            err,
            vec![Conflict {
                manager: "bob".into(),
                api_version: "v1".into(),
                path: ".data.z".into()
            }]
        );
        let (msg, _) = conflict_message(&err);
        assert_eq!(
            msg,
            "Apply failed with 1 conflict: conflict with \"bob\" using v1: .data.z"
        );
        let v4 = apply(&def, &v3, &cfg(json!({"z": "3"})), "alice", true, "").unwrap();
        assert_eq!(v4["data"]["z"], "3");
        let bob = managed_fields::read(&v4)
            .into_iter()
            .find(|e| e.manager == "bob")
            .unwrap();
        assert_eq!(bob.set.to_fields_v1(), json!({"f:data": {"f:x": {}}}));
    }

    #[test]
    fn defaulted_key_fields_match_on_reapply() {
        let svc = Registry::with_builtins()
            .lookup("", "v1", "services")
            .unwrap();
        let cfg = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}});
        let mut live = apply(
            &svc,
            &json!({"metadata": {"name": "s"}}),
            &cfg,
            "m",
            false,
            "",
        )
        .unwrap();
        // The server defaults the protocol after the first apply.
        live["spec"]["ports"][0]["protocol"] = json!("TCP");
        let again = apply(&svc, &live, &cfg, "m", false, "").unwrap();
        assert_eq!(
            again["spec"]["ports"],
            json!([{"port": 80, "protocol": "TCP"}])
        );
    }

    #[test]
    fn associative_lists_merge_per_item() {
        let pod = Registry::with_builtins().lookup("", "v1", "pods").unwrap();
        let live = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "1"}]}});
        let applied = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "finalizers": ["f"]},
            "spec": {"containers": [{"name": "b", "image": "2"}]}, "status": {"phase": "x"}});
        let out = apply(&pod, &live, &applied, "m", false, "").unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "a", "image": "1"}, {"name": "b", "image": "2"}])
        );
        assert_eq!(out.get("status"), None);
        let mut again = out.clone();
        remove_path(
            &mut again,
            &[
                "f:spec".into(),
                "f:containers".into(),
                "k:{\"name\":\"a\"}".into(),
            ],
        );
        assert_eq!(
            again["spec"]["containers"],
            json!([{"name": "b", "image": "2"}])
        );
    }
}
