//! (pure) What the etcd cluster looks like from the operator, and the decisions made from it:
//! which single membership change to make next ([`plan_members`]) and which `EtcdPeer`
//! resources to create or delete ([`plan_peers`]). The etcd member list is the truth (seed 003);
//! these functions never touch the network.

use std::collections::BTreeMap;

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

/// What a peer resource looks like to the planner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerView {
    /// Name.
    pub name: String,
    /// Its bootstrap instructions.
    pub bootstrap: Bootstrap,
}

/// Peers to create (with their bootstrap) and delete.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerPlan {
    /// New peers.
    pub create: Vec<(String, Bootstrap)>,
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
            let initial: Vec<InitialMember> = obs
                .members
                .iter()
                .filter_map(|m| {
                    Some(InitialMember {
                        name: obs.name_of(m, names)?,
                        peer_url: m.peer_urls.first()?.clone(),
                    })
                })
                .collect();
            for member in &initial {
                if !has(&member.name) {
                    plan.create.push((
                        member.name.clone(),
                        Bootstrap {
                            initial_cluster: initial.clone(),
                            initial_cluster_state: InitialClusterState::Existing,
                            initial_cluster_token: token.to_owned(),
                        },
                    ));
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
                    plan.create.push((
                        m.name.clone(),
                        Bootstrap {
                            initial_cluster: initial.clone(),
                            initial_cluster_state: InitialClusterState::New,
                            initial_cluster_token: token.to_owned(),
                        },
                    ));
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
                for m in &first_new.bootstrap.initial_cluster {
                    if !has(&m.name) {
                        plan.create
                            .push((m.name.clone(), first_new.bootstrap.clone()));
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
        assert!(
            plan.create
                .iter()
                .all(|(_, b)| b.initial_cluster_state == InitialClusterState::New
                    && b.initial_cluster.len() == 3)
        );
        // Interrupted after one peer: the same initial cluster completes it.
        let one = [view(
            "demo-0",
            InitialClusterState::New,
            &["demo-0", "demo-1", "demo-2"],
        )];
        let plan = plan_peers(None, &one, 5, &names(), "t");
        let created: Vec<&str> = plan.create.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(created, ["demo-1", "demo-2"]);
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
        let (name, boot) = &plan.create[0];
        assert_eq!(name, "demo-3");
        assert_eq!(boot.initial_cluster_state, InitialClusterState::Existing);
        let initial: Vec<&str> = boot
            .initial_cluster
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(initial, ["demo-0", "demo-1", "demo-2", "demo-3"]);
    }
}
