//! The etcd admin seam against real etcd 3.4 processes on loopback, and the same scenarios
//! against the in-memory model, so that the model's rules are checked against reality.
//!
//! Each real test starts its own 3-member cluster on a loopback address derived from the test
//! process ID (127.64.0.0/10; nextest runs every test in its own process), with temporary data
//! directories; a guard kills and reaps every etcd process on drop, failed tests included, and
//! prints the etcd logs when the test panicked.
//!
//! Real etcd 3.4 behaviours the scenarios pin down (the model mirrors each):
//! - for 5 s after members (re)connect, etcd refuses member adds with "unhealthy cluster"
//!   (strict reconfig check: every voter must have been connected for `HealthInterval`); the
//!   scenarios retry on `Unhealthy`, the model needs `settle()`;
//! - with one voter down, adding even a *learner* is refused (`Unhealthy`), and so is removing
//!   a live voter; removing the down voter itself is allowed;
//! - re-adding the same peer URLs within a second reports "member ID already exist" (the ID is
//!   derived from the URLs and the time), later "Peer URLs already exists": both `PeerUrlExists`;
//! - a member without a leader still answers `Status`, with leader 0 and "etcdserver: no
//!   leader" among its errors;
//! - a membership change proposed while a new leader is being elected is dropped and answered
//!   with "request timed out" only after the request timeout (`NoQuorum`); the model stays
//!   leaderless after losing its leader until `settle()`/`elect()`;
//! - removing or promoting an ID that was already removed hangs until the request timeout
//!   (an ID that never existed is "member not found" at once); the client checks the member
//!   list first, so both are `MemberNotFound`, as in the model.
//!
//! If the test process is killed outright (nextest's timeout), nextest signals the whole
//! process group, which includes the etcd children.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use steward_operator::etcd::admin::client::GrpcConnector;
use steward_operator::etcd::admin::model::{EtcdModel, InitialMember};
use steward_operator::etcd::admin::{Added, AdminError, EtcdAdmin, EtcdConnector};

/// Timeout for admin calls that should succeed.
const T: Duration = Duration::from_secs(3);
/// Timeout for calls expected to fail for want of an answer.
const SHORT: Duration = Duration::from_secs(1);
/// How long a scenario retries a transient refusal.
const PATIENCE: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------------------------------------
// Harnesses: what a scenario may do to "the cluster" besides admin calls.

#[async_trait]
trait Harness: Send + Sync {
    fn connector(&self) -> &dyn EtcdConnector;
    /// Client URLs of all members ever started (dead ones included).
    fn endpoints(&self) -> Vec<String>;
    fn endpoint(&self, name: &str) -> String;
    /// The peer URL a new member called `name` will use.
    fn peer_url(&self, name: &str) -> String;
    /// Starts the process of an added member; returns its client URL.
    async fn start_added(&self, name: &str, added: &Added) -> String;
    /// Stops a member's process.
    async fn kill(&self, name: &str);
    /// Lets time pass while waiting for something (model: settle and catch up).
    async fn tick(&self);
    /// Waits until etcd's strict checks count every member as connected (5 s after start).
    async fn settle(&self);

    async fn admin(&self, timeout: Duration) -> Box<dyn EtcdAdmin> {
        self.connector()
            .connect(&self.endpoints(), timeout)
            .await
            .unwrap()
    }
}

/// Retries `f` while it fails with an error `retry_on` accepts, for up to [`PATIENCE`].
async fn until_ok<T, Fut>(
    h: &dyn Harness,
    what: &str,
    retry_on: fn(&AdminError) -> bool,
    mut f: impl FnMut() -> Fut,
) -> T
where
    Fut: Future<Output = Result<T, AdminError>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if retry_on(&e) && Instant::now() < deadline => h.tick().await,
            Err(e) => panic!("{what}: {e:?}"),
        }
    }
}

fn unhealthy(e: &AdminError) -> bool {
    matches!(e, AdminError::Unhealthy(_))
}

fn transient(e: &AdminError) -> bool {
    e.is_transient()
}

fn not_ready(e: &AdminError) -> bool {
    matches!(e, AdminError::LearnerNotReady(_))
}

/// The leader, as every listed endpoint reports it (they must agree).
async fn agreed_leader(h: &dyn Harness, admin: &dyn EtcdAdmin, names: &[&str]) -> u64 {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut leaders = Vec::new();
        for n in names {
            leaders.push(admin.status(&h.endpoint(n)).await.unwrap().leader);
        }
        if leaders[0] != 0 && leaders.iter().all(|l| *l == leaders[0]) {
            return leaders[0];
        }
        assert!(
            Instant::now() < deadline,
            "members disagree on the leader: {leaders:x?}"
        );
        h.tick().await;
    }
}

async fn name_of(admin: &dyn EtcdAdmin, id: u64) -> String {
    let members = admin.member_list().await.unwrap();
    members.into_iter().find(|m| m.id == id).unwrap().name
}

// ---------------------------------------------------------------------------------------------
// Scenarios, run against real etcd and against the model. Every cluster starts as a, b, c.

async fn members_and_status(h: &dyn Harness) {
    let admin = h.admin(T).await;
    let members = admin.member_list().await.unwrap();
    assert_eq!(members.len(), 3);
    assert!(
        members.iter().all(|m| m.is_started() && !m.is_learner),
        "{members:?}"
    );
    let mut names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["a", "b", "c"]);
    for m in &members {
        assert_eq!(m.client_urls, vec![h.endpoint(&m.name)]);
    }

    let leader = agreed_leader(h, admin.as_ref(), &["a", "b", "c"]).await;
    assert!(members.iter().any(|m| m.id == leader));
    for m in &members {
        let s = admin.status(&h.endpoint(&m.name)).await.unwrap();
        assert_eq!(s.member_id, m.id);
        assert!(s.version.starts_with("3.4."), "{}", s.version);
        assert!(
            !s.is_learner && s.raft_index > 0 && s.raft_term > 0,
            "{s:?}"
        );
        assert!(s.errors.is_empty(), "{s:?}");
    }
}

async fn learner_lifecycle(h: &dyn Harness) {
    let admin = h.admin(T).await;
    let peer = vec![h.peer_url("d")];
    // Right after start, etcd refuses adds until all voters have been connected for 5 s.
    let added = until_ok(h, "add learner", unhealthy, || {
        admin.member_add(&peer, true)
    })
    .await;
    let d = added.member.id;
    assert!(added.member.is_learner && !added.member.is_started());
    assert_eq!(added.member.peer_urls, peer);
    assert_eq!(added.members.len(), 4);
    assert!(added.members.iter().any(|m| m.id == d));

    // One learner at most; peer URLs are unique.
    let second = admin.member_add(&[h.peer_url("e")], true).await;
    assert_eq!(second, Err(AdminError::TooManyLearners));
    let again = admin.member_add(&peer, false).await;
    assert!(
        matches!(again, Err(AdminError::PeerUrlExists(_))),
        "{again:?}"
    );
    // Leadership cannot go to a learner.
    let leader = agreed_leader(h, admin.as_ref(), &["a", "b", "c"]).await;
    let leader_ep = h.endpoint(&name_of(admin.as_ref(), leader).await);
    assert_eq!(
        admin.move_leader(&leader_ep, d).await,
        Err(AdminError::IsLearner(d))
    );

    // Start it, promote it once it is in sync, and check it votes.
    let d_ep = h.start_added("d", &added).await;
    let status = until_ok(h, "learner status", |_| true, || admin.status(&d_ep)).await;
    assert!(status.is_learner);
    assert_eq!(status.member_id, d);
    until_ok(h, "promote", not_ready, || admin.member_promote(d)).await;
    let members = admin.member_list().await.unwrap();
    let dm = members.iter().find(|m| m.id == d).unwrap();
    assert!(!dm.is_learner && dm.name == "d" && dm.client_urls == vec![d_ep.clone()]);
    let promoted_again = admin.member_promote(d).await;
    assert!(
        matches!(promoted_again, Err(AdminError::Other(_))),
        "{promoted_again:?}"
    );

    // Remove it again.
    until_ok(h, "remove", unhealthy, || admin.member_remove(d)).await;
    assert_eq!(admin.member_list().await.unwrap().len(), 3);
    assert_eq!(
        admin.member_remove(d).await,
        Err(AdminError::MemberNotFound(d))
    );
    assert_eq!(
        admin.member_promote(d).await,
        Err(AdminError::MemberNotFound(d))
    );
}

async fn member_down(h: &dyn Harness) {
    // Let the 5 s of the strict checks pass first, so that the refusals below are due to the
    // member that is down and nothing else.
    h.settle().await;
    let admin = h.admin(T).await;
    let members = admin.member_list().await.unwrap();
    let leader = agreed_leader(h, admin.as_ref(), &["a", "b", "c"]).await;
    let dead = members.iter().find(|m| m.id == leader).unwrap();
    let live: Vec<_> = members.iter().filter(|m| m.id != leader).collect();
    h.kill(&dead.name).await;
    let live_names: Vec<&str> = live.iter().map(|m| m.name.as_str()).collect();
    // Wait for the survivors to elect a new leader.
    let deadline = Instant::now() + PATIENCE;
    while agreed_leader(h, admin.as_ref(), &live_names).await == dead.id {
        assert!(Instant::now() < deadline, "no new leader");
        h.tick().await;
    }

    // Strict reconfiguration checks with one of three voters down.
    let removed_live = admin.member_remove(live[0].id).await;
    assert!(
        matches!(removed_live, Err(AdminError::Unhealthy(_))),
        "{removed_live:?}"
    );
    let learner = admin.member_add(&[h.peer_url("d")], true).await;
    assert!(
        matches!(learner, Err(AdminError::Unhealthy(_))),
        "{learner:?}"
    );
    // The down member itself may go (retrying while the cluster is still settling on its new
    // leader: a proposal made during an election is dropped and times out as NoQuorum).
    until_ok(h, "remove down member", transient, || {
        admin.member_remove(dead.id)
    })
    .await;
    let left = admin.member_list().await.unwrap();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(!left.iter().any(|m| m.id == dead.id));

    // Two voters, one down: no quorum. Status still answers, without a leader.
    h.kill(&live[1].name).await;
    let survivor = h.endpoint(&live[0].name);
    let short = h.connector().connect(&h.endpoints(), SHORT).await.unwrap();
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        let s = short.status(&survivor).await.unwrap();
        if s.leader == 0 || Instant::now() > deadline {
            break s;
        }
        h.tick().await;
    };
    assert_eq!(status.leader, 0, "{status:?}");
    assert!(
        status.errors.iter().any(|e| e.contains("no leader")),
        "{status:?}"
    );
    let list = short.member_list().await;
    assert!(matches!(list, Err(AdminError::NoQuorum(_))), "{list:?}");
    let removed = short.member_remove(live[1].id).await;
    assert!(
        matches!(removed, Err(AdminError::NoQuorum(_))),
        "{removed:?}"
    );
}

async fn move_leader(h: &dyn Harness) {
    let admin = h.admin(T).await;
    let leader = agreed_leader(h, admin.as_ref(), &["a", "b", "c"]).await;
    let members = admin.member_list().await.unwrap();
    let leader_name = members
        .iter()
        .find(|m| m.id == leader)
        .unwrap()
        .name
        .clone();
    let follower = members.iter().find(|m| m.id != leader).unwrap();
    let other = members
        .iter()
        .find(|m| m.id != leader && m.id != follower.id)
        .unwrap();

    // Sent to a follower: refused.
    let wrong = admin
        .move_leader(&h.endpoint(&follower.name), other.id)
        .await;
    assert!(
        matches!(&wrong, Err(AdminError::Other(m)) if m.contains("not leader")),
        "{wrong:?}"
    );
    let unknown = admin.move_leader(&h.endpoint(&leader_name), 0x1234).await;
    assert_eq!(unknown, Err(AdminError::MemberNotFound(0x1234)));

    admin
        .move_leader(&h.endpoint(&leader_name), follower.id)
        .await
        .unwrap();
    assert_eq!(
        agreed_leader(h, admin.as_ref(), &["a", "b", "c"]).await,
        follower.id
    );
}

async fn dead_endpoints(connector: &dyn EtcdConnector, dead: &[String]) {
    let start = Instant::now();
    let result = connector.connect(dead, SHORT).await;
    assert!(
        matches!(result, Err(AdminError::Unavailable(_))),
        "{:?}",
        result.err()
    );
    assert!(
        start.elapsed() < SHORT + Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
}

// ---------------------------------------------------------------------------------------------
// Real etcd.

/// One etcd process; killed and reaped on drop.
struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct RealCluster {
    /// This cluster's loopback address.
    ip: String,
    /// First port of this cluster's range: member i uses base + 2i (client), base + 2i + 1 (peer).
    base: u16,
    procs: Mutex<Vec<Proc>>,
    names: Mutex<Vec<String>>,
    dir: tempfile::TempDir,
    connector: GrpcConnector,
    /// When the cluster was first seen ready.
    ready_at: Instant,
}

static CLUSTERS: AtomicU16 = AtomicU16::new(0);

/// A loopback address unique to this test process.
fn loopback_ip() -> String {
    let pid = std::process::id();
    format!(
        "127.{}.{}.{}",
        64 + ((pid >> 16) & 63),
        (pid >> 8) & 255,
        pid & 255
    )
}

impl RealCluster {
    async fn start() -> Self {
        let n = CLUSTERS.fetch_add(1, Ordering::Relaxed);
        let mut cluster = Self {
            ip: loopback_ip(),
            base: 20_000 + n * 20,
            procs: Mutex::new(Vec::new()),
            names: Mutex::new(vec!["a".into(), "b".into(), "c".into()]),
            dir: tempfile::tempdir().unwrap(),
            connector: GrpcConnector,
            ready_at: Instant::now(),
        };
        let initial: Vec<String> = ["a", "b", "c"]
            .iter()
            .map(|m| format!("{m}={}", cluster.peer_url(m)))
            .collect();
        for name in ["a", "b", "c"] {
            cluster.spawn(name, &initial.join(","), "new");
        }
        cluster.wait_ready().await;
        cluster.ready_at = Instant::now();
        cluster
    }

    fn index(name: &str) -> u16 {
        u16::from(name.as_bytes()[0] - b'a')
    }

    fn spawn(&self, name: &str, initial_cluster: &str, state: &str) {
        let log = self.dir.path().join(format!("{name}.log"));
        let data = self.dir.path().join(name);
        let client = self.endpoint(name);
        let peer = self.peer_url(name);
        let child = Command::new("etcd")
            .args(["--name", name, "--data-dir"])
            .arg(&data)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args([
                "--initial-cluster",
                initial_cluster,
                "--initial-cluster-state",
                state,
            ])
            .args([
                "--initial-cluster-token",
                &format!("steward-{}-{}", self.ip, self.base),
            ])
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args([
                "--logger",
                "zap",
                "--log-outputs",
                "stderr",
                "--log-level",
                "warn",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .expect("spawning etcd (is /usr/bin/etcd installed?)");
        self.procs.lock().unwrap().push(Proc {
            name: name.to_owned(),
            child,
            log,
        });
    }

    /// Waits until the cluster lists a, b and c started and every member knows the leader.
    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(admin) = self.connector.connect(&self.endpoints(), SHORT).await
                && let Ok(members) = admin.member_list().await
                && members.len() == 3
                && members.iter().all(|m| m.is_started())
            {
                let mut leaders = Vec::new();
                for n in ["a", "b", "c"] {
                    leaders.push(admin.status(&self.endpoint(n)).await.map(|s| s.leader));
                }
                if leaders.iter().all(|l| matches!(l, Ok(x) if *x != 0)) {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "etcd cluster did not come up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for RealCluster {
    fn drop(&mut self) {
        let procs = std::mem::take(&mut *self.procs.lock().unwrap_or_else(|e| e.into_inner()));
        if std::thread::panicking() {
            for p in &procs {
                let log = std::fs::read_to_string(&p.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                eprintln!("--- etcd {} (last lines) ---", p.name);
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
        }
        drop(procs); // kills and reaps, before the data directories go
    }
}

#[async_trait]
impl Harness for RealCluster {
    fn connector(&self) -> &dyn EtcdConnector {
        &self.connector
    }

    fn endpoints(&self) -> Vec<String> {
        self.names
            .lock()
            .unwrap()
            .iter()
            .map(|n| self.endpoint(n))
            .collect()
    }

    fn endpoint(&self, name: &str) -> String {
        format!("http://{}:{}", self.ip, self.base + 2 * Self::index(name))
    }

    fn peer_url(&self, name: &str) -> String {
        format!(
            "http://{}:{}",
            self.ip,
            self.base + 2 * Self::index(name) + 1
        )
    }

    async fn start_added(&self, name: &str, added: &Added) -> String {
        let initial: Vec<String> = added
            .members
            .iter()
            .flat_map(|m| {
                let n = if m.id == added.member.id {
                    name.to_owned()
                } else {
                    m.name.clone()
                };
                m.peer_urls
                    .iter()
                    .map(move |u| format!("{n}={u}"))
                    .collect::<Vec<_>>()
            })
            .collect();
        self.spawn(name, &initial.join(","), "existing");
        self.names.lock().unwrap().push(name.to_owned());
        self.endpoint(name)
    }

    async fn kill(&self, name: &str) {
        let proc = {
            let mut procs = self.procs.lock().unwrap();
            let i = procs.iter().position(|p| p.name == name).unwrap();
            procs.remove(i)
        };
        drop(proc);
    }

    async fn tick(&self) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    async fn settle(&self) {
        // etcd's HealthInterval is 5 s, counted from when the peers connected.
        let at = self.ready_at + Duration::from_millis(5_500);
        tokio::time::sleep_until(at.into()).await;
    }
}

#[tokio::test]
async fn real_members_and_status() {
    members_and_status(&RealCluster::start().await).await;
}

#[tokio::test]
async fn real_learner_lifecycle() {
    learner_lifecycle(&RealCluster::start().await).await;
}

#[tokio::test]
async fn real_member_down() {
    member_down(&RealCluster::start().await).await;
}

#[tokio::test]
async fn real_move_leader() {
    move_leader(&RealCluster::start().await).await;
}

#[tokio::test]
async fn real_dead_endpoints() {
    let ip = loopback_ip();
    // Refused (nothing listens), unroutable (TEST-NET-1), and a black hole: a socket that
    // completes the TCP handshake but never answers, so only the timeout ends the wait.
    let black_hole = std::net::TcpListener::bind((ip.as_str(), 0)).unwrap();
    let hole = format!("http://{}", black_hole.local_addr().unwrap());
    let refused = format!("http://{ip}:19999");
    dead_endpoints(
        &GrpcConnector,
        &[refused.clone(), "http://192.0.2.1:2379".into()],
    )
    .await;
    dead_endpoints(&GrpcConnector, &[refused, hole]).await;
    drop(black_hole);
}

// ---------------------------------------------------------------------------------------------
// The model.

struct ModelCluster {
    model: EtcdModel,
    connector: steward_operator::etcd::admin::model::ModelConnector,
}

impl ModelCluster {
    fn new() -> Self {
        let model = EtcdModel::bootstrap(&["a", "b", "c"].map(InitialMember::named));
        let connector = model.connector();
        Self { model, connector }
    }
}

#[async_trait]
impl Harness for ModelCluster {
    fn connector(&self) -> &dyn EtcdConnector {
        &self.connector
    }

    fn endpoints(&self) -> Vec<String> {
        self.model
            .members()
            .iter()
            .flat_map(|m| m.client_urls.clone())
            .collect()
    }

    fn endpoint(&self, name: &str) -> String {
        InitialMember::named(name).client_url
    }

    fn peer_url(&self, name: &str) -> String {
        InitialMember::named(name).peer_url
    }

    async fn start_added(&self, name: &str, added: &Added) -> String {
        let url = self.endpoint(name);
        self.model
            .start_member(added.member.id, name, &url)
            .unwrap();
        url
    }

    async fn kill(&self, name: &str) {
        self.model.kill(self.model.id_of(name).unwrap()).unwrap();
    }

    async fn settle(&self) {
        self.model.settle();
    }

    async fn tick(&self) {
        self.model.settle();
        for m in self.model.members() {
            self.model.catch_up(m.id).unwrap();
        }
    }
}

#[tokio::test]
async fn model_members_and_status() {
    members_and_status(&ModelCluster::new()).await;
}

#[tokio::test]
async fn model_learner_lifecycle() {
    let h = ModelCluster::new();
    learner_lifecycle(&h).await;
    // Exactly one learner was added, promoted and removed; nothing else changed.
    let kinds: Vec<_> = h.model.changes().iter().map(|c| c.kind()).collect();
    use steward_operator::etcd::admin::model::CallKind::*;
    assert_eq!(kinds, [MemberAdd, MemberPromote, MemberRemove]);
}

#[tokio::test]
async fn model_member_down() {
    member_down(&ModelCluster::new()).await;
}

#[tokio::test]
async fn model_move_leader() {
    move_leader(&ModelCluster::new()).await;
}

#[tokio::test]
async fn model_dead_endpoints() {
    let h = ModelCluster::new();
    dead_endpoints(h.connector(), &["http://nowhere:2379".to_owned()]).await;
    for m in h.model.members() {
        h.model.kill(m.id).unwrap();
    }
    dead_endpoints(h.connector(), &h.endpoints()).await;
}
