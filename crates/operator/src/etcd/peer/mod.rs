//! The peer controller (seed: "the peer resource"): for each `EtcdPeer`, creates its claim if
//! missing (never modifying an existing one), creates its Pod with the bootstrap configuration
//! (always passed; etcd ignores it once a data dir exists), replaces the Pod when the peer's
//! spec changed (Pod specs are immutable) or the Pod ended, and reports the member in the
//! peer's status: its host name, and — once the Pod is ready and answers over gRPC — its member
//! ID and version, and the UID of the claim it answered on (`claimUid`). Deleting a peer
//! removes its Pod (owner reference) and keeps its claim.
//!
//! Data loss: once a member answered on a claim, that claim holds its data. If the claim later
//! disappears, is being deleted or is replaced by another claim of the same name, the member's
//! data is gone and etcd must not see the member again under its old identity (an empty data
//! dir would either fail to join or, for a bootstrap member, found a new empty cluster). The
//! controller then sets `DataLost=True` on the peer, deletes the member Pod and creates neither
//! a claim nor a Pod any more; the cluster's `RecoverMembers` step removes the member and
//! deletes the peer, and a new member takes its place. The cache's view of a lost claim is
//! confirmed with a direct (list) read before anything is deleted. A member whose Node is lost
//! (its `Ready` condition not `True`: the kubelet stopped posting) and that does not answer
//! when asked directly counts the same (reason `NodeLost`): its data is out of reach, and the
//! replacement takes a new name, since the old Pod stays Terminating on that Node.

use crate::resources::pods::CachedPod;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::stores::Subscription;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use steward_api::etcd::{EtcdPeer, EtcdPeerStatus};
use tokio_util::sync::CancellationToken;

use super::EtcdStores;
use super::build::member::{SPEC_HASH, claim, pod};
use super::names::{ClusterNames, claim_name, pod_client_url};
use crate::conditions::{self, Status};
use crate::error::Error;
use crate::resources::nodes::{self, NodeState};
use crate::resources::pods::{has_ended, is_ready};
use crate::runtime::context::{Context, error_policy};

/// The controller name used in logs.
pub const CONTROLLER: &str = "etcd-peer";

/// The peer condition set once the member's data is known to be gone.
pub const DATA_LOST: &str = "DataLost";

/// Why a member's data is gone: the condition's reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    /// `ClaimDeleted`, `ClaimDeleting` or `ClaimReplaced` (or the recorded reason).
    pub reason: String,
    /// For humans.
    pub message: String,
}

/// (pure) Whether the member's data is gone, judged from the peer's last status and its claim
/// as it is now (`None`: no such claim). Once `DataLost=True` it stays so: the peer is only
/// ever deleted after that. A peer whose member never answered (no `claimUid`) has no data to
/// lose.
pub fn data_lost(
    status: &EtcdPeerStatus,
    claim: Option<&ObjectMeta>,
    claim_name: &str,
) -> Option<Lost> {
    if let Some(c) = conditions::get(&status.conditions, DATA_LOST).filter(|c| c.status == "True") {
        return Some(Lost {
            reason: c.reason.clone(),
            message: c.message.clone(),
        });
    }
    let recorded = status.claim_uid.as_deref()?;
    let (reason, why) = match claim {
        None => (
            "ClaimDeleted",
            format!("its claim {claim_name} (uid {recorded}) was deleted"),
        ),
        Some(c) if c.deletion_timestamp.is_some() => (
            "ClaimDeleting",
            format!("its claim {claim_name} (uid {recorded}) is being deleted"),
        ),
        Some(c) if c.uid.as_deref() != Some(recorded) => (
            "ClaimReplaced",
            format!(
                "its claim {claim_name} was replaced: the member ran on uid {recorded}, the claim \
                 now has uid {}",
                c.uid.as_deref().unwrap_or("none")
            ),
        ),
        Some(_) => return None,
    };
    Some(Lost {
        reason: reason.to_owned(),
        message: format!(
            "the member's data is lost: {why}. Its Pod is not started again; the cluster removes \
             the member and adds a new one in its place while it keeps a quorum"
        ),
    })
}

struct State {
    ctx: Arc<Context>,
    stores: EtcdStores,
}

async fn reconcile(peer: Arc<EtcdPeer>, state: Arc<State>) -> Result<Action, Error> {
    if peer.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ctx = &state.ctx;
    let namespace = peer.namespace().unwrap_or_default();
    let name = peer.name_any();
    let object = format!("{namespace}/{name}");
    let names = ClusterNames::new(
        peer.spec.cluster_name.clone(),
        namespace.clone(),
        ctx.cluster_domain.clone(),
    );

    let claim_name = claim_name(&name);
    let claim_ref = ObjectRef::new(&claim_name).within(&namespace);
    let cached_claim = state.stores.claims.get(&claim_ref);
    let previous = peer.status.clone().unwrap_or_default();
    let pods: Api<Pod> = ctx.api(&namespace);
    let current_pod = state
        .stores
        .pods
        .get(&ObjectRef::<CachedPod>::new(&name).within(&namespace));

    // 0. Data loss, judged from the cache and confirmed with a read of the claim.
    let lost = match data_lost(
        &previous,
        cached_claim.as_deref().map(|c| &c.metadata),
        &claim_name,
    ) {
        None => None,
        Some(_) => {
            // A list by name is a consistent read and needs no `get` permission (the operator
            // lists and watches claims).
            let claims: Api<PersistentVolumeClaim> = ctx.api(&namespace);
            let by_name = ListParams::default().fields(&format!("metadata.name={claim_name}"));
            let live = claims
                .list(&by_name)
                .await
                .map_err(|source| Error::kube("list PersistentVolumeClaims", &object, source))?;
            data_lost(
                &previous,
                live.items.first().map(|c| &c.metadata),
                &claim_name,
            )
        }
    };
    let lost = match lost {
        Some(lost) => Some(lost),
        None => node_lost(ctx, &state.stores, current_pod.as_deref(), &previous).await,
    };
    if let Some(lost) = lost {
        return keep_down(
            ctx,
            &peer,
            &names,
            &pods,
            current_pod.as_deref(),
            previous,
            lost,
        )
        .await;
    }

    // 1. The claim: created when missing, never modified.
    if cached_claim.is_none() {
        let claims: Api<PersistentVolumeClaim> = ctx.api(&namespace);
        match claims.create(&PostParams::default(), &claim(&peer)).await {
            Ok(_) => tracing::info!(%object, "created member claim"),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(source) => return Err(Error::kube("create PersistentVolumeClaim", object, source)),
        }
    }

    // 2. The Pod.
    let Some(desired) = pod(&peer, &names) else {
        return Ok(Action::requeue(Duration::from_secs(5)));
    };
    let mut member_pod = None;
    // A claim being deleted (the previous member's, kept while its Pod terminates) is not one
    // to start a member on: the Pod waits until the claim is gone and a new one is created.
    let claim_deleting = cached_claim
        .as_ref()
        .is_some_and(|c| c.metadata.deletion_timestamp.is_some());
    match current_pod {
        None if claim_deleting => {
            tracing::debug!(%object, "claim is being deleted; member Pod waits for a new one");
        }
        None => match pods.create(&PostParams::default(), &desired).await {
            Ok(_) => tracing::info!(%object, "created member Pod"),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(source) => return Err(Error::kube("create Pod", object, source)),
        },
        Some(current) if current.metadata.deletion_timestamp.is_some() => {}
        Some(current) => {
            let want = desired.annotations().get(SPEC_HASH).map(String::as_str);
            let stale = current.annotations().get(SPEC_HASH) != want;
            if stale || has_ended(&current) {
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: current.uid(),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                match pods.delete(&name, &params).await {
                    Ok(_) => tracing::info!(%object, stale, "replacing member Pod"),
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                    Err(source) => return Err(Error::kube("delete Pod", object, source)),
                }
            } else {
                member_pod = Some(current);
            }
        }
    }

    // 3. Status. The member ID and the claim the member answered on are kept while it does
    // not answer.
    let mut status = EtcdPeerStatus {
        observed_generation: peer.metadata.generation,
        hostname: names.fqdn(&name),
        member_id: previous.member_id.clone(),
        claim_uid: previous.claim_uid.clone(),
        conditions: previous.conditions.clone(),
        ..EtcdPeerStatus::default()
    };
    // The claim as it is now, unless it is being deleted.
    let usable_claim = cached_claim
        .as_ref()
        .filter(|c| c.metadata.deletion_timestamp.is_none());
    if let Some(p) = member_pod.as_ref().filter(is_ready)
        && let Some(ip) = p.status.as_ref().and_then(|s| s.pod_ip.clone())
    {
        let url = pod_client_url(&ip);
        if let Ok(admin) = crate::etcd::admin::connector(ctx)?
            .connect(std::slice::from_ref(&url), ctx.database_timeout)
            .await
            && let Ok(answer) = admin.status(&url).await
        {
            status.ready = true;
            status.member_id = Some(format!("{:x}", answer.member_id));
            status.version = Some(answer.version);
            // The member answered on this claim: from now on it holds the member's data.
            if let Some(c) = usable_claim {
                status.claim_uid = c.uid();
            }
        }
    }
    if peer.status.as_ref() != Some(&status) {
        let api: Api<EtcdPeer> = ctx.api(&namespace);
        let body = serde_json::json!({ "status": status });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(|source| Error::kube("patch EtcdPeer status", object, source))?;
    }
    // A member that answers looks again soon until its claim is recorded (the claims cache
    // can lag a new claim, and claims do not wake the peer).
    let claim_settled = usable_claim.is_some_and(|c| !status.ready || status.claim_uid == c.uid());
    Ok(Action::requeue(next_look(
        status.ready,
        member_pod.as_deref(),
        claim_settled,
    )))
}

/// (pure) When the peer looks at its member again without an event: every 30 s while it
/// answers; every 3 s while its Pod runs on a Node but the member does not answer yet (starting,
/// or its Node lost — neither changes the Pod); every 300 s while its Pod waits for a Node with
/// its claim in place — the scheduler's binding is a Pod event, which starts a pass at once, so
/// the look is only a safety net (at 1,000 clusters with unplaceable Pods the 3 s look was most
/// of the operator's CPU). A claim missing or being deleted keeps the 3 s look: claims do not
/// wake the peer, and it creates the claim once the old one is gone; so does a member that
/// answers before its claim is recorded (`claim_usable` is then false).
pub fn next_look(ready: bool, pod: Option<&CachedPod>, claim_usable: bool) -> Duration {
    let placed = pod
        .and_then(|p| p.spec.as_ref())
        .is_some_and(|s| s.node_name.is_some());
    match (ready, pod) {
        (true, _) if claim_usable => Duration::from_secs(30),
        (true, _) => Duration::from_secs(3),
        (false, Some(_)) if !placed && claim_usable => Duration::from_secs(300),
        (false, _) => Duration::from_secs(3),
    }
}

/// (pure) Whether a member's data is out of reach because its Node is lost: its Pod is bound
/// to a Node whose `Ready` condition is not `True` (the node lifecycle controller set it
/// `Unknown` after the kubelet stopped posting for its grace period), the member answered
/// before (it has data there: `claimUid`), and it does not answer now (`answers`).
pub fn lost_with_node(
    node: Option<&str>,
    state: NodeState,
    status: &EtcdPeerStatus,
    answers: bool,
) -> Option<Lost> {
    let node = node.filter(|_| state == NodeState::Lost)?;
    status.claim_uid.as_ref()?;
    if answers {
        return None;
    }
    Some(Lost {
        reason: "NodeLost".into(),
        message: format!(
            "its Node {node} stopped reporting and the member does not answer: its data there is \
             out of reach, so a new member replaces it (its Pod stays Terminating until the Node \
             returns or a person deletes it)"
        ),
    })
}

/// [`lost_with_node`] for this peer's Pod, asking the member directly when its Node is lost.
async fn node_lost(
    ctx: &Context,
    stores: &EtcdStores,
    pod: Option<&CachedPod>,
    status: &EtcdPeerStatus,
) -> Option<Lost> {
    let pod = pod?;
    let (node, state) = nodes::of_pod(&stores.nodes, pod);
    lost_with_node(node.as_deref(), state, status, false)?;
    let answers = match pod.status.as_ref().and_then(|s| s.pod_ip.clone()) {
        None => false,
        Some(ip) => {
            let url = pod_client_url(&ip);
            // Without a client nothing can be asked: never call a member lost then.
            let connector = crate::etcd::admin::connector(ctx).ok()?;
            match connector
                .connect(std::slice::from_ref(&url), ctx.database_timeout)
                .await
            {
                Ok(admin) => admin.status(&url).await.is_ok(),
                Err(_) => false,
            }
        }
    };
    lost_with_node(node.as_deref(), state, status, answers)
}

/// A peer whose data is lost: `DataLost=True` in its status, its Pod deleted (with its UID as
/// precondition), no claim and no Pod created. `RecoverMembers` takes it from there.
async fn keep_down(
    ctx: &Context,
    peer: &EtcdPeer,
    names: &ClusterNames,
    pods: &Api<Pod>,
    current_pod: Option<&CachedPod>,
    previous: EtcdPeerStatus,
    lost: Lost,
) -> Result<Action, Error> {
    let name = peer.name_any();
    let object = format!("{}/{name}", peer.namespace().unwrap_or_default());
    if let Some(current) = current_pod.filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: current.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match pods.delete(&name, &params).await {
            Ok(_) => {
                tracing::warn!(%object, reason = %lost.reason, "member data lost; deleted its Pod")
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(source) => return Err(Error::kube("delete Pod", object, source)),
        }
    }
    let mut status = EtcdPeerStatus {
        observed_generation: peer.metadata.generation,
        hostname: names.fqdn(&name),
        ready: false,
        ..previous
    };
    let flipped = conditions::set(
        &mut status.conditions,
        DATA_LOST,
        Status::True,
        &lost.reason,
        lost.message.clone(),
        peer.metadata.generation,
        ctx.clock.now(),
    );
    if flipped {
        tracing::warn!(%object, reason = %lost.reason, message = %lost.message, "member data lost");
    }
    if peer.status.as_ref() != Some(&status) {
        let api: Api<EtcdPeer> = ctx.api(&peer.namespace().unwrap_or_default());
        let body = serde_json::json!({ "status": status });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(|source| Error::kube("patch EtcdPeer status", object, source))?;
    }
    Ok(Action::requeue(Duration::from_secs(30)))
}

/// Runs the peer controller until `stop` is cancelled, on the shared cache of peers (the
/// cluster controller's cache too: one copy of each peer) with `peer_events` a subscription to
/// it; member Pods trigger their peer.
pub async fn run(
    ctx: Arc<Context>,
    stores: EtcdStores,
    peer_events: Subscription<EtcdPeer>,
    pod_events: Subscription<crate::resources::pods::CachedPod>,
    stop: CancellationToken,
) {
    let cache = (*stores.peers).clone();
    let state = Arc::new(State {
        ctx: ctx.clone(),
        stores,
    });
    Controller::for_shared_stream(peer_events, cache)
        .with_config(ctx.controller_config())
        .owns_shared_stream(pod_events)
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(
            reconcile,
            |obj, err, state: Arc<State>| error_policy(obj, err, state.ctx.clone()),
            state,
        )
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(controller = CONTROLLER, error = %err, "controller event");
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(uid: &str, deleting: bool) -> ObjectMeta {
        ObjectMeta {
            name: Some("demo-1-data".into()),
            uid: Some(uid.into()),
            deletion_timestamp: deleting.then_some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            ),
            ..ObjectMeta::default()
        }
    }

    fn answered_on(uid: &str) -> EtcdPeerStatus {
        EtcdPeerStatus {
            ready: true,
            member_id: Some("9".into()),
            claim_uid: Some(uid.into()),
            ..EtcdPeerStatus::default()
        }
    }

    #[test]
    fn a_member_that_never_answered_has_nothing_to_lose() {
        let fresh = EtcdPeerStatus::default();
        assert_eq!(data_lost(&fresh, None, "demo-1-data"), None);
        assert_eq!(
            data_lost(&fresh, Some(&claim("a", true)), "demo-1-data"),
            None
        );
    }

    #[test]
    fn its_claim_deleted_deleting_or_replaced_means_the_data_is_lost() {
        let status = answered_on("a");
        assert_eq!(
            data_lost(&status, Some(&claim("a", false)), "demo-1-data"),
            None
        );
        let reason =
            |c: Option<&ObjectMeta>| data_lost(&status, c, "demo-1-data").map(|l| l.reason);
        assert_eq!(reason(None).as_deref(), Some("ClaimDeleted"));
        assert_eq!(
            reason(Some(&claim("a", true))).as_deref(),
            Some("ClaimDeleting")
        );
        let replaced = data_lost(&status, Some(&claim("b", false)), "demo-1-data").unwrap();
        assert_eq!(replaced.reason, "ClaimReplaced");
        assert!(replaced.message.contains("uid a") && replaced.message.contains("uid b"));
    }

    #[test]
    fn a_member_on_a_lost_node_that_does_not_answer_is_lost() {
        let status = answered_on("a");
        let lost = lost_with_node(Some("n2"), NodeState::Lost, &status, false).unwrap();
        assert_eq!(lost.reason, "NodeLost");
        assert!(lost.message.contains("n2"), "{}", lost.message);
        assert_eq!(
            lost_with_node(Some("n2"), NodeState::Lost, &status, true),
            None
        );
        assert_eq!(
            lost_with_node(Some("n2"), NodeState::Cordoned, &status, false),
            None
        );
        assert_eq!(
            lost_with_node(None, NodeState::Usable, &status, false),
            None
        );
        let fresh = EtcdPeerStatus::default();
        assert_eq!(
            lost_with_node(Some("n2"), NodeState::Lost, &fresh, false),
            None
        );
    }

    #[test]
    fn a_member_waiting_for_a_node_is_looked_at_on_its_pods_events_not_every_3_s() {
        let mut pod = CachedPod::new(Default::default(), Some(Default::default()), None);
        assert_eq!(next_look(false, Some(&pod), true), Duration::from_secs(300));
        // Its claim missing or being deleted (no event says when that changes), no Pod yet (just
        // created: its creation is an event) or a placed Pod whose member does not answer yet
        // (no event says when it does): a short look.
        assert_eq!(next_look(false, Some(&pod), false), Duration::from_secs(3));
        assert_eq!(next_look(false, None, true), Duration::from_secs(3));
        pod.spec.as_mut().unwrap().node_name = Some("n1".into());
        assert_eq!(next_look(false, Some(&pod), true), Duration::from_secs(3));
        assert_eq!(next_look(true, Some(&pod), true), Duration::from_secs(30));
        // It answers but its (new) claim is not recorded yet: a short look.
        assert_eq!(next_look(true, Some(&pod), false), Duration::from_secs(3));
    }

    #[test]
    fn once_lost_always_lost() {
        let mut status = answered_on("a");
        conditions::set(
            &mut status.conditions,
            DATA_LOST,
            Status::True,
            "ClaimDeleted",
            "gone",
            None,
            jiff::Timestamp::UNIX_EPOCH,
        );
        // Even a claim with the recorded UID (a stale cache) does not bring it back.
        let lost = data_lost(&status, Some(&claim("a", false)), "demo-1-data").unwrap();
        assert_eq!(
            (lost.reason.as_str(), lost.message.as_str()),
            ("ClaimDeleted", "gone")
        );
    }
}
