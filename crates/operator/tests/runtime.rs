//! The operator runtime end to end against Steward's embedded API server: reconcile, status,
//! Events, server-side apply, the orphan sweep, invalid specs, missing CRDs, HTTP endpoints and
//! leader election.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use steward_api::etcd::{EtcdCluster, EtcdClusterSpec};
use steward_operator::config::operator_args_from;
use steward_operator::embedded::Embedded;
use steward_operator::runtime::{self, OperatorHandle};

/// A client configuration for `server` with its admin token.
fn admin_config(server: &steward_apiserver::ApiServerHandle) -> kube::Config {
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.auth_info.token = Some(server.admin_token().into());
    config
}

async fn operator(client: &Client, identity: &str, extra: &[&str]) -> OperatorHandle {
    let mut args = vec![
        "--http-addr",
        "127.0.0.1:0",
        "--api-addr",
        "127.0.0.1:0",
        "--identity",
        identity,
        "--lease-duration-seconds",
        "3",
    ];
    args.extend_from_slice(extra);
    runtime::start(client.clone(), operator_args_from(args).unwrap())
        .await
        .unwrap()
}

fn cluster(name: &str, replicas: i32, version: &str) -> EtcdCluster {
    EtcdCluster::new(name, EtcdClusterSpec::new(replicas, version))
}

/// One control plane, one operator, and the `db` namespace's clusters.
struct Solo {
    plane: Embedded,
    op: OperatorHandle,
    clusters: Api<EtcdCluster>,
}

impl Solo {
    async fn start() -> Self {
        common::install_crypto();
        let plane = Embedded::start(&["steward-system", "db"]).await.unwrap();
        let op = operator(&plane.client, "solo", &[]).await;
        let clusters = Api::namespaced(plane.client.clone(), "db");
        Self {
            plane,
            op,
            clusters,
        }
    }
}

async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn reconciled(api: &Api<EtcdCluster>, name: &str, generation: i64) -> EtcdCluster {
    eventually(
        &format!("status of {name} at generation {generation}"),
        Duration::from_secs(20),
        || async {
            let c = api.get(name).await.ok()?;
            (c.status.as_ref()?.common.observed_generation == Some(generation)).then_some(c)
        },
    )
    .await
}

fn condition<'a>(c: &'a EtcdCluster, type_: &str) -> (&'a str, &'a str) {
    let cond = c
        .status
        .as_ref()
        .unwrap()
        .common
        .conditions
        .iter()
        .find(|x| x.type_ == type_)
        .unwrap();
    (cond.status.as_str(), cond.reason.as_str())
}

async fn metric(handle: &OperatorHandle, name: &str) -> String {
    let url = format!("http://{}/metrics", handle.http_addr);
    reqwest::get(url)
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
        .lines()
        .filter(|l| l.starts_with(name))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The etcd controller's passes so far (the operator's own counter).
async fn etcd_passes(handle: &OperatorHandle) -> u64 {
    metric(handle, "steward_reconcile_passes_total")
        .await
        .lines()
        .filter(|l| l.contains("controller=\"etcd\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Without a node a cluster's Pods are reported Unschedulable once the scheduler has tried
/// them; waits until the cluster's status says so.
async fn settled_unschedulable(clusters: &Api<EtcdCluster>, name: &str) {
    eventually(
        "the status settles as Unschedulable",
        Duration::from_secs(10),
        || {
            let clusters = clusters.clone();
            async move {
                let c = clusters.get(name).await.ok()?;
                (condition(&c, "Available") == ("False", "Unschedulable")).then_some(())
            }
        },
    )
    .await;
}

#[tokio::test]
async fn reconciles_status_service_events_and_sweeps_orphans() {
    let Solo {
        plane,
        op,
        clusters,
    } = Solo::start().await;
    clusters
        .create(&PostParams::default(), &cluster("demo", 3, "3.5.17"))
        .await
        .unwrap();
    let c = reconciled(&clusters, "demo", 1).await;

    // No node runs Pods here: the cluster bootstraps (peers, claims, Pods) but cannot be
    // reached, and says why — the scheduler has no node for the Pods — without pretending to
    // be reconciled.
    assert_eq!(condition(&c, "Progressing").0, "True");
    let c = eventually(
        "Available=False/Unschedulable, waiting in ObserveCluster",
        Duration::from_secs(30),
        || {
            let clusters = clusters.clone();
            async move {
                let c = clusters.get("demo").await.ok()?;
                (condition(&c, "Available") == ("False", "Unschedulable")
                    && condition(&c, "Progressing") == ("True", "ObserveCluster"))
                    .then_some(c)
            }
        },
    )
    .await;
    let conditions = &c.status.as_ref().unwrap().common.conditions;
    let available = conditions.iter().find(|x| x.type_ == "Available").unwrap();
    let message = &available.message;
    assert!(message.contains("nodes are available"), "{message}");
    let status = c.status.as_ref().unwrap();
    let running = status
        .common
        .operation
        .as_ref()
        .expect("bootstrap operation");
    assert_eq!(running.kind, steward_api::common::OperationKind::Bootstrap);
    let peers: Api<steward_api::etcd::EtcdPeer> = Api::namespaced(plane.client.clone(), "db");
    let peer_list = eventually("3 peers", Duration::from_secs(10), || async {
        let l = peers.list(&ListParams::default()).await.ok()?;
        (l.items.len() == 3).then_some(l)
    })
    .await;
    for p in &peer_list.items {
        assert_eq!(
            p.spec.bootstrap.initial_cluster_state,
            steward_api::etcd::InitialClusterState::New
        );
        assert_eq!(p.spec.bootstrap.initial_cluster.len(), 3);
    }
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(plane.client.clone(), "db");
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(plane.client.clone(), "db");
    eventually(
        "member Pods and claims",
        Duration::from_secs(10),
        || async {
            let p = pods.list(&ListParams::default()).await.ok()?;
            let c = claims.list(&ListParams::default()).await.ok()?;
            (p.items.len() == 3 && c.items.len() == 3).then_some(())
        },
    )
    .await;
    let budget: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(plane.client.clone(), "db");
    let pdb = budget.get("demo").await.unwrap();
    assert_eq!(
        pdb.spec.unwrap().min_available,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2))
    );
    assert_eq!(status.common.generations.reconciled, None);
    assert_eq!(status.common.generations.needs_scale, Some(1));
    assert!(status.selector.contains("app.kubernetes.io/instance=demo"));

    // The headless Service, applied with the recommended labels and a controller reference.
    let services: Api<Service> = Api::namespaced(plane.client.clone(), "db");
    let svc = services.get("demo").await.unwrap();
    assert_eq!(
        svc.spec.as_ref().unwrap().cluster_ip.as_deref(),
        Some("None")
    );
    assert_eq!(svc.labels()["app.kubernetes.io/managed-by"], "steward");
    assert_eq!(svc.owner_references()[0].uid, c.uid().unwrap());
    assert!(
        svc.managed_fields()
            .iter()
            .any(|m| m.manager.as_deref() == Some("steward/etcd"))
    );

    // Events say what happened.
    let events: Api<Event> = Api::namespaced(plane.client.clone(), "db");
    let reasons: Vec<String> = eventually("PeerCreated event", Duration::from_secs(10), || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        let reasons: Vec<String> = list.items.iter().filter_map(|e| e.reason.clone()).collect();
        reasons
            .iter()
            .any(|r| r == "PeerCreated")
            .then_some(reasons)
    })
    .await;
    assert!(
        reasons.iter().any(|r| r == "OperationStarted"),
        "{reasons:?}"
    );

    // An orphan: same labels and owner, not applied by the operator -> deleted on the next pass.
    let mut orphan = Service::default();
    orphan.metadata.name = Some("demo-stale".into());
    orphan.metadata.labels = Some(BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "etcd".to_owned()),
        ("app.kubernetes.io/instance".to_owned(), "demo".to_owned()),
        ("app.kubernetes.io/component".to_owned(), "old".to_owned()),
        (
            "app.kubernetes.io/managed-by".to_owned(),
            "steward".to_owned(),
        ),
    ]));
    orphan.metadata.owner_references = Some(vec![c.controller_owner_ref(&()).unwrap()]);
    orphan.spec = Some(k8s_openapi::api::core::v1::ServiceSpec {
        ports: Some(vec![k8s_openapi::api::core::v1::ServicePort {
            port: 80,
            ..Default::default()
        }]),
        ..Default::default()
    });
    services
        .create(&PostParams::default(), &orphan)
        .await
        .unwrap();
    // An unrelated Service (not owned by the cluster) must survive.
    let mut bystander = orphan.clone();
    bystander.metadata.name = Some("bystander".into());
    bystander.metadata.owner_references = None;
    services
        .create(&PostParams::default(), &bystander)
        .await
        .unwrap();
    eventually("orphan swept", Duration::from_secs(20), || async {
        services
            .get_opt("demo-stale")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(services.get_opt("bystander").await.unwrap().is_some());
    assert!(services.get_opt("demo").await.unwrap().is_some());

    // Steps were timed.
    let steps = metric(&op, "steward_reconcile_step_duration_seconds_count").await;
    for step in [
        "UpdateStatus",
        "ValidateSpec",
        "ApplyServices",
        "ApplyBudget",
        "ObserveCluster",
        "ScaleMembers",
        "ReconcilePeers",
        "RollingUpdate",
        "SweepOrphans",
    ] {
        assert!(
            steps.contains(&format!("step=\"{step}\"")),
            "{step} missing in {steps}"
        );
    }
    op.shutdown().await.unwrap();
    plane.server.shutdown().await;
}

#[tokio::test]
async fn a_pass_without_changes_writes_nothing() {
    let Solo {
        plane,
        op,
        clusters,
    } = Solo::start().await;
    clusters
        .create(&PostParams::default(), &cluster("idle", 1, "3.5.17"))
        .await
        .unwrap();
    reconciled(&clusters, "idle", 1).await;
    // The settled status first, or the pass after the touch would rightly write it.
    settled_unschedulable(&clusters, "idle").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = etcd_passes(&op).await;
    // A metadata-only change triggers a pass but changes nothing the operator computes.
    let patch = serde_json::json!({"metadata": {"annotations": {"touched": "yes"}}});
    let touched = clusters
        .patch(
            "idle",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .unwrap();
    eventually(
        "a pass after the touch",
        Duration::from_secs(10),
        || async { (etcd_passes(&op).await > before).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = clusters.get("idle").await.unwrap();
    assert_eq!(
        touched.resource_version(),
        after.resource_version(),
        "the pass rewrote an unchanged status"
    );
    op.shutdown().await.unwrap();
    plane.server.shutdown().await;
}

/// A cluster whose Pods no Node can take is looked at again after 300 s (or when a Pod or Node
/// changes), not at its steps' 5 s requeue: nothing a pass does can place the Pods. (At 1,000
/// such clusters the 5 s requeue was 100 passes a second and most of the operator's CPU.)
#[tokio::test]
async fn a_cluster_whose_pods_cannot_be_placed_is_not_requeued_every_few_seconds() {
    let Solo {
        plane,
        op,
        clusters,
    } = Solo::start().await;
    clusters
        .create(&PostParams::default(), &cluster("unplaced", 1, "3.5.17"))
        .await
        .unwrap();
    reconciled(&clusters, "unplaced", 1).await;
    settled_unschedulable(&clusters, "unplaced").await;
    // The pass that wrote that status, and those its own write and the peer's triggered.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = etcd_passes(&op).await;
    // Two of the steps' 5 s requeues.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let after = etcd_passes(&op).await;
    assert_eq!(
        after - before,
        0,
        "an unplaceable cluster was looked at again within 11 s"
    );
    op.shutdown().await.unwrap();
    plane.server.shutdown().await;
}

#[tokio::test]
async fn invalid_spec_is_degraded_and_nothing_is_created() {
    let Solo {
        plane,
        op,
        clusters,
    } = Solo::start().await;
    clusters
        .create(&PostParams::default(), &cluster("old", 3, "3.3.1"))
        .await
        .unwrap();
    let c = reconciled(&clusters, "old", 1).await;
    assert_eq!(condition(&c, "Degraded"), ("True", "InvalidSpec"));
    let message = &c
        .status
        .as_ref()
        .unwrap()
        .common
        .conditions
        .iter()
        .find(|x| x.type_ == "Degraded")
        .unwrap()
        .message;
    assert!(message.contains("older than 3.4"), "{message}");
    assert_eq!(
        c.status
            .as_ref()
            .unwrap()
            .common
            .generations
            .has_invalid_spec,
        Some(1)
    );
    let services: Api<Service> = Api::namespaced(plane.client.clone(), "db");
    assert!(services.get_opt("old").await.unwrap().is_none());
    op.shutdown().await.unwrap();
    plane.server.shutdown().await;
}

#[tokio::test]
async fn schema_rejects_zero_replicas() {
    common::install_crypto();
    let plane = Embedded::start(&["db"]).await.unwrap();
    let clusters: Api<EtcdCluster> = Api::namespaced(plane.client.clone(), "db");
    let err = clusters
        .create(&PostParams::default(), &cluster("zero", 0, "3.5.17"))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => assert_eq!(s.code, 422, "{s:?}"),
        other => panic!("expected 422, got {other:?}"),
    }
    plane.server.shutdown().await;
}

#[tokio::test]
async fn missing_crds_stop_the_operator_with_instructions() {
    common::install_crypto();
    let server = steward_apiserver::start(Default::default()).await.unwrap();
    let client = Client::try_from(admin_config(&server)).unwrap();
    // No namespaces at all: the API (whose Secrets live in steward-system) stays off.
    let op = operator(
        &client,
        "lonely",
        &["--crd-wait-seconds", "1", "--api", "false"],
    )
    .await;
    let health = reqwest::get(format!("http://{}/healthz", op.http_addr))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let ready = reqwest::get(format!("http://{}/readyz", op.http_addr))
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
    let err = op.wait().await.unwrap_err();
    assert!(err.contains("steward crd | kubectl apply -f -"), "{err}");
    server.shutdown().await;
}

#[tokio::test]
async fn only_the_leader_reconciles_and_a_standby_takes_over() {
    common::install_crypto();
    let plane = Embedded::start(&["steward-system", "db"]).await.unwrap();
    let a = operator(&plane.client, "op-a", &[]).await;
    let b = operator(&plane.client, "op-b", &[]).await;
    let a_leads = eventually("a leader", Duration::from_secs(20), || {
        let (la, lb) = (*a.leader.borrow(), *b.leader.borrow());
        async move { (la != lb).then_some(la) }
    })
    .await;
    let (leader, standby) = if a_leads { (a, b) } else { (b, a) };
    // Both are ready; only one leads.
    for h in [&leader, &standby] {
        let ready = reqwest::get(format!("http://{}/readyz", h.http_addr))
            .await
            .unwrap();
        assert_eq!(ready.status(), 200);
    }
    let clusters: Api<EtcdCluster> = Api::namespaced(plane.client.clone(), "db");
    clusters
        .create(&PostParams::default(), &cluster("first", 1, "3.5.17"))
        .await
        .unwrap();
    reconciled(&clusters, "first", 1).await;
    assert!(
        metric(&leader, "steward_reconcile_passes_total")
            .await
            .contains("controller=\"etcd\"")
    );
    assert!(
        !metric(&standby, "steward_reconcile_passes_total")
            .await
            .contains("controller=\"etcd\"")
    );
    assert!(metric(&standby, "steward_leader").await.ends_with(" 0"));

    // The leader stops (SIGTERM path): it releases the Lease and the standby takes over.
    leader.shutdown().await.unwrap();
    let mut watch = standby.leader.clone();
    tokio::time::timeout(Duration::from_secs(20), watch.wait_for(|l| *l))
        .await
        .unwrap()
        .unwrap();
    clusters
        .create(&PostParams::default(), &cluster("second", 1, "3.5.17"))
        .await
        .unwrap();
    reconciled(&clusters, "second", 1).await;
    assert!(
        metric(&standby, "steward_reconcile_passes_total")
            .await
            .contains("controller=\"etcd\"")
    );
    standby.shutdown().await.unwrap();
    plane.server.shutdown().await;
}

#[tokio::test]
async fn deletion_goes_through_the_finalizer_and_children_are_collected() {
    let Solo {
        plane,
        op,
        clusters,
    } = Solo::start().await;
    clusters
        .create(&PostParams::default(), &cluster("doomed", 1, "3.5.17"))
        .await
        .unwrap();
    let c = reconciled(&clusters, "doomed", 1).await;
    assert_eq!(c.finalizers(), ["steward.dev/cleanup"]);
    let services: Api<Service> = Api::namespaced(plane.client.clone(), "db");
    assert!(services.get_opt("doomed").await.unwrap().is_some());
    clusters
        .delete("doomed", &Default::default())
        .await
        .unwrap();
    eventually("cluster gone", Duration::from_secs(20), || async {
        clusters
            .get_opt("doomed")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    eventually(
        "owned Service collected",
        Duration::from_secs(20),
        || async {
            services
                .get_opt("doomed")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    op.shutdown().await.unwrap();
    plane.server.shutdown().await;
}

#[tokio::test]
async fn a_namespaced_operator_ignores_other_namespaces() {
    common::install_crypto();
    let plane = Embedded::start(&["steward-system", "db", "other"])
        .await
        .unwrap();
    let op = operator(&plane.client, "scoped", &["--namespace", "db"]).await;
    let mine: Api<EtcdCluster> = Api::namespaced(plane.client.clone(), "db");
    let theirs: Api<EtcdCluster> = Api::namespaced(plane.client.clone(), "other");
    theirs
        .create(&PostParams::default(), &cluster("foreign", 1, "3.5.17"))
        .await
        .unwrap();
    mine.create(&PostParams::default(), &cluster("local", 1, "3.5.17"))
        .await
        .unwrap();
    reconciled(&mine, "local", 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let foreign = theirs.get("foreign").await.unwrap();
    assert!(
        foreign.status.is_none(),
        "reconciled outside --namespace: {:?}",
        foreign.status
    );
    assert!(foreign.finalizers().is_empty());
    op.shutdown().await.unwrap();
    plane.server.shutdown().await;
}

/// The claims cache is read by steps only; it must keep following the watch after more events
/// than a shared cache buffers per subscriber (a shared cache whose subscription is never read
/// stops there, and the claim-based data-loss check then reads a frozen cache).
#[tokio::test]
async fn the_claims_cache_keeps_up_past_the_shared_buffer() {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use kube::api::{Patch, PatchParams};
    use steward_operator::runtime::stores;
    common::install_crypto();
    let plane = Embedded::start(&["db"]).await.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(plane.client.clone(), "db");
    let stop = tokio_util::sync::CancellationToken::new();
    let store = stores::cached(claims.clone(), stop.clone());
    let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "data-0", "labels": {"app.kubernetes.io/managed-by": "steward"}},
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    let events = stores::BUFFER + 100;
    for n in 0..events {
        let patch = serde_json::json!({"metadata": {"annotations": {"n": n.to_string()}}});
        claims
            .patch("data-0", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    let last = (events - 1).to_string();
    eventually(
        "the cache holds the last change",
        Duration::from_secs(30),
        || {
            let cached = store.find(|c| c.name_any() == "data-0");
            let seen = cached.and_then(|c| c.annotations().get("n").cloned());
            std::future::ready((seen.as_deref() == Some(last.as_str())).then_some(()))
        },
    )
    .await;
    stop.cancel();
    plane.server.shutdown().await;
}

/// A pass starts from the controller's cached copy of the cluster, which can predate the
/// operator's own last status write (a Pod event queued during a pass starts the next pass
/// before the watch delivers that write). Such a pass would redo finished steps and its status
/// write would erase newer progress (once, a pending switchover: the old primary came back as
/// primary). `Context::fresh` reads the object again when the cached copy is not the newest
/// version the operator knows, and hands the cached copy through unchanged when it is.
#[tokio::test]
async fn a_pass_never_starts_from_a_copy_older_than_its_own_status_write() {
    use std::sync::Arc;
    use steward_operator::clock::SystemClock;
    use steward_operator::config::{TimeoutArgs, WebhookArgs};
    use steward_operator::metrics::Metrics;
    use steward_operator::pipeline::{PassReport, PassResult};
    use steward_operator::runtime::context::Context;
    use steward_operator::webhook::WebhookSender;
    common::install_crypto();
    let plane = Embedded::start(&["db"]).await.unwrap();
    let clusters: Api<EtcdCluster> = Api::namespaced(plane.client.clone(), "db");
    let metrics = Metrics::new();
    let webhooks = WebhookSender::new(&WebhookArgs::default(), metrics.clone()).unwrap();
    let ctx = Context::new(
        plane.client.clone(),
        metrics,
        webhooks,
        Arc::new(SystemClock),
        TimeoutArgs::default(),
        None,
        "test".into(),
    );
    let cached = clusters
        .create(&PostParams::default(), &cluster("c", 3, "3.4.23"))
        .await
        .unwrap();
    // Nothing written yet: the cached copy is used as it is.
    let same = Arc::new(cached.clone());
    assert!(Arc::ptr_eq(
        &ctx.fresh(same.clone()).await.unwrap().unwrap(),
        &same
    ));
    let status = steward_api::etcd::EtcdClusterStatus {
        replicas: 3,
        selector: "progress=recorded".into(),
        ..Default::default()
    };
    let report = PassReport {
        result: PassResult::Converged,
        steps_run: Vec::new(),
        skipped: Vec::new(),
    };
    ctx.finish_pass(
        &cached,
        None,
        &status,
        Vec::new(),
        &report,
        Duration::from_secs(15),
    )
    .await
    .unwrap();
    // The copy from before the write is replaced by the stored object, with the write.
    let fresh = ctx.fresh(Arc::new(cached.clone())).await.unwrap().unwrap();
    assert_eq!(
        fresh.status.as_ref().map(|s| s.selector.as_str()),
        Some("progress=recorded")
    );
    assert_ne!(fresh.resource_version(), cached.resource_version());
    // A copy as new as the write is handed through without a read.
    assert!(Arc::ptr_eq(
        &ctx.fresh(fresh.clone()).await.unwrap().unwrap(),
        &fresh
    ));
    // Gone: nothing to reconcile.
    clusters
        .delete("c", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    eventually("c is gone", Duration::from_secs(10), || {
        let clusters = clusters.clone();
        async move { clusters.get_opt("c").await.unwrap().is_none().then_some(()) }
    })
    .await;
    assert!(ctx.fresh(Arc::new(cached)).await.unwrap().is_none());
    plane.server.shutdown().await;
}
