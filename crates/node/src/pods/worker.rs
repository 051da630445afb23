//! One pod's life on this node: hosts file, volumes, init containers in order, then all
//! containers, on the address the dispatcher assigned; status reporting throughout; and the
//! end — deletion (graceful with a `deletionTimestamp`, immediate on a DELETED event) or agent
//! shutdown — after which no process of the pod is left. A graceful deletion writes the final
//! status (containers terminated, a terminal phase) before the agent's delete with grace 0.
//! Finished pods (Succeeded/Failed) keep their object and logs. The worker holds the pod's
//! address until it ends; the address stays taken while the Pod object exists (see
//! `addresses`).

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Preconditions};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Waiting;
use super::addresses::PodAddress;
use super::container::{Outcome, PodCtx, StopSignal};
use super::objects;
use super::report::{Reporter, Write};
use super::spec::hostname;
use super::state::{ContainerState, PodCell, PodState, Run, Slot};
use super::status;
use super::volumes::{self, VolumeCtx, Volumes};
use crate::agent::Shared;
use crate::dns::PodIdentity;

/// Why a worker is asked to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopKind {
    /// The Pod object is gone (DELETED event).
    Deleted,
    /// The agent is shutting down; the Pod stays.
    Shutdown,
}

fn seconds(s: i64) -> Duration {
    Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

fn spec_grace(pod: &Pod) -> Duration {
    seconds(
        pod.spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30),
    )
}

fn deletion_grace(pod: &Pod) -> Option<Duration> {
    pod.metadata.deletion_timestamp.as_ref()?;
    Some(
        pod.metadata
            .deletion_grace_period_seconds
            .map_or_else(|| spec_grace(pod), seconds),
    )
}

fn phase_of(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

fn initial_state(pod: &Pod, ip: Ipv4Addr) -> PodState {
    let spec = pod.spec.clone().unwrap_or_default();
    let has_init = spec.init_containers.as_ref().is_some_and(|i| !i.is_empty());
    let make = |c: &k8s_openapi::api::core::v1::Container, init: bool| {
        let mut s = ContainerState::new(&c.name, c.image.as_deref().unwrap_or_default(), 0);
        if !init && has_init {
            s.run = Run::Waiting {
                reason: "PodInitializing".into(),
                message: None,
            };
        }
        if let Some(prev) = previous_status(pod, &c.name, init) {
            // A container that ran under a previous agent: its next start is a restart.
            s.restart_count = prev.restart_count;
            let st = prev.state.clone().unwrap_or_default();
            if st.running.is_some() || st.terminated.is_some() {
                s.restart_count += 1;
                s.last = st.terminated.as_ref().map(previous_termination);
            }
        }
        s
    };
    state_of(pod, &spec, Some(ip), make)
}

/// A pod state at `pod_ip`, its containers made by `make(container, is_init)`, started when the
/// status says (now if it does not).
fn state_of(
    pod: &Pod,
    spec: &k8s_openapi::api::core::v1::PodSpec,
    pod_ip: Option<Ipv4Addr>,
    make: impl Fn(&k8s_openapi::api::core::v1::Container, bool) -> ContainerState,
) -> PodState {
    PodState {
        pod_ip,
        start_time: pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map_or_else(Timestamp::now, |t| t.0),
        init: spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| make(c, true))
            .collect(),
        main: spec.containers.iter().map(|c| make(c, false)).collect(),
        init_failed: false,
        terminal: false,
    }
}

fn previous_status(
    pod: &Pod,
    name: &str,
    init: bool,
) -> Option<k8s_openapi::api::core::v1::ContainerStatus> {
    let st = pod.status.as_ref()?;
    let list = if init {
        st.init_container_statuses.as_ref()
    } else {
        st.container_statuses.as_ref()
    };
    list?.iter().find(|c| c.name == name).cloned()
}

fn previous_termination(
    t: &k8s_openapi::api::core::v1::ContainerStateTerminated,
) -> super::state::Terminated {
    super::state::Terminated {
        exit_code: t.exit_code,
        signal: t.signal,
        reason: t.reason.clone().unwrap_or_else(|| "Error".into()),
        message: t.message.clone(),
        started_at: t.started_at.as_ref().map(|x| x.0),
        finished_at: t.finished_at.as_ref().map(|x| x.0),
        container_id: t.container_id.clone(),
    }
}

/// The pod's state as its status records it, for a pod this agent did not run.
fn recorded_state(pod: &Pod) -> PodState {
    let spec = pod.spec.clone().unwrap_or_default();
    let make = |c: &k8s_openapi::api::core::v1::Container, init: bool| {
        let mut s = ContainerState::new(&c.name, c.image.as_deref().unwrap_or_default(), 0);
        let Some(prev) = previous_status(pod, &c.name, init) else {
            return s;
        };
        s.restart_count = prev.restart_count;
        s.image_id = prev.image_id;
        s.container_id = prev.container_id;
        s.last = prev
            .last_state
            .and_then(|l| l.terminated)
            .map(|t| previous_termination(&t));
        let st = prev.state.unwrap_or_default();
        if let Some(t) = st.terminated {
            s.run = Run::Terminated(previous_termination(&t));
        } else if let Some(r) = st.running {
            s.run = Run::Running {
                started_at: r.started_at.map_or_else(Timestamp::now, |t| t.0),
            };
        } else if let Some(w) = st.waiting {
            s.run = Run::Waiting {
                reason: w.reason.unwrap_or_else(|| "ContainerCreating".into()),
                message: w.message,
            };
        }
        s
    };
    let pod_ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .and_then(|ip| ip.parse().ok());
    state_of(pod, &spec, pod_ip, make)
}

/// The final status of a terminating pod this agent did not run (a previous agent stopped
/// before writing it): what was recorded, its containers terminated as kubelet's
/// `TerminatePod` has them.
async fn write_recorded_final_status(shared: &Shared, pod: &Pod) {
    let mut state = recorded_state(pod);
    status::terminate(&mut state);
    let cell = Arc::new(PodCell::new(state));
    let mut reporter = Reporter::new(shared.client.clone(), pod, cell);
    for _ in 0..3 {
        if reporter.write().await != Write::Failed {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Deletes the Pod object without further grace (the processes are gone).
async fn delete_object(shared: &Shared, pod: &Pod) {
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), &ns);
    let mut params = DeleteParams::default().grace_period(0);
    params.preconditions = Some(Preconditions {
        uid: pod.metadata.uid.clone(),
        resource_version: None,
    });
    let name = pod.metadata.name.clone().unwrap_or_default();
    match api.delete(&name, &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
        Err(e) => tracing::warn!(pod = %name, error = %e, "deleting the pod failed"),
    }
}

fn remove_dir(dir: &std::path::Path) {
    if let Err(e) = std::fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %dir.display(), error = %e, "removing pod directory failed");
    }
}

/// How the pod's run ended, for the clean-up.
enum End {
    Stop(StopKind),
    Terminating,
}

/// Waits for the end of a pod that runs nothing (finished before this agent saw it).
async fn idle(
    pod_rx: &mut watch::Receiver<Arc<Pod>>,
    stop_rx: &mut watch::Receiver<Option<StopKind>>,
) -> End {
    loop {
        if let Some(kind) = *stop_rx.borrow() {
            return End::Stop(kind);
        }
        if pod_rx.borrow().metadata.deletion_timestamp.is_some() {
            return End::Terminating;
        }
        tokio::select! {
            r = pod_rx.changed() => if r.is_err() { return End::Stop(StopKind::Shutdown) },
            r = stop_rx.changed() => if r.is_err() { return End::Stop(StopKind::Shutdown) },
        }
    }
}

/// Runs one pod until it is deleted or the agent stops; `address` is `None` when the pod
/// will not run (finished or terminating when first seen) or no address is left.
pub async fn run(
    shared: Arc<Shared>,
    mut pod_rx: watch::Receiver<Arc<Pod>>,
    mut stop_rx: watch::Receiver<Option<StopKind>>,
    address: Option<PodAddress>,
) {
    let pod = pod_rx.borrow().clone();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = pod.metadata.name.clone().unwrap_or_default();
    let dir = shared.pods_dir().join(&uid);
    if status::is_terminal(phase_of(&pod)) || pod.metadata.deletion_timestamp.is_some() {
        let rt = shared.registry.insert(&uid, &ns, &name, &dir, None);
        let end = idle(&mut pod_rx, &mut stop_rx).await;
        shared.registry.remove(&rt.uid);
        let last = pod_rx.borrow().clone();
        if matches!(end, End::Terminating) && !status::is_terminal(phase_of(&last)) {
            write_recorded_final_status(&shared, &last).await;
        }
        finish(&shared, &last, &dir, end).await;
        return;
    }
    let Some(address) = address else {
        tracing::error!(pod = %name, "no pod IP left");
        return;
    };
    let ip = address.ip;
    let rt = shared.registry.insert(&uid, &ns, &name, &dir, Some(ip));
    let identity = PodIdentity {
        ip: ip.to_string(),
        namespace: ns.clone(),
        name: name.clone(),
        hostname: hostname(&pod),
        subdomain: pod
            .spec
            .as_ref()
            .and_then(|s| s.subdomain.clone())
            .filter(|s| !s.is_empty()),
    };
    if let Err(e) = shared.dns.register(&uid, rt.hosts_file(), identity) {
        tracing::warn!(pod = %name, error = %e, "writing the pod's hosts file failed");
    }
    let cell = Arc::new(PodCell::new(initial_state(&pod, ip)));
    let report_done = CancellationToken::new();
    let mut reporter = tokio::spawn(
        Reporter::new(shared.client.clone(), &pod, cell.clone())
            .run(report_done.clone(), pod_rx.clone()),
    );
    cell.changed.notify_one();
    let stop = Arc::new(StopSignal::default());
    let flow = tokio::spawn(run_containers(
        shared.clone(),
        rt.clone(),
        pod.clone(),
        pod_rx.clone(),
        cell.clone(),
        ip,
        stop.clone(),
    ));
    let mut flow = std::pin::pin!(flow);
    let mut flow_done = false;
    let end = loop {
        if let Some(kind) = *stop_rx.borrow() {
            let grace = match kind {
                StopKind::Shutdown => spec_grace(&pod).min(shared.cfg.shutdown_grace),
                StopKind::Deleted => spec_grace(&pod),
            };
            stop.stop(grace);
            break End::Stop(kind);
        }
        if let Some(grace) = deletion_grace(&pod_rx.borrow()) {
            stop.stop(grace);
            break End::Terminating;
        }
        tokio::select! {
            r = &mut flow, if !flow_done => {
                flow_done = true;
                if let Err(e) = r {
                    tracing::error!(pod = %name, error = %e, "pod worker failed");
                }
            }
            r = pod_rx.changed() => if r.is_err() { stop.stop(Duration::ZERO); break End::Stop(StopKind::Shutdown) },
            r = stop_rx.changed() => if r.is_err() { stop.stop(Duration::ZERO); break End::Stop(StopKind::Shutdown) },
        }
    };
    if !flow_done {
        let _ = flow.await;
    }
    match end {
        End::Stop(StopKind::Deleted) => reporter.abort(),
        _ => {
            if matches!(end, End::Terminating) {
                // Every process is gone and nothing runs again: the final status goes out
                // before the delete below.
                cell.update(status::terminate);
            }
            report_done.cancel();
            if tokio::time::timeout(Duration::from_secs(5), &mut reporter)
                .await
                .is_err()
            {
                reporter.abort();
            }
        }
    }
    shared.dns.unregister(&uid);
    shared.registry.remove(&uid);
    let last = pod_rx.borrow().clone();
    finish(&shared, &last, &dir, end).await;
    // The address stays taken while the Pod object exists (see `addresses`).
    drop(address);
}

/// Clean-up once no process of the pod runs.
async fn finish(shared: &Shared, pod: &Pod, dir: &std::path::Path, end: End) {
    match end {
        End::Stop(StopKind::Shutdown) => {}
        End::Stop(StopKind::Deleted) => remove_dir(dir),
        End::Terminating => {
            remove_dir(dir);
            delete_object(shared, pod).await;
        }
    }
}

/// Volumes, then init containers in order, then all containers; returns when every container
/// is done for good or the pod is stopped.
async fn run_containers(
    shared: Arc<Shared>,
    rt: Arc<super::runtime::PodRuntime>,
    pod: Arc<Pod>,
    current: watch::Receiver<Arc<Pod>>,
    cell: Arc<PodCell>,
    ip: Ipv4Addr,
    stop: Arc<StopSignal>,
) {
    let Some(volumes) = prepare_volumes(&shared, &rt, &pod, &cell, ip, &stop).await else {
        return;
    };
    let ctx = PodCtx {
        shared: shared.clone(),
        rt: rt.clone(),
        pod: pod.clone(),
        current: current.clone(),
        cell: cell.clone(),
        volumes: Arc::new(volumes),
        pod_ip: ip,
        stop: stop.clone(),
    };
    let refresher = tokio::spawn(refresh_volumes(
        shared.clone(),
        rt.dir.clone(),
        current.clone(),
        ip,
        stop.token.clone(),
    ));
    let spec = pod.spec.clone().unwrap_or_default();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        match ctx.supervise(Slot::Init(i), c).await {
            Outcome::Succeeded => {}
            Outcome::Failed => {
                cell.update(|s| s.init_failed = true);
                refresher.abort();
                return;
            }
            Outcome::Stopped => {
                refresher.abort();
                return;
            }
        }
    }
    let runs = spec.containers.iter().enumerate().map(|(i, c)| {
        let ctx = ctx.clone();
        let c = c.clone();
        async move { ctx.supervise(Slot::Main(i), &c).await }
    });
    futures::future::join_all(runs).await;
    refresher.abort();
}

async fn prepare_volumes(
    shared: &Shared,
    rt: &super::runtime::PodRuntime,
    pod: &Pod,
    cell: &PodCell,
    ip: Ipv4Addr,
    stop: &StopSignal,
) -> Option<Volumes> {
    loop {
        let result = match objects::fetch(&shared.client, pod).await {
            Ok(objects) => {
                let ctx = VolumeCtx {
                    client: &shared.client,
                    state_dir: &shared.cfg.state_dir,
                    pod_dir: &rt.dir,
                    pod,
                    pod_ip: &ip.to_string(),
                    objects: &objects,
                    node: shared.node,
                };
                volumes::prepare(&ctx).await
            }
            Err(e) => Err(Waiting {
                reason: "ContainerCreating",
                message: format!("reading referenced objects: {e}"),
            }),
        };
        match result {
            Ok(v) => return Some(v),
            Err(w) => {
                tracing::debug!(pod = %rt.name, message = %w.message, "volumes not ready");
                cell.update(|s| {
                    for c in s.init.iter_mut().chain(s.main.iter_mut()) {
                        c.run = Run::Waiting {
                            reason: w.reason.to_string(),
                            message: Some(w.message.clone()),
                        };
                    }
                });
            }
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = stop.token.cancelled() => return None,
        }
    }
}

/// Re-renders the pod's secret/configMap/downwardAPI volumes every `volume_refresh`, from the
/// Pod as it is now (labels and annotations change).
async fn refresh_volumes(
    shared: Arc<Shared>,
    dir: std::path::PathBuf,
    current: watch::Receiver<Arc<Pod>>,
    ip: Ipv4Addr,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(shared.cfg.volume_refresh) => {}
            () = stop.cancelled() => return,
        }
        let pod = current.borrow().clone();
        let Ok(objects) = objects::fetch(&shared.client, &pod).await else {
            continue;
        };
        let ctx = VolumeCtx {
            client: &shared.client,
            state_dir: &shared.cfg.state_dir,
            pod_dir: &dir,
            pod: &pod,
            pod_ip: &ip.to_string(),
            objects: &objects,
            node: shared.node,
        };
        volumes::refresh(&ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_recorded_status_becomes_a_final_one() {
        // What a previous agent recorded before it stopped in the middle of a deletion.
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u", "deletionTimestamp": "2025-01-01T00:00:10Z"},
            "spec": {"containers": [{"name": "run"}, {"name": "crash"}, {"name": "done"}]},
            "status": {"phase": "Running", "podIP": "127.1.0.7",
                "startTime": "2025-01-01T00:00:00Z",
                "containerStatuses": [
                    {"name": "run", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                     "state": {"running": {"startedAt": "2025-01-01T00:00:01Z"}}},
                    {"name": "crash", "image": "i", "imageID": "", "ready": false, "restartCount": 3,
                     "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                     "lastState": {"terminated": {"exitCode": 2, "reason": "Error"}}},
                    {"name": "done", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
                ]}
        }))
        .unwrap();
        let mut state = recorded_state(&pod);
        assert_eq!(state.pod_ip, Some(Ipv4Addr::new(127, 1, 0, 7)));
        assert_eq!(state.main[1].restart_count, 3);
        status::terminate(&mut state);
        let ended: Vec<(i32, String)> = state
            .main
            .iter()
            .map(|c| match &c.run {
                Run::Terminated(t) => (t.exit_code, t.reason.clone()),
                other => panic!("{} is {other:?}", c.name),
            })
            .collect();
        assert_eq!(
            ended,
            vec![
                (137, "ContainerStatusUnknown".to_string()),
                (2, "Error".to_string()),
                (0, "Completed".to_string())
            ]
        );
        assert!(state.main.iter().all(|c| !c.ready));
        assert_eq!(status::phase(&state, "Always"), "Failed");
    }
}
