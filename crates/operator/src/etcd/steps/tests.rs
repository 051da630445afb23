//! Step tests: `ScaleMembers`, `RecoverMembers` and `ReconcilePeers`' planning driven against
//! the in-memory etcd model, pass after pass, the way the controller would run them. Steps that
//! write Kubernetes objects (`RecoverMembers` deletes peers) run against the embedded API
//! server, with the peer cache filled from it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use steward_api::common::{Condition, OperationKind, OperationPhase};
use steward_api::etcd::{
    Bootstrap, EtcdCluster, EtcdClusterSpec, EtcdPeer, EtcdPeerStatus, InitialClusterState,
};

use crate::clock::{Clock, ManualClock};
use crate::config::{TimeoutArgs, WebhookArgs};
use crate::embedded::Embedded;
use crate::etcd::admin::AdminError;
use crate::etcd::admin::EtcdConnector;
use crate::etcd::admin::model::{Call, CallKind, EtcdModel, InitialMember};
use crate::etcd::names::ClusterNames;
use crate::etcd::peer::DATA_LOST;
use crate::etcd::steps::observe_cluster::observe;
use crate::etcd::steps::recover_members::RecoverMembers;
use crate::etcd::steps::scale_members::ScaleMembers;
use crate::etcd::{EtcdPass, EtcdStores};
use crate::metrics::Metrics;
use crate::pipeline::{Effect, Outcome};
use crate::pipeline::{PassCore, SubReconciler};
use crate::resources::{AppliedSet, Applier};
use crate::runtime::context::Context;
use crate::webhook::WebhookSender;

fn names() -> ClusterNames {
    ClusterNames::new("demo", "db", "cluster.local")
}

fn model(n: u32) -> EtcdModel {
    let names = names();
    let initial: Vec<InitialMember> = (0..n)
        .map(|i| {
            let peer = names.peer(i);
            InitialMember {
                peer_url: names.peer_url(&peer),
                client_url: names.client_url(&peer),
                name: peer,
            }
        })
        .collect();
    EtcdModel::bootstrap(&initial)
}

/// A client that reaches nothing, for steps that only talk to etcd.
fn no_client() -> kube::Client {
    kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap()
}

async fn pass(model: &EtcdModel, replicas: i32, clock: &ManualClock) -> EtcdPass {
    let mut cluster = EtcdCluster::new("demo", EtcdClusterSpec::new(replicas, "3.4.23"));
    cluster.metadata.namespace = Some("db".into());
    cluster.metadata.uid = Some("uid-1".into());
    cluster.metadata.generation = Some(1);
    pass_with(model, clock, no_client(), cluster, reflector::store().0).await
}

/// A pass over `cluster` (as stored) with `client` and a peer cache.
async fn pass_with(
    model: &EtcdModel,
    clock: &ManualClock,
    client: kube::Client,
    cluster: EtcdCluster,
    peers: Store<EtcdPeer>,
) -> EtcdPass {
    let metrics = Metrics::new();
    let webhooks = WebhookSender::new(&WebhookArgs::default(), metrics.clone()).unwrap();
    let ctx = Arc::new(Context::new(
        client.clone(),
        metrics,
        webhooks,
        Arc::new(clock.clone()),
        TimeoutArgs::default(),
        None,
        "test".into(),
    ));
    let generation = cluster.metadata.generation.unwrap_or(1);
    let core = PassCore::new(
        "etcd",
        "db",
        "demo",
        generation,
        clock.now(),
        Default::default(),
    );
    let stores = EtcdStores {
        services: reflector::store().0.into(),
        pods: reflector::store().0.into(),
        claims: reflector::store().0.into(),
        peers: peers.into(),
        nodes: reflector::store().0,
        budgets: reflector::store().0,
    };
    let mut pass = EtcdPass {
        core,
        cluster: Arc::new(cluster),
        validated: None,
        status: Default::default(),
        stores,
        names: names(),
        observed: None,
        admin: None,
        observe_done: true,
        observe_error: None,
        unschedulable: None,
        endpoints: BTreeMap::new(),
        applier: Applier::new(client, "etcd"),
        applied: AppliedSet::default(),
        ctx,
    };
    observe_into(&mut pass, model).await;
    pass
}

/// What ObserveCluster does, with the model's client URLs as the member endpoints.
async fn observe_into(pass: &mut EtcdPass, model: &EtcdModel) {
    let endpoints: BTreeMap<String, String> = model
        .members()
        .iter()
        .filter(|m| m.up && !m.name.is_empty())
        .map(|m| (m.name.clone(), m.client_urls[0].clone()))
        .collect();
    let urls: Vec<String> = endpoints.values().cloned().collect();
    let admin = model
        .connector()
        .connect(&urls, Duration::from_secs(1))
        .await
        .unwrap();
    pass.observed = Some(observe(admin.as_ref(), &endpoints).await.unwrap());
    pass.endpoints = endpoints;
    pass.admin = Some(admin);
}

/// Plays the peer controller: a member added through the API starts and catches up.
fn start_added(model: &EtcdModel) {
    let names = names();
    for m in model.members() {
        if m.name.is_empty() {
            let peer = names.peer_from_url(&m.peer_urls[0]).unwrap();
            model
                .start_member(m.id, &peer, &names.client_url(&peer))
                .unwrap();
            model.catch_up(m.id).unwrap();
        }
    }
    model.settle();
}

fn voters(model: &EtcdModel) -> Vec<String> {
    let mut names: Vec<String> = model
        .members()
        .iter()
        .filter(|m| !m.is_learner)
        .map(|m| m.name.clone())
        .collect();
    names.sort();
    names
}

/// Runs passes until the scale operation finishes (status carried from pass to pass, as the
/// status write would), returning the membership changes made.
async fn run_until_converged(
    model: &EtcdModel,
    replicas: i32,
    clock: &ManualClock,
) -> (Vec<Call>, EtcdPass) {
    model.clear_calls();
    let mut status = steward_api::common::CommonStatus::default();
    for _ in 0..30 {
        let mut p = pass(model, replicas, clock).await;
        p.core.status = status;
        let before = model.changes().len();
        ScaleMembers.reconcile(&mut p).await.unwrap();
        let made = model.changes().len() - before;
        assert!(made <= 1, "one membership change per pass, got {made}");
        if p.core.status.operation.is_none() && p.core.status.last_operation.is_some() {
            return (model.changes(), p);
        }
        status = p.core.status.clone();
        start_added(model);
    }
    panic!("did not converge: {:?}", model.members());
}

#[tokio::test]
async fn scaling_up_adds_learners_one_at_a_time_and_promotes_them() {
    let model = model(3);
    let clock = ManualClock::new(jiff::Timestamp::UNIX_EPOCH);
    let (changes, last) = run_until_converged(&model, 5, &clock).await;
    assert_eq!(
        voters(&model),
        ["demo-0", "demo-1", "demo-2", "demo-3", "demo-4"]
    );
    let adds: Vec<bool> = changes
        .iter()
        .filter_map(|c| match c {
            Call::MemberAdd { learner, .. } => Some(*learner),
            _ => None,
        })
        .collect();
    assert_eq!(adds, [true, true], "two members, each added as a learner");
    let promotes = changes
        .iter()
        .filter(|c| matches!(c, Call::MemberPromote { .. }))
        .count();
    assert_eq!(promotes, 2);
    let op = last.core.status.last_operation.unwrap();
    assert_eq!(
        (op.kind, op.phase),
        (OperationKind::Scale, OperationPhase::Succeeded)
    );
}

#[tokio::test]
async fn scaling_down_never_removes_the_leader_first() {
    let model = model(5);
    // Make the highest ordinal the leader.
    let id4 = model.id_of("demo-4").unwrap();
    let admin = model
        .connector()
        .connect(&[names().client_url("demo-0")], Duration::from_secs(1))
        .await
        .unwrap();
    let leader = model.leader().unwrap();
    let leader_name = model.member(leader).unwrap().name;
    admin
        .move_leader(&names().client_url(&leader_name), id4)
        .await
        .unwrap();
    assert_eq!(model.leader(), Some(id4));
    let clock = ManualClock::new(jiff::Timestamp::UNIX_EPOCH);
    let (changes, _) = run_until_converged(&model, 3, &clock).await;
    assert_eq!(voters(&model), ["demo-0", "demo-1", "demo-2"]);
    let first = changes
        .iter()
        .find(|c| {
            !matches!(
                c,
                Call::MemberList | Call::Status { .. } | Call::Connect { .. }
            )
        })
        .unwrap();
    assert!(
        matches!(first, Call::MoveLeader { .. }),
        "leadership moves before removal: {changes:?}"
    );
    assert!(
        model
            .leader()
            .is_some_and(|l| model.member(l).unwrap().name == "demo-0")
    );
}

#[tokio::test]
async fn a_down_member_blocks_growth_but_is_removed_first_on_shrink() {
    let model = model(3);
    let id1 = model.id_of("demo-1").unwrap();
    model.kill(id1).unwrap();
    let clock = ManualClock::new(jiff::Timestamp::UNIX_EPOCH);
    let mut p = pass(&model, 5, &clock).await;
    model.clear_calls();
    ScaleMembers.reconcile(&mut p).await.unwrap();
    assert!(
        model.changes().is_empty(),
        "nothing added while a voter is down"
    );
    assert!(
        p.core
            .status
            .operation
            .as_ref()
            .unwrap()
            .message
            .contains("2 of 3")
    );
    let mut p = pass(&model, 2, &clock).await;
    ScaleMembers.reconcile(&mut p).await.unwrap();
    let removed: Vec<u64> = model
        .changes()
        .iter()
        .filter_map(|c| match c {
            Call::MemberRemove { id } => Some(*id),
            _ => None,
        })
        .collect();
    assert_eq!(removed, [id1], "the dead member goes first");
}

/// Event reasons a pass queued.
fn events(p: &EtcdPass) -> Vec<String> {
    p.core
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Event { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

/// `DataLost=True`, as the peer controller reports it.
fn lost_status(member_id: u64) -> EtcdPeerStatus {
    EtcdPeerStatus {
        member_id: Some(format!("{member_id:x}")),
        claim_uid: Some("claim-1".into()),
        conditions: vec![Condition {
            type_: DATA_LOST.into(),
            status: "True".into(),
            reason: "ClaimDeleted".into(),
            message: "the member's data is lost: its claim demo-1-data was deleted".into(),
            last_transition_time: "1970-01-01T00:00:00Z".into(),
            observed_generation: Some(1),
        }],
        ..EtcdPeerStatus::default()
    }
}

/// The peers of the model's members, as `ReconcilePeers` would have created them.
fn peers_of(model: &EtcdModel, cluster: &EtcdCluster) -> Vec<EtcdPeer> {
    let names = names();
    let initial: Vec<steward_api::etcd::InitialMember> = model
        .members()
        .iter()
        .map(|m| steward_api::etcd::InitialMember {
            name: m.name.clone(),
            peer_url: m.peer_urls[0].clone(),
        })
        .collect();
    model
        .members()
        .iter()
        .map(|m| {
            let boot = Bootstrap {
                initial_cluster: initial.clone(),
                initial_cluster_state: InitialClusterState::New,
                initial_cluster_token: "uid-1".into(),
            };
            let mut peer = crate::etcd::build::member::peer(
                cluster,
                &m.name,
                boot,
                Some(format!("{:x}", m.id)),
                None,
            )
            .unwrap();
            peer.metadata.uid = Some(format!("peer-{}", names.ordinal(&m.name).unwrap()));
            peer
        })
        .collect()
}

fn cache(peers: &[EtcdPeer]) -> Store<EtcdPeer> {
    let (store, mut writer) = reflector::store();
    for p in peers {
        writer.apply_watcher_event(&watcher::Event::Apply(p.clone()));
    }
    store
}

/// The peers stored in the API server, as the cache would hold them.
async fn cache_from(client: &kube::Client) -> Store<EtcdPeer> {
    let api: Api<EtcdPeer> = Api::namespaced(client.clone(), "db");
    cache(&api.list(&ListParams::default()).await.unwrap().items)
}

#[tokio::test]
async fn a_member_that_lost_its_data_is_removed_and_replaced_by_a_new_member() {
    let plane = Embedded::start(&["db"]).await.unwrap();
    let client = plane.client.clone();
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), "db");
    let cluster = clusters
        .create(
            &PostParams::default(),
            &EtcdCluster::new("demo", EtcdClusterSpec::new(3, "3.4.23")),
        )
        .await
        .unwrap();
    let model = model(3);
    let peers: Api<EtcdPeer> = Api::namespaced(client.clone(), "db");
    for mut p in peers_of(&model, &cluster) {
        p.metadata.uid = None;
        peers.create(&PostParams::default(), &p).await.unwrap();
    }
    // demo-1's claim is gone: its peer says so, its Pod is down.
    let old_id = model.id_of("demo-1").unwrap();
    model.wipe(old_id).unwrap();
    model.elect();
    peers
        .patch_status(
            "demo-1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": lost_status(old_id) })),
        )
        .await
        .unwrap();
    let clock = ManualClock::new(jiff::Timestamp::UNIX_EPOCH);
    model.clear_calls();

    // A removal that fails for now is retried later, and starts no operation.
    model.fail_next_call(
        CallKind::MemberRemove,
        AdminError::NoQuorum("timed out".into()),
    );
    let mut p = pass_with(
        &model,
        &clock,
        client.clone(),
        cluster.clone(),
        cache_from(&client).await,
    )
    .await;
    let outcome = RecoverMembers.reconcile(&mut p).await.unwrap();
    assert!(matches!(outcome, Outcome::ContinueThenRequeue { .. }));
    assert!(model.changes().is_empty() && p.core.status.operation.is_none());
    assert!(peers.get_opt("demo-1").await.unwrap().is_some());
    model.clear_calls();

    // One pass: the member is removed, its peer deleted, and a new member added as a learner.
    let mut p = pass_with(
        &model,
        &clock,
        client.clone(),
        cluster.clone(),
        cache_from(&client).await,
    )
    .await;
    let outcome = RecoverMembers.reconcile(&mut p).await.unwrap();
    assert!(
        matches!(outcome, Outcome::ContinueThenRequeue { .. }),
        "{outcome:?}"
    );
    assert_eq!(model.changes(), [Call::MemberRemove { id: old_id }]);
    assert!(
        peers.get_opt("demo-1").await.unwrap().is_none(),
        "the lost peer is deleted"
    );
    let op = p.core.status.operation.clone().unwrap();
    assert_eq!(
        (op.kind, op.progress.as_str()),
        (OperationKind::Recover, "1/2")
    );
    assert_eq!(
        events(&p),
        [
            "MemberDataLost",
            "OperationStarted",
            "MemberRemoved",
            "PeerDeleted"
        ]
    );
    ScaleMembers.reconcile(&mut p).await.unwrap();
    assert!(
        matches!(
            model.changes().last(),
            Some(Call::MemberAdd { learner: true, .. })
        ),
        "{:?}",
        model.changes()
    );
    assert_eq!(
        p.core.status.operation.as_ref().unwrap().kind,
        OperationKind::Recover
    );

    // Later passes: the new member starts, catches up and is promoted; the recovery finishes.
    let mut status = p.core.status.clone();
    for _ in 0..10 {
        start_added(&model);
        let mut p = pass_with(
            &model,
            &clock,
            client.clone(),
            cluster.clone(),
            cache_from(&client).await,
        )
        .await;
        p.core.status = status;
        assert_eq!(
            RecoverMembers.reconcile(&mut p).await.unwrap(),
            Outcome::Continue,
            "nothing else is lost"
        );
        ScaleMembers.reconcile(&mut p).await.unwrap();
        status = p.core.status.clone();
        if status.operation.is_none() {
            break;
        }
    }
    let last = status.last_operation.unwrap();
    assert_eq!(
        (last.kind, last.phase, last.progress.as_str()),
        (OperationKind::Recover, OperationPhase::Succeeded, "2/2")
    );
    assert_eq!(voters(&model), ["demo-0", "demo-1", "demo-2"]);
    let new_id = model.id_of("demo-1").unwrap();
    assert_ne!(new_id, old_id, "a new member, not the old one");
    let promoted = model
        .changes()
        .iter()
        .filter(|c| matches!(c, Call::MemberPromote { id } if *id == new_id))
        .count();
    assert_eq!(promoted, 1);
    plane.server.shutdown().await;
}

#[tokio::test]
async fn lost_data_without_quorum_is_reported_and_nothing_is_removed() {
    let model = model(3);
    let clock = ManualClock::new(jiff::Timestamp::UNIX_EPOCH);
    let mut p = pass(&model, 3, &clock).await;
    let mut peers = peers_of(&model, &p.cluster);
    for name in ["demo-1", "demo-2"] {
        let id = model.id_of(name).unwrap();
        model.wipe(id).unwrap();
        let peer = peers
            .iter_mut()
            .find(|x| x.metadata.name.as_deref() == Some(name))
            .unwrap();
        peer.status = Some(lost_status(id));
    }
    p.stores.peers = cache(&peers).into();
    // What ObserveCluster sees: the member list needs a leader, which there is not.
    p.observed = None;
    model.clear_calls();
    let outcome = RecoverMembers.reconcile(&mut p).await.unwrap();
    let Outcome::ContinueThenRequeue { reason, .. } = outcome else {
        panic!("{outcome:?}");
    };
    assert!(
        reason.contains("demo-1, demo-2") && reason.contains("quorum"),
        "{reason}"
    );
    assert!(model.changes().is_empty());
    assert!(p.core.status.operation.is_none());
    // With a quorum but while another member is joining, the step waits too.
    let model = model_with_learner();
    let mut p = pass(&model, 4, &clock).await;
    let mut peers = peers_of(&model, &p.cluster);
    let id1 = model.id_of("demo-1").unwrap();
    model.wipe(id1).unwrap();
    model.elect();
    observe_into(&mut p, &model).await;
    peers[1].status = Some(lost_status(id1));
    p.stores.peers = cache(&peers).into();
    model.clear_calls();
    let outcome = RecoverMembers.reconcile(&mut p).await.unwrap();
    assert!(
        matches!(&outcome, Outcome::ContinueThenRequeue { reason, .. } if reason.contains("demo-3")),
        "{outcome:?}"
    );
    assert!(model.changes().is_empty());
}

/// Three voters and a learner `demo-3` that has not caught up.
fn model_with_learner() -> EtcdModel {
    let model = model(3);
    let names = names();
    let added = futures::executor::block_on(async {
        let admin = model
            .connector()
            .connect(&[names.client_url("demo-0")], Duration::from_secs(1))
            .await
            .unwrap();
        admin
            .member_add(&[names.peer_url("demo-3")], true)
            .await
            .unwrap()
    });
    model
        .start_member(added.member.id, "demo-3", &names.client_url("demo-3"))
        .unwrap();
    model
}

/// Member Pods the scheduler cannot place: the cluster is reported unavailable because of that,
/// with the scheduler's message — not as "no member Pod has an address yet".
#[tokio::test]
async fn member_pods_that_cannot_be_scheduled_are_the_reported_cause() {
    use crate::etcd::steps::observe_cluster::ObserveCluster;
    use crate::etcd::steps::update_status::UpdateStatus;
    // Decoded as the watch decodes it.
    use crate::resources::pods::CachedPod as Pod;
    let model = model(3);
    let clock = ManualClock::new("2026-03-01T12:00:00Z".parse().unwrap());
    let mut pass = pass(&model, 3, &clock).await;
    let message = "0/2 nodes are available: 2 node(s) had untolerated taint {dedicated: db}.";
    let (store, mut writer) = reflector::store::<Pod>();
    for n in 0..3 {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("demo-{n}"), "namespace": "db", "labels": {
                "app.kubernetes.io/name": "etcd", "app.kubernetes.io/instance": "demo",
                "app.kubernetes.io/component": "member", "steward.dev/etcd-peer": format!("demo-{n}")}},
            "spec": {"containers": [{"name": "etcd", "image": "etcd"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled",
                "status": "False", "reason": "Unschedulable", "message": message}]}
        }))
        .unwrap();
        writer.apply_watcher_event(&watcher::Event::Apply(pod));
    }
    pass.stores.pods = store.into();
    pass.observed = None;
    ObserveCluster.reconcile(&mut pass).await.unwrap();
    UpdateStatus.reconcile(&mut pass).await.unwrap();
    let available = pass
        .core
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Available")
        .unwrap();
    assert_eq!(
        (available.status.as_str(), available.reason.as_str()),
        ("False", "Unschedulable")
    );
    assert!(
        available.message.contains("demo-0") && available.message.contains(message),
        "{}",
        available.message
    );
    let unplaced = pass.unschedulable.clone().unwrap();
    assert!(unplaced.contains("demo-2: 0/2 nodes"), "{unplaced}");
}

/// Issue 33: two of three members too slow to answer their status call (a member starved of
/// CPU) while the linearizable member list went through. The cluster has a quorum, and status
/// says so (`quorate` never flips on a slow answer); neither a shrink nor a growth acts on the
/// members that only answered late. Red before the fix: `quorate` was `false` here.
#[tokio::test]
async fn slow_status_answers_never_read_as_a_lost_quorum_and_nothing_acts_on_them() {
    use crate::etcd::steps::update_status::UpdateStatus;
    let model = model(3);
    let clock = ManualClock::new("2026-03-01T12:00:00Z".parse().unwrap());
    let slow = || AdminError::Unavailable("no answer within 1s".into());
    let starve_two = || {
        for _ in 0..2 {
            model.fail_next_call(CallKind::Status, slow());
        }
    };
    starve_two();
    let mut p = pass(&model, 3, &clock).await;
    let observed = p.observed.clone().unwrap();
    assert_eq!(observed.statuses.len(), 1, "two status calls timed out");
    assert_eq!(observed.healthy_voters(), 1);
    assert!(
        observed.quorate(),
        "the linearizable member list proved a quorum"
    );
    UpdateStatus.reconcile(&mut p).await.unwrap();
    assert_eq!(p.status.quorate, Some(true));
    let condition = |t: &str| {
        p.core
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == t)
            .cloned()
            .unwrap()
    };
    let quorate = condition("Quorate");
    assert_eq!(
        (quorate.status.as_str(), quorate.reason.as_str()),
        ("True", "QuorumConfirmed"),
        "{}",
        quorate.message
    );
    assert!(quorate.message.contains("1 of 3"), "{}", quorate.message);
    assert_eq!(condition("Available").status, "True");
    // Neither a shrink nor a growth acts on members that only answered late.
    for replicas in [2, 4] {
        starve_two();
        let mut p = pass(&model, replicas, &clock).await;
        model.clear_calls();
        ScaleMembers.reconcile(&mut p).await.unwrap();
        assert!(
            model.changes().is_empty(),
            "scale to {replicas}: {:?}",
            model.changes()
        );
    }
    // Once they answer again, a shrink goes ahead as usual.
    let mut p = pass(&model, 2, &clock).await;
    model.clear_calls();
    ScaleMembers.reconcile(&mut p).await.unwrap();
    assert!(
        model
            .changes()
            .iter()
            .any(|c| matches!(c, Call::MemberRemove { .. } | Call::MoveLeader { .. })),
        "{:?}",
        model.changes()
    );
}
