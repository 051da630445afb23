//! Built-in controllers run inside the server: the scheduler and the Endpoints/EndpointSlice
//! controller. They wake on every change (after a short debounce) and converge the whole store
//! in one pass; their writes go through the normal write path, so no-op passes write nothing.
//! Job, CronJob, Deployment, StatefulSet, ReplicaSet, DaemonSet and PVC-binding controllers do
//! not exist.

pub mod endpoints;
pub mod scheduler;

use std::sync::Arc;
use std::time::Duration;

use crate::server::Server;

pub async fn run(server: Arc<Server>) {
    let mut rx = server.rv_rx.clone();
    loop {
        tokio::select! {
            _ = server.cancel.cancelled() => return,
            changed = rx.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        rx.borrow_and_update();
        let mut state = server.lock();
        scheduler::schedule(&mut state);
        endpoints::reconcile(&mut state);
    }
}
