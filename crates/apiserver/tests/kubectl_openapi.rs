//! The real kubectl (`$KUBECTL`, else the CI venv's, as in tests/kubectl.rs) against the
//! embedded server's OpenAPI documents: `kubectl apply` with its default `--validate=strict`
//! (server-side field validation, advertised by the v3 documents), `--validate=warn`, and
//! `kubectl explain` of built-in and custom kinds, and the v2 (protobuf) fallback kubectl takes
//! where the v3 documents cannot answer. Also the formats served per Accept header.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::Output;

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use serde_json::Value;

#[path = "support/kubectl.rs"]
mod support;

use support::plane;

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn example(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
        .display()
        .to_string()
}

const BAD_DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: bad
  namespace: default
spec:
  replicas: 1
  bogus: 1
  selector:
    matchLabels: {app: bad}
  template:
    metadata:
      labels: {app: bad}
    spec:
      containers:
      - name: c
        image: busybox
        unknownNested: x
";

#[tokio::test]
async fn apply_of_the_examples_passes_default_and_strict_validation() {
    let plane = plane(true).await;
    let etcd = example("etcd-cluster.yaml");
    let postgres = example("postgres-cluster.yaml");
    let out = plane.kubectl(&["apply", "-f", &etcd]).await;
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("etcdcluster.steward.dev/example created"),
        "{}",
        stdout(&out)
    );
    let out = plane
        .kubectl(&["apply", "--validate=strict", "-f", &etcd])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("etcdcluster.steward.dev/example unchanged"),
        "{}",
        stdout(&out)
    );
    for args in [
        &["apply", "--validate=strict", "-f", &postgres][..],
        &["apply", "-f", &postgres][..],
    ] {
        let out = plane.kubectl(args).await;
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert!(
            stdout(&out).contains("postgrescluster.steward.dev/demo-pg"),
            "{}",
            stdout(&out)
        );
        assert!(!stderr(&out).contains("Warning"), "{}", stderr(&out));
    }
    plane.server.shutdown().await;
}

#[tokio::test]
async fn unknown_fields_are_refused_under_strict_and_warned_under_warn() {
    let plane = plane(false).await;
    let bad = plane.file("bad.yaml", BAD_DEPLOYMENT);
    for args in [
        &["apply", "-f", &bad][..],
        &["apply", "--validate=strict", "-f", &bad][..],
    ] {
        let out = plane.kubectl(args).await;
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            stderr(&out).contains(
                "Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: \
                 unknown field \"spec.bogus\", unknown field \"spec.template.spec.containers[0].unknownNested\""
            ),
            "{}",
            stderr(&out)
        );
    }
    let deployments: Api<Deployment> = Api::namespaced(plane.client.clone(), "default");
    assert!(deployments.get_opt("bad").await.unwrap().is_none());
    let out = plane
        .kubectl(&["apply", "--validate=warn", "-f", &bad])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("Warning: unknown field \"spec.bogus\""),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out)
            .contains("Warning: unknown field \"spec.template.spec.containers[0].unknownNested\""),
        "{}",
        stderr(&out)
    );
    // The unknown fields were dropped, as decoding into the Go types drops them.
    let raw: Value = plane
        .client
        .request(
            http::Request::get("/apis/apps/v1/namespaces/default/deployments/bad")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(raw["spec"].get("bogus").is_none(), "{raw}");
    assert!(
        raw["spec"]["template"]["spec"]["containers"][0]
            .get("unknownNested")
            .is_none(),
        "{raw}"
    );
    // A later strict apply of the corrected manifest patches (removing the unknown fields
    // from the last-applied configuration is not an unknown field).
    let good = plane.file(
        "good.yaml",
        &BAD_DEPLOYMENT
            .replace("  bogus: 1\n", "")
            .replace("        unknownNested: x\n", "")
            .replace("replicas: 1", "replicas: 2"),
    );
    let out = plane.kubectl(&["apply", "-f", &good]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("deployment.apps/bad configured"),
        "{}",
        stdout(&out)
    );
    let d = deployments.get("bad").await.unwrap();
    assert_eq!(d.spec.unwrap().replicas, Some(2));
    plane.server.shutdown().await;
}

#[tokio::test]
async fn unknown_fields_of_custom_resources_are_refused_under_strict() {
    let plane = plane(true).await;
    let manifest = std::fs::read_to_string(example("etcd-cluster.yaml"))
        .unwrap()
        .replace("  replicas: 3\n", "  replicas: 3\n  bogus: true\n");
    let bad = plane.file("etcd-bad.yaml", &manifest);
    let out = plane.kubectl(&["apply", "-f", &bad]).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            "EtcdCluster in version \"v1alpha1\" cannot be handled as a EtcdCluster: strict decoding error: unknown field \"spec.bogus\""
        ),
        "{}",
        stderr(&out)
    );
    let out = plane
        .kubectl(&["apply", "--validate=warn", "-f", &bad])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("Warning: unknown field \"spec.bogus\""),
        "{}",
        stderr(&out)
    );
    plane.server.shutdown().await;
}

#[tokio::test]
async fn explain_reads_built_in_and_custom_schemas() {
    let plane = plane(true).await;
    let out = plane.kubectl(&["explain", "etcdclusters.spec"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for expected in [
        "KIND:       EtcdCluster",
        "VERSION:    v1alpha1",
        "FIELD: spec <Object>",
        "replicas\t<integer> -required-",
        "storage\t<Object>",
    ] {
        assert!(text.contains(expected), "{expected:?} missing in:\n{text}");
    }
    let out = plane.kubectl(&["explain", "pods.spec.containers"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for expected in [
        "KIND:       Pod",
        "FIELD: containers <[]Container>",
        "image\t<string>",
        "env\t<[]EnvVar>",
        "volumeMounts\t<[]VolumeMount>",
    ] {
        assert!(text.contains(expected), "{expected:?} missing in:\n{text}");
    }
    let out = plane
        .kubectl(&["explain", "deployments", "--recursive"])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for expected in [
        "GROUP:      apps",
        "KIND:       Deployment",
        "  spec\t<DeploymentSpec>",
        "    replicas\t<integer>",
        "    template\t<PodTemplateSpec> -required-",
        "        containers\t<[]Container> -required-",
    ] {
        assert!(text.contains(expected), "{expected:?} missing in:\n{text}");
    }
    plane.server.shutdown().await;
}

/// OpenAPI v3 is served as JSON only: a request that accepts only protobuf gets 406, as
/// upstream answers a format it does not produce. v2 is JSON or protobuf.
#[tokio::test]
async fn openapi_formats_follow_the_accept_header() {
    let plane = plane(false).await;
    let proto_v2 = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
    for (path, accept, code, content_type) in [
        (
            "/openapi/v3/api/v1",
            "application/com.github.proto-openapi.spec.v3@v1.0+protobuf",
            406,
            "",
        ),
        (
            "/openapi/v3/api/v1",
            "application/json",
            200,
            "application/json",
        ),
        (
            "/openapi/v3/api/v1",
            "application/com.github.proto-openapi.spec.v3@v1.0+protobuf, application/json",
            200,
            "application/json",
        ),
        ("/openapi/v2", "application/yaml", 406, ""),
        (
            "/openapi/v2",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
            200,
            proto_v2,
        ),
        (
            "/openapi/v2",
            "application/json;q=0.5, application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
            200,
            proto_v2,
        ),
        ("/openapi/v2", "*/*", 200, "application/json"),
    ] {
        let req = http::Request::get(path)
            .header("Accept", accept)
            .body(Vec::new())
            .unwrap();
        let resp = plane.client.send(req.map(Into::into)).await.unwrap();
        assert_eq!(resp.status().as_u16(), code, "{path} {accept}");
        let got = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if code == 200 {
            assert_eq!(got, content_type, "{path} {accept}");
        }
    }
    plane.server.shutdown().await;
}

/// kubectl falls back to the v2 document (protobuf) for client-side validation where the v3
/// documents cannot say whether the server validates: `kind: List`, and kinds whose CRD does
/// not exist yet; and `explain --output=plaintext-openapiv2` reads it.
#[tokio::test]
async fn kubectl_uses_the_v2_document_where_v3_cannot_answer() {
    let plane = plane(false).await;
    let list = "apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: l1, namespace: default}
  data: {a: \"1\"}
  bogus: 2
";
    let path = plane.file("list.yaml", list);
    let out = plane.kubectl(&["apply", "-f", &path]).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            "error validating data: ValidationError(ConfigMap): unknown field \"bogus\" in io.k8s.api.core.v1.ConfigMap"
        ),
        "{}",
        stderr(&out)
    );
    let path = plane.file("list-ok.yaml", &list.replace("  bogus: 2\n", ""));
    let out = plane.kubectl(&["apply", "-f", &path]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("configmap/l1 created"),
        "{}",
        stdout(&out)
    );
    // A CRD and one of its objects in one file: validated before the CRD exists (against v2,
    // which knows nothing of it), then mapped after it was created, as on a real cluster.
    let both = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
---
apiVersion: example.com/v1
kind: Gadget
metadata: {name: g1, namespace: default}
spec: {size: 3}
";
    let path = plane.file("both.yaml", both);
    let out = plane.kubectl(&["apply", "-f", &path]).await;
    assert!(
        stdout(&out)
            .contains("customresourcedefinition.apiextensions.k8s.io/gadgets.example.com created"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        !stderr(&out).contains("error validating"),
        "{}",
        stderr(&out)
    );
    let out = plane
        .kubectl(&[
            "explain",
            "pods.spec.containers",
            "--output=plaintext-openapiv2",
        ])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("RESOURCE: containers <[]Object>"),
        "{}",
        stdout(&out)
    );
    plane.server.shutdown().await;
}
