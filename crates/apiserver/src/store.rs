//! The in-memory object store: objects per storage resource keyed by (namespace, name), the
//! global resourceVersion counter, and the bounded history of watch events (with the RV below
//! which history was dropped, for `410 Expired`). Every mutation goes through `put`/`remove`,
//! which bump the resourceVersion, record the event and wake watchers. No API semantics
//! (preconditions, finalizers, validation) live here: see `write`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::Ipv4Addr;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use crate::ipam::ServiceCidr;
use crate::meta;
use crate::registry::{GroupResource, Registry};

/// (namespace, name); the namespace is empty for cluster-scoped objects.
pub type ObjKey = (String, String);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

#[derive(Debug)]
pub struct WatchEvent {
    pub rv: u64,
    pub gr: GroupResource,
    pub etype: EventType,
    pub object: Arc<Value>,
    /// The previous version (MODIFIED only), to turn selector transitions into ADDED/DELETED.
    pub prev: Option<Arc<Value>>,
}

/// Default number of watch events kept for resumption.
pub const HISTORY_CAP: usize = 10_000;

pub struct State {
    pub rv: u64,
    pub registry: Registry,
    /// Each stored version is one allocation, shared with its watch event and with the next
    /// event's `prev`: the history costs one copy per version, not three.
    objects: HashMap<GroupResource, BTreeMap<ObjKey, Arc<Value>>>,
    history: VecDeque<Arc<WatchEvent>>,
    /// Events with an RV at or below this are no longer available.
    pub history_floor: u64,
    pub history_cap: usize,
    /// Offset into `service_cidr` where ClusterIP allocation continues (persisted).
    pub next_cluster_ip: u32,
    pub service_cidr: ServiceCidr,
    /// Set by every mutation; cleared by the snapshot writer.
    pub dirty: bool,
    /// While set (a `dryRun=All` request holds the lock), mutations are computed but not stored.
    pub dry_run: bool,
    /// Bumped by every change to an RBAC object; the authorizer's index is rebuilt when it moves.
    pub rbac_rev: u64,
    /// Tokens and the RBAC index.
    pub auth: crate::auth::AuthState,
    tx: watch::Sender<u64>,
    gc: Arc<Notify>,
    /// The ClusterIPs stored Services hold, kept with every Service write so that allocating
    /// one does not scan every Service.
    service_ips: HashSet<Ipv4Addr>,
    /// Labels and selectors of the kinds the built-in controllers match, kept with every write.
    indexes: crate::index::Indexes,
}

/// The ClusterIP a stored Service holds, if any.
fn cluster_ip(gr: &GroupResource, obj: &Value) -> Option<Ipv4Addr> {
    if gr.group.is_empty() && gr.resource == "services" {
        meta::get_path(obj, "spec.clusterIP")?
            .as_str()?
            .parse()
            .ok()
    } else {
        None
    }
}

impl State {
    pub fn new(tx: watch::Sender<u64>, gc: Arc<Notify>) -> Self {
        let mut s = Self {
            rv: 0,
            registry: Registry::with_builtins(),
            objects: HashMap::new(),
            history: VecDeque::new(),
            history_floor: 0,
            history_cap: HISTORY_CAP,
            next_cluster_ip: 10,
            service_cidr: ServiceCidr::default(),
            dirty: false,
            dry_run: false,
            rbac_rev: 0,
            auth: Default::default(),
            tx,
            gc,
            service_ips: HashSet::new(),
            indexes: Default::default(),
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj = json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": ns,
                    "uid": meta::new_uid(),
                    "creationTimestamp": meta::now(),
                    "labels": {"kubernetes.io/metadata.name": ns},
                },
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            });
            s.put(&GroupResource::new("", "namespaces"), obj, EventType::Added);
        }
        s
    }

    /// The ClusterIPs stored Services hold.
    pub fn cluster_ips_in_use(&self) -> HashSet<Ipv4Addr> {
        self.service_ips.clone()
    }

    pub fn get(&self, gr: &GroupResource, ns: &str, name: &str) -> Option<&Value> {
        self.get_shared(gr, ns, name).map(AsRef::as_ref)
    }

    /// As [`Self::get`], the shared handle.
    pub fn get_shared(&self, gr: &GroupResource, ns: &str, name: &str) -> Option<&Arc<Value>> {
        self.objects
            .get(gr)?
            .get(&(ns.to_string(), name.to_string()))
    }

    /// Objects of a resource, sorted by (namespace, name); `ns = None` means all namespaces.
    pub fn list<'a>(
        &'a self,
        gr: &GroupResource,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        self.list_shared(gr, ns).map(AsRef::as_ref)
    }

    /// As [`Self::list`], the shared handles: a caller takes them under the lock and copies or
    /// serialises after releasing it.
    pub fn list_shared<'a>(
        &'a self,
        gr: &GroupResource,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Arc<Value>> + 'a {
        let from = (ns.unwrap_or_default().to_string(), String::new());
        self.objects
            .get(gr)
            .into_iter()
            .flat_map(move |m| m.range(from.clone()..))
            .take_while(move |((n, _), _)| ns.is_none_or(|x| x == n))
            .map(|(_, v)| v)
    }

    /// The Pods of `ns` that carry the rarest of these `key=value` pairs, from the label index:
    /// a superset of those a selector made of the pairs selects; `None` when there are none.
    pub fn pods_by_rarest_pair(
        &self,
        ns: &str,
        pairs: &serde_json::Map<String, Value>,
    ) -> Option<Vec<&Value>> {
        let pods = GroupResource::new("", "pods");
        let names = pairs
            .iter()
            .map(|(k, v)| {
                self.indexes
                    .labelled(&pods, ns, k, v.as_str().unwrap_or_default())
            })
            .min_by_key(|names| names.len())?;
        Some(
            names
                .iter()
                .filter_map(|n| self.get(&pods, ns, n))
                .collect(),
        )
    }

    /// The store's label and selector indexes.
    pub fn indexes(&self) -> &crate::index::Indexes {
        &self.indexes
    }

    pub fn resources(
        &self,
    ) -> impl Iterator<Item = (&GroupResource, &BTreeMap<ObjKey, Arc<Value>>)> {
        self.objects.iter()
    }

    #[cfg(test)]
    pub fn namespace_exists(&self, ns: &str) -> bool {
        self.get(&GroupResource::new("", "namespaces"), "", ns)
            .is_some()
    }

    /// An object's (namespace, name): its key in the store.
    pub fn key_of(obj: &Value) -> ObjKey {
        (
            meta::namespace(obj).unwrap_or_default().to_string(),
            meta::name(obj).unwrap_or_default().to_string(),
        )
    }

    fn record(
        &mut self,
        gr: &GroupResource,
        etype: EventType,
        object: Arc<Value>,
        prev: Option<Arc<Value>>,
    ) {
        self.history.push_back(Arc::new(WatchEvent {
            rv: self.rv,
            gr: gr.clone(),
            etype,
            object,
            prev,
        }));
        while self.history.len() > self.history_cap {
            if let Some(e) = self.history.pop_front() {
                self.history_floor = e.rv;
            }
        }
        if gr.group == crate::auth::index::RBAC_GROUP {
            self.rbac_rev += 1;
        }
        self.dirty = true;
        self.tx.send_replace(self.rv);
    }

    /// Stores `obj` with a fresh resourceVersion and records the event. Returns the stored object.
    pub fn put(&mut self, gr: &GroupResource, mut obj: Value, etype: EventType) -> Value {
        if self.dry_run {
            return obj;
        }
        self.rv += 1;
        meta::meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
        let key = Self::key_of(&obj);
        let stored = Arc::new(obj);
        let prev = self
            .objects
            .entry(gr.clone())
            .or_default()
            .insert(key, stored.clone());
        if let Some(p) = &prev {
            self.indexes.remove(gr, p);
        }
        self.indexes.insert(gr, &stored);
        if let Some(ip) = prev.as_ref().and_then(|p| cluster_ip(gr, p)) {
            self.service_ips.remove(&ip);
        }
        if let Some(ip) = cluster_ip(gr, &stored) {
            self.service_ips.insert(ip);
        }
        let etype = if prev.is_none() {
            EventType::Added
        } else {
            etype
        };
        self.record(gr, etype, stored.clone(), prev);
        Arc::unwrap_or_clone(stored)
    }

    /// Removes an object; `last` is its final state (a DELETED event carries it with a new RV).
    pub fn remove(&mut self, gr: &GroupResource, mut last: Value) -> Value {
        if self.dry_run {
            return last;
        }
        self.rv += 1;
        meta::meta_mut(&mut last).insert("resourceVersion".into(), json!(self.rv.to_string()));
        let key = Self::key_of(&last);
        let last = Arc::new(last);
        if let Some(m) = self.objects.get_mut(gr)
            && let Some(gone) = m.remove(&key)
        {
            self.indexes.remove(gr, &gone);
            if let Some(ip) = cluster_ip(gr, &gone) {
                self.service_ips.remove(&ip);
            }
        }
        self.record(gr, EventType::Deleted, last.clone(), None);
        self.gc.notify_one();
        Arc::unwrap_or_clone(last)
    }

    /// Wakes the garbage collector (after deletions or deletionTimestamp changes).
    pub fn kick_gc(&self) {
        if self.dry_run {
            return;
        }
        self.gc.notify_one();
    }

    pub fn set_history_cap(&mut self, cap: usize) {
        self.history_cap = cap;
        while self.history.len() > self.history_cap {
            if let Some(e) = self.history.pop_front() {
                self.history_floor = e.rv;
            }
        }
    }

    /// Events with an RV strictly greater than `rv`, or `Err(floor)` when some are gone.
    pub fn events_after(&self, rv: u64) -> Result<Vec<Arc<WatchEvent>>, u64> {
        if rv < self.history_floor {
            return Err(self.history_floor);
        }
        let start = self.history.partition_point(|e| e.rv <= rv);
        Ok(self.history.range(start..).cloned().collect())
    }

    /// Replaces the whole content (snapshot loading). History starts empty at `rv`.
    pub fn load(&mut self, rv: u64, objects: Vec<(GroupResource, Value)>) {
        self.objects.clear();
        self.service_ips.clear();
        self.indexes.clear();
        for (gr, obj) in objects {
            self.service_ips.extend(cluster_ip(&gr, &obj));
            self.indexes.insert(&gr, &obj);
            let key = Self::key_of(&obj);
            self.objects
                .entry(gr)
                .or_default()
                .insert(key, Arc::new(obj));
        }
        self.rv = rv;
        self.rbac_rev += 1;
        self.history.clear();
        self.history_floor = rv;
        self.tx.send_replace(rv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        State::new(watch::channel(0).0, Arc::new(Notify::new()))
    }

    #[test]
    fn rv_history_and_expiry() {
        let mut s = state();
        assert!(s.namespace_exists("kube-system"));
        let start = s.rv;
        let gr = GroupResource::new("", "configmaps");
        let v = s.put(
            &gr,
            json!({"metadata": {"name": "a", "namespace": "default"}}),
            EventType::Added,
        );
        assert_eq!(
            meta::resource_version(&v),
            Some((start + 1).to_string().as_str())
        );
        s.put(
            &gr,
            json!({"metadata": {"name": "a", "namespace": "default"}, "data": {}}),
            EventType::Modified,
        );
        let ev = s.events_after(start).unwrap();
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[0].etype, EventType::Added);
        assert_eq!(ev[1].etype, EventType::Modified);
        assert!(ev[1].prev.is_some());
        s.history_cap = 1;
        s.remove(&gr, v);
        assert_eq!(s.events_after(start).err(), Some(start + 2));
        assert_eq!(s.list(&gr, None).count(), 0);
    }
}
