//! Prometheus metrics (`prometheus-client`), served on `/metrics`.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabels {
    controller: String,
    step: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PassLabels {
    controller: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    controller: String,
    category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    event: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AllocatorLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    kind: String,
    result: String,
}

fn step_histogram() -> Histogram {
    // 1 ms .. ~65 s.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.001, 2.0, 17,
    ))
}

/// All of the operator's metrics. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    step_duration: Family<StepLabels, Histogram, fn() -> Histogram>,
    pass_duration: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    passes: Family<PassLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    webhooks: Family<WebhookLabels, Counter>,
    operations: Family<OperationLabels, Counter>,
    leader: Gauge<i64, std::sync::atomic::AtomicI64>,
    ready: Gauge<i64, std::sync::atomic::AtomicI64>,
    allocator: Family<AllocatorLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric in a fresh registry.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("steward");
        let step_duration: Family<StepLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(step_histogram);
        registry.register(
            "reconcile_step_duration_seconds",
            "Time spent in each reconcile step",
            step_duration.clone(),
        );
        let pass_duration: Family<ControllerLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(step_histogram);
        registry.register(
            "reconcile_pass_duration_seconds",
            "Time one reconcile pass took, all its steps (wall clock)",
            pass_duration.clone(),
        );
        let passes = Family::<PassLabels, Counter>::default();
        registry.register(
            "reconcile_passes",
            "Reconcile passes by outcome (converged, requeue, stopped, error)",
            passes.clone(),
        );
        let errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Reconcile errors by category",
            errors.clone(),
        );
        let webhooks = Family::<WebhookLabels, Counter>::default();
        registry.register(
            "webhook_deliveries",
            "Webhook deliveries by event and result (failures are not retried)",
            webhooks.clone(),
        );
        let operations = Family::<OperationLabels, Counter>::default();
        registry.register(
            "operations",
            "Finished long-running operations by kind and result",
            operations.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this instance holds the leader Lease",
            leader.clone(),
        );
        let ready = Gauge::default();
        registry.register(
            "ready",
            "1 once CRDs are established and caches synced",
            ready.clone(),
        );
        let allocator = Family::<AllocatorLabels, Gauge>::default();
        registry.register(
            "allocator_bytes",
            "Heap bytes by allocator state (jemalloc: allocated, active, resident, mapped, \
             retained); set by the `steward` binary",
            allocator.clone(),
        );
        Self {
            registry: Arc::new(registry),
            step_duration,
            pass_duration,
            passes,
            errors,
            webhooks,
            operations,
            leader,
            ready,
            allocator,
        }
    }

    /// Records the duration of one step.
    pub fn step_finished(&self, controller: &str, step: &str, took: Duration) {
        self.step_duration
            .get_or_create(&StepLabels {
                controller: controller.to_owned(),
                step: step.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    /// Counts a finished pass and records how long it took (wall clock, awaits included).
    pub fn pass_finished(&self, controller: &str, outcome: &str, took: Duration) {
        self.passes
            .get_or_create(&PassLabels {
                controller: controller.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
        self.pass_duration
            .get_or_create(&ControllerLabels {
                controller: controller.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    /// Counts an error.
    pub fn error(&self, controller: &str, category: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                controller: controller.to_owned(),
                category: category.to_owned(),
            })
            .inc();
    }

    /// Counts a webhook delivery.
    pub fn webhook_delivered(&self, event: &str, result: &str) {
        self.webhooks
            .get_or_create(&WebhookLabels {
                event: event.to_owned(),
                result: result.to_owned(),
            })
            .inc();
    }

    /// Counts a finished operation.
    pub fn operation_finished(&self, kind: &str, result: &str) {
        self.operations
            .get_or_create(&OperationLabels {
                kind: kind.to_owned(),
                result: result.to_owned(),
            })
            .inc();
    }

    /// Sets the leader gauge.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Sets the readiness gauge.
    pub fn set_ready(&self, ready: bool) {
        self.ready.set(i64::from(ready));
    }

    /// Sets the allocator's bytes in `state` (the binary samples its allocator; a library user
    /// with another allocator leaves the family empty).
    pub fn set_allocator_bytes(&self, state: &str, bytes: u64) {
        self.allocator
            .get_or_create(&AllocatorLabels {
                state: state.to_owned(),
            })
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// The value of a webhook counter, for tests and self-checks.
    pub fn webhook_count(&self, event: &str, result: &str) -> u64 {
        self.webhooks
            .get_or_create(&WebhookLabels {
                event: event.to_owned(),
                result: result.to_owned(),
            })
            .get()
    }

    /// Renders the OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_step_histograms_with_labels() {
        let m = Metrics::new();
        m.step_finished("etcd", "UpdateStatus", Duration::from_millis(3));
        m.set_leader(true);
        m.set_allocator_bytes("resident", 5 << 20);
        let text = m.encode();
        assert!(text.contains(
            "steward_reconcile_step_duration_seconds_count{controller=\"etcd\",step=\"UpdateStatus\"} 1"
        ), "{text}");
        assert!(text.contains("steward_leader 1"), "{text}");
        assert!(
            text.contains("steward_allocator_bytes{state=\"resident\"} 5242880"),
            "{text}"
        );
    }
}
