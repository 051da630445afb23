//! Step tests: `Failover` and `ReconcileUsers` driven against the in-memory PostgreSQL model,
//! pass after pass, the way the controller runs them. Every pass reads the cluster and its
//! stored status from the embedded API server, fills the Pod cache from it, runs
//! `ValidateSpec`, `EnsureSecrets`, `ObserveInstances`, `Failover` and `ReconcileUsers` between
//! the two `UpdateStatus` runs, and writes the status back as the controller does, so a pass after
//! an operator restart starts from exactly what was persisted. Nothing runs the Pods: the test
//! plays the kubelet (a Pod's IP is its model instance's name; Ready is set once) and `PgModel`
//! plays PostgreSQL. `ProvisionInstances` is left out, so the old primary's Pod is not recreated
//! after a fail-over.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use serde_json::json;
use steward_api::common::{OperationKind, OperationPhase};
use steward_api::postgres::{
    InstanceRole, InstanceStatus, PostgresCluster, PostgresClusterSpec, PostgresClusterStatus,
    PostgresUser, SecretKeyRef, UserOptions,
};

use crate::clock::ManualClock;
use crate::config::{TimeoutArgs, WebhookArgs};
use crate::embedded::Embedded;
use crate::metrics::Metrics;
use crate::pipeline::{Effect, PassResult, Pipeline};
use crate::postgres::admin::model::{Call, CallKind, Mode, PgModel};
use crate::postgres::admin::{Lsn, PostgresConnector, RoleOptions};
use crate::postgres::build::instance;
use crate::postgres::build::secrets::{self, Password};
use crate::postgres::controller::RESYNC;
use crate::postgres::names::{
    ClusterNames, REPLICATION_USER, ROLE_LABEL, SUPERUSER, USER_PASSWORD_LABEL,
};
use crate::postgres::repository::model::RepoModel;
use crate::postgres::steps::ensure_secrets::EnsureSecrets;
use crate::postgres::steps::failover::Failover;
use crate::postgres::steps::observe_instances::ObserveInstances;
use crate::postgres::steps::reconcile_users::ReconcileUsers;
use crate::postgres::steps::restore_cluster::RestoreCluster;
use crate::postgres::steps::run_backups::RunBackups;
use crate::postgres::steps::update_status::UpdateStatus;
use crate::postgres::steps::validate_spec::ValidateSpec;
use crate::postgres::{CONTROLLER, PostgresPass, PostgresStores, validate};
use crate::resources::{AppliedSet, Applier};
use crate::runtime::context::Context;
use crate::webhook::WebhookSender;

const NS: &str = "db";
const SUPERUSER_PW: &str = "su-pw-f00d";
const REPLICATION_PW: &str = "repl-pw-f00d";
/// WAL the primary writes after its standbys were cloned; the standbys replay none of it until a
/// test says so.
const TRAFFIC: u64 = 0x10_000;
const T: Duration = Duration::from_secs(1);

/// The steps under test with the ones they depend on, in pipeline order.
fn pipeline() -> Pipeline<PostgresPass> {
    Pipeline::new(
        CONTROLLER,
        Box::new(UpdateStatus),
        vec![
            Box::new(ValidateSpec),
            Box::new(EnsureSecrets),
            Box::new(ObserveInstances),
            Box::new(Failover),
            Box::new(RestoreCluster),
            Box::new(RunBackups),
            Box::new(ReconcileUsers),
            Box::new(crate::postgres::steps::apply_policies::ApplyPolicies),
        ],
    )
}

fn context(
    client: kube::Client,
    clock: &ManualClock,
    model: &PgModel,
    repo: &RepoModel,
) -> Arc<Context> {
    let metrics = Metrics::new();
    let webhooks = WebhookSender::new(&WebhookArgs::default(), metrics.clone()).unwrap();
    let mut ctx = Context::new(
        client,
        metrics,
        webhooks,
        Arc::new(clock.clone()),
        TimeoutArgs::default(),
        None,
        "test".into(),
    );
    ctx.seams
        .insert::<Arc<dyn crate::postgres::admin::PostgresConnector>>(Arc::new(model.connector()));
    ctx.seams
        .insert::<Arc<dyn crate::postgres::repository::Repository>>(Arc::new(repo.clone()));
    Arc::new(ctx)
}

/// Where an instance is: a primary's current LSN, a standby's replayed one.
fn lsn(model: &PgModel, name: &str) -> Lsn {
    match model.instance(name).unwrap().mode {
        Mode::Primary { current, .. } => current,
        Mode::Standby { replay, .. } => replay,
    }
}

/// Asserts that `wanted` occur in `seen` in this order (other reasons may come between).
fn assert_in_order(seen: &[String], wanted: &[&str]) {
    let mut rest = seen.iter();
    for w in wanted {
        assert!(rest.any(|s| s == w), "{wanted:?} in order in {seen:?}");
    }
}

/// One cluster `demo` in the embedded API server, its instances in the model, and the passes
/// run so far.
pub(super) struct Harness {
    pub(super) plane: Embedded,
    pub(super) model: PgModel,
    /// The pgBackRest repositories.
    pub(super) repo: RepoModel,
    pub(super) clock: ManualClock,
    ctx: Arc<Context>,
    /// The primary's LSN when the standbys were cloned.
    base: Lsn,
    /// Every Event the steps queued on a pass whose status was written, as reason and note
    /// (the driver's own `Reconcile` Events, such as `RolloutComplete`, are left out).
    pub(super) events: Vec<(String, String)>,
    /// Reasons of the Events the pipeline driver queued (`Reconcile` action), kept apart.
    driver_events: Vec<String>,
    /// Every pass's report, as text.
    reports: Vec<String>,
    /// Model calls made by the setup.
    setup_calls: usize,
}

impl Harness {
    /// A healthy cluster as Steward leaves it: `demo-0` the primary (with the `replicator`
    /// role), the other instances its standbys, `TRAFFIC` bytes behind; a Ready Pod per
    /// instance, labelled with its role; status naming the primary and the members.
    pub(super) async fn start(spec: PostgresClusterSpec) -> Self {
        let plane = Embedded::start(&[NS]).await.unwrap();
        let client = plane.client.clone();
        let clusters: Api<PostgresCluster> = Api::namespaced(client.clone(), NS);
        let cluster = clusters
            .create(&PostParams::default(), &PostgresCluster::new("demo", spec))
            .await
            .unwrap();
        let valid = validate::validate(&cluster).unwrap();
        let secrets_api: Api<Secret> = Api::namespaced(client.clone(), NS);
        for secret in [
            secrets::superuser_secret(&cluster, &valid, &Password::new(SUPERUSER_PW)),
            secrets::replication_secret(&cluster, &valid, &Password::new(REPLICATION_PW)),
        ] {
            let secret = secret.unwrap().into_secret();
            secrets_api
                .create(&PostParams::default(), &secret)
                .await
                .unwrap();
        }
        let model = PgModel::new();
        model
            .add_primary("demo-0", SUPERUSER, SUPERUSER_PW)
            .unwrap();
        let replication = RoleOptions {
            replication: true,
            ..RoleOptions::default()
        };
        model
            .connector()
            .connect(&PgModel::target("demo-0", SUPERUSER, SUPERUSER_PW), T)
            .await
            .unwrap()
            .create_role(REPLICATION_USER, REPLICATION_PW, &replication)
            .await
            .unwrap();
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let mut members = Vec::new();
        for ordinal in 0..valid.instances {
            let name = valid.names().instance(ordinal);
            let role = if ordinal == 0 {
                InstanceRole::Primary
            } else {
                model.add_standby(&name, "demo-0").unwrap();
                InstanceRole::Replica
            };
            let mut pod = instance::pod(&cluster, &valid, ordinal, role, "").unwrap();
            // Bound, as the scheduler would have left it, one Node per instance. There is no
            // Node object unless a test makes one (`node`): a Pod whose Node does not exist is
            // deleted at once, as the real PodGC does.
            pod.spec.as_mut().unwrap().node_name = Some(format!("node-{ordinal}"));
            pods.create(&PostParams::default(), &pod).await.unwrap();
            let ready = json!({"status": {"podIP": name, "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}]}});
            pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(ready))
                .await
                .unwrap();
            members.push(InstanceStatus {
                name,
                role,
                ready: true,
                timeline: Some(1),
                lsn: None,
                lag_bytes: None,
                streaming: role == InstanceRole::Replica,
            });
        }
        let base = lsn(&model, "demo-0");
        model.advance("demo-0", Lsn(base.0 + TRAFFIC)).unwrap();
        let system_identifier = model.instance("demo-0").unwrap().system_identifier;
        let status = PostgresClusterStatus {
            current_primary: Some("demo-0".into()),
            system_identifier: Some(system_identifier.to_string()),
            instances: members,
            ..PostgresClusterStatus::default()
        };
        clusters
            .patch_status(
                "demo",
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .unwrap();
        let clock = ManualClock::new("2026-03-01T12:00:00Z".parse().unwrap());
        let repo = RepoModel::new();
        let ctx = context(client, &clock, &model, &repo);
        Self {
            setup_calls: model.calls().len(),
            plane,
            model,
            repo,
            clock,
            ctx,
            base,
            events: Vec::new(),
            driver_events: Vec::new(),
            reports: Vec::new(),
        }
    }

    pub(super) fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    {
        Api::namespaced(self.plane.client.clone(), NS)
    }

    /// A new operator process: a fresh context; everything else comes from the API server.
    pub(super) fn restart(&mut self) {
        self.ctx = context(
            self.plane.client.clone(),
            &self.clock,
            &self.model,
            &self.repo,
        );
    }

    /// The Nodes stored in the API server, as the operator's slimmed cache would hold them.
    async fn node_cache(&self) -> Store<Node> {
        let (store, mut writer) = reflector::store();
        let nodes: Api<Node> = Api::all(self.plane.client.clone());
        for mut node in nodes.list(&ListParams::default()).await.unwrap().items {
            crate::resources::nodes::slim(&mut node);
            writer.apply_watcher_event(&watcher::Event::Apply(node));
        }
        store
    }

    /// Creates or updates Node `name`: cordoned or not, its `Ready` condition `ready`.
    async fn node(&self, name: &str, cordoned: bool, ready: &str) {
        let nodes: Api<Node> = Api::all(self.plane.client.clone());
        if nodes.get_opt(name).await.unwrap().is_none() {
            // Registered with its status in one request, as a kubelet registers: a Node with no
            // `Ready` condition, even between two requests, is tainted by the node lifecycle
            // controller and its Pods are marked not ready (and nothing marks them ready again
            // here). Under load that window made a handover test see no ready replica.
            let node: Node = serde_json::from_value(json!({"metadata": {"name": name},
                "spec": {"unschedulable": cordoned},
                "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "Test"}]}}))
            .unwrap();
            nodes.create(&PostParams::default(), &node).await.unwrap();
            return;
        }
        let body = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {"unschedulable": cordoned}});
        nodes
            .patch(
                name,
                &PatchParams::apply("test").force(),
                &Patch::Apply(body),
            )
            .await
            .unwrap();
        let status = json!({"status": {"conditions": [
            {"type": "Ready", "status": ready, "reason": "Test"}]}});
        nodes
            .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
            .await
            .unwrap();
    }

    /// Deletes a Pod with grace 0, as a person who confirmed its node is gone does (or as the
    /// kubelet's confirmation ends a graceful delete).
    async fn force_delete(&self, pod: &str) {
        let now = kube::api::DeleteParams {
            grace_period_seconds: Some(0),
            ..kube::api::DeleteParams::default()
        };
        self.api::<Pod>().delete(pod, &now).await.unwrap();
    }

    /// The claims stored in the API server, as the cache would hold them.
    /// The objects of kind `K` stored in the API server, as the cache would hold them.
    async fn cache<K>(&self) -> Store<K>
    where
        K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
    {
        let (store, mut writer) = reflector::store();
        let api: Api<K> = Api::namespaced(self.plane.client.clone(), NS);
        for o in api.list(&ListParams::default()).await.unwrap().items {
            writer.apply_watcher_event(&watcher::Event::Apply(o));
        }
        store
    }

    /// The Pods stored in the API server, as the cache would hold them.
    async fn pod_cache(&self) -> Store<crate::resources::pods::CachedPod> {
        let (store, mut writer) = reflector::store();
        for pod in self
            .api::<Pod>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
        {
            writer.apply_watcher_event(&watcher::Event::Apply(pod.into()));
        }
        store
    }

    /// One pass, as the controller runs it; its status and Events are written.
    pub(super) async fn pass(&mut self) {
        self.run(true).await;
    }

    /// One pass whose operator dies before writing status: its changes to Pods and to the
    /// database stay, its status and Events are lost.
    async fn pass_lost(&mut self) {
        self.run(false).await;
    }

    async fn run(&mut self, save: bool) {
        let cluster = self.api::<PostgresCluster>().get("demo").await.unwrap();
        let stored = cluster.status.clone();
        let stored_status = stored.clone().unwrap_or_default();
        let core = self.ctx.pass_core(
            CONTROLLER,
            &cluster,
            stored_status.common.clone(),
            cluster.spec.timeouts.clone(),
        );
        let mut pass = PostgresPass {
            core,
            cluster: Arc::new(cluster.clone()),
            validated: None,
            status: stored_status,
            stores: PostgresStores {
                services: reflector::store().0.into(),
                pods: self.pod_cache().await.into(),
                claims: self
                    .cache::<crate::resources::packed::CachedMeta<
                        k8s_openapi::api::core::v1::PersistentVolumeClaim,
                    >>()
                    .await
                    .into(),
                nodes: self.node_cache().await,
                backups: self.cache().await,
                restores: self.cache().await,
                upgrades: self.cache().await,
                policies: self.cache().await,
                budgets: reflector::store().0,
                config_maps: reflector::store().0,
                // Empty: every Secret is read from the API server, as on a cache miss.
                secrets: reflector::store().0.into(),
                user_secrets: reflector::store().0,
            },
            names: ClusterNames::new("demo", NS)
                .with_epoch(stored.as_ref().and_then(|s| s.data_epoch).unwrap_or(0)),
            credentials: None,
            config_hash: None,
            instances: Vec::new(),
            observed: false,
            applier: Applier::new(self.plane.client.clone(), CONTROLLER),
            applied: AppliedSet::default(),
            ctx: self.ctx.clone(),
        };
        let report = pipeline().run(&mut pass, &self.ctx.metrics).await;
        assert!(
            !matches!(report.result, PassResult::Failed { .. }),
            "{report:?}"
        );
        self.reports.push(format!("{report:?}"));
        if save {
            let mut status = pass.status.clone();
            status.common = pass.core.status.clone();
            self.ctx
                .finish_pass(
                    &cluster,
                    stored.as_ref(),
                    &status,
                    Vec::new(),
                    &report,
                    RESYNC,
                )
                .await
                .unwrap();
            for effect in &pass.core.effects {
                match effect {
                    Effect::Event { action, reason, .. } if action == "Reconcile" => {
                        self.driver_events.push(reason.clone());
                    }
                    Effect::Event { reason, note, .. } => {
                        self.events.push((reason.clone(), note.clone()));
                    }
                    _ => {}
                }
            }
        }
    }

    /// Passes every 2 s through the detection delay (10 s), the last one exactly 10 whole
    /// seconds after the primary was seen down (not yet due: the recorded time is truncated to
    /// the second): the primary is not replaced and nothing changes. Leaves the clock past the
    /// delay.
    async fn sit_out_the_delay(&mut self) {
        for _ in 0..6 {
            self.pass().await;
            assert!(self.pod("demo-0").await.is_some(), "fenced too early");
            assert!(self.changes().is_empty(), "{:?}", self.changes());
            assert!(self.status().await.pending_failover.is_none());
            self.clock.advance(Duration::from_secs(2));
        }
    }

    /// One more pass changes nothing: no database change, no Event, no Pod deleted.
    async fn assert_settled(&mut self) {
        let changes = self.changes().len();
        let events = self.events.len();
        let pods = self.pod_names().await;
        self.clock.advance(Duration::from_secs(15));
        self.pass().await;
        let changed = &self.changes()[changes..];
        assert!(changed.is_empty(), "{changed:?}");
        let new = &self.events[events..];
        assert!(new.is_empty(), "{new:?}");
        assert_eq!(self.pod_names().await, pods);
    }

    /// The calls since the setup that changed an instance.
    fn changes(&self) -> Vec<Call> {
        self.model.calls()[self.setup_calls..]
            .iter()
            .filter(|c| c.wrote)
            .cloned()
            .collect()
    }

    pub(super) async fn status(&self) -> PostgresClusterStatus {
        let cluster = self.api::<PostgresCluster>().get("demo").await.unwrap();
        cluster.status.unwrap_or_default()
    }

    async fn pod(&self, name: &str) -> Option<Pod> {
        self.api::<Pod>().get_opt(name).await.unwrap()
    }

    async fn pod_names(&self) -> Vec<String> {
        let pods = self
            .api::<Pod>()
            .list(&ListParams::default())
            .await
            .unwrap();
        pods.items.iter().map(ResourceExt::name_any).collect()
    }

    /// The role label of an instance's Pod.
    async fn role(&self, name: &str) -> String {
        self.pod(name).await.unwrap().labels()[ROLE_LABEL].clone()
    }

    /// Puts a finalizer on a Pod: its deletion leaves it `Terminating`, as when its node does
    /// not confirm that the containers stopped.
    async fn hold(&self, pod: &str) {
        let body = json!({"metadata": {"finalizers": ["test.steward.dev/node-unreachable"]}});
        self.patch_pod(pod, body).await;
    }

    /// Removes the finalizer: a Pod being deleted goes.
    async fn release(&self, pod: &str) {
        self.patch_pod(pod, json!({"metadata": {"finalizers": null}}))
            .await;
    }

    async fn patch_pod(&self, pod: &str, body: serde_json::Value) {
        self.api::<Pod>()
            .patch(pod, &PatchParams::default(), &Patch::Merge(body))
            .await
            .unwrap();
    }

    /// Asks for a switchover (or a fail-over, if the primary is down).
    async fn request(&self, id: &str, target: &str) {
        let body = json!({"spec": {"switchover": {"id": id, "target": target}}});
        self.api::<PostgresCluster>()
            .patch("demo", &PatchParams::default(), &Patch::Merge(body))
            .await
            .unwrap();
    }

    /// A standby receives and replays the primary's WAL up to `offset` past `base`.
    fn replay(&self, standby: &str, offset: u64) {
        self.model
            .advance(standby, Lsn(self.base.0 + offset))
            .unwrap();
    }

    /// The instances promoted so far, in order.
    fn promotions(&self) -> Vec<String> {
        self.changes()
            .into_iter()
            .filter(|c| c.kind == CallKind::Promote)
            .map(|c| c.instance)
            .collect()
    }

    /// The model instance left recovery on the next timeline.
    fn assert_promoted(&self, name: &str) {
        let inst = self.model.instance(name).unwrap();
        assert!(!inst.is_standby(), "{name} still in recovery");
        assert_eq!(inst.timeline, 2);
    }

    fn reasons(&self) -> Vec<String> {
        self.events.iter().map(|(r, _)| r.clone()).collect()
    }

    /// Status after a finished fail-over to `target`.
    async fn assert_primary_replaced(&self, target: &str) {
        let status = self.status().await;
        assert_eq!(status.current_primary.as_deref(), Some(target));
        assert_eq!(status.pending_failover, None);
        assert_eq!(status.primary_unready_since, None);
        assert_eq!(status.common.operation, None);
        let op = status.common.last_operation.unwrap();
        assert_eq!(
            (op.kind, op.phase),
            (OperationKind::Failover, OperationPhase::Succeeded)
        );
        assert_eq!(self.role(target).await, "primary");
        self.assert_promoted(target);
    }

    /// Creates or rewrites a user's Secret.
    async fn put_secret(&self, name: &str, password: &str) {
        let api = self.api::<Secret>();
        let data = json!({"password": ByteString(password.as_bytes().to_vec())});
        if api.get_opt(name).await.unwrap().is_some() {
            let body = json!({ "data": data });
            api.patch(name, &PatchParams::default(), &Patch::Merge(body))
                .await
                .unwrap();
        } else {
            let secret: Secret = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": NS}, "data": data
            }))
            .unwrap();
            api.create(&PostParams::default(), &secret).await.unwrap();
        }
    }

    /// Whether `user` logs in to `database` on the primary `demo-0` with `password`.
    async fn logs_in(&self, user: &str, password: &str, database: &str) -> bool {
        let target = PgModel::target("demo-0", user, password).on_database(database);
        self.model
            .connector()
            .check_login(&target, T)
            .await
            .unwrap()
    }

    /// The applied-passwords Secret's entry for `user`.
    async fn applied_password(&self, user: &str) -> String {
        let secret = self.api::<Secret>().get("demo-applied-passwords").await;
        secrets::key_of(&secret.unwrap(), user)
            .unwrap()
            .expose()
            .to_owned()
    }

    /// None of `secrets` is in an Event, the stored status, or a pass's result.
    async fn assert_no_leak(&self, secrets: &[&str]) {
        let status = serde_json::to_string(&self.status().await).unwrap();
        let events = format!("{:?}", self.events);
        for text in [&status, &events].into_iter().chain(&self.reports) {
            for secret in secrets {
                assert!(!text.contains(secret), "{secret:?} leaked into {text}");
            }
        }
    }
}

fn spec(instances: i32) -> PostgresClusterSpec {
    PostgresClusterSpec::new(instances, "15")
}

#[tokio::test]
async fn automatic_failover_waits_out_the_delay_then_promotes_the_replica_with_most_wal() {
    let mut h = Harness::start(spec(3)).await;
    h.replay("demo-1", 0x4000);
    h.replay("demo-2", 0x8000);
    h.model.kill("demo-0").unwrap();
    h.sit_out_the_delay().await;
    assert_eq!(h.reasons(), ["PrimaryNotReady"]);

    // Due: the old primary's Pod is deleted first; nothing is promoted on this pass.
    h.pass().await;
    assert!(h.pod("demo-0").await.is_none());
    let status = h.status().await;
    let pending = status.pending_failover.unwrap();
    assert_eq!(
        (pending.from.as_str(), pending.target.as_str()),
        ("demo-0", "demo-2")
    );
    assert!(!pending.switchover && pending.demoted_at_lsn.is_none());
    assert_eq!(status.current_primary.as_deref(), Some("demo-0"));
    assert_eq!(
        status.common.operation.map(|op| op.kind),
        Some(OperationKind::Failover)
    );
    assert!(h.promotions().is_empty());
    assert_eq!(h.role("demo-2").await, "replica");

    // The Pod is gone: relabel, promote, record.
    h.pass().await;
    assert_eq!(h.promotions(), ["demo-2"]);
    h.assert_primary_replaced("demo-2").await;
    assert_eq!(h.role("demo-1").await, "replica");
    assert!(h.model.instance("demo-1").unwrap().is_standby());
    assert_in_order(
        &h.reasons(),
        &[
            "PrimaryNotReady",
            "FailoverStarted",
            "PrimaryFenced",
            "PrimaryChanged",
            "Promoted",
            "OperationSucceeded",
        ],
    );
    h.assert_settled().await;
}

#[tokio::test]
async fn a_tie_in_wal_goes_to_the_lower_ordinal() {
    let mut h = Harness::start(spec(3)).await;
    h.replay("demo-1", 0x8000);
    h.replay("demo-2", 0x8000);
    h.model.kill("demo-0").unwrap();
    h.sit_out_the_delay().await;
    h.pass().await;
    h.pass().await;
    assert_eq!(h.promotions(), ["demo-1"]);
    h.assert_primary_replaced("demo-1").await;
}

#[tokio::test]
async fn nothing_is_promoted_while_the_old_primary_pod_still_exists() {
    let mut h = Harness::start(spec(3)).await;
    h.replay("demo-2", 0x8000);
    h.hold("demo-0").await;
    h.model.kill("demo-0").unwrap();
    h.sit_out_the_delay().await;
    h.pass().await;
    for _ in 0..8 {
        h.clock.advance(Duration::from_secs(30));
        h.pass().await;
        let pod = h.pod("demo-0").await.unwrap();
        assert!(pod.metadata.deletion_timestamp.is_some());
        assert!(h.promotions().is_empty());
        assert!(h.model.instance("demo-2").unwrap().is_standby());
        assert_eq!(h.role("demo-2").await, "replica");
        let status = h.status().await;
        assert_eq!(status.current_primary.as_deref(), Some("demo-0"));
        let op = status.common.operation.unwrap();
        assert_eq!(
            (op.kind, op.step.as_str()),
            (OperationKind::Failover, "FencePrimary")
        );
    }
    let fenced = h.reasons().iter().filter(|r| *r == "PrimaryFenced").count();
    assert_eq!(fenced, 1, "the Pod is deleted once");

    // The node confirms: the Pod goes, and the next pass promotes.
    h.release("demo-0").await;
    assert!(h.pod("demo-0").await.is_none());
    h.pass().await;
    assert_eq!(h.promotions(), ["demo-2"]);
    h.assert_primary_replaced("demo-2").await;
}

#[tokio::test]
async fn a_restarted_operator_resumes_a_pending_failover_and_promotes_once() {
    let mut h = Harness::start(spec(3)).await;
    h.replay("demo-2", 0x8000);
    h.model.kill("demo-0").unwrap();
    h.sit_out_the_delay().await;
    h.pass().await;
    let pending = h.status().await.pending_failover.unwrap();
    assert_eq!(pending.target, "demo-2");

    // A new operator relabels and promotes, and dies before its status write.
    h.restart();
    h.pass_lost().await;
    assert_eq!(h.promotions(), ["demo-2"]);
    assert_eq!(h.status().await.pending_failover, Some(pending));

    // The next one continues from the stored progress: done, without promoting twice.
    h.restart();
    h.pass().await;
    assert_eq!(h.promotions(), ["demo-2"]);
    h.assert_primary_replaced("demo-2").await;
    assert_in_order(
        &h.reasons(),
        &["FailoverStarted", "Promoted", "OperationSucceeded"],
    );
    h.assert_settled().await;
}

#[tokio::test]
async fn a_switchover_waits_until_the_target_replayed_what_the_old_primary_wrote() {
    let mut h = Harness::start(spec(3)).await;
    // demo-1 received all of the primary's WAL but replayed little of it.
    h.model.receive("demo-1", Lsn(u64::MAX)).unwrap();
    h.replay("demo-1", 0x1000);
    let primary_lsn = lsn(&h.model, "demo-0");
    h.request("s1", "demo-1").await;
    h.pass().await;
    assert!(h.pod("demo-0").await.is_none());
    let pending = h.status().await.pending_failover.unwrap();
    assert!(pending.switchover);
    assert_eq!(pending.demoted_at_lsn, Some(primary_lsn.to_string()));
    h.model.kill("demo-0").unwrap(); // The kubelet stops PostgreSQL.

    for offset in [0x1000, TRAFFIC / 2] {
        h.replay("demo-1", offset);
        h.pass().await;
        assert!(h.promotions().is_empty(), "promoted at {offset:#x}");
        assert!(h.model.instance("demo-1").unwrap().is_standby());
        let op = h.status().await.common.operation.unwrap();
        assert_eq!(op.step, "CatchUp");
    }
    h.model.catch_up("demo-1").unwrap();
    h.pass().await;
    assert_eq!(h.promotions(), ["demo-1"]);
    assert!(
        lsn(&h.model, "demo-1") > primary_lsn,
        "promoted before replaying everything"
    );
    h.assert_primary_replaced("demo-1").await;
    assert_eq!(h.status().await.last_switchover.as_deref(), Some("s1"));
    let reasons = h.reasons();
    assert_in_order(
        &reasons,
        &[
            "SwitchoverStarted",
            "PrimaryDemoted",
            "PrimaryChanged",
            "Promoted",
        ],
    );
    assert!(
        !reasons
            .iter()
            .any(|r| r == "FailoverStarted" || r == "PrimaryFenced")
    );
    // The same request again does nothing.
    h.assert_settled().await;
}

#[tokio::test]
async fn a_switchover_to_an_unknown_instance_or_the_primary_is_refused_once() {
    let mut h = Harness::start(spec(3)).await;
    let pods = h.pod_names().await;
    for (id, target, why) in [
        ("a", "demo-7", "not an instance of this cluster"),
        ("b", "demo-0", "already the primary"),
    ] {
        h.request(id, target).await;
        let seen = h.events.len();
        h.pass().await;
        let events = &h.events[seen..];
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].0, "SwitchoverRefused");
        assert!(events[0].1.contains(why), "{events:?}");
        let status = h.status().await;
        assert_eq!(status.last_switchover.as_deref(), Some(id));
        assert_eq!(status.current_primary.as_deref(), Some("demo-0"));
        assert_eq!(status.pending_failover, None);
    }
    assert_eq!(h.pod_names().await, pods);
    assert!(h.changes().is_empty());
    h.assert_settled().await;
}

#[tokio::test]
async fn with_automatic_failover_off_only_a_request_replaces_a_down_primary() {
    let mut s = spec(3);
    s.failover.automatic = false;
    let mut h = Harness::start(s).await;
    h.replay("demo-2", 0x8000);
    // demo-1 is behind demo-2, and has WAL it received but did not replay.
    h.model.receive("demo-1", Lsn(u64::MAX)).unwrap();
    h.replay("demo-1", 0x1000);
    h.model.kill("demo-0").unwrap();
    for _ in 0..6 {
        h.pass().await;
        h.clock.advance(Duration::from_secs(10));
    }
    let status = h.status().await;
    let degraded = status
        .common
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap();
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "PrimaryNotReady")
    );
    assert_eq!(status.pending_failover, None);
    assert!(h.changes().is_empty());
    assert!(h.pod("demo-0").await.is_some());

    // A request while the primary is down is a fail-over to the named replica, without waiting
    // for it to replay.
    h.request("m1", "demo-1").await;
    h.pass().await;
    let pending = h.status().await.pending_failover.unwrap();
    assert!(!pending.switchover && pending.demoted_at_lsn.is_none());
    assert!(h.pod("demo-0").await.is_none());
    h.pass().await;
    assert_eq!(h.promotions(), ["demo-1"]);
    h.assert_primary_replaced("demo-1").await;
    assert_eq!(h.status().await.last_switchover.as_deref(), Some("m1"));
    let reasons = h.reasons();
    assert_in_order(&reasons, &["FailoverStarted", "PrimaryFenced", "Promoted"]);
    assert!(!reasons.iter().any(|r| r == "SwitchoverStarted"));
}

/// Pods the scheduler cannot place, for a cluster whose primary never ran: the status names the
/// scheduler's reason, and nothing is failed over or announced as a down primary.
#[tokio::test]
async fn pods_that_cannot_be_scheduled_are_reported_and_nothing_fails_over() {
    let mut h = Harness::start(spec(3)).await;
    // New, unbound Pods: the API server's scheduler finds no node for them.
    let cluster = h.api::<PostgresCluster>().get("demo").await.unwrap();
    let valid = validate::validate(&cluster).unwrap();
    for ordinal in 0..3 {
        let name = valid.names().instance(ordinal);
        h.api::<Pod>()
            .delete(&name, &kube::api::DeleteParams::default())
            .await
            .unwrap();
        let role = if ordinal == 0 {
            InstanceRole::Primary
        } else {
            InstanceRole::Replica
        };
        let pod = instance::pod(&cluster, &valid, ordinal, role, "").unwrap();
        h.api::<Pod>()
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
    }
    let message = loop {
        let pod = h.pod("demo-2").await.unwrap();
        if let Some(m) = crate::resources::pods::unschedulable(&pod) {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // As on a new cluster: no instance has ever answered.
    h.api::<PostgresCluster>()
        .patch_status(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"systemIdentifier": null}})),
        )
        .await
        .unwrap();
    h.model.kill("demo-0").unwrap();
    for _ in 0..4 {
        h.pass().await;
        h.clock.advance(Duration::from_secs(10));
    }
    let status = h.status().await;
    let condition = |t: &str| {
        let c = status
            .common
            .conditions
            .iter()
            .find(|c| c.type_ == t)
            .unwrap();
        (c.status.clone(), c.reason.clone(), c.message.clone())
    };
    let (available, reason, text) = condition("Available");
    assert_eq!(
        (available.as_str(), reason.as_str()),
        ("False", "Unschedulable")
    );
    assert!(text.contains("demo-0") && text.contains(&message), "{text}");
    let (degraded, reason, text) = condition("Degraded");
    assert_eq!(
        (degraded.as_str(), reason.as_str()),
        ("True", "Unschedulable")
    );
    assert!(text.contains("demo-2") && text.contains(&message), "{text}");
    assert_eq!(status.pending_failover, None);
    assert_eq!(status.common.operation, None);
    assert!(h.changes().is_empty(), "{:?}", h.changes());
    let reasons = h.reasons();
    assert!(
        !reasons
            .iter()
            .any(|r| r == "PrimaryNotReady" || r == "FailoverStarted"),
        "{reasons:?}"
    );
    assert!(
        h.driver_events.iter().any(|r| r == "Unschedulable"),
        "{:?}",
        h.driver_events
    );
}

/// Two instances and the user `app` (database `appdb`, password in Secret `app-password`).
fn app_spec(options: UserOptions) -> PostgresClusterSpec {
    let user = PostgresUser {
        name: "app".into(),
        databases: vec!["appdb".into()],
        password_secret: SecretKeyRef {
            name: "app-password".into(),
            key: "password".into(),
        },
        options,
    };
    let mut s = spec(2);
    s.users = vec![user];
    s
}

/// A cluster with the user `app` (database `appdb`) created from its Secret (password `pw-one`)
/// on the first pass.
async fn with_app_user(options: UserOptions) -> Harness {
    let mut h = Harness::start(app_spec(options)).await;
    h.put_secret("app-password", "pw-one").await;
    h.pass().await;
    h
}

/// The logins as `app` and the changes of its password since call `mark`, as `(kind, ok)`.
fn app_calls(h: &Harness, mark: usize) -> Vec<(CallKind, bool)> {
    h.model.calls()[mark..]
        .iter()
        .filter(|c| c.object == "app")
        .filter(|c| matches!(c.kind, CallKind::Connect | CallKind::AlterPassword))
        .map(|c| (c.kind, c.ok))
        .collect()
}

#[tokio::test]
async fn a_user_is_created_from_its_secret_and_rotated_with_the_old_password() {
    // An ordinary role: it changes its own password when Steward logs in as it.
    let mut h = with_app_user(UserOptions::default()).await;
    assert!(h.logs_in("app", "pw-one", "appdb").await);
    let secret = h.api::<Secret>().get("app-password").await.unwrap();
    assert_eq!(secret.labels()[USER_PASSWORD_LABEL], "true");
    let user = h.status().await.users[0].clone();
    assert!(user.ready && user.message.is_empty(), "{user:?}");
    assert!(user.applied_version.is_some());
    assert_eq!(h.applied_password("app").await, "pw-one");
    assert_eq!(h.reasons(), ["UserCreated", "DatabaseCreated"]);
    // The owner of its database holds every privilege: nothing to grant.
    let kinds: Vec<CallKind> = h.changes().iter().map(|c| c.kind).collect();
    assert_eq!(kinds, [CallKind::CreateRole, CallKind::CreateDatabase]);

    // Converged: later passes neither log in as the user (labelling the Secret is not a new
    // version of it) nor write anything to the database (no GRANT again).
    let (mark, before) = (h.model.calls().len(), h.changes().len());
    for _ in 0..3 {
        h.clock.advance(Duration::from_secs(15));
        h.pass().await;
    }
    assert_eq!(app_calls(&h, mark), []);
    let again = &h.changes()[before..];
    assert!(again.is_empty(), "{again:?}");
    h.assert_settled().await;

    // The Secret changes: Steward logs in as the user with the old password and alters it.
    h.put_secret("app-password", "pw-two").await;
    let mark = h.model.calls().len();
    h.pass().await;
    assert_eq!(
        app_calls(&h, mark),
        [
            (CallKind::Connect, false), // the new password does not log in yet
            (CallKind::Connect, true),  // the old one does
            (CallKind::AlterPassword, true),
        ]
    );
    assert!(h.logs_in("app", "pw-two", "appdb").await);
    assert!(!h.logs_in("app", "pw-one", "appdb").await);
    assert_eq!(h.applied_password("app").await, "pw-two");
    assert!(h.status().await.users[0].ready);
    assert_eq!(
        h.reasons().last().map(String::as_str),
        Some("PasswordRotated")
    );
    h.assert_no_leak(&["pw-one", "pw-two", SUPERUSER_PW, REPLICATION_PW])
        .await;
}

#[tokio::test]
async fn a_password_changed_inside_the_database_is_reported_and_not_retried() {
    let mut h = with_app_user(UserOptions::default()).await;
    let superuser = PgModel::target("demo-0", SUPERUSER, SUPERUSER_PW);
    let admin = h.model.connector().connect(&superuser, T).await.unwrap();
    admin.alter_password("app", "pw-by-hand").await.unwrap();
    h.put_secret("app-password", "pw-three").await;
    h.pass().await;
    let user = h.status().await.users[0].clone();
    assert!(!user.ready);
    assert!(user.message.contains("no longer logs in"), "{user:?}");
    assert_eq!(
        h.reasons().last().map(String::as_str),
        Some("PasswordRotationFailed")
    );
    assert_eq!(h.applied_password("app").await, "pw-one");
    assert!(h.logs_in("app", "pw-by-hand", "appdb").await);

    // Later passes neither log in as the user nor alter anything until the Secret changes.
    let (mark, events) = (h.model.calls().len(), h.events.len());
    for _ in 0..4 {
        h.clock.advance(Duration::from_secs(15));
        h.pass().await;
    }
    assert_eq!(app_calls(&h, mark), []);
    assert!(h.events[events..].is_empty(), "{:?}", &h.events[events..]);
    assert_eq!(h.status().await.users[0], user);

    // The Secret set to what the database holds: in step again, without an ALTER, and the
    // Event says nothing was changed.
    h.put_secret("app-password", "pw-by-hand").await;
    let (mark, events) = (h.model.calls().len(), h.events.len());
    h.pass().await;
    let user = h.status().await.users[0].clone();
    assert!(user.ready && user.message.is_empty(), "{user:?}");
    assert_eq!(app_calls(&h, mark), [(CallKind::Connect, true)]);
    assert_eq!(h.applied_password("app").await, "pw-by-hand");
    let new = &h.events[events..];
    assert_eq!(new.len(), 1, "{new:?}");
    assert_eq!(new[0].0, "PasswordAlreadySet");
    assert!(
        new[0].1.contains("already logs in") && !new[0].1.contains("changed the password"),
        "{new:?}"
    );
    h.assert_settled().await;
    h.assert_no_leak(&[
        "pw-one",
        "pw-three",
        "pw-by-hand",
        SUPERUSER_PW,
        REPLICATION_PW,
    ])
    .await;
}

#[tokio::test]
async fn a_database_that_exists_with_another_owner_is_granted_once() {
    let mut h = Harness::start(app_spec(UserOptions::default())).await;
    let superuser = PgModel::target("demo-0", SUPERUSER, SUPERUSER_PW);
    let admin = h.model.connector().connect(&superuser, T).await.unwrap();
    assert!(admin.create_database("appdb", SUPERUSER).await.unwrap());
    h.put_secret("app-password", "pw-one").await;
    let before = h.changes().len();
    h.pass().await;
    let kinds: Vec<(CallKind, String)> = h.changes()[before..]
        .iter()
        .map(|c| (c.kind, c.object.clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            (CallKind::CreateRole, "app".to_owned()),
            (CallKind::GrantDatabase, "app".to_owned()),
        ]
    );
    assert_eq!(h.reasons(), ["UserCreated", "DatabaseGranted"]);
    assert!(h.logs_in("app", "pw-one", "appdb").await);
    let catalog = h.model.instance("demo-0").unwrap().catalog;
    assert_eq!(
        catalog.databases["appdb"], SUPERUSER,
        "the owner is left alone"
    );
    // Granted now: later passes only read.
    h.assert_settled().await;
    h.assert_no_leak(&["pw-one", SUPERUSER_PW, REPLICATION_PW])
        .await;
}

#[tokio::test]
async fn a_missing_user_secret_is_reported_and_the_user_follows_once_it_exists() {
    let mut h = Harness::start(app_spec(UserOptions::default())).await;
    h.pass().await;
    let status = h.status().await;
    let user = &status.users[0];
    assert!(!user.ready);
    assert_eq!(user.message, "Secret app-password not found");
    let degraded = status
        .common
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap();
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "UserSecretMissing")
    );
    assert!(!h.model.calls().iter().any(|c| c.object == "app"));
    // The driver turns the new Degraded reason into a Warning Event, once.
    assert_eq!(h.driver_events, ["UserSecretMissing"]);
    h.pass().await;
    assert_eq!(h.driver_events, ["UserSecretMissing"]);
    h.put_secret("app-password", "pw-late").await;
    h.pass().await;
    let status = h.status().await;
    assert!(status.users[0].ready, "{:?}", status.users[0]);
    assert!(
        !status
            .common
            .conditions
            .iter()
            .any(|c| c.type_ == "Degraded" && c.status == "True"),
        "{:?}",
        status.common.conditions
    );
    assert!(h.logs_in("app", "pw-late", "appdb").await);
    h.assert_no_leak(&["pw-late"]).await;
}

/// A primary whose PostgreSQL stops at start: the condition quotes PostgreSQL's FATAL line
/// (kubelet's `FallbackToLogsOnError` termination message), not a bare "does not accept
/// writes".
#[tokio::test]
async fn a_failing_primary_is_reported_with_postgresqls_fatal_line() {
    let mut h = Harness::start(spec(1)).await;
    let fatal = "2026-11-25 10:00:00.000 UTC [42] FATAL:  could not map anonymous shared memory: Cannot allocate memory";
    h.model.kill("demo-0").unwrap();
    h.api::<Pod>()
        .patch_status(
            "demo-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"containerStatuses": [{
                "name": "postgres", "image": "postgres:15", "imageID": "", "ready": false,
                "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                    "message": format!("LOG:  starting PostgreSQL 15\n{fatal}\nLOG:  database system is shut down")}}}]}})),
        )
        .await
        .unwrap();
    for _ in 0..2 {
        h.pass().await;
    }
    let status = h.status().await;
    let available = status
        .common
        .conditions
        .iter()
        .find(|c| c.type_ == "Available")
        .unwrap();
    assert_eq!(
        (available.status.as_str(), available.reason.as_str()),
        ("False", "PrimaryFailing")
    );
    assert!(
        available
            .message
            .contains("could not map anonymous shared memory"),
        "{}",
        available.message
    );
}

#[tokio::test]
async fn a_cordoned_primary_node_hands_over_to_a_replica_on_a_usable_node() {
    let mut h = Harness::start(spec(3)).await;
    h.replay("demo-1", 0x8000);
    h.replay("demo-2", 0x4000);
    for n in 0..3 {
        h.node(&format!("node-{n}"), false, "True").await;
    }
    h.pass().await;
    assert!(
        h.status().await.pending_failover.is_none(),
        "nothing cordoned yet"
    );
    // `kubectl drain node-0` cordons it (and node-1 is cordoned for maintenance too): the
    // replica with less WAL but a usable Node is the target.
    h.node("node-0", true, "True").await;
    h.node("node-1", true, "True").await;
    h.pass().await;
    let status = h.status().await;
    let pending = status.pending_failover.unwrap();
    assert_eq!(
        (
            pending.from.as_str(),
            pending.target.as_str(),
            pending.reason.as_str()
        ),
        ("demo-0", "demo-2", "nodeCordoned")
    );
    assert!(pending.switchover && pending.demoted_at_lsn.is_some());
    // Its Node exists, so the Pod waits for the kubelet to confirm the stop.
    let old = h.pod("demo-0").await.unwrap();
    assert!(old.metadata.deletion_timestamp.is_some());
    assert!(h.promotions().is_empty());
    h.force_delete("demo-0").await;
    h.pass().await;
    assert!(h.promotions().is_empty(), "the target has not caught up");
    h.replay("demo-2", TRAFFIC);
    h.pass().await;
    assert_eq!(h.promotions(), ["demo-2"]);
    h.assert_primary_replaced("demo-2").await;
    assert_in_order(
        &h.reasons(),
        &[
            "SwitchoverStarted",
            "PrimaryDemoted",
            "Promoted",
            "OperationSucceeded",
        ],
    );
    let note = &h
        .events
        .iter()
        .find(|(r, _)| r == "SwitchoverStarted")
        .unwrap()
        .1;
    assert!(note.contains("nodeCordoned"), "{note}");
}

#[tokio::test]
async fn a_cordoned_primary_without_a_usable_replica_says_why_the_drain_waits() {
    let mut h = Harness::start(spec(2)).await;
    h.node("node-0", true, "True").await;
    h.node("node-1", true, "True").await;
    h.pass().await;
    h.pass().await;
    let status = h.status().await;
    assert!(status.pending_failover.is_none());
    assert_eq!(h.pod_names().await, ["demo-0", "demo-1"]);
    let degraded = crate::conditions::get(&status.common.conditions, "Degraded").unwrap();
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "PrimaryNodeCordoned")
    );
    assert!(degraded.message.contains("node-0"), "{}", degraded.message);
    assert!(h.driver_events.iter().any(|r| r == "PrimaryNodeCordoned"));
    assert!(h.changes().is_empty());
}

#[tokio::test]
async fn a_single_instance_on_a_cordoned_node_is_left_to_the_drain() {
    let mut h = Harness::start(spec(1)).await;
    h.node("node-0", true, "True").await;
    h.pass().await;
    let status = h.status().await;
    assert!(status.pending_failover.is_none());
    let degraded = crate::conditions::get(&status.common.conditions, "Degraded").unwrap();
    assert_eq!(degraded.status, "False", "{degraded:?}");
    assert!(h.changes().is_empty());
}

#[tokio::test]
async fn a_primary_on_a_lost_node_is_not_replaced_until_a_person_confirms() {
    let mut h = Harness::start(spec(3)).await;
    h.replay("demo-1", TRAFFIC);
    h.replay("demo-2", 0x4000);
    for n in 0..3 {
        h.node(&format!("node-{n}"), false, "True").await;
    }
    h.pass().await;
    // node-0 stops posting: the node lifecycle controller marks it Unknown and its Pods not
    // Ready. The primary still runs there (the model keeps answering), unseen.
    h.node("node-0", false, "Unknown").await;
    let not_ready = json!({"status": {"conditions": [{"type": "Ready", "status": "False",
        "reason": "NodeNotReady"}]}});
    h.api::<Pod>()
        .patch_status("demo-0", &PatchParams::default(), &Patch::Merge(not_ready))
        .await
        .unwrap();
    h.sit_out_the_delay().await;
    h.pass().await;
    let pending = h.status().await.pending_failover.unwrap();
    assert_eq!(
        (pending.from.as_str(), pending.target.as_str()),
        ("demo-0", "demo-1")
    );
    for _ in 0..3 {
        h.clock.advance(Duration::from_secs(30));
        h.pass().await;
        assert!(
            h.promotions().is_empty(),
            "promoted while the old primary may run"
        );
        assert!(
            h.pod("demo-0")
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_some()
        );
    }
    let status = h.status().await;
    let degraded = crate::conditions::get(&status.common.conditions, "Degraded").unwrap();
    assert_eq!(degraded.reason, "PrimaryNodeLost");
    for part in ["node-0", "kubectl delete pod demo-0 --force", "demo-1"] {
        assert!(
            degraded.message.contains(part),
            "{part}: {}",
            degraded.message
        );
    }
    assert_eq!(
        h.driver_events
            .iter()
            .filter(|r| *r == "PrimaryNodeLost")
            .count(),
        1,
        "said once: {:?}",
        h.driver_events
    );
    let op = status.common.operation.unwrap();
    assert!(op.message.contains("nothing confirms"), "{}", op.message);
    // A person confirms the machine is off.
    h.model.kill("demo-0").unwrap();
    h.force_delete("demo-0").await;
    h.pass().await;
    assert_eq!(h.promotions(), ["demo-1"]);
    h.assert_primary_replaced("demo-1").await;
}

fn policy(name: &str, sql: &str) -> steward_api::policy::PostgresPolicy {
    steward_api::policy::PostgresPolicy::new(
        name,
        steward_api::policy::PostgresPolicySpec {
            sql: Some(sql.into()),
            config_map: None,
        },
    )
}

#[tokio::test]
async fn a_policy_runs_once_per_version_and_a_missing_one_is_reported_until_it_exists() {
    use steward_api::policy::{PolicyRef, PostgresPolicy};
    let mut s = spec(2);
    s.policies = ["grants", "later"]
        .map(|name| PolicyRef {
            name: name.into(),
            database: "postgres".into(),
        })
        .to_vec();
    let mut h = Harness::start(s).await;
    let policies = h.api::<PostgresPolicy>();
    policies
        .create(
            &PostParams::default(),
            &policy("grants", "GRANT pg_monitor TO app"),
        )
        .await
        .unwrap();
    h.pass().await;
    let log = |h: &Harness| h.model.instance("demo-0").unwrap().catalog.sql_log;
    assert_eq!(
        log(&h),
        [("postgres".to_owned(), "GRANT pg_monitor TO app".to_owned())]
    );
    let status = h.status().await;
    let grants = status.policies[0].clone();
    assert_eq!(
        grants.result.as_ref().unwrap().phase,
        "Succeeded",
        "{grants:?}"
    );
    let first = grants.version.clone().unwrap();
    let read = policies.get("grants").await.unwrap().status.unwrap();
    assert_eq!(
        read.version.as_deref(),
        Some(first.as_str()),
        "the policy shows its version"
    );
    assert!(
        status.policies[1]
            .waiting
            .as_deref()
            .is_some_and(|w| w.contains("PostgresPolicy later does not exist")),
        "{status:?}"
    );
    assert!(h.reasons().contains(&"PolicyApplied".to_owned()));
    let degraded = status
        .common
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap();
    assert_eq!(degraded.reason, "PolicyUnavailable");
    // The same version never runs again; the missing policy runs once it exists.
    for _ in 0..2 {
        h.clock.advance(Duration::from_secs(15));
        h.pass().await;
    }
    assert_eq!(log(&h).len(), 1);
    policies
        .create(&PostParams::default(), &policy("later", "SELECT 1"))
        .await
        .unwrap();
    h.pass().await;
    assert_eq!(log(&h).len(), 2);
    // A new version of the SQL runs once.
    let mut changed = policies.get("grants").await.unwrap();
    changed.spec.sql = Some("GRANT pg_read_all_stats TO app".into());
    policies
        .replace("grants", &PostParams::default(), &changed)
        .await
        .unwrap();
    h.pass().await;
    h.pass().await;
    assert_eq!(log(&h).len(), 3);
    let status = h.status().await;
    assert_ne!(status.policies[0].version.as_deref(), Some(first.as_str()));
    assert!(status.policies.iter().all(|p| p.waiting.is_none()));
    // A failing run is recorded with PostgreSQL's words and not retried.
    h.model
        .fail_sql(
            "demo-0",
            "DELETE FROM nope",
            crate::postgres::admin::PgAdminError::from_sqlstate(
                "42P01",
                "ERROR: relation \"nope\" does not exist",
            ),
        )
        .unwrap();
    let mut broken = policies.get("later").await.unwrap();
    broken.spec.sql = Some("DELETE FROM nope".into());
    policies
        .replace("later", &PostParams::default(), &broken)
        .await
        .unwrap();
    h.pass().await;
    h.pass().await;
    let later = h.status().await.policies[1].clone();
    let result = later.result.unwrap();
    assert_eq!(result.phase, "Failed");
    assert!(
        result
            .error
            .unwrap()
            .contains("relation \"nope\" does not exist")
    );
    assert_eq!(log(&h).len(), 3, "the failed statement changed nothing");
    assert_eq!(
        h.reasons().iter().filter(|r| *r == "PolicyFailed").count(),
        1
    );
}
