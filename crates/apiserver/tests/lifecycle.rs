//! The embedded server's own API: kubeconfig, shutdown closing watches, snapshots.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{PostParams, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::json;
use steward_apiserver::{ServerConfig, start};

/// A client configuration for `server` with its admin token.
fn admin_config(server: &steward_apiserver::ApiServerHandle) -> kube::Config {
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.auth_info.token = Some(server.admin_token().into());
    config
}

fn provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[tokio::test]
async fn kubeconfig_points_at_the_server() {
    provider();
    let server = start(ServerConfig::default()).await.unwrap();
    assert!(server.url().starts_with("http://127.0.0.1:"));
    assert_eq!(server.url(), format!("http://{}", server.addr()));
    let kc = Kubeconfig::from_yaml(&server.kubeconfig_yaml()).unwrap();
    assert_eq!(kc.current_context.as_deref(), Some("steward-dev"));
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = Client::try_from(cfg).unwrap();
    let v = client.apiserver_version().await.unwrap();
    assert_eq!(v.major, "1");
    server.shutdown().await;
}

#[tokio::test]
async fn shutdown_closes_watches_and_stops_serving() {
    provider();
    let server = start(ServerConfig::default()).await.unwrap();
    let client = Client::try_from(admin_config(&server)).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut s = api
        .watch(&WatchParams::default().timeout(60), "0")
        .await
        .unwrap()
        .boxed();
    let after_config = admin_config(&server);
    tokio::time::timeout(Duration::from_secs(10), server.shutdown())
        .await
        .expect("shutdown in time");
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(ev) = s.next().await {
            if ev.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(end.is_ok(), "the watch ended");
    let after = Client::try_from(after_config).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(after, "default");
    assert!(
        api.list(&Default::default()).await.is_err(),
        "no longer serving"
    );
}

#[tokio::test]
async fn state_file_survives_restart() {
    provider();
    let dir = std::env::temp_dir().join(format!("steward-apiserver-{}", std::process::id()));
    let path = dir.join("state.json");
    let _ = std::fs::remove_file(&path);
    let config = ServerConfig {
        state_file: Some(path.clone()),
        ..Default::default()
    };
    let server = start(config.clone()).await.unwrap();
    let client = Client::try_from(admin_config(&server)).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "kept"}, "data": {"a": "b"}})).unwrap();
    let created = api.create(&PostParams::default(), &cm).await.unwrap();
    server.shutdown().await;

    let server = start(config).await.unwrap();
    let client = Client::try_from(admin_config(&server)).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let got = api.get("kept").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);
    assert_eq!(
        got.metadata.resource_version,
        created.metadata.resource_version
    );
    let next = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "n"}})).unwrap(),
        )
        .await
        .unwrap();
    let rv = |c: &ConfigMap| {
        c.metadata
            .resource_version
            .clone()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(rv(&next) > rv(&created), "resourceVersions keep increasing");
    server.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
