//! Driver tests: order, early stop, requeue merge, error categories, events, deadlines.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use steward_api::common::{
    GroupReplicas, OperationChange, OperationKind, OperationPhase, condition_types,
};

use super::*;
use crate::clock::{Clock, ManualClock};
use crate::conditions::get;
use crate::webhook::{WebhookEvent, WebhookStatus};

type Log = Arc<Mutex<Vec<&'static str>>>;

struct TestPass {
    core: PassCore,
}

impl Pass for TestPass {
    fn core(&self) -> &PassCore {
        &self.core
    }
    fn core_mut(&mut self) -> &mut PassCore {
        &mut self.core
    }
}

#[derive(Clone)]
enum Plan {
    Ok(Outcome),
    Err(fn() -> Error),
}

struct Step {
    name: &'static str,
    plan: Plan,
    destructive: bool,
    log: Log,
}

#[async_trait]
impl SubReconciler<TestPass> for Step {
    fn name(&self) -> &'static str {
        self.name
    }
    fn destructive(&self) -> bool {
        self.destructive
    }
    async fn reconcile(&self, _pass: &mut TestPass) -> Result<Outcome, Error> {
        self.log.lock().unwrap().push(self.name);
        match &self.plan {
            Plan::Ok(outcome) => Ok(outcome.clone()),
            Plan::Err(make) => Err(make()),
        }
    }
}

fn step(log: &Log, name: &'static str, plan: Plan) -> Box<dyn SubReconciler<TestPass>> {
    Box::new(Step {
        name,
        plan,
        destructive: false,
        log: log.clone(),
    })
}

fn destructive(log: &Log, name: &'static str) -> Box<dyn SubReconciler<TestPass>> {
    Box::new(Step {
        name,
        plan: Plan::Ok(Outcome::Continue),
        destructive: true,
        log: log.clone(),
    })
}

fn ok() -> Plan {
    Plan::Ok(Outcome::Continue)
}

fn pipeline(log: &Log, steps: Vec<Box<dyn SubReconciler<TestPass>>>) -> Pipeline<TestPass> {
    Pipeline::new("test", step(log, "UpdateStatus", ok()), steps)
}

fn clock() -> ManualClock {
    ManualClock::new("2026-05-01T12:00:00Z".parse().unwrap())
}

fn pass(clock: &ManualClock, generation: i64) -> TestPass {
    TestPass {
        core: PassCore::new(
            "test",
            "ns",
            "demo",
            generation,
            clock.now(),
            Default::default(),
        ),
    }
}

fn events(pass: &TestPass) -> Vec<(EventType, String)> {
    pass.core
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Event { type_, reason, .. } => Some((*type_, reason.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn runs_status_first_then_steps_in_order_then_status_last() {
    let log = Log::default();
    let p = pipeline(
        &log,
        vec![
            step(&log, "A", ok()),
            step(&log, "B", ok()),
            step(&log, "C", ok()),
        ],
    );
    let clock = clock();
    let mut pass = pass(&clock, 1);
    let report = p.run(&mut pass, &Metrics::new()).await;
    assert_eq!(
        *log.lock().unwrap(),
        ["UpdateStatus", "A", "B", "C", "UpdateStatus"]
    );
    assert_eq!(
        report.steps_run,
        ["UpdateStatus", "A", "B", "C", "UpdateStatus"]
    );
    assert_eq!(p.step_names(), report.steps_run);
    assert_eq!(report.result, PassResult::Converged);
    assert_eq!(pass.core.status.generations.reconciled, Some(1));
    assert_eq!(pass.core.status.observed_generation, Some(1));
    let progressing = get(&pass.core.status.conditions, condition_types::PROGRESSING).unwrap();
    assert_eq!(
        (progressing.status.as_str(), progressing.reason.as_str()),
        ("False", "Reconciled")
    );
}

#[tokio::test]
async fn stop_ends_the_pass_but_status_still_runs_last() {
    let log = Log::default();
    let stop = Plan::Ok(Outcome::stop(Duration::from_secs(7), "waiting for quorum"));
    let p = pipeline(
        &log,
        vec![
            step(&log, "A", ok()),
            step(&log, "B", stop),
            step(&log, "C", ok()),
        ],
    );
    let clock = clock();
    let mut pass = pass(&clock, 3);
    let report = p.run(&mut pass, &Metrics::new()).await;
    assert_eq!(
        *log.lock().unwrap(),
        ["UpdateStatus", "A", "B", "UpdateStatus"]
    );
    assert_eq!(
        report.result,
        PassResult::Stopped {
            after: Duration::from_secs(7),
            step: "B",
            reason: "waiting for quorum".into()
        }
    );
    assert_eq!(report.result.requeue_after(), Some(Duration::from_secs(7)));
    assert_eq!(
        pass.core.status.generations.reconciled, None,
        "a stopped pass is not reconciled"
    );
    let progressing = get(&pass.core.status.conditions, condition_types::PROGRESSING).unwrap();
    assert_eq!(
        (progressing.status.as_str(), progressing.reason.as_str()),
        ("True", "B")
    );
    assert_eq!(
        events(&pass),
        [(EventType::Normal, "ReconcileStopped".to_owned())]
    );

    // The same stop on the next pass does not repeat the Event.
    let mut again = TestPass {
        core: PassCore::new(
            "test",
            "ns",
            "demo",
            3,
            clock.now(),
            pass.core.status.clone(),
        ),
    };
    p.run(&mut again, &Metrics::new()).await;
    assert!(events(&again).is_empty(), "{:?}", events(&again));
}

#[tokio::test]
async fn requeues_merge_to_the_earliest_and_all_steps_run() {
    let log = Log::default();
    let late = Plan::Ok(Outcome::requeue(Duration::from_secs(30), "pods starting"));
    let early = Plan::Ok(Outcome::requeue(
        Duration::from_secs(5),
        "learner catching up",
    ));
    let p = pipeline(
        &log,
        vec![
            step(&log, "A", late),
            step(&log, "B", ok()),
            step(&log, "C", early),
        ],
    );
    let clock = clock();
    let mut pass = pass(&clock, 1);
    let report = p.run(&mut pass, &Metrics::new()).await;
    assert_eq!(
        *log.lock().unwrap(),
        ["UpdateStatus", "A", "B", "C", "UpdateStatus"]
    );
    assert_eq!(
        report.result,
        PassResult::Requeue {
            after: Duration::from_secs(5),
            step: "C",
            reason: "learner catching up".into()
        }
    );
    assert_eq!(pass.core.status.generations.reconciled, None);
}

#[tokio::test]
async fn errors_stop_the_pass_with_their_category_condition_event_and_metric() {
    let log = Log::default();
    let fail = Plan::Err(|| Error::Database {
        cluster: "ns/demo".into(),
        message: "connection refused".into(),
    });
    let p = pipeline(&log, vec![step(&log, "A", fail), step(&log, "B", ok())]);
    let clock = clock();
    let mut pass = pass(&clock, 2);
    let metrics = Metrics::new();
    let report = p.run(&mut pass, &metrics).await;
    assert_eq!(*log.lock().unwrap(), ["UpdateStatus", "A", "UpdateStatus"]);
    let PassResult::Failed { step, category, .. } = &report.result else {
        panic!("expected failure, got {:?}", report.result)
    };
    assert_eq!((*step, *category), ("A", Category::Database));
    assert_eq!(
        report.result.requeue_after(),
        Some(Category::Database.retry_after())
    );
    let degraded = get(&pass.core.status.conditions, condition_types::DEGRADED).unwrap();
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "DatabaseError")
    );
    assert!(degraded.message.contains("connection refused"));
    assert_eq!(
        events(&pass),
        [(EventType::Warning, "DatabaseError".to_owned())]
    );
    assert!(metrics.encode().contains(
        "steward_reconcile_errors_total{controller=\"test\",category=\"DatabaseError\"} 1"
    ));
}

#[tokio::test]
async fn rollout_complete_event_fires_once_per_generation() {
    let log = Log::default();
    let p = pipeline(&log, vec![step(&log, "A", ok())]);
    let clock = clock();
    let mut first = pass(&clock, 4);
    p.run(&mut first, &Metrics::new()).await;
    assert_eq!(
        events(&first),
        [(EventType::Normal, "RolloutComplete".to_owned())]
    );
    let mut second = TestPass {
        core: PassCore::new(
            "test",
            "ns",
            "demo",
            4,
            clock.now(),
            first.core.status.clone(),
        ),
    };
    p.run(&mut second, &Metrics::new()).await;
    assert!(events(&second).is_empty());
    assert_eq!(
        second.core.status, first.core.status,
        "a converged pass changes nothing"
    );
}

fn scale_request() -> OperationRequest {
    OperationRequest {
        kind: OperationKind::Scale,
        step: "AddMember".into(),
        total: 2,
        change: OperationChange {
            old_replicas: vec![GroupReplicas {
                name: "members".into(),
                replicas: 3,
            }],
            new_replicas: vec![GroupReplicas {
                name: "members".into(),
                replicas: 5,
            }],
            ..Default::default()
        },
        message: "scaling from 3 to 5 members".into(),
    }
}

#[tokio::test]
async fn an_expired_operation_fails_notifies_and_blocks_destructive_steps() {
    let log = Log::default();
    let p = pipeline(
        &log,
        vec![step(&log, "Safe", ok()), destructive(&log, "RemoveMember")],
    );
    let clock = clock();
    let mut pass = pass(&clock, 6);
    pass.core.timeouts.scaling_timeout = 60;
    assert_eq!(pass.core.start_operation(scale_request()), Started::New);
    let stored = pass.core.status.clone();

    // A restarted operator reads the stored record 61 s later.
    clock.advance(Duration::from_secs(61));
    let mut later = TestPass {
        core: PassCore::new("test", "ns", "demo", 6, clock.now(), stored),
    };
    let report = p.run(&mut later, &Metrics::new()).await;
    assert_eq!(report.skipped, ["RemoveMember"]);
    assert!(!log.lock().unwrap().contains(&"RemoveMember"));
    let last = later.core.status.last_operation.as_ref().unwrap();
    assert_eq!(last.phase, OperationPhase::Failed);
    let degraded = get(&later.core.status.conditions, condition_types::DEGRADED).unwrap();
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "OperationFailed")
    );
    assert!(events(&later).contains(&(EventType::Warning, "OperationFailed".to_owned())));
    let webhook = later.core.effects.iter().find_map(|e| match e {
        Effect::Webhook(w) => Some(w.clone()),
        _ => None,
    });
    let webhook = webhook.expect("a webhook for the failed scale");
    assert_eq!(
        (webhook.event, webhook.status),
        (WebhookEvent::Scale, WebhookStatus::Failure)
    );

    // A spec change (new generation) lifts the block.
    let log2 = Log::default();
    let p2 = pipeline(&log2, vec![destructive(&log2, "RemoveMember")]);
    let mut next = TestPass {
        core: PassCore::new(
            "test",
            "ns",
            "demo",
            7,
            clock.now(),
            later.core.status.clone(),
        ),
    };
    let report = p2.run(&mut next, &Metrics::new()).await;
    assert!(report.skipped.is_empty());
    assert!(log2.lock().unwrap().contains(&"RemoveMember"));
}

#[tokio::test]
async fn finishing_an_operation_queues_event_webhook_and_metric() {
    let clock = clock();
    let mut pass = pass(&clock, 1);
    pass.core.start_operation(scale_request());
    pass.core
        .advance_operation(OperationKind::Scale, "PromoteLearner", 1, "member-3 joined");
    pass.core
        .finish_operation(OperationKind::Scale, OperationPhase::Succeeded, "5 members");
    let kinds: Vec<_> = pass
        .core
        .effects
        .iter()
        .map(|e| match e {
            Effect::Event { reason, .. } => reason.clone(),
            Effect::Webhook(w) => format!("webhook:{:?}:{:?}", w.event, w.status),
            Effect::OperationFinished(op) => format!("metric:{}", op.kind.as_str()),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "OperationStarted",
            "OperationSucceeded",
            "webhook:Scale:Success",
            "metric:scale"
        ]
    );
}

#[test]
fn snapshot_slot_holds_one_fetch_per_pass_until_invalidated() {
    let mut slot: Snapshot<u32> = Snapshot::default();
    assert!(slot.is_empty());
    slot = Snapshot::Fetched(3);
    assert_eq!(slot.get(), Some(&3));
    slot.invalidate();
    assert!(slot.is_empty() && slot.get().is_none());
    let down: Snapshot<u32> = Snapshot::Unavailable("connection refused".into());
    assert!(!down.is_empty() && down.get().is_none());
}
