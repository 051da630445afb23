//! Server-side apply: creation, ownership, removal of dropped fields, conflicts, force,
//! idempotence, associative lists and the status subresource.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::{api_err, env, rv, widget_versions};

fn cfg(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": data})
}

fn owners(c: &ConfigMap) -> Vec<(String, String, Value)> {
    c.metadata
        .managed_fields
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
                m.fields_v1.map(|f| f.0).unwrap_or(Value::Null),
            )
        })
        .collect()
}

#[tokio::test]
async fn apply_creates_records_ownership_and_is_idempotent() {
    let env = env("ssa-basic").await;
    let api: Api<ConfigMap> = env.api();
    let alice = PatchParams::apply("alice");
    let v1 = api
        .patch("a", &alice, &Patch::Apply(cfg(json!({"x": "1", "y": "1"}))))
        .await
        .unwrap();
    assert_eq!(v1.data.as_ref().unwrap().len(), 2);
    let o = owners(&v1);
    assert_eq!(o.len(), 1);
    assert_eq!((o[0].0.as_str(), o[0].1.as_str()), ("alice", "Apply"));
    assert_eq!(o[0].2, json!({"f:data": {"f:x": {}, "f:y": {}}}));
    let again = api
        .patch("a", &alice, &Patch::Apply(cfg(json!({"x": "1", "y": "1"}))))
        .await
        .unwrap();
    assert_eq!(rv(&again), rv(&v1), "a second identical apply is a no-op");
    // Non-apply writes are recorded as Update by their manager.
    let upd = api
        .patch(
            "a",
            &PatchParams {
                field_manager: Some("bob".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"data": {"z": "1"}})),
        )
        .await
        .unwrap();
    let o = owners(&upd);
    let bob = o.iter().find(|(m, _, _)| m == "bob").expect("bob entry");
    assert_eq!(bob.1, "Update");
    assert_eq!(bob.2, json!({"f:data": {"f:z": {}}}));
    // fieldManager is required for apply.
    let err = api_err(
        api.patch("a", &PatchParams::default(), &Patch::Apply(cfg(json!({}))))
            .await,
    );
    assert_eq!(err.code, 422);
    env.finish().await;
}

#[tokio::test]
async fn apply_removes_fields_no_longer_applied_unless_shared() {
    let env = env("ssa-removal").await;
    let api: Api<ConfigMap> = env.api();
    api.patch(
        "a",
        &PatchParams::apply("alice"),
        &Patch::Apply(cfg(json!({"x": "1", "y": "1"}))),
    )
    .await
    .unwrap();
    api.patch(
        "a",
        &PatchParams::apply("bob"),
        &Patch::Apply(cfg(json!({"x": "1"}))),
    )
    .await
    .unwrap();
    let out = api
        .patch(
            "a",
            &PatchParams::apply("alice"),
            &Patch::Apply(cfg(json!({}))),
        )
        .await
        .unwrap();
    let data = out.data.unwrap_or_default();
    assert_eq!(
        data.get("x").map(String::as_str),
        Some("1"),
        "x is still owned by bob"
    );
    assert!(!data.contains_key("y"), "y was only alice's");
    env.finish().await;
}

#[tokio::test]
async fn apply_conflicts_with_other_managers_unless_forced() {
    let env = env("ssa-conflict").await;
    let api: Api<ConfigMap> = env.api();
    api.patch(
        "a",
        &PatchParams::apply("alice"),
        &Patch::Apply(cfg(json!({"x": "1"}))),
    )
    .await
    .unwrap();
    let err = api_err(
        api.patch(
            "a",
            &PatchParams::apply("bob"),
            &Patch::Apply(cfg(json!({"x": "2"}))),
        )
        .await,
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(
        err.message.contains("conflict with \"alice\""),
        "{}",
        err.message
    );
    assert!(err.message.contains(".data.x"), "{}", err.message);
    let forced = api
        .patch(
            "a",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(cfg(json!({"x": "2"}))),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["x"], "2");
    let o = owners(&api.get("a").await.unwrap());
    assert!(
        o.iter().all(|(m, _, _)| m != "alice"),
        "alice lost her only field: {o:?}"
    );
    // Update managers conflict with appliers too.
    api.patch(
        "a",
        &PatchParams {
            field_manager: Some("carol".into()),
            ..Default::default()
        },
        &Patch::Merge(json!({"data": {"w": "c"}})),
    )
    .await
    .unwrap();
    let err = api_err(
        api.patch(
            "a",
            &PatchParams::apply("bob"),
            &Patch::Apply(cfg(json!({"x": "2", "w": "b"}))),
        )
        .await,
    );
    assert_eq!(err.code, 409);
    env.finish().await;
}

#[tokio::test]
async fn apply_merges_associative_lists_and_status() {
    let mut env = env("ssa-lists").await;
    let ar = env.crd("Widget", widget_versions(true, false)).await;
    let api = env.dynamic(&ar);
    let obj = |tags: Value| json!({"apiVersion": ar.api_version, "kind": ar.kind, "metadata": {"name": "w"}, "spec": {"replicas": 1, "tags": tags}});
    api.patch(
        "w",
        &PatchParams::apply("a"),
        &Patch::Apply(obj(json!(["one"]))),
    )
    .await
    .unwrap();
    let both = api.patch("w", &PatchParams::apply("b"), &Patch::Apply(json!({"apiVersion": ar.api_version, "kind": ar.kind, "metadata": {"name": "w"}, "spec": {"tags": ["two"]}}))).await.unwrap();
    assert_eq!(
        both.data["spec"]["tags"],
        json!(["one", "two"]),
        "sets merge per element"
    );
    // Status through the status subresource only.
    let status = json!({"apiVersion": ar.api_version, "kind": ar.kind, "metadata": {"name": "w"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let st = api
        .patch_status("w", &PatchParams::apply("ctl"), &Patch::Apply(status))
        .await
        .unwrap();
    assert_eq!(st.data["status"]["conditions"][0]["type"], "Ready");
    let other = json!({"apiVersion": ar.api_version, "kind": ar.kind, "metadata": {"name": "w"},
        "status": {"conditions": [{"type": "Synced", "status": "True"}]}});
    let st = api
        .patch_status("w", &PatchParams::apply("ctl2"), &Patch::Apply(other))
        .await
        .unwrap();
    assert_eq!(
        st.data["status"]["conditions"].as_array().unwrap().len(),
        2,
        "conditions merge by type"
    );
    let mf = st.metadata.managed_fields.unwrap();
    let ctl = mf
        .iter()
        .find(|m| m.manager.as_deref() == Some("ctl"))
        .unwrap();
    assert_eq!(ctl.subresource.as_deref(), Some("status"));
    // Status in a main-resource apply is ignored.
    let ignored = api
        .patch(
            "w",
            &PatchParams::apply("a"),
            &Patch::Apply(
                json!({"apiVersion": ar.api_version, "kind": ar.kind, "metadata": {"name": "w"},
            "spec": {"replicas": 1, "tags": ["one"]}, "status": {"phase": "Hacked"}}),
            ),
        )
        .await
        .unwrap();
    assert!(ignored.data["status"].get("phase").is_none());
    env.finish().await;
}

#[tokio::test]
async fn reapplying_a_service_with_defaulted_fields_is_a_noop() {
    let env = env("ssa-service").await;
    let api: kube::Api<k8s_openapi::api::core::v1::Service> = env.api();
    let cfg = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
        "spec": {"selector": {"app": "db"}, "ports": [{"name": "pg", "port": 5432}]}});
    let pp = PatchParams::apply("steward").force();
    let v1 = api
        .patch("db", &pp, &Patch::Apply(cfg.clone()))
        .await
        .unwrap();
    let spec = v1.spec.as_ref().unwrap();
    assert!(
        spec.cluster_ip.as_deref().is_some_and(|ip| !ip.is_empty()),
        "a ClusterIP is allocated"
    );
    assert_eq!(
        spec.ports.as_ref().unwrap()[0].protocol.as_deref(),
        Some("TCP")
    );
    let v2 = api.patch("db", &pp, &Patch::Apply(cfg)).await.unwrap();
    assert_eq!(v2.spec.as_ref().unwrap().ports.as_ref().unwrap().len(), 1);
    assert_eq!(rv(&v2), rv(&v1));
    env.finish().await;
}

#[tokio::test]
async fn apply_accepts_yaml_bodies() {
    let env = env("ssa-yaml").await;
    // YAML 1.1, as the real server reads it: `name: y` is a boolean, which no string field
    // holds (the server answers 500, as upstream's typed-patch conversion does).
    let path = format!(
        "/api/v1/namespaces/{}/configmaps/y?fieldManager=yaml-user",
        env.ns
    );
    let body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\ndata:\n  key: from-yaml\n";
    let req = http::Request::patch(path)
        .header("Content-Type", "application/apply-patch+yaml")
        .body(body.as_bytes().to_vec())
        .unwrap();
    let err = env.client.request::<ConfigMap>(req).await.unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 500, "{s:?}");
            assert!(
                s.message.contains(".metadata.name: expected string"),
                "{}",
                s.message
            );
        }
        other => panic!("expected a 500, got {other:?}"),
    }
    let path = format!(
        "/api/v1/namespaces/{}/configmaps/yaml-cm?fieldManager=yaml-user",
        env.ns
    );
    let body =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: yaml-cm\ndata:\n  key: from-yaml\n";
    let req = http::Request::patch(path)
        .header("Content-Type", "application/apply-patch+yaml")
        .body(body.as_bytes().to_vec())
        .unwrap();
    let out: ConfigMap = env.client.request(req).await.unwrap();
    assert_eq!(out.data.unwrap()["key"], "from-yaml");
    let mf = out.metadata.managed_fields.unwrap();
    assert_eq!(mf[0].manager.as_deref(), Some("yaml-user"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    env.finish().await;
}
