//! Workload controllers: ReplicaSet, Deployment and StatefulSet. On a real cluster the Pods run
//! on real nodes and turn Ready through their kubelet; on the embedded server no kubelet runs, so
//! the tests play it (`status.phase: Running` and a `Ready` condition) where they need Ready Pods.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
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
    let r = pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "podIP": "10.9.0.1",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()}]}})),
    )
    .await;
    // A controller may have deleted the Pod since it was listed.
    match r {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("mark {name} ready: {e}"),
    }
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

    // A deleted Pod is replaced. The victim is one of the Pods live now: a real server's
    // scale-down may have removed one of the first three (its ranking differs), which would
    // make the delete a 404 and prove nothing.
    let pods: Api<Pod> = env.api();
    let victim = names(&live_pods(&env, "web").await)
        .into_iter()
        .next()
        .unwrap();
    match pods.delete(&victim, &Default::default()).await {
        Ok(_) => {}
        // Gone between the list and the delete (still being removed by the scale-down).
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => panic!("delete {victim}: {e}"),
    }
    eventually("replacement", || async {
        let now = names(&live_pods(&env, "web").await);
        now.len() == 3 && !now.contains(&victim)
    })
    .await;

    // An orphan Pod that matches is adopted (owner reference added), and the surplus goes.
    let orphan: Pod = serde_json::from_value(
        json!({"metadata": {"name": "stray", "labels": {"app": "web"}},
        "spec": template("web", json!({}))["spec"].clone()}),
    )
    .unwrap();
    env.pod(&orphan).await;
    eventually("orphan adopted, back to three", || async {
        let live = live_pods(&env, "web").await;
        let stray_ok =
            live.iter()
                .filter(|p| p.metadata.name.as_deref() == Some("stray"))
                .all(|p| {
                    p.metadata.owner_references.as_ref().is_some_and(|r| {
                        r.iter().any(|r| r.uid == uid && r.controller == Some(true))
                    })
                });
        live.len() == 3 && stray_ok
    })
    .await;
    env.finish().await;
}

async fn sts_status(api: &Api<StatefulSet>, name: &str) -> Value {
    serde_json::to_value(api.get(name).await.unwrap().status).unwrap_or(Value::Null)
}

/// Marks Pods Ready (embedded server) until `done` holds.
async fn drive_until<F, Fut>(env: &Env, app: &str, what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..300 {
        if done().await {
            return;
        }
        mark_all_ready(env, app).await;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for: {what}");
}

#[tokio::test]
async fn statefulset_orders_pods_claims_and_rolling_updates() {
    let env = env("statefulset").await;
    let api: Api<StatefulSet> = env.api();
    let sts: StatefulSet = serde_json::from_value(json!({"metadata": {"name": "db"},
        "spec": {"replicas": 3, "serviceName": "db-hl", "selector": {"matchLabels": {"app": "db"}},
            "template": template("db", json!({})),
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}}],
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Delete"}}}))
    .unwrap();
    api.create(&PostParams::default(), &sts).await.unwrap();
    let pods: Api<Pod> = env.api();
    let claims: Api<PersistentVolumeClaim> = env.api();
    eventually("db-0", || async {
        pods.get_opt("db-0").await.unwrap().is_some()
    })
    .await;
    let p0 = pods.get("db-0").await.unwrap();
    let labels = p0.metadata.labels.clone().unwrap();
    assert_eq!(labels["statefulset.kubernetes.io/pod-name"], "db-0");
    assert_eq!(labels["apps.kubernetes.io/pod-index"], "0");
    assert!(labels["controller-revision-hash"].starts_with("db-"));
    let spec = p0.spec.clone().unwrap();
    assert_eq!(spec.hostname.as_deref(), Some("db-0"));
    assert_eq!(spec.subdomain.as_deref(), Some("db-hl"));
    let vol = spec
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == "data")
        .unwrap();
    assert_eq!(vol.persistent_volume_claim.unwrap().claim_name, "data-db-0");
    assert!(claims.get_opt("data-db-0").await.unwrap().is_some());
    if !env.real {
        // OrderedReady: db-1 waits for db-0 to be Running and Ready.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(pods.get_opt("db-1").await.unwrap().is_none());
        mark_ready(&env, "db-0").await;
        eventually("db-1", || async {
            pods.get_opt("db-1").await.unwrap().is_some()
        })
        .await;
        assert!(pods.get_opt("db-2").await.unwrap().is_none());
    }
    drive_until(&env, "db", "three ready replicas", || async {
        let s = sts_status(&api, "db").await;
        s["readyReplicas"] == 3
            && s["currentReplicas"] == 3
            && s["updatedReplicas"] == 3
            && s["currentRevision"] == s["updateRevision"]
            && s["observedGeneration"] == 1
    })
    .await;
    let first_rev = sts_status(&api, "db").await["updateRevision"].clone();
    let revs: Api<ControllerRevision> = env.api();
    let listed = revs.list(&ListParams::default()).await.unwrap().items;
    assert!(
        listed
            .iter()
            .any(|r| Some(r.metadata.name.as_deref().unwrap_or_default()) == first_rev.as_str())
    );

    // A template change rolls the Pods from the highest ordinal down, one at a time.
    api.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {"v": "2"}}}}})),
    )
    .await
    .unwrap();
    eventually("new update revision", || async {
        let s = sts_status(&api, "db").await;
        s["updateRevision"] != first_rev && s["observedGeneration"] == 2
    })
    .await;
    let new_rev = sts_status(&api, "db").await["updateRevision"].clone();
    if !env.real {
        eventually("db-2 replaced first", || async {
            pods.get_opt("db-2").await.unwrap().is_some_and(|p| {
                p.metadata.labels.unwrap()["controller-revision-hash"] == new_rev.as_str().unwrap()
            })
        })
        .await;
        let p0 = pods.get("db-0").await.unwrap().metadata.labels.unwrap();
        assert_eq!(p0["controller-revision-hash"], first_rev.as_str().unwrap());
    }
    drive_until(&env, "db", "rollout complete", || async {
        let s = sts_status(&api, "db").await;
        s["currentRevision"] == new_rev && s["updatedReplicas"] == 3 && s["readyReplicas"] == 3
    })
    .await;

    // Scaling down removes the highest ordinals; whenScaled: Delete removes their claims.
    api.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .unwrap();
    drive_until(&env, "db", "scaled to one with its claim only", || async {
        let live = names(&live_pods(&env, "db").await);
        let cl: BTreeSet<String> = claims
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter_map(|c| c.metadata.name)
            .collect();
        live == BTreeSet::from(["db-0".to_string()])
            && cl == BTreeSet::from(["data-db-0".to_string()])
    })
    .await;

    // A failed Pod is replaced (the embedded server only: a kubelet owns the phase otherwise).
    if !env.real {
        let uid = pods.get("db-0").await.unwrap().metadata.uid;
        pods.patch_status(
            "db-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Failed"}})),
        )
        .await
        .unwrap();
        eventually("db-0 recreated", || async {
            pods.get_opt("db-0")
                .await
                .unwrap()
                .is_some_and(|p| p.metadata.uid != uid)
        })
        .await;
    }
    env.finish().await;
}

fn condition(status: &Value, kind: &str) -> Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind).cloned())
        .unwrap_or(Value::Null)
}

async fn replica_sets(env: &Env) -> Vec<ReplicaSet> {
    let api: Api<ReplicaSet> = env.api();
    api.list(&ListParams::default()).await.unwrap().items
}

#[tokio::test]
async fn deployment_rolls_replica_sets_and_reports_progress() {
    let env = env("deployment").await;
    let api: Api<Deployment> = env.api();
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template("web", json!({})),
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}}}))
    .unwrap();
    api.create(&PostParams::default(), &d).await.unwrap();
    let status = || async {
        serde_json::to_value(api.get("web").await.unwrap().status).unwrap_or(Value::Null)
    };
    drive_until(&env, "web", "first rollout complete", || async {
        let s = status().await;
        s["updatedReplicas"] == 3
            && s["availableReplicas"] == 3
            && s["replicas"] == 3
            && condition(&s, "Progressing")["reason"] == "NewReplicaSetAvailable"
    })
    .await;
    let s = status().await;
    assert_eq!(condition(&s, "Available")["status"], "True");
    assert_eq!(
        condition(&s, "Available")["reason"],
        "MinimumReplicasAvailable"
    );
    assert_eq!(s["observedGeneration"], 1);
    let sets = replica_sets(&env).await;
    assert_eq!(sets.len(), 1);
    let first = sets[0].clone();
    let hash = first
        .spec
        .as_ref()
        .unwrap()
        .template
        .as_ref()
        .unwrap()
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap()["pod-template-hash"]
        .clone();
    assert_eq!(
        first.metadata.name.as_deref(),
        Some(format!("web-{hash}").as_str())
    );
    assert_eq!(
        first.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"],
        "1"
    );
    let annotations = api.get("web").await.unwrap().metadata.annotations.unwrap();
    assert_eq!(annotations["deployment.kubernetes.io/revision"], "1");
    for p in live_pods(&env, "web").await {
        assert_eq!(p.metadata.labels.unwrap()["pod-template-hash"], hash);
    }

    // A new template: a second ReplicaSet, never fewer than 3 available (maxUnavailable 0) and
    // never more than 4 Pods (maxSurge 1).
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {"v": "2"}}}}})),
    )
    .await
    .unwrap();
    let max_pods = std::sync::atomic::AtomicUsize::new(0);
    drive_until(&env, "web", "second rollout complete", || async {
        let s = status().await;
        max_pods.fetch_max(
            live_pods(&env, "web").await.len(),
            std::sync::atomic::Ordering::SeqCst,
        );
        s["observedGeneration"] == 2
            && s["updatedReplicas"] == 3
            && s["replicas"] == 3
            && s["availableReplicas"] == 3
            && condition(&s, "Progressing")["reason"] == "NewReplicaSetAvailable"
    })
    .await;
    if !env.real {
        let max_pods = max_pods.into_inner();
        assert!(max_pods <= 4, "{max_pods} Pods at once");
    }
    let sets = replica_sets(&env).await;
    assert_eq!(sets.len(), 2);
    let old = sets
        .iter()
        .find(|s| s.metadata.uid == first.metadata.uid)
        .unwrap();
    assert_eq!(old.spec.as_ref().unwrap().replicas, Some(0));
    let new = sets
        .iter()
        .find(|s| s.metadata.uid != first.metadata.uid)
        .unwrap();
    assert_eq!(
        new.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"],
        "2"
    );
    assert_eq!(
        api.get("web").await.unwrap().metadata.annotations.unwrap()["deployment.kubernetes.io/revision"],
        "2"
    );

    // Scaling follows on the current ReplicaSet.
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .unwrap();
    drive_until(&env, "web", "scaled to one", || async {
        let s = status().await;
        s["replicas"] == 1 && s["availableReplicas"] == 1 && live_pods(&env, "web").await.len() == 1
    })
    .await;
    env.finish().await;
}

/// `kubectl get sts` asks for a Table: the server's printer shows Ready as ready/wanted, then
/// Age; Containers and Images only with `-o wide` (priority 1).
#[tokio::test]
async fn statefulsets_print_ready_as_kubectl_shows_it() {
    let env = env("sts-table").await;
    let api: Api<StatefulSet> = env.api();
    let sts: StatefulSet = serde_json::from_value(json!({"metadata": {"name": "tbl"},
        "spec": {"replicas": 0, "serviceName": "tbl", "selector": {"matchLabels": {"app": "tbl"}},
            "template": template("tbl", json!({}))}}))
    .unwrap();
    api.create(&PostParams::default(), &sts).await.unwrap();
    let req = http::Request::get(format!(
        "/apis/apps/v1/namespaces/{}/statefulsets/tbl",
        env.ns
    ))
    .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
    .body(Vec::new())
    .unwrap();
    let table: Value = env.client.request(req).await.unwrap();
    let columns = table["columnDefinitions"].as_array().unwrap();
    let shown: Vec<&str> = columns
        .iter()
        .filter(|c| c["priority"].as_i64().unwrap_or(0) == 0)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(shown, ["Name", "Ready", "Age"]);
    let wide: BTreeSet<&str> = columns
        .iter()
        .filter(|c| c["priority"] == 1)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(
        wide.contains("Containers") && wide.contains("Images"),
        "{wide:?}"
    );
    let ready = columns.iter().position(|c| c["name"] == "Ready").unwrap();
    assert_eq!(table["rows"][0]["cells"][ready], "0/0");
    env.finish().await;
}
