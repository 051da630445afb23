//! The real kubectl against the embedded server's workload controllers: `rollout status` on a
//! Deployment and a StatefulSet, and `drain` (cordon + evictions) under a PodDisruptionBudget. kubectl is `$KUBECTL`, else the CI venv's
//! (`$HOME/.cache/steward-ci/kubectl-venv/bin/kubectl`). No kubelet runs here, so a background
//! task plays it, marking every Pod Running and Ready.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Output;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

#[path = "support/kubectl.rs"]
mod support;

use support::plane;

/// Plays the kubelet until aborted: every Pod that is not Ready (and, with `bound_only`,
/// bound to a Node) becomes Running and Ready.
fn kubelet(client: &Client, bound_only: bool) -> tokio::task::JoinHandle<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    tokio::spawn(async move {
        loop {
            for p in pods
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
            {
                let ready = p
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
                if !ready && p.metadata.deletion_timestamp.is_none() && (bound || !bound_only) {
                    let _ = pods.patch_status(p.metadata.name.as_deref().unwrap_or_default(), &PatchParams::default(),
                            &Patch::Merge(json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}))).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn template(app: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}}, "spec": {"terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
}

#[tokio::test]
async fn rollout_status_completes_for_deployments_and_statefulsets() {
    let plane = plane(false).await;
    let kubelet = kubelet(&plane.client, false);
    let deployments: Api<Deployment> = Api::namespaced(plane.client.clone(), "default");
    let d: Deployment =
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"replicas": 3,
        "selector": {"matchLabels": {"app": "web"}}, "template": template("web")}}))
        .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let out = plane
        .kubectl(&["rollout", "status", "deployment/web", "--timeout=30s"])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("deployment \"web\" successfully rolled out"),
        "{}",
        text(&out)
    );
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {"v": "2"}}}}})),
        )
        .await
        .unwrap();
    let out = plane
        .kubectl(&["rollout", "status", "deployment/web", "--timeout=30s"])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    let out = plane
        .kubectl(&["rollout", "history", "deployment/web"])
        .await;
    assert!(text(&out).contains('2'), "{}", text(&out));

    let sets: Api<StatefulSet> = Api::namespaced(plane.client.clone(), "default");
    let s: StatefulSet = serde_json::from_value(json!({"metadata": {"name": "db"}, "spec": {"replicas": 3,
        "serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": template("db")}})).unwrap();
    sets.create(&PostParams::default(), &s).await.unwrap();
    let out = plane
        .kubectl(&["rollout", "status", "statefulset/db", "--timeout=30s"])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("partitioned roll out complete")
            || text(&out).contains("rolling update complete"),
        "{}",
        text(&out)
    );
    kubelet.abort();
    plane.server.shutdown().await;
}

#[tokio::test]
async fn drain_evicts_what_the_budget_allows_and_reports_the_refusal() {
    let plane = plane(false).await;
    let kubelet = kubelet(&plane.client, true);
    let nodes: Api<Node> = Api::all(plane.client.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let sets: Api<ReplicaSet> = Api::namespaced(plane.client.clone(), "default");
    let rs: ReplicaSet =
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"replicas": 3,
        "selector": {"matchLabels": {"app": "web"}}, "template": template("web")}}))
        .unwrap();
    sets.create(&PostParams::default(), &rs).await.unwrap();
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(plane.client.clone(), "default");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}))
    .unwrap();
    budgets.create(&PostParams::default(), &pdb).await.unwrap();
    let allowed = || async {
        budgets
            .get("web")
            .await
            .unwrap()
            .status
            .map(|s| s.disruptions_allowed)
            .unwrap_or(0)
    };
    for _ in 0..100 {
        if allowed().await == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(allowed().await, 1);
    let pods: Api<Pod> = Api::namespaced(plane.client.clone(), "default");
    let before: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(before.len(), 3);

    let out = plane
        .kubectl(&[
            "drain",
            "n1",
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=8s",
        ])
        .await;
    let log = text(&out);
    assert!(!out.status.success(), "{log}");
    assert!(log.contains("node/n1 cordoned"), "{log}");
    assert_eq!(log.matches(" evicted").count(), 1, "{log}");
    assert!(
        log.contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "{log}"
    );
    let node = nodes.get("n1").await.unwrap();
    assert_eq!(node.spec.unwrap().unschedulable, Some(true));
    let after: Vec<Pod> = pods.list(&ListParams::default()).await.unwrap().items;
    let kept: Vec<&String> = before
        .iter()
        .filter(|n| after.iter().any(|p| p.metadata.name.as_ref() == Some(*n)))
        .collect();
    assert_eq!(kept.len(), 2, "{log}");
    // The replacement cannot be scheduled on the cordoned Node, so the budget stays spent.
    let replacement = after
        .iter()
        .find(|p| !before.contains(p.metadata.name.as_ref().unwrap()))
        .unwrap();
    assert!(replacement.spec.as_ref().unwrap().node_name.is_none());
    assert_eq!(allowed().await, 0);
    kubelet.abort();
    plane.server.shutdown().await;
}

/// The global resourceVersion, as a list reports it.
async fn global_rv(client: &Client) -> String {
    let pods: Api<Pod> = Api::all(client.clone());
    pods.list(&ListParams::default().limit(1))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap_or_default()
}

#[tokio::test]
async fn converged_workloads_cause_no_writes() {
    let plane = plane(false).await;
    let kubelet = kubelet(&plane.client, false);
    let deployments: Api<Deployment> = Api::namespaced(plane.client.clone(), "default");
    let d: Deployment =
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"replicas": 2,
        "selector": {"matchLabels": {"app": "web"}}, "template": template("web")}}))
        .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(plane.client.clone(), "default");
    let s: StatefulSet = serde_json::from_value(json!({"metadata": {"name": "db"}, "spec": {"replicas": 2,
        "serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": template("db"),
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}})).unwrap();
    sets.create(&PostParams::default(), &s).await.unwrap();
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(plane.client.clone(), "default");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({"metadata": {"name": "db"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "db"}}}}))
    .unwrap();
    budgets.create(&PostParams::default(), &pdb).await.unwrap();
    for what in ["deployment/web", "statefulset/db"] {
        let out = plane
            .kubectl(&["rollout", "status", what, "--timeout=30s"])
            .await;
        assert!(out.status.success(), "{}", text(&out));
    }
    let mut last = global_rv(&plane.client).await;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = global_rv(&plane.client).await;
        if now == last {
            break;
        }
        last = now;
    }
    // Idle passes run every five seconds: wait past one.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        global_rv(&plane.client).await,
        last,
        "a converged pass wrote something"
    );
    assert_eq!(
        budgets
            .get("db")
            .await
            .unwrap()
            .status
            .unwrap()
            .disruptions_allowed,
        1
    );
    kubelet.abort();
    plane.server.shutdown().await;
}
