//! The fake API server: a `kube::Client` over a `tower::service_fn` and an in-memory object
//! store, answering only the requests the pipeline makes — create Pod / claim (201, or 409),
//! delete Pod / claim (200, or 404; an operator-deleted Pod is gone at once or, for a while,
//! left terminating), a merge patch of a Pod's labels and annotations or of a claim's, the
//! server-side apply of the ConfigMap. Anything else is recorded as a violation and answered 500: the run fails loudly.
//! Every create and delete is recorded with the pass and the step that made it; every deletion
//! is checked against the invariants first, at that moment (`invariants::on_delete`).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};

use http::{Method, Request, Response};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use crate::foundationdb::admin::model::ModelFdb;

/// A process group as the step that made a request saw it (its pass's status).
#[derive(Clone, Debug)]
pub(super) struct GroupView {
    pub id: String,
    pub class: String,
    pub removing: bool,
    pub exclusion_skipped: bool,
}

/// The store, and what the service records.
pub(super) struct Objects {
    pub pods: BTreeMap<String, Pod>,
    pub claims: BTreeMap<String, PersistentVolumeClaim>,
    pub config_map: Option<Value>,
    /// Pod IPs by Pod name (assigned at creation).
    pub ips: BTreeMap<String, String>,
    /// A recreated Pod gets a new IP (else it keeps its name's).
    pub fresh_ips: bool,
    /// Zones by Pod name: placed on first creation in the zone with the fewest Pods (a
    /// topology spread), then kept (its claim is bound there).
    pub zones: BTreeMap<String, String>,
    next_ip: u32,
    rv: u64,
    pub now: jiff::Timestamp,
    pub pass: u32,
    /// The step running now.
    pub step: &'static str,
    /// The process groups of the running pass, when the step started.
    pub groups: Vec<GroupView>,
    /// Operator-deleted Pods stay terminating this many passes (0: gone at once).
    pub linger: u32,
    /// Terminating Pods: the pass at which they are gone.
    pub terminating: BTreeMap<String, u32>,
    /// Creates and deletes: (pass, step, what).
    pub log: Vec<(u32, &'static str, String)>,
    /// Invariant violations and unexpected requests.
    pub violations: Vec<String>,
    /// Pods UpdatePods deleted.
    pub update_deletes: u32,
    /// Pods and claims RemoveProcessGroups deleted.
    pub remove_deletes: u32,
    pub model: ModelFdb,
}

impl Objects {
    pub fn new(model: ModelFdb, now: jiff::Timestamp, fresh_ips: bool) -> Self {
        Self {
            pods: BTreeMap::new(),
            claims: BTreeMap::new(),
            config_map: None,
            ips: BTreeMap::new(),
            fresh_ips,
            zones: BTreeMap::new(),
            next_ip: 0,
            rv: 0,
            now,
            pass: 0,
            step: "",
            groups: Vec::new(),
            linger: 0,
            terminating: BTreeMap::new(),
            log: Vec::new(),
            violations: Vec::new(),
            update_deletes: 0,
            remove_deletes: 0,
            model,
        }
    }

    fn version(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    fn ip_for(&mut self, name: &str) -> String {
        if !self.fresh_ips
            && let Some(ip) = self.ips.get(name)
        {
            return ip.clone();
        }
        self.next_ip += 1;
        let ip = format!(
            "10.{}.{}.{}",
            self.next_ip / 65536,
            (self.next_ip / 256) % 256,
            self.next_ip % 256
        );
        self.ips.insert(name.to_owned(), ip.clone());
        ip
    }

    /// The zone of Pod `name` (n1 before it is placed).
    pub fn zone(&self, name: &str) -> String {
        self.zones
            .get(name)
            .cloned()
            .unwrap_or_else(|| "n1".to_owned())
    }

    fn place(&mut self, name: &str) {
        if self.zones.contains_key(name) {
            return;
        }
        let zone = ["n1", "n2", "n3"]
            .into_iter()
            .min_by_key(|z| {
                self.pods
                    .keys()
                    .filter(|n| self.zones.get(*n).map(String::as_str) == Some(*z))
                    .count()
            })
            .unwrap_or("n1");
        self.zones.insert(name.to_owned(), zone.to_owned());
    }

    /// A Pod deleted outside the operator (a kill): gone at once.
    pub fn kill_pod(&mut self, name: &str) -> bool {
        self.terminating.remove(name);
        self.pods.remove(name).is_some()
    }

    /// Terminating Pods whose time has come are gone.
    pub fn expire(&mut self) {
        let pass = self.pass;
        let gone: Vec<String> = self
            .terminating
            .iter()
            .filter(|(_, until)| **until <= pass)
            .map(|(n, _)| n.clone())
            .collect();
        for n in gone {
            self.terminating.remove(&n);
            self.pods.remove(&n);
        }
    }
}

/// The shared store.
pub(super) type Shared = Arc<Mutex<Objects>>;

pub(super) fn lock(s: &Shared) -> MutexGuard<'_, Objects> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A client whose every request goes to the store.
pub(super) fn client(shared: Shared) -> kube::Client {
    let service = tower::service_fn(move |req: Request<kube::client::Body>| {
        let shared = shared.clone();
        async move {
            let (parts, body) = req.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes().to_vec())
                .unwrap_or_default();
            let (code, out) = handle(&shared, &parts, &bytes);
            let response = Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(kube::client::Body::from(
                    serde_json::to_vec(&out).unwrap_or_default(),
                ))
                .expect("a response");
            Ok::<_, Infallible>(response)
        }
    });
    kube::Client::new(service, "default")
}

fn status(code: u16, reason: &str, message: String) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

/// RFC 7386.
fn merge(target: &mut Value, patch: &Value) {
    if let Value::Object(p) = patch {
        if !target.is_object() {
            *target = json!({});
        }
        let t = target.as_object_mut().expect("object");
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    } else {
        *target = patch.clone();
    }
}

/// Whether a merge patch touches only an object's labels and annotations (UpdatePodConfig,
/// UpdateLabels).
fn metadata_only(patch: &Value) -> bool {
    patch.as_object().is_some_and(|m| {
        m.len() == 1
            && m.get("metadata")
                .and_then(Value::as_object)
                .is_some_and(|md| {
                    !md.is_empty() && md.keys().all(|k| k == "labels" || k == "annotations")
                })
    })
}

fn handle(shared: &Shared, parts: &http::request::Parts, body: &[u8]) -> (u16, Value) {
    let mut o = lock(shared);
    let path = parts.uri.path().to_owned();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let content_type = parts
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let (pass, step) = (o.pass, o.step);
    let unexpected = |o: &mut Objects| {
        let what = format!(
            "unexpected request {} {} ({content_type})",
            parts.method, parts.uri
        );
        o.violations.push(what.clone());
        status(500, "InternalError", what)
    };
    let ["api", "v1", "namespaces", ns, resource, rest @ ..] = segments.as_slice() else {
        return unexpected(&mut o);
    };
    if *ns != super::NS {
        return unexpected(&mut o);
    }
    let now = Time(o.now);
    match (&parts.method, *resource, rest) {
        (&Method::POST, "pods", []) => {
            let Ok(mut pod) = serde_json::from_slice::<Pod>(body) else {
                return unexpected(&mut o);
            };
            let name = pod.metadata.name.clone().unwrap_or_default();
            if o.pods.contains_key(&name) {
                return status(
                    409,
                    "AlreadyExists",
                    format!("pods \"{name}\" already exists"),
                );
            }
            let version = o.version();
            pod.metadata.resource_version = Some(version);
            pod.metadata.uid = Some(format!("uid-{name}-{}", o.rv));
            pod.metadata.namespace = Some(super::NS.into());
            pod.metadata.creation_timestamp = Some(now);
            o.ip_for(&name);
            o.place(&name);
            o.log.push((pass, step, format!("create Pod {name}")));
            let out = serde_json::to_value(&pod).unwrap_or_default();
            o.pods.insert(name, pod);
            (201, out)
        }
        (&Method::POST, "persistentvolumeclaims", []) => {
            let Ok(mut claim) = serde_json::from_slice::<PersistentVolumeClaim>(body) else {
                return unexpected(&mut o);
            };
            let name = claim.metadata.name.clone().unwrap_or_default();
            if o.claims.contains_key(&name) {
                return status(
                    409,
                    "AlreadyExists",
                    format!("claim \"{name}\" already exists"),
                );
            }
            let version = o.version();
            claim.metadata.resource_version = Some(version);
            claim.metadata.namespace = Some(super::NS.into());
            claim.metadata.creation_timestamp = Some(now);
            o.log.push((pass, step, format!("create PVC {name}")));
            let out = serde_json::to_value(&claim).unwrap_or_default();
            o.claims.insert(name, claim);
            (201, out)
        }
        (&Method::DELETE, "pods", [name]) => {
            let name = (*name).to_owned();
            let Some(pod) = o.pods.get(&name).cloned() else {
                return status(404, "NotFound", format!("pods \"{name}\" not found"));
            };
            if o.terminating.contains_key(&name) {
                return (200, serde_json::to_value(&pod).unwrap_or_default());
            }
            let violations = super::invariants::on_delete(&o, "Pod", &name);
            o.violations.extend(violations);
            o.log.push((pass, step, format!("delete Pod {name}")));
            match step {
                "UpdatePods" => o.update_deletes += 1,
                "RemoveProcessGroups" => o.remove_deletes += 1,
                _ => {}
            }
            if o.linger == 0 {
                o.pods.remove(&name);
                (200, serde_json::to_value(&pod).unwrap_or_default())
            } else {
                let until = pass + o.linger;
                o.terminating.insert(name.clone(), until);
                let p = o.pods.get_mut(&name).expect("present");
                p.metadata.deletion_timestamp = Some(now);
                (200, serde_json::to_value(&*p).unwrap_or_default())
            }
        }
        (&Method::DELETE, "persistentvolumeclaims", [name]) => {
            let name = (*name).to_owned();
            let Some(claim) = o.claims.get(&name).cloned() else {
                return status(404, "NotFound", format!("claim \"{name}\" not found"));
            };
            let violations = super::invariants::on_delete(&o, "PVC", &name);
            o.violations.extend(violations);
            o.log.push((pass, step, format!("delete PVC {name}")));
            if step == "RemoveProcessGroups" {
                o.remove_deletes += 1;
            }
            o.claims.remove(&name);
            (200, serde_json::to_value(&claim).unwrap_or_default())
        }
        (&Method::PATCH, "pods", [name]) if content_type == "application/merge-patch+json" => {
            let name = (*name).to_owned();
            let Ok(patch) = serde_json::from_slice::<Value>(body) else {
                return unexpected(&mut o);
            };
            if !metadata_only(&patch) {
                return unexpected(&mut o);
            }
            let Some(pod) = o.pods.get(&name).cloned() else {
                return status(404, "NotFound", format!("pods \"{name}\" not found"));
            };
            let mut v = serde_json::to_value(&pod).unwrap_or_default();
            merge(&mut v, &patch);
            let version = o.version();
            v["metadata"]["resourceVersion"] = json!(version);
            let Ok(pod) = serde_json::from_value::<Pod>(v.clone()) else {
                return unexpected(&mut o);
            };
            o.pods.insert(name, pod);
            (200, v)
        }
        (&Method::PATCH, "persistentvolumeclaims", [name])
            if content_type == "application/merge-patch+json" =>
        {
            let name = (*name).to_owned();
            let Ok(patch) = serde_json::from_slice::<Value>(body) else {
                return unexpected(&mut o);
            };
            if !metadata_only(&patch) {
                return unexpected(&mut o);
            }
            let Some(claim) = o.claims.get(&name).cloned() else {
                return status(404, "NotFound", format!("claim \"{name}\" not found"));
            };
            let mut v = serde_json::to_value(&claim).unwrap_or_default();
            merge(&mut v, &patch);
            let version = o.version();
            v["metadata"]["resourceVersion"] = json!(version);
            let Ok(claim) = serde_json::from_value::<PersistentVolumeClaim>(v.clone()) else {
                return unexpected(&mut o);
            };
            o.claims.insert(name, claim);
            (200, v)
        }
        (&Method::PATCH, "configmaps", [_name])
            if content_type == "application/apply-patch+yaml" =>
        {
            let Ok(mut v) = serde_json::from_slice::<Value>(body) else {
                return unexpected(&mut o);
            };
            let version = o.version();
            v["metadata"]["resourceVersion"] = json!(version);
            o.config_map = Some(v.clone());
            (200, v)
        }
        _ => unexpected(&mut o),
    }
}
