//! Webhook notifications (seed 000, "Webhooks"): when `WEBHOOK_URL`, `WEBHOOK_USERNAME` and
//! `WEBHOOK_PASSWORD` are all non-empty, every finished scale or upgrade operation of every
//! engine is POSTed as JSON with HTTP basic auth. Failed deliveries are not retried (as the seed
//! says); they are logged and counted in `steward_webhook_deliveries_total{result="failure"}`.
//!
//! Beyond the seed, a finished fail-over or switchover (issue 5: "webhook on fail-over") is
//! POSTed with `event: "failover"` and a `failover_data` object naming the old and the new
//! primary. `failover_data` is left out of scale and upgrade payloads, so those stay exactly
//! the seed's.

use std::time::Duration;

use serde::Serialize;
use steward_api::common::{GroupReplicas, Operation, OperationKind, OperationPhase};

use crate::config::WebhookArgs;
use crate::metrics::Metrics;

/// `event` of the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookEvent {
    /// Members were added or removed.
    Scale,
    /// The version or image changed.
    Upgrade,
    /// The primary was replaced (fail-over or switchover). Not in the seed.
    Failover,
    /// A backup finished. Not in the seed.
    Backup,
    /// A backup was restored into a scratch instance and checked (a `verify` schedule). Not
    /// in the seed.
    #[serde(rename = "restore_verified")]
    RestoreVerified,
}

/// `status` of the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookStatus {
    /// The operation finished.
    Success,
    /// The operation failed or timed out.
    Failure,
}

/// One node group in `scale_data`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeReplicas {
    /// Node group name.
    pub name: String,
    /// Replica count.
    pub replicas: i32,
}

/// `scale_data` of the payload. Field order and names are the seed's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ScaleData {
    /// New replicas by data node group.
    pub new_data_replicas: Vec<NodeReplicas>,
    /// New master replicas, when the engine has masters.
    pub new_master_replicas: Option<i32>,
    /// Old replicas by data node group.
    pub old_data_replicas: Vec<NodeReplicas>,
    /// Old master replicas.
    pub old_master_replicas: Option<i32>,
}

/// `upgrade_data` of the payload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UpgradeData {
    /// Registry after.
    pub new_registry: String,
    /// Version after.
    pub new_version: String,
    /// Registry before.
    pub old_registry: String,
    /// Version before.
    pub old_version: String,
}

/// `failover_data` of the payload (Steward's extension).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FailoverData {
    /// The primary being replaced.
    pub old_primary: String,
    /// The primary that replaced it (on failure: the one that was to).
    pub new_primary: String,
    /// `true` for a graceful switchover of a healthy primary, `false` for a fail-over.
    pub switchover: bool,
}

/// `backup_data` of the payload (Steward's extension).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BackupData {
    /// The `PostgresBackup`.
    pub backup: String,
    /// `full`, `diff` or `incr`, as asked.
    #[serde(rename = "type")]
    pub type_: String,
    /// The label pgBackRest gave it; null when the backup failed.
    pub label: Option<String>,
    /// Why it failed; null on success.
    pub error: Option<String>,
}

/// `verify_data` of the payload (Steward's extension).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VerifyData {
    /// The `Schedule`.
    pub schedule: String,
    /// The run (its scratch Pod, claim and Job are named after it).
    pub run: String,
    /// The backup restored (its label); null when there was none.
    pub backup: Option<String>,
    /// The time recovery reached; null when it did not.
    pub recovered_to: Option<String>,
    /// What the check query returned; null when it did not run.
    pub result: Option<String>,
    /// Why it failed; null on success.
    pub error: Option<String>,
}

/// The JSON body, as documented in seed 000, plus `failover_data` for fail-overs and
/// `backup_data` for backups.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WebhookPayload {
    /// `metadata.name` of the cluster resource.
    pub cluster: String,
    /// `scale`, `upgrade` or `failover`.
    pub event: WebhookEvent,
    /// `metadata.namespace` of the cluster resource.
    pub namespace: String,
    /// Set for `scale`, else null.
    pub scale_data: Option<ScaleData>,
    /// `success` or `failure`.
    pub status: WebhookStatus,
    /// Set for `upgrade`, else null.
    pub upgrade_data: Option<UpgradeData>,
    /// Set for `failover`, else absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failover_data: Option<FailoverData>,
    /// Set for `backup`, else absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup_data: Option<BackupData>,
    /// Set for `restore_verified`, else absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify_data: Option<VerifyData>,
}

fn node_replicas(groups: &[GroupReplicas]) -> Vec<NodeReplicas> {
    groups
        .iter()
        .map(|g| NodeReplicas {
            name: g.name.clone(),
            replicas: g.replicas,
        })
        .collect()
}

impl WebhookPayload {
    /// The notification for a finished operation, or `None` for kinds not notified (only
    /// scale, upgrade, fail-over and backup are) and for operations still running.
    pub fn for_operation(namespace: &str, cluster: &str, op: &Operation) -> Option<Self> {
        let status = match op.phase {
            OperationPhase::Running => return None,
            OperationPhase::Succeeded => WebhookStatus::Success,
            OperationPhase::Failed => WebhookStatus::Failure,
        };
        let c = &op.change;
        let mut payload = Self {
            cluster: cluster.to_owned(),
            event: WebhookEvent::Scale,
            namespace: namespace.to_owned(),
            scale_data: None,
            status,
            upgrade_data: None,
            failover_data: None,
            backup_data: None,
            verify_data: None,
        };
        match op.kind {
            OperationKind::Scale => {
                payload.scale_data = Some(ScaleData {
                    new_data_replicas: node_replicas(&c.new_replicas),
                    new_master_replicas: c.new_master_replicas,
                    old_data_replicas: node_replicas(&c.old_replicas),
                    old_master_replicas: c.old_master_replicas,
                });
            }
            OperationKind::Upgrade => {
                payload.event = WebhookEvent::Upgrade;
                payload.upgrade_data = Some(UpgradeData {
                    new_registry: c.new_registry.clone().unwrap_or_default(),
                    new_version: c.new_version.clone().unwrap_or_default(),
                    old_registry: c.old_registry.clone().unwrap_or_default(),
                    old_version: c.old_version.clone().unwrap_or_default(),
                });
            }
            OperationKind::Failover => {
                payload.event = WebhookEvent::Failover;
                payload.failover_data = Some(FailoverData {
                    old_primary: c.old_primary.clone().unwrap_or_default(),
                    new_primary: c.new_primary.clone().unwrap_or_default(),
                    switchover: c.switchover.unwrap_or(false),
                });
            }
            OperationKind::Backup => {
                payload.event = WebhookEvent::Backup;
                payload.backup_data = Some(BackupData {
                    backup: c.backup.clone().unwrap_or_default(),
                    type_: c.backup_type.clone().unwrap_or_default(),
                    label: c.backup_label.clone(),
                    error: (op.phase == OperationPhase::Failed).then(|| op.message.clone()),
                });
            }
            // A `Recover` leaves the member count as it was (one member replaced by a new
            // one), so it is not a scale. A rolling restart's planned switchover is part of
            // the `Restart` operation, not a fail-over.
            OperationKind::Bootstrap
            | OperationKind::Restart
            | OperationKind::Restore
            | OperationKind::Recover => return None,
        }
        Some(payload)
    }
}

/// Sends webhook notifications.
#[derive(Clone)]
pub struct WebhookSender {
    target: Option<Target>,
    metrics: Metrics,
}

#[derive(Clone)]
struct Target {
    url: String,
    username: String,
    password: String,
    http: reqwest::Client,
}

/// Result of one delivery attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Webhooks are not configured.
    Disabled,
    /// The receiver answered 2xx.
    Delivered,
    /// The request failed or the receiver answered otherwise. Not retried.
    Failed,
}

impl WebhookSender {
    /// A sender; disabled unless URL, user name and password are all non-empty.
    pub fn new(args: &WebhookArgs, metrics: Metrics) -> Result<Self, reqwest::Error> {
        let enabled = !args.webhook_url.is_empty()
            && !args.webhook_username.is_empty()
            && !args.webhook_password.is_empty();
        let target = if enabled {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()?;
            Some(Target {
                url: args.webhook_url.clone(),
                username: args.webhook_username.clone(),
                password: args.webhook_password.clone(),
                http,
            })
        } else {
            None
        };
        Ok(Self { target, metrics })
    }

    /// Whether notifications are sent.
    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// POSTs one notification. Never retries; failures are logged (without credentials) and
    /// counted.
    pub async fn deliver(&self, payload: &WebhookPayload) -> Delivery {
        let Some(target) = &self.target else {
            return Delivery::Disabled;
        };
        let event = match payload.event {
            WebhookEvent::Scale => "scale",
            WebhookEvent::Upgrade => "upgrade",
            WebhookEvent::Failover => "failover",
            WebhookEvent::Backup => "backup",
            WebhookEvent::RestoreVerified => "restore_verified",
        };
        let sent = target
            .http
            .post(&target.url)
            .basic_auth(&target.username, Some(&target.password))
            .json(payload)
            .send()
            .await;
        let result = match sent {
            Ok(resp) if resp.status().is_success() => Delivery::Delivered,
            Ok(resp) => {
                tracing::warn!(
                    cluster = %payload.cluster, namespace = %payload.namespace, event,
                    http_status = resp.status().as_u16(),
                    "webhook receiver refused the notification; not retrying"
                );
                Delivery::Failed
            }
            Err(err) => {
                tracing::warn!(
                    cluster = %payload.cluster, namespace = %payload.namespace, event,
                    error = %err.without_url(),
                    "webhook delivery failed; not retrying"
                );
                Delivery::Failed
            }
        };
        let label = if result == Delivery::Delivered {
            "success"
        } else {
            "failure"
        };
        self.metrics.webhook_delivered(event, label);
        result
    }
}
