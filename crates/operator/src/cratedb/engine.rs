//! The CrateDB engine as the runtime runs it ([`Engine`]): the cluster controller, woken by its
//! Services, StatefulSets, node Pods and users' password Secrets; its admin seam reaches
//! CrateDB nodes over HTTP, the PostgreSQL wire protocol and `crash` over exec.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use steward_api::common::CommonStatus;
use steward_api::cratedb::CrateClusterStatus;
use tokio_util::sync::CancellationToken;

use crate::cratedb::CrateStores;
use crate::cratedb::admin::CrateChannels;
use crate::cratedb::admin::client::RealChannels;
use crate::cratedb::controller::Streams;
use crate::runtime::context::{ClusterStatus, Context};
use crate::runtime::engine::{Engine, SharedCaches, Subscriptions, Wakes};
use crate::runtime::logged;

/// See the module documentation.
pub struct CrateDb;

impl ClusterStatus for CrateClusterStatus {
    fn common(&self) -> &CommonStatus {
        &self.common
    }
}

impl Engine for CrateDb {
    fn wakes(&self) -> Wakes {
        Wakes {
            services: 1,
            pods: 1,
            statefulsets: 1,
            user_secrets: 1,
            ..Wakes::default()
        }
    }

    fn install_seams(&self, client: &kube::Client, seams: &mut http::Extensions) {
        seams.insert::<Arc<dyn CrateChannels>>(Arc::new(RealChannels::new(
            client.clone(),
            Duration::from_secs(10),
        )));
    }

    fn run(
        &self,
        ctx: Arc<Context>,
        shared: SharedCaches,
        mut subscriptions: Subscriptions,
        stop: CancellationToken,
    ) -> BoxFuture<'static, ()> {
        async move {
            let (Some(services), Some(statefulsets), Some(pods), Some(user_secrets)) = (
                subscriptions.services.pop(),
                subscriptions.statefulsets.pop(),
                subscriptions.pods.pop(),
                subscriptions.user_secrets.pop(),
            ) else {
                tracing::error!(
                    "cratedb engine: its subscriptions were not handed over; not started"
                );
                return;
            };
            let stores = CrateStores {
                services: shared.services,
                pods: shared.pods,
                statefulsets: shared.statefulsets,
                budgets: shared.budgets,
                secrets: shared.secrets,
                user_secrets: shared.user_secrets,
            };
            logged(
                "cratedb",
                stop.clone(),
                crate::cratedb::controller::run(
                    ctx,
                    stores,
                    Streams {
                        services,
                        statefulsets,
                        pods,
                        user_secrets,
                    },
                    stop,
                ),
            )
            .await;
        }
        .boxed()
    }
}
