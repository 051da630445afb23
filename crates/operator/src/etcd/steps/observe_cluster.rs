//! ObserveCluster — dials the cluster and reads the member list and every member's status
//! (seed step 2). The operator dials members by Pod IP — the addresses the headless Service
//! resolves to — so it works whether or not it runs inside the cluster's DNS. An unreachable
//! cluster is not an error: `observed` stays empty and later steps act accordingly (bootstrap,
//! or wait), and `UpdateStatus` reports it — naming the scheduler's message when member Pods
//! cannot be placed.

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures::future::join_all;
use kube::ResourceExt;

use crate::error::Error;
use crate::etcd::EtcdPass;
use crate::etcd::admin::{AdminError, EtcdAdmin};
use crate::etcd::names::{PEER_LABEL, pod_client_url};
use crate::etcd::topology::Observed;
use crate::pipeline::{Outcome, SubReconciler};
use crate::resources::labels::{COMPONENT, INSTANCE, NAME};
use crate::resources::pods::unschedulable;

/// See the module documentation.
pub struct ObserveCluster;

/// This cluster's member Pods that are not being deleted.
fn member_pods(pass: &EtcdPass) -> Vec<std::sync::Arc<crate::resources::pods::CachedPod>> {
    pass.stores
        .pods
        .of_instance(&pass.core.namespace, &pass.core.name)
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            let l = p.labels();
            l.get(NAME) == Some("etcd")
                && l.get(INSTANCE) == Some(pass.core.name.as_str())
                && l.get(COMPONENT) == Some("member")
        })
        .collect()
}

/// Client URLs of this cluster's running member Pods, by member name.
pub fn member_endpoints(pass: &EtcdPass) -> BTreeMap<String, String> {
    member_pods(pass)
        .iter()
        .filter_map(|p| {
            let peer = p.labels().get(PEER_LABEL)?.to_owned();
            let ip = p.status.as_ref()?.pod_ip.clone()?;
            Some((peer, pod_client_url(&ip)))
        })
        .collect()
}

/// The member Pods the scheduler cannot place, with its message (`member: message; ...`).
fn unplaced_members(pass: &EtcdPass) -> Option<String> {
    let unplaced: Vec<String> = member_pods(pass)
        .iter()
        .filter_map(|p| Some(format!("{}: {}", p.name_any(), unschedulable(p)?)))
        .collect();
    (!unplaced.is_empty()).then(|| unplaced.join("; "))
}

pub(crate) async fn observe(
    admin: &dyn EtcdAdmin,
    endpoints: &BTreeMap<String, String>,
) -> Result<Observed, AdminError> {
    let members = admin.member_list().await?;
    let asks = members.iter().filter_map(|m| {
        let url = endpoints.get(&m.name)?;
        Some(async move { (m.id, admin.status(url).await) })
    });
    let statuses = join_all(asks)
        .await
        .into_iter()
        .filter_map(|(id, s)| s.ok().map(|s| (id, s)))
        .collect();
    Ok(Observed {
        members,
        statuses,
        // `member_list` is linearizable (the real client reads through the leader first; the
        // model answers only with a leader and a quorum).
        quorum_confirmed: true,
    })
}

#[async_trait]
impl SubReconciler<EtcdPass> for ObserveCluster {
    fn name(&self) -> &'static str {
        "ObserveCluster"
    }

    async fn reconcile(&self, pass: &mut EtcdPass) -> Result<Outcome, Error> {
        pass.observe_done = true;
        pass.observed = None;
        pass.unschedulable = unplaced_members(pass);
        let endpoints = member_endpoints(pass);
        if endpoints.is_empty() {
            pass.observe_error = Some(match &pass.unschedulable {
                Some(why) => format!("no member Pod can be scheduled: {why}"),
                None => match &pass.cluster.spec.data_source {
                    Some(source) => format!(
                        "no member Pod has an address yet (the cluster starts from the snapshot of \
                         EtcdBackup {})",
                        source.backup
                    ),
                    None => "no member Pod has an address yet".into(),
                },
            });
            return Ok(unreachable(pass));
        }
        let urls: Vec<String> = endpoints.values().cloned().collect();
        let timeout = pass.ctx.database_timeout;
        let connector = crate::etcd::admin::connector(&pass.ctx)?;
        let admin = match connector.connect(&urls, timeout).await {
            Ok(admin) => admin,
            Err(err) => {
                pass.observe_error = Some(err.to_string());
                return Ok(unreachable(pass));
            }
        };
        match observe(admin.as_ref(), &endpoints).await {
            Ok(observed) => {
                pass.observed = Some(observed);
                pass.observe_error = None;
            }
            Err(err) => pass.observe_error = Some(err.to_string()),
        }
        pass.endpoints = endpoints;
        pass.admin = Some(admin);
        if pass.observed.is_none() {
            return Ok(unreachable(pass));
        }
        Ok(Outcome::Continue)
    }
}

/// Later steps still run (bootstrap needs them); the pass asks to look again soon, so the
/// generation is not reported reconciled while the cluster cannot be seen.
fn unreachable(pass: &EtcdPass) -> Outcome {
    let why = pass.observe_error.clone().unwrap_or_default();
    Outcome::requeue(
        std::time::Duration::from_secs(5),
        format!("etcd cluster unreachable: {why}"),
    )
}
