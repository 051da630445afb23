//! Protobuf bodies (`application/vnd.kubernetes.protobuf`), as client-go and kubectl send
//! them: built-in kinds are created, read, listed and watched in protobuf, errors come back as
//! protobuf `Status`, custom resources refuse protobuf. The messages are built and read with
//! kube-rs's `k8s-pb` types (prost), independently of the server's own transcoder.

use std::collections::BTreeMap;

use http::Response;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::coordination::v1 as coordination;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::DynamicObject;
use prost::Message;
use serde_json::json;

use crate::support::*;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

fn envelope(api_version: &str, kind: &str, msg: &impl Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(msg.encode_to_vec()),
        ..Default::default()
    };
    let mut out = b"k8s\0".to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

/// The envelope's `(apiVersion, kind)` and its message.
fn open<M: Message + Default>(bytes: &[u8]) -> (String, String, M) {
    assert_eq!(&bytes[..4], b"k8s\0", "not an enveloped object: {bytes:?}");
    let unknown = Unknown::decode(&bytes[4..]).unwrap();
    let tm = unknown.type_meta.unwrap_or_default();
    let msg = M::decode(unknown.raw.unwrap_or_default().as_slice()).unwrap();
    (
        tm.api_version.unwrap_or_default(),
        tm.kind.unwrap_or_default(),
        msg,
    )
}

async fn send(
    env: &Env,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (Response<()>, Vec<u8>) {
    try_send(env, method, path, headers, body)
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// As [`send`], with a failed exchange (a reset stream) as an error.
async fn try_send(
    env: &Env,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<(Response<()>, Vec<u8>), String> {
    let mut req = http::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = env
        .client
        .send(req.body(body).unwrap().map(kube::client::Body::from))
        .await
        .map_err(|e| e.to_string())?;
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(axum::body::Body::new(body), 16 << 20)
        .await
        .map_err(|e| e.to_string())?;
    Ok((Response::from_parts(parts, ()), bytes.to_vec()))
}

fn content_type(resp: &Response<()>) -> &str {
    resp.headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// POSTs a protobuf object and returns the protobuf answer.
async fn create<M: Message + Default>(
    env: &Env,
    path: &str,
    api_version: &str,
    kind: &str,
    msg: &M,
) -> M {
    let (resp, body) = send(
        env,
        "POST",
        path,
        &[("Content-Type", PROTOBUF), ("Accept", PROTOBUF)],
        envelope(api_version, kind, msg),
    )
    .await;
    assert_eq!(
        resp.status(),
        201,
        "{path}: {}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(content_type(&resp), PROTOBUF);
    let (v, k, created) = open::<M>(&body);
    assert_eq!((v.as_str(), k.as_str()), (api_version, kind));
    created
}

fn object_meta(name: &str) -> Option<meta::ObjectMeta> {
    Some(meta::ObjectMeta {
        name: Some(name.into()),
        labels: BTreeMap::from([("app".to_string(), name.to_string())]),
        ..Default::default()
    })
}

/// An `IntOrString` as Go's marshaller writes it: all three fields, the unused one zero.
fn int_or_string(v: serde_json::Value) -> Option<IntOrString> {
    Some(match v {
        serde_json::Value::String(s) => IntOrString {
            r#type: Some(1),
            int_val: Some(0),
            str_val: Some(s),
        },
        n => IntOrString {
            r#type: Some(0),
            int_val: n.as_i64().map(|n| n as i32),
            str_val: Some(String::new()),
        },
    })
}

#[tokio::test]
async fn built_in_kinds_are_created_and_read_in_protobuf() {
    let env = env("protobuf_crud").await;
    let ns = env.ns.clone();

    // ConfigMap: strings and a map (an empty value stays).
    let cm = core::ConfigMap {
        metadata: object_meta("pb-cm"),
        data: BTreeMap::from([
            ("greeting".to_string(), "hello".to_string()),
            ("empty".to_string(), String::new()),
        ]),
        ..Default::default()
    };
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let created = create(&env, &path, "v1", "ConfigMap", &cm).await;
    let md = created.metadata.clone().unwrap_or_default();
    assert_eq!(md.name.as_deref(), Some("pb-cm"));
    assert_eq!(md.namespace.as_deref(), Some(ns.as_str()));
    assert!(md.uid.as_ref().is_some_and(|u| !u.is_empty()));
    assert!(md.resource_version.as_ref().is_some_and(|v| !v.is_empty()));
    let created_at = md.creation_timestamp.and_then(|t| t.seconds).unwrap_or(0);
    assert!(created_at > 1_700_000_000, "creationTimestamp {created_at}");
    assert_eq!(created.data.get("empty").map(String::as_str), Some(""));
    // What JSON clients read is what the protobuf body said.
    let json_cm: ConfigMap = env.api::<ConfigMap>().get("pb-cm").await.unwrap();
    assert_eq!(json_cm.data.unwrap()["greeting"], "hello");
    assert_eq!(json_cm.metadata.labels.unwrap()["app"], "pb-cm");

    // Secret: bytes.
    let raw = vec![0u8, 159, 146, 150, b'x'];
    let secret = core::Secret {
        metadata: object_meta("pb-secret"),
        data: BTreeMap::from([("password".to_string(), raw.clone())]),
        r#type: Some("Opaque".into()),
        ..Default::default()
    };
    let path = format!("/api/v1/namespaces/{ns}/secrets");
    let created = create(&env, &path, "v1", "Secret", &secret).await;
    assert_eq!(created.data["password"], raw);
    let json_secret: Secret = env.api::<Secret>().get("pb-secret").await.unwrap();
    assert_eq!(json_secret.data.unwrap()["password"].0, raw);

    // Service: int-or-string ports, defaults filled in by the server.
    let port = |name: &str, port: i32, target: serde_json::Value| core::ServicePort {
        name: Some(name.into()),
        port: Some(port),
        target_port: int_or_string(target),
        ..Default::default()
    };
    let svc = core::Service {
        metadata: object_meta("pb-svc"),
        spec: Some(core::ServiceSpec {
            selector: BTreeMap::from([("app".to_string(), "pb".to_string())]),
            ports: vec![port("a", 80, json!(8080)), port("b", 81, json!("web"))],
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = format!("/api/v1/namespaces/{ns}/services");
    let created = create(&env, &path, "v1", "Service", &svc).await;
    let spec = created.spec.unwrap_or_default();
    assert!(
        spec.cluster_ip.is_some_and(|ip| !ip.is_empty()),
        "a cluster IP is allocated"
    );
    assert_eq!(spec.ports[0].protocol.as_deref(), Some("TCP"));
    assert_eq!(spec.ports[0].target_port, int_or_string(json!(8080)));
    assert_eq!(spec.ports[1].target_port, int_or_string(json!("web")));
    let json_svc: Service = env.api::<Service>().get("pb-svc").await.unwrap();
    let ports = json_svc.spec.unwrap().ports.unwrap();
    assert_eq!(
        serde_json::to_value(&ports[0].target_port).unwrap(),
        json!(8080)
    );
    assert_eq!(
        serde_json::to_value(&ports[1].target_port).unwrap(),
        json!("web")
    );

    // Deployment: a nested template, a pointer integer that is zero, an inlined probe handler.
    let deploy = apps::Deployment {
        metadata: object_meta("pb-deploy"),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(0),
            selector: Some(meta::LabelSelector {
                match_labels: BTreeMap::from([("app".to_string(), "pb-deploy".to_string())]),
                ..Default::default()
            }),
            template: Some(core::PodTemplateSpec {
                metadata: object_meta("pb-deploy"),
                spec: Some(core::PodSpec {
                    containers: vec![core::Container {
                        name: Some("main".into()),
                        image: Some("registry.example/app:1".into()),
                        args: vec!["--flag".into()],
                        readiness_probe: Some(core::Probe {
                            handler: Some(core::ProbeHandler {
                                http_get: Some(core::HttpGetAction {
                                    path: Some("/ready".into()),
                                    port: int_or_string(json!("http")),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            }),
                            period_seconds: Some(5),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = format!("/apis/apps/v1/namespaces/{ns}/deployments");
    let created = create(&env, &path, "apps/v1", "Deployment", &deploy).await;
    assert_eq!(created.spec.and_then(|s| s.replicas), Some(0));
    let json_deploy: Deployment = env.api::<Deployment>().get("pb-deploy").await.unwrap();
    let spec = json_deploy.spec.unwrap();
    assert_eq!(spec.replicas, Some(0));
    let container = &spec.template.spec.unwrap().containers[0];
    assert_eq!(container.args.as_deref(), Some(&["--flag".to_string()][..]));
    let probe = container.readiness_probe.as_ref().unwrap();
    assert_eq!(
        probe.http_get.as_ref().unwrap().path.as_deref(),
        Some("/ready")
    );
    assert_eq!(probe.period_seconds, Some(5));

    // Lease: MicroTime keeps its microseconds.
    let lease = coordination::Lease {
        metadata: object_meta("pb-lease"),
        spec: Some(coordination::LeaseSpec {
            holder_identity: Some("me".into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(meta::MicroTime {
                seconds: Some(1_800_000_000),
                nanos: Some(123_456_000),
            }),
            ..Default::default()
        }),
    };
    let path = format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases");
    let created = create(&env, &path, "coordination.k8s.io/v1", "Lease", &lease).await;
    let renew = created.spec.and_then(|s| s.renew_time).unwrap_or_default();
    assert_eq!(renew.nanos, Some(123_456_000));
    let json_lease: Lease = env.api::<Lease>().get("pb-lease").await.unwrap();
    let renew = json_lease.spec.unwrap().renew_time.unwrap().0;
    assert_eq!(renew.as_second(), 1_800_000_000);
    assert_eq!(renew.subsec_microsecond(), 123_456);

    // GET and LIST in protobuf.
    let (resp, body) = send(
        &env,
        "GET",
        &format!("/api/v1/namespaces/{ns}/configmaps/pb-cm"),
        &[("Accept", PROTOBUF)],
        Vec::new(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let (_, kind, got) = open::<core::ConfigMap>(&body);
    assert_eq!(kind, "ConfigMap");
    assert_eq!(got.data["greeting"], "hello");
    let (resp, body) = send(
        &env,
        "GET",
        &format!("/api/v1/namespaces/{ns}/configmaps?labelSelector=app%3Dpb-cm"),
        &[(
            "Accept",
            "application/vnd.kubernetes.protobuf, application/json",
        )],
        Vec::new(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let (_, kind, list) = open::<core::ConfigMapList>(&body);
    assert_eq!(kind, "ConfigMapList");
    assert_eq!(list.items.len(), 1);
    assert!(
        list.metadata
            .and_then(|m| m.resource_version)
            .is_some_and(|v| !v.is_empty())
    );

    // PUT and DELETE with protobuf bodies (DeleteOptions is a meta kind).
    let mut update = got.clone();
    update.data.insert("greeting".into(), "bye".into());
    let (resp, body) = send(
        &env,
        "PUT",
        &format!("/api/v1/namespaces/{ns}/configmaps/pb-cm"),
        &[("Content-Type", PROTOBUF), ("Accept", PROTOBUF)],
        envelope("v1", "ConfigMap", &update),
    )
    .await;
    assert_eq!(resp.status(), 200, "{}", String::from_utf8_lossy(&body));
    let json_cm: ConfigMap = env.api::<ConfigMap>().get("pb-cm").await.unwrap();
    assert_eq!(json_cm.data.unwrap()["greeting"], "bye");
    // A precondition that does not hold is refused: the options were read.
    let options = |uid: &str| meta::DeleteOptions {
        preconditions: Some(meta::Preconditions {
            uid: Some(uid.into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = format!("/api/v1/namespaces/{ns}/configmaps/pb-cm");
    let headers = [("Content-Type", PROTOBUF), ("Accept", PROTOBUF)];
    let (resp, _) = send(
        &env,
        "DELETE",
        &path,
        &headers,
        envelope("v1", "DeleteOptions", &options("not-the-uid")),
    )
    .await;
    assert_eq!(resp.status(), 409);
    let uid = md.uid.clone().unwrap_or_default();
    let (resp, body) = send(
        &env,
        "DELETE",
        &path,
        &headers,
        envelope("v1", "DeleteOptions", &options(&uid)),
    )
    .await;
    assert_eq!(resp.status(), 200, "{}", String::from_utf8_lossy(&body));
    assert!(
        env.api::<ConfigMap>()
            .get_opt("pb-cm")
            .await
            .unwrap()
            .is_none()
    );
    env.finish().await;
}

#[tokio::test]
async fn errors_come_back_as_protobuf_status() {
    let env = env("protobuf_status").await;
    let (resp, body) = send(
        &env,
        "GET",
        &format!("/api/v1/namespaces/{}/configmaps/missing", env.ns),
        &[("Accept", PROTOBUF)],
        Vec::new(),
    )
    .await;
    assert_eq!(resp.status(), 404);
    assert_eq!(content_type(&resp), PROTOBUF);
    let (api_version, kind, status) = open::<meta::Status>(&body);
    assert_eq!((api_version.as_str(), kind.as_str()), ("v1", "Status"));
    assert_eq!(status.reason.as_deref(), Some("NotFound"));
    assert_eq!(status.code, Some(404));
    assert_eq!(
        status.details.and_then(|d| d.name).as_deref(),
        Some("missing")
    );
    env.finish().await;
}

#[tokio::test]
async fn watches_stream_length_prefixed_protobuf_events() {
    let env = env("protobuf_watch").await;
    let ns = env.ns.clone();
    let api = env.api::<ConfigMap>();
    api.create(&Default::default(), &cm("before", json!({"a": "1"})))
        .await
        .unwrap();
    let req = http::Request::get(format!(
        "/api/v1/namespaces/{ns}/configmaps?watch=true&timeoutSeconds=5"
    ))
    .header("Accept", "application/vnd.kubernetes.protobuf;stream=watch")
    .body(kube::client::Body::empty())
    .unwrap();
    let resp = env.client.send(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"],
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    let mut body = axum::body::Body::new(resp.into_body()).into_data_stream();
    api.create(&Default::default(), &cm("after", json!({"b": "2"})))
        .await
        .unwrap();
    let mut buf = Vec::new();
    let mut events: Vec<(String, core::ConfigMap)> = Vec::new();
    while events.len() < 2 {
        use futures::StreamExt;
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), body.next())
            .await
            .expect("an event within 10 s")
            .expect("the stream is open")
            .unwrap();
        buf.extend_from_slice(&chunk);
        while buf.len() >= 4 {
            let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if buf.len() < 4 + len {
                break;
            }
            let event = meta::WatchEvent::decode(&buf[4..4 + len]).unwrap();
            let raw = event.object.and_then(|o| o.raw).unwrap_or_default();
            let (_, kind, object) = open::<core::ConfigMap>(&raw);
            assert_eq!(kind, "ConfigMap");
            buf.drain(..4 + len);
            // Every namespace gets `kube-root-ca.crt` from the root CA publisher, at a moment
            // of its own (on any API server): not this test's.
            let name = object.metadata.as_ref().and_then(|m| m.name.as_deref());
            if name == Some("kube-root-ca.crt") {
                continue;
            }
            events.push((event.r#type.unwrap_or_default(), object));
        }
    }
    let seen: Vec<(&str, &str)> = events
        .iter()
        .map(|(t, o)| {
            let name = o.metadata.as_ref().and_then(|m| m.name.as_deref());
            (t.as_str(), name.unwrap_or_default())
        })
        .collect();
    assert_eq!(seen, [("ADDED", "before"), ("ADDED", "after")]);
    assert_eq!(events[1].1.data["b"], "2");
    env.finish().await;
}

#[tokio::test]
async fn custom_resources_refuse_protobuf() {
    let mut env = env("protobuf_custom").await;
    let ar = env.crd("pbwidgets", widget_versions(false, false)).await;
    env.dynamic(&ar)
        .create(
            &Default::default(),
            &dynobj(&ar, "w", json!({"replicas": 1})),
        )
        .await
        .unwrap();
    let base = format!(
        "/apis/{}/{}/namespaces/{}/{}",
        ar.group, ar.version, env.ns, ar.plural
    );
    // A protobuf body: 415 (custom resources have no protobuf serializer; upstream's
    // `crdHandler` lists only JSON and YAML for them).
    let cm = core::ConfigMap {
        metadata: object_meta("x"),
        ..Default::default()
    };
    let sent = try_send(
        &env,
        "POST",
        &base,
        &[("Content-Type", PROTOBUF)],
        envelope(&ar.api_version, &ar.kind, &cm),
    )
    .await;
    if env.real {
        // kube-apiserver 1.36.2 panics on this request (a nil pointer in
        // `schemaCoercingDecoder.Decode`, the protobuf body reaching a decoder that has no
        // protobuf serializer) and the stream is reset. That is an upstream bug, not an answer
        // to hold the embedded server to; on a real server only "no write" is asserted (below).
        if let Ok((resp, _)) = &sent {
            assert!(!resp.status().is_success(), "{}", resp.status());
        }
    } else {
        let (resp, _) = sent.unwrap();
        assert_eq!(resp.status(), 415);
    }
    // Never a write.
    let (resp, _) = send(&env, "GET", &format!("{base}/x"), &[], Vec::new()).await;
    assert_eq!(resp.status(), 404);
    // Only protobuf accepted: 406. Protobuf preferred with JSON as a fallback: the embedded
    // server falls back to JSON; a real one may still answer 406 (kubernetes#86253).
    let (resp, _) = send(
        &env,
        "GET",
        &format!("{base}/w"),
        &[("Accept", PROTOBUF)],
        Vec::new(),
    )
    .await;
    assert_eq!(resp.status(), 406);
    let (resp, body) = send(
        &env,
        "GET",
        &format!("{base}/w"),
        &[(
            "Accept",
            "application/vnd.kubernetes.protobuf, application/json",
        )],
        Vec::new(),
    )
    .await;
    if env.real && resp.status() == 406 {
        env.finish().await;
        return;
    }
    assert_eq!(resp.status(), 200);
    assert!(content_type(&resp).starts_with("application/json"));
    let obj: DynamicObject = serde_json::from_slice(&body).unwrap();
    assert_eq!(obj.data["spec"]["replicas"], 1);
    env.finish().await;
}

/// Created as JSON, read as protobuf, written back as protobuf, listed as protobuf.
async fn round_trip<K>(env: &Env, name: &str, body: serde_json::Value)
where
    K: k8s_pb::Metadata<Ty = meta::ObjectMeta> + Message + Default,
{
    let base = if K::GROUP.is_empty() {
        format!("/api/v1/namespaces/{}/{}", env.ns, K::URL_PATH_SEGMENT)
    } else {
        format!(
            "/apis/{}/namespaces/{}/{}",
            K::API_VERSION,
            env.ns,
            K::URL_PATH_SEGMENT
        )
    };
    let mut body = body;
    body["apiVersion"] = json!(K::API_VERSION);
    body["kind"] = json!(K::KIND);
    body["metadata"] = json!({"name": name, "labels": {"pb": name}});
    let created = raw(env, "POST", &base, "application/json", body)
        .await
        .unwrap_or_else(|e| panic!("{} {name}: {e}", K::KIND));
    let path = format!("{base}/{name}");
    // Read as protobuf and written back as read: accepted, and JSON readers see the same
    // object. A controller may write the object (its status) between the read and the write,
    // which makes the write a 409 conflict, as on any API server: read again and retry.
    let mut attempts = 0;
    loop {
        attempts += 1;
        let (resp, bytes) = send(env, "GET", &path, &[("Accept", PROTOBUF)], Vec::new()).await;
        assert_eq!(resp.status(), 200, "{}", K::KIND);
        let (api_version, kind, object) = open::<K>(&bytes);
        assert_eq!(
            (api_version.as_str(), kind.as_str()),
            (K::API_VERSION, K::KIND)
        );
        let md = object.metadata().cloned().unwrap_or_default();
        assert_eq!(
            md.uid.as_deref(),
            created["metadata"]["uid"].as_str(),
            "{}",
            K::KIND
        );
        assert_eq!(md.labels.get("pb").map(String::as_str), Some(name));
        let (resp, bytes) = send(
            env,
            "PUT",
            &path,
            &[("Content-Type", PROTOBUF), ("Accept", PROTOBUF)],
            envelope(K::API_VERSION, K::KIND, &object),
        )
        .await;
        if resp.status() == 409 && attempts < 10 {
            continue;
        }
        assert_eq!(
            resp.status(),
            200,
            "{} {}",
            K::KIND,
            String::from_utf8_lossy(&bytes)
        );
        break;
    }
    let after = raw_text(env, &path).await.unwrap();
    let after: serde_json::Value = serde_json::from_str(&after).unwrap();
    assert_eq!(after["metadata"]["uid"], created["metadata"]["uid"]);
    for field in [
        "spec", "data", "rules", "subjects", "roleRef", "subsets", "reason", "secrets",
    ] {
        if let Some(before) = created.get(field) {
            assert!(
                json_contains(&after[field], before),
                "{} {field}: {before} became {}",
                K::KIND,
                after[field]
            );
        }
    }
    let (resp, bytes) = send(
        env,
        "GET",
        &format!("{base}?labelSelector=pb%3D{name}"),
        &[("Accept", PROTOBUF)],
        Vec::new(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let unknown = Unknown::decode(&bytes[4..]).unwrap();
    let kind = unknown.type_meta.and_then(|t| t.kind).unwrap_or_default();
    assert_eq!(kind, format!("{}List", K::KIND));
}

/// Every field of `want` is in `got` with the same value (protobuf may add zero values).
fn json_contains(got: &serde_json::Value, want: &serde_json::Value) -> bool {
    match (got, want) {
        (serde_json::Value::Object(g), serde_json::Value::Object(w)) => w
            .iter()
            .all(|(k, v)| g.get(k).is_some_and(|gv| json_contains(gv, v))),
        (serde_json::Value::Array(g), serde_json::Value::Array(w)) => {
            g.len() == w.len() && g.iter().zip(w).all(|(a, b)| json_contains(a, b))
        }
        (g, w) => g == w,
    }
}

#[tokio::test]
async fn every_kind_steward_uses_round_trips_through_protobuf() {
    use k8s_pb::api::{batch::v1 as batch, policy::v1 as policy, rbac::v1 as rbac};
    let env = env("protobuf_kinds").await;
    let pod_spec = json!({"containers": [{"name": "c", "image": "registry.example/c:1",
        "ports": [{"containerPort": 2379, "name": "client"}],
        "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "client"}, "periodSeconds": 5},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "pb-claim"}}],
        "terminationGracePeriodSeconds": 0});
    let template = json!({"metadata": {"labels": {"app": "pb"}}, "spec": pod_spec});
    // No scheduler serves this name: a scheduler writing the Pod's status between the test's
    // read and its write back would make that write a 409 conflict.
    let mut unscheduled = pod_spec.clone();
    unscheduled["schedulerName"] = json!("steward-conformance-none");
    round_trip::<core::Pod>(&env, "pb-pod", json!({"spec": unscheduled})).await;
    round_trip::<core::PersistentVolumeClaim>(
        &env,
        "pb-claim",
        json!({"spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
    round_trip::<core::ServiceAccount>(&env, "pb-sa", json!({})).await;
    round_trip::<core::Endpoints>(
        &env,
        "pb-ep",
        json!({"subsets": [{
        "addresses": [{"ip": "10.0.0.9"}], "ports": [{"port": 5432, "name": "pg"}]}]}),
    )
    .await;
    round_trip::<apps::StatefulSet>(
        &env,
        "pb-sts",
        json!({"spec": {"replicas": 0,
        "serviceName": "pb", "selector": {"matchLabels": {"app": "pb"}}, "template": template,
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}),
    )
    .await;
    round_trip::<policy::PodDisruptionBudget>(
        &env,
        "pb-pdb",
        json!({"spec": {
        "minAvailable": 2, "selector": {"matchLabels": {"app": "pb"}}}}),
    )
    .await;
    round_trip::<rbac::Role>(
        &env,
        "pb-role",
        json!({"rules": [{"apiGroups": [""],
        "resources": ["pods"], "verbs": ["get", "list"]}]}),
    )
    .await;
    round_trip::<rbac::RoleBinding>(
        &env,
        "pb-binding",
        json!({
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pb-role"},
        "subjects": [{"kind": "ServiceAccount", "name": "pb-sa", "namespace": env.ns}]}),
    )
    .await;
    let mut job_template = template.clone();
    job_template["spec"]["restartPolicy"] = json!("Never");
    round_trip::<batch::Job>(
        &env,
        "pb-job",
        json!({"spec": {"suspend": true,
        "template": job_template}}),
    )
    .await;
    env.finish().await;
}
