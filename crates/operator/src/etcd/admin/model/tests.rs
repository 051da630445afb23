#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

const T: Duration = Duration::from_secs(1);

fn eps(model: &EtcdModel) -> Vec<String> {
    model
        .members()
        .iter()
        .flat_map(|m| m.client_urls.clone())
        .collect()
}

async fn admin(model: &EtcdModel) -> Box<dyn EtcdAdmin> {
    model.connector().connect(&eps(model), T).await.unwrap()
}

fn url(name: &str) -> Vec<String> {
    vec![format!("http://{name}:2380")]
}

fn three() -> (EtcdModel, [u64; 3]) {
    let m = EtcdModel::with_names(&["a", "b", "c"]);
    let ids = [
        m.id_of("a").unwrap(),
        m.id_of("b").unwrap(),
        m.id_of("c").unwrap(),
    ];
    (m, ids)
}

#[tokio::test]
async fn bootstrap_lists_started_voters_and_agrees_on_leader() {
    let (m, [a, ..]) = three();
    let admin = admin(&m).await;
    let list = admin.member_list().await.unwrap();
    assert_eq!(list.len(), 3);
    assert!(list.iter().all(|x| x.is_started() && !x.is_learner));
    assert!(
        list.windows(2).all(|w| w[0].id < w[1].id),
        "sorted by ID like etcd"
    );
    assert_eq!(m.leader(), Some(a));
    for e in eps(&m) {
        let s = admin.status(&e).await.unwrap();
        assert_eq!(s.leader, a);
        assert_eq!(s.version, "3.4.23");
        assert_eq!(s.raft_index, m.commit_index());
        assert!(s.errors.is_empty());
    }
}

#[tokio::test]
async fn connect_needs_an_up_member() {
    let (m, [a, b, c]) = three();
    for id in [a, b, c] {
        m.kill(id).unwrap();
    }
    let err = m.connector().connect(&eps(&m), T).await.err().unwrap();
    assert!(matches!(err, AdminError::Unavailable(_)));
    let err = m
        .connector()
        .connect(&["http://nowhere:2379".to_owned()], T)
        .await
        .err();
    assert!(matches!(err, Some(AdminError::Unavailable(_))));
}

#[tokio::test]
async fn without_quorum_cluster_calls_fail_but_status_answers() {
    let (m, [a, b, c]) = three();
    let admin = admin(&m).await;
    m.kill(b).unwrap();
    m.kill(c).unwrap();
    assert_eq!(m.leader(), None);
    assert!(matches!(
        admin.member_list().await,
        Err(AdminError::NoQuorum(_))
    ));
    // A learner add needs all voters connected: refused before quorum is even needed.
    assert!(matches!(
        admin.member_add(&url("d"), true).await,
        Err(AdminError::Unhealthy(_))
    ));
    // Removing needs a leader.
    assert!(matches!(
        admin.member_remove(b).await,
        Err(AdminError::NoQuorum(_))
    ));
    let s = admin.status("http://a:2379").await.unwrap();
    assert_eq!(s.member_id, a);
    assert_eq!(s.leader, 0);
    assert_eq!(s.errors, vec![text::NO_LEADER.to_owned()]);
    // Quorum back: a leader again after the election.
    m.start(b).unwrap();
    assert!(matches!(
        admin.member_list().await,
        Err(AdminError::NoQuorum(_))
    ));
    m.elect();
    assert!(m.leader().is_some());
    assert!(admin.member_list().await.is_ok());
}

#[tokio::test]
async fn learner_add_start_catch_up_promote_remove() {
    let (m, _) = three();
    let admin = admin(&m).await;
    let added = admin.member_add(&url("d"), true).await.unwrap();
    let d = added.member.id;
    assert!(added.member.is_learner && !added.member.is_started());
    assert_eq!(added.members.len(), 4);
    assert!(added.members.iter().any(|x| x.id == d));
    // Not started: not in sync.
    assert_eq!(
        admin.member_promote(d).await,
        Err(AdminError::LearnerNotReady(d))
    );
    m.start_member(d, "d", "http://d:2379").unwrap();
    assert_eq!(
        admin.member_promote(d).await,
        Err(AdminError::LearnerNotReady(d))
    );
    m.catch_up(d).unwrap();
    admin.member_promote(d).await.unwrap();
    assert!(!m.member(d).unwrap().is_learner);
    // Promoting again: etcd says it is not a learner.
    assert!(matches!(
        admin.member_promote(d).await,
        Err(AdminError::Other(_))
    ));
    admin.member_remove(d).await.unwrap();
    assert_eq!(m.members().len(), 3);
    assert_eq!(
        admin.member_remove(d).await,
        Err(AdminError::MemberNotFound(d))
    );
    assert_eq!(
        admin.member_promote(d).await,
        Err(AdminError::MemberNotFound(d))
    );
}

#[tokio::test]
async fn one_learner_at_most_and_peer_urls_unique() {
    let (m, _) = three();
    let admin = admin(&m).await;
    admin.member_add(&url("d"), true).await.unwrap();
    assert_eq!(
        admin.member_add(&url("e"), true).await,
        Err(AdminError::TooManyLearners)
    );
    assert!(matches!(
        admin.member_add(&url("d"), false).await,
        Err(AdminError::PeerUrlExists(_))
    ));
    assert!(matches!(
        admin.member_add(&url("a"), true).await,
        Err(AdminError::PeerUrlExists(_))
    ));
    assert!(matches!(
        admin.member_add(&["d:2380".to_owned()], false).await,
        Err(AdminError::Other(_))
    ));
    // A voter may still be added next to an unstarted learner (the learner is not checked).
    admin.member_add(&url("e"), false).await.unwrap();
    assert_eq!(m.members().len(), 5);
}

#[tokio::test]
async fn voter_add_needs_started_voters_and_connected_peers() {
    let (m, [_, b, _]) = three();
    let admin = admin(&m).await;
    // 3 started voters -> 4 voters, quorum 3: allowed; the new one never starts.
    let d = admin.member_add(&url("d"), false).await.unwrap().member.id;
    // Another add: voter d is not connected.
    assert!(matches!(
        admin.member_add(&url("e"), true).await,
        Err(AdminError::Unhealthy(_))
    ));
    m.start_member(d, "d", "http://d:2379").unwrap();
    // Started, but not connected for 5 s yet.
    assert!(matches!(
        admin.member_add(&url("e"), true).await,
        Err(AdminError::Unhealthy(_))
    ));
    m.settle();
    admin.member_add(&url("e"), true).await.unwrap();
    // A down voter blocks adds of either kind.
    m.kill(b).unwrap();
    assert!(matches!(
        admin.member_add(&url("f"), false).await,
        Err(AdminError::Unhealthy(_))
    ));

    // 1 started voter: adding a second is etcd's restore case, allowed; the cluster has no
    // quorum until the new member starts.
    let solo = EtcdModel::with_names(&["a"]);
    let sa = admin_on(&solo).await;
    let n = sa.member_add(&url("b"), false).await.unwrap().member.id;
    assert_eq!(solo.leader(), None);
    assert!(matches!(
        sa.member_list().await,
        Err(AdminError::NoQuorum(_))
    ));
    solo.start_member(n, "b", "http://b:2379").unwrap();
    solo.elect();
    assert!(solo.leader().is_some());
    // 2 voters + 1 never started, one of the 2 down: adding a voter needs 3 started of 4.
    let pair = EtcdModel::with_names(&["a", "b"]);
    let pa = admin_on(&pair).await;
    pa.member_add(&url("c"), false).await.unwrap();
    pair.kill(pair.id_of("b").unwrap()).unwrap();
    let err = pa.member_add(&url("d"), false).await;
    assert_eq!(
        err,
        Err(AdminError::Unhealthy(text::NOT_ENOUGH_STARTED.to_owned()))
    );
}

async fn admin_on(model: &EtcdModel) -> Box<dyn EtcdAdmin> {
    admin(model).await
}

#[tokio::test]
async fn remove_keeps_a_connected_quorum() {
    let (m, [a, b, c]) = three();
    let admin = admin(&m).await;
    m.kill(c).unwrap();
    // Removing a live voter with another one down would leave 1 of 2 up.
    assert!(matches!(
        admin.member_remove(b).await,
        Err(AdminError::Unhealthy(_))
    ));
    assert!(matches!(
        admin.member_remove(a).await,
        Err(AdminError::Unhealthy(_))
    ));
    // Removing the down member itself is safe.
    admin.member_remove(c).await.unwrap();
    assert_eq!(m.members().len(), 2);
    // 2 voters, both up: removing one leaves 1 of 1.
    admin.member_remove(b).await.unwrap();
    assert_eq!(m.members().len(), 1);
    assert_eq!(m.leader(), Some(a));
}

#[tokio::test]
async fn remove_needs_started_voters_and_settled_peers() {
    let (m, [a, b, _]) = three();
    let admin = admin(&m).await;
    // 4 voters with d never started: removing a leaves b, c, d with 2 started of quorum 2.
    let d = admin.member_add(&url("d"), false).await.unwrap().member.id;
    admin.member_remove(a).await.unwrap();
    assert_eq!(m.leader(), None, "the leader was removed");
    m.elect();
    // Now b, c, d: removing b leaves c, d with 1 started < quorum 2.
    assert!(matches!(
        admin.member_remove(b).await,
        Err(AdminError::Unhealthy(_))
    ));
    // Removing the unstarted one is fine.
    admin.member_remove(d).await.unwrap();
    // A freshly restarted member does not count as connected yet.
    let c = m.id_of("c").unwrap();
    m.kill(c).unwrap();
    m.start(c).unwrap();
    m.elect(); // stopping c had cost the quorum
    assert!(matches!(
        admin.member_remove(b).await,
        Err(AdminError::Unhealthy(_))
    ));
    m.settle();
    admin.member_remove(b).await.unwrap();
    // Learners are removed without checks.
    let (m2, [_, b2, c2]) = three();
    let admin2 = admin_on(&m2).await;
    let l = admin2.member_add(&url("l"), true).await.unwrap().member.id;
    m2.kill(b2).unwrap();
    m2.kill(c2).unwrap();
    // No quorum: still cannot commit.
    assert!(matches!(
        admin2.member_remove(l).await,
        Err(AdminError::NoQuorum(_))
    ));
    m2.start(b2).unwrap();
    m2.elect();
    admin2.member_remove(l).await.unwrap();
}

#[tokio::test]
async fn removing_or_killing_the_leader_elects_another_voter() {
    let (m, [a, b, c]) = three();
    let admin = admin(&m).await;
    let term = m.term();
    m.kill(a).unwrap();
    // The election takes a while: calls made meanwhile fail.
    assert_eq!(m.leader(), None);
    assert!(matches!(
        admin.member_list().await,
        Err(AdminError::NoQuorum(_))
    ));
    let sb = admin.status("http://b:2379").await.unwrap();
    assert_eq!(
        (sb.leader, sb.errors),
        (0, vec![text::NO_LEADER.to_owned()])
    );
    m.elect();
    let l = m.leader().unwrap();
    assert!(l == b || l == c);
    assert!(m.term() > term);
    m.start(a).unwrap();
    m.settle();
    assert_eq!(m.leader(), Some(l), "a restarted member does not take over");
    admin.member_remove(l).await.unwrap();
    assert_eq!(m.leader(), None);
    m.elect();
    let l2 = m.leader().unwrap();
    assert_ne!(l2, l);
    assert!(m.member(l2).is_some());
}

#[tokio::test]
async fn promote_needs_a_caught_up_learner() {
    let (m, _) = three();
    let admin = admin(&m).await;
    let l = admin.member_add(&url("l"), true).await.unwrap().member.id;
    m.start_member(l, "l", "http://l:2379").unwrap();
    m.catch_up(l).unwrap();
    // Down while writes happen: falls behind the leader.
    m.kill(l).unwrap();
    m.write(100);
    assert_eq!(
        admin.member_promote(l).await,
        Err(AdminError::LearnerNotReady(l))
    );
    // Restarted with its data, it catches up.
    m.start(l).unwrap();
    admin.member_promote(l).await.unwrap();
    assert_eq!(m.members().iter().filter(|x| !x.is_learner).count(), 4);
}

#[tokio::test]
async fn promote_needs_a_leader() {
    // Etcd's restore case: a second voter added to a 1-member cluster; until it starts
    // there is no quorum, so nothing can be promoted (the leader decides readiness).
    let solo = EtcdModel::with_names(&["a"]);
    let admin = admin(&solo).await;
    let b = admin.member_add(&url("b"), false).await.unwrap().member.id;
    assert_eq!(solo.leader(), None);
    assert!(matches!(
        admin.member_promote(b).await,
        Err(AdminError::NoQuorum(_))
    ));
    solo.start_member(b, "b", "http://b:2379").unwrap();
    solo.elect();
    assert!(matches!(
        admin.member_promote(b).await,
        Err(AdminError::Other(_))
    ));
}

#[tokio::test]
async fn status_reports_per_endpoint_and_fails_on_down_or_wiped_members() {
    let (m, [a, b, c]) = three();
    let admin = admin(&m).await;
    m.set_version("3.4.24");
    m.set_member_version(c, "3.5.0").unwrap();
    m.set_alarms(b, &["NOSPACE"]).unwrap();
    let sb = admin.status("http://b:2379").await.unwrap();
    assert_eq!(
        (sb.member_id, sb.leader, sb.version.as_str()),
        (b, a, "3.4.24")
    );
    assert_eq!(sb.errors, vec!["NOSPACE".to_owned()]);
    assert_eq!(
        admin.status("http://c:2379").await.unwrap().version,
        "3.5.0"
    );
    m.wipe(c).unwrap();
    assert!(matches!(
        admin.status("http://c:2379").await,
        Err(AdminError::Unavailable(_))
    ));
    assert!(m.start(c).is_err(), "a wiped member cannot rejoin");
    assert!(matches!(
        admin.status("http://x:2379").await,
        Err(AdminError::Unavailable(_))
    ));
    // The wiped member is still listed (and started) until removed.
    assert!(
        admin
            .member_list()
            .await
            .unwrap()
            .iter()
            .any(|x| x.id == c && x.is_started())
    );
    admin.member_remove(c).await.unwrap();
    // Its peer URL is free again.
    admin.member_add(&url("c"), true).await.unwrap();
}

#[tokio::test]
async fn learner_status_and_learner_only_endpoints() {
    let (m, _) = three();
    let admin = admin(&m).await;
    let l = admin.member_add(&url("l"), true).await.unwrap().member.id;
    m.start_member(l, "l", "http://l:2379").unwrap();
    let s = admin.status("http://l:2379").await.unwrap();
    assert!(s.is_learner);
    assert!(s.raft_index < m.commit_index(), "a new learner lags");
    // Connected to the learner only: it answers status but refuses cluster calls.
    let only = m
        .connector()
        .connect(&["http://l:2379".to_owned()], T)
        .await
        .unwrap();
    assert!(only.status("http://l:2379").await.is_ok());
    assert!(matches!(
        only.member_list().await,
        Err(AdminError::Unavailable(_))
    ));
}

#[tokio::test]
async fn move_leader_rules() {
    let (m, [a, b, c]) = three();
    let admin = admin(&m).await;
    let l = admin.member_add(&url("l"), true).await.unwrap().member.id;
    m.start_member(l, "l", "http://l:2379").unwrap();
    // Must be sent to the leader.
    assert_eq!(
        admin.move_leader("http://b:2379", c).await,
        Err(AdminError::Other(text::NOT_LEADER.to_owned()))
    );
    assert_eq!(
        admin.move_leader("http://a:2379", l).await,
        Err(AdminError::IsLearner(l))
    );
    assert_eq!(
        admin.move_leader("http://a:2379", 42).await,
        Err(AdminError::MemberNotFound(42))
    );
    admin.move_leader("http://a:2379", a).await.unwrap();
    let term = m.term();
    admin.move_leader("http://a:2379", b).await.unwrap();
    assert_eq!(m.leader(), Some(b));
    assert!(m.term() > term);
    assert_eq!(admin.status("http://c:2379").await.unwrap().leader, b);
    m.kill(c).unwrap();
    assert!(matches!(
        admin.move_leader("http://b:2379", c).await,
        Err(AdminError::NoQuorum(_))
    ));
    assert!(matches!(
        admin.move_leader("http://c:2379", a).await,
        Err(AdminError::Unavailable(_))
    ));
}

#[tokio::test]
async fn injected_failures_and_call_log() {
    let (m, [_, b, _]) = three();
    let conn = m.connector();
    m.fail_next_call(
        CallKind::Connect,
        AdminError::Unavailable("boom".to_owned()),
    );
    assert!(conn.connect(&eps(&m), T).await.is_err());
    let admin = conn.connect(&eps(&m), T).await.unwrap();
    m.fail_next(AdminError::NoQuorum("injected".to_owned()));
    assert_eq!(
        admin.member_remove(b).await,
        Err(AdminError::NoQuorum("injected".to_owned()))
    );
    assert!(m.member(b).is_some(), "an injected failure has no effect");
    m.fail_next_call(CallKind::MemberAdd, AdminError::TooManyLearners);
    admin.member_list().await.unwrap();
    assert_eq!(
        admin.member_add(&url("d"), true).await,
        Err(AdminError::TooManyLearners)
    );
    admin.member_add(&url("d"), true).await.unwrap();
    admin.member_remove(b).await.unwrap();

    let kinds: Vec<CallKind> = m.calls().iter().map(Call::kind).collect();
    assert_eq!(
        kinds,
        [
            CallKind::Connect,
            CallKind::Connect,
            CallKind::MemberRemove,
            CallKind::MemberList,
            CallKind::MemberAdd,
            CallKind::MemberAdd,
            CallKind::MemberRemove,
        ]
    );
    assert_eq!(
        m.changes(),
        vec![
            Call::MemberAdd {
                peer_urls: url("d"),
                learner: true
            },
            Call::MemberRemove { id: b },
        ]
    );
    assert!(m.call_records()[0].result.is_err());
    m.clear_calls();
    assert!(m.calls().is_empty());
}
