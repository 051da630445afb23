//! Webhook deliveries against a real HTTP server on 127.0.0.1.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use axum::http::StatusCode;
use steward_api::common::{
    GroupReplicas, Operation, OperationChange, OperationKind, OperationPhase,
};
use steward_operator::config::WebhookArgs;
use steward_operator::metrics::Metrics;
use steward_operator::webhook::{Delivery, WebhookPayload, WebhookSender};

fn args(url: &str) -> WebhookArgs {
    WebhookArgs {
        webhook_url: url.to_owned(),
        webhook_username: "steward".to_owned(),
        webhook_password: "s3cret".to_owned(),
    }
}

fn operation(kind: OperationKind, phase: OperationPhase, change: OperationChange) -> Operation {
    Operation {
        kind,
        phase,
        generation: 2,
        step: "Done".into(),
        done: 1,
        total: 1,
        progress: "1/1".into(),
        started_at: "2026-01-01T00:00:00Z".into(),
        deadline: "2026-01-01T01:00:00Z".into(),
        finished_at: Some("2026-01-01T00:10:00Z".into()),
        message: String::new(),
        change,
    }
}

#[tokio::test]
async fn upgrade_payload_matches_the_seed_byte_for_byte() {
    common::install_crypto();
    let (url, received) = common::hooks::receiver(StatusCode::OK).await;
    let metrics = Metrics::new();
    let sender = WebhookSender::new(&args(&url), metrics.clone()).unwrap();
    let op = operation(
        OperationKind::Upgrade,
        OperationPhase::Succeeded,
        OperationChange {
            old_registry: Some("crate".into()),
            new_registry: Some("crate".into()),
            old_version: Some("4.1.5".into()),
            new_version: Some("4.1.6".into()),
            ..Default::default()
        },
    );
    let payload =
        WebhookPayload::for_operation("my-crate-namespace", "my-new-crate-cluster", &op).unwrap();
    assert_eq!(sender.deliver(&payload).await, Delivery::Delivered);
    let got = received.all();
    assert_eq!(got.len(), 1);
    // Basic auth of steward:s3cret.
    assert_eq!(got[0].0.as_deref(), Some("Basic c3Rld2FyZDpzM2NyZXQ="));
    assert_eq!(
        got[0].1,
        r#"{"cluster":"my-new-crate-cluster","event":"upgrade","namespace":"my-crate-namespace","scale_data":null,"status":"success","upgrade_data":{"new_registry":"crate","new_version":"4.1.6","old_registry":"crate","old_version":"4.1.5"}}"#
    );
    assert_eq!(metrics.webhook_count("upgrade", "success"), 1);
}

#[tokio::test]
async fn scale_failure_payload_has_every_documented_field() {
    common::install_crypto();
    let (url, received) = common::hooks::receiver(StatusCode::OK).await;
    let sender = WebhookSender::new(&args(&url), Metrics::new()).unwrap();
    let op = operation(
        OperationKind::Scale,
        OperationPhase::Failed,
        OperationChange {
            old_replicas: vec![GroupReplicas {
                name: "members".into(),
                replicas: 3,
            }],
            new_replicas: vec![GroupReplicas {
                name: "members".into(),
                replicas: 5,
            }],
            ..Default::default()
        },
    );
    let payload = WebhookPayload::for_operation("db", "etcd-a", &op).unwrap();
    sender.deliver(&payload).await;
    let body = received.all()[0].1.clone();
    assert_eq!(
        body,
        r#"{"cluster":"etcd-a","event":"scale","namespace":"db","scale_data":{"new_data_replicas":[{"name":"members","replicas":5}],"new_master_replicas":null,"old_data_replicas":[{"name":"members","replicas":3}],"old_master_replicas":null},"status":"failure","upgrade_data":null}"#
    );
}

#[tokio::test]
async fn failover_payload_names_both_primaries() {
    common::install_crypto();
    let (url, received) = common::hooks::receiver(StatusCode::OK).await;
    let metrics = Metrics::new();
    let sender = WebhookSender::new(&args(&url), metrics.clone()).unwrap();
    let op = operation(
        OperationKind::Failover,
        OperationPhase::Succeeded,
        OperationChange {
            old_primary: Some("pg-0".into()),
            new_primary: Some("pg-2".into()),
            switchover: Some(false),
            ..Default::default()
        },
    );
    let payload = WebhookPayload::for_operation("db", "pg", &op).unwrap();
    assert_eq!(sender.deliver(&payload).await, Delivery::Delivered);
    let body = received.all()[0].1.clone();
    assert_eq!(
        body,
        r#"{"cluster":"pg","event":"failover","namespace":"db","scale_data":null,"status":"success","upgrade_data":null,"failover_data":{"old_primary":"pg-0","new_primary":"pg-2","switchover":false}}"#
    );
    assert_eq!(metrics.webhook_count("failover", "success"), 1);
}

#[tokio::test]
async fn failed_deliveries_are_counted_and_not_retried() {
    common::install_crypto();
    let (url, received) = common::hooks::receiver(StatusCode::INTERNAL_SERVER_ERROR).await;
    let metrics = Metrics::new();
    let sender = WebhookSender::new(&args(&url), metrics.clone()).unwrap();
    let op = operation(
        OperationKind::Scale,
        OperationPhase::Succeeded,
        OperationChange::default(),
    );
    let payload = WebhookPayload::for_operation("db", "etcd-a", &op).unwrap();
    assert_eq!(sender.deliver(&payload).await, Delivery::Failed);
    assert_eq!(received.all().len(), 1, "exactly one attempt");
    assert_eq!(metrics.webhook_count("scale", "failure"), 1);

    // Nobody listening: also one failed attempt, counted.
    let closed = WebhookSender::new(&args("http://127.0.0.1:9/hook"), metrics.clone()).unwrap();
    assert_eq!(closed.deliver(&payload).await, Delivery::Failed);
    assert_eq!(metrics.webhook_count("scale", "failure"), 2);
}

#[tokio::test]
async fn webhooks_need_all_three_settings() {
    common::install_crypto();
    let mut partial = args("http://127.0.0.1:9/hook");
    partial.webhook_password.clear();
    let sender = WebhookSender::new(&partial, Metrics::new()).unwrap();
    assert!(!sender.enabled());
    let op = operation(
        OperationKind::Upgrade,
        OperationPhase::Succeeded,
        OperationChange::default(),
    );
    let payload = WebhookPayload::for_operation("db", "x", &op).unwrap();
    assert_eq!(sender.deliver(&payload).await, Delivery::Disabled);
    // Kinds not notified, and running operations, produce no payload.
    let restart = operation(
        OperationKind::Restart,
        OperationPhase::Succeeded,
        OperationChange::default(),
    );
    assert!(WebhookPayload::for_operation("db", "x", &restart).is_none());
    let recover = operation(
        OperationKind::Recover,
        OperationPhase::Succeeded,
        OperationChange::default(),
    );
    assert!(WebhookPayload::for_operation("db", "x", &recover).is_none());
    let running = operation(
        OperationKind::Scale,
        OperationPhase::Running,
        OperationChange::default(),
    );
    assert!(WebhookPayload::for_operation("db", "x", &running).is_none());
}

#[tokio::test]
async fn backup_payload_names_the_backup_and_why_it_failed() {
    common::install_crypto();
    let (url, received) = common::hooks::receiver(StatusCode::OK).await;
    let metrics = Metrics::new();
    let sender = WebhookSender::new(&args(&url), metrics.clone()).unwrap();
    let mut op = operation(
        OperationKind::Backup,
        OperationPhase::Failed,
        OperationChange {
            backup: Some("nightly-1".into()),
            backup_type: Some("incr".into()),
            ..Default::default()
        },
    );
    op.message = "Job nightly-1-job failed (BackoffLimitExceeded)".into();
    let payload = WebhookPayload::for_operation("db", "pg", &op).unwrap();
    assert_eq!(sender.deliver(&payload).await, Delivery::Delivered);
    let body = received.all()[0].1.clone();
    assert_eq!(
        body,
        r#"{"cluster":"pg","event":"backup","namespace":"db","scale_data":null,"status":"failure","upgrade_data":null,"backup_data":{"backup":"nightly-1","type":"incr","label":null,"error":"Job nightly-1-job failed (BackoffLimitExceeded)"}}"#
    );
    assert_eq!(metrics.webhook_count("backup", "success"), 1, "delivered");
}
