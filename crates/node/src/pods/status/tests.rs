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
        started_at: Some(t(0)),
        finished_at: Some(t(1)),
        container_id: Some("steward-node://x".into()),
    }
}

fn state(init: Vec<ContainerState>, main: Vec<ContainerState>) -> PodState {
    PodState {
        pod_ip: Some(Ipv4Addr::new(127, 1, 0, 1)),
        start_time: t(0),
        init,
        main,
        init_failed: false,
        terminal: false,
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

fn named(name: &str, run: Run, last: Option<Terminated>) -> ContainerState {
    ContainerState {
        name: name.into(),
        ..c(run, last)
    }
}

fn cond(st: &PodStatus, ty: &str) -> PodCondition {
    st.conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == ty)
        .cloned()
        .unwrap()
}

fn killed(code: i32) -> Terminated {
    Terminated {
        signal: Some(code - 128),
        ..term(code)
    }
}

#[test]
fn a_stopped_pod_reports_terminated_containers_and_a_terminal_phase() {
    // restartPolicy Always: one container exited 0 on SIGTERM, one was crash-looping.
    let mut graceful = named("graceful", Run::Terminated(term(0)), None);
    graceful.ready = true;
    let crashing = named(
        "crashing",
        Run::Waiting {
            reason: "CrashLoopBackOff".into(),
            message: Some("back-off 4s restarting failed container".into()),
        },
        Some(term(2)),
    );
    let never_started = named(
        "config",
        Run::Waiting {
            reason: "CreateContainerConfigError".into(),
            message: None,
        },
        None,
    );
    let mut s = state(vec![], vec![graceful, crashing, never_started]);
    let mut prev = BTreeMap::new();
    assert_eq!(
        build(&s, "Always", &mut prev, t(1)).phase.as_deref(),
        Some("Pending")
    );
    terminate(&mut s);
    let st = build(&s, "Always", &mut prev, t(2));
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    let cs = st.container_statuses.clone().unwrap();
    let terminated: Vec<_> = cs
        .iter()
        .map(|c| {
            assert!(!c.ready && c.started == Some(false), "{c:?}");
            let t = c.state.clone().unwrap().terminated.unwrap();
            (t.exit_code, t.reason.unwrap())
        })
        .collect();
    assert_eq!(
        terminated,
        vec![
            (0, "Completed".to_string()),
            (2, "Error".to_string()),
            (137, "ContainerStatusUnknown".to_string())
        ]
    );
    assert!(
        cs[2]
            .state
            .clone()
            .unwrap()
            .terminated
            .unwrap()
            .started_at
            .is_none()
    );
    for ty in ["Ready", "ContainersReady"] {
        assert_eq!(cond(&st, ty).status, "False");
        assert_eq!(cond(&st, ty).reason.as_deref(), Some("PodFailed"));
    }
    assert_eq!(cond(&st, "PodReadyToStartContainers").status, "False");
}

#[test]
fn a_stopped_pod_whose_containers_exited_0_succeeded_whatever_the_policy() {
    for policy in ["Always", "OnFailure", "Never"] {
        let mut s = state(vec![], vec![c(Run::Terminated(term(0)), None)]);
        terminate(&mut s);
        let st = build(&s, policy, &mut BTreeMap::new(), t(1));
        assert_eq!(st.phase.as_deref(), Some("Succeeded"), "{policy}");
        assert_eq!(cond(&st, "Ready").reason.as_deref(), Some("PodCompleted"));
        assert_eq!(
            cond(&st, "Initialized").reason.as_deref(),
            Some("PodCompleted")
        );
        let mut s = state(vec![], vec![c(Run::Terminated(killed(143)), None)]);
        terminate(&mut s);
        assert_eq!(phase(&s, policy), "Failed", "{policy}");
    }
    // Nothing ran at all (deleted while its containers were being created).
    let mut s = state(
        vec![],
        vec![c(
            Run::Waiting {
                reason: "ContainerCreating".into(),
                message: None,
            },
            None,
        )],
    );
    s.pod_ip = None;
    terminate(&mut s);
    let st = build(&s, "Always", &mut BTreeMap::new(), t(1));
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    assert!(st.pod_ip.is_none() && st.pod_ips.is_none());
}

#[test]
fn a_stopped_pod_that_never_initialized_keeps_its_containers_waiting() {
    let ok = named("one", Run::Terminated(term(0)), None);
    let killed_init = named("two", Run::Terminated(killed(137)), None);
    let not_started = named(
        "three",
        Run::Waiting {
            reason: "PodInitializing".into(),
            message: None,
        },
        None,
    );
    let main = named(
        "main",
        Run::Waiting {
            reason: "PodInitializing".into(),
            message: None,
        },
        None,
    );
    let mut s = state(vec![ok, killed_init, not_started], vec![main]);
    terminate(&mut s);
    assert!(
        matches!(s.init[2].run, Run::Waiting { .. }),
        "after the last started one"
    );
    assert!(
        matches!(s.main[0].run, Run::Waiting { .. }),
        "the pod never initialized"
    );
    assert_eq!(phase(&s, "Always"), "Failed");
    // No init container started: the first one is reported unknown.
    let mut s = state(
        vec![named(
            "one",
            Run::Waiting {
                reason: "ContainerCreating".into(),
                message: None,
            },
            None,
        )],
        vec![],
    );
    terminate(&mut s);
    assert!(matches!(&s.init[0].run, Run::Terminated(t) if t.reason == "ContainerStatusUnknown"));
}
