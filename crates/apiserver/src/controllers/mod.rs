//! Built-in controllers run inside the server: the scheduler, the Endpoints/EndpointSlice
//! controller, the Job controller, the CronJob controller, the pvc-protection controller, the ClusterRole
//! aggregation controller, the serviceaccounts and root-ca-cert-publisher controllers (what every
//! namespace holds), the node lifecycle controller with taint-based eviction, and the workload controllers of kube-controller-manager — Deployment, ReplicaSet, StatefulSet and
//! disruption (PodDisruptionBudget status). They wake on every change (after a short debounce),
//! every five seconds, and when a time-based action (a Job deadline or back-off, a CronJob
//! schedule, a Pod becoming available after `minReadySeconds`, a Deployment's progress deadline,
//! an eviction record expiring) is due; their writes go through the normal write path, so no-op
//! passes write nothing. Workload controllers keep a pure plan per object (`*/plan.rs`) apart
//! from their writes and converge the whole store on each pass. The scheduler, the endpoints
//! and the disruption controllers are event-driven: a pass looks only at the objects that
//! changed since the previous one ([`Changes`]), through the store's label and selector
//! indexes, and at everything only on the first pass or when the watch history no longer holds
//! those changes. A pass paces the next ([`PACE`]). DaemonSet and PVC-binding controllers do
//! not exist.

pub mod aggregation;
pub mod cron;
pub mod cronjob;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod job;
pub mod namespace_defaults;
pub mod node_lifecycle;
pub mod pvc_protection;
pub mod replicaset;
pub mod scheduler;
pub mod statefulset;
pub mod workload;
pub mod writes;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::registry::GroupResource;
use crate::server::Server;
use crate::store::{State, WatchEvent};

const IDLE_WAKE: Duration = Duration::from_secs(5);

/// The controllers run under the store's lock; on a large store a pass takes long enough to
/// matter to the requests waiting on it, so the next pass starts no sooner than `PACE` times
/// the last one's duration after it ended (the controllers hold the lock at most a quarter of
/// the time, and a burst of changes is taken in larger batches, as a rate-limited work queue
/// would). On a small store a pass takes well under a millisecond and the 20 ms debounce rules.
const PACE: u32 = 3;

/// What changed since the controllers' previous pass: the watch events in between, or
/// everything (the first pass, or when those events fell out of the history). Event-driven
/// controllers look only at what changed, so a pass costs what changed, not what is stored.
pub enum Changes {
    All,
    Events(Vec<Arc<WatchEvent>>),
}

impl Changes {
    /// The changes after `rv`.
    pub fn since(state: &State, rv: Option<u64>) -> Self {
        match rv.map(|rv| state.events_after(rv)) {
            Some(Ok(events)) => Self::Events(events),
            _ => Self::All,
        }
    }

    pub fn is_all(&self) -> bool {
        matches!(self, Self::All)
    }

    /// The versions (new, and previous for updates) of changed objects of `gr`; nothing for
    /// `All`, whose callers look at everything instead.
    pub fn objects<'a>(&'a self, gr: &GroupResource) -> impl Iterator<Item = &'a Value> + 'a {
        let gr = gr.clone();
        let events: &[Arc<WatchEvent>] = match self {
            Self::All => &[],
            Self::Events(events) => events,
        };
        events
            .iter()
            .filter(move |e| e.gr == gr)
            .flat_map(|e| std::iter::once(&*e.object).chain(e.prev.as_deref()))
    }
}

pub async fn run(server: Arc<Server>) {
    let mut rx = server.rv_rx.clone();
    let mut jobs = job::Memory::default();
    let mut budgets = disruption::Memory::default();
    let mut claims = pvc_protection::Memory::default();
    let mut wake = IDLE_WAKE;
    let mut seen: Option<u64> = None;
    let mut rbac_seen: Option<u64> = None;
    let mut rest = Duration::ZERO;
    loop {
        tokio::select! {
            _ = server.cancel.cancelled() => return,
            changed = rx.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(wake) => {}
        }
        tokio::time::sleep(rest.max(Duration::from_millis(20))).await;
        rx.borrow_and_update();
        let mut state = server.lock();
        let started = std::time::Instant::now();
        let now = jiff::Timestamp::now();
        let changes = Changes::since(&state, seen);
        seen = Some(state.rv);
        let m = &server.metrics;
        m.timed("scheduler", || scheduler::schedule(&mut state, &changes));
        m.timed("endpoints", || endpoints::reconcile(&mut state, &changes));
        let job_due = m.timed("job", || {
            job::reconcile(&mut state, &changes, now, &mut jobs)
        });
        let cron_due = m.timed("cronjob", || cronjob::reconcile(&mut state, now));
        m.timed("pvc-protection", || {
            pvc_protection::reconcile(&mut state, &changes, &mut claims)
        });
        m.timed("namespace-defaults", || {
            namespace_defaults::reconcile(&mut state, &changes);
        });
        let eviction_due = m.timed("node-lifecycle", || {
            node_lifecycle::reconcile(&mut state, now, server.node_monitor_grace)
        });
        let deploy_due = m.timed("deployment", || deployment::reconcile(&mut state, now));
        let rs_due = m.timed("replicaset", || replicaset::reconcile(&mut state, now));
        m.timed("statefulset", || statefulset::reconcile(&mut state, now));
        let pdb_due = m.timed("disruption", || {
            disruption::reconcile(&mut state, &changes, now, &mut budgets)
        });
        m.timed("clusterrole-aggregation", || {
            aggregation::reconcile(&mut state, &mut rbac_seen);
        });
        wake = [job_due, cron_due, deploy_due, rs_due, pdb_due, eviction_due]
            .into_iter()
            .flatten()
            .fold(IDLE_WAKE, Duration::min)
            .max(Duration::from_millis(10));
        rest = started.elapsed() * PACE;
    }
}
