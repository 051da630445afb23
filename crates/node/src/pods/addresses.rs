//! Which Pod holds which address. The agent takes a Pod's address when it first sees the Pod:
//! the one recorded in `status.podIP` when it is still free (so a Pod keeps its address across
//! agent restarts, also one that finished or is terminating), else a new one for a Pod that
//! will run. It holds the address for as long as the Pod object exists — while it runs, once
//! it is Succeeded/Failed, and while a finalizer keeps it after its deletion — and lets go when
//! the object is gone: a DELETED event, a complete list without it (a delete missed while the
//! watch was down), or another uid under its name. The pod's worker holds the address as well,
//! so it goes back to the pool only when the pod's processes are gone too. A new address is
//! never handed out while a list is in progress: a Pod listed later may have recorded it.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::status;
use crate::ipam::{Ipam, Lease};

/// The address a pod's worker runs the pod on; holding it keeps the address in use.
#[derive(Clone, Debug)]
pub struct PodAddress {
    pub ip: Ipv4Addr,
    _lease: Option<Arc<Lease>>,
}

/// What [`Addresses::assign`] decided for a Pod.
#[derive(Debug)]
pub enum Assignment {
    /// Start the pod's worker with this address; `None` when the pod will not run or no
    /// address is left.
    Start(Option<PodAddress>),
    /// The pod needs a new address while a list is in progress: start it once the list is
    /// complete, when every listed Pod has claimed its recorded address.
    AfterList,
}

#[derive(Debug)]
struct Held {
    namespace: String,
    name: String,
    lease: Arc<Lease>,
}

/// The addresses of the Pod objects this agent knows, by uid.
#[derive(Debug)]
pub struct Addresses {
    ipam: Ipam,
    held: HashMap<String, Held>,
}

fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

fn recorded_ip(pod: &Pod) -> Option<Ipv4Addr> {
    pod.status.as_ref()?.pod_ip.as_deref()?.parse().ok()
}

/// Whether the pod's containers are still to run: not deleting, not finished.
fn will_run(pod: &Pod) -> bool {
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    pod.metadata.deletion_timestamp.is_none() && !status::is_terminal(phase)
}

fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

impl Addresses {
    pub fn new(ipam: Ipam) -> Self {
        Self {
            ipam,
            held: HashMap::new(),
        }
    }

    /// The address to start `pod`'s worker with; `listing`: a list is in progress.
    pub fn assign(&mut self, pod: &Pod, listing: bool) -> Assignment {
        if host_network(pod) {
            return Assignment::Start(Some(PodAddress {
                ip: Ipv4Addr::LOCALHOST,
                _lease: None,
            }));
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if let Some(h) = self.held.get(&uid) {
            return Assignment::Start(Some(PodAddress {
                ip: h.lease.ip(),
                _lease: Some(h.lease.clone()),
            }));
        }
        let lease = match recorded_ip(pod).and_then(|ip| self.ipam.claim(ip)) {
            Some(lease) => lease,
            None if !will_run(pod) => return Assignment::Start(None),
            None if listing => return Assignment::AfterList,
            None => match self.ipam.allocate() {
                Some(lease) => lease,
                None => return Assignment::Start(None),
            },
        };
        let lease = Arc::new(lease);
        self.held.insert(
            uid,
            Held {
                namespace: namespace(pod).to_string(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                lease: lease.clone(),
            },
        );
        Assignment::Start(Some(PodAddress {
            ip: lease.ip(),
            _lease: Some(lease),
        }))
    }

    /// The Pod object `uid` is gone: its address is free once its worker has ended.
    pub fn forget(&mut self, uid: &str) {
        self.held.remove(uid);
    }

    /// Other uids known under `pod`'s namespace and name: their objects are gone.
    pub fn namesakes(&self, pod: &Pod) -> Vec<String> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        self.held
            .iter()
            .filter(|(u, h)| *u != uid && h.namespace == namespace(pod) && h.name == name)
            .map(|(u, _)| u.clone())
            .collect()
    }

    /// Forgets the Pods a complete list did not contain.
    pub fn retain_listed(&mut self, listed: &HashSet<String>) {
        self.held.retain(|uid, _| listed.contains(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAST: Ipv4Addr = Ipv4Addr::new(127, 255, 255, 254);
    use serde_json::json;

    const BASE: Ipv4Addr = Ipv4Addr::new(127, 1, 0, 1);
    const NEXT: Ipv4Addr = Ipv4Addr::new(127, 1, 0, 2);

    fn pod(uid: &str, name: &str, status: serde_json::Value, deleting: bool) -> Pod {
        let mut v = json!({"metadata": {"name": name, "namespace": "ns", "uid": uid},
            "spec": {"containers": [{"name": "c"}]}, "status": status});
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
        }
        serde_json::from_value(v).unwrap()
    }

    fn started(a: Assignment) -> Option<PodAddress> {
        match a {
            Assignment::Start(address) => address,
            Assignment::AfterList => panic!("expected a start, got AfterList"),
        }
    }

    fn free(ipam: &Ipam, ip: Ipv4Addr) -> bool {
        ipam.claim(ip).is_some()
    }

    #[test]
    fn a_terminating_pod_keeps_its_address_until_its_object_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let ipam = Ipam::new(BASE, LAST, dir.path());
        let mut a = Addresses::new(ipam.clone());
        // A Pod held by a finalizer after its deletion, seen by a (restarted) agent.
        let held = pod(
            "u1",
            "held",
            json!({"phase": "Failed", "podIP": "127.1.0.1"}),
            true,
        );
        let worker = started(a.assign(&held, true)).unwrap();
        assert_eq!(worker.ip, BASE);
        drop(worker);
        let next = pod("u2", "next", json!({}), false);
        let next = started(a.assign(&next, false)).unwrap();
        assert_eq!(next.ip, NEXT, "a new pod never gets the held pod's address");
        assert!(!free(&ipam, BASE));
        a.forget("u1");
        assert!(free(&ipam, BASE), "free once the object is gone");
    }

    #[test]
    fn the_address_stays_in_use_while_the_worker_of_a_deleted_pod_runs() {
        let dir = tempfile::tempdir().unwrap();
        let ipam = Ipam::new(BASE, LAST, dir.path());
        let mut a = Addresses::new(ipam.clone());
        let worker = started(a.assign(&pod("u1", "p", json!({}), false), false)).unwrap();
        a.forget("u1");
        assert!(!free(&ipam, worker.ip), "processes may still use it");
        let ip = worker.ip;
        drop(worker);
        assert!(free(&ipam, ip));
    }

    #[test]
    fn new_addresses_wait_for_the_end_of_a_list() {
        let dir = tempfile::tempdir().unwrap();
        let ipam = Ipam::new(BASE, LAST, dir.path());
        let mut a = Addresses::new(ipam.clone());
        let fresh = pod("u2", "fresh", json!({}), false);
        assert!(matches!(a.assign(&fresh, true), Assignment::AfterList));
        let old = pod(
            "u1",
            "old",
            json!({"phase": "Running", "podIP": "127.1.0.1"}),
            false,
        );
        let old = started(a.assign(&old, true)).unwrap();
        let fresh = started(a.assign(&fresh, false)).unwrap();
        assert_eq!((old.ip, fresh.ip), (BASE, NEXT));
        // A second assignment of a known pod gives the same address.
        let again = started(a.assign(&pod("u2", "fresh", json!({}), false), false)).unwrap();
        assert_eq!(again.ip, NEXT);
    }

    #[test]
    fn pods_that_will_not_run_take_only_their_recorded_address() {
        let dir = tempfile::tempdir().unwrap();
        let ipam = Ipam::new(BASE, LAST, dir.path());
        let mut a = Addresses::new(ipam.clone());
        let taken = ipam.claim(BASE).unwrap();
        let done = pod(
            "u1",
            "done",
            json!({"phase": "Succeeded", "podIP": "127.1.0.1"}),
            false,
        );
        assert!(started(a.assign(&done, false)).is_none());
        let deleting = pod("u2", "gone", json!({}), true);
        assert!(started(a.assign(&deleting, false)).is_none());
        assert!(free(&ipam, NEXT), "nothing allocated for them");
        drop(taken);
        let host: Pod = serde_json::from_value(json!({"metadata": {"name": "h", "uid": "u3"},
            "spec": {"hostNetwork": true, "containers": []}}))
        .unwrap();
        assert_eq!(
            started(a.assign(&host, false)).unwrap().ip,
            Ipv4Addr::LOCALHOST
        );
    }

    #[test]
    fn namesakes_and_lists_release_gone_objects() {
        let dir = tempfile::tempdir().unwrap();
        let ipam = Ipam::new(BASE, LAST, dir.path());
        let mut a = Addresses::new(ipam.clone());
        drop(started(
            a.assign(&pod("u1", "db-0", json!({}), false), false),
        ));
        drop(started(
            a.assign(&pod("u2", "db-1", json!({}), false), false),
        ));
        let recreated = pod("u3", "db-0", json!({}), false);
        assert_eq!(a.namesakes(&recreated), vec!["u1".to_string()]);
        a.retain_listed(&HashSet::from(["u2".to_string()]));
        assert!(free(&ipam, BASE), "db-0's old object was not listed");
        assert!(!free(&ipam, NEXT));
        assert!(a.namesakes(&recreated).is_empty());
    }
}
