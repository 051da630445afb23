//! Wires the PostgreSQL pipeline into a kube-runtime `Controller`: the cluster kind is the
//! trigger; instance Pods and Services come from the shared caches; Secrets labelled
//! `steward.dev/user-password` (and only those) wake every cluster whose users reference them,
//! which is how a password change reaches the database within seconds. A Node that changes
//! state (cordoned, lost, usable again) wakes the clusters with an instance on it, so a drain
//! of the primary's Node starts the switchover at once. A `PostgresBackup` wakes the cluster
//! it names (`RunBackups` runs it), and so does a `PostgresRestore` (`RestoreCluster`); a
//! change of one of Steward's Jobs (stanza, backup, restore, clone) wakes its cluster, so
//! the end of a Job is seen at once.

use crate::resources::pods::CachedPod;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::stores::Subscription;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Secret, Service};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use steward_api::common::RetentionPolicy;
use steward_api::pgbackrest::{PostgresBackup, PostgresRestore};
use steward_api::postgres::PostgresCluster;
use tokio_util::sync::CancellationToken;

use super::build::instance::DATA_COMPONENT;
use super::build::pgbackrest::REPO_COMPONENT;
use super::names::{ClusterNames, ENGINE, INSTANCE_COMPONENT};
use super::{CONTROLLER, PostgresPass, PostgresStores, pipeline};
use crate::error::Error;
use crate::resources::nodes::{self, NodeState};
use crate::resources::{AppliedSet, Applier, labels};
use crate::runtime::context::{Context, error_policy};
use crate::runtime::engine::{EngineState, reconcile};

/// How often a converged cluster is looked at again (the database changes without API events).
pub const RESYNC: Duration = Duration::from_secs(15);

struct State {
    ctx: Arc<Context>,
    stores: PostgresStores,
    pipeline: crate::pipeline::Pipeline<PostgresPass>,
}

#[async_trait::async_trait]
impl EngineState for State {
    type Cluster = PostgresCluster;

    fn ctx(&self) -> &Arc<Context> {
        &self.ctx
    }

    async fn apply(&self, cluster: Arc<PostgresCluster>) -> Result<Action, Error> {
        apply(cluster, self).await
    }

    async fn cleanup(&self, cluster: Arc<PostgresCluster>) -> Result<Action, Error> {
        cleanup(cluster, self).await
    }
}

/// Runs before the cluster disappears. Pods, Services, the ConfigMaps, the generated Secrets
/// and Jobs are owned by the cluster and garbage-collected; instance claims are deleted only
/// when `storage.retainOnDelete` is `Delete`, the pgBackRest repository's claim only when
/// `backups.pgbackrest.storage.retainOnDelete` is.
async fn cleanup(cluster: Arc<PostgresCluster>, state: &State) -> Result<Action, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let repository = cluster
        .spec
        .backups
        .as_ref()
        .and_then(|b| b.pgbackrest.as_ref())
        .map(|p| p.storage.retain_on_delete);
    for (policy, component) in [
        (Some(cluster.spec.storage.retain_on_delete), DATA_COMPONENT),
        (repository, REPO_COMPONENT),
    ] {
        if policy == Some(RetentionPolicy::Delete) {
            crate::resources::sweep::delete_cluster_claims(
                &state.ctx.client,
                ENGINE,
                &namespace,
                &cluster.name_any(),
                Some(component),
            )
            .await?;
        }
    }
    if let Some(uid) = cluster.uid() {
        state.ctx.forget_version(&uid);
    }
    Ok(Action::await_change())
}

async fn apply(cluster: Arc<PostgresCluster>, state: &State) -> Result<Action, Error> {
    let ctx = &state.ctx;
    let stored = cluster.status.clone();
    let stored_common = stored
        .as_ref()
        .map(|s| s.common.clone())
        .unwrap_or_default();
    let core = ctx.pass_core(
        CONTROLLER,
        cluster.as_ref(),
        stored_common,
        cluster.spec.timeouts.clone(),
    );
    let mut pass = PostgresPass {
        core,
        cluster: cluster.clone(),
        validated: None,
        status: stored.clone().unwrap_or_default(),
        stores: state.stores.clone(),
        names: ClusterNames::new(cluster.name_any(), cluster.namespace().unwrap_or_default())
            .with_epoch(stored.as_ref().and_then(|s| s.data_epoch).unwrap_or(0)),
        credentials: None,
        config_hash: None,
        instances: Vec::new(),
        observed: false,
        applier: Applier::new(ctx.client.clone(), CONTROLLER).with_memo(ctx.applied.clone()),
        applied: AppliedSet::default(),
        ctx: ctx.clone(),
    };
    let report = state.pipeline.run(&mut pass, &ctx.metrics).await;
    let mut status = pass.status;
    status.common = std::mem::take(&mut pass.core.status);
    ctx.conclude_pass(
        cluster.as_ref(),
        stored.as_ref(),
        &status,
        &mut pass.core,
        &report,
        RESYNC,
    )
    .await
}

/// Whether a cluster's users reference this Secret.
fn references(cluster: &PostgresCluster, secret: &Secret) -> bool {
    cluster.namespace() == secret.namespace()
        && cluster
            .spec
            .users
            .iter()
            .any(|u| u.password_secret.name == secret.name_any())
}

/// The clusters with an instance Pod bound to Node `node`.
fn instances_on(
    pods: &crate::runtime::stores::Indexed<CachedPod>,
    node: &str,
) -> Vec<ObjectRef<PostgresCluster>> {
    let mut refs: Vec<ObjectRef<PostgresCluster>> = pods
        .state()
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter(|p| {
            let labels = p.labels();
            labels.get(labels::NAME) == Some(ENGINE)
                && labels.get(labels::COMPONENT) == Some(INSTANCE_COMPONENT)
        })
        .filter_map(|p| {
            let cluster = p.labels().get(labels::INSTANCE)?;
            Some(ObjectRef::new(cluster).within(&p.namespace()?))
        })
        .collect();
    refs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    refs.dedup();
    refs
}

/// The shared caches' subscriptions the controller reacts to.
pub struct Streams {
    /// Services (owned).
    pub services: Subscription<crate::resources::packed::CachedMeta<Service>>,
    /// Pods (owned).
    pub pods: Subscription<crate::resources::pods::CachedPod>,
    /// Nodes: a change of state wakes the clusters with an instance there.
    pub nodes: Subscription<Node>,
    /// `PostgresBackup`s: each wakes the cluster it names.
    pub backups: Subscription<PostgresBackup>,
    /// `PostgresRestore`s: each wakes the cluster it names.
    pub restores: Subscription<PostgresRestore>,
    /// `PostgresUpgrade`s: each wakes the cluster it names.
    pub upgrades: Subscription<steward_api::pgupgrade::PostgresUpgrade>,
    /// `PostgresPolicy`s: each wakes the clusters that list it.
    pub policies: Subscription<steward_api::policy::PostgresPolicy>,
    /// Users' password Secrets: each wakes the clusters that reference it.
    pub user_secrets: Subscription<Secret>,
}

/// Runs the PostgreSQL controller until `stop` is cancelled.
pub async fn run(
    ctx: Arc<Context>,
    stores: PostgresStores,
    streams: Streams,
    stop: CancellationToken,
) {
    let Streams {
        services: service_events,
        pods: pod_events,
        nodes: node_events,
        backups: backup_events,
        restores: restore_events,
        upgrades: upgrade_events,
        policies: policy_events,
        user_secrets: user_secret_events,
    } = streams;
    let pods = stores.pods.clone();
    let seen = std::sync::Mutex::new(HashMap::<String, NodeState>::new());
    let clusters: Api<PostgresCluster> = ctx.watched_api();
    let jobs: Api<Job> = ctx.watched_api();
    let state = Arc::new(State {
        ctx: ctx.clone(),
        stores,
        pipeline: pipeline(),
    });
    let (cache, trigger) = crate::runtime::stores::primary(clusters, stop.clone());
    let listing = cache.clone();
    let controller = Controller::for_shared_stream(trigger, cache.clone());
    controller
        .with_config(ctx.controller_config())
        .owns_shared_stream(service_events)
        .owns_shared_stream(pod_events)
        .watches_shared_stream(node_events, move |node: Arc<Node>| {
            // Heartbeats change a Node every few seconds; only a new state (cordoned, lost,
            // usable again) wakes the clusters with an instance there.
            let name = node.name_any();
            let state = nodes::state(&node);
            let changed = seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(name.clone(), state)
                .is_some_and(|before| before != state);
            if !changed {
                return Vec::new();
            }
            instances_on(&pods, &name)
        })
        .watches_shared_stream(backup_events, |backup: Arc<PostgresBackup>| {
            backup
                .namespace()
                .map(|ns| ObjectRef::new(&backup.spec.cluster).within(&ns))
        })
        .watches_shared_stream(restore_events, |restore: Arc<PostgresRestore>| {
            restore
                .namespace()
                .map(|ns| ObjectRef::new(&restore.spec.cluster).within(&ns))
        })
        .watches_shared_stream(
            upgrade_events,
            |upgrade: Arc<steward_api::pgupgrade::PostgresUpgrade>| {
                upgrade
                    .namespace()
                    .map(|ns| ObjectRef::new(&upgrade.spec.cluster).within(&ns))
            },
        )
        .watches_shared_stream(
            policy_events,
            move |policy: Arc<steward_api::policy::PostgresPolicy>| {
                let ns = policy.namespace();
                let name = policy.name_any();
                listing
                    .state()
                    .into_iter()
                    .filter(|c| {
                        c.namespace() == ns && c.spec.policies.iter().any(|p| p.name == name)
                    })
                    .map(|c| ObjectRef::from_obj(c.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .watches(
            jobs,
            watcher::Config::default().labels(&format!(
                "{}={},{}={}",
                labels::MANAGED_BY,
                labels::MANAGER,
                labels::NAME,
                ENGINE
            )),
            |job: Job| {
                // A Job's end (stanza, backup, restore, clone) wakes its cluster at once.
                let cluster = job.labels().get(labels::INSTANCE)?.clone();
                Some(ObjectRef::new(&cluster).within(&job.namespace()?))
            },
        )
        .watches_shared_stream(user_secret_events, move |secret: Arc<Secret>| {
            cache
                .state()
                .into_iter()
                .filter(|c| references(c, &secret))
                .map(|c| ObjectRef::from_obj(c.as_ref()))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(
            reconcile::<State>,
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
