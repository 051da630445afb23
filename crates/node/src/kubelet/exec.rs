//! `pods/exec`, over WebSocket or SPDY/3.1 (chosen by the request's `Upgrade` header). The
//! command runs through the shim inside the container's namespaces with its env, user and
//! working directory, started before the upgrade so that a missing pod or container is an
//! HTTP error; its exit becomes a `metav1.Status` ([`exit_status`]) on the error channel or
//! stream.
//!
//! WebSocket (`v5.channel.k8s.io`, `v4.channel.k8s.io`): binary frames whose first byte is the
//! channel (0 stdin, 1 stdout, 2 stderr, 3 error/status, 4 resize, 255 close in v5), here.
//! SPDY (`v4`/`v3`/`v2.channel.k8s.io`, what kube-apiserver speaks to a kubelet): in
//! `exec_spdy`.
//!
//! The parameters are the kubelet's own (`k8s.io/api/core/v1` `ExecStdinParam` and friends):
//! `command` (repeated), `input`, `output`, `error`, `tty`, each on when `1` — what the API
//! server's pod strategy (`streamParams`) turns a client's `stdin`/`stdout`/`stderr`/`tty`
//! into. The client names are not read: a kubelet does not read them either. No terminal is
//! allocated: with `tty` the command's stderr is sent on stdout, where a terminal would put
//! it, and resize events are read and ignored.

use std::future::Future;
use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{FromRequestParts, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{error, exec_spdy, query_pairs, spdy, truthy};
use crate::agent::Shared;
use crate::pods::spec::exec_spec;

const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

fn offered(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .collect()
}

/// How the session will talk, settled before the command starts.
enum Transport {
    WebSocket(WebSocketUpgrade, &'static str),
    Spdy(Request, &'static str),
}

pub async fn exec(
    State(shared): State<Arc<Shared>>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    RawQuery(raw): RawQuery,
    req: Request,
) -> Response {
    let q = query_pairs(raw.as_deref());
    let command: Vec<String> = q
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    let opts = match StreamOptions::parse(&q) {
        Ok(o) => o,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let transport = if spdy::is_upgrade(req.headers()) {
        match spdy::negotiate(req.headers(), &exec_spdy::PROTOCOLS) {
            Ok(p) => Transport::Spdy(req, p),
            Err(refused) => return refused.into_response(),
        }
    } else {
        let offered = offered(req.headers());
        let Some(protocol) = PROTOCOLS.iter().find(|p| offered.iter().any(|o| o == *p)) else {
            return error(
                StatusCode::BAD_REQUEST,
                "no supported subprotocol offered; use v5.channel.k8s.io or v4.channel.k8s.io over WebSocket, or SPDY/3.1",
            );
        };
        let (mut parts, _) = req.into_parts();
        match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
            Ok(ws) => Transport::WebSocket(ws, protocol),
            Err(rejection) => return rejection.into_response(),
        }
    };
    if command.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "you must specify at least 1 command",
        );
    }
    let child = match start(&shared, &namespace, &pod, &container, &command, opts) {
        Ok(c) => c,
        Err(e) => return error(e.status(), e.to_string()),
    };
    match transport {
        Transport::Spdy(req, protocol) => spdy::upgrade(req, protocol, move |conn| {
            exec_spdy::session(conn, protocol, child, command, opts)
        }),
        Transport::WebSocket(ws, protocol) => {
            let streams = Streams {
                v5: protocol == PROTOCOLS[0],
                opts,
            };
            ws.protocols([protocol])
                .on_upgrade(move |socket| session(socket, child, command, streams))
        }
    }
}

/// Why a command could not be started, with the kubelet's wording.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("pod \"{pod}\" not found in namespace \"{namespace}\" on this node")]
    PodNotFound { namespace: String, pod: String },
    #[error("container \"{container}\" in pod \"{pod}\" is not running")]
    NotRunning { pod: String, container: String },
    #[error("starting the command: {0}")]
    Spawn(#[from] std::io::Error),
}

impl StartError {
    fn status(&self) -> StatusCode {
        match self {
            Self::PodNotFound { .. } => StatusCode::NOT_FOUND,
            Self::NotRunning { .. } => StatusCode::BAD_REQUEST,
            Self::Spawn(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Starts `command` in the container.
fn start(
    shared: &Shared,
    namespace: &str,
    pod: &str,
    container: &str,
    command: &[String],
    opts: StreamOptions,
) -> Result<Child, StartError> {
    let rt = shared
        .registry
        .find(namespace, pod)
        .ok_or_else(|| StartError::PodNotFound {
            namespace: namespace.to_string(),
            pod: pod.to_string(),
        })?;
    let (pid, template) = rt
        .exec_target(container)
        .ok_or_else(|| StartError::NotRunning {
            pod: pod.to_string(),
            container: container.to_string(),
        })?;
    let spec = exec_spec(&template, pid, command);
    Ok(shared.launcher.exec(&rt, container, &spec, opts.stdin)?)
}

/// Which streams the caller asked for, under the kubelet's parameter names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamOptions {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl StreamOptions {
    /// Reads `input`, `output`, `error` and `tty` (the last value of a repeated key), with the
    /// kubelet's rules: stderr is dropped with a tty (a terminal has one output), and at least
    /// one of the three streams must be asked for.
    pub fn parse(q: &[(String, String)]) -> Result<Self, &'static str> {
        let flag = |k: &str| {
            truthy(
                q.iter()
                    .rev()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.as_str()),
            )
        };
        let tty = flag("tty");
        let opts = Self {
            stdin: flag("input"),
            stdout: flag("output"),
            stderr: flag("error") && !tty,
            tty,
        };
        if !opts.stdin && !opts.stdout && !opts.stderr {
            return Err("you must specify at least 1 of stdin, stdout, stderr");
        }
        Ok(opts)
    }
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(channel);
    v.extend_from_slice(data);
    Message::Binary(Bytes::from(v))
}

/// What the WebSocket client asked for.
#[derive(Clone, Copy, Debug)]
struct Streams {
    v5: bool,
    opts: StreamOptions,
}

/// Where the command's stderr goes: its own stream, or stdout when there is a "terminal";
/// `None` when it is only drained.
pub(super) fn stderr_target(opts: StreamOptions) -> Option<bool> {
    match (opts.tty, opts.stdout, opts.stderr) {
        (true, true, _) => Some(true),
        (false, _, true) => Some(false),
        _ => None,
    }
}

/// Copies a pipe to `deliver` (which answers whether it still can) until the pipe ends or
/// `deliver` cannot take more.
pub(super) async fn pump<R, F, Fut>(mut r: R, mut deliver: F)
where
    R: AsyncRead + Unpin,
    F: FnMut(Bytes) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if !deliver(Bytes::copy_from_slice(&buf[..n])).await {
                    return;
                }
            }
        }
    }
}

/// Waits until the output pumps are done and the command has exited; its exit code as a shell
/// reports it (128 + the signal that killed it).
pub(super) async fn wait_exit(
    child: &mut Child,
    pumps: Vec<JoinHandle<()>>,
) -> std::io::Result<i32> {
    for p in pumps {
        let _ = p.await;
    }
    let s = child.wait().await?;
    Ok(s.code().unwrap_or_else(|| {
        use std::os::unix::process::ExitStatusExt;
        128 + s.signal().unwrap_or(0)
    }))
}

/// The command's process group (it leads one).
pub(super) fn pgid(child: &Child) -> Option<i32> {
    child.id().and_then(|p| i32::try_from(p).ok())
}

/// Kills what the command started when the client went away before it ended.
pub(super) fn kill(pgid: Option<i32>) {
    if let Some(p) = pgid {
        crate::process::signal_group(p, nix::sys::signal::Signal::SIGKILL);
    }
}

/// The metav1.Status kubelet sends on the error channel when the command ends.
pub fn exit_status(command: &[String], code: i32) -> serde_json::Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("command terminated with non-zero exit code: error executing command {command:?}, exit code {code}"),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

async fn session(socket: WebSocket, mut child: Child, command: Vec<String>, streams: Streams) {
    let v5 = streams.v5;
    let (mut sink, mut incoming) = socket.split();
    let (tx, mut rx) = mpsc::channel::<Message>(32);
    let writer = tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            let close = matches!(m, Message::Close(_));
            if sink.send(m).await.is_err() || close {
                break;
            }
        }
        let _ = sink.close().await;
    });
    let to_channel = |channel: u8, forward: bool| {
        let tx = tx.clone();
        move |data: Bytes| {
            let tx = tx.clone();
            async move { !forward || tx.send(frame(channel, &data)).await.is_ok() }
        }
    };
    let mut pumps = Vec::new();
    if let Some(o) = child.stdout.take() {
        pumps.push(tokio::spawn(pump(o, to_channel(1, streams.opts.stdout))));
    }
    if let Some(e) = child.stderr.take() {
        let (channel, forward) = match stderr_target(streams.opts) {
            Some(true) => (1, true),
            Some(false) => (2, true),
            None => (2, false),
        };
        pumps.push(tokio::spawn(pump(e, to_channel(channel, forward))));
    }
    let mut stdin = child.stdin.take();
    let pgid = pgid(&child);
    let input = async {
        while let Some(Ok(msg)) = incoming.next().await {
            match msg {
                Message::Binary(data) => match data.first() {
                    Some(0) => {
                        if let Some(s) = stdin.as_mut()
                            && s.write_all(&data[1..]).await.is_err()
                        {
                            stdin = None;
                        }
                    }
                    Some(255) if v5 && data.get(1) == Some(&0) => stdin = None,
                    _ => {}
                },
                Message::Close(_) => break,
                _ => {}
            }
        }
    };
    let code = tokio::select! {
        c = wait_exit(&mut child, pumps) => c.ok(),
        () = input => None,
    };
    match code {
        Some(code) => {
            let body = exit_status(&command, code).to_string();
            let _ = tx.send(frame(3, body.as_bytes())).await;
            let normal = CloseFrame {
                code: close_code::NORMAL,
                reason: "".into(),
            };
            let _ = tx.send(Message::Close(Some(normal))).await;
        }
        None => kill(pgid),
    }
    drop(tx);
    let _ = writer.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn options_use_the_kubelet_parameter_names() {
        let o = StreamOptions::parse(&q(&[("input", "1"), ("output", "1"), ("error", "1")]));
        assert_eq!(
            o,
            Ok(StreamOptions {
                stdin: true,
                stdout: true,
                stderr: true,
                tty: false
            })
        );
        // The client's names are the API server's business, not the kubelet's.
        assert!(StreamOptions::parse(&q(&[("stdout", "1"), ("stderr", "true")])).is_err());
        // With a tty, stderr is dropped, as the kubelet does.
        let o = StreamOptions::parse(&q(&[("output", "1"), ("error", "1"), ("tty", "1")]));
        assert_eq!(
            o.map(|o| (o.stdout, o.stderr, o.tty)),
            Ok((true, false, true))
        );
    }
}
