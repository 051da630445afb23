//! The supervisor of one container: prepares and starts instances, runs their probes, waits
//! for them to exit, and restarts them per `restartPolicy` with kubelet's back-off (immediate
//! first restart, then base, 2×base, … capped at five minutes; reset after ten minutes of
//! running). It never leaves a process behind: on stop it terminates the instance.

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Pod};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::Waiting;
use super::launch::Launcher;
use super::objects;
use super::probe;
use super::runtime::{self, PodRuntime};
use super::spec::{self, SpecInputs};
use super::state::{PodCell, Run, Slot, Terminated};
use super::volumes::Volumes;
use crate::agent::Shared;
use crate::logs;
use crate::process;
use crate::shim::NEEDS_ROOT;

const MAX_BACKOFF: Duration = Duration::from_secs(300);
const BACKOFF_RESET: Duration = Duration::from_secs(600);
/// Retry interval while a container cannot be created (missing Secret, unresolvable image).
const CONFIG_RETRY: Duration = Duration::from_secs(2);
/// How long a container start waits for the first complete list of Services.
const SERVICES_SYNC: Duration = Duration::from_secs(5);

/// A stop request: cancellation plus the grace period to give processes.
#[derive(Debug, Default)]
pub struct StopSignal {
    pub token: CancellationToken,
    grace: Mutex<Duration>,
}

impl StopSignal {
    pub fn stop(&self, grace: Duration) {
        if !self.token.is_cancelled() {
            if let Ok(mut g) = self.grace.lock() {
                *g = grace;
            }
            self.token.cancel();
        }
    }

    pub fn grace(&self) -> Duration {
        self.grace.lock().map(|g| *g).unwrap_or_default()
    }
}

/// Kubelet's crash-loop back-off.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    crashes: u32,
}

impl Backoff {
    pub fn new(base: Duration) -> Self {
        Self { base, crashes: 0 }
    }

    /// The delay before the next restart, given how long the instance ran.
    pub fn next(&mut self, ran_for: Duration) -> Duration {
        if ran_for >= BACKOFF_RESET {
            self.crashes = 0;
        }
        self.crashes += 1;
        if self.crashes == 1 {
            return Duration::ZERO;
        }
        let factor = 1u32 << (self.crashes - 2).min(16);
        self.base.saturating_mul(factor).min(MAX_BACKOFF)
    }
}

/// How a supervised container ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed,
    Stopped,
}

/// What every container of a pod shares.
#[derive(Clone)]
pub struct PodCtx {
    pub shared: Arc<Shared>,
    pub rt: Arc<PodRuntime>,
    /// The Pod as the worker first saw it (its spec is what runs).
    pub pod: Arc<Pod>,
    /// The Pod as it is now: the downward API (`fieldRef` on labels and annotations) is
    /// resolved from it on every container start, as kubelet does.
    pub current: watch::Receiver<Arc<Pod>>,
    pub cell: Arc<PodCell>,
    pub volumes: Arc<Volumes>,
    pub pod_ip: Ipv4Addr,
    pub stop: Arc<StopSignal>,
}

impl PodCtx {
    fn restart_policy(&self) -> &str {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref())
            .unwrap_or("Always")
    }

    pub fn grace(&self) -> Duration {
        let secs = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30);
        Duration::from_secs(u64::try_from(secs).unwrap_or(0))
    }

    /// Sleeps unless stopped first; returns false when stopped.
    async fn sleep(&self, d: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(d) => true,
            () = self.stop.token.cancelled() => false,
        }
    }

    fn wait(&self, slot: Slot, w: Waiting) {
        self.cell.container(slot, |c| {
            c.run = Run::Waiting {
                reason: w.reason.to_string(),
                message: Some(w.message),
            };
            c.ready = false;
        });
    }

    async fn prepare(&self, c: &Container, instance: u32) -> Result<spec::Prepared, Waiting> {
        if !self.shared.root {
            return Err(Waiting {
                reason: "RunContainerError",
                message: NEEDS_ROOT.to_string(),
            });
        }
        let pod = self.current.borrow().clone();
        let objects = objects::fetch(&self.shared.client, &pod)
            .await
            .map_err(|e| Waiting {
                reason: "CreateContainerConfigError",
                message: format!("reading referenced objects: {e}"),
            })?;
        self.shared.services.wait_synced(SERVICES_SYNC).await;
        let services = self.shared.services.get();
        let inputs = SpecInputs {
            pod_ip: &self.pod_ip.to_string(),
            objects: &objects,
            volumes: &self.volumes,
            images: &self.shared.cfg.images,
            node: self.shared.node,
            hosts_file: &self.rt.hosts_file(),
            identity_dir: &self.rt.identity_dir(),
            services: &services,
        };
        spec::build(
            &pod,
            c,
            &inputs,
            Launcher::error_file(&self.rt, &c.name, instance),
        )
    }

    /// The image the Pod now names for container `name` (`None` when it names none).
    fn image_now(&self, name: &str) -> Option<String> {
        image_of(&self.current.borrow(), name)
    }

    /// Resolves when the Pod names another image for `c` than `c` runs: a container's image
    /// is the one field of it an update may change, and kubelet restarts the container with
    /// the new image ("definition changed"), whatever the restart policy.
    async fn image_changed(&self, c: &Container) {
        let mut current = self.current.clone();
        loop {
            if image_of(&current.borrow_and_update(), &c.name) != c.image {
                return;
            }
            if current.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Supervises `c` until it finishes for good or the pod stops. A main container follows
    /// its image through Pod updates (see [`PodCtx::image_changed`]).
    pub async fn supervise(&self, slot: Slot, original: &Container) -> Outcome {
        let init = matches!(slot, Slot::Init(_));
        let mut backoff = Backoff::new(self.shared.cfg.restart_backoff_base);
        let mut instance = logs::instances(&self.rt.log_dir(&original.name))
            .last()
            .map_or(0, |n| n + 1);
        let mut c = original.clone();
        loop {
            if self.stop.token.is_cancelled() {
                return Outcome::Stopped;
            }
            if !init {
                c.image = self.image_now(&c.name).or_else(|| original.image.clone());
                let image = c.image.clone().unwrap_or_default();
                self.cell.container(slot, |s| s.image = image);
            }
            let c = &c;
            let prepared = match self.prepare(c, instance).await {
                Ok(p) => p,
                Err(w) => {
                    tracing::debug!(container = %c.name, reason = w.reason, message = %w.message, "container cannot start yet");
                    self.wait(slot, w);
                    if !self.sleep(CONFIG_RETRY).await {
                        return Outcome::Stopped;
                    }
                    continue;
                }
            };
            let term = match self.run_instance(slot, c, instance, &prepared).await {
                Ok(t) => t,
                Err(w) => {
                    self.wait(slot, w);
                    if !self.sleep(CONFIG_RETRY).await {
                        return Outcome::Stopped;
                    }
                    continue;
                }
            };
            instance += 1;
            let ran_for = term
                .finished_at
                .zip(term.started_at)
                .map_or(Duration::ZERO, |(f, s)| f.duration_since(s).unsigned_abs());
            let success = term.exit_code == 0;
            self.cell.container(slot, |s| {
                s.run = Run::Terminated(term.clone());
                s.ready = init && success;
                s.started = false;
            });
            if self.stop.token.is_cancelled() {
                return Outcome::Stopped;
            }
            if !init
                && self
                    .image_now(&c.name)
                    .is_some_and(|i| Some(&i) != c.image.as_ref())
            {
                // Restarted at once with the new image: no back-off, no policy.
                self.cell.container(slot, |s| {
                    s.last = Some(term);
                    s.restart_count += 1;
                });
                continue;
            }
            // Init containers restart on failure unless Never; containers per restartPolicy.
            match (init, self.restart_policy()) {
                (true, _) if success => return Outcome::Succeeded,
                (_, "Never") if success => return Outcome::Succeeded,
                (_, "Never") => return Outcome::Failed,
                (false, "OnFailure") if success => return Outcome::Succeeded,
                _ => {}
            }
            let delay = backoff.next(ran_for);
            if !delay.is_zero() {
                let message = format!(
                    "back-off {}s restarting failed container={} pod={}_{}({})",
                    delay.as_secs(),
                    c.name,
                    self.rt.name,
                    self.rt.namespace,
                    self.rt.uid
                );
                let mut before = None;
                self.cell.container(slot, |s| {
                    before = s.last.replace(term.clone());
                    s.run = Run::Waiting {
                        reason: "CrashLoopBackOff".into(),
                        message: Some(message),
                    };
                });
                if !self.sleep(delay).await {
                    // Nothing restarts after a stop: the instance that ended is the current
                    // one again, as kubelet reports it.
                    self.cell.container(slot, |s| {
                        s.last = before;
                        s.run = Run::Terminated(term);
                    });
                    return Outcome::Stopped;
                }
            }
            self.cell.container(slot, |s| {
                s.last = Some(term);
                s.restart_count += 1;
            });
        }
    }

    /// Starts one instance and waits for it to end (exit, failed probe, or stop).
    async fn run_instance(
        &self,
        slot: Slot,
        c: &Container,
        instance: u32,
        prepared: &spec::Prepared,
    ) -> Result<Terminated, Waiting> {
        let launcher = &self.shared.launcher;
        let mut started = launcher
            .start_container(&self.rt, &c.name, instance, &prepared.spec)
            .map_err(|e| Waiting {
                reason: "RunContainerError",
                message: format!("starting the shim: {e}"),
            })?;
        self.rt.set_running(
            &c.name,
            runtime::Running {
                pid: started.pid,
                spec: prepared.spec.clone(),
                cgroup: started.cgroup.clone(),
                started_at: started.started_at,
            },
        );
        tracing::info!(pod = %self.rt.name, namespace = %self.rt.namespace, container = %c.name, pid = started.pid, instance, "container started");
        let container_id = format!("steward-node://{}/{}/{instance}", self.rt.uid, c.name);
        let init = matches!(slot, Slot::Init(_));
        let no_probes = c.startup_probe.is_none() && c.readiness_probe.is_none();
        self.cell.container(slot, |s| {
            s.run = Run::Running {
                started_at: started.started_at,
            };
            s.container_id = Some(container_id.clone());
            s.image_id = prepared.image_id.clone();
            s.started = !init && c.startup_probe.is_none();
            s.ready = !init && no_probes;
        });
        let (kill_tx, mut kill_rx) = mpsc::channel(1);
        let probes = (!init).then(|| {
            tokio::spawn(probe::run(
                probe::Target {
                    launcher: launcher.clone(),
                    rt: self.rt.clone(),
                    container: c.clone(),
                    pod_ip: self.pod_ip,
                },
                self.cell.clone(),
                slot,
                kill_tx,
            ))
        });
        let redefined = async {
            if init {
                std::future::pending::<()>().await;
            }
            self.image_changed(c).await;
        };
        let (status, kill_reason) = tokio::select! {
            s = started.child.wait() => (s, None),
            () = redefined => {
                let reason = format!("Container {} definition changed, will be restarted", c.name);
                tracing::info!(pod = %self.rt.name, container = %c.name, "killing container: its image changed");
                (process::terminate(&mut started.child, self.grace()).await, Some(reason))
            }
            Some(reason) = kill_rx.recv() => {
                tracing::info!(pod = %self.rt.name, container = %c.name, %reason, "killing container");
                (process::terminate(&mut started.child, self.grace()).await, Some(reason))
            }
            () = self.stop.token.cancelled() => {
                (process::terminate(&mut started.child, self.stop.grace()).await, None)
            }
        };
        process::signal_group(started.pid, nix::sys::signal::Signal::SIGKILL);
        if let Some(p) = probes {
            p.abort();
        }
        self.rt.clear_running(&c.name);
        self.rt.kill_execs(&c.name);
        let _ = tokio::time::timeout(Duration::from_secs(2), &mut started.log_task).await;
        let start_error = launcher.finish(&self.rt, &c.name, &started);
        let (exit_code, signal) = match &status {
            Ok(s) => {
                use std::os::unix::process::ExitStatusExt;
                match (s.code(), s.signal()) {
                    (Some(code), _) => (code, None),
                    (None, Some(sig)) => (128 + sig, Some(sig)),
                    (None, None) => (-1, None),
                }
            }
            Err(_) => (-1, None),
        };
        let (reason, message) = match start_error {
            Some(e) => ("StartError".to_string(), Some(e)),
            None if exit_code == 0 => ("Completed".to_string(), None),
            None => {
                // `FallbackToLogsOnError`: no termination message file here, so the message is
                // the tail of the instance's log, as kubelet takes it.
                let fallback =
                    c.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
                let from_logs = || {
                    logs::tail_message(&logs::instance_path(&self.rt.log_dir(&c.name), instance))
                };
                (
                    "Error".to_string(),
                    kill_reason.or_else(|| fallback.then(from_logs).flatten()),
                )
            }
        };
        tracing::info!(pod = %self.rt.name, namespace = %self.rt.namespace, container = %c.name, exit_code, %reason, "container exited");
        Ok(Terminated {
            exit_code,
            signal,
            reason,
            message,
            started_at: Some(started.started_at),
            finished_at: Some(Timestamp::now()),
            container_id: Some(container_id),
        })
    }
}

/// The image `pod` names for container `name`.
fn image_of(pod: &Pod, name: &str) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == name)?
        .image
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_immediate_then_doubles_and_caps() {
        let mut b = Backoff::new(Duration::from_secs(10));
        let quick = Duration::from_secs(1);
        let delays: Vec<u64> = (0..8).map(|_| b.next(quick).as_secs()).collect();
        assert_eq!(delays, vec![0, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(b.next(Duration::from_secs(601)), Duration::ZERO);
    }
}
