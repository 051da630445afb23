//! `pods/portforward` over SPDY/3.1, as the kubelet serves kube-apiserver
//! (`pkg/kubelet/cri/streaming/portforward/httpstream.go`): `GET|POST /portForward/{ns}/{pod}`
//! upgraded with `portforward.k8s.io`; every forwarded connection is a pair of streams that
//! share a `requestid` header (older clients: derived from the stream ids) and carry the
//! `port`: `streamtype: error` and `streamtype: data`. Once a pair is complete the agent
//! connects to the Pod's own address (each Pod here has an address of its own, see `ipam`)
//! at that port and copies both ways until one direction ends and the other has had a second
//! to follow (as containerd's forwarder does); a failure is written on the error stream; both
//! streams are then closed. The session lasts as long as the connection.
//!
//! Not served: port-forward over WebSocket (`v4.channel.k8s.io`/`portforward.k8s.io` tunnelled
//! in WebSocket frames), and the timeout for a pair whose second stream never comes (it waits
//! for the connection's end).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use super::error;
use super::exec::pump;
use super::spdy::frame::rst;
use super::spdy::{self, Connection, Stream};
use crate::agent::Shared;

pub const PROTOCOLS: [&str; 1] = ["portforward.k8s.io"];
/// How long the other direction may go on once one has ended.
const HALF_CLOSED_GRACE: Duration = Duration::from_secs(1);

pub async fn port_forward(
    State(shared): State<Arc<Shared>>,
    Path((namespace, pod)): Path<(String, String)>,
    req: Request,
) -> Response {
    if !spdy::is_upgrade(req.headers()) {
        return error(
            StatusCode::BAD_REQUEST,
            "the Steward node agent serves port-forward over SPDY/3.1 only (Upgrade: SPDY/3.1); port-forward over WebSocket is not supported",
        );
    }
    let protocol = match spdy::negotiate(req.headers(), &PROTOCOLS) {
        Ok(p) => p,
        Err(refused) => return refused.into_response(),
    };
    let Some(rt) = shared.registry.find(&namespace, &pod) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("pod \"{pod}\" not found in namespace \"{namespace}\" on this node"),
        );
    };
    let Some(ip) = rt.ip else {
        return error(
            StatusCode::BAD_REQUEST,
            format!("pod \"{pod}\" has no IP address to forward to"),
        );
    };
    let target = Target {
        ip,
        pod,
        uid: rt.uid.clone(),
    };
    spdy::upgrade(req, protocol, move |conn| session(conn, target))
}

struct Target {
    ip: Ipv4Addr,
    pod: String,
    uid: String,
}

#[derive(Default)]
struct Pair {
    error: Option<Stream>,
    data: Option<Stream>,
}

async fn session(mut conn: Connection, target: Target) {
    let target = Arc::new(target);
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    let mut forwards = JoinSet::new();
    while let Some(stream) = conn.accept().await {
        let (port, is_error) = match check(&stream) {
            Ok(v) => v,
            Err(why) => {
                tracing::debug!(stream = stream.id, why, "port-forward stream refused");
                stream.reset(rst::PROTOCOL_ERROR).await;
                continue;
            }
        };
        if stream.reply().await.is_err() {
            break;
        }
        let id = match stream.header("requestid") {
            Some(id) => id.to_string(),
            // Clients before request ids open error then data with consecutive odd ids.
            None if is_error => stream.id.to_string(),
            None => stream.id.saturating_sub(2).to_string(),
        };
        let pair = pairs.entry(id.clone()).or_default();
        let slot = if is_error {
            &mut pair.error
        } else {
            &mut pair.data
        };
        if slot.is_some() {
            let kind = if is_error { "error" } else { "data" };
            let message =
                format!("error processing stream for request {id}: {kind} stream already assigned");
            if let Some(e) = &pair.error {
                let _ = e.writer().write(message.as_bytes()).await;
            }
            stream.reset(rst::PROTOCOL_ERROR).await;
            continue;
        }
        *slot = Some(stream);
        let complete = pairs
            .get(&id)
            .is_some_and(|p| p.error.is_some() && p.data.is_some());
        if complete
            && let Some(Pair {
                error: Some(error),
                data: Some(data),
            }) = pairs.remove(&id)
        {
            // The port is the data stream's, as the kubelet reads it.
            let port = check(&data).map_or(port, |(p, _)| p);
            forwards.spawn(forward(error, data, port, target.clone()));
        }
    }
    forwards.shutdown().await;
    conn.close().await;
}

/// The stream's port and whether it is the error stream (else data), or why it is refused.
fn check(stream: &Stream) -> Result<(u16, bool), &'static str> {
    let port = match stream.header("port").map(str::parse::<u16>) {
        None => return Err("\"port\" header is required"),
        Some(Ok(p)) if p > 0 => p,
        Some(_) => return Err("\"port\" must be a number between 1 and 65535"),
    };
    match stream.header("streamtype") {
        Some("error") => Ok((port, true)),
        Some("data") => Ok((port, false)),
        None => Err("\"streamtype\" header is required"),
        Some(_) => Err("invalid stream type"),
    }
}

async fn forward(error: Stream, mut data: Stream, port: u16, target: Arc<Target>) {
    let (error_w, data_w) = (error.writer(), data.writer());
    let addr = SocketAddr::from((target.ip, port));
    match TcpStream::connect(addr).await {
        Err(e) => {
            let message = format!(
                "error forwarding port {port} to pod {}, uid {}: {e}",
                target.pod, target.uid
            );
            let _ = error_w.write(message.as_bytes()).await;
        }
        Ok(tcp) => {
            let (from_pod, mut to_pod) = tcp.into_split();
            let mut upstream = tokio::spawn(async move {
                while let Some(chunk) = data.recv().await {
                    if to_pod.write_all(&chunk).await.is_err() {
                        break;
                    }
                }
                let _ = to_pod.shutdown().await;
            });
            let w = data_w.clone();
            let mut downstream = tokio::spawn(pump(from_pod, move |chunk| {
                let w = w.clone();
                async move { w.write(&chunk).await.is_ok() }
            }));
            tokio::select! {
                _ = &mut upstream => {
                    let _ = tokio::time::timeout(HALF_CLOSED_GRACE, &mut downstream).await;
                }
                _ = &mut downstream => {
                    let _ = tokio::time::timeout(HALF_CLOSED_GRACE, &mut upstream).await;
                }
            }
            upstream.abort();
            downstream.abort();
        }
    }
    let _ = data_w.finish().await;
    let _ = error_w.finish().await;
}
