//! Create, get, list, update, delete semantics of built-in kinds.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{api_err, cm, env, eventually, rv};

#[tokio::test]
async fn create_get_already_exists_and_generate_name() {
    let env = env("create").await;
    let api: Api<ConfigMap> = env.api();
    let created = api
        .create(&PostParams::default(), &cm("a", json!({"k": "v"})))
        .await
        .unwrap();
    let md = &created.metadata;
    assert!(md.uid.as_deref().is_some_and(|u| !u.is_empty()));
    assert!(md.creation_timestamp.is_some());
    assert!(!rv(&created).is_empty());
    assert_eq!(md.namespace.as_deref(), Some(env.ns.as_str()));
    let got = api.get("a").await.unwrap();
    assert_eq!(got.data, created.data);
    assert_eq!(rv(&got), rv(&created));

    let dup = api_err(
        api.create(&PostParams::default(), &cm("a", json!({})))
            .await,
    );
    assert_eq!((dup.code, dup.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(dup.message, "configmaps \"a\" already exists");

    let mut generated = cm("", json!({}));
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let g = api
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    let name = g.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    let missing = api_err(api.get("nope").await);
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, "configmaps \"nope\" not found");

    let mut noname = cm("", json!({}));
    noname.metadata.name = None;
    let invalid = api_err(api.create(&PostParams::default(), &noname).await);
    assert_eq!((invalid.code, invalid.reason.as_str()), (422, "Invalid"));

    let bad = api_err(
        api.create(&PostParams::default(), &cm("Not_Valid", json!({})))
            .await,
    );
    assert_eq!((bad.code, bad.reason.as_str()), (422, "Invalid"));
    env.finish().await;
}

#[tokio::test]
async fn create_in_missing_namespace_is_not_found() {
    let env = env("missing-ns").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "does-not-exist-here");
    let err = api_err(
        api.create(&PostParams::default(), &cm("a", json!({})))
            .await,
    );
    assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"));
    assert_eq!(err.message, "namespaces \"does-not-exist-here\" not found");
    env.finish().await;
}

#[tokio::test]
async fn update_with_stale_resource_version_conflicts() {
    let env = env("conflict").await;
    let api: Api<ConfigMap> = env.api();
    let v1 = api
        .create(&PostParams::default(), &cm("a", json!({"k": "1"})))
        .await
        .unwrap();
    let mut v2 = v1.clone();
    v2.data = Some([("k".to_string(), "2".to_string())].into());
    let v2 = api.replace("a", &PostParams::default(), &v2).await.unwrap();
    assert_ne!(rv(&v1), rv(&v2));
    let mut stale = v1.clone();
    stale.data = Some([("k".to_string(), "3".to_string())].into());
    let err = api_err(api.replace("a", &PostParams::default(), &stale).await);
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(
        err.message.contains("the object has been modified"),
        "{}",
        err.message
    );
    // An empty resourceVersion means an unconditional update.
    stale.metadata.resource_version = None;
    let v3 = api
        .replace("a", &PostParams::default(), &stale)
        .await
        .unwrap();
    assert_eq!(v3.data.unwrap()["k"], "3");
    // The name in the body must match the URL.
    let mut other = v2.clone();
    other.metadata.name = Some("b".into());
    other.metadata.resource_version = None;
    let err = api_err(api.replace("a", &PostParams::default(), &other).await);
    assert_eq!(err.code, 400);
    // Updating a missing object is NotFound.
    let err = api_err(
        api.replace("zz", &PostParams::default(), &cm("zz", json!({})))
            .await,
    );
    assert_eq!(err.code, 404);
    env.finish().await;
}

#[tokio::test]
async fn noop_writes_keep_resource_version() {
    let env = env("noop").await;
    let api: Api<ConfigMap> = env.api();
    let v1 = api
        .create(&PostParams::default(), &cm("a", json!({"k": "1"})))
        .await
        .unwrap();
    let same = api.replace("a", &PostParams::default(), &v1).await.unwrap();
    assert_eq!(rv(&same), rv(&v1));
    let patched = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(rv(&patched), rv(&v1));
    let changed = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "2"}})),
        )
        .await
        .unwrap();
    assert_ne!(rv(&changed), rv(&v1));
    env.finish().await;
}

#[tokio::test]
async fn finalizers_keep_object_until_removed() {
    let env = env("finalizers").await;
    let api: Api<ConfigMap> = env.api();
    let mut obj = cm("a", json!({}));
    obj.metadata.finalizers = Some(vec!["steward.dev/test".into()]);
    api.create(&PostParams::default(), &obj).await.unwrap();
    let deleted = api.delete("a", &DeleteParams::default()).await.unwrap();
    let terminating = deleted
        .left()
        .expect("object returned while finalizers remain");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    let still = api.get("a").await.unwrap();
    assert!(still.metadata.deletion_timestamp.is_some());
    // Adding a finalizer while deleting is forbidden.
    let err = api_err(
        api.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["steward.dev/test", "x.dev/new"]}})),
        )
        .await,
    );
    assert_eq!(err.code, 422);
    // Other changes are still allowed.
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "y"}})),
    )
    .await
    .unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("object gone", || async {
        api.get_opt("a").await.unwrap().is_none()
    })
    .await;
    env.finish().await;
}

#[tokio::test]
async fn lease_create_and_update_conflict() {
    let env = env("lease").await;
    let api: Api<Lease> = env.api();
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "leader"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": "2025-01-01T00:00:00.000000Z",
                 "renewTime": "2025-01-01T00:00:00.000000Z", "leaseTransitions": 0}})).unwrap();
    let l1 = api.create(&PostParams::default(), &lease).await.unwrap();
    let mut a = l1.clone();
    a.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let l2 = api
        .replace("leader", &PostParams::default(), &a)
        .await
        .unwrap();
    assert_eq!(
        l2.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("b")
    );
    let mut b = l1.clone();
    b.spec.as_mut().unwrap().holder_identity = Some("c".into());
    let err = api_err(api.replace("leader", &PostParams::default(), &b).await);
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    env.finish().await;
}

#[tokio::test]
async fn pagination_with_limit_and_continue() {
    let env = env("paging").await;
    let api: Api<ConfigMap> = env.api();
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("cm-{i}"), json!({})))
            .await
            .unwrap();
    }
    let mut names = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut lp = ListParams::default().limit(2);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = api.list(&lp).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 2);
        assert!(
            page.metadata
                .resource_version
                .as_deref()
                .is_some_and(|r| !r.is_empty())
        );
        names.extend(
            page.items
                .iter()
                .filter_map(|c| c.metadata.name.clone())
                .filter(|n| n.starts_with("cm-")),
        );
        token = page.metadata.continue_.clone().filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    assert!(pages >= 3);
    assert_eq!(names, ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);
    env.finish().await;
}

#[tokio::test]
async fn namespace_deletion_removes_content() {
    let env = env("nsdel").await;
    let nsapi = Api::<Namespace>::all(env.client.clone());
    let name = format!("{}-x", env.ns);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    let created = nsapi.create(&PostParams::default(), &ns).await.unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &name);
    api.create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();
    nsapi.delete(&name, &DeleteParams::default()).await.unwrap();
    let err = api_err(
        api.create(&PostParams::default(), &cm("b", json!({})))
            .await,
    );
    assert!(err.code == 403 || err.code == 404, "{err:?}");
    eventually("namespace gone", || async {
        nsapi.get_opt(&name).await.unwrap().is_none()
    })
    .await;
    assert!(api.get_opt("a").await.unwrap().is_none());
    env.finish().await;
}

#[tokio::test]
async fn dry_run_writes_change_nothing() {
    let env = env("dryrun").await;
    let api: Api<ConfigMap> = env.api();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let out = api.create(&dry, &cm("a", json!({"k": "v"}))).await.unwrap();
    assert_eq!(out.metadata.name.as_deref(), Some("a"));
    assert!(api.get_opt("a").await.unwrap().is_none());
    let real = api
        .create(&PostParams::default(), &cm("a", json!({"k": "v"})))
        .await
        .unwrap();
    let patched = api
        .patch(
            "a",
            &PatchParams::default().dry_run(),
            &Patch::Merge(json!({"data": {"k": "w"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["k"], "w");
    let applied = api
        .patch("a", &PatchParams::apply("dry").dry_run().force(), &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "x"}})))
        .await
        .unwrap();
    assert_eq!(applied.data.unwrap()["k"], "x");
    api.delete(
        "a",
        &DeleteParams {
            dry_run: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let still = api.get("a").await.unwrap();
    assert_eq!(rv(&still), rv(&real));
    assert_eq!(still.data.unwrap()["k"], "v");
    env.finish().await;
}

#[tokio::test]
async fn every_namespace_holds_a_default_service_account_and_the_root_ca() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let env = env("ns-defaults").await;
    let accounts: Api<ServiceAccount> = env.api();
    let maps: Api<ConfigMap> = env.api();
    let present = || async {
        accounts.get_opt("default").await.unwrap().is_some()
            && maps
                .get_opt("kube-root-ca.crt")
                .await
                .unwrap()
                .is_some_and(|c| c.data.is_some_and(|d| d.contains_key("ca.crt")))
    };
    eventually("the default ServiceAccount and kube-root-ca.crt", present).await;
    // Deleted, they come back.
    accounts
        .delete("default", &DeleteParams::default())
        .await
        .unwrap();
    maps.delete("kube-root-ca.crt", &DeleteParams::default())
        .await
        .unwrap();
    eventually("both recreated", present).await;
    env.finish().await;
}

#[tokio::test]
async fn metadata_of_the_wrong_type_is_a_bad_request() {
    let env = env("meta-types").await;
    let path = format!("/api/v1/namespaces/{}/configmaps", env.ns);
    for (body, field) in [
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": true}}),
            "name",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "m", "labels": {"on": true}}}),
            "labels",
        ),
    ] {
        let status =
            api_err(crate::support::raw(&env, "POST", &path, "application/json", body).await);
        assert_eq!(status.code, 400, "{status:?}");
        assert!(
            status.message.contains(&format!(
                "json: cannot unmarshal bool into Go struct field ObjectMeta.metadata.{field} of type string"
            )),
            "{}",
            status.message
        );
    }
    env.finish().await;
}

/// A Secret's `stringData` is write-only: every write merges it into `data` (base64 on the
/// wire, a `stringData` key winning over a `data` key of the same name), and no read returns
/// it — on create, update, each patch type and server-side apply (issue 34).
#[tokio::test]
async fn secret_string_data_is_merged_into_data_on_every_write() {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    let env = env("stringdata").await;
    let api: Api<Secret> = env.api();
    let value = |s: &Secret, key: &str| {
        assert!(s.string_data.is_none(), "stringData returned: {s:?}");
        s.data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
    };
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "s1"},
        "data": {"a": "b2xk", "keep": "a2VwdA=="},
        "stringData": {"a": "new", "b": "hello"},
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &secret).await.unwrap();
    for s in [&created, &api.get("s1").await.unwrap()] {
        assert_eq!(value(s, "a").as_deref(), Some("new"), "stringData wins");
        assert_eq!(value(s, "b").as_deref(), Some("hello"));
        assert_eq!(value(s, "keep").as_deref(), Some("kept"));
        assert_eq!(s.type_.as_deref(), Some("Opaque"));
    }

    let mut update = created.clone();
    update.string_data = Some([("c".to_owned(), "put".to_owned())].into());
    update
        .data
        .get_or_insert_default()
        .insert("d".into(), ByteString(b"raw".to_vec()));
    let updated = api
        .replace("s1", &PostParams::default(), &update)
        .await
        .unwrap();
    assert_eq!(value(&updated, "c").as_deref(), Some("put"));
    assert_eq!(value(&updated, "d").as_deref(), Some("raw"));
    assert_eq!(value(&updated, "a").as_deref(), Some("new"));

    let patches = [
        ("merge", Patch::Merge(json!({"stringData": {"e": "merge"}}))),
        (
            "strategic",
            Patch::Strategic(json!({"stringData": {"f": "strategic"}})),
        ),
        (
            "json",
            Patch::Json(
                serde_json::from_value(
                    json!([{"op": "add", "path": "/stringData", "value": {"g": "json"}}]),
                )
                .unwrap(),
            ),
        ),
    ];
    for (kind, patch) in patches {
        let patched = api
            .patch("s1", &PatchParams::default(), &patch)
            .await
            .unwrap();
        let key = match kind {
            "merge" => "e",
            "strategic" => "f",
            _ => "g",
        };
        assert_eq!(value(&patched, key).as_deref(), Some(kind), "{kind} patch");
        assert_eq!(
            value(&patched, "b").as_deref(),
            Some("hello"),
            "{kind} patch"
        );
    }

    let applied = api
        .patch(
            "s2",
            &PatchParams::apply("conformance"),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "s2"},
                "stringData": {"password": "applied"},
            })),
        )
        .await
        .unwrap();
    assert_eq!(value(&applied, "password").as_deref(), Some("applied"));
    let listed = api.list(&ListParams::default()).await.unwrap();
    for s in &listed.items {
        assert!(s.string_data.is_none(), "stringData listed: {s:?}");
    }
    env.finish().await;
}
