//! CustomResourceDefinitions: establishment, discovery, schema validation, pruning and
//! defaulting, generation, the status and scale subresources, multiple versions and cleanup.

use k8s_openapi::api::autoscaling::v1::Scale;
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::Discovery;
use serde_json::json;

use crate::support::{api_err, dynobj, env, eventually, raw, rv, widget_versions};

#[tokio::test]
async fn crd_is_established_and_discoverable() {
    let mut env = env("crd-establish").await;
    let ar = env.crd("Widget", widget_versions(true, true)).await;
    let discovery = Discovery::new(env.client.clone())
        .filter(&[ar.group.as_str()])
        .run()
        .await
        .unwrap();
    let found = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .any(|(r, _)| r.kind == ar.kind && r.plural == ar.plural);
    assert!(found, "the new kind is in discovery");
    let list = raw(
        &env,
        "GET",
        &format!("/apis/{}/v1", ar.group),
        "application/json",
        json!(null),
    )
    .await
    .unwrap();
    let names: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(
        names.contains(&format!("{}/status", ar.plural).as_str()),
        "{names:?}"
    );
    assert!(
        names.contains(&format!("{}/scale", ar.plural).as_str()),
        "{names:?}"
    );
    env.finish().await;
}

#[tokio::test]
async fn schema_validation_pruning_and_defaults() {
    let mut env = env("crd-schema").await;
    let ar = env.crd("Widget", widget_versions(true, false)).await;
    let api = env.dynamic(&ar);
    let bad = dynobj(
        &ar,
        "bad",
        json!({"replicas": 11, "mode": "turbo", "name": "UPPER"}),
    );
    let err = api_err(api.create(&PostParams::default(), &bad).await);
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    for field in ["spec.replicas", "spec.mode", "spec.name"] {
        assert!(
            err.message.contains(field),
            "{field} missing from {}",
            err.message
        );
    }
    let missing = api_err(
        api.create(&PostParams::default(), &dynobj(&ar, "m", json!({})))
            .await,
    );
    assert!(
        missing.message.contains("spec.replicas: Required value"),
        "{}",
        missing.message
    );
    let wrong_type = api_err(
        api.create(
            &PostParams::default(),
            &dynobj(&ar, "t", json!({"replicas": "three"})),
        )
        .await,
    );
    assert_eq!(wrong_type.code, 422);
    let ok = dynobj(
        &ar,
        "ok",
        json!({"replicas": 3, "unknown": 1, "extra": {"free": {"form": true}}}),
    );
    let created = api.create(&PostParams::default(), &ok).await.unwrap();
    assert!(
        created.data["spec"].get("unknown").is_none(),
        "unknown fields are pruned"
    );
    assert_eq!(
        created.data["spec"]["extra"]["free"]["form"], true,
        "preserved subtree"
    );
    assert_eq!(created.data["spec"]["mode"], "safe", "defaults applied");
    env.finish().await;
}

#[tokio::test]
async fn generation_bumps_only_on_spec_changes() {
    let mut env = env("crd-generation").await;
    let ar = env.crd("Widget", widget_versions(true, false)).await;
    let api = env.dynamic(&ar);
    let w = api
        .create(
            &PostParams::default(),
            &dynobj(&ar, "w", json!({"replicas": 1})),
        )
        .await
        .unwrap();
    assert_eq!(w.metadata.generation, Some(1));
    let labelled = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(labelled.metadata.generation, Some(1));
    let st = api
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Up"}})),
        )
        .await
        .unwrap();
    assert_eq!(st.metadata.generation, Some(1));
    let spec = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(spec.metadata.generation, Some(2));
    env.finish().await;
}

#[tokio::test]
async fn status_subresource_isolation() {
    let mut env = env("crd-status").await;
    let ar = env.crd("Widget", widget_versions(true, false)).await;
    let api = env.dynamic(&ar);
    let mut w = dynobj(&ar, "w", json!({"replicas": 1}));
    w.data["status"] = json!({"phase": "Created"});
    let created = api.create(&PostParams::default(), &w).await.unwrap();
    assert!(
        created.data.get("status").is_none(),
        "status is dropped on create"
    );
    let main = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Main"}})),
        )
        .await
        .unwrap();
    assert!(
        main.data.get("status").is_none(),
        "status ignored on the main resource"
    );
    let st = api
        .patch_status("w", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 5}, "metadata": {"labels": {"x": "y"}}, "status": {"phase": "Up"}})))
        .await
        .unwrap();
    assert_eq!(st.data["status"]["phase"], "Up");
    assert_eq!(st.data["spec"]["replicas"], 1, "spec ignored on /status");
    assert!(
        st.metadata.labels.unwrap_or_default().is_empty(),
        "metadata ignored on /status"
    );
    // PUT on /status.
    let mut cur = api.get("w").await.unwrap();
    cur.data["status"]["phase"] = json!("Replaced");
    let put = api
        .replace_status("w", &PostParams::default(), &cur)
        .await
        .unwrap();
    assert_eq!(put.data["status"]["phase"], "Replaced");
    env.finish().await;
}

#[tokio::test]
async fn scale_subresource_maps_replicas() {
    let mut env = env("crd-scale").await;
    let ar = env.crd("Widget", widget_versions(true, true)).await;
    let api = env.dynamic(&ar);
    api.create(
        &PostParams::default(),
        &dynobj(&ar, "w", json!({"replicas": 2})),
    )
    .await
    .unwrap();
    api.patch_status(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"replicas": 1, "selector": "app=w"}})),
    )
    .await
    .unwrap();
    let sc: Scale = api.get_scale("w").await.unwrap();
    assert_eq!(sc.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(sc.status.as_ref().unwrap().replicas, 1);
    assert_eq!(
        sc.status.as_ref().unwrap().selector.as_deref(),
        Some("app=w")
    );
    let sc2 = api
        .patch_scale(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    assert_eq!(sc2.spec.unwrap().replicas, Some(4));
    assert_eq!(api.get("w").await.unwrap().data["spec"]["replicas"], 4);
    let mut stale = sc;
    stale.spec.as_mut().unwrap().replicas = Some(7);
    let err = api_err(api.replace_scale("w", &PostParams::default(), &stale).await);
    assert_eq!(err.code, 409);
    env.finish().await;
}

#[tokio::test]
async fn served_versions_share_storage() {
    let mut env = env("crd-versions").await;
    let mut versions = widget_versions(false, false);
    let mut beta = versions[0].clone();
    beta["name"] = json!("v1beta1");
    beta["storage"] = json!(false);
    versions.as_array_mut().unwrap().push(beta);
    let ar = env.crd("Widget", versions).await;
    let v1 = env.dynamic(&ar);
    v1.create(
        &PostParams::default(),
        &dynobj(&ar, "w", json!({"replicas": 1})),
    )
    .await
    .unwrap();
    let beta_ar = ApiResource {
        version: "v1beta1".into(),
        api_version: format!("{}/v1beta1", ar.group),
        ..ar.clone()
    };
    let beta_api: Api<DynamicObject> = env.dynamic(&beta_ar);
    let seen = beta_api.get("w").await.unwrap();
    assert_eq!(
        seen.types.unwrap().api_version,
        format!("{}/v1beta1", ar.group)
    );
    assert_eq!(seen.data["spec"]["replicas"], 1);
    env.finish().await;
}

#[tokio::test]
async fn deleting_a_crd_deletes_its_objects() {
    let mut env = env("crd-delete").await;
    let ar = env.crd("Widget", widget_versions(false, false)).await;
    let api = env.dynamic(&ar);
    let w = api
        .create(
            &PostParams::default(),
            &dynobj(&ar, "w", json!({"replicas": 1})),
        )
        .await
        .unwrap();
    assert!(!rv(&w).is_empty());
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(env.client.clone());
    crds.delete(
        &format!("{}.{}", ar.plural, ar.group),
        &DeleteParams::default(),
    )
    .await
    .unwrap();
    eventually("CRD gone", || async {
        crds.get_opt(&format!("{}.{}", ar.plural, ar.group))
            .await
            .unwrap()
            .is_none()
    })
    .await;
    eventually("resource no longer served", || async {
        api.list(&Default::default()).await.is_err()
    })
    .await;
    env.finish().await;
}
