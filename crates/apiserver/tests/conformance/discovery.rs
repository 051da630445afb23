//! Discovery documents, version and health endpoints.

use kube::discovery::{Discovery, Scope};
use serde_json::json;

use crate::support::{api_err, env, raw, raw_text};

#[tokio::test]
async fn discovery_lists_core_and_group_resources() {
    let env = env("discovery").await;
    let discovery = Discovery::new(env.client.clone()).run().await.unwrap();
    let mut kinds = Vec::new();
    for g in discovery.groups() {
        for (ar, caps) in g.recommended_resources() {
            kinds.push((
                ar.group.clone(),
                ar.kind.clone(),
                caps.scope == Scope::Namespaced,
            ));
        }
    }
    for (group, kind, namespaced) in [
        ("", "Pod", true),
        ("", "Namespace", false),
        ("", "ConfigMap", true),
        ("", "Node", false),
        ("coordination.k8s.io", "Lease", true),
        ("events.k8s.io", "Event", true),
        ("apiextensions.k8s.io", "CustomResourceDefinition", false),
        ("batch", "Job", true),
        ("policy", "PodDisruptionBudget", true),
        ("discovery.k8s.io", "EndpointSlice", true),
        ("rbac.authorization.k8s.io", "ClusterRole", false),
    ] {
        assert!(
            kinds.contains(&(group.to_string(), kind.to_string(), namespaced)),
            "{group}/{kind} missing"
        );
    }
    let core = raw(&env, "GET", "/api/v1", "application/json", json!(null))
        .await
        .unwrap();
    let names: Vec<&str> = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for n in [
        "pods",
        "pods/status",
        "pods/log",
        "pods/exec",
        "namespaces/status",
    ] {
        assert!(names.contains(&n), "{n} missing from /api/v1");
    }
    let version = raw(&env, "GET", "/version", "application/json", json!(null))
        .await
        .unwrap();
    assert_eq!(version["major"], "1");
    assert_eq!(raw_text(&env, "/healthz").await.unwrap(), "ok");
    assert_eq!(raw_text(&env, "/readyz").await.unwrap(), "ok");
    let missing = api_err(
        raw(
            &env,
            "GET",
            "/apis/nothing.example.com/v1/things",
            "application/json",
            json!(null),
        )
        .await,
    );
    assert_eq!(missing.code, 404);
    env.finish().await;
}
