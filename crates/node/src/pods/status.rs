//! Pod status from container states, following kubelet's rules for `phase` and conditions.
//! Pure: the caller supplies the time and keeps the previous conditions so that
//! `lastTransitionTime` only moves when a condition's status does.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ContainerState as KState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::state::{ContainerState, PodState, Run, Terminated};

pub const HOST_IP: &str = "127.0.0.1";

/// Pod phase per kubelet's `getPhase`; for a pod stopped for good ([`PodState::terminal`])
/// `podIsTerminal` applies (all containers stopped: Succeeded when every one exited 0, else
/// Failed, whatever the restart policy), and a phase that would still be Pending or Running
/// becomes Failed, as kubelet's `TerminatePod` does.
pub fn phase(state: &PodState, restart_policy: &str) -> &'static str {
    let phase = running_phase(state, restart_policy);
    if state.terminal && !is_terminal(phase) {
        "Failed"
    } else {
        phase
    }
}

fn running_phase(state: &PodState, restart_policy: &str) -> &'static str {
    if state.init_failed {
        return "Failed";
    }
    if !state.init.iter().all(ContainerState::succeeded) {
        return "Pending";
    }
    let (mut waiting, mut running, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in &state.main {
        match &c.run {
            Run::Running { .. } => running += 1,
            Run::Terminated(t) => {
                stopped += 1;
                if t.exit_code == 0 {
                    succeeded += 1;
                }
            }
            Run::Waiting { .. } if c.last.is_some() => stopped += 1,
            Run::Waiting { .. } => waiting += 1,
        }
    }
    if waiting > 0 {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped == 0 {
        return "Pending";
    }
    match restart_policy {
        _ if state.terminal && stopped == succeeded => "Succeeded",
        _ if state.terminal => "Failed",
        "Always" => "Running",
        _ if stopped == succeeded => "Succeeded",
        "OnFailure" => "Running",
        _ => "Failed",
    }
}

/// Kubelet's `TerminatePod`, for a pod whose processes are all gone and that will not run
/// again: marks it [`PodState::terminal`]; a container that backed off after an instance
/// ended reports that instance (kubelet never restarts a deleted pod's containers, so it does
/// not report them waiting); any other container that did not terminate is reported
/// terminated with `ContainerStatusUnknown`, exit code 137 — for containers once the pod got
/// past its init containers, and for init containers up to the last one that started (at
/// least the first). Nothing is ready any more.
pub fn terminate(state: &mut PodState) {
    state.terminal = true;
    let initialized = state.init.is_empty()
        || state.main.iter().any(ContainerState::ever_started)
        || state
            .init
            .last()
            .is_some_and(|c| c.succeeded() || c.last.as_ref().is_some_and(|t| t.exit_code == 0));
    let started_init = state
        .init
        .iter()
        .rposition(ContainerState::ever_started)
        .map_or(1, |i| i + 1);
    let main: &mut [ContainerState] = if initialized {
        &mut state.main
    } else {
        &mut []
    };
    for c in state
        .init
        .iter_mut()
        .take(started_init)
        .chain(main.iter_mut())
    {
        match c.run {
            Run::Terminated(_) => {}
            Run::Waiting { .. } if c.last.is_some() => {
                if let Some(t) = c.last.take() {
                    c.run = Run::Terminated(t);
                }
            }
            _ => c.run = Run::Terminated(unknown()),
        }
    }
    for c in state.init.iter_mut().chain(state.main.iter_mut()) {
        c.ready = false;
        c.started = false;
    }
}

fn unknown() -> Terminated {
    Terminated {
        exit_code: 137,
        signal: None,
        reason: "ContainerStatusUnknown".into(),
        message: Some("The container could not be located when the pod was terminated".into()),
        started_at: None,
        finished_at: None,
        container_id: None,
    }
}

/// Whether the pod will never run a container again.
pub fn is_terminal(phase: &str) -> bool {
    phase == "Succeeded" || phase == "Failed"
}

fn time(t: Timestamp) -> Time {
    Time(t)
}

fn terminated(t: &Terminated) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: t.exit_code,
        signal: t.signal,
        reason: Some(t.reason.clone()),
        message: t.message.clone(),
        started_at: t.started_at.map(time),
        finished_at: t.finished_at.map(time),
        container_id: t.container_id.clone(),
    }
}

fn container_status(c: &ContainerState) -> ContainerStatus {
    let state = match &c.run {
        Run::Waiting { reason, message } => KState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.clone()),
                message: message.clone(),
            }),
            ..Default::default()
        },
        Run::Running { started_at } => KState {
            running: Some(ContainerStateRunning {
                started_at: Some(time(*started_at)),
            }),
            ..Default::default()
        },
        Run::Terminated(t) => KState {
            terminated: Some(terminated(t)),
            ..Default::default()
        },
    };
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone(),
        image_id: c.image_id.clone(),
        container_id: c.container_id.clone(),
        ready: c.ready,
        started: Some(c.started && c.is_running()),
        restart_count: c.restart_count,
        state: Some(state),
        last_state: Some(match &c.last {
            Some(t) => KState {
                terminated: Some(terminated(t)),
                ..Default::default()
            },
            None => KState::default(),
        }),
        ..Default::default()
    }
}

fn condition(
    prev: &mut BTreeMap<String, PodCondition>,
    now: Timestamp,
    type_: &str,
    ok: bool,
    reason: Option<String>,
    message: Option<String>,
) -> PodCondition {
    let status = if ok { "True" } else { "False" }.to_string();
    let last = prev
        .get(type_)
        .filter(|c| c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| time(now));
    let c = PodCondition {
        type_: type_.to_string(),
        status,
        reason,
        message,
        last_transition_time: Some(last),
        last_probe_time: None,
        observed_generation: None,
    };
    prev.insert(type_.to_string(), c.clone());
    c
}

/// The reason of `Ready` and `ContainersReady` in a terminal phase.
fn terminal_reason(phase: &str) -> &'static str {
    if phase == "Succeeded" {
        "PodCompleted"
    } else {
        "PodFailed"
    }
}

fn names(cs: &[&ContainerState]) -> String {
    let n: Vec<&str> = cs.iter().map(|c| c.name.as_str()).collect();
    format!("[{}]", n.join(" "))
}

/// The full status the agent writes for a pod.
pub fn build(
    state: &PodState,
    restart_policy: &str,
    prev: &mut BTreeMap<String, PodCondition>,
    now: Timestamp,
) -> PodStatus {
    let phase = phase(state, restart_policy);
    let terminal = is_terminal(phase);
    let pending_init: Vec<&ContainerState> = state.init.iter().filter(|c| !c.succeeded()).collect();
    let unready: Vec<&ContainerState> = state.main.iter().filter(|c| !c.ready).collect();
    let initialized = pending_init.is_empty();
    let ready = initialized && unready.is_empty() && !terminal;
    let (ready_reason, ready_message) = if terminal {
        (Some(terminal_reason(phase).to_string()), None)
    } else if !initialized {
        (
            Some("ContainersNotInitialized".to_string()),
            Some(format!(
                "containers with incomplete status: {}",
                names(&pending_init)
            )),
        )
    } else if !ready {
        (
            Some("ContainersNotReady".to_string()),
            Some(format!(
                "containers with unready status: {}",
                names(&unready)
            )),
        )
    } else {
        (None, None)
    };
    let conditions = vec![
        condition(
            prev,
            now,
            "PodReadyToStartContainers",
            !terminal,
            None,
            None,
        ),
        condition(
            prev,
            now,
            "Initialized",
            initialized,
            if initialized {
                (phase == "Succeeded").then(|| "PodCompleted".to_string())
            } else {
                Some("ContainersNotInitialized".to_string())
            },
            (!initialized).then(|| {
                format!(
                    "containers with incomplete status: {}",
                    names(&pending_init)
                )
            }),
        ),
        condition(
            prev,
            now,
            "Ready",
            ready,
            ready_reason.clone(),
            ready_message.clone(),
        ),
        condition(
            prev,
            now,
            "ContainersReady",
            ready,
            ready_reason,
            ready_message,
        ),
        condition(prev, now, "PodScheduled", true, None, None),
    ];
    let pod_ip = state.pod_ip.map(|ip| ip.to_string());
    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        host_ip: Some(HOST_IP.to_string()),
        host_ips: Some(vec![HostIP {
            ip: HOST_IP.to_string(),
        }]),
        pod_ips: pod_ip.clone().map(|ip| vec![PodIP { ip }]),
        pod_ip,
        start_time: Some(time(state.start_time)),
        container_statuses: Some(state.main.iter().map(container_status).collect()),
        init_container_statuses: (!state.init.is_empty())
            .then(|| state.init.iter().map(container_status).collect()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
