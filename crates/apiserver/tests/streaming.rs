//! `pods/log`, `pods/exec` and `pods/attach` through the embedded server to a stub kubelet (a
//! test double of the kubelet API only: the real node agent is tested in its own crate), with
//! kube-rs' `logs`, `log_stream`, `exec` and `attach`, and the errors the real server gives
//! before it reaches a kubelet.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ws::{Message, WebSocketUpgrade};
use axum::extract::{Path, RawQuery};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{AttachParams, LogParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use steward_apiserver::{ApiServerHandle, ServerConfig, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A client configuration for `server` with its admin token.
fn admin_config(server: &steward_apiserver::ApiServerHandle) -> kube::Config {
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.auth_info.token = Some(server.admin_token().into());
    config
}

fn params(q: &Option<String>) -> Vec<(String, String)> {
    q.as_deref()
        .map(|q| {
            q.split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.replace('+', " ")))
                .collect()
        })
        .unwrap_or_default()
}

async fn container_logs(
    Path((ns, pod, container)): Path<(String, String, String)>,
    RawQuery(q): RawQuery,
) -> Response {
    if container == "sleepy" {
        return (
            StatusCode::BAD_REQUEST,
            format!("container \"sleepy\" in pod \"{pod}\" is waiting to start: ContainerCreating"),
        )
            .into_response();
    }
    let q = q.unwrap_or_default();
    if q.contains("follow=true") {
        let lines = futures::stream::iter(0..3).then(|i| async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            Ok::<_, std::io::Error>(format!("tick {i}\n"))
        });
        return Body::from_stream(lines).into_response();
    }
    format!("{ns}/{pod}/{container}\nquery {q}\n").into_response()
}

/// Reads the parameters under the kubelet's names (`input`, `output`, `error`, set to `1`), as
/// a real kubelet does: echoes stdin to stdout when `input=1`, then prints the command (if
/// `output=1`) and a warning (if `error=1`) and reports success on the error channel.
async fn exec(
    Path((ns, pod, container)): Path<(String, String, String)>,
    RawQuery(q): RawQuery,
    ws: WebSocketUpgrade,
) -> Response {
    let p = params(&q);
    let command: Vec<String> = p
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    let flag = |name: &str| p.iter().any(|(k, v)| k == name && v == "1");
    let (stdin, stdout, stderr) = (flag("input"), flag("output"), flag("error"));
    ws.protocols(["v5.channel.k8s.io", "v4.channel.k8s.io"])
        .on_upgrade(move |mut s| async move {
            let frame = |ch: u8, data: &[u8]| {
                let mut v = vec![ch];
                v.extend_from_slice(data);
                Message::Binary(v.into())
            };
            if stdin {
                while let Some(Ok(Message::Binary(b))) = s.recv().await {
                    match b.first() {
                        Some(0) if stdout => s.send(frame(1, &b[1..])).await.unwrap(),
                        Some(255) => break,
                        _ => {}
                    }
                }
            }
            let line = format!("{ns}/{pod}/{container}: {}\n", command.join(" "));
            if stdout {
                s.send(frame(1, line.as_bytes())).await.unwrap();
            }
            if stderr {
                s.send(frame(2, b"warning\n")).await.unwrap();
            }
            s.send(frame(3, br#"{"metadata":{},"status":"Success"}"#))
                .await
                .unwrap();
            let _ = s.send(Message::Close(None)).await;
        })
}

struct Env {
    client: Client,
    server: ApiServerHandle,
}

/// Serves `app` over HTTPS with a self-signed certificate, as a kubelet serves its API.
async fn serve_tls(listener: tokio::net::TcpListener, app: Router) {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    loop {
        let (tcp, _) = listener.accept().await.unwrap();
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let _ =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection_with_upgrades(
                        hyper_util::rt::TokioIo::new(stream),
                        hyper_util::service::TowerToHyperService::new(app),
                    )
                    .await;
        });
    }
}

/// The embedded server, a stub kubelet, a Node `n1` pointing at it and Pods `web` (one
/// container, on n1), `duo` (two containers, on n1), `floating` (unbound), `lost` (on a
/// missing node).
async fn setup() -> Env {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubelet = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = kubelet.local_addr().unwrap().port();
    let app = Router::new()
        .route("/containerLogs/{ns}/{pod}/{c}", get(container_logs))
        .route("/exec/{ns}/{pod}/{c}", get(exec))
        .route("/attach/{ns}/{pod}/{c}", get(exec));
    tokio::spawn(serve_tls(kubelet, app));
    let server = start(ServerConfig::default()).await.unwrap();
    let client = Client::try_from(admin_config(&server)).unwrap();
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1"}, "status": {
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": "n1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        "conditions": [{"type": "Ready", "status": "True"}]}}))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, containers, node) in [
        ("web", vec!["app"], Some("n1")),
        ("duo", vec!["a", "b"], Some("n1")),
        ("floating", vec!["app"], None),
        ("lost", vec!["app"], Some("gone")),
    ] {
        let cs: Vec<_> = containers
            .iter()
            .chain(["sleepy"].iter().filter(|_| name == "duo"))
            .map(|c| json!({"name": c, "image": "busybox:1"}))
            .collect();
        let mut spec = json!({"containers": cs, "schedulerName": "none"});
        if let Some(n) = node {
            spec["nodeName"] = json!(n);
        }
        let p: Pod =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    Env { client, server }
}

fn api_status<T>(r: Result<T, kube::Error>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.message),
        Err(other) => panic!("expected an API error, got {other:?}"),
        Ok(_) => panic!("expected an API error, got success"),
    }
}

#[tokio::test]
async fn logs_are_proxied_and_streamed() {
    let env = setup().await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let text = pods
        .logs(
            "web",
            &LogParams {
                tail_lines: Some(5),
                timestamps: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(text, "default/web/app\nquery timestamps=true&tailLines=5\n");
    let lines: Vec<String> = pods
        .log_stream(
            "web",
            &LogParams {
                follow: true,
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .lines()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(lines, ["tick 0", "tick 1", "tick 2"]);
    // Logs of an unbound Pod are empty, as on a real server.
    assert_eq!(
        pods.logs("floating", &LogParams::default()).await.unwrap(),
        ""
    );
    // Kubelet errors come back as Status errors.
    let sleepy = LogParams {
        container: Some("sleepy".into()),
        ..Default::default()
    };
    assert_eq!(
        api_status(pods.logs("duo", &sleepy).await),
        (
            400,
            "container \"sleepy\" in pod \"duo\" is waiting to start: ContainerCreating".into()
        )
    );
    env.server.shutdown().await;
}

#[tokio::test]
async fn pod_and_container_errors_match_the_real_server() {
    let env = setup().await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let lp = LogParams::default();
    assert_eq!(
        api_status(pods.logs("nope", &lp).await),
        (404, "pods \"nope\" not found".into())
    );
    assert_eq!(
        api_status(pods.logs("duo", &lp).await),
        (
            400,
            "a container name must be specified for pod duo, choose one of: [a b sleepy]".into()
        )
    );
    let zz = LogParams {
        container: Some("zz".into()),
        ..Default::default()
    };
    assert_eq!(
        api_status(pods.logs("web", &zz).await),
        (400, "container zz is not valid for pod web".into())
    );
    assert_eq!(
        api_status(pods.logs("lost", &lp).await),
        (404, "nodes \"gone\" not found".into())
    );
    let ap = AttachParams::default().stdout(true).stderr(false);
    assert_eq!(
        api_status(pods.exec("floating", ["true"], &ap).await),
        (400, "pod floating does not have a host assigned".into())
    );
    env.server.shutdown().await;
}

#[tokio::test]
async fn exec_and_attach_pipe_websocket_frames() {
    let env = setup().await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let mut p = pods
        .exec(
            "duo",
            ["sh", "-c", "echo hi"],
            &AttachParams::default()
                .container("b")
                .stdout(true)
                .stderr(true),
        )
        .await
        .unwrap();
    let mut out = String::new();
    let mut err = String::new();
    let (mut so, mut se) = (p.stdout().unwrap(), p.stderr().unwrap());
    let status = p.take_status().unwrap();
    let (a, b) = tokio::join!(so.read_to_string(&mut out), se.read_to_string(&mut err));
    a.unwrap();
    b.unwrap();
    assert_eq!(out, "default/duo/b: sh -c echo hi\n");
    assert_eq!(err, "warning\n");
    assert_eq!(status.await.unwrap().status.as_deref(), Some("Success"));
    p.join().await.unwrap();

    // stdin is passed through and its end signalled (v5 close frame).
    let mut p = pods
        .exec(
            "web",
            ["cat"],
            &AttachParams::default()
                .stdin(true)
                .stdout(true)
                .stderr(false),
        )
        .await
        .unwrap();
    let mut stdin = p.stdin().unwrap();
    stdin.write_all(b"ping\n").await.unwrap();
    stdin.shutdown().await.unwrap();
    let mut out = String::new();
    p.stdout().unwrap().read_to_string(&mut out).await.unwrap();
    assert_eq!(out, "ping\ndefault/web/app: cat\n");
    p.join().await.unwrap();

    let mut p = pods
        .attach("web", &AttachParams::default().stdout(true).stderr(false))
        .await
        .unwrap();
    let mut out = String::new();
    p.stdout().unwrap().read_to_string(&mut out).await.unwrap();
    assert_eq!(out, "default/web/app: \n");
    p.join().await.unwrap();
    env.server.shutdown().await;
}
