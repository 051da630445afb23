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
    let pods: Api<Pod> = Api::all(client.clone());
    let client = client.clone();
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
                    let ns = p.metadata.namespace.as_deref().unwrap_or("default");
                    let _ = Api::<Pod>::namespaced(client.clone(), ns).patch_status(p.metadata.name.as_deref().unwrap_or_default(), &PatchParams::default(),
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
            .and_then(|s| s.disruptions_allowed)
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
        Some(1)
    );
    kubelet.abort();
    plane.server.shutdown().await;
}

async fn run_owned(plane: &support::Plane, args: &[&str]) {
    let out = plane.kubectl(args).await;
    assert!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        text(&out)
    );
}

/// The everyday generators as people type them. kubectl 1.37 sends their bodies (and the
/// scale, delete and review requests) as protobuf; each command's effect is read back as JSON.
#[tokio::test]
async fn generators_create_what_they_say() {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
    let plane = plane(false).await;
    let kubelet = kubelet(&plane.client, false);
    let run = |args: &'static [&'static str]| {
        let plane = &plane;
        async move {
            let out = plane.kubectl(args).await;
            assert!(
                out.status.success(),
                "kubectl {}: {}",
                args.join(" "),
                text(&out)
            );
            String::from_utf8_lossy(&out.stdout).to_string()
        }
    };
    run(&["create", "namespace", "gen"]).await;
    Api::<Namespace>::all(plane.client.clone())
        .get("gen")
        .await
        .unwrap();
    let c = plane.client.clone();

    run(&[
        "create",
        "configmap",
        "cfg",
        "-n",
        "gen",
        "--from-literal=a=1",
        "--from-literal=b=",
    ])
    .await;
    let cm = Api::<ConfigMap>::namespaced(c.clone(), "gen")
        .get("cfg")
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(cm.data.unwrap()).unwrap(),
        json!({"a": "1", "b": ""})
    );

    run(&[
        "create",
        "secret",
        "generic",
        "pw",
        "-n",
        "gen",
        "--from-literal=password=hunter2",
    ])
    .await;
    let secret = Api::<Secret>::namespaced(c.clone(), "gen")
        .get("pw")
        .await
        .unwrap();
    assert_eq!(secret.data.unwrap()["password"].0, b"hunter2");
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));

    run(&[
        "create",
        "deployment",
        "web",
        "-n",
        "gen",
        "--image=registry.example/web:1",
        "--replicas=2",
        "--port=8080",
    ])
    .await;
    let deployments = Api::<Deployment>::namespaced(c.clone(), "gen");
    let spec = deployments.get("web").await.unwrap().spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let container = &spec.template.spec.unwrap().containers[0];
    assert_eq!(container.image.as_deref(), Some("registry.example/web:1"));
    assert_eq!(container.ports.as_ref().unwrap()[0].container_port, 8080);

    run(&[
        "expose",
        "deployment",
        "web",
        "-n",
        "gen",
        "--port=80",
        "--target-port=8080",
    ])
    .await;
    let services = Api::<Service>::namespaced(c.clone(), "gen");
    let spec = services.get("web").await.unwrap().spec.unwrap();
    assert_eq!(spec.selector.unwrap()["app"], "web");
    let port = &spec.ports.unwrap()[0];
    assert_eq!(port.port, 80);
    assert_eq!(
        serde_json::to_value(&port.target_port).unwrap(),
        json!(8080)
    );
    assert!(spec.cluster_ip.is_some_and(|ip| !ip.is_empty()));

    run(&[
        "create",
        "service",
        "clusterip",
        "db",
        "-n",
        "gen",
        "--tcp=5432:5432",
    ])
    .await;
    let spec = services.get("db").await.unwrap().spec.unwrap();
    assert_eq!(spec.ports.unwrap()[0].port, 5432);

    run(&[
        "run",
        "one",
        "-n",
        "gen",
        "--image=registry.example/one:1",
        "--restart=Never",
        "--labels=x=y",
    ])
    .await;
    let pod = Api::<Pod>::namespaced(c.clone(), "gen")
        .get("one")
        .await
        .unwrap();
    assert_eq!(pod.metadata.labels.unwrap()["x"], "y");
    assert_eq!(pod.spec.unwrap().restart_policy.as_deref(), Some("Never"));

    run(&[
        "create",
        "job",
        "once",
        "-n",
        "gen",
        "--image=registry.example/job:1",
    ])
    .await;
    let job = Api::<Job>::namespaced(c.clone(), "gen")
        .get("once")
        .await
        .unwrap();
    assert_eq!(
        job.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .as_deref(),
        Some("registry.example/job:1")
    );

    run(&["scale", "deployment", "web", "-n", "gen", "--replicas=3"]).await;
    assert_eq!(
        deployments.get("web").await.unwrap().spec.unwrap().replicas,
        Some(3)
    );
    run(&[
        "rollout",
        "status",
        "deployment/web",
        "-n",
        "gen",
        "--timeout=30s",
    ])
    .await;
    run(&[
        "wait",
        "--for=condition=Available",
        "deployment/web",
        "-n",
        "gen",
        "--timeout=30s",
    ])
    .await;

    // RBAC, accounts, tokens, budgets and schedules from their generators.
    run(&["create", "serviceaccount", "robot", "-n", "gen"]).await;
    run(&[
        "create",
        "role",
        "reader",
        "-n",
        "gen",
        "--verb=get,list",
        "--resource=pods",
    ])
    .await;
    run(&[
        "create",
        "rolebinding",
        "robot-reads",
        "-n",
        "gen",
        "--role=reader",
        "--serviceaccount=gen:robot",
    ])
    .await;
    let out = run(&[
        "auth",
        "can-i",
        "list",
        "pods",
        "-n",
        "gen",
        "--as=system:serviceaccount:gen:robot",
    ])
    .await;
    assert_eq!(out.trim(), "yes");
    // The impersonated account's own rights, not the caller's: it may not delete.
    let out = plane
        .kubectl(&[
            "auth",
            "can-i",
            "delete",
            "pods",
            "-n",
            "gen",
            "--as=system:serviceaccount:gen:robot",
        ])
        .await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "no",
        "{}",
        text(&out)
    );
    let out = run(&["create", "token", "robot", "-n", "gen", "--duration=10m"]).await;
    assert!(out.trim().len() > 20, "a token: {out}");
    run(&[
        "create",
        "poddisruptionbudget",
        "web",
        "-n",
        "gen",
        "--selector=app=web",
        "--min-available=1",
    ])
    .await;
    let pdb = Api::<PodDisruptionBudget>::namespaced(c.clone(), "gen")
        .get("web")
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(pdb.spec.unwrap().min_available).unwrap(),
        json!(1)
    );
    run(&[
        "create",
        "cronjob",
        "nightly",
        "-n",
        "gen",
        "--image=registry.example/job:1",
        "--schedule=0 3 * * *",
    ])
    .await;
    let cron = Api::<k8s_openapi::api::batch::v1::CronJob>::namespaced(c.clone(), "gen")
        .get("nightly")
        .await
        .unwrap();
    assert_eq!(cron.spec.schedule, "0 3 * * *");

    let out = run(&["auth", "can-i", "create", "pods", "-n", "gen"]).await;
    assert_eq!(out.trim(), "yes");

    // edit (the editor rewrites the file kubectl hands it), server-side apply and diff.
    let out = plane
        .kubectl_env(
            &["edit", "configmap", "cfg", "-n", "gen"],
            &[("KUBE_EDITOR", r#"sed -i -e 's/a: "1"/a: "edited"/'"#)],
        )
        .await;
    assert!(out.status.success(), "kubectl edit: {}", text(&out));
    let cm = Api::<ConfigMap>::namespaced(c.clone(), "gen")
        .get("cfg")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["a"], "edited");
    let manifest = plane.file(
        "ssa.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: gen\ndata:\n  k: v1\n",
    );
    run_owned(&plane, &["apply", "--server-side", "-f", &manifest]).await;
    let cm = Api::<ConfigMap>::namespaced(c.clone(), "gen")
        .get("ssa")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["k"], "v1");
    assert!(
        cm.metadata
            .managed_fields
            .unwrap_or_default()
            .iter()
            .any(|m| m.manager.as_deref() == Some("kubectl")
                && m.operation.as_deref() == Some("Apply")),
        "server-side apply records kubectl as an Apply manager"
    );
    // diff: exit 0 when nothing would change, 1 with the change shown when something would.
    let out = plane
        .kubectl(&["diff", "--server-side", "-f", &manifest])
        .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let changed = plane.file(
        "ssa2.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: gen\ndata:\n  k: v2\n",
    );
    let out = plane
        .kubectl(&["diff", "--server-side", "-f", &changed])
        .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("+  k: v2"), "{}", text(&out));
    let cm = Api::<ConfigMap>::namespaced(c.clone(), "gen")
        .get("ssa")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["k"], "v1", "diff changes nothing");

    // The metrics API is served; no kubelet runs here, so it has no figures yet and kubectl
    // says so (for a Pod it knows of) or finds nothing.
    let out = plane.kubectl(&["top", "pods", "-n", "gen"]).await;
    let said = text(&out);
    assert!(!said.contains("Metrics API not available"), "{said}");
    assert!(
        said.contains("error: metrics not available yet") || said.contains("No resources found"),
        "{said}"
    );

    run(&["delete", "configmap", "cfg", "-n", "gen"]).await;
    assert!(
        Api::<ConfigMap>::namespaced(c.clone(), "gen")
            .get_opt("cfg")
            .await
            .unwrap()
            .is_none()
    );
    kubelet.abort();
    plane.server.shutdown().await;
}
