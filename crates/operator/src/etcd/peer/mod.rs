//! The peer controller (seed: "the peer resource"): for each `EtcdPeer`, creates its claim if
//! missing (never modifying an existing one), creates its Pod with the bootstrap configuration
//! (always passed; etcd ignores it once a data dir exists), replaces the Pod when the peer's
//! spec changed (Pod specs are immutable) or the Pod ended, and reports the member in the
//! peer's status: its host name, and — once the Pod is ready and answers over gRPC — its member
//! ID and version. Deleting a peer removes its Pod (owner reference) and keeps its claim.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, ReflectHandle};
use kube::runtime::watcher;
use steward_api::etcd::{EtcdPeer, EtcdPeerStatus};
use tokio_util::sync::CancellationToken;

use super::EtcdStores;
use super::build::member::{SPEC_HASH, claim, pod};
use super::names::{ClusterNames, claim_name, pod_client_url};
use crate::error::Error;
use crate::resources::pods::{has_ended, is_ready};
use crate::runtime::context::{Context, error_policy};

/// The controller name used in logs.
pub const CONTROLLER: &str = "etcd-peer";

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

    // 1. The claim: created when missing, never modified.
    let claim_ref = ObjectRef::<PersistentVolumeClaim>::new(&claim_name(&name)).within(&namespace);
    if state.stores.claims.get(&claim_ref).is_none() {
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
    let pods: Api<Pod> = ctx.api(&namespace);
    let existing = state
        .stores
        .pods
        .get(&ObjectRef::<Pod>::new(&name).within(&namespace));
    let mut member_pod = None;
    match existing {
        None => match pods.create(&PostParams::default(), &desired).await {
            Ok(_) => tracing::info!(%object, "created member Pod"),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(source) => return Err(Error::kube("create Pod", object, source)),
        },
        Some(current) if current.metadata.deletion_timestamp.is_some() => {}
        Some(current) => {
            let want = desired.annotations().get(SPEC_HASH);
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

    // 3. Status.
    let mut status = EtcdPeerStatus {
        observed_generation: peer.metadata.generation,
        hostname: names.fqdn(&name),
        conditions: peer
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default(),
        ..EtcdPeerStatus::default()
    };
    if let Some(p) = member_pod.as_ref().filter(|p| is_ready(p))
        && let Some(ip) = p.status.as_ref().and_then(|s| s.pod_ip.clone())
    {
        let url = pod_client_url(&ip);
        if let Ok(admin) = ctx
            .etcd
            .connect(std::slice::from_ref(&url), ctx.database_timeout)
            .await
            && let Ok(answer) = admin.status(&url).await
        {
            status.ready = true;
            status.member_id = Some(format!("{:x}", answer.member_id));
            status.version = Some(answer.version);
        }
    }
    if peer.status.as_ref() != Some(&status) {
        let api: Api<EtcdPeer> = ctx.api(&namespace);
        let body = serde_json::json!({ "status": status });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(|source| Error::kube("patch EtcdPeer status", object, source))?;
    }
    Ok(Action::requeue(if status.ready {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(3)
    }))
}

/// Runs the peer controller until `stop` is cancelled; member Pods trigger their peer.
pub async fn run(
    ctx: Arc<Context>,
    stores: EtcdStores,
    pod_events: ReflectHandle<Pod>,
    stop: CancellationToken,
) {
    let peers: Api<EtcdPeer> = ctx.watched_api();
    let state = Arc::new(State {
        ctx: ctx.clone(),
        stores,
    });
    Controller::new(peers, watcher::Config::default())
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
