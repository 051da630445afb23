//! The reconcile pipeline: an ordered list of subreconcilers run on every pass.
//!
//! Each step returns an [`Outcome`]; waiting is an outcome, not an error. The driver
//! ([`Pipeline::run`]) runs the status step first, enforces the deadline of the operation in
//! progress, runs the steps in order (skipping destructive ones while a failed operation blocks
//! the cluster), stops at the first `Stop` or error, and always runs the status step last so
//! that what was observed and why the pass stopped end up in status. It then computes the
//! driver-owned conditions (`Progressing`, `Degraded`), `observedGeneration` and
//! `generations.reconciled`, and queues Events and webhooks as [`Effect`]s, which the runtime
//! executes only after the status has been written.
//!
//! The driver does no I/O of its own; it is tested without an API server.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use jiff::Timestamp;
use steward_api::common::{CommonStatus, Operation, OperationPhase, condition_types};

use crate::conditions::{self, Status};
use crate::config::TimeoutArgs;
use crate::error::{Category, Error};
use crate::metrics::Metrics;
use crate::operation::{self, OperationRequest, Started};
use crate::webhook::WebhookPayload;

/// What a step asks the driver to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing (more) to do here.
    Continue,
    /// Not converged; later steps may still run; requeue after `after`.
    ContinueThenRequeue {
        /// When to look again.
        after: Duration,
        /// Why, for logs and the `Progressing` condition.
        reason: String,
    },
    /// Unsafe to go on: stop this pass and requeue after `after`.
    Stop {
        /// When to look again.
        after: Duration,
        /// Why, for logs, the `Progressing` condition and an Event.
        reason: String,
    },
}

impl Outcome {
    /// `ContinueThenRequeue` shorthand.
    pub fn requeue(after: Duration, reason: impl Into<String>) -> Self {
        Self::ContinueThenRequeue {
            after,
            reason: reason.into(),
        }
    }

    /// `Stop` shorthand.
    pub fn stop(after: Duration, reason: impl Into<String>) -> Self {
        Self::Stop {
            after,
            reason: reason.into(),
        }
    }
}

/// One subreconciler.
#[async_trait]
pub trait SubReconciler<P: Pass>: Send + Sync {
    /// Name used in logs, metrics and docs (CamelCase, like `AddMembers`).
    fn name(&self) -> &'static str;

    /// Destructive steps (member removal, Pod or PVC deletion, restore) do not run while a failed
    /// operation blocks the cluster.
    fn destructive(&self) -> bool {
        false
    }

    /// Does this step's work for one pass.
    async fn reconcile(&self, pass: &mut P) -> Result<Outcome, Error>;
}

/// Event severity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Informational.
    Normal,
    /// Needs attention.
    Warning,
}

/// A side effect queued during a pass, executed after the status write.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// A Kubernetes Event on the reconciled object.
    Event {
        /// Severity.
        type_: EventType,
        /// CamelCase reason.
        reason: String,
        /// What the operator was doing (CamelCase).
        action: String,
        /// Human-readable note; never contains secrets.
        note: String,
    },
    /// A webhook notification.
    Webhook(WebhookPayload),
    /// A finished operation, for metrics.
    OperationFinished(Operation),
}

/// State every pass carries, whatever the engine.
#[derive(Clone, Debug)]
pub struct PassCore {
    /// Controller name (`etcd`, `postgres`...).
    pub controller: &'static str,
    /// Namespace of the reconciled object.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its `metadata.generation`.
    pub generation: i64,
    /// "Now" for this pass (one reading, from the injected clock).
    pub now: Timestamp,
    /// Operation deadlines.
    pub timeouts: TimeoutArgs,
    /// Per-cluster deadline overrides.
    pub timeout_overrides: Option<steward_api::common::TimeoutOverrides>,
    /// The shared status being computed; starts as the stored one.
    pub status: CommonStatus,
    /// Effects to execute after the status write.
    pub effects: Vec<Effect>,
    /// Reasons the cluster is degraded, gathered during this pass.
    degradations: Vec<(String, String)>,
}

impl PassCore {
    /// A core for one pass over `namespace/name` at `generation`.
    pub fn new(
        controller: &'static str,
        namespace: impl Into<String>,
        name: impl Into<String>,
        generation: i64,
        now: Timestamp,
        stored: CommonStatus,
    ) -> Self {
        Self {
            controller,
            namespace: namespace.into(),
            name: name.into(),
            generation,
            now,
            timeouts: TimeoutArgs::default(),
            timeout_overrides: None,
            status: stored,
            effects: Vec::new(),
            degradations: Vec::new(),
        }
    }

    /// Queues an Event.
    pub fn event(&mut self, type_: EventType, reason: &str, action: &str, note: impl Into<String>) {
        self.effects.push(Effect::Event {
            type_,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note: note.into(),
        });
    }

    /// Marks the cluster degraded for this pass.
    pub fn degrade(&mut self, reason: &str, message: impl Into<String>) {
        self.degradations.push((reason.to_owned(), message.into()));
    }

    /// Sets an engine-specific condition.
    pub fn set_condition(
        &mut self,
        type_: &str,
        status: Status,
        reason: &str,
        message: impl Into<String>,
    ) {
        let generation = Some(self.generation);
        conditions::set(
            &mut self.status.conditions,
            type_,
            status,
            reason,
            message,
            generation,
            self.now,
        );
    }

    /// Starts (or resumes) an operation with the configured deadline. A newly started operation
    /// gets a Normal Event.
    pub fn start_operation(&mut self, request: OperationRequest) -> Started {
        let timeout = self
            .timeouts
            .for_kind(request.kind, self.timeout_overrides.as_ref());
        let kind = request.kind;
        let message = request.message.clone();
        let started = operation::start(
            &mut self.status,
            request,
            self.generation,
            self.now,
            timeout,
        );
        if started == Started::New {
            self.event(
                EventType::Normal,
                "OperationStarted",
                kind_action(kind),
                message,
            );
        }
        started
    }

    /// Records progress of the running operation.
    pub fn advance_operation(
        &mut self,
        kind: steward_api::common::OperationKind,
        step: &str,
        done: u32,
        message: impl Into<String>,
    ) {
        operation::advance(&mut self.status, kind, step, done, message);
    }

    /// Finishes the running operation of `kind`, queueing its Event, webhook and metric.
    pub fn finish_operation(
        &mut self,
        kind: steward_api::common::OperationKind,
        phase: OperationPhase,
        message: impl Into<String>,
    ) {
        if let Some(op) = operation::finish(&mut self.status, kind, phase, self.now, message) {
            self.operation_finished(op);
        }
    }

    fn operation_finished(&mut self, op: Operation) {
        let (type_, reason) = match op.phase {
            OperationPhase::Succeeded => (EventType::Normal, "OperationSucceeded"),
            _ => (EventType::Warning, "OperationFailed"),
        };
        self.event(type_, reason, kind_action(op.kind), op.message.clone());
        if let Some(payload) = WebhookPayload::for_operation(&self.namespace, &self.name, &op) {
            self.effects.push(Effect::Webhook(payload));
        }
        self.effects.push(Effect::OperationFinished(op));
    }

    /// Records the outcome of spec validation. Valid: clears `hasInvalidSpec`. Invalid: marks
    /// the generation, degrades the cluster with `InvalidSpec`, emits one Warning Event per
    /// distinct message, and returns the `Stop` that holds the pass until the spec changes.
    pub fn record_validation(&mut self, invalid: Option<&str>) -> Outcome {
        let Some(message) = invalid else {
            self.status.generations.has_invalid_spec = None;
            return Outcome::Continue;
        };
        let repeated = conditions::get(
            &self.status.conditions,
            steward_api::common::condition_types::DEGRADED,
        )
        .is_some_and(|c| c.reason == "InvalidSpec" && c.message == message);
        if !repeated {
            self.event(EventType::Warning, "InvalidSpec", "Validate", message);
        }
        self.status.generations.has_invalid_spec = Some(self.generation);
        self.degrade("InvalidSpec", message);
        Outcome::stop(Duration::from_secs(300), format!("invalid spec: {message}"))
    }

    /// Why destructive steps are blocked on this pass, if they are.
    pub fn destructive_block(&self) -> Option<String> {
        operation::blocked_by_failure(&self.status, self.generation)
    }
}

fn kind_action(kind: steward_api::common::OperationKind) -> &'static str {
    use steward_api::common::OperationKind as K;
    match kind {
        K::Bootstrap => "Bootstrap",
        K::Scale => "Scale",
        K::Restart => "Restart",
        K::Upgrade => "Upgrade",
        K::Failover => "Failover",
        K::Backup => "Backup",
        K::Restore => "Restore",
        K::Recover => "Recover",
    }
}

/// The per-pass state of an engine. Engines hold their own observations next to the core.
pub trait Pass: Send {
    /// The shared core.
    fn core(&self) -> &PassCore;
    /// The shared core, mutably.
    fn core_mut(&mut self) -> &mut PassCore;
}

/// A value fetched at most once per pass (e.g. the database status), shared by every step.
/// Steps that change the database call [`Snapshot::invalidate`] so that the final status step
/// reads it again.
#[derive(Clone, Debug, Default)]
pub enum Snapshot<T> {
    /// Not fetched on this pass.
    #[default]
    Empty,
    /// Fetched.
    Fetched(T),
    /// The fetch failed; the message says why (never containing credentials).
    Unavailable(String),
}

impl<T> Snapshot<T> {
    /// The fetched value, if any.
    pub fn get(&self) -> Option<&T> {
        match self {
            Self::Fetched(value) => Some(value),
            _ => None,
        }
    }

    /// Whether nothing was fetched yet on this pass.
    pub fn is_empty(&self) -> bool {
        matches!(self, Self::Empty)
    }

    /// Forgets the value so that the next reader fetches again.
    pub fn invalidate(&mut self) {
        *self = Self::Empty;
    }
}

/// How a pass ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PassResult {
    /// Every step returned `Continue`.
    Converged,
    /// Some step asked to look again later; all steps ran.
    Requeue {
        /// The earliest requeue any step asked for.
        after: Duration,
        /// The step that asked for it.
        step: &'static str,
        /// Its reason.
        reason: String,
    },
    /// A step stopped the pass.
    Stopped {
        /// When to look again.
        after: Duration,
        /// The step.
        step: &'static str,
        /// Its reason.
        reason: String,
    },
    /// A step failed.
    Failed {
        /// The step.
        step: &'static str,
        /// The error's category.
        category: Category,
        /// The error message.
        message: String,
    },
}

impl PassResult {
    /// Label for the passes metric.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Converged => "converged",
            Self::Requeue { .. } => "requeue",
            Self::Stopped { .. } => "stopped",
            Self::Failed { .. } => "error",
        }
    }

    /// When to reconcile again; `None` means only on the next change (or the periodic resync).
    pub fn requeue_after(&self) -> Option<Duration> {
        match self {
            Self::Converged => None,
            Self::Requeue { after, .. } | Self::Stopped { after, .. } => Some(*after),
            Self::Failed { category, .. } => Some(category.retry_after()),
        }
    }
}

/// What a pass did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassReport {
    /// How it ended.
    pub result: PassResult,
    /// Steps that ran, in order (the status step appears first and last).
    pub steps_run: Vec<&'static str>,
    /// Destructive steps skipped because a failed operation blocks the cluster.
    pub skipped: Vec<&'static str>,
}

/// An ordered list of subreconcilers with a status step that runs first and last.
pub struct Pipeline<P: Pass> {
    controller: &'static str,
    status: Box<dyn SubReconciler<P>>,
    steps: Vec<Box<dyn SubReconciler<P>>>,
}

impl<P: Pass> Pipeline<P> {
    /// A pipeline; `status` runs first and last, `steps` in between, in order.
    pub fn new(
        controller: &'static str,
        status: Box<dyn SubReconciler<P>>,
        steps: Vec<Box<dyn SubReconciler<P>>>,
    ) -> Self {
        Self {
            controller,
            status,
            steps,
        }
    }

    /// The step names in pipeline order, status first and last (for docs and tests).
    pub fn step_names(&self) -> Vec<&'static str> {
        let mut names = vec![self.status.name()];
        names.extend(self.steps.iter().map(|s| s.name()));
        names.push(self.status.name());
        names
    }

    /// Runs one pass. See the module documentation for the order of things.
    pub async fn run(&self, pass: &mut P, metrics: &Metrics) -> PassReport {
        let started = std::time::Instant::now();
        let mut steps_run = Vec::new();
        let mut skipped = Vec::new();
        let mut requeue: Option<(Duration, &'static str, String)> = None;
        let mut end: Option<PassResult> = None;

        let first = self
            .run_step(self.status.as_ref(), pass, metrics, &mut steps_run)
            .await;
        if let Some(stop) = self.absorb(first, self.status.name(), &mut requeue) {
            end = Some(stop);
        }

        let now = pass.core().now;
        if let Some(op) = operation::expire(&mut pass.core_mut().status, now) {
            pass.core_mut().operation_finished(op);
        }
        let block = pass.core().destructive_block();
        if let Some(reason) = &block {
            pass.core_mut().degrade("OperationFailed", reason.clone());
        }

        if end.is_none() {
            for step in &self.steps {
                if step.destructive() && block.is_some() {
                    skipped.push(step.name());
                    continue;
                }
                let result = self
                    .run_step(step.as_ref(), pass, metrics, &mut steps_run)
                    .await;
                if let Some(stop) = self.absorb(result, step.name(), &mut requeue) {
                    end = Some(stop);
                    break;
                }
            }
        }

        let last = self
            .run_step(self.status.as_ref(), pass, metrics, &mut steps_run)
            .await;
        let last = self.absorb(last, self.status.name(), &mut requeue);
        let result = match (end, last) {
            (Some(stop), _) | (None, Some(stop)) => stop,
            (None, None) => match requeue {
                Some((after, step, reason)) => PassResult::Requeue {
                    after,
                    step,
                    reason,
                },
                None => PassResult::Converged,
            },
        };
        self.conclude(pass.core_mut(), &result, &skipped);
        metrics.pass_finished(self.controller, result.label(), started.elapsed());
        if let PassResult::Failed { category, .. } = &result {
            metrics.error(self.controller, category.as_str());
        }
        PassReport {
            result,
            steps_run,
            skipped,
        }
    }

    async fn run_step(
        &self,
        step: &dyn SubReconciler<P>,
        pass: &mut P,
        metrics: &Metrics,
        steps_run: &mut Vec<&'static str>,
    ) -> Result<Outcome, Error> {
        let started = Instant::now();
        let result = step.reconcile(pass).await;
        let took = started.elapsed();
        metrics.step_finished(self.controller, step.name(), took);
        steps_run.push(step.name());
        let core = pass.core();
        match &result {
            Ok(outcome) => tracing::debug!(
                controller = self.controller, namespace = %core.namespace, name = %core.name,
                step = step.name(), took_ms = took.as_millis() as u64, ?outcome, "step finished"
            ),
            Err(err) => tracing::warn!(
                controller = self.controller, namespace = %core.namespace, name = %core.name,
                step = step.name(), category = err.category().as_str(), error = %err, "step failed"
            ),
        }
        result
    }

    /// Folds a step's result into the pass; returns the end of the pass if it stops here.
    fn absorb(
        &self,
        result: Result<Outcome, Error>,
        step: &'static str,
        requeue: &mut Option<(Duration, &'static str, String)>,
    ) -> Option<PassResult> {
        match result {
            Ok(Outcome::Continue) => None,
            Ok(Outcome::ContinueThenRequeue { after, reason }) => {
                if requeue
                    .as_ref()
                    .is_none_or(|(earliest, _, _)| after < *earliest)
                {
                    *requeue = Some((after, step, reason));
                }
                None
            }
            Ok(Outcome::Stop { after, reason }) => Some(PassResult::Stopped {
                after,
                step,
                reason,
            }),
            Err(err) => Some(PassResult::Failed {
                step,
                category: err.category(),
                message: err.to_string(),
            }),
        }
    }

    /// Driver-owned status: `Progressing`, `Degraded`, `observedGeneration`,
    /// `generations.reconciled`, and the Events that go with them.
    fn conclude(&self, core: &mut PassCore, result: &PassResult, skipped: &[&'static str]) {
        let generation = core.generation;
        let (progressing, p_reason, p_message) = match result {
            PassResult::Converged => match &core.status.operation {
                Some(op) => (
                    Status::True,
                    kind_action(op.kind).to_owned(),
                    op.message.clone(),
                ),
                None => (Status::False, "Reconciled".to_owned(), String::new()),
            },
            PassResult::Requeue { step, reason, .. } | PassResult::Stopped { step, reason, .. } => {
                (Status::True, (*step).to_owned(), reason.clone())
            }
            PassResult::Failed { step, category, .. } => (
                Status::True,
                (*step).to_owned(),
                format!("failed: {}", category.as_str()),
            ),
        };
        let previous = conditions::get(&core.status.conditions, condition_types::PROGRESSING)
            .map(|c| (c.reason.clone(), c.message.clone()));
        let changed = previous.as_ref() != Some(&(p_reason.clone(), p_message.clone()));
        conditions::set(
            &mut core.status.conditions,
            condition_types::PROGRESSING,
            progressing,
            &p_reason,
            p_message,
            Some(generation),
            core.now,
        );
        match result {
            PassResult::Stopped { step, reason, .. } if changed => core.event(
                EventType::Normal,
                "ReconcileStopped",
                "Reconcile",
                format!("step {step} stopped the pass: {reason}"),
            ),
            PassResult::Failed {
                step,
                category,
                message,
            } => {
                core.degrade(category.as_str(), format!("step {step}: {message}"));
                if changed {
                    core.event(
                        EventType::Warning,
                        category.as_str(),
                        "Reconcile",
                        format!("step {step} failed: {message}"),
                    );
                }
            }
            _ => {}
        }
        if !skipped.is_empty() {
            let reason = core.destructive_block().unwrap_or_default();
            core.degrade(
                "DestructiveStepsBlocked",
                format!("skipped {}: {reason}", skipped.join(", ")),
            );
        }

        let (degraded, d_reason, d_message) = match core.degradations.first() {
            Some((reason, _)) => {
                let message = core
                    .degradations
                    .iter()
                    .map(|(_, m)| m.as_str())
                    .collect::<Vec<_>>()
                    .join("; ");
                (Status::True, reason.clone(), message)
            }
            None => (Status::False, "AsExpected".to_owned(), String::new()),
        };
        // Becoming degraded, or degraded for a new reason, is a Warning Event too, unless a
        // step already said so with an Event of that reason on this pass.
        let was_degraded = conditions::get(&core.status.conditions, condition_types::DEGRADED)
            .filter(|c| c.status == Status::True.as_str())
            .map(|c| c.reason.clone());
        let announced = core
            .effects
            .iter()
            .any(|e| matches!(e, Effect::Event { reason, .. } if *reason == d_reason));
        if degraded == Status::True && was_degraded.as_ref() != Some(&d_reason) && !announced {
            core.event(
                EventType::Warning,
                &d_reason,
                "Reconcile",
                d_message.clone(),
            );
        }
        conditions::set(
            &mut core.status.conditions,
            condition_types::DEGRADED,
            degraded,
            &d_reason,
            d_message,
            Some(generation),
            core.now,
        );

        core.status.observed_generation = Some(generation);
        if *result == PassResult::Converged && core.status.operation.is_none() {
            let was = core.status.generations.reconciled;
            core.status.generations.reconciled = Some(generation);
            if was != Some(generation) {
                core.event(
                    EventType::Normal,
                    "RolloutComplete",
                    "Reconcile",
                    format!("generation {generation} is fully reconciled"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
