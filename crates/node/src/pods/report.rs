//! The status reporter of one pod: recomputes the status when the pod state changes and writes
//! it through `pods/status` (a merge patch carrying the pod's uid, so it never lands on a
//! re-created namesake), only when it differs from what was last written — or from what the
//! API server shows. Like kubelet's status manager it reconciles with the server's copy (the
//! Pod as the agent's watch last delivered it, on every event and every [`RESYNC`]): a status
//! someone else changed (the node lifecycle controller marks Pods not ready while their Node
//! is not ready, and nothing but the agent sets them ready again) or a write that never landed
//! is written again. A write that gets no answer within [`WRITE_TIMEOUT`] counts as failed and
//! is retried, so one lost answer never ends the pod's reporting.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::state::PodCell;
use super::status;
use super::volumes::FIELD_MANAGER;

/// How long one status write may wait for the API server's answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(20);

/// How often the written status is compared with the server's copy even without a watch event
/// (kubelet's status manager reconciles every 10 s).
pub const RESYNC: Duration = Duration::from_secs(10);

pub struct Reporter {
    api: Api<Pod>,
    name: String,
    uid: String,
    restart_policy: String,
    cell: Arc<PodCell>,
    conditions: BTreeMap<String, PodCondition>,
    last: Option<Value>,
    write_timeout: Duration,
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
            write_timeout: WRITE_TIMEOUT,
        }
    }

    #[cfg(test)]
    fn with_write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// Whether `server`, the API server's copy of the Pod, shows another status than the one
    /// last written (every field the agent writes is compared; others are not the agent's).
    /// When it does, the next write goes out even though the pod state did not change.
    fn drifted(&mut self, server: &Pod) -> bool {
        let Some(Value::Object(ours)) = self.last.as_ref() else {
            return false;
        };
        if server.metadata.uid.as_deref() != Some(self.uid.as_str()) {
            return false;
        }
        let theirs = server
            .status
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok())
            .unwrap_or_else(|| json!({}));
        let Some(field) = ours
            .iter()
            .find(|(k, v)| theirs.get(k.as_str()) != Some(*v))
        else {
            return false;
        };
        tracing::info!(pod = %self.name, field = %field.0, "the API server shows another status than the agent wrote; writing it again");
        self.last = None;
        true
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
        let patch = Patch::Merge(&patch);
        let request = self.api.patch_status(&self.name, &params, &patch);
        match tokio::time::timeout(self.write_timeout, request).await {
            Ok(Ok(_)) => {
                self.last = Some(value);
                Write::Written
            }
            Ok(Err(kube::Error::Api(e))) if e.code == 404 || e.code == 409 => Write::Gone,
            Ok(Err(e)) => {
                tracing::warn!(pod = %self.name, error = %e, "writing pod status failed");
                Write::Failed
            }
            Err(_) => {
                tracing::warn!(pod = %self.name, timeout = ?self.write_timeout, "writing pod status got no answer");
                Write::Failed
            }
        }
    }

    /// Writes on every change until `done`, then once more (retrying a failed write: it may
    /// be the pod's final status; the caller bounds how long it waits). `server` is the Pod as
    /// the agent's watch delivers it: its status is written again whenever it is not the one
    /// last written.
    pub async fn run(mut self, done: CancellationToken, mut server: watch::Receiver<Arc<Pod>>) {
        let mut watching = true;
        let mut resync = tokio::time::interval_at(tokio::time::Instant::now() + RESYNC, RESYNC);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let finishing = tokio::select! {
                () = self.cell.changed.notified() => false,
                () = done.cancelled() => true,
                changed = server.changed(), if watching => {
                    watching = changed.is_ok();
                    let pod = server.borrow_and_update().clone();
                    if !self.drifted(&pod) {
                        continue;
                    }
                    false
                }
                _ = resync.tick() => {
                    let pod = server.borrow().clone();
                    if !self.drifted(&pod) {
                        continue;
                    }
                    false
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::state::{ContainerState, PodState, Run};
    use kube::api::PostParams;
    use std::net::Ipv4Addr;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "t", "uid": "u1"},
            // Bound, as every pod an agent reports on: the scheduler leaves it alone (an
            // unbound one gets `PodScheduled=False` from it, at a moment of its own).
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}
        }))
        .unwrap()
    }

    fn running() -> Arc<PodCell> {
        let mut c = ContainerState::new("c", "busybox", 0);
        c.run = Run::Running {
            started_at: Timestamp::now(),
        };
        c.ready = true;
        c.started = true;
        Arc::new(PodCell::new(PodState {
            pod_ip: Some(Ipv4Addr::new(127, 1, 0, 9)),
            start_time: Timestamp::now(),
            init: Vec::new(),
            main: vec![c],
            init_failed: false,
            terminal: false,
        }))
    }

    #[tokio::test]
    async fn a_write_without_an_answer_fails_in_time() {
        let (client, silent) = crate::agent::silent_client().await;
        let mut reporter =
            Reporter::new(client, &pod(), running()).with_write_timeout(Duration::from_millis(200));
        let write = tokio::time::timeout(Duration::from_secs(5), reporter.write()).await;
        assert_eq!(write, Ok(Write::Failed), "the reporter waited for good");
        silent.abort();
    }

    #[tokio::test]
    async fn a_status_changed_on_the_server_is_seen_and_written_again() {
        let server = steward_apiserver::start(steward_apiserver::ServerConfig::default())
            .await
            .unwrap();
        let mut config = kube::Config::new(server.url().parse().unwrap());
        config.auth_info.token = Some(server.admin_token().into());
        let client = Client::try_from(config).unwrap();
        let namespace = serde_json::from_value(json!({"metadata": {"name": "t"}})).unwrap();
        Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
        let api: Api<Pod> = Api::namespaced(client.clone(), "t");
        let created = api.create(&PostParams::default(), &pod()).await.unwrap();
        let mut reporter = Reporter::new(client, &created, running());
        assert!(
            !reporter.drifted(&created),
            "nothing written yet: nothing to compare"
        );
        assert_eq!(reporter.write().await, Write::Written);
        // What the server stores reads back as exactly what was written: no write loop.
        let stored = api.get("p").await.unwrap();
        assert!(!reporter.drifted(&stored));
        assert_eq!(reporter.write().await, Write::Unchanged);

        // The node lifecycle controller marks the Pod not ready; the agent's state is unchanged.
        let mut conditions = stored.status.clone().unwrap().conditions.unwrap();
        for c in conditions.iter_mut().filter(|c| c.type_ == "Ready") {
            c.status = "False".into();
            c.reason = Some("NodeNotReady".into());
        }
        let changed = api
            .patch_status(
                "p",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": conditions}})),
            )
            .await
            .unwrap();
        assert!(reporter.drifted(&changed));
        assert_eq!(reporter.write().await, Write::Written);
        let repaired = api.get("p").await.unwrap();
        let ready = repaired.status.unwrap().conditions.unwrap();
        assert!(
            ready
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        );
        server.shutdown().await;
    }
}
