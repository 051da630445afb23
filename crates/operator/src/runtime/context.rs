//! What every controller shares: the client, metrics, webhooks, clock, deadlines and the Event
//! recorder. Built once per leadership term.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType as KubeEventType, Reporter};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use steward_api::common::{CommonStatus, TimeoutOverrides, condition_types};

use crate::clock::Clock;
use crate::config::TimeoutArgs;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::pipeline::{Effect, EventType, PassCore, PassReport};
use crate::webhook::WebhookSender;

/// The field manager of status writes.
pub const STATUS_MANAGER: &str = "steward/status";

/// How often a cluster none of whose Pods can be scheduled is looked at without a change: a
/// safety net only — a Pod being placed (the Pod watch) or a Node changing state (the Node
/// watch) starts a pass at once, and until then no pass can change anything (issue 17: back
/// off such clusters; 60 s before, 5× the passes).
pub const UNSCHEDULABLE_RESYNC: Duration = Duration::from_secs(300);

/// A cluster kind's status: the part every kind shares, and the kind's own.
pub trait ClusterStatus {
    /// The common part (conditions, operation, generations).
    fn common(&self) -> &CommonStatus;
}

/// The pass's next look: its own, unless nothing runs because the scheduler cannot place the
/// Pods (`Available=False/Unschedulable`) — no pass can change that, and the Pod watch starts
/// one as soon as a Pod is placed — then [`UNSCHEDULABLE_RESYNC`].
fn backed_off(status: &CommonStatus, action: Action, resync: Duration) -> Action {
    let unplaced = crate::conditions::get(&status.conditions, condition_types::AVAILABLE)
        .is_some_and(|c| c.status == "False" && c.reason == "Unschedulable");
    if unplaced {
        Action::requeue(UNSCHEDULABLE_RESYNC.max(resync))
    } else {
        action
    }
}

/// Shared by every reconcile.
#[derive(Clone)]
pub struct Context {
    /// Kubernetes client.
    pub client: Client,
    /// Metrics.
    pub metrics: Metrics,
    /// Webhook sender.
    pub webhooks: WebhookSender,
    /// Clock.
    pub clock: Arc<dyn Clock>,
    /// Operation deadlines.
    pub timeouts: TimeoutArgs,
    /// Event recorder.
    pub recorder: Arc<super::events::EventRecorder>,
    /// The watched namespace, or `None` for all.
    pub namespace: Option<String>,
    /// This instance's identity (for logs and Events).
    pub identity: String,
    /// The cluster DNS domain.
    pub cluster_domain: String,
    /// How long a database may take to answer.
    pub database_timeout: Duration,
    /// Passes each controller runs at once (`--max-concurrent-reconciles`; 0: no bound).
    pub max_concurrent_reconciles: u16,
    /// The operator's own namespace (its Lease's): where schedule ConfigMaps live.
    pub own_namespace: String,
    /// What the controllers' appliers applied last (they skip unchanged applies of cached
    /// kinds).
    pub applied: crate::resources::apply::AppliedMemo,
    /// The engines' admin seams (database clients), each under a type of its engine's: the
    /// production clients, put there by each engine ([`super::engine::Engine::install_seams`]),
    /// or models in tests. The runtime names none of them.
    pub seams: http::Extensions,
    /// The newest `resourceVersion` this operator knows of each cluster object, by uid: what
    /// its last status write returned, or its last fresh read. See [`Self::fresh`].
    known_versions: Arc<Mutex<HashMap<String, String>>>,
}

impl Context {
    /// A context; Events are reported as `steward` with this instance's identity.
    pub fn new(
        client: Client,
        metrics: Metrics,
        webhooks: WebhookSender,
        clock: Arc<dyn Clock>,
        timeouts: TimeoutArgs,
        namespace: Option<String>,
        identity: String,
    ) -> Self {
        let reporter = Reporter {
            controller: "steward".into(),
            instance: Some(identity.clone()),
        };
        let recorder = Arc::new(super::events::EventRecorder::new(client.clone(), reporter));
        Self {
            client: client.clone(),
            metrics,
            webhooks,
            clock,
            timeouts,
            recorder,
            namespace,
            identity,
            cluster_domain: "cluster.local".into(),
            database_timeout: Duration::from_secs(3),
            max_concurrent_reconciles: 0,
            own_namespace: "steward-system".into(),
            applied: crate::resources::apply::AppliedMemo::default(),
            seams: {
                let mut seams = http::Extensions::new();
                for engine in crate::engines::all() {
                    engine.install_seams(&client, &mut seams);
                }
                seams
            },
            known_versions: Arc::default(),
        }
    }

    /// The admin seam of type `T` an engine installed ([`Self::seams`]).
    pub fn seam<T: Clone + Send + Sync + 'static>(&self) -> Result<T> {
        self.seams
            .get::<T>()
            .cloned()
            .ok_or_else(|| Error::Internal {
                message: format!("no admin seam {} installed", std::any::type_name::<T>()),
            })
    }

    /// The configuration of every engine controller: at most
    /// [`Self::max_concurrent_reconciles`] passes at once (the others wait in its queue).
    pub fn controller_config(&self) -> kube::runtime::controller::Config {
        kube::runtime::controller::Config::default().concurrency(self.max_concurrent_reconciles)
    }

    /// The cluster object a pass must start from. The controller hands over its cached copy,
    /// which can predate this operator's own last status write (a Pod event queued during a
    /// pass starts the next one before the watch delivers that write). A pass on such a copy
    /// would act on stale progress and its status write would erase the newer one (a pending
    /// switchover, a health gate). So when the cached `resourceVersion` is not the newest this
    /// operator knows of the object, it is read again; in steady state the two agree and
    /// nothing is read. `None`: the object is gone.
    pub async fn fresh<K>(&self, cached: Arc<K>) -> Result<Option<Arc<K>>>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + DeserializeOwned,
    {
        let Some(uid) = cached.uid() else {
            return Ok(Some(cached));
        };
        let known = self.known_version(&uid);
        if known.is_none() || known == cached.resource_version() {
            return Ok(Some(cached));
        }
        let namespace = cached.namespace().unwrap_or_default();
        let name = cached.name_any();
        let api: Api<K> = self.api(&namespace);
        match api.get_opt(&name).await {
            Ok(Some(current)) if current.uid().as_deref() == Some(uid.as_str()) => {
                tracing::debug!(
                    object = %format!("{namespace}/{name}"),
                    cached = ?cached.resource_version(),
                    known = ?known,
                    read = ?current.resource_version(),
                    "cached copy is not the newest known version; read it again"
                );
                self.remember_version(&current);
                Ok(Some(Arc::new(current)))
            }
            Ok(_) => {
                self.forget_version(&uid);
                Ok(None)
            }
            Err(source) => Err(Error::kube("get", format!("{namespace}/{name}"), source)),
        }
    }

    fn known_version(&self, uid: &str) -> Option<String> {
        self.known_versions
            .lock()
            .ok()
            .and_then(|m| m.get(uid).cloned())
    }

    /// Records `obj`'s `resourceVersion` as the newest known of it.
    pub(crate) fn remember_version<K: Resource>(&self, obj: &K) {
        if let (Some(uid), Some(rv), Ok(mut known)) = (
            obj.uid(),
            obj.resource_version(),
            self.known_versions.lock(),
        ) {
            known.insert(uid, rv);
        }
    }

    /// Forgets a deleted object's version.
    pub fn forget_version(&self, uid: &str) {
        if let Ok(mut known) = self.known_versions.lock() {
            known.remove(uid);
        }
    }

    /// An `Api` for namespaced kind `K` over what this operator watches: its `--namespace`, or
    /// every namespace.
    pub fn watched_api<K>(&self) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// An `Api` for namespaced kind `K` in `namespace`.
    pub fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// The shared state of a new pass over `obj`: its identity and generation, this clock's
    /// now, the stored common status, and the operator's timeouts with the object's overrides.
    pub fn pass_core<K: Resource>(
        &self,
        controller: &'static str,
        obj: &K,
        stored: CommonStatus,
        overrides: Option<TimeoutOverrides>,
    ) -> PassCore {
        let mut core = PassCore::new(
            controller,
            obj.namespace().unwrap_or_default(),
            obj.name_any(),
            obj.meta().generation.unwrap_or_default(),
            self.clock.now(),
            stored,
        );
        core.timeouts = self.timeouts.clone();
        core.timeout_overrides = overrides;
        core
    }

    /// Ends an engine's pass: logs its result, then [`Self::finish_pass`] with the engine's
    /// `status` (its common part already taken from `core`) and the effects `core` queued. A
    /// cluster that is `Available=False/Unschedulable` is looked at again after
    /// [`UNSCHEDULABLE_RESYNC`] (or on any change), not at the steps' short requeues.
    pub async fn conclude_pass<K, S>(
        &self,
        obj: &K,
        stored: Option<&S>,
        status: &S,
        core: &mut PassCore,
        report: &PassReport,
        resync: Duration,
    ) -> Result<Action>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + DeserializeOwned,
        S: Serialize + PartialEq + ClusterStatus,
    {
        tracing::info!(
            controller = core.controller, namespace = %core.namespace, name = %core.name,
            result = report.result.label(), "reconcile pass finished"
        );
        let effects = std::mem::take(&mut core.effects);
        let action = self
            .finish_pass(obj, stored, status, effects, report, resync)
            .await?;
        // The conditions of the status just written: the engines move the pass's common
        // status into it, so `core.status` is empty by now.
        Ok(backed_off(status.common(), action, resync))
    }

    /// Writes the status (when it changed) with server-side apply, then executes the pass's
    /// effects: Events, webhooks (spawned, never retried) and operation metrics. Effects run
    /// after the write so that nothing is announced that status does not record.
    pub async fn finish_pass<K, S>(
        &self,
        obj: &K,
        stored: Option<&S>,
        status: &S,
        effects: Vec<Effect>,
        report: &PassReport,
        resync: Duration,
    ) -> Result<Action>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + DeserializeOwned,
        S: Serialize + PartialEq,
    {
        let namespace = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        if stored != Some(status) {
            let body = serde_json::json!({
                "apiVersion": K::api_version(&()),
                "kind": K::kind(&()),
                "status": status,
            });
            let api: Api<K> = self.api(&namespace);
            match api
                .patch_status(
                    &name,
                    &PatchParams::apply(STATUS_MANAGER).force(),
                    &Patch::Apply(body),
                )
                .await
            {
                Ok(written) => self.remember_version(&written),
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    if let Some(uid) = obj.uid() {
                        self.forget_version(&uid);
                    }
                    return Ok(Action::await_change());
                }
                Err(source) => {
                    return Err(Error::kube(
                        "apply status",
                        format!("{namespace}/{name}"),
                        source,
                    ));
                }
            }
        }
        self.execute(obj, effects).await;
        Ok(match report.result.requeue_after() {
            Some(after) => Action::requeue(after),
            None => Action::requeue(resync),
        })
    }

    /// Publishes Events, sends webhooks and counts finished operations, for `obj`.
    pub async fn execute<K>(&self, obj: &K, effects: Vec<Effect>)
    where
        K: Resource<DynamicType = ()>,
    {
        let reference = obj.object_ref(&());
        for effect in effects {
            match effect {
                Effect::Event {
                    type_,
                    reason,
                    action,
                    note,
                } => {
                    let event = Event {
                        type_: match type_ {
                            EventType::Normal => KubeEventType::Normal,
                            EventType::Warning => KubeEventType::Warning,
                        },
                        reason,
                        note: Some(note),
                        action,
                        secondary: None,
                    };
                    if let Err(err) = self.recorder.publish(&event, &reference).await {
                        tracing::warn!(error = %err, "publishing an Event failed");
                    }
                }
                Effect::Webhook(payload) => {
                    let sender = self.webhooks.clone();
                    tokio::spawn(async move { sender.deliver(&payload).await });
                }
                Effect::OperationFinished(op) => {
                    let result = match op.phase {
                        steward_api::common::OperationPhase::Succeeded => "success",
                        _ => "failure",
                    };
                    self.metrics.operation_finished(op.kind.as_str(), result);
                }
            }
        }
    }
}

/// The error policy shared by every controller: log, count and retry after the category's
/// delay.
pub fn error_policy<K>(_obj: Arc<K>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.error("runtime", err.category().as_str());
    tracing::warn!(category = err.category().as_str(), error = %err, "reconcile failed");
    Action::requeue(err.category().retry_after())
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_api::common::Condition;

    fn available(status: &str, reason: &str) -> CommonStatus {
        CommonStatus {
            conditions: vec![Condition {
                type_: condition_types::AVAILABLE.into(),
                status: status.into(),
                reason: reason.into(),
                ..Condition::default()
            }],
            ..CommonStatus::default()
        }
    }

    #[test]
    fn clusters_whose_pods_cannot_be_placed_back_off() {
        let soon = Action::requeue(Duration::from_secs(1));
        let resync = Duration::from_secs(15);
        assert_eq!(
            backed_off(&available("False", "Unschedulable"), soon.clone(), resync),
            Action::requeue(UNSCHEDULABLE_RESYNC)
        );
        assert_eq!(
            backed_off(&available("False", "PrimaryNotReady"), soon.clone(), resync),
            soon
        );
        assert_eq!(
            backed_off(&CommonStatus::default(), soon.clone(), resync),
            soon
        );
    }
}
