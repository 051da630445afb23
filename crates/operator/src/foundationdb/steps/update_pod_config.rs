//! UpdatePodConfig — the unified image's flow (seed 002): for each Pod whose monitor is not
//! known to run the ConfigMap's configuration (`IncorrectConfigMap`), asks the monitor for its
//! active configuration and environment (`fdb-kubernetes-monitor report` over exec) and puts
//! them on the Pod as `foundationdb.org/launcher-current-configuration` and
//! `foundationdb.org/launcher-environment`. FoundationDB's monitor writes these annotations
//! itself with the Pod's service-account token; Steward's Pods have none, so the operator
//! carries them (`docs/foundationdb-standin.md`). Groups marked for removal are skipped; a Pod
//! that cannot answer is waited for without blocking the others.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::{SOON, condition, conditions as c, group_pods};
use crate::error::Error;
use crate::foundationdb::FdbPass;
use crate::foundationdb::admin::Target;
use crate::foundationdb::build::{CURRENT_CONFIGURATION, ENVIRONMENT};
use crate::pipeline::{Outcome, SubReconciler};

/// See the module documentation.
pub struct UpdatePodConfig;

/// (pure) The two annotations from the monitor's report, or why it cannot be read.
pub fn annotations_of(report: &str) -> Result<(String, String), String> {
    let v: Value =
        serde_json::from_str(report.trim()).map_err(|e| format!("monitor report: {e}"))?;
    let current = v
        .get("currentConfiguration")
        .and_then(Value::as_str)
        .ok_or("the monitor reports no active configuration")?;
    let environment = v
        .get("environment")
        .ok_or("the monitor reports no environment")?;
    Ok((current.to_owned(), environment.to_string()))
}

#[async_trait]
impl SubReconciler<FdbPass> for UpdatePodConfig {
    fn name(&self) -> &'static str {
        "UpdatePodConfig"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let pods = group_pods(pass);
        let api: Api<Pod> = Api::namespaced(pass.ctx.client.clone(), &pass.core.namespace);
        let admin = pass.admin()?;
        let mut waiting = Vec::new();
        for g in pass.status.process_groups.clone() {
            if g.removal_timestamp.is_some() || condition(&g, c::INCORRECT_CONFIG_MAP).is_none() {
                continue;
            }
            let Some(pod) = pods.get(&g.process_group_id) else {
                continue;
            };
            let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            if !running || pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let target = Target {
                namespace: pass.core.namespace.clone(),
                pod: g.process_group_id.clone(),
            };
            let report = match admin.monitor_report(&target).await {
                Ok(r) => r,
                Err(e) => {
                    waiting.push(format!("{}: {e}", g.process_group_id));
                    continue;
                }
            };
            let (current, environment) = match annotations_of(&report) {
                Ok(a) => a,
                Err(e) => {
                    waiting.push(format!("{}: {e}", g.process_group_id));
                    continue;
                }
            };
            if pod.annotations().get(CURRENT_CONFIGURATION) == Some(current.as_str())
                && pod.annotations().get(ENVIRONMENT) == Some(environment.as_str())
            {
                waiting.push(format!(
                    "{}: its monitor has not taken the new configuration yet",
                    g.process_group_id
                ));
                continue;
            }
            let patch = json!({"metadata": {"annotations": {
                CURRENT_CONFIGURATION: current, ENVIRONMENT: environment}}});
            api.patch(
                &g.process_group_id,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|source| {
                Error::kube(
                    "patch",
                    format!("Pod {}/{}", pass.core.namespace, g.process_group_id),
                    source,
                )
            })?;
        }
        if waiting.is_empty() {
            Ok(Outcome::Continue)
        } else {
            Ok(Outcome::requeue(SOON, waiting.join("; ")))
        }
    }
}
