//! The etcd engine as the runtime runs it ([`Engine`]): the cluster controller (woken by its
//! Services and peers) and the peer controller (woken by its peers and member Pods), on the
//! shared caches and a cache of `EtcdPeer`s of its own; its admin seam is the etcd gRPC client.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use steward_api::etcd::{EtcdClusterStatus, EtcdPeer};
use tokio_util::sync::CancellationToken;

use crate::etcd::EtcdStores;
use crate::etcd::admin::EtcdConnector;
use crate::etcd::admin::client::GrpcConnector;
use crate::runtime::context::{ClusterStatus, Context};
use crate::runtime::engine::{Engine, SharedCaches, Subscriptions, Wakes};
use crate::runtime::{caches_filled, logged, stores};
use steward_api::common::CommonStatus;

/// See the module documentation.
pub struct Etcd;

impl ClusterStatus for EtcdClusterStatus {
    fn common(&self) -> &CommonStatus {
        &self.common
    }
}

impl Engine for Etcd {
    fn wakes(&self) -> Wakes {
        Wakes {
            services: 1,
            pods: 1,
            ..Wakes::default()
        }
    }

    fn install_seams(&self, _client: &kube::Client, seams: &mut http::Extensions) {
        seams.insert::<Arc<dyn EtcdConnector>>(Arc::new(GrpcConnector));
    }

    fn run(
        &self,
        ctx: Arc<Context>,
        shared: SharedCaches,
        mut subscriptions: Subscriptions,
        stop: CancellationToken,
    ) -> BoxFuture<'static, ()> {
        async move {
            let (Some(services), Some(pods)) =
                (subscriptions.services.pop(), subscriptions.pods.pop())
            else {
                tracing::error!("etcd engine: its subscriptions were not handed over; not started");
                return;
            };
            // Peers without labels: a peer names its cluster in its spec. They wake both
            // controllers.
            let (peers, mut peer_subs) =
                stores::shared::<EtcdPeer>(&ctx, stores::unlabelled, 2, stop.clone());
            let (Some(peers_cluster), Some(peers_peer)) = (peer_subs.pop(), peer_subs.pop()) else {
                tracing::error!(
                    "etcd engine: the peer cache gave fewer subscriptions than asked; not started"
                );
                return;
            };
            let filling = vec![("EtcdPeers", peers.wait_until_ready().boxed())];
            if !caches_filled(filling, &stop).await {
                return;
            }
            let etcd = EtcdStores {
                services: shared.services,
                pods: shared.pods,
                claims: shared.claims,
                peers,
                nodes: shared.nodes,
                budgets: shared.budgets,
            };
            tokio::join!(
                logged(
                    "etcd",
                    stop.clone(),
                    crate::etcd::controller::run(
                        ctx.clone(),
                        etcd.clone(),
                        services,
                        peers_cluster,
                        stop.clone()
                    )
                ),
                logged(
                    "etcd-peer",
                    stop.clone(),
                    crate::etcd::peer::run(ctx.clone(), etcd, peers_peer, pods, stop.clone())
                ),
                logged(
                    "etcd-backup",
                    stop.clone(),
                    crate::etcd::backup::controller::run(ctx, stop.clone())
                ),
            );
        }
        .boxed()
    }
}
