//! Pods bound to this node: a watch on `spec.nodeName=<node>` feeds one worker per pod uid,
//! started with the pod's address (see `addresses`).

pub mod addresses;
pub mod container;
pub mod envs;
pub mod fieldref;
pub mod identity;
pub mod launch;
pub mod objects;
pub mod probe;
pub mod projection;
pub mod report;
pub mod runtime;
pub mod service_env;
pub mod spec;
pub mod state;
pub mod status;
pub mod volumes;
pub mod worker;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::agent::Shared;
use addresses::{Addresses, Assignment};
use worker::StopKind;

/// Why a container is waiting: kubelet's reason and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub reason: &'static str,
    pub message: String,
}

struct Worker {
    pod: watch::Sender<Arc<Pod>>,
    stop: watch::Sender<Option<StopKind>>,
    join: JoinHandle<()>,
}

struct Dispatcher {
    workers: HashMap<String, Worker>,
    /// Pods whose worker has finished (deleted, or deleting and already cleaned up): later
    /// events for them, such as the echo of the agent's own final delete, start nothing.
    done: HashSet<String>,
    /// Uids listed since the last watch (re)start, until the list is complete.
    listing: Option<HashSet<String>>,
    /// Pods listed that need a new address: started when the list is complete.
    after_list: HashMap<String, Pod>,
    /// The addresses of the Pod objects that exist.
    addresses: Addresses,
    cleaned_orphans: bool,
}

impl Dispatcher {
    fn new(shared: &Shared) -> Self {
        Self {
            workers: HashMap::new(),
            done: HashSet::new(),
            listing: None,
            after_list: HashMap::new(),
            addresses: Addresses::new(shared.ipam.clone()),
            cleaned_orphans: false,
        }
    }

    fn apply(&mut self, shared: &Arc<Shared>, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        if let Some(l) = self.listing.as_mut() {
            l.insert(uid.clone());
        }
        let finished: Vec<String> = self
            .workers
            .iter()
            .filter(|(_, w)| w.join.is_finished())
            .map(|(u, _)| u.clone())
            .collect();
        for u in finished {
            self.workers.remove(&u);
            self.done.insert(u);
        }
        // Names are unique: a namesake with another uid is a Pod whose delete was missed.
        for old in self.addresses.namesakes(&pod) {
            self.delete(&old);
        }
        if self.done.contains(&uid) {
            return;
        }
        if let Some(w) = self.workers.get(&uid) {
            w.pod.send_replace(Arc::new(pod));
            return;
        }
        match self.addresses.assign(&pod, self.listing.is_some()) {
            Assignment::AfterList => {
                self.after_list.insert(uid, pod);
            }
            Assignment::Start(address) => {
                self.after_list.remove(&uid);
                let (pod_tx, pod_rx) = watch::channel(Arc::new(pod));
                let (stop_tx, stop_rx) = watch::channel(None);
                let join = tokio::spawn(worker::run(shared.clone(), pod_rx, stop_rx, address));
                self.workers.insert(
                    uid,
                    Worker {
                        pod: pod_tx,
                        stop: stop_tx,
                        join,
                    },
                );
            }
        }
    }

    /// The Pod object `uid` is gone.
    fn delete(&mut self, uid: &str) {
        self.done.remove(uid);
        self.after_list.remove(uid);
        self.addresses.forget(uid);
        if let Some(w) = self.workers.get(uid) {
            w.stop.send_replace(Some(StopKind::Deleted));
        }
    }

    fn list_done(&mut self, shared: &Arc<Shared>) {
        let Some(listed) = self.listing.take() else {
            return;
        };
        self.done.retain(|u| listed.contains(u));
        let gone: Vec<String> = self
            .workers
            .keys()
            .filter(|u| !listed.contains(*u))
            .cloned()
            .collect();
        for uid in gone {
            self.delete(&uid);
        }
        self.addresses.retain_listed(&listed);
        let waiting = std::mem::take(&mut self.after_list);
        for (uid, pod) in waiting {
            if listed.contains(&uid) {
                self.apply(shared, pod);
            }
        }
        if !self.cleaned_orphans {
            self.cleaned_orphans = true;
            remove_orphan_dirs(shared, &listed);
        }
    }

    async fn shutdown(self, grace: Duration) {
        for w in self.workers.values() {
            w.stop.send_replace(Some(StopKind::Shutdown));
        }
        let joins = self.workers.into_values().map(|w| w.join);
        let all = futures::future::join_all(joins);
        if tokio::time::timeout(grace + Duration::from_secs(5), all)
            .await
            .is_err()
        {
            tracing::warn!("pod workers did not stop in time");
        }
    }
}

/// Pod directories of a previous run whose pods no longer exist.
fn remove_orphan_dirs(shared: &Shared, listed: &HashSet<String>) {
    let Ok(entries) = std::fs::read_dir(shared.pods_dir()) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let uid = e.file_name().to_string_lossy().into_owned();
        if !listed.contains(&uid) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Watches this node's pods until `cancel`, then stops every worker (processes terminated,
/// Pod objects kept).
pub async fn run(shared: Arc<Shared>, cancel: CancellationToken) {
    let api: Api<Pod> = Api::all(shared.client.clone());
    let config = watcher::Config::default().fields(&format!("spec.nodeName={}", shared.cfg.name));
    let mut stream = std::pin::pin!(watcher(api, config).default_backoff());
    let mut d = Dispatcher::new(&shared);
    loop {
        let ev = tokio::select! {
            () = cancel.cancelled() => break,
            ev = stream.next() => ev,
        };
        match ev {
            Some(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => {
                d.apply(&shared, pod)
            }
            Some(Ok(watcher::Event::Delete(pod))) => {
                if let Some(uid) = pod.metadata.uid.as_deref() {
                    d.delete(uid);
                }
            }
            Some(Ok(watcher::Event::Init)) => d.listing = Some(HashSet::new()),
            Some(Ok(watcher::Event::InitDone)) => d.list_done(&shared),
            Some(Err(e)) => tracing::warn!(error = %e, "pod watch failed"),
            None => break,
        }
    }
    d.shutdown(shared.cfg.shutdown_grace).await;
}
