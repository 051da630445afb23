//! The embedded server's built-in controllers (scheduler, Endpoints/EndpointSlice, Job, CronJob,
//! pvc-protection, the PodGC rule on delete). These run only against the embedded server: on a real cluster the
//! same objects are handled by the real controllers, with real nodes. Tests play the kubelet by
//! writing `pods/status`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Endpoints, Node, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use steward_apiserver::{ApiServerHandle, ServerConfig, start};

/// A client configuration for `server` with its admin token.
fn admin_config(server: &steward_apiserver::ApiServerHandle) -> kube::Config {
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.auth_info.token = Some(server.admin_token().into());
    config
}

async fn client() -> (Client, ApiServerHandle) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = start(ServerConfig::default()).await.unwrap();
    (Client::try_from(admin_config(&server)).unwrap(), server)
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    // Up to 30 s: the controllers run on timers, and under a loaded CI (2 cores, tests in
    // parallel) 5 s was once too little for the node lifecycle controller.
    for _ in 0..600 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

async fn node(nodes: &Api<Node>, name: &str, labels: Value, taints: Value) {
    let n: Node = serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    )
    .unwrap();
    nodes.create(&PostParams::default(), &n).await.unwrap();
}

fn pod(name: &str, spec_extra: Value) -> Pod {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox:1", "ports": [{"name": "pg", "containerPort": 5432}]}]});
    if let (Value::Object(s), Value::Object(extra)) = (&mut spec, spec_extra) {
        s.extend(extra);
    }
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"app": "db"}}, "spec": spec}),
    )
    .unwrap()
}

#[tokio::test]
async fn scheduler_binds_pods_to_fitting_ready_nodes() {
    let (client, server) = client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    node(&nodes, "plain", json!({"zone": "a"}), json!([])).await;
    node(
        &nodes,
        "tainted",
        json!({"zone": "b"}),
        json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("any", json!({})))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("zone-b", json!({"nodeSelector": {"zone": "b"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}]}))).await.unwrap();
    pods.create(
        &PostParams::default(),
        &pod("nowhere", json!({"nodeSelector": {"zone": "c"}})),
    )
    .await
    .unwrap();
    let node_of = |name: &'static str| {
        let pods = pods.clone();
        async move { pods.get(name).await.unwrap().spec.unwrap().node_name }
    };
    eventually("pods bound", || async {
        node_of("any").await.is_some() && node_of("zone-b").await.is_some()
    })
    .await;
    assert_eq!(node_of("any").await.as_deref(), Some("plain"));
    assert_eq!(node_of("zone-b").await.as_deref(), Some("tainted"));
    eventually("unschedulable condition", || async {
        let p = pods.get("nowhere").await.unwrap();
        p.status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
    })
    .await;
    assert!(node_of("nowhere").await.is_none());
    let bound = pods.get("any").await.unwrap();
    assert!(
        bound
            .status
            .unwrap()
            .conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "True")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn endpoints_follow_service_selectors_and_pod_readiness() {
    let (client, server) = client().await;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = serde_json::from_value(
        json!({"metadata": {"name": "db"}, "spec": {"selector": {"app": "db"},
        "ports": [{"name": "pg", "port": 5432, "targetPort": "pg"}]}}),
    )
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("db-0", json!({"nodeName": "n1"})),
    )
    .await
    .unwrap();
    pods.patch_status(
        "db-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"podIP": "10.1.0.5",
        "conditions": [{"type": "Ready", "status": "False"}]}})),
    )
    .await
    .unwrap();
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    eventually("not-ready address", || async {
        eps.get_opt("db")
            .await
            .unwrap()
            .and_then(|e| e.subsets)
            .is_some_and(|s| {
                s[0].not_ready_addresses
                    .as_ref()
                    .is_some_and(|a| a[0].ip == "10.1.0.5")
            })
    })
    .await;
    pods.patch_status(
        "db-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})),
    )
    .await
    .unwrap();
    eventually("ready address", || async {
        eps.get_opt("db")
            .await
            .unwrap()
            .and_then(|e| e.subsets)
            .is_some_and(|s| {
                s[0].addresses
                    .as_ref()
                    .is_some_and(|a| a[0].ip == "10.1.0.5")
            })
    })
    .await;
    let e = eps.get("db").await.unwrap();
    assert_eq!(e.subsets.unwrap()[0].ports.as_ref().unwrap()[0].port, 5432);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let list = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=db"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    let endpoints = list.items[0].endpoints.as_deref().unwrap_or_default();
    assert_eq!(endpoints[0].addresses, ["10.1.0.5"]);
    assert_eq!(endpoints[0].conditions.as_ref().unwrap().ready, Some(true));
    services
        .delete("db", &DeleteParams::default())
        .await
        .unwrap();
    eventually("endpoints removed", || async {
        eps.get_opt("db").await.unwrap().is_none()
            && slices
                .list(&ListParams::default().labels("kubernetes.io/service-name=db"))
                .await
                .unwrap()
                .items
                .is_empty()
    })
    .await;
    server.shutdown().await;
}

fn job(name: &str, spec: Value) -> Job {
    let mut s = json!({"template": {"spec": {"restartPolicy": "Never", "schedulerName": "none",
        "containers": [{"name": "c", "image": "busybox:1"}]}}});
    if let (Value::Object(a), Value::Object(b)) = (&mut s, spec) {
        a.extend(b);
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": s})).unwrap()
}

async fn job_pods(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await
        .unwrap()
        .items
}

/// Plays the kubelet: moves a Pod to a terminal phase through `pods/status`.
async fn finish(pods: &Api<Pod>, name: &str, phase: &str) {
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": phase}})),
    )
    .await
    .unwrap();
}

fn condition(j: &Job, kind: &str) -> Option<(String, String)> {
    j.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

#[tokio::test]
async fn job_runs_pods_to_completion() {
    let (client, server) = client().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let created = jobs
        .create(
            &PostParams::default(),
            &job("work", json!({"parallelism": 2, "completions": 3})),
        )
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    let labels = created
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    assert_eq!(labels["batch.kubernetes.io/controller-uid"], uid);
    eventually("two pods", || async {
        job_pods(&pods, "work").await.len() == 2
    })
    .await;
    let first = job_pods(&pods, "work").await;
    let p = &first[0];
    assert!(p.metadata.name.as_deref().unwrap().starts_with("work-"));
    assert_eq!(p.metadata.labels.as_ref().unwrap()["job-name"], "work");
    let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Job", uid.as_str())
    );
    assert_eq!(
        (owner.controller, owner.block_owner_deletion),
        (Some(true), Some(true))
    );
    assert_eq!(
        p.metadata.finalizers.as_deref(),
        Some(&["batch.kubernetes.io/job-tracking".to_string()][..])
    );
    let j = jobs.get("work").await.unwrap();
    let st = j.status.clone().unwrap();
    assert_eq!((st.active, st.ready), (Some(2), Some(0)));
    assert!(st.start_time.is_some());

    for p in &first {
        finish(&pods, p.metadata.name.as_deref().unwrap(), "Succeeded").await;
    }
    eventually("third pod", || async {
        job_pods(&pods, "work").await.len() == 3
    })
    .await;
    let third = job_pods(&pods, "work")
        .await
        .into_iter()
        .find(|p| p.status.as_ref().unwrap().phase.as_deref() == Some("Pending"))
        .unwrap();
    finish(&pods, third.metadata.name.as_deref().unwrap(), "Succeeded").await;
    eventually("complete", || async {
        condition(&jobs.get("work").await.unwrap(), "Complete").is_some()
    })
    .await;
    let j = jobs.get("work").await.unwrap();
    let st = j.status.clone().unwrap();
    assert_eq!(st.succeeded, Some(3));
    assert_eq!(st.active, None);
    assert!(st.completion_time.is_some());
    assert_eq!(
        condition(&j, "SuccessCriteriaMet"),
        Some(("True".into(), "CompletionsReached".into()))
    );
    assert_eq!(
        condition(&j, "Complete"),
        Some(("True".into(), "CompletionsReached".into()))
    );
    for p in job_pods(&pods, "work").await {
        assert!(
            p.metadata.finalizers.is_none(),
            "tracking finalizer removed"
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn job_fails_past_its_backoff_limit() {
    let (client, server) = client().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    jobs.create(
        &PostParams::default(),
        &job("flaky", json!({"backoffLimit": 0})),
    )
    .await
    .unwrap();
    eventually("pod", || async {
        job_pods(&pods, "flaky").await.len() == 1
    })
    .await;
    let p = job_pods(&pods, "flaky").await.remove(0);
    finish(&pods, p.metadata.name.as_deref().unwrap(), "Failed").await;
    eventually("failed", || async {
        condition(&jobs.get("flaky").await.unwrap(), "Failed").is_some()
    })
    .await;
    let j = jobs.get("flaky").await.unwrap();
    assert_eq!(j.status.as_ref().unwrap().failed, Some(1));
    assert_eq!(
        condition(&j, "FailureTarget"),
        Some(("True".into(), "BackoffLimitExceeded".into()))
    );
    assert_eq!(
        condition(&j, "Failed"),
        Some(("True".into(), "BackoffLimitExceeded".into()))
    );
    assert!(j.status.unwrap().completion_time.is_none());
    // Deleting with the Job's default policy (Orphan) keeps the Pod, without owner or finalizer.
    jobs.delete("flaky", &DeleteParams::default())
        .await
        .unwrap();
    eventually("job gone", || async {
        jobs.get_opt("flaky").await.unwrap().is_none()
    })
    .await;
    let orphan = pods.get(p.metadata.name.as_deref().unwrap()).await.unwrap();
    assert!(orphan.metadata.owner_references.is_none());
    assert!(orphan.metadata.finalizers.is_none());
    server.shutdown().await;
}

#[tokio::test]
async fn suspended_jobs_run_no_pods_until_resumed() {
    let (client, server) = client().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    jobs.create(
        &PostParams::default(),
        &job("later", json!({"suspend": true})),
    )
    .await
    .unwrap();
    eventually("suspended", || async {
        condition(&jobs.get("later").await.unwrap(), "Suspended")
            == Some(("True".into(), "JobSuspended".into()))
    })
    .await;
    assert!(job_pods(&pods, "later").await.is_empty());
    jobs.patch(
        "later",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": false}})),
    )
    .await
    .unwrap();
    eventually("resumed", || async {
        job_pods(&pods, "later").await.len() == 1
    })
    .await;
    assert_eq!(
        condition(&jobs.get("later").await.unwrap(), "Suspended"),
        Some(("False".into(), "JobResumed".into()))
    );
    server.shutdown().await;
}

#[tokio::test]
async fn cronjob_starts_jobs_on_schedule() {
    let (client, server) = client().await;
    let cjs: Api<CronJob> = Api::namespaced(client.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let cj: CronJob = serde_json::from_value(json!({"metadata": {"name": "tick"}, "spec": {
        "schedule": "@every 1s", "concurrencyPolicy": "Forbid",
        "jobTemplate": {"metadata": {"labels": {"app": "tick"}}, "spec": {"template": {"spec": {
            "restartPolicy": "Never", "schedulerName": "none", "containers": [{"name": "c", "image": "busybox:1"}]}}}}}}))
    .unwrap();
    let created = cjs.create(&PostParams::default(), &cj).await.unwrap();
    assert_eq!(created.spec.successful_jobs_history_limit, Some(3));
    eventually("a job", || async {
        !jobs
            .list(&ListParams::default().labels("app=tick"))
            .await
            .unwrap()
            .items
            .is_empty()
    })
    .await;
    let j = jobs
        .list(&ListParams::default().labels("app=tick"))
        .await
        .unwrap()
        .items
        .remove(0);
    let name = j.metadata.name.clone().unwrap();
    let minutes: i64 = name.strip_prefix("tick-").unwrap().parse().unwrap();
    assert!((minutes * 60 - jiff::Timestamp::now().as_second()).abs() < 120);
    assert!(
        j.metadata
            .annotations
            .unwrap()
            .contains_key("batch.kubernetes.io/cronjob-scheduled-timestamp")
    );
    eventually("active in status", || async {
        let st = cjs.get("tick").await.unwrap().status.unwrap_or_default();
        st.last_schedule_time.is_some()
            && st
                .active
                .unwrap_or_default()
                .iter()
                .any(|r| r.name.as_deref() == Some(name.as_str()))
    })
    .await;
    // Forbid: the active Job blocks the next ones.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        jobs.list(&ListParams::default().labels("app=tick"))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let bad: CronJob = serde_json::from_value(json!({"metadata": {"name": "bad"}, "spec": {
        "schedule": "61 * * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1"}]}}}}}}))
    .unwrap();
    match cjs.create(&PostParams::default(), &bad).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422);
            assert!(
                s.message
                    .contains("spec.schedule: Invalid value: \"61 * * * *\""),
                "{}",
                s.message
            );
        }
        other => panic!("expected 422, got {other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test]
async fn terminating_pods_of_a_deleted_node_are_removed() {
    let (client, server) = client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    node(&nodes, "doomed", json!({}), json!([])).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("on-doomed", json!({"nodeName": "doomed"})),
    )
    .await
    .unwrap();
    pods.delete("on-doomed", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        pods.get("on-doomed")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    nodes
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    eventually("pod removed", || async {
        pods.get_opt("on-doomed").await.unwrap().is_none()
    })
    .await;
    // A Pod bound to a Node that does not exist goes at once.
    pods.create(
        &PostParams::default(),
        &pod("nowhere", json!({"nodeName": "missing"})),
    )
    .await
    .unwrap();
    pods.delete("nowhere", &DeleteParams::default())
        .await
        .unwrap();
    assert!(pods.get_opt("nowhere").await.unwrap().is_none());
    server.shutdown().await;
}

#[tokio::test]
async fn claims_in_use_are_protected_until_no_pod_uses_them() {
    let (client, server) = client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    node(&nodes, "n1", json!({}), json!([])).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let claim = |name: &str| -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
        .unwrap()
    };
    for name in ["data", "idle"] {
        let created = claims
            .create(&PostParams::default(), &claim(name))
            .await
            .unwrap();
        assert_eq!(
            created.metadata.finalizers.unwrap(),
            ["kubernetes.io/pvc-protection"]
        );
    }
    let on_claim = |claim: &str| json!({"nodeName": "n1", "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]});
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("user", on_claim("data")))
        .await
        .unwrap();
    // A Pod that finished does not hold the claim.
    pods.create(&PostParams::default(), &pod("done", on_claim("data")))
        .await
        .unwrap();
    pods.patch_status(
        "done",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
    )
    .await
    .unwrap();
    // An unused claim goes soon after its deletion.
    claims
        .delete("idle", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the unused claim removed", || async {
        claims.get_opt("idle").await.unwrap().is_none()
    })
    .await;
    // A claim in use stays, terminating, while the Pod exists — also while the Pod terminates.
    claims
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    pods.delete("user", &DeleteParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = claims.get("data").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(
        held.metadata.finalizers.unwrap(),
        ["kubernetes.io/pvc-protection"]
    );
    assert!(
        pods.get("user")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some(),
        "the Pod waits for its kubelet"
    );
    // The kubelet's final delete: the Pod is gone, and so is the claim.
    pods.delete("user", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    eventually("the released claim removed", || async {
        claims.get_opt("data").await.unwrap().is_none()
    })
    .await;
    server.shutdown().await;
}

/// Claims are node-local: the first binding records the Node on the claim, and a Pod using it
/// later goes there only — waiting, with the scheduler's volume message, while that Node is
/// cordoned.
#[tokio::test]
async fn pods_follow_their_claims_node() {
    let (client, server) = client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    node(&nodes, "n1", json!({}), json!([])).await;
    node(&nodes, "n2", json!({}), json!([])).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    claims
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "db"}, "spec": {
        "containers": [{"name": "c", "image": "i"}],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    eventually("the Pod is bound", || async {
        pods.get("db")
            .await
            .unwrap()
            .spec
            .and_then(|s| s.node_name)
            .is_some()
    })
    .await;
    let first = pods
        .get("db")
        .await
        .unwrap()
        .spec
        .unwrap()
        .node_name
        .unwrap();
    let claim = claims.get("data").await.unwrap();
    assert_eq!(
        claim.metadata.annotations.unwrap()["volume.kubernetes.io/selected-node"],
        first
    );
    // The Pod is deleted and its Node cordoned: the replacement waits for that Node.
    pods.delete(
        "db",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    nodes
        .patch(
            &first,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    eventually("the old Pod is gone", || async {
        pods.get_opt("db").await.unwrap().is_none()
    })
    .await;
    pods.create(&PostParams::default(), &pod).await.unwrap();
    eventually("the replacement waits for its claim's Node", || async {
        pods.get("db")
            .await
            .unwrap()
            .status
            .and_then(|s| s.conditions)
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "PodScheduled"
                        && c.reason.as_deref() == Some("Unschedulable")
                        && c.message
                            .as_deref()
                            .is_some_and(|m| m.contains("volume node affinity conflict"))
                })
            })
    })
    .await;
    nodes
        .patch(
            &first,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": false}})),
        )
        .await
        .unwrap();
    eventually("the replacement is bound to the claim's Node", || async {
        pods.get("db")
            .await
            .unwrap()
            .spec
            .and_then(|s| s.node_name)
            .as_deref()
            == Some(first.as_str())
    })
    .await;
    server.shutdown().await;
}

/// A Node whose kubelet goes silent: conditions Unknown after the grace period, unreachable
/// taints, its Pods not ready, evicted after their toleration (and left Terminating: no kubelet
/// confirms); a fresh heartbeat lifts the taints.
/// A Node registered without status (no `Ready` condition yet) is tainted unreachable, as
/// upstream's node lifecycle controller does within the startup grace, but the Pods bound to it
/// keep their readiness: upstream marks Pods not ready only once a `Ready` condition exists
/// and is not `True`.
#[tokio::test]
async fn a_node_that_never_posted_status_is_tainted_but_its_pods_stay_ready() {
    let (client, _server) = client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let bound: Pod = serde_json::from_value(json!({"metadata": {"name": "early"}, "spec": {
        "nodeName": "fresh", "containers": [{"name": "c", "image": "i"}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &bound).await.unwrap();
    pods.patch_status(
        "early",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})),
    )
    .await
    .unwrap();
    let fresh: Node = serde_json::from_value(json!({"metadata": {"name": "fresh"}})).unwrap();
    nodes.create(&PostParams::default(), &fresh).await.unwrap();
    // The taint and the Pods' readiness are decided in the same controller pass.
    eventually("the Node without status is tainted unreachable", || async {
        let n = nodes.get("fresh").await.unwrap();
        n.spec.and_then(|s| s.taints).is_some_and(|ts| {
            ts.iter()
                .any(|t| t.key == "node.kubernetes.io/unreachable" && t.effect == "NoExecute")
        })
    })
    .await;
    let early = pods.get("early").await.unwrap();
    let ready = early
        .status
        .and_then(|s| s.conditions)
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    assert!(
        ready,
        "a Pod on a Node that never posted status stays ready"
    );
}

#[tokio::test]
async fn a_silent_node_is_marked_unknown_tainted_and_its_pods_evicted() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Two seconds: heartbeats carry whole seconds, so a kubelet posting every 200 ms is never
    // more than about 1.2 s behind.
    let server = start(ServerConfig {
        node_monitor_grace: Duration::from_secs(2),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = Client::try_from(admin_config(&server)).unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let beat = |status: &str| {
        json!({"status": {"conditions": [{"type": "Ready", "status": status, "reason": "KubeletReady",
            "lastHeartbeatTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()}]}})
    };
    node(&nodes, "lost", json!({}), json!([])).await;
    nodes
        .patch_status("lost", &PatchParams::default(), &Patch::Merge(beat("True")))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, seconds) in [("patient", 300), ("hasty", 0)] {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
            "nodeName": "lost", "containers": [{"name": "c", "image": "i"}],
            "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": seconds}]}}))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
            "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})),
        )
        .await
        .unwrap();
    }
    // Every new Pod tolerates lost Nodes for 300 s (DefaultTolerationSeconds).
    let defaulted = pods
        .get("patient")
        .await
        .unwrap()
        .spec
        .unwrap()
        .tolerations
        .unwrap();
    assert!(
        defaulted
            .iter()
            .any(|t| t.key.as_deref() == Some("node.kubernetes.io/not-ready")
                && t.toleration_seconds == Some(300))
    );
    eventually("the Node is Unknown and tainted unreachable", || async {
        let n = nodes.get("lost").await.unwrap();
        let unknown = n.status.and_then(|s| s.conditions).is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "Ready"
                    && c.status == "Unknown"
                    && c.reason.as_deref() == Some("NodeStatusUnknown")
            })
        });
        let tainted = n.spec.and_then(|s| s.taints).is_some_and(|ts| {
            ts.iter()
                .filter(|t| t.key == "node.kubernetes.io/unreachable")
                .count()
                == 2
        });
        unknown && tainted
    })
    .await;
    eventually(
        "its Pods are not ready, and the hasty one is evicted",
        || async {
            let patient = pods.get("patient").await.unwrap();
            let not_ready = patient
                .status
                .and_then(|s| s.conditions)
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "False"));
            let hasty = pods.get("hasty").await.unwrap();
            not_ready
                && hasty.metadata.deletion_timestamp.is_some()
                && patient.metadata.deletion_timestamp.is_none()
        },
    )
    .await;
    // The kubelet comes back and keeps posting, as a kubelet does: the taints go (the evicted
    // Pod stays Terminating until its kubelet confirms; here nobody does).
    let kubelet = {
        let nodes = nodes.clone();
        tokio::spawn(async move {
            loop {
                let _ = nodes
                    .patch_status("lost", &PatchParams::default(), &Patch::Merge(beat("True")))
                    .await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    eventually("the taints are lifted", || async {
        let n = nodes.get("lost").await.unwrap();
        n.spec.and_then(|s| s.taints).unwrap_or_default().is_empty()
    })
    .await;
    kubelet.abort();
    server.shutdown().await;
}
