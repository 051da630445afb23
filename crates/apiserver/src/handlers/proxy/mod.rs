//! The streaming Pod subresources `pods/log`, `pods/exec` and `pods/attach`, proxied to the
//! kubelet API of the Pod's node (a Steward node agent) at
//! `https://<Node InternalIP>:<status.daemonEndpoints.kubeletEndpoint.Port>` (`tls`), as the
//! real server does: `GET /containerLogs/{ns}/{pod}/{container}` with the log options, and WebSocket
//! upgrades to `/exec/{ns}/{pod}/{container}` and `/attach/{ns}/{pod}/{container}`. Before any
//! I/O the Pod, the container and the Node are resolved with the real server's errors (see
//! `locate`, pure). Exec connects to the kubelet first with the subprotocols the client
//! offered, then accepts the client with the one the kubelet chose and pipes frames both ways
//! until either side closes. SPDY upgrades and `portforward` are not supported.

mod locate;
mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::extract::ws::{self, WebSocket, WebSocketUpgrade};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio_tungstenite::tungstenite::{self as tung, client::IntoClientRequest};
use tokio_util::sync::CancellationToken;

pub use self::locate::{StreamTarget, kubelet_addr, match_path};
use self::locate::{Sub, kubelet_query, locate};
pub use self::tls::connect as connect_kubelet;
use crate::registry::GroupResource;
use crate::server::Server;
use crate::status::{ApiError, ApiResult};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves a streaming subresource request.
pub async fn serve(server: Arc<Server>, mut parts: Parts, target: StreamTarget) -> Response {
    match serve_inner(server, &mut parts, target).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn serve_inner(
    server: Arc<Server>,
    parts: &mut Parts,
    target: StreamTarget,
) -> ApiResult<Response> {
    let params: Vec<(String, String)> = parts
        .uri
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let container = params
        .iter()
        .find(|(k, _)| k == "container")
        .map(|(_, v)| v.as_str());
    match (target.sub, &parts.method) {
        (Sub::Log, &Method::GET) => {}
        (Sub::Exec | Sub::Attach, &Method::GET | &Method::POST) => {}
        (_, m) => {
            return Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource ({m})"
            )));
        }
    }
    let location = {
        let state = server.lock();
        let pod = state
            .get(&GroupResource::new("", "pods"), &target.ns, &target.name)
            .cloned();
        locate(target.sub, pod.as_ref(), &target.name, container, |n| {
            state.get(&GroupResource::new("", "nodes"), "", n).cloned()
        })?
    };
    let query = kubelet_query(target.sub, &params)?;
    let Some(location) = location else {
        return Ok((StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], "").into_response());
    };
    let path = format!(
        "/{}/{}/{}/{}?{query}",
        target.sub.kubelet_path(),
        target.ns,
        target.name,
        location.container
    );
    match target.sub {
        Sub::Log => logs(location.addr, &path, server.cancel.clone()).await,
        Sub::Exec | Sub::Attach => stream(parts, location.addr, &path, server.cancel.clone()).await,
    }
}

/// A kubelet error answer as the real server reports it (`GenericHttpResponseChecker`): a
/// Status body is passed on; text becomes the message (400 → BadRequest, 500 → InternalError).
fn kubelet_error(code: u16, body: &[u8]) -> ApiError {
    if let Ok(v) = serde_json::from_slice::<Value>(body)
        && v["kind"] == "Status"
        && let Some(message) = v["message"].as_str()
    {
        let mut e = ApiError::new(code, reason_for(code), message);
        e.details = v.get("details").cloned();
        return e;
    }
    let text = String::from_utf8_lossy(body).trim_end().to_string();
    ApiError::new(code, reason_for(code), text)
}

fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        _ => "Unknown",
    }
}

async fn logs(addr: SocketAddr, path: &str, cancel: CancellationToken) -> ApiResult<Response> {
    let url = format!("https://{addr}{path}");
    let failed = |e: &dyn std::fmt::Display| ApiError::internal(format!("Get \"{url}\": {e}"));
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, tls::connect(addr))
        .await
        .map_err(|_| failed(&"dial tcp: i/o timeout"))?
        .map_err(|e| failed(&e))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| failed(&e))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "kubelet log connection ended");
        }
    });
    let req = http::Request::get(path)
        .header(header::HOST, addr.to_string())
        .body(Body::empty())
        .map_err(|e| failed(&e))?;
    let resp = sender.send_request(req).await.map_err(|e| failed(&e))?;
    let status = resp.status();
    if !status.is_success() {
        let body = axum::body::to_bytes(Body::new(resp.into_body()), 64 * 1024)
            .await
            .unwrap_or_default();
        return Err(kubelet_error(status.as_u16(), &body));
    }
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .cloned()
        .unwrap_or(HeaderValue::from_static("text/plain"));
    // Server shutdown ends a followed stream, as it ends watches.
    let body = Body::new(resp.into_body())
        .into_data_stream()
        .take_until(cancel.cancelled_owned());
    let mut out = Response::new(Body::from_stream(body));
    out.headers_mut().insert(header::CONTENT_TYPE, content_type);
    Ok(out)
}

async fn stream(
    parts: &mut Parts,
    addr: SocketAddr,
    path: &str,
    cancel: CancellationToken,
) -> ApiResult<Response> {
    let is_websocket = parts
        .headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !is_websocket {
        return Err(ApiError::bad_request(
            "Upgrade request required: the Steward local control plane streams exec and attach over WebSockets (v5.channel.k8s.io, v4.channel.k8s.io) only, not SPDY",
        ));
    }
    // kubectl may send the upgrade as POST; the WebSocket handshake itself is method-agnostic.
    parts.method = Method::GET;
    let upgrade = WebSocketUpgrade::from_request_parts(parts, &())
        .await
        .map_err(|e| ApiError::bad_request(e.body_text()))?;
    let offered = parts.headers.get(header::SEC_WEBSOCKET_PROTOCOL).cloned();
    let mut request = format!("wss://{addr}{path}")
        .into_client_request()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    if let Some(p) = offered {
        request
            .headers_mut()
            .insert(header::SEC_WEBSOCKET_PROTOCOL, p);
    }
    let url = format!("https://{addr}{path}");
    let connected = tokio::time::timeout(CONNECT_TIMEOUT, async {
        let stream = tls::connect(addr)
            .await
            .map_err(|e| ApiError::internal(format!("error dialing backend: {e}")))?;
        Ok::<_, ApiError>(tokio_tungstenite::client_async(request, stream).await)
    })
    .await
    .map_err(|_| {
        ApiError::internal(format!(
            "error dialing backend: dial tcp {addr}: i/o timeout"
        ))
    })??;
    let (kubelet, response) = match connected {
        Ok(ok) => ok,
        Err(tung::Error::Http(resp)) => {
            let code = resp.status().as_u16();
            let body = resp.body().clone().unwrap_or_default();
            return Err(kubelet_error(code, &body));
        }
        Err(e) => {
            return Err(ApiError::internal(format!(
                "error dialing backend: {e} ({url})"
            )));
        }
    };
    let chosen = response
        .headers()
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let upgrade = match chosen {
        Some(p) => upgrade.protocols([p]),
        None => upgrade,
    };
    Ok(upgrade.on_upgrade(move |client| pipe(client, kubelet, cancel)))
}

type KubeletSocket =
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

/// Copies frames both ways until either side closes (the close is passed on) or fails, or the
/// server shuts down.
async fn pipe(client: WebSocket, kubelet: KubeletSocket, cancel: CancellationToken) {
    let (mut client_tx, mut client_rx) = client.split();
    let (mut kubelet_tx, mut kubelet_rx) = kubelet.split();
    let upstream = async {
        while let Some(Ok(m)) = client_rx.next().await {
            let (msg, close) = match m {
                ws::Message::Binary(b) => (tung::Message::Binary(b), false),
                ws::Message::Text(t) => (tung::Message::text(t.as_str()), false),
                ws::Message::Close(f) => (
                    tung::Message::Close(f.map(|f| tung::protocol::CloseFrame {
                        code: f.code.into(),
                        reason: f.reason.as_str().into(),
                    })),
                    true,
                ),
                ws::Message::Ping(_) | ws::Message::Pong(_) => continue,
            };
            if kubelet_tx.send(msg).await.is_err() || close {
                break;
            }
        }
        let _ = kubelet_tx.close().await;
    };
    let downstream = async {
        while let Some(Ok(m)) = kubelet_rx.next().await {
            let (msg, close) = match m {
                tung::Message::Binary(b) => (ws::Message::Binary(b), false),
                tung::Message::Text(t) => (ws::Message::Text(t.as_str().into()), false),
                tung::Message::Close(f) => (
                    ws::Message::Close(f.map(|f| ws::CloseFrame {
                        code: f.code.into(),
                        reason: f.reason.as_str().into(),
                    })),
                    true,
                ),
                tung::Message::Ping(_) | tung::Message::Pong(_) | tung::Message::Frame(_) => {
                    continue;
                }
            };
            if client_tx.send(msg).await.is_err() || close {
                break;
            }
        }
        let _ = client_tx.close().await;
    };
    // Whichever direction ends first ends the session; the other side is closed with it.
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
        () = cancel.cancelled() => {}
    }
}
