//! Label and field selectors on lists.

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use crate::support::{api_err, cm, env};

fn names<K: kube::Resource>(items: &[K]) -> Vec<String> {
    let mut v: Vec<String> = items.iter().filter_map(|o| o.meta().name.clone()).collect();
    v.sort();
    v
}

#[tokio::test]
async fn label_selectors_on_lists() {
    let env = env("labels").await;
    let api: Api<ConfigMap> = env.api();
    for (name, labels) in [
        ("a", json!({"app": "db", "tier": "1"})),
        ("b", json!({"app": "web"})),
        ("c", json!({})),
    ] {
        let mut c = cm(name, json!({}));
        c.metadata.labels = serde_json::from_value(labels).unwrap();
        api.create(&PostParams::default(), &c).await.unwrap();
    }
    let q = |s: &'static str| {
        let api = api.clone();
        async move {
            names(
                &api.list(&ListParams::default().labels(s))
                    .await
                    .unwrap()
                    .items,
            )
        }
    };
    assert_eq!(q("app=db").await, ["a"]);
    assert_eq!(q("app==web").await, ["b"]);
    assert_eq!(q("app!=db,app").await, ["b"]);
    assert_eq!(q("app in (db,web)").await, ["a", "b"]);
    assert_eq!(q("app notin (db),app").await, ["b"]);
    assert_eq!(
        q("!app")
            .await
            .into_iter()
            .filter(|n| n.len() == 1)
            .collect::<Vec<_>>(),
        ["c"]
    );
    assert_eq!(q("tier").await, ["a"]);
    let err = api_err(api.list(&ListParams::default().labels("app in db")).await);
    assert_eq!(err.code, 400);
    env.finish().await;
}

#[tokio::test]
async fn field_selectors_on_lists() {
    let env = env("fields").await;
    let api: Api<Pod> = env.api();
    for (name, node) in [("p1", Some("n1")), ("p2", None)] {
        let mut spec = json!({"containers": [{"name": "c", "image": "busybox:1"}]});
        match node {
            Some(n) => spec["nodeName"] = json!(n),
            // No Node carries this label, so a scheduler (a real cluster may have a
            // schedulable Node) leaves the Pod unbound and `spec.nodeName` empty.
            None => spec["nodeSelector"] = json!({"conformance.steward.dev/nowhere": "true"}),
        }
        let p: Pod =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
        api.create(&PostParams::default(), &p).await.unwrap();
    }
    let q = |s: &'static str| {
        let api = api.clone();
        async move {
            names(
                &api.list(&ListParams::default().fields(s))
                    .await
                    .unwrap()
                    .items,
            )
        }
    };
    assert_eq!(q("metadata.name=p1").await, ["p1"]);
    assert_eq!(q("spec.nodeName=n1").await, ["p1"]);
    assert_eq!(q("spec.nodeName=").await, ["p2"]);
    assert_eq!(q("spec.nodeName!=n1").await, ["p2"]);
    assert_eq!(
        q(&*Box::leak(
            format!("metadata.namespace={}", env.ns).into_boxed_str()
        ))
        .await,
        ["p1", "p2"]
    );
    let cms: Api<ConfigMap> = env.api();
    let err = api_err(
        cms.list(&ListParams::default().fields("spec.nodeName=x"))
            .await,
    );
    assert_eq!(err.code, 400);
    env.finish().await;
}
