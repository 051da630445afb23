//! Built-in controllers run inside the server: the scheduler, the Endpoints/EndpointSlice
//! controller, the Job controller, the CronJob controller, the pvc-protection controller, and the
//! workload controllers of kube-controller-manager — Deployment, ReplicaSet, StatefulSet and
//! disruption (PodDisruptionBudget status). They wake on every change (after a short debounce),
//! every five seconds, and when a time-based action (a Job deadline or back-off, a CronJob
//! schedule, a Pod becoming available after `minReadySeconds`, a Deployment's progress deadline,
//! an eviction record expiring) is due, and converge the whole store in one pass, in this order;
//! their writes go through the normal write path, so no-op passes write nothing. Workload
//! controllers keep a pure plan per object (`*/plan.rs`) apart from their writes. DaemonSet and
//! PVC-binding controllers do not exist.

pub mod cron;
pub mod cronjob;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod job;
pub mod pvc_protection;
pub mod replicaset;
pub mod scheduler;
pub mod statefulset;
pub mod workload;
pub mod writes;

use std::sync::Arc;
use std::time::Duration;

use crate::server::Server;

const IDLE_WAKE: Duration = Duration::from_secs(5);

pub async fn run(server: Arc<Server>) {
    let mut rx = server.rv_rx.clone();
    let mut jobs = job::Memory::default();
    let mut wake = IDLE_WAKE;
    loop {
        tokio::select! {
            _ = server.cancel.cancelled() => return,
            changed = rx.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(wake) => {}
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        rx.borrow_and_update();
        let mut state = server.lock();
        let now = jiff::Timestamp::now();
        scheduler::schedule(&mut state);
        endpoints::reconcile(&mut state);
        let job_due = job::reconcile(&mut state, now, &mut jobs);
        let cron_due = cronjob::reconcile(&mut state, now);
        pvc_protection::reconcile(&mut state);
        let deploy_due = deployment::reconcile(&mut state, now);
        let rs_due = replicaset::reconcile(&mut state, now);
        statefulset::reconcile(&mut state, now);
        let pdb_due = disruption::reconcile(&mut state, now);
        wake = [job_due, cron_due, deploy_due, rs_due, pdb_due]
            .into_iter()
            .flatten()
            .fold(IDLE_WAKE, Duration::min)
            .max(Duration::from_millis(10));
    }
}
