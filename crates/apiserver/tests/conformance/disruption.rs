//! The disruption controller (PodDisruptionBudget status) and the eviction subresource. Pods are
//! marked Ready by hand on the embedded server (no kubelet); a real cluster's kubelet does it.

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::{Env, dynobj, env, eventually, widget_versions};
use crate::workloads::{live_pods, mark_all_ready, template};

async fn replica_set(env: &Env, app: &str, replicas: i64) {
    let api: Api<ReplicaSet> = env.api();
    let rs: ReplicaSet = serde_json::from_value(json!({"metadata": {"name": app},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}}, "template": template(app, json!({}))}}))
    .unwrap();
    api.create(&PostParams::default(), &rs).await.unwrap();
    eventually("Pods created", || async {
        live_pods(env, app).await.len() as i64 == replicas
    })
    .await;
    mark_all_ready(env, app).await;
}

async fn budget(env: &Env, name: &str, app: &str, spec: Value) {
    let api: Api<PodDisruptionBudget> = env.api();
    let mut spec = spec;
    spec["selector"] = json!({"matchLabels": {"app": app}});
    let pdb: PodDisruptionBudget =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    api.create(&PostParams::default(), &pdb).await.unwrap();
}

async fn pdb_status(env: &Env, name: &str) -> Value {
    let api: Api<PodDisruptionBudget> = env.api();
    serde_json::to_value(api.get(name).await.unwrap().status).unwrap_or(Value::Null)
}

fn condition(st: &Value) -> (String, String, String) {
    let c = st["conditions"]
        .as_array()
        .and_then(|cs| {
            cs.iter()
                .find(|c| c["type"] == "DisruptionAllowed")
                .cloned()
        })
        .unwrap_or(Value::Null);
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (s("status"), s("reason"), s("message"))
}

/// (expectedPods, desiredHealthy, currentHealthy, disruptionsAllowed)
fn counts(st: &Value) -> [i64; 4] {
    [
        "expectedPods",
        "desiredHealthy",
        "currentHealthy",
        "disruptionsAllowed",
    ]
    .map(|k| st[k].as_i64().unwrap_or(-1))
}

#[tokio::test]
async fn budget_status_follows_ready_pods_and_the_controller_scale() {
    let env = env("pdbstatus").await;
    replica_set(&env, "web", 3).await;
    budget(&env, "min", "web", json!({"minAvailable": 2})).await;
    eventually("minAvailable 2 of 3 ready", || async {
        let st = pdb_status(&env, "min").await;
        counts(&st) == [3, 2, 3, 1]
            && st["observedGeneration"] == 1
            && condition(&st).1 == "SufficientPods"
    })
    .await;
    assert_eq!(
        condition(&pdb_status(&env, "min").await),
        ("True".into(), "SufficientPods".into(), String::new())
    );
    // maxUnavailable counts the ReplicaSet's scale, not the Pods that exist.
    let api: Api<PodDisruptionBudget> = env.api();
    api.patch(
        "min",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": null, "maxUnavailable": "34%"}})),
    )
    .await
    .unwrap();
    eventually("maxUnavailable 34% of 3", || async {
        let st = pdb_status(&env, "min").await;
        counts(&st) == [3, 1, 3, 2] && st["observedGeneration"] == 2
    })
    .await;
    let sets: Api<ReplicaSet> = env.api();
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 4}})),
    )
    .await
    .unwrap();
    if !env.real {
        eventually(
            "scale 4, two may be unavailable, the new Pod is not Ready",
            || async { counts(&pdb_status(&env, "min").await) == [4, 2, 3, 1] },
        )
        .await;
    }
    env.finish().await;
}

#[tokio::test]
async fn budgets_over_custom_resources_need_a_scale_subresource() {
    let mut env = env("pdbscale").await;
    let plain = env.crd("Plain", widget_versions(true, false)).await;
    let scaled = env.crd("Scaled", widget_versions(true, true)).await;
    for (ar, app) in [(&plain, "plain"), (&scaled, "scaled")] {
        let owner = env
            .dynamic(ar)
            .create(
                &PostParams::default(),
                &dynobj(ar, "w", json!({"replicas": 2})),
            )
            .await
            .unwrap();
        for i in 0..2 {
            let mut pod = template(app, json!({}));
            pod["metadata"]["name"] = json!(format!("{app}-{i}"));
            pod["metadata"]["ownerReferences"] = json!([{"apiVersion": ar.api_version, "kind": ar.kind, "name": "w",
                "uid": owner.metadata.uid, "controller": true}]);
            env.pod(&serde_json::from_value::<Pod>(pod).unwrap()).await;
        }
        mark_all_ready(&env, app).await;
    }
    budget(&env, "max", "plain", json!({"maxUnavailable": 1})).await;
    budget(&env, "pct", "plain", json!({"minAvailable": "50%"})).await;
    budget(&env, "int", "plain", json!({"minAvailable": 1})).await;
    budget(&env, "scaled", "scaled", json!({"maxUnavailable": 1})).await;
    let message = format!(
        "{}.conformance.steward.dev does not implement the scale subresource",
        plain.plural
    );
    for name in ["max", "pct"] {
        settled(&env, name, "sync failed", |st| {
            condition(st)
                == (
                    "False".to_string(),
                    "SyncFailed".to_string(),
                    message.clone(),
                )
                && st["disruptionsAllowed"] == 0
        })
        .await;
    }
    settled(
        &env,
        "int",
        "an integer minAvailable needs no scale",
        |st| counts(st) == [2, 1, 2, 1],
    )
    .await;
    settled(
        &env,
        "scaled",
        "the scale subresource gives the expected count",
        |st| counts(st) == [2, 1, 2, 1],
    )
    .await;
    env.finish().await;
}

/// Waits (up to 90 s) until the status of budget `name` satisfies `check`. A real
/// kube-controller-manager resolves a new CRD's kind through a RESTMapper it resets only every
/// 30 s, and its disruption controller does not retry a sync that failed with `no matches for
/// kind` (`failSafe` writes the status; the budget then waits for its next event). While the
/// status says so, the budget is touched (an annotation) every 5 s so that it is synced again.
async fn settled(env: &Env, name: &str, what: &str, check: impl Fn(&Value) -> bool) {
    let api: Api<PodDisruptionBudget> = env.api();
    let started = std::time::Instant::now();
    let mut touched = started;
    let mut touches = 0;
    loop {
        let st = pdb_status(env, name).await;
        if check(&st) {
            return;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(90),
            "timed out waiting for: {what}: {st}"
        );
        if condition(&st).2.starts_with("no matches for kind")
            && touched.elapsed() >= std::time::Duration::from_secs(5)
        {
            touches += 1;
            let touch = json!({"metadata": {"annotations": {"conformance.steward.dev/touch": touches.to_string()}}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(touch))
                .await
                .unwrap();
            touched = std::time::Instant::now();
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A client that does not retry 429 answers (kube-rs retries them by default).
async fn no_retry_client(env: &Env) -> kube::Client {
    let mut config = env.config.clone();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

async fn evict(env: &Env, pod: &str) -> Result<Value, kube::Error> {
    let path = format!("/api/v1/namespaces/{}/pods/{pod}/eviction", env.ns);
    let body = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": env.ns},
        "deleteOptions": {"gracePeriodSeconds": 0}});
    let req = http::Request::post(path)
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    no_retry_client(env).await.request::<Value>(req).await
}

#[tokio::test]
async fn eviction_spends_the_budget_and_refuses_past_it() {
    let env = env("eviction").await;
    replica_set(&env, "web", 3).await;
    budget(&env, "web", "web", json!({"minAvailable": 2})).await;
    eventually("one disruption allowed", || async {
        pdb_status(&env, "web").await["disruptionsAllowed"] == 1
    })
    .await;
    let pods = live_pods(&env, "web").await;
    let names: Vec<String> = pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let ok = evict(&env, &names[0]).await.unwrap();
    assert_eq!(ok["status"], "Success");
    let podapi: Api<Pod> = env.api();
    eventually("evicted Pod gone", || async {
        podapi
            .get_opt(&names[0])
            .await
            .unwrap()
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
    })
    .await;
    eventually("budget spent", || async {
        pdb_status(&env, "web").await["disruptionsAllowed"] == 0
    })
    .await;
    // Keep it spent even once a replacement turns Ready (a real cluster's kubelet is quick).
    let pdbs: Api<PodDisruptionBudget> = env.api();
    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": 3}})),
    )
    .await
    .unwrap();
    eventually("new generation observed", || async {
        let st = pdb_status(&env, "web").await;
        st["observedGeneration"] == 2 && st["disruptionsAllowed"] == 0
    })
    .await;
    let err = crate::support::api_err(evict(&env, &names[1]).await);
    assert_eq!((err.code, err.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(
        err.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    let cause = &err.details.unwrap().causes[0];
    assert_eq!(cause.reason, "DisruptionBudget");
    assert!(
        cause
            .message
            .starts_with("The disruption budget web needs 3 healthy pods and has"),
        "{}",
        cause.message
    );
    assert!(
        podapi
            .get(&names[1])
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );
    if !env.real {
        // The replacement is Pending: evicting it does not need the budget.
        eventually("replacement", || async {
            live_pods(&env, "web").await.len() == 3
        })
        .await;
        let fresh = live_pods(&env, "web")
            .await
            .into_iter()
            .find(|p| !names.contains(p.metadata.name.as_ref().unwrap()))
            .unwrap();
        evict(&env, fresh.metadata.name.as_deref().unwrap())
            .await
            .unwrap();
    }
    // Two budgets over one Pod: the eviction subresource refuses with a bare 500 Status (no
    // reason: upstream builds the Status by hand rather than as an InternalError).
    budget(&env, "again", "web", json!({"maxUnavailable": 1})).await;
    let err = crate::support::api_err(evict(&env, &names[1]).await);
    assert_eq!((err.code, err.reason.as_str()), (500, ""));
    assert_eq!(
        err.message,
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );
    // A missing Pod is 404.
    assert_eq!(crate::support::api_err(evict(&env, "nope").await).code, 404);
    env.finish().await;
}
