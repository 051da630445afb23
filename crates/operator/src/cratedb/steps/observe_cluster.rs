//! ObserveCluster — lists the cluster's node Pods (ready ones with an address are the nodes
//! the operator talks to, masters first) and, once the `system` user exists, reads the cluster
//! over HTTP as `system`: its nodes, master, health, shards per node, the largest table
//! replica count and the allocation exclusion. An unreachable cluster is not an error: later
//! steps wait, and `UpdateStatus` reports it.

use async_trait::async_trait;
use kube::ResourceExt;

use crate::cratedb::CratePass;
use crate::cratedb::admin::{Endpoint, ops};
use crate::cratedb::names::{ENGINE, MASTER_COMPONENT};
use crate::error::Error;
use crate::pipeline::{Outcome, SubReconciler};
use crate::resources::labels::{COMPONENT, NAME};
use crate::resources::pods::{is_ready, unschedulable};

/// See the module documentation.
pub struct ObserveCluster;

/// This cluster's node Pods (not being deleted).
pub fn node_pods(pass: &CratePass) -> Vec<std::sync::Arc<crate::resources::pods::CachedPod>> {
    pass.stores
        .pods
        .of_instance(&pass.core.namespace, &pass.core.name)
        .into_iter()
        .filter(|p| p.labels().get(NAME) == Some(ENGINE))
        .collect()
}

#[async_trait]
impl SubReconciler<CratePass> for ObserveCluster {
    fn name(&self) -> &'static str {
        "ObserveCluster"
    }

    async fn reconcile(&self, pass: &mut CratePass) -> Result<Outcome, Error> {
        pass.observe_done = true;
        let mut masters = Vec::new();
        let mut data = Vec::new();
        for pod in node_pods(pass) {
            if pod.metadata.deletion_timestamp.is_some() || !is_ready(&pod) {
                continue;
            }
            let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
                continue;
            };
            let endpoint = Endpoint {
                pod: pod.name_any(),
                namespace: pass.core.namespace.clone(),
                ip,
            };
            if pod.labels().get(COMPONENT) == Some(MASTER_COMPONENT) {
                masters.push(endpoint);
            } else {
                data.push(endpoint);
            }
        }
        masters.sort_by(|a, b| a.pod.cmp(&b.pod));
        data.sort_by(|a, b| a.pod.cmp(&b.pod));
        pass.nodes = masters.iter().chain(data.iter()).cloned().collect();
        pass.masters = masters;
        if pass.nodes.is_empty() {
            let unplaced: Vec<String> = node_pods(pass)
                .iter()
                .filter_map(|p| Some(format!("{}: {}", p.name_any(), unschedulable(p)?)))
                .collect();
            pass.unschedulable = (!unplaced.is_empty()).then(|| unplaced.join("; "));
            pass.observe_error = Some(match &pass.unschedulable {
                Some(why) => format!("no node Pod can be scheduled: {why}"),
                None => "no node Pod is ready yet".into(),
            });
            return Ok(Outcome::Continue);
        }
        if !pass.status.bootstrap.system_user {
            pass.observe_error = Some("the system user is not created yet".into());
            return Ok(Outcome::Continue);
        }
        let Some(system) = pass.system.clone() else {
            return Ok(Outcome::Continue);
        };
        let channels = pass.channels()?;
        match ops::observe(channels.as_ref(), &pass.nodes, &system).await {
            Ok(observed) => {
                pass.observed = Some(observed);
                pass.observe_error = None;
                Ok(Outcome::Continue)
            }
            Err(e) => {
                pass.observe_error = Some(e.to_string());
                Ok(Outcome::requeue(
                    std::time::Duration::from_secs(5),
                    format!("CrateDB unreachable: {e}"),
                ))
            }
        }
    }
}
