//! ObserveInstances — looks at every instance: its Pod (from the cache: exists, being deleted,
//! ready, IP, role label, whether it runs the wanted spec, the scheduler's message when it
//! cannot be placed, its Node and whether that Node is cordoned or lost), its claim, and — for
//! ready Pods —
//! the server over SQL as the `steward` superuser: recovery state, timeline, system
//! identifier, WAL position; on the primary, `pg_stat_replication` tells which replicas stream
//! and, with backups on, `pg_stat_archiver` how WAL archiving goes.
//! The instances are the ones recorded in `status.instances` (the operator's membership list)
//! plus any Pod of this cluster. If status lost the primary's name after a crash between
//! relabelling and the status write, the one Pod labelled primary is adopted. Never changes
//! anything.

use crate::resources::pods::CachedPod;
use std::collections::BTreeSet;

use async_trait::async_trait;
use futures::future::join_all;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use steward_api::postgres::InstanceRole;

use crate::error::Error;
use crate::pipeline::{Outcome, SubReconciler};
use crate::postgres::PostgresPass;
use crate::postgres::admin::{ServerInfo, WalPosition};
use crate::postgres::build::instance;
use crate::postgres::names::{INSTANCE_LABEL, ROLE_LABEL};
use crate::postgres::steps::validated;
use crate::postgres::topology::InstanceView;
use crate::resources::nodes;
use crate::resources::pods::{is_ready, last_fatal, unschedulable};

/// See the module documentation.
pub struct ObserveInstances;

fn role_label(pod: &CachedPod) -> Option<InstanceRole> {
    match pod.labels().get(ROLE_LABEL) {
        Some("primary") => Some(InstanceRole::Primary),
        Some("replica") => Some(InstanceRole::Replica),
        _ => None,
    }
}

/// This cluster's instance Pods from the cache.
pub fn cluster_pods(pass: &PostgresPass) -> Vec<std::sync::Arc<CachedPod>> {
    let selector = pass.names.instances_selector();
    pass.stores
        .pods
        .of_instance(&pass.core.namespace, &pass.names.cluster)
        .into_iter()
        .filter(|p| {
            let labels = p.labels();
            labels.has_all(&selector)
        })
        .collect()
}

#[async_trait]
impl SubReconciler<PostgresPass> for ObserveInstances {
    fn name(&self) -> &'static str {
        "ObserveInstances"
    }

    async fn reconcile(&self, pass: &mut PostgresPass) -> Result<Outcome, Error> {
        let valid = validated(pass)?;
        let pods = cluster_pods(pass);
        let mut members: BTreeSet<String> = pass
            .status
            .instances
            .iter()
            .map(|i| i.name.clone())
            .collect();
        for p in &pods {
            if let Some(name) = p.labels().get(INSTANCE_LABEL) {
                members.insert(name.to_owned());
            }
        }
        if let Some(primary) = &pass.status.current_primary {
            members.insert(primary.clone());
        }
        let hash = pass.config_hash.clone().unwrap_or_default();
        let mut views = Vec::new();
        for name in members {
            let Some(ordinal) = pass.names.ordinal(&name) else {
                continue;
            };
            let pod = pods.iter().find(|p| p.name_any() == name);
            let claim_name = pass.names.claim(&name);
            let claim = pass
                .stores
                .claims
                .get(&ObjectRef::new(&claim_name).within(&pass.core.namespace))
                .is_some();
            let mut view = InstanceView {
                name: name.clone(),
                ordinal,
                claim,
                ..InstanceView::default()
            };
            if let Some(pod) = pod {
                view.terminating = pod.metadata.deletion_timestamp.is_some();
                view.pod = !view.terminating;
                view.labelled = role_label(pod);
                view.pod_ready = view.pod && is_ready(pod);
                view.ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
                view.unschedulable = unschedulable(pod);
                view.last_fatal = last_fatal(pod, instance::CONTAINER);
                (view.node, view.node_state) = nodes::of_pod(&pass.stores.nodes, pod);
                let role = view.labelled.unwrap_or(InstanceRole::Replica);
                let want = instance::pod(&pass.cluster, &valid, ordinal, role, &hash)
                    .and_then(|p| p.annotations().get(instance::SPEC_HASH).cloned());
                view.stale =
                    view.pod && want.as_deref() != pod.annotations().get(instance::SPEC_HASH);
            }
            views.push(view);
        }
        // Ask every ready instance about itself, concurrently.
        let archiving = valid.pgbackrest.is_some();
        let asks = views.iter().map(|v| {
            let ready = v.pod_ready;
            let name = v.name.clone();
            let ip = v.ip.clone().unwrap_or_default();
            let pass_ref = &*pass;
            async move {
                if !ready {
                    return (name, None);
                }
                let admin = match pass_ref.admin_at(&ip).await {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!(instance = %name, error = %e, "instance does not answer");
                        return (name, None);
                    }
                };
                let info: Option<ServerInfo> = admin.server_info().await.ok();
                let wal: Option<WalPosition> = admin.wal_position().await.ok();
                let primary = info.is_some_and(|i| !i.in_recovery);
                let archiver = if archiving && primary {
                    admin.archiver().await.ok()
                } else {
                    None
                };
                let streaming: Vec<String> = if primary {
                    admin
                        .replication()
                        .await
                        .map(|rows| {
                            rows.into_iter()
                                .filter(|r| r.state == "streaming")
                                .map(|r| r.application_name)
                                .collect()
                        })
                        .unwrap_or_default()
                } else {
                    Vec::new()
                };
                (name, Some((info, wal, streaming, archiver)))
            }
        });
        let answers = join_all(asks).await;
        let mut streaming: BTreeSet<String> = BTreeSet::new();
        for (name, answer) in answers {
            let Some((info, wal, names, archiver)) = answer else {
                continue;
            };
            streaming.extend(names);
            if let Some(v) = views.iter_mut().find(|v| v.name == name) {
                v.info = info;
                v.wal = wal;
                v.archiver = archiver;
            }
        }
        for v in &mut views {
            v.streaming = v.standby() && streaming.contains(&v.name);
        }
        // Adopt the labelled primary when status does not name a live one.
        let named_alive = pass.status.current_primary.as_ref().is_some_and(|p| {
            views
                .iter()
                .any(|v| &v.name == p && (v.pod || v.terminating))
        });
        if !named_alive {
            let labelled: Vec<&InstanceView> = views
                .iter()
                .filter(|v| v.pod && v.labelled == Some(InstanceRole::Primary))
                .collect();
            if let [only] = labelled.as_slice()
                && pass.status.current_primary.as_deref() != Some(only.name.as_str())
                && pass.status.pending_failover.is_none()
            {
                tracing::info!(cluster = %pass.object(), primary = %only.name, "adopting the Pod labelled primary");
                pass.status.current_primary = Some(only.name.clone());
            }
        }
        tracing::debug!(cluster = %pass.object(), instances = ?views, "observed");
        pass.instances = views;
        pass.observed = true;
        Ok(Outcome::Continue)
    }
}
