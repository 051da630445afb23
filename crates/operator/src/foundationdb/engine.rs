//! The FoundationDB engine as the runtime runs it ([`Engine`]): the cluster controller, woken by
//! its Pods; its admin seam runs FoundationDB's tools in the cluster's Pods.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use steward_api::common::CommonStatus;
use steward_api::foundationdb::FoundationDBClusterStatus;
use tokio_util::sync::CancellationToken;

use super::FdbStores;
use super::admin::FdbAdmin;
use super::admin::client::ExecAdmin;
use crate::runtime::context::{ClusterStatus, Context};
use crate::runtime::engine::{Engine, SharedCaches, Subscriptions, Wakes};
use crate::runtime::logged;

/// See the module documentation.
pub struct FoundationDb;

impl ClusterStatus for FoundationDBClusterStatus {
    fn common(&self) -> &CommonStatus {
        &self.common
    }
}

impl Engine for FoundationDb {
    fn wakes(&self) -> Wakes {
        Wakes {
            pods: 1,
            ..Wakes::default()
        }
    }

    fn install_seams(&self, client: &kube::Client, seams: &mut http::Extensions) {
        seams.insert::<Arc<dyn FdbAdmin>>(Arc::new(ExecAdmin::new(client.clone())));
    }

    fn run(
        &self,
        ctx: Arc<Context>,
        shared: SharedCaches,
        mut subscriptions: Subscriptions,
        stop: CancellationToken,
    ) -> BoxFuture<'static, ()> {
        async move {
            let Some(pods) = subscriptions.pods.pop() else {
                tracing::error!(
                    "foundationdb engine: its subscriptions were not handed over; not started"
                );
                return;
            };
            let backups =
                super::backup::controller::run(ctx.clone(), shared.pods.clone(), stop.clone());
            let stores = FdbStores {
                pods: shared.pods,
                claims: shared.claims,
                config_maps: shared.config_maps,
                services: shared.services,
            };
            futures::join!(
                logged(
                    "foundationdb",
                    stop.clone(),
                    super::controller::run(ctx, stores, pods, stop.clone()),
                ),
                logged("foundationdb-backup", stop, backups),
            );
        }
        .boxed()
    }
}
