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

/// Pod phase per kubelet's `getPhase`.
pub fn phase(state: &PodState, restart_policy: &str) -> &'static str {
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
        "Always" => "Running",
        _ if stopped == succeeded => "Succeeded",
        "OnFailure" => "Running",
        _ => "Failed",
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
        started_at: Some(time(t.started_at)),
        finished_at: Some(time(t.finished_at)),
        container_id: Some(t.container_id.clone()),
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
        (Some("PodCompleted".to_string()), None)
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
            (!initialized).then(|| "ContainersNotInitialized".to_string()),
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
    let pod_ip = state.pod_ip.to_string();
    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        host_ip: Some(HOST_IP.to_string()),
        host_ips: Some(vec![HostIP {
            ip: HOST_IP.to_string(),
        }]),
        pod_ip: Some(pod_ip.clone()),
        pod_ips: Some(vec![PodIP { ip: pod_ip }]),
        start_time: Some(time(state.start_time)),
        container_statuses: Some(state.main.iter().map(container_status).collect()),
        init_container_statuses: (!state.init.is_empty())
            .then(|| state.init.iter().map(container_status).collect()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn term(code: i32) -> Terminated {
        Terminated {
            exit_code: code,
            signal: None,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: None,
            started_at: t(0),
            finished_at: t(1),
            container_id: "steward-node://x".into(),
        }
    }

    fn state(init: Vec<ContainerState>, main: Vec<ContainerState>) -> PodState {
        PodState {
            pod_ip: Ipv4Addr::new(127, 1, 0, 1),
            start_time: t(0),
            init,
            main,
            init_failed: false,
        }
    }

    fn c(run: Run, last: Option<Terminated>) -> ContainerState {
        ContainerState {
            run,
            last,
            ..ContainerState::new("c", "busybox", 0)
        }
    }

    #[test]
    fn phase_follows_kubelet() {
        let running = c(Run::Running { started_at: t(0) }, None);
        let waiting = c(
            Run::Waiting {
                reason: "ContainerCreating".into(),
                message: None,
            },
            None,
        );
        let backoff = c(
            Run::Waiting {
                reason: "CrashLoopBackOff".into(),
                message: None,
            },
            Some(term(1)),
        );
        let ok = c(Run::Terminated(term(0)), None);
        let failed = c(Run::Terminated(term(2)), None);
        assert_eq!(
            phase(&state(vec![], vec![waiting.clone()]), "Always"),
            "Pending"
        );
        assert_eq!(
            phase(
                &state(vec![], vec![running.clone(), backoff.clone()]),
                "Always"
            ),
            "Running"
        );
        assert_eq!(
            phase(&state(vec![], vec![backoff.clone()]), "Always"),
            "Running"
        );
        assert_eq!(
            phase(&state(vec![], vec![ok.clone()]), "Never"),
            "Succeeded"
        );
        assert_eq!(
            phase(&state(vec![], vec![ok.clone(), failed.clone()]), "Never"),
            "Failed"
        );
        assert_eq!(
            phase(&state(vec![], vec![failed.clone()]), "OnFailure"),
            "Running"
        );
        assert_eq!(phase(&state(vec![], vec![ok.clone()]), "Always"), "Running");
        assert_eq!(
            phase(
                &state(vec![running.clone()], vec![waiting.clone()]),
                "Always"
            ),
            "Pending"
        );
        assert_eq!(
            phase(&state(vec![ok.clone()], vec![running.clone()]), "Always"),
            "Running"
        );
        let mut s = state(vec![failed], vec![waiting]);
        s.init_failed = true;
        assert_eq!(phase(&s, "Never"), "Failed");
    }

    #[test]
    fn conditions_keep_transition_times_and_report_readiness() {
        let mut prev = BTreeMap::new();
        let mut running = c(Run::Running { started_at: t(0) }, None);
        let s = state(vec![], vec![running.clone()]);
        let st = build(&s, "Always", &mut prev, t(5));
        let cond = |st: &PodStatus, ty: &str| {
            st.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == ty)
                .cloned()
                .unwrap()
        };
        assert_eq!(cond(&st, "Ready").status, "False");
        assert_eq!(
            cond(&st, "Ready").message.as_deref(),
            Some("containers with unready status: [c]")
        );
        assert_eq!(st.phase.as_deref(), Some("Running"));
        running.ready = true;
        running.started = true;
        let st2 = build(&state(vec![], vec![running]), "Always", &mut prev, t(9));
        assert_eq!(cond(&st2, "Ready").status, "True");
        assert_eq!(cond(&st2, "Ready").last_transition_time, Some(Time(t(9))));
        assert_eq!(
            cond(&st2, "PodScheduled").last_transition_time,
            Some(Time(t(5)))
        );
        let cs = &st2.container_statuses.unwrap()[0];
        assert!(cs.ready && cs.started == Some(true));
        assert!(cs.state.as_ref().unwrap().running.is_some());
    }

    #[test]
    fn terminal_pods_are_not_ready() {
        let mut prev = BTreeMap::new();
        let mut done = c(Run::Terminated(term(0)), None);
        done.ready = false;
        let st = build(&state(vec![], vec![done]), "Never", &mut prev, t(1));
        assert_eq!(st.phase.as_deref(), Some("Succeeded"));
        let ready = st
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.reason.as_deref(), Some("PodCompleted"));
    }
}
