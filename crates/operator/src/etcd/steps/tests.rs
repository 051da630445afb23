//! Step tests: `ScaleMembers` and `ReconcilePeers`' planning driven against the in-memory etcd
//! model, pass after pass, the way the controller would run them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::reflector;
use steward_api::common::{OperationKind, OperationPhase};
use steward_api::etcd::{EtcdCluster, EtcdClusterSpec};

use crate::clock::{Clock, ManualClock};
use crate::config::{TimeoutArgs, WebhookArgs};
use crate::etcd::admin::EtcdConnector;
use crate::etcd::admin::model::{Call, EtcdModel, InitialMember};
use crate::etcd::names::ClusterNames;
use crate::etcd::steps::observe_cluster::observe;
use crate::etcd::steps::scale_members::ScaleMembers;
use crate::etcd::{EtcdPass, EtcdStores};
use crate::metrics::Metrics;
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

async fn pass(model: &EtcdModel, replicas: i32, clock: &ManualClock) -> EtcdPass {
    let client =
        kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
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
    let mut cluster = EtcdCluster::new("demo", EtcdClusterSpec::new(replicas, "3.4.23"));
    cluster.metadata.namespace = Some("db".into());
    cluster.metadata.uid = Some("uid-1".into());
    cluster.metadata.generation = Some(1);
    let core = PassCore::new("etcd", "db", "demo", 1, clock.now(), Default::default());
    let stores = EtcdStores {
        services: reflector::store().0,
        pods: reflector::store().0,
        claims: reflector::store().0,
        peers: reflector::store().0,
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
