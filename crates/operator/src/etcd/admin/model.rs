//! An in-memory etcd cluster implementing [`EtcdAdmin`], for the engine's step tests.
//!
//! It enforces the membership rules etcd 3.4 enforces (checked against real etcd 3.4.23 by
//! `crates/operator/tests/etcd_admin.rs`, which runs the same scenarios on both):
//! - membership calls and the (linearizable) member list need a leader, i.e. a quorum of voting
//!   members up; otherwise [`AdminError::NoQuorum`];
//! - strict reconfiguration checks; etcd evaluates them before proposing, so a member add is
//!   refused as unsafe even without a quorum (remove and promote check the member list first,
//!   which needs a leader):
//!   - adding a voter needs `started voters >= quorum` of the enlarged voting set;
//!   - adding *any* member (a learner too) needs every other voter connected to the serving
//!     member for etcd's `HealthInterval` (5 s): one voter down (or added but never started, or
//!     started less than 5 s ago, see [`EtcdModel::settle`]) makes etcd answer "unhealthy
//!     cluster" ([`AdminError::Unhealthy`]);
//!   - removing a voter needs `started voters >= quorum` of the remaining ones, and, unless the
//!     removed member is itself down, enough *connected* voters left for a quorum;
//!   - promoting needs the learner in sync (≥ 90 % of the leader's index, [`EtcdModel::catch_up`])
//!     and `started voters + 1 >= quorum` of the enlarged voting set;
//!   - "started" is etcd's notion: the member published its name once. A stopped member stays
//!     started; "up" is whether its process answers;
//! - at most one learner; peer URLs unique; `move_leader` must be sent to the leader's
//!   endpoint and hands over at once;
//! - losing the leader (killed, wiped or removed) or regaining a quorum leaves the cluster
//!   without a leader until the next election ([`EtcdModel::elect`] or [`EtcdModel::settle`]):
//!   real etcd drops proposals made during an election and answers them with "request timed
//!   out" after the request timeout, so the first call after losing the leader usually fails
//!   with [`AdminError::NoQuorum`];
//! - removing or promoting an ID that is not in the member list (never was, or was removed)
//!   is [`AdminError::MemberNotFound`]: the real client checks the list first, because etcd
//!   3.4 answers a second remove of a removed ID only with a timeout;
//! - `status` answers on any up member, leader or not; without a leader it reports leader 0
//!   and "etcdserver: no leader" among its errors, as etcd does.
//!
//! The handle is cheap to clone; all clones and every admin opened through
//! [`EtcdModel::connector`] share one cluster. Test hooks (`kill`, `start`, `start_member`,
//! `wipe`, `catch_up`, `fail_next`, `calls`, ...) drive and observe it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use super::{Added, AdminError, EndpointStatus, EtcdAdmin, EtcdConnector, Member};

/// etcd's error texts, as real etcd 3.4 sends them.
mod text {
    pub const NOT_ENOUGH_STARTED: &str =
        "etcdserver: re-configuration failed due to not enough started members";
    pub const UNHEALTHY: &str = "etcdserver: unhealthy cluster";
    pub const NO_LEADER: &str = "etcdserver: no leader";
    pub const NOT_LEADER: &str = "etcdserver: not leader";
    pub const NOT_LEARNER: &str = "etcdserver: can only promote a learner member";
    pub const BAD_URLS: &str = "etcdserver: given member URLs are invalid";
    pub const LEADER_TRANSFER_TIMEOUT: &str =
        "etcdserver: request timed out, leader transfer took too long";
    pub const NOT_FOR_LEARNER: &str = "etcdserver: rpc not supported for learner";
    pub const REFUSED: &str = "connection refused";
}

/// A learner may be promoted once its applied index reaches this share of the leader's
/// (etcd's `readyPercent`).
const LEARNER_READY_RATIO: f64 = 0.9;

/// One member as the model sees it: the member-list fields plus process and data state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelMember {
    /// Member ID.
    pub id: u64,
    /// `--name`; empty until the member first starts.
    pub name: String,
    /// Advertised peer URLs.
    pub peer_urls: Vec<String>,
    /// Advertised client URLs; empty until the member first starts.
    pub client_urls: Vec<String>,
    /// A learner.
    pub is_learner: bool,
    /// Published its name once (etcd's "started"); stays true after the process stops.
    pub started: bool,
    /// The process runs and answers.
    pub up: bool,
    /// The data directory is intact; a wiped member can never rejoin.
    pub has_data: bool,
    /// Raft index applied on this member.
    pub applied: u64,
    /// Still replaying the leader's log (a newly started learner) until [`EtcdModel::catch_up`].
    pub lagging: bool,
    /// Up for less than etcd's 5 s `HealthInterval`: strict checks do not count its peer
    /// connections yet. Cleared by [`EtcdModel::settle`].
    pub fresh: bool,
    /// Server version it reports.
    pub version: String,
    /// Alarms it reports.
    pub alarms: Vec<String>,
}

impl ModelMember {
    fn to_member(&self) -> Member {
        Member {
            id: self.id,
            name: self.name.clone(),
            peer_urls: self.peer_urls.clone(),
            client_urls: self.client_urls.clone(),
            is_learner: self.is_learner,
        }
    }

    fn serves(&self, endpoint: &str) -> bool {
        self.up && self.client_urls.iter().any(|u| u == endpoint)
    }
}

/// A call made through the model's [`EtcdConnector`] / [`EtcdAdmin`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// `EtcdConnector::connect`.
    Connect {
        /// Endpoints asked for.
        endpoints: Vec<String>,
    },
    /// `member_list`.
    MemberList,
    /// `member_add`.
    MemberAdd {
        /// Peer URLs of the new member.
        peer_urls: Vec<String>,
        /// Added as a learner.
        learner: bool,
    },
    /// `member_promote`.
    MemberPromote {
        /// The learner.
        id: u64,
    },
    /// `member_remove`.
    MemberRemove {
        /// The member.
        id: u64,
    },
    /// `status`.
    Status {
        /// The endpoint asked.
        endpoint: String,
    },
    /// `move_leader`.
    MoveLeader {
        /// Where the call was sent.
        leader_endpoint: String,
        /// The new leader.
        to: u64,
    },
}

/// The kind of a [`Call`], for failure injection and filtering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallKind {
    /// `connect`.
    Connect,
    /// `member_list`.
    MemberList,
    /// `member_add`.
    MemberAdd,
    /// `member_promote`.
    MemberPromote,
    /// `member_remove`.
    MemberRemove,
    /// `status`.
    Status,
    /// `move_leader`.
    MoveLeader,
}

impl Call {
    /// This call's kind.
    pub fn kind(&self) -> CallKind {
        match self {
            Self::Connect { .. } => CallKind::Connect,
            Self::MemberList => CallKind::MemberList,
            Self::MemberAdd { .. } => CallKind::MemberAdd,
            Self::MemberPromote { .. } => CallKind::MemberPromote,
            Self::MemberRemove { .. } => CallKind::MemberRemove,
            Self::Status { .. } => CallKind::Status,
            Self::MoveLeader { .. } => CallKind::MoveLeader,
        }
    }
}

/// A logged call and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallRecord {
    /// The call.
    pub call: Call,
    /// `Ok` or the error returned.
    pub result: Result<(), AdminError>,
}

/// A member of the initial cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitialMember {
    /// `--name`.
    pub name: String,
    /// Peer URL.
    pub peer_url: String,
    /// Client URL.
    pub client_url: String,
}

impl InitialMember {
    /// `http://<name>:2380` / `http://<name>:2379`.
    pub fn named(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            peer_url: format!("http://{name}:2380"),
            client_url: format!("http://{name}:2379"),
        }
    }
}

#[derive(Debug)]
struct State {
    /// Sorted by ID, as etcd lists them.
    members: Vec<ModelMember>,
    leader: Option<u64>,
    term: u64,
    /// The leader's commit index; caught-up up members have applied it.
    commit: u64,
    id_counter: u64,
    /// Injected failures: `(None, e)` fails the next admin call of any kind but `connect`.
    injected: VecDeque<(Option<CallKind>, AdminError)>,
    calls: Vec<CallRecord>,
}

/// Handle on an in-memory etcd cluster; clones share it.
#[derive(Clone, Debug)]
pub struct EtcdModel {
    state: Arc<Mutex<State>>,
}

impl EtcdModel {
    /// A cluster of these members, all started, up and settled; the first one leads.
    pub fn bootstrap(initial: &[InitialMember]) -> Self {
        let mut state = State {
            members: Vec::new(),
            leader: None,
            term: 1,
            commit: 0,
            id_counter: 0,
            injected: VecDeque::new(),
            calls: Vec::new(),
        };
        for m in initial {
            let id = state.new_id();
            state.members.push(ModelMember {
                id,
                name: m.name.clone(),
                peer_urls: vec![m.peer_url.clone()],
                client_urls: vec![m.client_url.clone()],
                is_learner: false,
                started: true,
                up: true,
                has_data: true,
                applied: 0,
                lagging: false,
                fresh: false,
                version: "3.4.23".to_owned(),
                alarms: Vec::new(),
            });
            // Bootstrap applies one conf change per member, then each publishes its name.
            state.commit += 2;
        }
        state.members.sort_by_key(|m| m.id);
        if let Some(first) = initial.first().and_then(|f| state.id_of(&f.name)) {
            state.leader = Some(first);
            state.term = 2;
            state.commit += 1;
        }
        state.sync();
        Self {
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// [`EtcdModel::bootstrap`] with [`InitialMember::named`] members.
    pub fn with_names(names: &[&str]) -> Self {
        let initial: Vec<InitialMember> = names.iter().map(|n| InitialMember::named(n)).collect();
        Self::bootstrap(&initial)
    }

    /// A connector opening admins on this cluster.
    pub fn connector(&self) -> ModelConnector {
        ModelConnector {
            model: self.clone(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// All members, sorted by ID.
    pub fn members(&self) -> Vec<ModelMember> {
        self.lock().members.clone()
    }

    /// One member.
    pub fn member(&self, id: u64) -> Option<ModelMember> {
        self.lock().member(id).cloned()
    }

    /// The ID of the member with this name.
    pub fn id_of(&self, name: &str) -> Option<u64> {
        self.lock().id_of(name)
    }

    /// The current leader.
    pub fn leader(&self) -> Option<u64> {
        self.lock().leader
    }

    /// The current raft term.
    pub fn term(&self) -> u64 {
        self.lock().term
    }

    /// The leader's commit index.
    pub fn commit_index(&self) -> u64 {
        self.lock().commit
    }

    /// Starts a member that was added but never started (what a new etcd process with
    /// `--initial-cluster-state existing` does). A learner starts lagging: see
    /// [`EtcdModel::catch_up`]. The member is fresh: see [`EtcdModel::settle`].
    pub fn start_member(&self, id: u64, name: &str, client_url: &str) -> Result<(), AdminError> {
        let mut state = self.lock();
        let m = state.member_mut(id).ok_or(AdminError::MemberNotFound(id))?;
        if m.started {
            return Err(AdminError::Other(format!(
                "member {id:x} has started before; use start"
            )));
        }
        if name.is_empty() {
            return Err(AdminError::Other("a member needs a name".to_owned()));
        }
        m.name = name.to_owned();
        m.client_urls = vec![client_url.to_owned()];
        m.started = true;
        m.up = true;
        m.has_data = true;
        m.fresh = true;
        m.lagging = m.is_learner;
        // Publishing its name is a raft write.
        state.commit += 1;
        state.sync();
        state.check_leader();
        Ok(())
    }

    /// Stops a member's process (data kept). Killing the leader elects another up voter if a
    /// quorum remains.
    pub fn kill(&self, id: u64) -> Result<(), AdminError> {
        let mut state = self.lock();
        let m = state.member_mut(id).ok_or(AdminError::MemberNotFound(id))?;
        m.up = false;
        m.fresh = false;
        state.check_leader();
        Ok(())
    }

    /// Restarts a stopped member with its data; it catches up at once but is fresh (see
    /// [`EtcdModel::settle`]). Fails for a wiped member: it cannot rejoin.
    pub fn start(&self, id: u64) -> Result<(), AdminError> {
        let mut state = self.lock();
        let m = state.member_mut(id).ok_or(AdminError::MemberNotFound(id))?;
        if !m.started {
            return Err(AdminError::Other(format!(
                "member {id:x} never started; use start_member"
            )));
        }
        if !m.has_data {
            return Err(AdminError::Other(format!(
                "member {id:x} lost its data and cannot rejoin; remove and re-add it"
            )));
        }
        if !m.up {
            m.up = true;
            m.fresh = true;
        }
        state.sync();
        state.check_leader();
        Ok(())
    }

    /// Loses a member's data: its process stops (crash-loops) and can never rejoin; its status
    /// fails. It stays in the member list until removed.
    pub fn wipe(&self, id: u64) -> Result<(), AdminError> {
        let mut state = self.lock();
        let m = state.member_mut(id).ok_or(AdminError::MemberNotFound(id))?;
        m.up = false;
        m.fresh = false;
        m.has_data = false;
        m.applied = 0;
        state.check_leader();
        Ok(())
    }

    /// Lets a lagging member (a new learner) catch up with the leader.
    pub fn catch_up(&self, id: u64) -> Result<(), AdminError> {
        let mut state = self.lock();
        let m = state.member_mut(id).ok_or(AdminError::MemberNotFound(id))?;
        m.lagging = false;
        state.sync();
        Ok(())
    }

    /// Lets etcd's 5 s `HealthInterval` pass: every up member's peer connections now count for
    /// the strict reconfiguration checks.
    /// Also ends a pending election.
    pub fn settle(&self) {
        let mut state = self.lock();
        for m in &mut state.members {
            m.fresh = false;
        }
        state.elect();
    }

    /// Ends a pending election: with no leader and a quorum of voters up, the most up-to-date
    /// up voter becomes leader. Losing the leader (killed, wiped, removed) or regaining a quorum
    /// leaves the cluster leaderless until this (or [`EtcdModel::settle`]) runs, the model's
    /// stand-in for etcd's election timeout: real etcd times out proposals made meanwhile.
    pub fn elect(&self) {
        self.lock().elect();
    }

    /// Commits `n` client writes (lagging and down members fall behind).
    pub fn write(&self, n: u64) {
        let mut state = self.lock();
        if state.leader.is_some() {
            state.commit += n;
            state.sync();
        }
    }

    /// Sets the version every member reports.
    pub fn set_version(&self, version: &str) {
        for m in &mut self.lock().members {
            m.version = version.to_owned();
        }
    }

    /// Sets the version one member reports (a rolling upgrade).
    pub fn set_member_version(&self, id: u64, version: &str) -> Result<(), AdminError> {
        let mut state = self.lock();
        state
            .member_mut(id)
            .ok_or(AdminError::MemberNotFound(id))?
            .version = version.to_owned();
        Ok(())
    }

    /// Sets the alarms one member reports in its status (e.g. `NOSPACE`).
    pub fn set_alarms(&self, id: u64, alarms: &[&str]) -> Result<(), AdminError> {
        let mut state = self.lock();
        state
            .member_mut(id)
            .ok_or(AdminError::MemberNotFound(id))?
            .alarms = alarms.iter().map(|a| (*a).to_owned()).collect();
        Ok(())
    }

    /// Makes the next admin call (any kind but `connect`) fail with `error`, without effect.
    pub fn fail_next(&self, error: AdminError) {
        self.lock().injected.push_back((None, error));
    }

    /// Makes the next call of `kind` (`connect` included) fail with `error`, without effect.
    pub fn fail_next_call(&self, kind: CallKind, error: AdminError) {
        self.lock().injected.push_back((Some(kind), error));
    }

    /// Every call made so far, failed ones included, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.iter().map(|r| r.call.clone()).collect()
    }

    /// Every call made so far with its result.
    pub fn call_records(&self) -> Vec<CallRecord> {
        self.lock().calls.clone()
    }

    /// The calls that succeeded and changed membership or leadership, in order.
    pub fn changes(&self) -> Vec<Call> {
        self.lock()
            .calls
            .iter()
            .filter(|r| r.result.is_ok())
            .filter(|r| {
                matches!(
                    r.call.kind(),
                    CallKind::MemberAdd
                        | CallKind::MemberPromote
                        | CallKind::MemberRemove
                        | CallKind::MoveLeader
                )
            })
            .map(|r| r.call.clone())
            .collect()
    }

    /// Forgets the call log.
    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// Logs `call`, consumes a matching injected failure or runs `op`.
    fn call<T>(
        &self,
        call: Call,
        op: impl FnOnce(&mut State) -> Result<T, AdminError>,
    ) -> Result<T, AdminError> {
        let mut state = self.lock();
        let kind = call.kind();
        let injected = state.injected.iter().position(|(k, _)| match k {
            Some(k) => *k == kind,
            None => kind != CallKind::Connect,
        });
        let result = match injected.and_then(|i| state.injected.remove(i)) {
            Some((_, error)) => Err(error),
            None => op(&mut state),
        };
        let logged = result.as_ref().map(|_| ()).map_err(Clone::clone);
        state.calls.push(CallRecord {
            call,
            result: logged,
        });
        result
    }
}

impl State {
    fn new_id(&mut self) -> u64 {
        // splitmix64: deterministic, spread over the whole u64 range like etcd's IDs.
        loop {
            self.id_counter = self.id_counter.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.id_counter;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            if z != 0 && self.member(z).is_none() {
                return z;
            }
        }
    }

    fn member(&self, id: u64) -> Option<&ModelMember> {
        self.members.iter().find(|m| m.id == id)
    }

    fn member_mut(&mut self, id: u64) -> Option<&mut ModelMember> {
        self.members.iter_mut().find(|m| m.id == id)
    }

    fn id_of(&self, name: &str) -> Option<u64> {
        self.members.iter().find(|m| m.name == name).map(|m| m.id)
    }

    fn voters(&self) -> impl Iterator<Item = &ModelMember> {
        self.members.iter().filter(|m| !m.is_learner)
    }

    fn quorum(voters: usize) -> usize {
        voters / 2 + 1
    }

    /// Up members that are not lagging have applied everything committed.
    fn sync(&mut self) {
        let commit = self.commit;
        for m in &mut self.members {
            if m.up && m.has_data && !m.lagging {
                m.applied = commit;
            }
        }
    }

    /// Drops the leader when it stopped, was removed, or lost its quorum (etcd's check-quorum).
    /// No new leader is elected here: until [`State::elect`] runs, the cluster has none, as
    /// real etcd has none for an election timeout (proposals made meanwhile time out).
    fn check_leader(&mut self) {
        let voters = self.voters().count();
        let up = self.voters().filter(|m| m.up).count();
        let leader_up = self
            .leader
            .is_some_and(|l| self.voters().any(|m| m.id == l && m.up));
        if !leader_up || up < Self::quorum(voters) {
            self.leader = None;
        }
    }

    /// Elects the most up-to-date up voter if there is no leader and a quorum of voters is up.
    fn elect(&mut self) {
        self.check_leader();
        let voters = self.voters().count();
        let up: Vec<&ModelMember> = self.voters().filter(|m| m.up).collect();
        if self.leader.is_some() || voters == 0 || up.len() < Self::quorum(voters) {
            return;
        }
        let next = up
            .iter()
            .max_by_key(|m| (m.applied, std::cmp::Reverse(m.id)))
            .map(|m| m.id);
        self.leader = next;
        self.term += 1;
        // A new leader commits an empty entry of its term.
        self.commit += 1;
        self.sync();
    }

    /// The member that serves a cluster call sent to `endpoints`: the first up voter among
    /// them. Learners refuse cluster calls.
    fn serving(&self, endpoints: &[String]) -> Result<u64, AdminError> {
        let up: Vec<&ModelMember> = endpoints
            .iter()
            .filter_map(|e| self.members.iter().find(|m| m.serves(e)))
            .collect();
        if let Some(voter) = up.iter().find(|m| !m.is_learner) {
            Ok(voter.id)
        } else if up.is_empty() {
            Err(AdminError::Unavailable(text::REFUSED.to_owned()))
        } else {
            Err(AdminError::Unavailable(text::NOT_FOR_LEARNER.to_owned()))
        }
    }

    fn require_leader(&self) -> Result<u64, AdminError> {
        self.leader
            .ok_or_else(|| AdminError::NoQuorum(text::NO_LEADER.to_owned()))
    }

    /// Whether `peer` has been connected to `local` for etcd's `HealthInterval`.
    fn connected_long_enough(&self, local: u64, peer: &ModelMember) -> bool {
        let local_fresh = self.member(local).is_none_or(|m| m.fresh);
        peer.id == local || (peer.up && !peer.fresh && !local_fresh)
    }

    fn member_list(&self, endpoints: &[String]) -> Result<Vec<Member>, AdminError> {
        self.serving(endpoints)?;
        self.require_leader()?;
        Ok(self.members.iter().map(ModelMember::to_member).collect())
    }

    fn member_add(
        &mut self,
        endpoints: &[String],
        peer_urls: &[String],
        learner: bool,
    ) -> Result<Added, AdminError> {
        let local = self.serving(endpoints)?;
        let valid = |u: &String| {
            u.strip_prefix("http://")
                .or_else(|| u.strip_prefix("https://"))
                .is_some_and(|h| !h.is_empty())
        };
        if peer_urls.is_empty() || !peer_urls.iter().all(valid) {
            return Err(AdminError::Other(text::BAD_URLS.to_owned()));
        }
        // Strict reconfiguration checks (before proposing, so they answer without a quorum).
        let voters = self.voters().count();
        let started = self.voters().filter(|m| m.started).count();
        // etcd lets a second voter join a single started one (its restore procedure).
        let restore = started == 1 && voters == 1;
        if !learner && !restore && started < Self::quorum(voters + 1) {
            return Err(AdminError::Unhealthy(text::NOT_ENOUGH_STARTED.to_owned()));
        }
        if !self.voters().all(|m| self.connected_long_enough(local, m)) {
            return Err(AdminError::Unhealthy(text::UNHEALTHY.to_owned()));
        }
        self.require_leader()?;
        // Checked when the change is applied.
        if let Some(url) = peer_urls
            .iter()
            .find(|u| self.members.iter().any(|m| m.peer_urls.contains(u)))
        {
            return Err(AdminError::PeerUrlExists(url.clone()));
        }
        if learner && self.members.iter().any(|m| m.is_learner) {
            return Err(AdminError::TooManyLearners);
        }
        let id = self.new_id();
        let member = ModelMember {
            id,
            name: String::new(),
            peer_urls: peer_urls.to_vec(),
            client_urls: Vec::new(),
            is_learner: learner,
            started: false,
            up: false,
            has_data: false,
            applied: 0,
            lagging: false,
            fresh: false,
            version: self
                .members
                .first()
                .map_or_else(String::new, |m| m.version.clone()),
            alarms: Vec::new(),
        };
        let new = member.to_member();
        self.members.push(member);
        self.members.sort_by_key(|m| m.id);
        self.commit += 1;
        self.sync();
        self.check_leader();
        Ok(Added {
            member: new,
            members: self.members.iter().map(ModelMember::to_member).collect(),
        })
    }

    fn member_promote(&mut self, endpoints: &[String], id: u64) -> Result<(), AdminError> {
        self.serving(endpoints)?;
        // The real client checks the member list first; promotion is decided by the leader.
        let leader = self.require_leader()?;
        let m = self.member(id).ok_or(AdminError::MemberNotFound(id))?;
        let leader_applied = self.member(leader).map_or(0, |m| m.applied);
        #[allow(clippy::cast_precision_loss)]
        if (m.applied as f64) < (leader_applied as f64) * LEARNER_READY_RATIO {
            return Err(AdminError::LearnerNotReady(id));
        }
        let voters = self.voters().count();
        let started = self.voters().filter(|m| m.started).count();
        if started + 1 < Self::quorum(voters + 1) {
            return Err(AdminError::Unhealthy(text::NOT_ENOUGH_STARTED.to_owned()));
        }
        let m = self.member_mut(id).ok_or(AdminError::MemberNotFound(id))?;
        if !m.is_learner {
            return Err(AdminError::Other(text::NOT_LEARNER.to_owned()));
        }
        m.is_learner = false;
        self.commit += 1;
        self.sync();
        self.check_leader();
        Ok(())
    }

    fn member_remove(&mut self, endpoints: &[String], id: u64) -> Result<(), AdminError> {
        let local = self.serving(endpoints)?;
        // The real client checks the (linearizable) member list first.
        self.require_leader()?;
        let target = self
            .member(id)
            .cloned()
            .ok_or(AdminError::MemberNotFound(id))?;
        // Strict reconfiguration checks; none for learners.
        if !target.is_learner {
            let remaining = self.voters().filter(|m| m.id != id).count();
            let started = self.voters().filter(|m| m.id != id && m.started).count();
            if started < Self::quorum(remaining) {
                return Err(AdminError::Unhealthy(text::NOT_ENOUGH_STARTED.to_owned()));
            }
            // A member that is down is not part of the active quorum: safe to remove.
            let target_connected = id == local || target.up;
            if target_connected {
                let voters = self.voters().count();
                let active = self
                    .voters()
                    .filter(|m| self.connected_long_enough(local, m))
                    .count();
                if active.saturating_sub(1) < 1 + voters.saturating_sub(1) / 2 {
                    return Err(AdminError::Unhealthy(text::UNHEALTHY.to_owned()));
                }
            }
        }
        self.members.retain(|m| m.id != id);
        self.commit += 1;
        self.sync();
        self.check_leader();
        Ok(())
    }

    fn status(&self, endpoint: &str) -> Result<EndpointStatus, AdminError> {
        let m = self
            .members
            .iter()
            .find(|m| m.serves(endpoint))
            .ok_or_else(|| AdminError::Unavailable(text::REFUSED.to_owned()))?;
        let mut errors = m.alarms.clone();
        if self.leader.is_none() {
            errors.push(text::NO_LEADER.to_owned());
        }
        Ok(EndpointStatus {
            member_id: m.id,
            leader: self.leader.unwrap_or(0),
            version: m.version.clone(),
            db_size: 20_480,
            raft_index: m.applied,
            raft_term: self.term,
            is_learner: m.is_learner,
            errors,
        })
    }

    fn move_leader(&mut self, leader_endpoint: &str, to: u64) -> Result<(), AdminError> {
        let local = self
            .members
            .iter()
            .find(|m| m.serves(leader_endpoint))
            .map(|m| m.id)
            .ok_or_else(|| AdminError::Unavailable(text::REFUSED.to_owned()))?;
        if self.leader != Some(local) {
            return Err(AdminError::Other(text::NOT_LEADER.to_owned()));
        }
        let target = self.member(to).ok_or(AdminError::MemberNotFound(to))?;
        if target.is_learner {
            return Err(AdminError::IsLearner(to));
        }
        if to == local {
            return Ok(());
        }
        if !target.up {
            return Err(AdminError::NoQuorum(
                text::LEADER_TRANSFER_TIMEOUT.to_owned(),
            ));
        }
        self.leader = Some(to);
        self.term += 1;
        self.commit += 1;
        self.sync();
        Ok(())
    }
}

/// Opens [`ModelAdmin`]s on an [`EtcdModel`].
#[derive(Clone, Debug)]
pub struct ModelConnector {
    model: EtcdModel,
}

#[async_trait]
impl EtcdConnector for ModelConnector {
    async fn connect(
        &self,
        endpoints: &[String],
        _timeout: Duration,
    ) -> Result<Box<dyn EtcdAdmin>, AdminError> {
        let call = Call::Connect {
            endpoints: endpoints.to_vec(),
        };
        self.model.call(call, |state| {
            if endpoints
                .iter()
                .any(|e| state.members.iter().any(|m| m.serves(e)))
            {
                Ok(())
            } else {
                Err(AdminError::Unavailable(format!(
                    "none of {} endpoint(s) answered: {}",
                    endpoints.len(),
                    text::REFUSED
                )))
            }
        })?;
        Ok(Box::new(ModelAdmin {
            model: self.model.clone(),
            endpoints: endpoints.to_vec(),
        }))
    }
}

/// An [`EtcdAdmin`] on an [`EtcdModel`], connected to some endpoints.
#[derive(Clone, Debug)]
pub struct ModelAdmin {
    model: EtcdModel,
    endpoints: Vec<String>,
}

#[async_trait]
impl EtcdAdmin for ModelAdmin {
    async fn member_list(&self) -> Result<Vec<Member>, AdminError> {
        self.model
            .call(Call::MemberList, |s| s.member_list(&self.endpoints))
    }

    async fn member_add(&self, peer_urls: &[String], learner: bool) -> Result<Added, AdminError> {
        let call = Call::MemberAdd {
            peer_urls: peer_urls.to_vec(),
            learner,
        };
        self.model
            .call(call, |s| s.member_add(&self.endpoints, peer_urls, learner))
    }

    async fn member_promote(&self, id: u64) -> Result<(), AdminError> {
        self.model.call(Call::MemberPromote { id }, |s| {
            s.member_promote(&self.endpoints, id)
        })
    }

    async fn member_remove(&self, id: u64) -> Result<(), AdminError> {
        self.model.call(Call::MemberRemove { id }, |s| {
            s.member_remove(&self.endpoints, id)
        })
    }

    async fn status(&self, endpoint: &str) -> Result<EndpointStatus, AdminError> {
        self.model.call(
            Call::Status {
                endpoint: endpoint.to_owned(),
            },
            |s| s.status(endpoint),
        )
    }

    async fn move_leader(&self, leader_endpoint: &str, to: u64) -> Result<(), AdminError> {
        let call = Call::MoveLeader {
            leader_endpoint: leader_endpoint.to_owned(),
            to,
        };
        self.model
            .call(call, |s| s.move_leader(leader_endpoint, to))
    }
}

#[cfg(test)]
mod tests;
