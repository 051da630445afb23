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

/// `/metrics` counts requests as kube-apiserver's `apiserver_request_total` does: by verb
/// (`POST` for a create, `LIST` for a collection read), group, version, resource, scope and
/// code. On a real server the counters are shared with every other client, so only growth is
/// checked.
#[tokio::test]
async fn metrics_count_requests_by_verb_resource_and_code() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, ListParams, PostParams};
    let env = env("metrics").await;
    let count = |text: &str, verb: &str, scope: &str, code: &str| -> u64 {
        text.lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
            .filter(|l| {
                l.contains("resource=\"configmaps\"")
                    && l.contains("group=\"\"")
                    && l.contains("version=\"v1\"")
                    && l.contains("subresource=\"\"")
                    && l.contains(&format!("verb=\"{verb}\""))
                    && l.contains(&format!("scope=\"{scope}\""))
                    && l.contains(&format!("code=\"{code}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|v| v as u64)
            .sum()
    };
    let before = raw_text(&env, "/metrics").await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("counted".into());
    api.create(&PostParams::default(), &cm).await.unwrap();
    api.list(&ListParams::default()).await.unwrap();
    api.list(&ListParams::default()).await.unwrap();
    let after = raw_text(&env, "/metrics").await.unwrap();
    assert!(
        count(&after, "POST", "resource", "201") + count(&after, "POST", "namespace", "201")
            > count(&before, "POST", "resource", "201")
                + count(&before, "POST", "namespace", "201"),
        "a create is counted: {after}"
    );
    assert!(
        count(&after, "LIST", "namespace", "200") >= count(&before, "LIST", "namespace", "200") + 2,
        "two lists are counted"
    );
}
