//! (pure) What the etcd cluster looks like from the operator, and the decisions made from it:
//! which single membership change to make next ([`plan_members`]), which `EtcdPeer` resources
//! to create or delete ([`plan_peers`]) and which member that lost its data to replace
//! ([`plan_recovery`]). The etcd member list is the truth (seed 003); these functions never
//! touch the network.

use std::collections::BTreeMap;

use sha1::{Digest, Sha1};
use steward_api::etcd::{Bootstrap, InitialClusterState, InitialMember};

use crate::etcd::admin::{EndpointStatus, Member};
use crate::etcd::names::ClusterNames;

/// One observation of the cluster through the etcd API.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// The member list.
    pub members: Vec<Member>,
    /// Status of every member that answered, by member ID.
    pub statuses: BTreeMap<u64, EndpointStatus>,
}

/// Majority of `voters`.
pub fn quorum(voters: usize) -> usize {
    voters / 2 + 1
}

impl Observed {
    /// Voting members.
    pub fn voters(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| !m.is_learner)
    }

    /// Whether a member answered its status call.
    pub fn healthy(&self, id: u64) -> bool {
        self.statuses.get(&id).is_some_and(|s| s.errors.is_empty())
    }

    /// Voting members that answered.
    pub fn healthy_voters(&self) -> usize {
        self.voters().filter(|m| self.healthy(m.id)).count()
    }

    /// The leader, as the answering members agree (the most common non-zero leader ID).
    pub fn leader(&self) -> Option<u64> {
        let mut votes: BTreeMap<u64, usize> = BTreeMap::new();
        for s in self.statuses.values().filter(|s| s.leader != 0) {
            *votes.entry(s.leader).or_default() += 1;
        }
        votes.into_iter().max_by_key(|(_, n)| *n).map(|(id, _)| id)
    }

    /// A majority of voting members answers and there is a leader.
    pub fn quorate(&self) -> bool {
        let voters = self.voters().count();
        voters > 0 && self.healthy_voters() >= quorum(voters) && self.leader().is_some()
    }

    /// The member name: its etcd name, or (not started yet) the name in its peer URL.
    pub fn name_of(&self, member: &Member, names: &ClusterNames) -> Option<String> {
        if member.is_started() {
            return Some(member.name.clone());
        }
        member.peer_urls.iter().find_map(|u| names.peer_from_url(u))
    }

    /// The lowest cluster version the answering members run.
    pub fn min_version(&self) -> Option<String> {
        self.statuses
            .values()
            .map(|s| s.version.clone())
            .min_by(|a, b| version_key(a).cmp(&version_key(b)))
    }
}

fn version_key(v: &str) -> Vec<u64> {
    v.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

/// The next membership change, one per pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberAction {
    /// Membership matches `replicas`.
    Converged,
    /// A member was added but has not started yet; its peer and Pod are on their way.
    WaitForStart {
        /// The member's name.
        name: String,
    },
    /// A started learner: promote it (etcd refuses until it has caught up).
    Promote {
        /// Member ID.
        id: u64,
        /// Name.
        name: String,
    },
    /// Add a member, as a learner.
    Add {
        /// The new member's name.
        name: String,
        /// Its peer URL.
        peer_url: String,
    },
    /// The member to remove is the leader: hand leadership to `to` first.
    MoveLeader {
        /// Current leader.
        from: u64,
        /// New leader (a healthy voter).
        to: u64,
    },
    /// Remove a member.
    Remove {
        /// Member ID.
        id: u64,
        /// Name.
        name: String,
    },
    /// A change is needed but unsafe now; the reason says why.
    Wait(String),
}

/// Decides the one membership change to make so that the voting members approach `replicas`.
/// Assumes the caller checked the cluster is quorate.
pub fn plan_members(observed: &Observed, replicas: usize, names: &ClusterNames) -> MemberAction {
    let voters: Vec<&Member> = observed.voters().collect();
    let learners: Vec<&Member> = observed.members.iter().filter(|m| m.is_learner).collect();
    let name = |m: &Member| {
        observed
            .name_of(m, names)
            .unwrap_or_else(|| format!("{:x}", m.id))
    };

    // A member that never started (added, Pod not up yet).
    if let Some(m) = observed.members.iter().find(|m| !m.is_started()) {
        if voters.len() + learners.len() > replicas && m.is_learner {
            // Scaled back down before it started: removing a learner never affects quorum.
            return MemberAction::Remove {
                id: m.id,
                name: name(m),
            };
        }
        return MemberAction::WaitForStart { name: name(m) };
    }
    if let Some(l) = learners.first() {
        if voters.len() >= replicas {
            // Not wanted any more: learners leave without touching quorum.
            return MemberAction::Remove {
                id: l.id,
                name: name(l),
            };
        }
        if !observed.healthy(l.id) {
            return MemberAction::Wait(format!(
                "learner {} is not answering yet; waiting before promoting it",
                name(l)
            ));
        }
        return MemberAction::Promote {
            id: l.id,
            name: name(l),
        };
    }
    let healthy = observed.healthy_voters();
    if voters.len() < replicas {
        if healthy < voters.len() {
            return MemberAction::Wait(format!(
                "{} of {} voting members are healthy; members are added only to a healthy cluster",
                healthy,
                voters.len()
            ));
        }
        let taken: Vec<String> = observed
            .members
            .iter()
            .filter_map(|m| observed.name_of(m, names))
            .collect();
        let new = names.next_free(&taken);
        return MemberAction::Add {
            peer_url: names.peer_url(&new),
            name: new,
        };
    }
    if voters.len() > replicas {
        // Highest ordinal first, so names stay `0..replicas`; an unhealthy member first of all,
        // since removing it only makes the cluster safer.
        let mut order: Vec<&Member> = voters.clone();
        order.sort_by_key(|m| {
            (
                observed.healthy(m.id),
                std::cmp::Reverse(names.ordinal(&m.name).unwrap_or(u32::MAX)),
            )
        });
        let Some(victim) = order.first() else {
            return MemberAction::Converged;
        };
        let victim_healthy = observed.healthy(victim.id);
        let after = healthy - usize::from(victim_healthy);
        if after < quorum(voters.len() - 1) {
            return MemberAction::Wait(format!(
                "removing {} would leave {after} healthy voting members, fewer than a quorum of {}",
                name(victim),
                quorum(voters.len() - 1)
            ));
        }
        if observed.leader() == Some(victim.id) {
            let to = voters
                .iter()
                .filter(|m| m.id != victim.id && observed.healthy(m.id))
                .min_by_key(|m| names.ordinal(&m.name).unwrap_or(u32::MAX));
            return match to {
                Some(to) => MemberAction::MoveLeader {
                    from: victim.id,
                    to: to.id,
                },
                None => MemberAction::Wait("no healthy member can take over leadership".into()),
            };
        }
        return MemberAction::Remove {
            id: victim.id,
            name: name(victim),
        };
    }
    MemberAction::Converged
}

/// The ID etcd 3.4 gives a member that bootstraps a new cluster (`computeMemberId` without a
/// time, as `--initial-cluster` members get): the first 8 bytes, big endian, of the SHA-1 of
/// the member's peer URLs, sorted and concatenated, followed by the cluster token
/// (`--initial-cluster-token`). Knowing it up front lets a bootstrap peer's data directory be
/// named after its member before etcd ever ran.
pub fn bootstrap_member_id(peer_urls: &[String], token: &str) -> u64 {
    let mut urls: Vec<&str> = peer_urls.iter().map(String::as_str).collect();
    urls.sort_unstable();
    let mut hasher = Sha1::new();
    for url in urls {
        hasher.update(url.as_bytes());
    }
    hasher.update(token.as_bytes());
    let digest = hasher.finalize();
    digest
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_be_bytes)
}

/// A member ID as etcd prints it: lowercase hex without leading zeros.
pub fn member_id_hex(id: u64) -> String {
    format!("{id:x}")
}

/// What a peer resource looks like to the planner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerView {
    /// Name.
    pub name: String,
    /// Its bootstrap instructions.
    pub bootstrap: Bootstrap,
}

/// A peer to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewPeer {
    /// Its name.
    pub name: String,
    /// Its bootstrap instructions.
    pub bootstrap: Bootstrap,
    /// The member ID (hex) it will run: the ID etcd assigned when the member was added, or
    /// for a bootstrap member the ID etcd will derive ([`bootstrap_member_id`]).
    pub member_id: String,
}

/// Peers to create (with their bootstrap) and delete.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerPlan {
    /// New peers.
    pub create: Vec<NewPeer>,
    /// Peers to delete.
    pub delete: Vec<String>,
    /// Why nothing was created although peers are missing.
    pub held: Option<String>,
}

/// Reconciles peer resources with the member list (seed step 4). With a quorate cluster the
/// member list decides: a member without a peer gets one (joining the existing cluster), a peer
/// without a member is deleted. Without one, missing peers are created only to complete the
/// initial bootstrap set — the seed adds peers whenever the cluster is unreachable, but a peer
/// bootstrapping a *new* cluster next to an existing, temporarily unreachable one could never
/// join it, so Steward refuses that and says so.
pub fn plan_peers(
    observed: Option<&Observed>,
    peers: &[PeerView],
    replicas: usize,
    names: &ClusterNames,
    token: &str,
) -> PeerPlan {
    let mut plan = PeerPlan::default();
    let has = |n: &str| peers.iter().any(|p| p.name == n);
    match observed {
        Some(obs) if obs.quorate() => {
            let known: Vec<(InitialMember, u64)> = obs
                .members
                .iter()
                .filter_map(|m| {
                    let member = InitialMember {
                        name: obs.name_of(m, names)?,
                        peer_url: m.peer_urls.first()?.clone(),
                    };
                    Some((member, m.id))
                })
                .collect();
            let initial: Vec<InitialMember> = known.iter().map(|(m, _)| m.clone()).collect();
            for (member, id) in &known {
                if !has(&member.name) {
                    plan.create.push(NewPeer {
                        name: member.name.clone(),
                        bootstrap: Bootstrap {
                            initial_cluster: initial.clone(),
                            initial_cluster_state: InitialClusterState::Existing,
                            initial_cluster_token: token.to_owned(),
                        },
                        member_id: member_id_hex(*id),
                    });
                }
            }
            for p in peers {
                if !initial.iter().any(|m| m.name == p.name) {
                    plan.delete.push(p.name.clone());
                }
            }
        }
        _ => {
            if peers.is_empty() {
                let initial: Vec<InitialMember> = (0..replicas)
                    .map(|i| {
                        let name = names.peer(u32::try_from(i).unwrap_or(u32::MAX));
                        InitialMember {
                            peer_url: names.peer_url(&name),
                            name,
                        }
                    })
                    .collect();
                for m in &initial {
                    plan.create.push(NewPeer {
                        name: m.name.clone(),
                        bootstrap: Bootstrap {
                            initial_cluster: initial.clone(),
                            initial_cluster_state: InitialClusterState::New,
                            initial_cluster_token: token.to_owned(),
                        },
                        member_id: member_id_hex(bootstrap_member_id(
                            std::slice::from_ref(&m.peer_url),
                            token,
                        )),
                    });
                }
            } else if let Some(first_new) = peers
                .iter()
                .find(|p| p.bootstrap.initial_cluster_state == InitialClusterState::New)
                .filter(|_| {
                    peers
                        .iter()
                        .all(|p| p.bootstrap.initial_cluster_state == InitialClusterState::New)
                })
            {
                // Finish an interrupted bootstrap with the very same initial cluster.
                let boot = &first_new.bootstrap;
                for m in &boot.initial_cluster {
                    if !has(&m.name) {
                        plan.create.push(NewPeer {
                            name: m.name.clone(),
                            bootstrap: boot.clone(),
                            member_id: member_id_hex(bootstrap_member_id(
                                std::slice::from_ref(&m.peer_url),
                                &boot.initial_cluster_token,
                            )),
                        });
                    }
                }
            } else if peers.len() < replicas {
                plan.held = Some(format!(
                    "the cluster is unreachable or not quorate and has {} of {replicas} peers; \
                     new members join only through the etcd API, so none are created until it recovers",
                    peers.len()
                ));
            }
        }
    }
    plan
}

/// A peer whose member lost its data (`DataLost=True`), as [`plan_recovery`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostPeer {
    /// The peer's (and its member's) name.
    pub name: String,
    /// The member ID the peer ran, when known (its spec, else what it last reported).
    pub member_id: Option<u64>,
}

/// What to do about members that lost their data; at most one change per pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// No peer lost its data.
    Idle,
    /// The lost peer's member is no longer in the member list (removed on an earlier pass, or
    /// already replaced by a new member of the same name): delete the peer.
    DeletePeer {
        /// The peer.
        name: String,
    },
    /// Remove the member; `ScaleMembers` then adds a new one in its place.
    Remove {
        /// Member ID.
        id: u64,
        /// Its name.
        name: String,
    },
    /// Not now, but it resolves by itself; the reason says what is awaited.
    Wait(String),
    /// Steward cannot replace the member; the reason says why and what is needed.
    Blocked(String),
}

/// Decides how to replace members that lost their data (`lost`, the peers with
/// `DataLost=True`; `peers`, how many peers the cluster has). A member is removed only from a
/// quorate cluster, only when no other membership change is in flight (no member that has not
/// started, no learner), only when it does not answer, and only if the remaining healthy voters
/// still form a quorum of the smaller cluster; one member at a time, lowest ordinal first.
pub fn plan_recovery(
    observed: Option<&Observed>,
    lost: &[LostPeer],
    peers: usize,
    names: &ClusterNames,
) -> Recovery {
    if lost.is_empty() {
        return Recovery::Idle;
    }
    let mut lost: Vec<&LostPeer> = lost.iter().collect();
    lost.sort_by_key(|p| (names.ordinal(&p.name).unwrap_or(u32::MAX), p.name.clone()));
    let list = lost
        .iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let Some(obs) = observed.filter(|o| o.quorate()) else {
        let members = observed.map_or(peers, |o| o.voters().count());
        if members <= 1 {
            return Recovery::Blocked(format!(
                "{list} lost its data and is the cluster's only member: there is no other member \
                 to copy the data from, so Steward does not replace it (a new member would start \
                 an empty cluster). Restore the cluster from a backup (an etcd snapshot)"
            ));
        }
        let state = if observed.is_some() {
            "not quorate"
        } else {
            "unreachable or without a leader"
        };
        return Recovery::Blocked(format!(
            "{list} lost {} data and the cluster is {state}: etcd removes members only with a \
             quorum. They are replaced automatically once a majority of the members answers \
             again; if that majority is gone for good, restore the cluster from a backup",
            if lost.len() == 1 { "its" } else { "their" }
        ));
    };
    let member_of = |p: &LostPeer| {
        obs.members
            .iter()
            .find(|m| obs.name_of(m, names).as_deref() == Some(p.name.as_str()))
    };
    // Peers whose member is already gone, or is a new member under the same name.
    for p in &lost {
        match member_of(p) {
            None => {
                return Recovery::DeletePeer {
                    name: p.name.clone(),
                };
            }
            Some(m) if p.member_id.is_some_and(|id| id != m.id) => {
                return Recovery::DeletePeer {
                    name: p.name.clone(),
                };
            }
            Some(_) => {}
        }
    }
    let Some((peer, victim)) = lost
        .iter()
        .filter_map(|p| Some((*p, member_of(p)?)))
        .find(|(_, m)| !obs.healthy(m.id))
    else {
        return Recovery::Wait(format!(
            "{list} lost {} data but still answers; waiting for its Pod to stop",
            if lost.len() == 1 { "its" } else { "their" }
        ));
    };
    if let Some(other) = obs
        .members
        .iter()
        .find(|m| m.id != victim.id && (!m.is_started() || m.is_learner))
    {
        return Recovery::Wait(format!(
            "{} lost its data; it is replaced once the membership change of {} has finished",
            peer.name,
            obs.name_of(other, names)
                .unwrap_or_else(|| member_id_hex(other.id))
        ));
    }
    if !victim.is_learner {
        let voters = obs.voters().count();
        let healthy = obs.healthy_voters();
        if voters <= 1 || healthy < quorum(voters - 1) {
            return Recovery::Blocked(format!(
                "{} lost its data, but removing it would leave {healthy} healthy voting members, \
                 fewer than a quorum of {}",
                peer.name,
                quorum(voters.saturating_sub(1))
            ));
        }
    }
    Recovery::Remove {
        id: victim.id,
        name: peer.name.clone(),
    }
}

#[cfg(test)]
mod tests {
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
        Observed { members, statuses }
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
    fn scale_up_adds_one_learner_with_the_lowest_free_name() {
        let obs = cluster(3, 1, &[]);
        assert_eq!(
            plan_members(&obs, 5, &names()),
            MemberAction::Add {
                name: "demo-3".into(),
                peer_url: "http://demo-3.demo.db.svc.cluster.local:2380".into()
            }
        );
    }

    #[test]
    fn nothing_is_added_while_a_voter_is_down() {
        assert!(matches!(
            plan_members(&cluster(3, 1, &[2]), 5, &names()),
            MemberAction::Wait(m) if m.contains("2 of 3")
        ));
    }

    #[test]
    fn an_added_member_is_waited_for_then_promoted() {
        let mut obs = cluster(3, 1, &[]);
        obs.members.push(member(9, 3, true, false));
        assert_eq!(
            plan_members(&obs, 5, &names()),
            MemberAction::WaitForStart {
                name: "demo-3".into()
            }
        );
        obs.members[3] = member(9, 3, true, true);
        assert!(
            matches!(plan_members(&obs, 5, &names()), MemberAction::Wait(_)),
            "not answering yet"
        );
        obs.statuses.insert(9, status(9, 1));
        assert_eq!(
            plan_members(&obs, 5, &names()),
            MemberAction::Promote {
                id: 9,
                name: "demo-3".into()
            }
        );
        // Scaled back before it started: the learner goes.
        obs.members[3] = member(9, 3, true, false);
        assert_eq!(
            plan_members(&obs, 3, &names()),
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
            plan_members(&obs, 3, &names()),
            MemberAction::Remove {
                id: 5,
                name: "demo-4".into()
            }
        );
        let obs = cluster(5, 5, &[]);
        assert_eq!(
            plan_members(&obs, 3, &names()),
            MemberAction::MoveLeader { from: 5, to: 1 }
        );
    }

    #[test]
    fn an_unhealthy_member_is_removed_first_and_quorum_is_kept() {
        let obs = cluster(5, 1, &[2]);
        assert_eq!(
            plan_members(&obs, 3, &names()),
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
            plan_members(&obs2, 1, &names()),
            MemberAction::Wait(_)
        ));
        assert_eq!(plan_members(&obs, 3, &names()), MemberAction::Converged);
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
}
