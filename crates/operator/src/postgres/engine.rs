//! The PostgreSQL engine as the runtime runs it ([`Engine`]): the cluster controller, woken by
//! its Services, instance Pods, Node state changes, users' password Secrets and the
//! `PostgresBackup`, `PostgresRestore`, `PostgresUpgrade` and `PostgresPolicy` objects (caches of its own); its
//! admin seams are the `tokio-postgres` client and the pgBackRest repository reader.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use steward_api::common::CommonStatus;
use steward_api::postgres::PostgresClusterStatus;
use tokio_util::sync::CancellationToken;

use crate::postgres::PostgresStores;
use crate::postgres::admin::PostgresConnector;
use crate::postgres::admin::client::PgConnector;
use crate::postgres::controller::Streams;
use crate::postgres::repository::Repository;
use crate::postgres::repository::exec::ExecRepository;
use crate::runtime::context::{ClusterStatus, Context};
use crate::runtime::engine::{Engine, SharedCaches, Subscriptions, Wakes};
use crate::runtime::{logged, stores};

/// See the module documentation.
pub struct Postgres;

impl ClusterStatus for PostgresClusterStatus {
    fn common(&self) -> &CommonStatus {
        &self.common
    }
}

impl Engine for Postgres {
    fn wakes(&self) -> Wakes {
        Wakes {
            services: 1,
            pods: 1,
            user_secrets: 1,
            nodes: 1,
            ..Wakes::default()
        }
    }

    fn install_seams(&self, client: &kube::Client, seams: &mut http::Extensions) {
        seams.insert::<Arc<dyn PostgresConnector>>(Arc::new(PgConnector));
        seams.insert::<Arc<dyn Repository>>(Arc::new(ExecRepository::new(client.clone())));
    }

    fn run(
        &self,
        ctx: Arc<Context>,
        shared: SharedCaches,
        mut subscriptions: Subscriptions,
        stop: CancellationToken,
    ) -> BoxFuture<'static, ()> {
        async move {
            let (Some(services), Some(pods), Some(nodes), Some(user_secrets)) = (
                subscriptions.services.pop(),
                subscriptions.pods.pop(),
                subscriptions.nodes.pop(),
                subscriptions.user_secrets.pop(),
            ) else {
                tracing::error!(
                    "postgres engine: its subscriptions were not handed over; not started"
                );
                return;
            };
            let backups =
                stores::watched::<steward_api::pgbackrest::PostgresBackup>(&ctx, stop.clone());
            let restores =
                stores::watched::<steward_api::pgbackrest::PostgresRestore>(&ctx, stop.clone());
            let upgrades =
                stores::watched::<steward_api::pgupgrade::PostgresUpgrade>(&ctx, stop.clone());
            let policies =
                stores::watched::<steward_api::policy::PostgresPolicy>(&ctx, stop.clone());
            let postgres = PostgresStores {
                services: shared.services,
                pods: shared.pods,
                claims: shared.claims,
                nodes: shared.nodes,
                backups: backups.0,
                restores: restores.0,
                upgrades: upgrades.0,
                policies: policies.0,
                budgets: shared.budgets,
                config_maps: shared.config_maps,
                secrets: shared.secrets,
                user_secrets: shared.user_secrets,
            };
            logged(
                "postgres",
                stop.clone(),
                crate::postgres::controller::run(
                    ctx,
                    postgres,
                    Streams {
                        services,
                        pods,
                        nodes,
                        backups: backups.1,
                        restores: restores.1,
                        upgrades: upgrades.1,
                        policies: policies.1,
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
