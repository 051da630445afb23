//! `pods/exec` over WebSocket (`v5.channel.k8s.io`, `v4.channel.k8s.io`): binary frames whose
//! first byte is the channel (0 stdin, 1 stdout, 2 stderr, 3 error/status, 4 resize, 255 close
//! in v5). The command runs through the shim inside the container's namespaces with its env,
//! user and working directory; the final frame on channel 3 is a `metav1.Status`.
//!
//! The parameters are the kubelet's own (`k8s.io/api/core/v1` `ExecStdinParam` and friends):
//! `command` (repeated), `input`, `output`, `error`, `tty`, each on when `1` — what the API
//! server's pod strategy (`streamParams`) turns a client's `stdin`/`stdout`/`stderr`/`tty`
//! into. The client names are not read: a kubelet does not read them either.

use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;
use tokio::sync::mpsc;

use super::{error, query_pairs, truthy};
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

pub async fn exec(
    State(shared): State<Arc<Shared>>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
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
    let offered = offered(&headers);
    let Some(protocol) = PROTOCOLS.iter().find(|p| offered.iter().any(|o| o == *p)) else {
        return error(
            StatusCode::BAD_REQUEST,
            "no supported subprotocol offered; use v5.channel.k8s.io or v4.channel.k8s.io",
        );
    };
    if command.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "you must specify at least 1 command",
        );
    }
    let Some(rt) = shared.registry.find(&namespace, &pod) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("pod \"{pod}\" not found in namespace \"{namespace}\" on this node"),
        );
    };
    let Some((pid, template)) = rt.exec_target(&container) else {
        return error(
            StatusCode::BAD_REQUEST,
            format!("container \"{container}\" in pod \"{pod}\" is not running"),
        );
    };
    let spec = exec_spec(&template, pid, &command);
    let child = match shared.launcher.exec(&rt, &container, &spec, opts.stdin) {
        Ok(c) => c,
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("starting the command: {e}"),
            );
        }
    };
    let streams = Streams {
        v5: *protocol == PROTOCOLS[0],
        stdout: opts.stdout,
        stderr: opts.stderr,
    };
    ws.protocols([*protocol])
        .on_upgrade(move |socket| session(socket, child, command, streams))
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

/// What the client asked for.
#[derive(Clone, Copy, Debug)]
struct Streams {
    v5: bool,
    stdout: bool,
    stderr: bool,
}

/// Copies a pipe to a channel (or drains it when the client did not ask for it).
async fn pump(
    mut r: impl AsyncRead + Unpin,
    channel: u8,
    forward: bool,
    tx: mpsc::Sender<Message>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if forward && tx.send(frame(channel, &buf[..n])).await.is_err() {
                    return;
                }
            }
        }
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
    let out = child
        .stdout
        .take()
        .map(|o| tokio::spawn(pump(o, 1, streams.stdout, tx.clone())));
    let err = child
        .stderr
        .take()
        .map(|e| tokio::spawn(pump(e, 2, streams.stderr, tx.clone())));
    let mut stdin = child.stdin.take();
    let pgid = child.id().and_then(|p| i32::try_from(p).ok());
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
    let finished = async {
        if let Some(o) = out {
            let _ = o.await;
        }
        if let Some(e) = err {
            let _ = e.await;
        }
        child.wait().await
    };
    let status = tokio::select! {
        s = finished => s.ok(),
        () = input => None,
    };
    match status {
        Some(s) => {
            let code = s.code().unwrap_or_else(|| {
                use std::os::unix::process::ExitStatusExt;
                128 + s.signal().unwrap_or(0)
            });
            let body = exit_status(&command, code).to_string();
            let _ = tx.send(frame(3, body.as_bytes())).await;
            let normal = CloseFrame {
                code: close_code::NORMAL,
                reason: "".into(),
            };
            let _ = tx.send(Message::Close(Some(normal))).await;
        }
        None => {
            if let Some(p) = pgid {
                crate::process::signal_group(p, nix::sys::signal::Signal::SIGKILL);
            }
        }
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
        assert_eq!(o.map(|o| (o.stdout, o.stderr, o.tty)), Ok((true, false, true)));
    }
}
