//! Indexes the store keeps with every write, so that the built-in controllers that match Pods
//! and selectors (endpoints, disruption) cost what changed rather than what is stored — as
//! kube-controller-manager's informers keep indexers beside their caches:
//! - the labels of Pods and EndpointSlices: (namespace, key, value) → names;
//! - the selectors of Services (`spec.selector`) and PodDisruptionBudgets
//!   (`spec.selector.matchLabels`, when that is all the selector holds): by namespace, the
//!   selector's keys, then its values → names. A budget whose selector has `matchExpressions`
//!   (or is empty) is kept apart, as "irregular": every query returns it, for the caller's own
//!   selector check.
//!
//! - every object by uid, and the objects that name an owner by that owner's uid (the garbage
//!   collector's graph: it looks at what changed and at their owners and dependents).
//!
//! Which selectors may select a Pod is then one lookup per distinct set of selector keys in
//! its namespace (a handful), whatever the number of Services or budgets.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value};

use crate::meta;
use crate::registry::GroupResource;

type Names = BTreeSet<String>;

/// Where an object is stored: (resource, namespace, name).
pub type Loc = (GroupResource, String, String);

/// A namespace's labels: key → value → names.
type ByLabel = HashMap<String, HashMap<String, Names>>;

/// Values → names, for one set of selector keys.
type ByValues = HashMap<Vec<String>, Names>;

#[derive(Debug, Default)]
struct Selectors {
    /// Selector keys (sorted) → the selectors' values in that order → names.
    by_keys: HashMap<Vec<String>, ByValues>,
    irregular: Names,
}

#[derive(Debug, Default)]
pub struct Indexes {
    /// gr → namespace → key → value → names.
    labels: HashMap<GroupResource, HashMap<String, ByLabel>>,
    /// gr → namespace → selectors.
    selectors: HashMap<GroupResource, HashMap<String, Selectors>>,
    /// uid → where the object is.
    uids: HashMap<String, Loc>,
    /// Owner uid → the objects whose `ownerReferences` name it.
    dependents: HashMap<String, BTreeSet<Loc>>,
}

/// What the index keeps of a selector.
enum Selector {
    /// `key=value` pairs, sorted by key.
    Pairs(Vec<(String, String)>),
    Irregular,
}

fn labelled_resource(gr: &GroupResource) -> bool {
    (gr.group.is_empty() && gr.resource == "pods")
        || (gr.group == "discovery.k8s.io" && gr.resource == "endpointslices")
}

fn pairs(m: &Map<String, Value>) -> Vec<(String, String)> {
    // `Map` is ordered by key.
    m.iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect()
}

/// The selector an object of `gr` holds, for the kinds whose selectors are indexed.
fn selector_of(gr: &GroupResource, obj: &Value) -> Option<Selector> {
    if gr.group.is_empty() && gr.resource == "services" {
        // A Service without a selector selects nothing (the controllers leave it alone).
        let sel = meta::get_path(obj, "spec.selector")
            .and_then(Value::as_object)
            .filter(|s| !s.is_empty())?;
        return Some(Selector::Pairs(pairs(sel)));
    }
    if gr.group == "policy" && gr.resource == "poddisruptionbudgets" {
        let sel = meta::get_path(obj, "spec.selector");
        let labels = sel
            .and_then(|s| s.get("matchLabels"))
            .and_then(Value::as_object)
            .filter(|m| !m.is_empty());
        let exprs = sel
            .and_then(|s| s.get("matchExpressions"))
            .and_then(Value::as_array)
            .is_some_and(|e| !e.is_empty());
        return Some(match labels {
            Some(m) if !exprs => Selector::Pairs(pairs(m)),
            _ => Selector::Irregular,
        });
    }
    None
}

impl Indexes {
    /// Takes a stored object in.
    pub fn insert(&mut self, gr: &GroupResource, obj: &Value) {
        self.apply(gr, obj, true);
    }

    /// Takes a stored object out (the version that was stored).
    pub fn remove(&mut self, gr: &GroupResource, obj: &Value) {
        self.apply(gr, obj, false);
    }

    pub fn clear(&mut self) {
        self.labels.clear();
        self.selectors.clear();
        self.uids.clear();
        self.dependents.clear();
    }

    /// Where the object with this uid is stored.
    pub fn by_uid(&self, uid: &str) -> Option<&Loc> {
        self.uids.get(uid)
    }

    /// The objects whose `ownerReferences` name this uid.
    pub fn dependents_of(&self, uid: &str) -> impl Iterator<Item = &Loc> {
        self.dependents.get(uid).into_iter().flatten()
    }

    fn graph(&mut self, gr: &GroupResource, ns: &str, name: &str, obj: &Value, add: bool) {
        let loc = || (gr.clone(), ns.to_owned(), name.to_owned());
        if let Some(uid) = meta::uid(obj) {
            if add {
                self.uids.insert(uid.to_owned(), loc());
            } else if self
                .uids
                .get(uid)
                .is_some_and(|l| l.0 == *gr && l.1 == ns && l.2 == name)
            {
                self.uids.remove(uid);
            }
        }
        for owner in meta::owner_references_ref(obj)
            .iter()
            .filter_map(|r| r.get("uid").and_then(Value::as_str))
        {
            if add {
                self.dependents
                    .entry(owner.to_owned())
                    .or_default()
                    .insert(loc());
            } else if let Some(set) = self.dependents.get_mut(owner) {
                set.remove(&loc());
                if set.is_empty() {
                    self.dependents.remove(owner);
                }
            }
        }
    }

    fn apply(&mut self, gr: &GroupResource, obj: &Value, add: bool) {
        let ns = meta::namespace(obj).unwrap_or_default();
        let Some(name) = meta::name(obj) else { return };
        self.graph(gr, ns, name, obj, add);
        if labelled_resource(gr) {
            let by_ns = self.labels.entry(gr.clone()).or_default();
            for (k, v) in meta::labels_ref(obj) {
                let Some(v) = v.as_str() else { continue };
                if add {
                    by_ns
                        .entry(ns.to_owned())
                        .or_default()
                        .entry(k.clone())
                        .or_default()
                        .entry(v.to_owned())
                        .or_default()
                        .insert(name.to_owned());
                } else if let Some(by_key) = by_ns.get_mut(ns) {
                    if let Some(by_value) = by_key.get_mut(k.as_str()) {
                        if let Some(names) = by_value.get_mut(v) {
                            names.remove(name);
                            if names.is_empty() {
                                by_value.remove(v);
                            }
                        }
                        if by_value.is_empty() {
                            by_key.remove(k.as_str());
                        }
                    }
                    if by_key.is_empty() {
                        by_ns.remove(ns);
                    }
                }
            }
            return;
        }
        let Some(selector) = selector_of(gr, obj) else {
            return;
        };
        let by_ns = self.selectors.entry(gr.clone()).or_default();
        let sels = by_ns.entry(ns.to_owned()).or_default();
        match selector {
            Selector::Irregular if add => {
                sels.irregular.insert(name.to_owned());
            }
            Selector::Irregular => {
                sels.irregular.remove(name);
            }
            Selector::Pairs(pairs) => {
                let (keys, values): (Vec<String>, Vec<String>) = pairs.into_iter().unzip();
                if add {
                    sels.by_keys
                        .entry(keys)
                        .or_default()
                        .entry(values)
                        .or_default()
                        .insert(name.to_owned());
                } else if let Some(by_values) = sels.by_keys.get_mut(&keys) {
                    if let Some(names) = by_values.get_mut(&values) {
                        names.remove(name);
                        if names.is_empty() {
                            by_values.remove(&values);
                        }
                    }
                    if by_values.is_empty() {
                        sels.by_keys.remove(&keys);
                    }
                }
            }
        }
        if sels.by_keys.is_empty() && sels.irregular.is_empty() {
            by_ns.remove(ns);
        }
    }

    /// The names of the objects of `gr` (Pods, EndpointSlices) in `ns` labelled `key=value`.
    pub fn labelled(&self, gr: &GroupResource, ns: &str, key: &str, value: &str) -> &Names {
        static EMPTY: Names = BTreeSet::new();
        self.labels
            .get(gr)
            .and_then(|m| m.get(ns))
            .and_then(|m| m.get(key))
            .and_then(|m| m.get(value))
            .unwrap_or(&EMPTY)
    }

    /// The names of the objects of `gr` (Services, PodDisruptionBudgets) in `ns` whose
    /// `key=value` selector these labels satisfy, and those with irregular selectors (which the
    /// caller checks itself).
    pub fn selecting(&self, gr: &GroupResource, ns: &str, labels: &Map<String, Value>) -> Names {
        let mut out = Names::new();
        let Some(sels) = self.selectors.get(gr).and_then(|m| m.get(ns)) else {
            return out;
        };
        out.extend(sels.irregular.iter().cloned());
        for (keys, by_values) in &sels.by_keys {
            let values: Option<Vec<String>> = keys
                .iter()
                .map(|k| labels.get(k).and_then(Value::as_str).map(str::to_owned))
                .collect();
            if let Some(names) = values.and_then(|v| by_values.get(&v)) {
                out.extend(names.iter().cloned());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pods() -> GroupResource {
        GroupResource::new("", "pods")
    }

    fn services() -> GroupResource {
        GroupResource::new("", "services")
    }

    fn pdbs() -> GroupResource {
        GroupResource::new("policy", "poddisruptionbudgets")
    }

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn labels_are_indexed_and_forgotten() {
        let mut ix = Indexes::default();
        let a = json!({"metadata": {"name": "a", "namespace": "n", "labels": {"app": "x", "tier": "db"}}});
        let b = json!({"metadata": {"name": "b", "namespace": "n", "labels": {"app": "x"}}});
        let c = json!({"metadata": {"name": "c", "namespace": "m", "labels": {"app": "x"}}});
        for o in [&a, &b, &c] {
            ix.insert(&pods(), o);
        }
        let names = |ix: &Indexes, ns, k, v| {
            ix.labelled(&pods(), ns, k, v)
                .iter()
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&ix, "n", "app", "x"), ["a", "b"]);
        assert_eq!(names(&ix, "n", "tier", "db"), ["a"]);
        assert_eq!(names(&ix, "m", "app", "x"), ["c"]);
        // A relabel is a remove of the stored version and an insert of the new one.
        ix.remove(&pods(), &a);
        ix.insert(
            &pods(),
            &json!({"metadata": {"name": "a", "namespace": "n", "labels": {"app": "y"}}}),
        );
        assert_eq!(names(&ix, "n", "app", "x"), ["b"]);
        assert!(names(&ix, "n", "tier", "db").is_empty());
        assert_eq!(names(&ix, "n", "app", "y"), ["a"]);
        // Other kinds are not indexed by label.
        ix.insert(&GroupResource::new("", "configmaps"), &b);
        assert_eq!(names(&ix, "n", "app", "x"), ["b"]);
        ix.remove(&pods(), &b);
        ix.remove(&pods(), &c);
        assert!(ix.labels.get(&pods()).is_some_and(|m| !m.contains_key("m")));
    }

    #[test]
    fn selectors_that_a_pods_labels_satisfy() {
        let mut ix = Indexes::default();
        let svc = |name: &str, sel: Value| json!({"metadata": {"name": name, "namespace": "n"}, "spec": {"selector": sel}});
        ix.insert(&services(), &svc("all", json!({"app": "x"})));
        ix.insert(
            &services(),
            &svc("primary", json!({"app": "x", "role": "primary"})),
        );
        ix.insert(&services(), &svc("other", json!({"app": "z"})));
        ix.insert(&services(), &svc("none", json!({})));
        let pod = labels(json!({"app": "x", "role": "primary", "extra": "1"}));
        let got: Vec<String> = ix.selecting(&services(), "n", &pod).into_iter().collect();
        assert_eq!(got, ["all", "primary"]);
        let replica = labels(json!({"app": "x", "role": "replica"}));
        let got: Vec<String> = ix
            .selecting(&services(), "n", &replica)
            .into_iter()
            .collect();
        assert_eq!(got, ["all"]);
        assert!(ix.selecting(&services(), "other-ns", &pod).is_empty());
        ix.remove(&services(), &svc("all", json!({"app": "x"})));
        let got: Vec<String> = ix.selecting(&services(), "n", &pod).into_iter().collect();
        assert_eq!(got, ["primary"]);
    }

    #[test]
    fn owners_and_dependents_by_uid() {
        let mut ix = Indexes::default();
        let cms = GroupResource::new("", "configmaps");
        let owner = json!({"metadata": {"name": "o", "namespace": "n", "uid": "u1"}});
        let dep = |refs: Value| json!({"metadata": {"name": "d", "namespace": "n", "uid": "u2", "ownerReferences": refs}});
        let one = dep(json!([{"uid": "u1", "kind": "ConfigMap", "name": "o"}]));
        ix.insert(&cms, &owner);
        ix.insert(&pods(), &one);
        let loc = |gr: &GroupResource, name: &str| (gr.clone(), "n".to_owned(), name.to_owned());
        assert_eq!(ix.by_uid("u1"), Some(&loc(&cms, "o")));
        assert_eq!(ix.by_uid("u2"), Some(&loc(&pods(), "d")));
        assert_eq!(
            ix.dependents_of("u1").collect::<Vec<_>>(),
            [&loc(&pods(), "d")]
        );
        // The dependent now names another owner: the index follows the stored version.
        ix.remove(&pods(), &one);
        ix.insert(&pods(), &dep(json!([{"uid": "u9"}])));
        assert_eq!(ix.dependents_of("u1").count(), 0);
        assert_eq!(ix.dependents_of("u9").count(), 1);
        ix.remove(&cms, &owner);
        assert_eq!(ix.by_uid("u1"), None);
    }

    #[test]
    fn budgets_with_expressions_are_always_candidates() {
        let mut ix = Indexes::default();
        let pdb = |name: &str, sel: Value| json!({"metadata": {"name": name, "namespace": "n"}, "spec": {"selector": sel}});
        let exprs = pdb(
            "exprs",
            json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]}),
        );
        ix.insert(&pdbs(), &pdb("plain", json!({"matchLabels": {"app": "x"}})));
        ix.insert(&pdbs(), &exprs);
        let unrelated = labels(json!({"app": "q"}));
        let got: Vec<String> = ix.selecting(&pdbs(), "n", &unrelated).into_iter().collect();
        assert_eq!(got, ["exprs"]);
        let pod = labels(json!({"app": "x"}));
        let got: Vec<String> = ix.selecting(&pdbs(), "n", &pod).into_iter().collect();
        assert_eq!(got, ["exprs", "plain"]);
        ix.remove(&pdbs(), &exprs);
        let got: Vec<String> = ix.selecting(&pdbs(), "n", &unrelated).into_iter().collect();
        assert!(got.is_empty());
    }
}
