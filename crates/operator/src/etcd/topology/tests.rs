use super::*;

fn names() -> ClusterNames {
    ClusterNames::new("demo", "db", "cluster.local")
}

fn member(id: u64, ordinal: u32, learner: bool, started: bool) -> Member {
    let n = names();
    let name = n.peer(ordinal);
    Member {
        id,
        name: if started { name.clone() } else { String::new() },
        peer_urls: vec![n.peer_url(&name)],
        client_urls: if started {
            vec![n.client_url(&name)]
        } else {
            vec![]
        },
        is_learner: learner,
    }
}

fn status(id: u64, leader: u64) -> EndpointStatus {
    EndpointStatus {
        member_id: id,
        leader,
        version: "3.4.23".into(),
        db_size: 1,
        raft_index: 10,
        raft_term: 2,
        is_learner: false,
        errors: vec![],
    }
}

fn cluster(n: u32, leader: u64, down: &[u64]) -> Observed {
    let members: Vec<Member> = (0..n)
        .map(|i| member(u64::from(i) + 1, i, false, true))
        .collect();
    let statuses = members
        .iter()
        .filter(|m| !down.contains(&m.id))
        .map(|m| (m.id, status(m.id, leader)))
        .collect();
    Observed {
        members,
        statuses,
        quorum_confirmed: false,
    }
}

#[test]
fn quorum_math() {
    assert_eq!(
        (quorum(1), quorum(2), quorum(3), quorum(4), quorum(5)),
        (1, 2, 2, 3, 3)
    );
    assert!(cluster(3, 1, &[3]).quorate());
    assert!(!cluster(3, 1, &[2, 3]).quorate());
    assert!(!cluster(3, 0, &[]).quorate(), "no leader, no quorum");
}

#[test]
fn a_name_stranded_on_a_lost_node_is_not_used_again() {
    // Three wanted, two left after the member on a lost Node was removed: its name (demo-1)
    // still has a Terminating Pod there, so the replacement takes the next free one.
    let mut obs = cluster(3, 1, &[]);
    obs.members.retain(|m| m.name != "demo-1");
    let stranded = vec!["demo-1".to_owned()];
    assert_eq!(
        plan_members(&obs, 3, &names(), &stranded),
        MemberAction::Add {
            name: "demo-3".into(),
            peer_url: "http://demo-3.demo.db.svc.cluster.local:2380".into()
        }
    );
    assert!(matches!(
        plan_members(&obs, 3, &names(), &[]),
        MemberAction::Add { name, .. } if name == "demo-1"
    ));
}

#[test]
fn scale_up_adds_one_learner_with_the_lowest_free_name() {
    let obs = cluster(3, 1, &[]);
    assert_eq!(
        plan_members(&obs, 5, &names(), &[]),
        MemberAction::Add {
            name: "demo-3".into(),
            peer_url: "http://demo-3.demo.db.svc.cluster.local:2380".into()
        }
    );
}

#[test]
fn nothing_is_added_while_a_voter_is_down() {
    assert!(matches!(
        plan_members(&cluster(3, 1, &[2]), 5, &names(), &[]),
        MemberAction::Wait(m) if m.contains("2 of 3")
    ));
}

#[test]
fn an_added_member_is_waited_for_then_promoted() {
    let mut obs = cluster(3, 1, &[]);
    obs.members.push(member(9, 3, true, false));
    assert_eq!(
        plan_members(&obs, 5, &names(), &[]),
        MemberAction::WaitForStart {
            name: "demo-3".into()
        }
    );
    obs.members[3] = member(9, 3, true, true);
    assert!(
        matches!(plan_members(&obs, 5, &names(), &[]), MemberAction::Wait(_)),
        "not answering yet"
    );
    obs.statuses.insert(9, status(9, 1));
    assert_eq!(
        plan_members(&obs, 5, &names(), &[]),
        MemberAction::Promote {
            id: 9,
            name: "demo-3".into()
        }
    );
    // Scaled back before it started: the learner goes.
    obs.members[3] = member(9, 3, true, false);
    assert_eq!(
        plan_members(&obs, 3, &names(), &[]),
        MemberAction::Remove {
            id: 9,
            name: "demo-3".into()
        }
    );
}

#[test]
fn scale_down_removes_the_highest_non_leader_after_moving_leadership() {
    let obs = cluster(5, 2, &[]);
    assert_eq!(
        plan_members(&obs, 3, &names(), &[]),
        MemberAction::Remove {
            id: 5,
            name: "demo-4".into()
        }
    );
    let obs = cluster(5, 5, &[]);
    assert_eq!(
        plan_members(&obs, 3, &names(), &[]),
        MemberAction::MoveLeader { from: 5, to: 1 }
    );
}

#[test]
fn an_unhealthy_member_is_removed_first_and_quorum_is_kept() {
    let obs = cluster(5, 1, &[2]);
    assert_eq!(
        plan_members(&obs, 3, &names(), &[]),
        MemberAction::Remove {
            id: 2,
            name: "demo-1".into()
        }
    );
    // 3 members, 1 down, scale to 2: removing a healthy one would leave 1 of quorum 2.
    let obs = cluster(3, 1, &[]);
    let mut obs2 = obs.clone();
    obs2.statuses.remove(&1);
    obs2.statuses.remove(&2);
    assert!(matches!(
        plan_members(&obs2, 1, &names(), &[]),
        MemberAction::Wait(_)
    ));
    assert_eq!(
        plan_members(&obs, 3, &names(), &[]),
        MemberAction::Converged
    );
}

fn view(name: &str, state: InitialClusterState, initial: &[&str]) -> PeerView {
    let n = names();
    PeerView {
        name: name.into(),
        bootstrap: Bootstrap {
            initial_cluster: initial
                .iter()
                .map(|p| InitialMember {
                    name: (*p).into(),
                    peer_url: n.peer_url(p),
                })
                .collect(),
            initial_cluster_state: state,
            initial_cluster_token: "t".into(),
        },
    }
}

#[test]
fn bootstrap_creates_all_peers_as_a_new_cluster() {
    let plan = plan_peers(None, &[], 3, &names(), "t");
    assert_eq!(plan.create.len(), 3);
    assert!(plan.create.iter().all(|p| p.bootstrap.initial_cluster_state
        == InitialClusterState::New
        && p.bootstrap.initial_cluster.len() == 3));
    // Each bootstrap peer knows the ID etcd will give its member.
    let n = names();
    for p in &plan.create {
        let id = bootstrap_member_id(&[n.peer_url(&p.name)], "t");
        assert_eq!(p.member_id, member_id_hex(id));
    }
    let ids: std::collections::BTreeSet<&str> =
        plan.create.iter().map(|p| p.member_id.as_str()).collect();
    assert_eq!(ids.len(), 3);
    // Interrupted after one peer: the same initial cluster completes it.
    let one = [view(
        "demo-0",
        InitialClusterState::New,
        &["demo-0", "demo-1", "demo-2"],
    )];
    let plan = plan_peers(None, &one, 5, &names(), "t");
    let created: Vec<&str> = plan.create.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(created, ["demo-1", "demo-2"]);
    assert_eq!(
        plan.create[0].member_id,
        member_id_hex(bootstrap_member_id(&[names().peer_url("demo-1")], "t"))
    );
}

#[test]
fn an_unreachable_existing_cluster_gets_no_new_peers() {
    let peers = [
        view("demo-0", InitialClusterState::New, &["demo-0"]),
        view(
            "demo-1",
            InitialClusterState::Existing,
            &["demo-0", "demo-1"],
        ),
    ];
    let plan = plan_peers(None, &peers, 3, &names(), "t");
    assert!(plan.create.is_empty() && plan.delete.is_empty());
    assert!(plan.held.is_some());
    // Not quorate counts as unreachable: nothing is deleted either.
    let obs = cluster(3, 1, &[2, 3]);
    let plan = plan_peers(Some(&obs), &peers, 3, &names(), "t");
    assert!(plan.delete.is_empty());
}

#[test]
fn the_member_list_decides_which_peers_exist() {
    let mut obs = cluster(3, 1, &[]);
    obs.members.push(member(9, 3, true, false));
    let peers = [
        view(
            "demo-0",
            InitialClusterState::New,
            &["demo-0", "demo-1", "demo-2"],
        ),
        view(
            "demo-1",
            InitialClusterState::New,
            &["demo-0", "demo-1", "demo-2"],
        ),
        view(
            "demo-2",
            InitialClusterState::New,
            &["demo-0", "demo-1", "demo-2"],
        ),
        view("demo-7", InitialClusterState::Existing, &["demo-7"]),
    ];
    let plan = plan_peers(Some(&obs), &peers, 4, &names(), "t");
    assert_eq!(plan.delete, ["demo-7"]);
    assert_eq!(plan.create.len(), 1);
    let NewPeer {
        name,
        bootstrap: boot,
        member_id,
    } = &plan.create[0];
    assert_eq!(name, "demo-3");
    assert_eq!(member_id, "9", "a joining peer runs the member etcd added");
    assert_eq!(boot.initial_cluster_state, InitialClusterState::Existing);
    let initial: Vec<&str> = boot
        .initial_cluster
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(initial, ["demo-0", "demo-1", "demo-2", "demo-3"]);
}

#[test]
fn bootstrap_member_ids_match_etcd() {
    // Read from etcd 3.4.23 started with `--initial-cluster
    // demo-0=http://demo-0.demo.db.svc.cluster.local:2380 --initial-cluster-token uid-1`
    // (`etcdctl member list`: 14131045141145053370).
    let url = names().peer_url("demo-0");
    assert_eq!(
        bootstrap_member_id(std::slice::from_ref(&url), "uid-1"),
        14_131_045_141_145_053_370
    );
    assert_eq!(
        member_id_hex(bootstrap_member_id(std::slice::from_ref(&url), "uid-1")),
        "c41b8eafb6f5e8ba"
    );
    // The token separates clusters; the URLs are sorted first.
    assert_ne!(
        bootstrap_member_id(std::slice::from_ref(&url), "uid-2"),
        bootstrap_member_id(std::slice::from_ref(&url), "uid-1")
    );
    let (a, b) = ("http://a:2380".to_owned(), "http://b:2380".to_owned());
    assert_eq!(
        bootstrap_member_id(&[a.clone(), b.clone()], "t"),
        bootstrap_member_id(&[b, a], "t")
    );
}

fn lost(name: &str, id: u64) -> LostPeer {
    LostPeer {
        name: name.into(),
        member_id: Some(id),
    }
}

#[test]
fn nothing_lost_nothing_to_do() {
    assert_eq!(
        plan_recovery(Some(&cluster(3, 1, &[])), &[], 3, &names()),
        Recovery::Idle
    );
}

#[test]
fn a_lost_member_that_no_longer_answers_is_removed() {
    let obs = cluster(3, 1, &[2]);
    assert_eq!(
        plan_recovery(Some(&obs), &[lost("demo-1", 2)], 3, &names()),
        Recovery::Remove {
            id: 2,
            name: "demo-1".into()
        }
    );
    // Still answering (its Pod has not stopped yet): wait.
    let obs = cluster(3, 1, &[]);
    assert!(matches!(
        plan_recovery(Some(&obs), &[lost("demo-1", 2)], 3, &names()),
        Recovery::Wait(m) if m.contains("still answers")
    ));
}

#[test]
fn one_member_at_a_time_lowest_ordinal_first() {
    let obs = cluster(5, 1, &[3, 5]);
    let plan = plan_recovery(
        Some(&obs),
        &[lost("demo-4", 5), lost("demo-2", 3)],
        5,
        &names(),
    );
    assert_eq!(
        plan,
        Recovery::Remove {
            id: 3,
            name: "demo-2".into()
        }
    );
}

#[test]
fn no_removal_while_another_membership_change_is_in_flight() {
    let mut obs = cluster(3, 1, &[2]);
    obs.members.push(member(9, 3, true, false));
    assert!(matches!(
        plan_recovery(Some(&obs), &[lost("demo-1", 2)], 4, &names()),
        Recovery::Wait(m) if m.contains("demo-3")
    ));
    // A started learner too.
    obs.members[3] = member(9, 3, true, true);
    assert!(matches!(
        plan_recovery(Some(&obs), &[lost("demo-1", 2)], 4, &names()),
        Recovery::Wait(_)
    ));
    // But a learner that itself lost its data goes (learners never count for quorum).
    let mut obs = cluster(3, 1, &[]);
    obs.members.push(member(9, 3, true, true));
    assert_eq!(
        plan_recovery(Some(&obs), &[lost("demo-3", 9)], 4, &names()),
        Recovery::Remove {
            id: 9,
            name: "demo-3".into()
        }
    );
}

#[test]
fn without_quorum_or_with_a_single_member_steward_cannot_act() {
    // Two of three lost: no quorum, nothing can be removed.
    let obs = cluster(3, 1, &[2, 3]);
    let plan = plan_recovery(
        Some(&obs),
        &[lost("demo-1", 2), lost("demo-2", 3)],
        3,
        &names(),
    );
    assert!(
        matches!(&plan, Recovery::Blocked(m) if m.contains("demo-1, demo-2") && m.contains("not quorate")),
        "{plan:?}"
    );
    // Unreachable.
    assert!(matches!(
        plan_recovery(None, &[lost("demo-1", 2)], 3, &names()),
        Recovery::Blocked(m) if m.contains("unreachable")
    ));
    // The only member: a restore is needed.
    let obs = cluster(1, 1, &[1]);
    for observed in [Some(&obs), None] {
        assert!(matches!(
            plan_recovery(observed, &[lost("demo-0", 1)], 1, &names()),
            Recovery::Blocked(m) if m.contains("only member") && m.contains("backup")
        ));
    }
}

#[test]
fn a_lost_peer_whose_member_is_gone_or_replaced_is_deleted() {
    let obs = cluster(2, 1, &[]);
    assert_eq!(
        plan_recovery(Some(&obs), &[lost("demo-2", 3)], 3, &names()),
        Recovery::DeletePeer {
            name: "demo-2".into()
        }
    );
    // demo-1 was removed and re-added (new ID 9, not started yet); the old peer goes.
    let mut obs = cluster(3, 1, &[]);
    obs.members[1] = member(9, 1, true, false);
    assert_eq!(
        plan_recovery(Some(&obs), &[lost("demo-1", 2)], 3, &names()),
        Recovery::DeletePeer {
            name: "demo-1".into()
        }
    );
}
