//! Owner references and garbage collection: background, foreground and orphan propagation.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use crate::support::{cm, env, eventually};

fn child(name: &str, owner: &ConfigMap, block: bool) -> ConfigMap {
    let mut c = cm(name, json!({}));
    c.metadata.owner_references = Some(vec![serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name, "uid": owner.metadata.uid,
        "blockOwnerDeletion": block
    }))
    .unwrap()]);
    c
}

#[tokio::test]
async fn background_deletion_collects_dependents() {
    let env = env("gc-bg").await;
    let api: Api<ConfigMap> = env.api();
    let owner = api
        .create(&PostParams::default(), &cm("owner", json!({})))
        .await
        .unwrap();
    api.create(&PostParams::default(), &child("c1", &owner, false))
        .await
        .unwrap();
    let c2 = api
        .create(&PostParams::default(), &child("c2", &owner, false))
        .await
        .unwrap();
    api.create(&PostParams::default(), &child("gc1", &c2, false))
        .await
        .unwrap();
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    assert!(
        api.get_opt("owner").await.unwrap().is_none(),
        "owner goes at once"
    );
    eventually("dependents collected", || async {
        api.get_opt("c1").await.unwrap().is_none()
            && api.get_opt("c2").await.unwrap().is_none()
            && api.get_opt("gc1").await.unwrap().is_none()
    })
    .await;
    env.finish().await;
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() {
    let env = env("gc-fg").await;
    let api: Api<ConfigMap> = env.api();
    let owner = api
        .create(&PostParams::default(), &cm("owner", json!({})))
        .await
        .unwrap();
    let mut held = child("held", &owner, true);
    held.metadata.finalizers = Some(vec!["steward.dev/hold".into()]);
    api.create(&PostParams::default(), &held).await.unwrap();
    api.delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    let o = api.get("owner").await.unwrap();
    assert!(o.metadata.deletion_timestamp.is_some());
    assert!(
        o.metadata
            .finalizers
            .unwrap()
            .contains(&"foregroundDeletion".to_string())
    );
    eventually("dependent marked for deletion", || async {
        api.get_opt("held")
            .await
            .unwrap()
            .is_some_and(|h| h.metadata.deletion_timestamp.is_some())
    })
    .await;
    assert!(
        api.get_opt("owner").await.unwrap().is_some(),
        "owner waits for its blocking dependent"
    );
    api.patch(
        "held",
        &Default::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("owner gone", || async {
        api.get_opt("owner").await.unwrap().is_none()
    })
    .await;
    env.finish().await;
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents() {
    let env = env("gc-orphan").await;
    let api: Api<ConfigMap> = env.api();
    let owner = api
        .create(&PostParams::default(), &cm("owner", json!({})))
        .await
        .unwrap();
    api.create(&PostParams::default(), &child("kid", &owner, false))
        .await
        .unwrap();
    api.delete("owner", &DeleteParams::orphan()).await.unwrap();
    eventually("owner gone", || async {
        api.get_opt("owner").await.unwrap().is_none()
    })
    .await;
    let kid = api.get("kid").await.unwrap();
    assert!(kid.metadata.owner_references.unwrap_or_default().is_empty());
    env.finish().await;
}
