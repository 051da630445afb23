//! Workload controllers: ReplicaSet, Deployment and StatefulSet. On a real cluster the Pods run
//! on real nodes and turn Ready through their kubelet; on the embedded server no kubelet runs, so
//! the tests play it (`status.phase: Running` and a `Ready` condition) where they need Ready Pods.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::{Env, env, eventually};

/// A Pod template (labels `app: <app>` plus `extra`) that runs nothing and stops at once.
pub fn template(app: &str, extra: Value) -> Value {
    let mut labels = json!({"app": app});
    if let (Value::Object(l), Value::Object(e)) = (&mut labels, extra) {
        l.extend(e);
    }
    json!({"metadata": {"labels": labels}, "spec": {"terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
}

/// The Pods selected by `app=<app>` that are not being deleted, by name.
pub async fn live_pods(env: &Env, app: &str) -> Vec<Pod> {
    let pods: Api<Pod> = env.api();
    pods.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

pub fn names(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

/// Plays the kubelet on the embedded server: the Pod runs and is Ready (no-op on a real cluster,
/// where the kubelet does it).
pub async fn mark_ready(env: &Env, name: &str) {
    if env.real {
        return;
    }
    let pods: Api<Pod> = env.api();
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "podIP": "10.9.0.1",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()}]}})),
    )
    .await
    .unwrap();
}

/// Marks every live Pod of `app` Ready (embedded server only).
pub async fn mark_all_ready(env: &Env, app: &str) {
    for p in live_pods(env, app).await {
        mark_ready(env, p.metadata.name.as_deref().unwrap_or_default()).await;
    }
}

async fn rs_status(api: &Api<ReplicaSet>, name: &str) -> Value {
    serde_json::to_value(api.get(name).await.unwrap().status).unwrap()
}

#[tokio::test]
async fn replicaset_creates_scales_and_adopts_pods() {
    let env = env("replicaset").await;
    let api: Api<ReplicaSet> = env.api();
    let rs: ReplicaSet = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": template("web", json!({"pod-template-hash": "abc"}))}}))
    .unwrap();
    let created = api.create(&PostParams::default(), &rs).await.unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    eventually("three Pods", || async {
        live_pods(&env, "web").await.len() == 3
    })
    .await;
    for p in live_pods(&env, "web").await {
        let name = p.metadata.name.clone().unwrap();
        assert!(name.starts_with("web-") && name.len() == 9, "{name}");
        let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("ReplicaSet", uid.as_str())
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(
            p.metadata.labels.as_ref().unwrap()["pod-template-hash"],
            "abc"
        );
    }
    mark_all_ready(&env, "web").await;
    eventually("status counts ready Pods", || async {
        let s = rs_status(&api, "web").await;
        s["replicas"] == 3
            && s["readyReplicas"] == 3
            && s["availableReplicas"] == 3
            && s["fullyLabeledReplicas"] == 3
            && s["observedGeneration"] == 1
    })
    .await;
    let ready = names(&live_pods(&env, "web").await);

    // Scaling up adds Pods that are not Ready yet; scaling down removes those first.
    let scale = |n: i64| Patch::Merge(json!({"spec": {"replicas": n}}));
    api.patch("web", &PatchParams::default(), &scale(5))
        .await
        .unwrap();
    eventually("five Pods", || async {
        live_pods(&env, "web").await.len() == 5
    })
    .await;
    api.patch("web", &PatchParams::default(), &scale(3))
        .await
        .unwrap();
    eventually("back to three Pods", || async {
        live_pods(&env, "web").await.len() == 3
    })
    .await;
    if !env.real {
        assert_eq!(names(&live_pods(&env, "web").await), ready);
    }
    eventually("observed generation 3", || async {
        rs_status(&api, "web").await["observedGeneration"] == 3
    })
    .await;

    // A deleted Pod is replaced.
    let pods: Api<Pod> = env.api();
    let victim = ready.iter().next().unwrap().clone();
    pods.delete(&victim, &Default::default()).await.unwrap();
    eventually("replacement", || async {
        let now = names(&live_pods(&env, "web").await);
        now.len() == 3 && !now.contains(&victim)
    })
    .await;

    // An orphan Pod that matches is adopted (and, being surplus and not Ready, deleted).
    api.patch("web", &PatchParams::default(), &scale(4))
        .await
        .unwrap();
    eventually("four Pods", || async {
        live_pods(&env, "web").await.len() == 4
    })
    .await;
    api.patch("web", &PatchParams::default(), &scale(3))
        .await
        .unwrap();
    eventually("three again", || async {
        live_pods(&env, "web").await.len() == 3
    })
    .await;
    let orphan: Pod = serde_json::from_value(
        json!({"metadata": {"name": "stray", "labels": {"app": "web"}},
        "spec": template("web", json!({}))["spec"].clone()}),
    )
    .unwrap();
    env.pod(&orphan).await;
    eventually("orphan adopted and removed", || async {
        let live = names(&live_pods(&env, "web").await);
        live.len() == 3 && !live.contains("stray")
    })
    .await;
    env.finish().await;
}
