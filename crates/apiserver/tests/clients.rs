//! Client libraries Steward relies on, run against the embedded server: kube-lease-manager
//! leader election (server-side apply conflicts decide who holds the lease) and the kube-runtime
//! event recorder.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{ListParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource};
use kube_lease_manager::LeaseManagerBuilder;
use serde_json::json;
use steward_apiserver::{ServerConfig, start};

/// A client configuration for `server` with its admin token.
fn admin_config(server: &steward_apiserver::ApiServerHandle) -> kube::Config {
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.auth_info.token = Some(server.admin_token().into());
    config
}

async fn client() -> (Client, steward_apiserver::ApiServerHandle) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = start(ServerConfig::default()).await.unwrap();
    let client = Client::try_from(admin_config(&server)).unwrap();
    (client, server)
}

#[tokio::test]
async fn lease_manager_elects_one_leader_and_hands_over() {
    let (client, server) = client().await;
    let build = |id: &str| {
        LeaseManagerBuilder::new(client.clone(), "steward-leader")
            .with_namespace("default")
            .with_identity(id)
            .with_duration(5)
            .with_grace(2)
            .build()
    };
    let a = build("a").await.unwrap();
    let b = build("b").await.unwrap();
    let a_locked = tokio::time::timeout(Duration::from_secs(10), a.changed())
        .await
        .unwrap()
        .unwrap();
    assert!(a_locked, "the first manager takes the free lease");
    let b_try = tokio::time::timeout(Duration::from_millis(1500), b.changed()).await;
    assert!(
        b_try.is_err() || b_try.is_ok_and(|r| !r.unwrap()),
        "the second one does not get it while held"
    );
    a.release().await.unwrap();
    let b_locked = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if b.changed().await.unwrap() {
                return true;
            }
        }
    })
    .await
    .unwrap();
    assert!(b_locked, "after release the other manager takes over");
    server.shutdown().await;
}

#[tokio::test]
async fn event_recorder_creates_and_updates_series() {
    let (client, server) = client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "target"}})).unwrap();
    let cm = cms.create(&PostParams::default(), &cm).await.unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "steward".into(),
            instance: Some("test".into()),
        },
    );
    let ev = Event {
        type_: EventType::Normal,
        reason: "Reconciled".into(),
        note: Some("all good".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    let reference = cm.object_ref(&());
    recorder.publish(&ev, &reference).await.unwrap();
    recorder.publish(&ev, &reference).await.unwrap();
    let events: Api<K8sEvent> = Api::namespaced(client, "default");
    let list = events.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let e = &list.items[0];
    assert_eq!(e.reason.as_deref(), Some("Reconciled"));
    assert_eq!(e.series.as_ref().map(|s| s.count), Some(2));
    assert_eq!(
        e.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("target")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn both_event_apis_show_the_same_events() {
    let (client, server) = client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "target"}})).unwrap();
    let cm = cms.create(&PostParams::default(), &cm).await.unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "steward".into(),
            instance: None,
        },
    );
    let ev = Event {
        type_: EventType::Warning,
        reason: "Degraded".into(),
        note: Some("disk full".into()),
        action: "Check".into(),
        secondary: None,
    };
    recorder.publish(&ev, &cm.object_ref(&())).await.unwrap();
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let list = core
        .list(&ListParams::default().fields("involvedObject.name=target"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    let e = &list.items[0];
    assert_eq!(e.message.as_deref(), Some("disk full"));
    assert_eq!(e.reporting_component.as_deref(), Some("steward"));
    assert_eq!(e.involved_object.kind.as_deref(), Some("ConfigMap"));
    let new_api: Api<K8sEvent> = Api::namespaced(client, "default");
    let via_new = new_api
        .list(&ListParams::default().fields("regarding.name=target"))
        .await
        .unwrap();
    assert_eq!(via_new.items.len(), 1);
    assert_eq!(via_new.items[0].note.as_deref(), Some("disk full"));
    server.shutdown().await;
}
