//! The embedded server's built-in controllers (scheduler, Endpoints/EndpointSlice). These run
//! only against the embedded server: on a real cluster the same objects are handled by the real
//! controllers, with real nodes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Config};
use serde_json::{Value, json};
use steward_apiserver::{ApiServerHandle, ServerConfig, start};

async fn client() -> (Client, ApiServerHandle) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = start(ServerConfig::default()).await.unwrap();
    (
        Client::try_from(Config::new(server.url().parse().unwrap())).unwrap(),
        server,
    )
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..100 {
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
    let s = &list.items[0];
    assert_eq!(s.endpoints[0].addresses, ["10.1.0.5"]);
    assert_eq!(
        s.endpoints[0].conditions.as_ref().unwrap().ready,
        Some(true)
    );
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
