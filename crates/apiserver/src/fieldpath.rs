//! Field sets in the `FieldsV1` format used by `metadata.managedFields`: a tree whose edges are
//! path elements written as the real server writes them (`f:name`, `k:{"name":"c"}`, `v:"x"`,
//! `i:0`) and whose nodes may be members (`.`). Also computes the set of an object and the
//! added/modified/removed comparison of two objects, following structured-merge-diff. List
//! semantics come from `hints`; maps are always treated as structs (see the docs).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::hints::{ListType, list_type};
use crate::registry::ResourceDef;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    pub member: bool,
    pub children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.values().all(FieldSet::is_empty)
    }

    pub fn insert(&mut self, path: &[String]) {
        let mut cur = self;
        for p in path {
            cur = cur.children.entry(p.clone()).or_default();
        }
        cur.member = true;
    }

    pub fn contains(&self, path: &[String]) -> bool {
        let mut cur = self;
        for p in path {
            match cur.children.get(p) {
                Some(c) => cur = c,
                None => return false,
            }
        }
        cur.member
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.member |= other.member;
        for (k, v) in &other.children {
            let merged = match out.children.get(k) {
                Some(mine) => mine.union(v),
                None => v.clone(),
            };
            out.children.insert(k.clone(), merged);
        }
        out
    }

    /// Members of `self` that are not members of `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            let d = match other.children.get(k) {
                Some(o) => v.difference(o),
                None => v.clone(),
            };
            if !d.is_empty() {
                out.children.insert(k.clone(), d);
            }
        }
        out
    }

    /// Members present in both.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            if let Some(o) = other.children.get(k) {
                let i = v.intersection(o);
                if !i.is_empty() {
                    out.children.insert(k.clone(), i);
                }
            }
        }
        out
    }

    /// Removes the subtree rooted at each member of `other` (members and their descendants).
    pub fn without_subtrees(&self, other: &FieldSet) -> FieldSet {
        if other.member {
            return FieldSet::default();
        }
        let mut out = FieldSet {
            member: self.member,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            let d = match other.children.get(k) {
                Some(o) => v.without_subtrees(o),
                None => v.clone(),
            };
            if !d.is_empty() {
                out.children.insert(k.clone(), d);
            }
        }
        out
    }

    /// Whether any member lies strictly below `path` (used to protect shared parents).
    pub fn has_descendants(&self, path: &[String]) -> bool {
        let mut cur = self;
        for p in path {
            match cur.children.get(p) {
                Some(c) => cur = c,
                None => return false,
            }
        }
        cur.children.values().any(|c| !c.is_empty())
    }

    /// Keeps only the subtree under the top-level field `f:{name}` (or drops it when `keep` is false).
    pub fn filter_top(&self, name: &str, keep: bool) -> FieldSet {
        let key = format!("f:{name}");
        let mut out = FieldSet::default();
        for (k, v) in &self.children {
            if (k == &key) == keep {
                out.children.insert(k.clone(), v.clone());
            }
        }
        out
    }

    /// All member paths, depth first.
    pub fn members(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        fn walk(s: &FieldSet, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
            if s.member {
                out.push(prefix.clone());
            }
            for (k, v) in &s.children {
                prefix.push(k.clone());
                walk(v, prefix, out);
                prefix.pop();
            }
        }
        walk(self, &mut Vec::new(), &mut out);
        out
    }

    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (k, v) in &self.children {
            if !v.is_empty() {
                m.insert(k.clone(), v.to_fields_v1());
            }
        }
        Value::Object(m)
    }

    pub fn from_fields_v1(v: &Value) -> FieldSet {
        fn node(v: &Value, is_root: bool) -> FieldSet {
            let mut s = FieldSet::default();
            let Some(m) = v.as_object() else { return s };
            if m.is_empty() && !is_root {
                s.member = true;
            }
            for (k, c) in m {
                if k == "." {
                    s.member = true;
                } else {
                    s.children.insert(k.clone(), node(c, false));
                }
            }
            s
        }
        node(v, true)
    }
}

/// Canonical JSON for `v:`/`k:` elements (object keys sorted).
pub fn canonical_json(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let sorted: BTreeMap<&String, &Value> = m.iter().collect();
            let parts: Vec<String> = sorted
                .iter()
                .map(|(k, v)| format!("{}:{}", Value::String((*k).clone()), canonical_json(v)))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical_json).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// The path element of a list item, or `None` when the item lacks its keys.
pub fn item_element(lt: &ListType, item: &Value, index: usize) -> Option<String> {
    match lt {
        ListType::Atomic => Some(format!("i:{index}")),
        ListType::Set => Some(format!("v:{}", canonical_json(item))),
        ListType::Map(keys) => {
            let obj = item.as_object()?;
            let mut k = Map::new();
            for key in keys {
                if let Some(v) = obj.get(key) {
                    k.insert(key.clone(), v.clone());
                } else if key == "protocol" {
                    // Defaulted key field: the server fills it in, so items match with or without it.
                    k.insert(key.clone(), Value::String("TCP".into()));
                } else {
                    return None;
                }
            }
            if k.is_empty() {
                return None;
            }
            Some(format!("k:{}", canonical_json(&Value::Object(k))))
        }
    }
}

/// Fields never tracked in managedFields.
fn ignored(names: &[String]) -> bool {
    match names {
        [a] => a == "apiVersion" || a == "kind",
        [m, f] if m == "metadata" => matches!(
            f.as_str(),
            "name"
                | "namespace"
                | "uid"
                | "resourceVersion"
                | "generation"
                | "creationTimestamp"
                | "deletionTimestamp"
                | "deletionGracePeriodSeconds"
                | "managedFields"
                | "selfLink"
                | "generateName"
        ),
        _ => false,
    }
}

/// The field set an object (an applied configuration) covers.
pub fn to_set(def: &ResourceDef, obj: &Value) -> FieldSet {
    let mut out = FieldSet::default();
    walk_set(def, obj, &mut Vec::new(), &mut Vec::new(), &mut out);
    out
}

fn walk_set(
    def: &ResourceDef,
    v: &Value,
    names: &mut Vec<String>,
    path: &mut Vec<String>,
    out: &mut FieldSet,
) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, c) in m {
                names.push(k.clone());
                if !ignored(names) {
                    path.push(format!("f:{k}"));
                    walk_set(def, c, names, path, out);
                    path.pop();
                }
                names.pop();
            }
        }
        Value::Array(a) if !a.is_empty() => {
            let lt = list_type(def, names);
            if lt == ListType::Atomic {
                out.insert(path);
                return;
            }
            for (i, item) in a.iter().enumerate() {
                let Some(pe) = item_element(&lt, item, i) else {
                    out.insert(path);
                    return;
                };
                path.push(pe);
                out.insert(path);
                if matches!(lt, ListType::Map(_)) {
                    walk_set(def, item, names, path, out);
                }
                path.pop();
            }
        }
        _ => out.insert(path),
    }
}

/// Result of comparing two versions of an object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

pub fn compare(def: &ResourceDef, old: &Value, new: &Value) -> Comparison {
    let mut c = Comparison::default();
    walk_cmp(
        def,
        Some(old),
        Some(new),
        &mut Vec::new(),
        &mut Vec::new(),
        &mut c,
    );
    // The root itself is never a member.
    c.added.member = false;
    c.removed.member = false;
    c
}

fn is_container(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::Object(m)) if !m.is_empty())
        || matches!(v, Some(Value::Array(a)) if !a.is_empty())
}

fn walk_cmp(
    def: &ResourceDef,
    old: Option<&Value>,
    new: Option<&Value>,
    names: &mut Vec<String>,
    path: &mut Vec<String>,
    c: &mut Comparison,
) {
    let lt = match (old, new) {
        (Some(Value::Array(_)), _) | (_, Some(Value::Array(_))) => list_type(def, names),
        _ => ListType::Atomic,
    };
    let both_objects = matches!(
        (old, new),
        (Some(Value::Object(_)) | None, Some(Value::Object(_)) | None)
    );
    let descend_obj = both_objects && (is_container(old) || is_container(new));
    let descend_list = lt != ListType::Atomic
        && matches!(
            (old, new),
            (Some(Value::Array(_)) | None, Some(Value::Array(_)) | None)
        )
        && (is_container(old) || is_container(new));
    let mut tracked = true;
    if descend_obj {
        let empty = Map::new();
        let om = old.and_then(Value::as_object).unwrap_or(&empty);
        let nm = new.and_then(Value::as_object).unwrap_or(&empty);
        let mut keys: Vec<&String> = om.keys().chain(nm.keys()).collect();
        keys.sort();
        keys.dedup();
        tracked = false;
        for k in keys {
            names.push(k.clone());
            if !ignored(names) {
                tracked = true;
                path.push(format!("f:{k}"));
                walk_cmp(def, om.get(k), nm.get(k), names, path, c);
                path.pop();
            }
            names.pop();
        }
    } else if descend_list {
        let empty = Vec::new();
        let oa = old.and_then(Value::as_array).unwrap_or(&empty);
        let na = new.and_then(Value::as_array).unwrap_or(&empty);
        let index = |a: &Vec<Value>| -> Option<Vec<(String, Value)>> {
            a.iter()
                .enumerate()
                .map(|(i, v)| item_element(&lt, v, i).map(|pe| (pe, v.clone())))
                .collect()
        };
        match (index(oa), index(na)) {
            (Some(oi), Some(ni)) => {
                let mut keys: Vec<&String> = oi
                    .iter()
                    .map(|x| &x.0)
                    .chain(ni.iter().map(|x| &x.0))
                    .collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let o = oi.iter().find(|x| &x.0 == k).map(|x| &x.1);
                    let n = ni.iter().find(|x| &x.0 == k).map(|x| &x.1);
                    path.push(k.clone());
                    if matches!(lt, ListType::Map(_)) {
                        walk_cmp(def, o, n, names, path, c);
                    } else {
                        leaf(o, n, path, c);
                    }
                    path.pop();
                }
            }
            _ => leaf(old, new, path, c),
        }
    } else {
        leaf(old, new, path, c);
        return;
    }
    if !tracked {
        return;
    }
    if old.is_none() {
        c.added.insert(path);
    } else if new.is_none() {
        c.removed.insert(path);
    }
}

fn leaf(old: Option<&Value>, new: Option<&Value>, path: &[String], c: &mut Comparison) {
    match (old, new) {
        (None, Some(_)) => c.added.insert(path),
        (Some(_), None) => c.removed.insert(path),
        (Some(a), Some(b)) if a != b => c.modified.insert(path),
        _ => {}
    }
}

/// `.spec.containers[name="c"].image` style rendering of a path, for conflict messages.
pub fn render_path(path: &[String]) -> String {
    let mut s = String::new();
    for p in path {
        if let Some(f) = p.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = p.strip_prefix("k:") {
            let parsed: Value = serde_json::from_str(k).unwrap_or(Value::Null);
            let parts: Vec<String> = parsed
                .as_object()
                .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                .unwrap_or_default();
            s.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = p.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        } else if let Some(i) = p.strip_prefix("i:") {
            s.push_str(&format!("[{i}]"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    fn pod() -> ResourceDef {
        Registry::with_builtins()
            .lookup("", "v1", "pods")
            .unwrap()
            .as_ref()
            .clone()
    }

    #[test]
    fn apply_set_uses_real_format() {
        let obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "x"},
            "finalizers": ["a/b"]},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]}});
        let s = to_set(&pod(), &obj);
        let v1 = s.to_fields_v1();
        assert_eq!(
            v1,
            json!({"f:metadata": {"f:labels": {"f:app": {}}, "f:finalizers": {"v:\"a/b\"": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {},
                    "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}}}})
        );
        assert_eq!(FieldSet::from_fields_v1(&v1), s);
    }

    #[test]
    fn compare_marks_new_nodes() {
        let old = json!({"spec": {"a": 1}});
        let new = json!({"spec": {"a": 2, "b": {"c": 1}}, "data": {"x": "y"}});
        let c = compare(&pod(), &old, &new);
        assert_eq!(c.modified.to_fields_v1(), json!({"f:spec": {"f:a": {}}}));
        assert_eq!(
            c.added.to_fields_v1(),
            json!({"f:data": {".": {}, "f:x": {}}, "f:spec": {"f:b": {".": {}, "f:c": {}}}})
        );
        let back = compare(&pod(), &new, &old);
        assert!(back.removed.contains(&["f:data".into(), "f:x".into()]));
    }

    #[test]
    fn set_algebra() {
        let mut a = FieldSet::default();
        a.insert(&["f:spec".into(), "f:a".into()]);
        a.insert(&["f:spec".into(), "f:b".into()]);
        let mut b = FieldSet::default();
        b.insert(&["f:spec".into(), "f:b".into()]);
        assert_eq!(
            a.difference(&b).members(),
            vec![vec!["f:spec".to_string(), "f:a".into()]]
        );
        assert_eq!(a.intersection(&b), b);
        let mut spec = FieldSet::default();
        spec.insert(&["f:spec".into()]);
        assert!(a.without_subtrees(&spec).is_empty());
        assert_eq!(
            render_path(&[
                "f:spec".into(),
                "k:{\"name\":\"c\"}".into(),
                "f:image".into()
            ]),
            ".spec[name=\"c\"].image"
        );
    }
}
