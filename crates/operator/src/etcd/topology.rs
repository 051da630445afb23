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
    /// The member list was read linearizably (`EtcdAdmin::member_list`: a read the leader
    /// serves only after a majority confirmed its leadership), so the cluster had a quorum and
    /// a leader when it was observed, whatever the members' own status calls then answered: a
    /// status call that times out (a member slow under load) is not a lost member (issue 33).
    pub quorum_confirmed: bool,
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

    /// The cluster has a quorum: the member list was read linearizably
    /// ([`Self::quorum_confirmed`]), or a majority of voting members answered their status
    /// call and there is a leader. Slow or failed status calls alone never make it `false`
    /// while the linearizable read succeeded; the steps that need every member healthy (a
    /// removal, a rolling update) count [`Self::healthy_voters`] themselves and wait.
    pub fn quorate(&self) -> bool {
        let voters = self.voters().count();
        voters > 0
            && (self.quorum_confirmed
                || (self.healthy_voters() >= quorum(voters) && self.leader().is_some()))
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
pub fn plan_members(
    observed: &Observed,
    replicas: usize,
    names: &ClusterNames,
    stranded: &[String],
) -> MemberAction {
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
        // A name whose Pod or claim is stranded on a lost Node cannot be used again until a
        // person confirms that Node gone: its Pod stays Terminating and its volume there.
        let taken: Vec<String> = observed
            .members
            .iter()
            .filter_map(|m| observed.name_of(m, names))
            .chain(stranded.iter().cloned())
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
mod tests;
