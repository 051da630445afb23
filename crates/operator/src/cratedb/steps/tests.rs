//! Step tests: `Bootstrap` and `ReconcileUsers` run pass after pass against the CrateDB
//! stand-in's model (the same statements the real channels send, through the stand-in's SQL
//! front), with the Secrets in the embedded API server.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::runtime::reflector;
use steward_api::common::{OperationKind, OperationPhase};
use steward_api::cratedb::{CrateCluster, CrateClusterStatus};
use steward_cratedb_standin::model::{Cluster, ClusterConfig, NodeSpec, Privilege};

use crate::clock::{Clock, ManualClock};
use crate::config::{TimeoutArgs, WebhookArgs};
use crate::cratedb::admin::model::ModelChannels;
use crate::cratedb::admin::{Endpoint, Login};
use crate::cratedb::names::ClusterNames;
use crate::cratedb::steps::bootstrap::Bootstrap;
use crate::cratedb::steps::reconcile_users::ReconcileUsers;
use crate::cratedb::{CratePass, CrateStores, validate};
use crate::embedded::Embedded;
use crate::error::Error;
use crate::metrics::Metrics;
use crate::pipeline::{Effect, PassCore, SubReconciler};
use crate::resources::secrets::Password;
use crate::resources::{AppliedSet, Applier};
use crate::runtime::context::Context;
use crate::webhook::WebhookSender;

const NS: &str = "db";
const SYSTEM_PW: &str = "system-password";

/// The stand-in model with 3 dedicated masters and 4 data nodes: more than the 3 nodes CrateDB
/// 4.x allows without a license.
fn model() -> ModelChannels {
    let masters: Vec<String> = (0..3).map(|i| format!("crate-master-demo-{i}")).collect();
    let mut cluster = Cluster::new(ClusterConfig {
        initial_master_nodes: masters.clone(),
        ..ClusterConfig::default()
    });
    for m in &masters {
        cluster.join(NodeSpec::master_only(m));
    }
    for i in 0..4 {
        cluster.join(NodeSpec::data_only(format!("crate-data-hot-demo-{i}")));
    }
    cluster.tick();
    assert!(cluster.master().is_some(), "the model elected a master");
    ModelChannels::new(cluster)
}

struct Harness {
    plane: Embedded,
    cluster: CrateCluster,
    channels: ModelChannels,
    status: CrateClusterStatus,
    common: steward_api::common::CommonStatus,
    clock: ManualClock,
    events: Vec<(String, String)>,
}

impl Harness {
    async fn start(license: bool) -> Self {
        let plane = Embedded::start(&[NS]).await.unwrap();
        let secrets: Api<Secret> = Api::namespaced(plane.client.clone(), NS);
        for (name, key, value) in [
            ("license", "key", "standin:test:16"),
            ("app-pw", "password", "first"),
        ] {
            let secret: Secret = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "stringData": {key: value}
            }))
            .unwrap();
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .unwrap();
        }
        let mut spec = serde_json::json!({
            "cluster": {"name": "demo", "version": "4.8.4"},
            "nodes": {"master": {"replicas": 3}, "data": [{"name": "hot", "replicas": 4}]},
            "users": [{"name": "app", "password": {"secretKeyRef": {"name": "app-pw", "key": "password"}}}]
        });
        if license {
            spec["cluster"]["license"] =
                serde_json::json!({"secretKeyRef": {"name": "license", "key": "key"}});
        }
        let cluster: CrateCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "steward.dev/v1alpha1", "kind": "CrateCluster",
            "metadata": {"name": "demo", "namespace": NS},
            "spec": spec
        }))
        .unwrap();
        let api: Api<CrateCluster> = Api::namespaced(plane.client.clone(), NS);
        let cluster = api.create(&PostParams::default(), &cluster).await.unwrap();
        Self {
            plane,
            cluster,
            channels: model(),
            status: CrateClusterStatus::default(),
            common: Default::default(),
            clock: ManualClock::new(jiff::Timestamp::UNIX_EPOCH),
            events: Vec::new(),
        }
    }

    fn pass(&self) -> CratePass {
        let client = self.plane.client.clone();
        let metrics = Metrics::new();
        let webhooks = WebhookSender::new(&WebhookArgs::default(), metrics.clone()).unwrap();
        let mut ctx = Context::new(
            client.clone(),
            metrics,
            webhooks,
            Arc::new(self.clock.clone()),
            TimeoutArgs::default(),
            None,
            "test".into(),
        );
        ctx.seams
            .insert::<Arc<dyn crate::cratedb::admin::CrateChannels>>(Arc::new(
                self.channels.clone(),
            ));
        let mut core = PassCore::new(
            "cratedb",
            NS,
            "demo",
            1,
            self.clock.now(),
            self.common.clone(),
        );
        core.timeouts = TimeoutArgs::default();
        let endpoint = |pod: String| Endpoint {
            pod,
            namespace: NS.into(),
            ip: "127.0.0.1".into(),
        };
        let masters: Vec<Endpoint> = (0..3)
            .map(|i| endpoint(format!("crate-master-demo-{i}")))
            .collect();
        let mut nodes = masters.clone();
        nodes.extend((0..4).map(|i| endpoint(format!("crate-data-hot-demo-{i}"))));
        CratePass {
            core,
            cluster: Arc::new(self.cluster.clone()),
            validated: Some(validate::validate(&self.cluster).unwrap()),
            status: self.status.clone(),
            stores: CrateStores {
                services: reflector::store().0.into(),
                pods: reflector::store().0.into(),
                statefulsets: reflector::store().0.into(),
                budgets: reflector::store().0,
                secrets: reflector::store().0.into(),
                user_secrets: reflector::store().0,
            },
            names: ClusterNames::new("demo", NS, "cluster.local"),
            system: Some(Login {
                user: "system".into(),
                password: Password::new(SYSTEM_PW),
            }),
            nodes,
            masters,
            observed: None,
            observe_error: None,
            observe_done: true,
            unschedulable: None,
            applier: Applier::new(client, "cratedb"),
            applied: AppliedSet::default(),
            ctx: Arc::new(ctx),
        }
    }

    /// One pass of Bootstrap then ReconcileUsers; status and Events carried over.
    async fn run(&mut self) -> Result<(), Error> {
        let mut pass = self.pass();
        let result = async {
            Bootstrap.reconcile(&mut pass).await?;
            ReconcileUsers.reconcile(&mut pass).await
        }
        .await;
        for e in &pass.core.effects {
            if let Effect::Event { reason, note, .. } = e {
                self.events.push((reason.clone(), note.clone()));
            }
        }
        self.status = pass.status;
        self.common = pass.core.status;
        result.map(drop)
    }

    async fn set_secret(&self, name: &str, key: &str, value: &str) {
        let secrets: Api<Secret> = Api::namespaced(self.plane.client.clone(), NS);
        let body = serde_json::json!({"stringData": {key: value}});
        secrets
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&body),
            )
            .await
            .unwrap();
    }

    fn reasons(&self) -> Vec<&str> {
        self.events.iter().map(|(r, _)| r.as_str()).collect()
    }
}

#[tokio::test]
async fn bootstrap_sets_the_license_then_creates_system_with_crash_then_users_over_pg() {
    let mut h = Harness::start(true).await;
    for _ in 0..5 {
        h.run().await.unwrap();
        if h.status.bootstrap.done {
            break;
        }
    }
    assert!(h.status.bootstrap.done, "{:?}", h.status);
    // crash ran exactly: the license, then the system user and its grant.
    assert_eq!(
        *h.channels.crash_log.lock().unwrap(),
        ["SET", "CREATE", "GRANT"]
    );
    assert_eq!(
        h.reasons(),
        [
            "OperationStarted",
            "LicenseSet",
            "SystemUserCreated",
            "UserCreated",
            "OperationSucceeded"
        ]
    );
    let model = h.channels.cluster.lock().unwrap().clone();
    assert!(model.user("system").unwrap().has(Privilege::Al));
    assert!(model.authenticate("system", Some(SYSTEM_PW)).is_ok());
    assert!(model.authenticate("app", Some("first")).is_ok());
    assert!(model.user("app").unwrap().has(Privilege::Dml));
    let op = h.common.last_operation.clone().unwrap();
    assert_eq!(
        (op.kind, op.phase),
        (OperationKind::Bootstrap, OperationPhase::Succeeded)
    );
    // The applied-passwords record holds the user's password for the next rotation.
    let record: Secret = Api::namespaced(h.plane.client.clone(), NS)
        .get("crate-passwords-demo")
        .await
        .unwrap();
    assert_eq!(record.data.unwrap()["app"].0, b"first");
}

#[tokio::test]
async fn without_a_license_seven_nodes_refuse_the_system_user_with_a_clear_error() {
    let mut h = Harness::start(false).await;
    let err = h.run().await.unwrap_err();
    assert!(
        err.to_string().contains("LicenseViolationException"),
        "{err}"
    );
    assert!(
        h.status.bootstrap.license,
        "no license configured: nothing to set"
    );
    assert!(!h.status.bootstrap.system_user);
    assert!(h.channels.cluster.lock().unwrap().user("system").is_none());
}

#[tokio::test]
async fn an_existing_system_user_is_fine_and_bootstrap_resumes_where_it_stopped() {
    let mut h = Harness::start(true).await;
    // A previous operator set the license and created system, then stopped.
    {
        let mut c = h.channels.cluster.lock().unwrap();
        steward_cratedb_standin::sql::execute(&mut c, "crate", "SET LICENSE 'standin:x:16'", &[])
            .unwrap();
        steward_cratedb_standin::sql::execute(
            &mut c,
            "crate",
            &format!("CREATE USER system WITH (password = '{SYSTEM_PW}')"),
            &[],
        )
        .unwrap();
    }
    h.status.bootstrap.license = true;
    for _ in 0..5 {
        h.run().await.unwrap();
    }
    assert!(h.status.bootstrap.done);
    // No second license; system's CREATE answered "already exists" and the grant still ran.
    assert_eq!(*h.channels.crash_log.lock().unwrap(), ["CREATE", "GRANT"]);
    assert!(
        h.channels
            .cluster
            .lock()
            .unwrap()
            .user("system")
            .unwrap()
            .has(Privilege::Al)
    );
}

#[tokio::test]
async fn a_rotation_logs_in_with_the_old_password_and_a_password_changed_inside_is_reported_once() {
    let mut h = Harness::start(true).await;
    for _ in 0..5 {
        h.run().await.unwrap();
    }
    assert!(h.status.bootstrap.done);
    h.set_secret("app-pw", "password", "second").await;
    h.run().await.unwrap();
    {
        let c = h.channels.cluster.lock().unwrap();
        assert!(c.authenticate("app", Some("second")).is_ok());
        assert!(c.authenticate("app", Some("first")).is_err());
    }
    assert!(h.status.users[0].ready, "{:?}", h.status.users);
    assert_eq!(h.reasons().last(), Some(&"PasswordRotated"));

    // Changed inside CrateDB: the old password no longer logs in.
    {
        let mut c = h.channels.cluster.lock().unwrap();
        steward_cratedb_standin::sql::execute(
            &mut c,
            "crate",
            "ALTER USER app SET (password = 'by-hand')",
            &[],
        )
        .unwrap();
    }
    h.set_secret("app-pw", "password", "third").await;
    h.run().await.unwrap();
    let user = h.status.users[0].clone();
    assert!(!user.ready);
    assert!(user.message.contains("no longer logs in"), "{user:?}");
    let failures = |h: &Harness| {
        h.reasons()
            .iter()
            .filter(|r| **r == "PasswordRotationFailed")
            .count()
    };
    assert_eq!(failures(&h), 1);
    // Not retried in a loop: the next passes report nothing new and change nothing.
    h.run().await.unwrap();
    h.run().await.unwrap();
    assert_eq!(failures(&h), 1);
    assert!(
        h.channels
            .cluster
            .lock()
            .unwrap()
            .authenticate("app", Some("by-hand"))
            .is_ok()
    );
}
