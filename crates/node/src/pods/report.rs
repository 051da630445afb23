//! The status reporter of one pod: recomputes the status when the pod state changes and writes
//! it through `pods/status` (a merge patch carrying the pod's uid, so it never lands on a
//! re-created namesake), only when it differs from what was last written.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::state::PodCell;
use super::status;
use super::volumes::FIELD_MANAGER;

pub struct Reporter {
    api: Api<Pod>,
    name: String,
    uid: String,
    restart_policy: String,
    cell: Arc<PodCell>,
    conditions: BTreeMap<String, PodCondition>,
    last: Option<Value>,
}

impl Reporter {
    pub fn new(client: Client, pod: &Pod, cell: Arc<PodCell>) -> Self {
        let ns = pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let conditions = pod
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .map(|c| (c.type_.clone(), c.clone()))
            .collect();
        Self {
            api: Api::namespaced(client, &ns),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            restart_policy: pod
                .spec
                .as_ref()
                .and_then(|s| s.restart_policy.clone())
                .unwrap_or_else(|| "Always".into()),
            cell,
            conditions,
            last: None,
        }
    }

    /// Writes the current status if it changed.
    pub async fn write(&mut self) -> Write {
        let Some(state) = self.cell.snapshot() else {
            return Write::Unchanged;
        };
        let status = status::build(
            &state,
            &self.restart_policy,
            &mut self.conditions,
            Timestamp::now(),
        );
        let Ok(value) = serde_json::to_value(&status) else {
            return Write::Unchanged;
        };
        if self.last.as_ref() == Some(&value) {
            return Write::Unchanged;
        }
        let patch = json!({"metadata": {"uid": self.uid}, "status": value});
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        match self
            .api
            .patch_status(&self.name, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                self.last = Some(value);
                Write::Written
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Write::Gone,
            Err(e) => {
                tracing::warn!(pod = %self.name, error = %e, "writing pod status failed");
                Write::Failed
            }
        }
    }

    /// Writes on every change until `done`, then once more (retrying a failed write: it may
    /// be the pod's final status; the caller bounds how long it waits).
    pub async fn run(mut self, done: CancellationToken) {
        loop {
            let finishing = tokio::select! {
                () = self.cell.changed.notified() => false,
                () = done.cancelled() => true,
            };
            if !finishing {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            match self.write().await {
                Write::Gone => return,
                Write::Failed => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    self.cell.changed.notify_one();
                }
                Write::Written | Write::Unchanged if finishing => return,
                Write::Written | Write::Unchanged => {}
            }
        }
    }
}

/// What a status write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    Written,
    Unchanged,
    Failed,
    Gone,
}
