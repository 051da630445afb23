//! The real [`EtcdAdmin`]: etcd's v3 gRPC API through the `etcd-client` crate.
//!
//! One gRPC client per endpoint rather than one load-balanced channel, so that the admin
//! chooses which member serves each call:
//! - `connect` probes every endpoint with `Maintenance.Status` and fails with
//!   [`AdminError::Unavailable`] if none answers within the timeout (the underlying channels are
//!   lazy, so without the probe a dead cluster would only show up on the first call);
//! - cluster calls go to the member that answered first (voters before learners, which refuse
//!   most RPCs) and fail over to the next endpoint only when the member could not serve at all;
//! - `status` and `move_leader` talk to exactly the endpoint they are given.
//!
//! Every call, failover included, is bounded by the timeout given to `connect`. Error texts are
//! etcd's own (see etcd's `api/v3rpc/rpctypes/error.go`) and never contain credentials.
//!
//! `member_list` is made linearizable by a linearizable read first (etcd 3.4 has no
//! linearizable MemberList); `member_remove` and `member_promote` check the member list first
//! (see `ensure_listed`), so they need a leader even where etcd's strict checks would refuse
//! without one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Client, ConnectOptions, GetOptions, MemberAddOptions};
use futures::StreamExt;
use futures::stream::FuturesUnordered;

use super::{Added, AdminError, EndpointStatus, EtcdAdmin, EtcdConnector, Member};

/// Opens [`GrpcAdmin`]s on real etcd endpoints (plain `http://`; TLS is not configured here).
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcConnector;

#[async_trait]
impl EtcdConnector for GrpcConnector {
    async fn connect(
        &self,
        endpoints: &[String],
        timeout: Duration,
    ) -> Result<Box<dyn EtcdAdmin>, AdminError> {
        Ok(Box::new(GrpcAdmin::connect(endpoints, timeout).await?))
    }
}

/// An [`EtcdAdmin`] over etcd's gRPC API; see the module docs for how endpoints are used.
pub struct GrpcAdmin {
    /// Endpoints in preference order (answered the connect probe first, voters first).
    clients: Vec<(String, Client)>,
    /// Index into `clients` of the member that served the last successful call.
    preferred: AtomicUsize,
    timeout: Duration,
}

impl std::fmt::Debug for GrpcAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcAdmin")
            .field(
                "endpoints",
                &self.clients.iter().map(|(e, _)| e).collect::<Vec<_>>(),
            )
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Key of the linearizable count-only read that `member_list` uses as a barrier. It reads
/// nothing; any key works.
const BARRIER_KEY: &str = "steward/member-list-barrier";

impl GrpcAdmin {
    /// Connects to `endpoints` and checks that at least one of them answers within `timeout`.
    pub async fn connect(endpoints: &[String], timeout: Duration) -> Result<Self, AdminError> {
        if endpoints.is_empty() {
            return Err(AdminError::Unavailable("no endpoints given".to_owned()));
        }
        let mut clients = Vec::with_capacity(endpoints.len());
        let mut last_error = None;
        for endpoint in endpoints {
            match open(endpoint, timeout).await {
                Ok(client) => clients.push((endpoint.clone(), client)),
                Err(e) => last_error = Some(e),
            }
        }
        if clients.is_empty() {
            return Err(last_error
                .unwrap_or_else(|| AdminError::Unavailable("no usable endpoint".to_owned())));
        }

        // Probe all endpoints at once; stop at the first voter that answers.
        let mut probes: FuturesUnordered<_> = clients
            .iter()
            .enumerate()
            .map(|(i, (_, client))| {
                let mut maintenance = client.maintenance_client();
                async move { (i, maintenance.status().await) }
            })
            .collect();
        let mut answered: Vec<(usize, bool)> = Vec::new();
        let probe_all = async {
            while let Some((i, result)) = probes.next().await {
                match result {
                    Ok(status) => {
                        answered.push((i, status.is_learner()));
                        if !status.is_learner() {
                            break;
                        }
                    }
                    Err(e) => last_error = Some(classify(&e, 0, Served::ByThisMember)),
                }
            }
        };
        // Elapsing only means the remaining endpoints did not answer in time.
        let _ = tokio::time::timeout(timeout, probe_all).await;
        if answered.is_empty() {
            let reason = last_error.map_or_else(
                || format!("no answer within {timeout:?}"),
                |e| e.to_string(),
            );
            return Err(AdminError::Unavailable(format!(
                "none of {} endpoint(s) answered: {reason}",
                endpoints.len()
            )));
        }

        // Voters that answered, then learners that answered, then the rest in the given order.
        answered.sort_by_key(|&(_, learner)| learner);
        let mut order: Vec<usize> = answered.iter().map(|&(i, _)| i).collect();
        let rest: Vec<usize> = (0..clients.len()).filter(|i| !order.contains(i)).collect();
        order.extend(rest);
        let mut slots: Vec<Option<(String, Client)>> = clients.into_iter().map(Some).collect();
        let clients = order
            .into_iter()
            .filter_map(|i| slots.get_mut(i).and_then(Option::take))
            .collect();
        Ok(Self {
            clients,
            preferred: AtomicUsize::new(0),
            timeout,
        })
    }

    /// Runs `call` against the preferred member, failing over to the next endpoint while the
    /// member could not serve the call at all. The whole loop is bounded by the timeout.
    async fn with_failover<T, F, Fut>(&self, call: F) -> Result<T, AdminError>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, AdminError>>,
    {
        let n = self.clients.len();
        let start = self.preferred.load(Ordering::Relaxed);
        let attempts = async {
            let mut last = AdminError::Unavailable("no endpoints".to_owned());
            for k in 0..n {
                let i = (start + k) % n;
                let Some((_, client)) = self.clients.get(i) else {
                    continue;
                };
                match call(client.clone()).await {
                    Ok(value) => {
                        self.preferred.store(i, Ordering::Relaxed);
                        return Ok(value);
                    }
                    // This member cannot serve (down, or a learner): try the next one. Retrying a
                    // membership change elsewhere is safe: etcd rejects a duplicate add (same
                    // peer URLs), remove (member not found) or promote (not a learner).
                    Err(e @ AdminError::Unavailable(_)) => last = e,
                    Err(e) => return Err(e),
                }
            }
            Err(last)
        };
        match tokio::time::timeout(self.timeout, attempts).await {
            Ok(result) => result,
            Err(_) => Err(AdminError::NoQuorum(format!(
                "no answer within {:?}",
                self.timeout
            ))),
        }
    }

    /// A client for exactly `endpoint`: ours if it is one of the connected endpoints.
    async fn client_for(&self, endpoint: &str) -> Result<Client, AdminError> {
        match self.clients.iter().find(|(e, _)| e == endpoint) {
            Some((_, client)) => Ok(client.clone()),
            None => open(endpoint, self.timeout).await,
        }
    }

    /// Runs `fut` against one member, bounded by the timeout.
    async fn bounded<T>(
        &self,
        fut: impl Future<Output = Result<T, AdminError>>,
        on_timeout: impl FnOnce(String) -> AdminError,
    ) -> Result<T, AdminError> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(result) => result,
            Err(_) => Err(on_timeout(format!("no answer within {:?}", self.timeout))),
        }
    }
}

/// Builds a (lazy) client for one endpoint.
async fn open(endpoint: &str, timeout: Duration) -> Result<Client, AdminError> {
    let options = ConnectOptions::new()
        .with_connect_timeout(timeout)
        .with_timeout(timeout);
    match tokio::time::timeout(timeout, Client::connect([endpoint], Some(options))).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(classify(&e, 0, Served::ByThisMember)),
        Err(_) => Err(AdminError::Unavailable(format!(
            "no answer within {timeout:?}"
        ))),
    }
}

/// The linearizable member list of the member behind `client`.
async fn linearizable_member_list(client: Client) -> Result<Vec<Member>, AdminError> {
    // etcd 3.4 serves MemberList from the local member's view, and etcd-client 0.21 always sends
    // `linearizable: false`. A linearizable (count-only) read first makes this member catch up
    // with the leader's commit index, which is what etcd 3.5's linearizable MemberList does.
    let mut kv = client.kv_client();
    kv.get(BARRIER_KEY, Some(GetOptions::new().with_count_only()))
        .await
        .map_err(|e| classify(&e, 0, Served::ByCluster))?;
    let mut cluster = client.cluster_client();
    let response = cluster
        .member_list()
        .await
        .map_err(|e| classify(&e, 0, Served::ByCluster))?;
    Ok(response.members().iter().map(convert_member).collect())
}

/// [`AdminError::MemberNotFound`] unless `id` is in the (linearizable) member list.
///
/// etcd 3.4 answers a remove or promote of an ID that was *removed before* not with "member not
/// found" but by dropping the proposal: the call hangs until etcd's request timeout ("request
/// timed out"), which would make a retried removal look like a lost quorum forever. Checking
/// first makes "already removed" a quick `MemberNotFound`, as for IDs that never existed.
async fn ensure_listed(client: &Client, id: u64) -> Result<(), AdminError> {
    let members = linearizable_member_list(client.clone()).await?;
    if members.iter().any(|m| m.id == id) {
        Ok(())
    } else {
        Err(AdminError::MemberNotFound(id))
    }
}

fn convert_member(m: &etcd_client::Member) -> Member {
    Member {
        id: m.id(),
        name: m.name().to_owned(),
        peer_urls: m.peer_urls().to_vec(),
        client_urls: m.client_urls().to_vec(),
        is_learner: m.is_learner(),
    }
}

#[async_trait]
impl EtcdAdmin for GrpcAdmin {
    async fn member_list(&self) -> Result<Vec<Member>, AdminError> {
        self.with_failover(linearizable_member_list).await
    }

    async fn member_add(&self, peer_urls: &[String], learner: bool) -> Result<Added, AdminError> {
        self.with_failover(|client| async move {
            let mut cluster = client.cluster_client();
            let options = if learner {
                MemberAddOptions::new().with_is_learner()
            } else {
                MemberAddOptions::new()
            };
            let response = cluster
                .member_add(peer_urls.to_vec(), Some(options))
                .await
                .map_err(|e| classify(&e, 0, Served::ByCluster))?;
            let member = response.member().map(convert_member).ok_or_else(|| {
                AdminError::Other("member add answered without the member".to_owned())
            })?;
            let members = response.member_list().iter().map(convert_member).collect();
            Ok(Added { member, members })
        })
        .await
    }

    async fn member_promote(&self, id: u64) -> Result<(), AdminError> {
        self.with_failover(|client| async move {
            ensure_listed(&client, id).await?;
            let mut cluster = client.cluster_client();
            cluster
                .member_promote(id)
                .await
                .map_err(|e| classify(&e, id, Served::ByCluster))?;
            Ok(())
        })
        .await
    }

    async fn member_remove(&self, id: u64) -> Result<(), AdminError> {
        self.with_failover(|client| async move {
            ensure_listed(&client, id).await?;
            let mut cluster = client.cluster_client();
            cluster
                .member_remove(id)
                .await
                .map_err(|e| classify(&e, id, Served::ByCluster))?;
            Ok(())
        })
        .await
    }

    async fn status(&self, endpoint: &str) -> Result<EndpointStatus, AdminError> {
        let call = async {
            let client = self.client_for(endpoint).await?;
            let mut maintenance = client.maintenance_client();
            let s = maintenance
                .status()
                .await
                .map_err(|e| classify(&e, 0, Served::ByThisMember))?;
            let member_id = s.header().map_or(0, |h| h.member_id());
            Ok(EndpointStatus {
                member_id,
                leader: s.leader(),
                version: s.version().to_owned(),
                db_size: s.db_size(),
                // etcd 3.4 reports the applied index separately; older servers leave it 0.
                raft_index: if s.raft_applied_index() != 0 {
                    s.raft_applied_index()
                } else {
                    s.raft_index()
                },
                raft_term: s.raft_term(),
                is_learner: s.is_learner(),
                errors: s.errors().to_vec(),
            })
        };
        self.bounded(call, AdminError::Unavailable).await
    }

    async fn move_leader(&self, leader_endpoint: &str, to: u64) -> Result<(), AdminError> {
        let call = async {
            let client = self.client_for(leader_endpoint).await?;
            let mut maintenance = client.maintenance_client();
            match maintenance.move_leader(to).await {
                Ok(_) => Ok(()),
                Err(e) => match classify(&e, to, Served::ByCluster) {
                    // "bad leader transferee": not a member, or a learner. Ask which.
                    AdminError::Other(msg) if msg.contains(BAD_TRANSFEREE) => {
                        let members = linearizable_member_list(client).await?;
                        Err(match members.iter().find(|m| m.id == to) {
                            None => AdminError::MemberNotFound(to),
                            Some(m) if m.is_learner => AdminError::IsLearner(to),
                            Some(_) => AdminError::Other(msg),
                        })
                    }
                    other => Err(other),
                },
            }
        };
        self.bounded(call, AdminError::NoQuorum).await
    }
}

const BAD_TRANSFEREE: &str = "etcdserver: bad leader transferee";

/// Who had to answer the call: a timeout from one member's own status means the member is
/// unreachable; a timeout on a cluster call means the cluster could not commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Served {
    ByThisMember,
    ByCluster,
}

/// Maps an `etcd-client` error to an [`AdminError`]; `id` is the member the call was about.
fn classify(err: &etcd_client::Error, id: u64, served: Served) -> AdminError {
    match err {
        etcd_client::Error::GRpcStatus(status) => {
            classify_status(status.code() as i32, status.message(), id, served)
        }
        etcd_client::Error::TransportError(e) => AdminError::Unavailable(format!("transport: {e}")),
        etcd_client::Error::IoError(e) => AdminError::Unavailable(format!("io: {e}")),
        etcd_client::Error::InvalidUri(e) => AdminError::Other(format!("invalid endpoint: {e}")),
        etcd_client::Error::InvalidArgs(e) => AdminError::Other(format!("invalid arguments: {e}")),
        other => AdminError::Other(other.to_string()),
    }
}

/// gRPC status codes (`google.golang.org/grpc/codes`).
mod code {
    pub const CANCELLED: i32 = 1;
    pub const DEADLINE_EXCEEDED: i32 = 4;
    pub const UNAVAILABLE: i32 = 14;
}

/// Maps a gRPC status to an [`AdminError`] by etcd's error text first, then by status code.
fn classify_status(code: i32, message: &str, id: u64, served: Served) -> AdminError {
    let msg = message.to_owned();
    let has = |needle: &str| message.contains(needle);
    // Order matters: "...a learner member which is in sync with leader" extends
    // "...a learner member", and "request timed out" has several suffixes.
    if has("can only promote a learner member which is in sync with leader") {
        AdminError::LearnerNotReady(id)
    } else if has("re-configuration failed due to not enough started members")
        || has("etcdserver: unhealthy cluster")
    {
        // 3.4 strict reconfiguration checks: not enough started voters (ErrNotEnoughStartedMembers)
        // or a voter not connected to the serving member for 5 s (ErrUnhealthy).
        AdminError::Unhealthy(msg)
    } else if has("too many learner members in cluster") {
        AdminError::TooManyLearners
    } else if has("Peer URLs already exists") || has("member ID already exist") {
        // 3.4 derives a new member's ID from its peer URLs and the current second, so re-adding
        // the same URLs within a second reports the ID, later ones the URLs.
        AdminError::PeerUrlExists(msg)
    } else if has("etcdserver: member not found") {
        AdminError::MemberNotFound(id)
    } else if has("rpc not supported for learner") || has("etcdserver: server stopped") {
        // This member cannot serve the call; another one may.
        AdminError::Unavailable(msg)
    } else if has("etcdserver: no leader")
        || has("etcdserver: request timed out")
        || has("etcdserver: leader changed")
        || has("etcdserver: not capable")
        || has("etcdserver: too many requests")
        || has("context deadline exceeded")
    {
        AdminError::NoQuorum(msg)
    } else if has("etcdserver:") {
        // "not leader", "bad leader transferee", "can only promote a learner member", ...
        AdminError::Other(msg)
    } else if code == code::DEADLINE_EXCEEDED || code == code::CANCELLED {
        match served {
            Served::ByThisMember => AdminError::Unavailable(msg),
            Served::ByCluster => AdminError::NoQuorum(msg),
        }
    } else if code == code::UNAVAILABLE {
        // Not an etcd server error: the transport failed (refused, reset, DNS).
        AdminError::Unavailable(msg)
    } else {
        AdminError::Other(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAILED_PRECONDITION: i32 = 9;
    const NOT_FOUND: i32 = 5;
    const UNKNOWN: i32 = 2;

    fn c(code: i32, msg: &str) -> AdminError {
        classify_status(code, msg, 7, Served::ByCluster)
    }

    #[test]
    fn etcd_error_texts_map_to_kinds() {
        assert_eq!(
            c(
                FAILED_PRECONDITION,
                "etcdserver: can only promote a learner member which is in sync with leader"
            ),
            AdminError::LearnerNotReady(7)
        );
        assert!(matches!(
            c(
                FAILED_PRECONDITION,
                "etcdserver: can only promote a learner member"
            ),
            AdminError::Other(_)
        ));
        assert!(matches!(
            c(
                FAILED_PRECONDITION,
                "etcdserver: re-configuration failed due to not enough started members"
            ),
            AdminError::Unhealthy(_)
        ));
        assert!(matches!(
            c(code::UNAVAILABLE, "etcdserver: unhealthy cluster"),
            AdminError::Unhealthy(_)
        ));
        assert_eq!(
            c(
                FAILED_PRECONDITION,
                "etcdserver: too many learner members in cluster"
            ),
            AdminError::TooManyLearners
        );
        assert!(matches!(
            c(FAILED_PRECONDITION, "etcdserver: Peer URLs already exists"),
            AdminError::PeerUrlExists(_)
        ));
        assert!(matches!(
            c(FAILED_PRECONDITION, "etcdserver: member ID already exist"),
            AdminError::PeerUrlExists(_)
        ));
        assert_eq!(
            c(NOT_FOUND, "etcdserver: member not found"),
            AdminError::MemberNotFound(7)
        );
        for text in [
            "etcdserver: no leader",
            "etcdserver: request timed out",
            "etcdserver: request timed out, possibly due to previous leader failure",
            "etcdserver: leader changed",
        ] {
            assert!(
                matches!(c(code::UNAVAILABLE, text), AdminError::NoQuorum(_)),
                "{text}"
            );
        }
        assert!(matches!(
            c(UNKNOWN, "context deadline exceeded"),
            AdminError::NoQuorum(_)
        ));
        assert!(matches!(
            c(
                code::UNAVAILABLE,
                "etcdserver: rpc not supported for learner"
            ),
            AdminError::Unavailable(_)
        ));
        assert!(matches!(
            c(FAILED_PRECONDITION, "etcdserver: not leader"),
            AdminError::Other(_)
        ));
    }

    #[test]
    fn transport_failures_and_timeouts_depend_on_who_answers() {
        assert!(matches!(
            c(
                code::UNAVAILABLE,
                "tcp connect error: Connection refused (os error 111)"
            ),
            AdminError::Unavailable(_)
        ));
        assert!(matches!(
            c(code::CANCELLED, "Timeout expired"),
            AdminError::NoQuorum(_)
        ));
        assert!(matches!(
            classify_status(code::CANCELLED, "Timeout expired", 0, Served::ByThisMember),
            AdminError::Unavailable(_)
        ));
        assert!(matches!(c(UNKNOWN, "something else"), AdminError::Other(_)));
    }
}
