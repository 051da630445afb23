//! OpenAPI documents (`/openapi/v3`, `/openapi/v3/<gv>`, `/openapi/v2`) and server-side field
//! validation (`fieldValidation=Strict|Warn|Ignore`), as a real API server serves them.

use http::Response;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::client::Body;
use serde_json::{Value, json};

use crate::support::{Env, env, eventually, raw_text, widget_versions};

async fn send(env: &Env, req: http::Request<Vec<u8>>) -> (Response<()>, Vec<u8>) {
    let resp = env.client.send(req.map(Body::from)).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(axum::body::Body::new(body), 64 << 20)
        .await
        .unwrap();
    (Response::from_parts(parts, ()), bytes.to_vec())
}

async fn get(env: &Env, path: &str, headers: &[(&str, &str)]) -> (Response<()>, Vec<u8>) {
    let mut req = http::Request::get(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send(env, req.body(Vec::new()).unwrap()).await
}

async fn index(env: &Env) -> Value {
    serde_json::from_str(&raw_text(env, "/openapi/v3").await.unwrap()).unwrap()
}

/// The document of `gv` at the hash the index names. Other tests add CRDs to the same group
/// at any moment, which changes the document: a hash gone stale between reading the index and
/// fetching is answered 301 to the newest hash, which is followed (as a client does).
async fn document(env: &Env, gv: &str) -> Value {
    let index = index(env).await;
    let mut url = index["paths"][gv]["serverRelativeURL"]
        .as_str()
        .unwrap_or_else(|| panic!("{gv} not in the index: {index}"))
        .to_string();
    for _ in 0..20 {
        let (resp, body) = get(env, &url, &[("Accept", "application/json")]).await;
        if resp.status() == 301 {
            url = header(&resp, "location").to_string();
            assert!(url.contains("hash="), "{url}");
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            continue;
        }
        assert_eq!(resp.status(), 200, "{url}");
        return serde_json::from_slice(&body).unwrap();
    }
    panic!("{gv}: the document's hash kept changing")
}

fn header<'a>(resp: &'a Response<()>, name: &str) -> &'a str {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

fn param_names(op: &Value) -> Vec<String> {
    op["parameters"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .filter(|p| p["in"] == "query")
        .filter_map(|p| p["name"].as_str().map(String::from))
        .collect()
}

#[tokio::test]
async fn v3_index_lists_group_versions_with_hashed_urls() {
    let env = env("openapi-index").await;
    let index = index(&env).await;
    for (gv, url) in [
        ("api/v1", "/openapi/v3/api/v1?hash="),
        ("apis/apps/v1", "/openapi/v3/apis/apps/v1?hash="),
        ("apis/batch/v1", "/openapi/v3/apis/batch/v1?hash="),
    ] {
        let got = index["paths"][gv]["serverRelativeURL"]
            .as_str()
            .unwrap_or_default();
        assert!(got.starts_with(url), "{gv}: {got}");
        assert!(got.len() > url.len() + 32, "{gv}: {got}");
    }
    env.finish().await;
}

#[tokio::test]
async fn v3_documents_describe_kinds_and_operations_as_upstream() {
    let env = env("openapi-doc").await;
    let core = document(&env, "api/v1").await;
    assert!(core["openapi"].as_str().unwrap().starts_with("3."));
    let schemas = &core["components"]["schemas"];
    let pod = &schemas["io.k8s.api.core.v1.Pod"];
    assert_eq!(
        pod["x-kubernetes-group-version-kind"],
        json!([{"group": "", "kind": "Pod", "version": "v1"}])
    );
    assert_eq!(
        pod["properties"]["spec"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.api.core.v1.PodSpec"
    );
    let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-list-type"], "map");
    assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
    let ports = &schemas["io.k8s.api.core.v1.ServiceSpec"]["properties"]["ports"];
    assert_eq!(
        ports["x-kubernetes-list-map-keys"],
        json!(["port", "protocol"])
    );
    assert!(schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].is_object());
    let item = &core["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"];
    let patch = &item["patch"];
    assert_eq!(patch["operationId"], "patchCoreV1NamespacedPod");
    assert_eq!(patch["x-kubernetes-action"], "patch");
    assert_eq!(
        patch["x-kubernetes-group-version-kind"],
        json!({"group": "", "kind": "Pod", "version": "v1"})
    );
    let params = param_names(patch);
    for p in ["dryRun", "fieldManager", "fieldValidation", "force"] {
        assert!(params.iter().any(|n| n == p), "{p} missing: {params:?}");
    }
    assert!(
        patch["requestBody"]["content"]
            .get("application/strategic-merge-patch+json")
            .is_some()
    );
    let create = &core["paths"]["/api/v1/namespaces/{namespace}/pods"]["post"];
    let params = param_names(create);
    for p in ["dryRun", "fieldManager", "fieldValidation"] {
        assert!(params.iter().any(|n| n == p), "{p} missing: {params:?}");
    }
    let apps = document(&env, "apis/apps/v1").await;
    let deployment = &apps["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"];
    assert_eq!(
        deployment["x-kubernetes-group-version-kind"],
        json!([{"group": "apps", "kind": "Deployment", "version": "v1"}])
    );
    assert_eq!(
        apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["put"]["operationId"],
        "replaceAppsV1NamespacedDeployment"
    );
    env.finish().await;
}

#[tokio::test]
async fn v3_documents_carry_etags_and_cache_by_hash() {
    let env = env("openapi-etag").await;
    let index = index(&env).await;
    let url = index["paths"]["apis/apps/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let hash = url.split("hash=").nth(1).unwrap().to_string();
    let (resp, _) = get(&env, &url, &[("Accept", "application/json")]).await;
    assert_eq!(resp.status(), 200);
    let etag = header(&resp, "etag").to_string();
    assert_eq!(etag, format!("\"{hash}\""));
    assert_eq!(header(&resp, "cache-control"), "public, immutable");
    assert!(!header(&resp, "expires").is_empty());
    let (resp, body) = get(
        &env,
        &url,
        &[("Accept", "application/json"), ("If-None-Match", &etag)],
    )
    .await;
    assert_eq!(resp.status(), 304);
    assert!(body.is_empty());
    // Without a hash: the same ETag, not cacheable for ever.
    let (resp, _) = get(
        &env,
        "/openapi/v3/apis/apps/v1",
        &[("Accept", "application/json")],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "etag"), etag);
    assert_ne!(header(&resp, "cache-control"), "public, immutable");
    // A stale hash is redirected to the current document.
    let (resp, _) = get(
        &env,
        "/openapi/v3/apis/apps/v1?hash=0123",
        &[("Accept", "application/json")],
    )
    .await;
    assert_eq!(resp.status(), 301);
    assert_eq!(header(&resp, "location"), url);
    env.finish().await;
}

#[tokio::test]
async fn unknown_group_versions_are_404() {
    let env = env("openapi-404").await;
    let (resp, _) = get(
        &env,
        "/openapi/v3/apis/nonexistent.steward.dev/v1",
        &[("Accept", "application/json")],
    )
    .await;
    assert_eq!(resp.status(), 404);
    let (resp, _) = get(
        &env,
        "/openapi/v3/api/v9",
        &[("Accept", "application/json")],
    )
    .await;
    assert_eq!(resp.status(), 404);
    env.finish().await;
}

#[tokio::test]
async fn crd_group_versions_appear_and_follow_schema_changes() {
    let mut env = env("openapi-crd").await;
    let ar = env.crd("Doc", widget_versions(true, false)).await;
    let gv = "apis/conformance.steward.dev/v1";
    let component = format!("dev.steward.conformance.v1.{}", ar.kind);
    eventually("the CRD's schema in its group-version document", || async {
        let index = index(&env).await;
        index["paths"].get(gv).is_some()
            && document(&env, gv).await["components"]["schemas"]
                .get(&component)
                .is_some()
    })
    .await;
    let first = document(&env, gv).await;
    let schema = &first["components"]["schemas"][&component];
    assert_eq!(
        schema["x-kubernetes-group-version-kind"],
        json!([{"group": "conformance.steward.dev", "kind": ar.kind, "version": "v1"}])
    );
    assert_eq!(
        schema["properties"]["spec"]["properties"]["replicas"]["type"],
        "integer"
    );
    assert_eq!(
        schema["properties"]["metadata"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    let patch = &first["paths"][format!(
        "/apis/conformance.steward.dev/v1/namespaces/{{namespace}}/{}/{{name}}",
        ar.plural
    )]["patch"];
    assert!(param_names(patch).iter().any(|p| p == "fieldValidation"));
    let old_url = index(&env).await["paths"][gv]["serverRelativeURL"].clone();
    // A new field in the schema changes the document and its hash.
    let crds: kube::Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = kube::Api::all(env.client.clone());
    let name = format!("{}.conformance.steward.dev", ar.plural);
    let mut versions = widget_versions(true, false);
    versions[0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["colour"] =
        json!({"type": "string"});
    crds.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"versions": versions}})),
    )
    .await
    .unwrap();
    eventually("the new field in the document", || async {
        let url = index(&env).await["paths"][gv]["serverRelativeURL"].clone();
        url != old_url
            && document(&env, gv).await["components"]["schemas"][&component]["properties"]["spec"]
                ["properties"]
                .get("colour")
                .is_some()
    })
    .await;
    env.finish().await;
}

#[tokio::test]
async fn v2_document_is_served_as_json_and_protobuf() {
    let env = env("openapi-v2").await;
    let (resp, body) = get(&env, "/openapi/v2", &[("Accept", "application/json")]).await;
    assert_eq!(resp.status(), 200);
    assert!(!header(&resp, "etag").is_empty());
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["swagger"], "2.0");
    let pod = &doc["definitions"]["io.k8s.api.core.v1.Pod"];
    assert_eq!(
        pod["x-kubernetes-group-version-kind"],
        json!([{"group": "", "kind": "Pod", "version": "v1"}])
    );
    assert_eq!(
        pod["properties"]["spec"]["$ref"],
        "#/definitions/io.k8s.api.core.v1.PodSpec"
    );
    // The current ETag is answered 304. Other tests add CRDs at any moment, which changes the
    // document (and its ETag): a 200 with a new ETag is a newer document; ask again with it.
    let mut etag = header(&resp, "etag").to_string();
    let mut tries = 0;
    loop {
        let (resp, _) = get(
            &env,
            "/openapi/v2",
            &[("Accept", "application/json"), ("If-None-Match", &etag)],
        )
        .await;
        if resp.status() == 304 {
            break;
        }
        assert_eq!(resp.status(), 200);
        let newer = header(&resp, "etag").to_string();
        assert_ne!(newer, etag, "an unchanged ETag must be answered 304");
        tries += 1;
        assert!(tries < 10, "the v2 document kept changing");
        etag = newer;
    }
    // What kubectl asks for: protobuf (gnostic's openapi_v2.Document), answered in the
    // media-type spelling Go can parse. Field 1 (`swagger`) comes first.
    let (resp, body) = get(
        &env,
        "/openapi/v2",
        &[(
            "Accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        header(&resp, "content-type"),
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    );
    assert!(
        body.starts_with(b"\x0a\x032.0"),
        "{:?}",
        &body[..8.min(body.len())]
    );
    env.finish().await;
}

async fn post(env: &Env, path: &str, body: &str) -> (Response<()>, Value) {
    let req = http::Request::post(path)
        .header("Content-Type", "application/json")
        .body(body.as_bytes().to_vec())
        .unwrap();
    let (resp, bytes) = send(env, req).await;
    (resp, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn warnings(resp: &Response<()>) -> Vec<String> {
    resp.headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok().map(String::from))
        .collect()
}

#[tokio::test]
async fn field_validation_of_built_in_kinds() {
    let env = env("openapi-fieldval").await;
    let base = format!("/api/v1/namespaces/{}/configmaps", env.ns);
    let body = |name: &str| {
        format!(
            r#"{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "{name}"}}, "bogus": 1, "data": {{"a": "1"}}}}"#
        )
    };
    let (resp, status) = post(&env, &format!("{base}?fieldValidation=Strict"), &body("s")).await;
    assert_eq!(resp.status(), 400, "{status}");
    assert_eq!(status["reason"], "BadRequest");
    assert_eq!(
        status["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"bogus\""
    );
    let (resp, created) = post(&env, &format!("{base}?fieldValidation=Warn"), &body("w")).await;
    assert_eq!(resp.status(), 201, "{created}");
    assert_eq!(warnings(&resp), ["299 - \"unknown field \\\"bogus\\\"\""]);
    assert!(created.get("bogus").is_none(), "{created}");
    // Warn is the default.
    let (resp, _) = post(&env, &base, &body("d")).await;
    assert_eq!(resp.status(), 201);
    assert_eq!(warnings(&resp).len(), 1);
    let (resp, created) = post(&env, &format!("{base}?fieldValidation=Ignore"), &body("i")).await;
    assert_eq!(resp.status(), 201);
    assert!(warnings(&resp).is_empty());
    assert!(created.get("bogus").is_none(), "{created}");
    // Duplicate fields, nested unknown fields (a Deployment's container).
    let dup = r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dup"}, "data": {"a": "1"}, "data": {"a": "2"}}"#;
    let (resp, status) = post(&env, &format!("{base}?fieldValidation=Strict"), dup).await;
    assert_eq!(resp.status(), 400);
    assert_eq!(
        status["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: duplicate field \"data\""
    );
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {"metadata": {"labels": {"app": "d"}},
            "spec": {"containers": [{"name": "c", "image": "i", "unknownNested": 1}]}}}});
    let (resp, status) = post(
        &env,
        &format!(
            "/apis/apps/v1/namespaces/{}/deployments?fieldValidation=Strict",
            env.ns
        ),
        &deployment.to_string(),
    )
    .await;
    assert_eq!(resp.status(), 400);
    assert_eq!(
        status["message"],
        "Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: unknown field \"spec.template.spec.containers[0].unknownNested\""
    );
    // Patches under Strict: 1.36 decodes the patched object and refuses it as 422 `Invalid`
    // on the field `patch` of a nameless object, its value the patched object's JSON (for
    // JSON and merge patches) or the patch as Go prints it (strategic merge patches).
    let strict_patch = |status: &Value, shown: &str, unknown: &str| {
        let message = status["message"].as_str().unwrap();
        assert_eq!(status["reason"], "Invalid", "{status}");
        assert!(
            message.starts_with(" \"\" is invalid: patch: Invalid value: \"")
                && message.contains(shown)
                && message.ends_with(&format!(
                    "\": strict decoding error: unknown field \"{unknown}\""
                )),
            "{status}"
        );
        assert_eq!(status["details"]["causes"][0]["field"], "patch", "{status}");
        assert_eq!(
            status["details"]["causes"][0]["reason"],
            "FieldValueInvalid"
        );
    };
    for (content_type, patch, shown, unknown) in [
        (
            "application/merge-patch+json",
            &br#"{"spec": {"x": 1}}"#[..],
            r#"\"spec\":{\"x\":1}"#,
            "spec",
        ),
        (
            "application/strategic-merge-patch+json",
            br#"{"spec": {"x": 1}}"#,
            "\"map[spec:map[x:1]]\"",
            "spec",
        ),
        (
            "application/json-patch+json",
            br#"[{"op": "add", "path": "/bogus", "value": 1}]"#,
            r#"\"bogus\":1"#,
            "bogus",
        ),
    ] {
        let req = http::Request::patch(format!("{base}/w?fieldValidation=Strict"))
            .header("Content-Type", content_type)
            .body(patch.to_vec())
            .unwrap();
        let (resp, bytes) = send(&env, req).await;
        assert_eq!(resp.status(), 422, "{content_type}");
        let status: Value = serde_json::from_slice(&bytes).unwrap();
        strict_patch(&status, shown, unknown);
    }
    let req = http::Request::patch(format!("{base}/w"))
        .header("Content-Type", "application/json-patch+json")
        .body(br#"[{"op": "add", "path": "/bogus", "value": 1}]"#.to_vec())
        .unwrap();
    let (resp, bytes) = send(&env, req).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(warnings(&resp), ["299 - \"unknown field \\\"bogus\\\"\""]);
    let patched: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(patched.get("bogus").is_none(), "{patched}");
    env.finish().await;
}

#[tokio::test]
async fn field_validation_of_custom_resources() {
    let mut env = env("openapi-fieldval-cr").await;
    let ar = env.crd("Val", widget_versions(true, false)).await;
    let base = format!(
        "/apis/{}/namespaces/{}/{}",
        ar.api_version, env.ns, ar.plural
    );
    let body = |name: &str| {
        json!({"apiVersion": ar.api_version, "kind": ar.kind, "metadata": {"name": name},
            "spec": {"replicas": 1, "bogus": true, "extra": {"anything": 1}}})
        .to_string()
    };
    let (resp, status) = post(&env, &format!("{base}?fieldValidation=Strict"), &body("s")).await;
    assert_eq!(resp.status(), 400, "{status}");
    assert_eq!(
        status["message"],
        format!(
            "{k} in version \"v1\" cannot be handled as a {k}: strict decoding error: unknown field \"spec.bogus\"",
            k = ar.kind
        )
    );
    let (resp, created) = post(&env, &format!("{base}?fieldValidation=Warn"), &body("w")).await;
    assert_eq!(resp.status(), 201, "{created}");
    assert_eq!(
        warnings(&resp),
        ["299 - \"unknown field \\\"spec.bogus\\\"\""]
    );
    let obj: DynamicObject = serde_json::from_value(created).unwrap();
    assert!(obj.data["spec"].get("bogus").is_none());
    assert_eq!(obj.data["spec"]["extra"]["anything"], 1);
    env.finish().await;
}

#[tokio::test]
async fn apply_refuses_undeclared_fields() {
    let env = env("openapi-ssa").await;
    let path = format!(
        "/apis/apps/v1/namespaces/{}/deployments/d?fieldManager=conf&fieldValidation=Ignore",
        env.ns
    );
    let body = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {"metadata": {"labels": {"app": "d"}},
            "spec": {"containers": [{"name": "c", "image": "i", "unknownNested": 1}]}}}});
    let req = http::Request::patch(path)
        .header("Content-Type", "application/apply-patch+yaml")
        .body(body.to_string().into_bytes())
        .unwrap();
    let (resp, bytes) = send(&env, req).await;
    let status: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(resp.status(), 500, "{status}");
    // The object is named as the apply body names it: no namespace in its metadata, none here.
    assert_eq!(
        status["message"],
        "failed to create typed patch object (/d; apps/v1, Kind=Deployment): \
         .spec.template.spec.containers[name=\"c\"].unknownNested: field not declared in schema"
    );
    env.finish().await;
}

#[tokio::test]
async fn unsupported_field_validation_values_are_invalid() {
    let env = env("openapi-fieldval-bad").await;
    let (resp, status) = post(
        &env,
        &format!(
            "/api/v1/namespaces/{}/configmaps?fieldValidation=strict",
            env.ns
        ),
        r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}"#,
    )
    .await;
    assert_eq!(resp.status(), 422, "{status}");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(
        status["message"],
        "CreateOptions.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: \"strict\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
    );
    env.finish().await;
}
