//! `metadata.managedFields` bookkeeping: parsing entries, recording `Update` operations from the
//! comparison of two object versions, and the comparison used for the no-op rule (entries equal
//! but for their timestamps). Server-side apply itself lives in `patch::apply`.

use serde_json::{Value, json};

use crate::fieldpath::{FieldSet, compare};
use crate::meta;
use crate::registry::ResourceDef;

#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: String,
    pub set: FieldSet,
}

impl Entry {
    pub fn same_slot(&self, manager: &str, operation: &str, subresource: &str) -> bool {
        self.manager == manager && self.operation == operation && self.subresource == subresource
    }

    fn to_json(&self) -> Value {
        let mut v = json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": self.set.to_fields_v1(),
        });
        if !self.subresource.is_empty() {
            v["subresource"] = json!(self.subresource);
        }
        v
    }
}

pub fn read(obj: &Value) -> Vec<Entry> {
    let Some(list) = meta::meta(obj)
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    list.iter()
        .map(|e| {
            let s = |k: &str| {
                e.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            Entry {
                manager: s("manager"),
                operation: s("operation"),
                api_version: s("apiVersion"),
                time: s("time"),
                subresource: s("subresource"),
                set: e
                    .get("fieldsV1")
                    .map(FieldSet::from_fields_v1)
                    .unwrap_or_default(),
            }
        })
        .collect()
}

pub fn write(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.set.is_empty())
        .map(Entry::to_json)
        .collect();
    let m = meta::meta_mut(obj);
    if list.is_empty() {
        m.remove("managedFields");
    } else {
        m.insert("managedFields".into(), Value::Array(list));
    }
}

/// Keeps the previous timestamp of entries whose field set did not change.
pub fn keep_times(old: &[Entry], new: &mut [Entry]) {
    for n in new.iter_mut() {
        if let Some(o) = old
            .iter()
            .find(|o| o.same_slot(&n.manager, &n.operation, &n.subresource))
            && o.set == n.set
            && o.api_version == n.api_version
        {
            n.time = o.time.clone();
        }
    }
}

/// Records an `Update` by `manager` that turned `old` into `new` (both full objects; `old` is
/// `{}` on create). Fields the update changed are taken from every other manager.
pub fn record_update(
    def: &ResourceDef,
    old: &Value,
    new: &mut Value,
    manager: &str,
    subresource: &str,
) {
    let before = read(old);
    // A client that omits managedFields keeps them; one that sends a list (even `[]`) sets them.
    let provided = meta::meta(new).is_some_and(|m| m.contains_key("managedFields"));
    let mut entries = if provided { read(new) } else { before.clone() };
    let mut cmp = compare(def, old, new);
    // Status writes on the main resource and main writes on /status are reset before storage.
    if def.status_subresource {
        let restrict = |s: &FieldSet| s.filter_top("status", subresource == "status");
        cmp.added = restrict(&cmp.added);
        cmp.modified = restrict(&cmp.modified);
        cmp.removed = restrict(&cmp.removed);
    }
    let touched = cmp.added.union(&cmp.modified);
    for e in entries.iter_mut() {
        if !e.same_slot(manager, "Update", subresource) {
            e.set = e.set.difference(&touched).without_subtrees(&cmp.removed);
        }
    }
    let api_version = def.api_version();
    match entries
        .iter_mut()
        .find(|e| e.same_slot(manager, "Update", subresource))
    {
        Some(e) => {
            e.set = e.set.union(&touched).without_subtrees(&cmp.removed);
            e.api_version = api_version;
            e.time = meta::now();
        }
        None => entries.push(Entry {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version,
            time: meta::now(),
            subresource: subresource.to_string(),
            set: touched,
        }),
    }
    entries.retain(|e| !e.set.is_empty());
    keep_times(&before, &mut entries);
    write(new, &entries);
}

/// Manager name for writes without `fieldManager`: the user agent up to its first `/`.
pub fn manager_from_user_agent(ua: Option<&str>) -> String {
    let ua = ua.unwrap_or("unknown");
    let prefix = ua.split('/').next().unwrap_or(ua).trim();
    if prefix.is_empty() {
        "unknown".into()
    } else {
        prefix.chars().take(128).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    #[test]
    fn update_moves_ownership() {
        let cm = Registry::with_builtins()
            .lookup("", "v1", "configmaps")
            .unwrap();
        let mut v1 = json!({"metadata": {"name": "a"}, "data": {"x": "1", "y": "1"}});
        record_update(&cm, &json!({}), &mut v1, "alice", "");
        let e = read(&v1);
        assert_eq!(e.len(), 1);
        assert_eq!(
            e[0].set.to_fields_v1(),
            json!({"f:data": {".": {}, "f:x": {}, "f:y": {}}})
        );
        let mut v2 = v1.clone();
        v2["data"]["x"] = json!("2");
        record_update(&cm, &v1, &mut v2, "bob", "");
        let e = read(&v2);
        assert_eq!(e.len(), 2);
        assert_eq!(
            e[0].set.to_fields_v1(),
            json!({"f:data": {".": {}, "f:y": {}}})
        );
        assert_eq!(e[1].manager, "bob");
        assert_eq!(e[1].set.to_fields_v1(), json!({"f:data": {"f:x": {}}}));
        assert_eq!(
            manager_from_user_agent(Some("kubectl/v1.33 (linux)")),
            "kubectl"
        );
    }
}
