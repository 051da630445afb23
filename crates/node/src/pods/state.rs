//! What the agent knows about a pod's containers, shared between the container supervisors
//! (writers), the probe loops and the status reporter (reader).

use std::net::Ipv4Addr;
use std::sync::Mutex;

use jiff::Timestamp;
use tokio::sync::Notify;

/// A finished container instance. Times and id are unknown for a container kubelet could
/// not locate at the end of its pod (`ContainerStatusUnknown`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Terminated {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub reason: String,
    pub message: Option<String>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    pub container_id: Option<String>,
}

/// The state of the current instance of a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Run {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: Timestamp,
    },
    Terminated(Terminated),
}

/// One container's status, as reported in `containerStatuses`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerState {
    pub name: String,
    pub image: String,
    pub image_id: String,
    pub container_id: Option<String>,
    pub run: Run,
    pub last: Option<Terminated>,
    pub restart_count: i32,
    pub ready: bool,
    pub started: bool,
}

impl ContainerState {
    pub fn new(name: &str, image: &str, restart_count: i32) -> Self {
        Self {
            name: name.to_string(),
            image: image.to_string(),
            image_id: String::new(),
            container_id: None,
            run: Run::Waiting {
                reason: "ContainerCreating".into(),
                message: None,
            },
            last: None,
            restart_count,
            ready: false,
            started: false,
        }
    }

    pub fn is_running(&self) -> bool {
        matches!(self.run, Run::Running { .. })
    }

    /// Terminated with exit code 0.
    pub fn succeeded(&self) -> bool {
        matches!(&self.run, Run::Terminated(t) if t.exit_code == 0)
    }

    /// Some instance of it has started: it is not waiting, or it has a previous termination.
    pub fn ever_started(&self) -> bool {
        !matches!(self.run, Run::Waiting { .. }) || self.last.is_some()
    }
}

/// Which list a container belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    Init(usize),
    Main(usize),
}

/// Everything the status is computed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodState {
    /// `None` only for a pod that never got one (deleted before it ran).
    pub pod_ip: Option<Ipv4Addr>,
    pub start_time: Timestamp,
    pub init: Vec<ContainerState>,
    pub main: Vec<ContainerState>,
    /// An init container failed and will not be restarted (restartPolicy Never).
    pub init_failed: bool,
    /// The pod was stopped for good (it is being deleted): no container runs again, whatever
    /// the restart policy, so its phase is terminal (kubelet's `podIsTerminal`).
    pub terminal: bool,
}

/// [`PodState`] behind a lock, with a notification for the status reporter.
#[derive(Debug)]
pub struct PodCell {
    state: Mutex<PodState>,
    pub changed: Notify,
}

impl PodCell {
    pub fn new(state: PodState) -> Self {
        Self {
            state: Mutex::new(state),
            changed: Notify::new(),
        }
    }

    pub fn snapshot(&self) -> Option<PodState> {
        self.state.lock().ok().map(|s| s.clone())
    }

    /// Changes the pod state and wakes the reporter when something changed.
    pub fn update(&self, f: impl FnOnce(&mut PodState)) {
        let changed = match self.state.lock() {
            Ok(mut s) => {
                let before = s.clone();
                f(&mut s);
                before != *s
            }
            Err(_) => false,
        };
        if changed {
            self.changed.notify_one();
        }
    }

    /// Changes one container's state.
    pub fn container(&self, slot: Slot, f: impl FnOnce(&mut ContainerState)) {
        self.update(|s| {
            let c = match slot {
                Slot::Init(i) => s.init.get_mut(i),
                Slot::Main(i) => s.main.get_mut(i),
            };
            if let Some(c) = c {
                f(c);
            }
        });
    }
}
