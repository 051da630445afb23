//! `pods/exec` over SPDY/3.1, as the kubelet's remotecommand server serves kube-apiserver
//! (`pkg/kubelet/cri/streaming/remotecommand/httpstream.go`): the client opens one stream per
//! channel, told apart by the `streamtype` header (`error`, `stdin`, `stdout`, `stderr`, and
//! `resize` with a tty from v3 on); each is answered with SYN_REPLY, and the session starts
//! once all the parameters asked for are there (30 s at most). stdin ends with the stream's
//! FIN; stdout and stderr end with FIN once the command's pipes are drained; then the error
//! stream gets the exit: in v4 the `metav1.Status` JSON of [`exit_status`] (success too), in
//! v2/v3 the failure's message only. A connection that ends first kills the command.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Child;

use super::exec::{StreamOptions, exit_status, kill, pgid, pump, stderr_target, wait_exit};
use super::spdy::frame::rst;
use super::spdy::{Connection, Stream, StreamWriter};

/// What this side speaks, as the kubelet offers it (`v1` = `channel.k8s.io` is not).
pub const PROTOCOLS: [&str; 3] = [
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
];
/// The kubelet's default `--streaming-connection-idle-timeout` stream creation limit.
const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Default)]
struct Streams {
    error: Option<Stream>,
    stdin: Option<Stream>,
    stdout: Option<Stream>,
    stderr: Option<Stream>,
    resize: Option<Stream>,
}

pub async fn session(
    mut conn: Connection,
    protocol: &'static str,
    mut child: Child,
    command: Vec<String>,
    opts: StreamOptions,
) {
    let pgid = pgid(&child);
    let resize = opts.tty && protocol != "v2.channel.k8s.io";
    let expected = 1 + [opts.stdin, opts.stdout, opts.stderr, resize]
        .iter()
        .filter(|on| **on)
        .count();
    let streams =
        match tokio::time::timeout(STREAM_CREATION_TIMEOUT, collect(&mut conn, expected)).await {
            Ok(Some(s)) => s,
            Ok(None) | Err(_) => {
                tracing::debug!(protocol, "exec: the client did not open its streams");
                kill(pgid);
                conn.close().await;
                return;
            }
        };
    let stdout = streams.stdout.as_ref().map(Stream::writer);
    let stderr = match stderr_target(opts) {
        Some(true) => stdout.clone(),
        Some(false) => streams.stderr.as_ref().map(Stream::writer),
        None => None,
    };
    let mut pumps = Vec::new();
    if let Some(o) = child.stdout.take() {
        pumps.push(tokio::spawn(pump(o, to_stream(stdout.clone()))));
    }
    if let Some(e) = child.stderr.take() {
        pumps.push(tokio::spawn(pump(e, to_stream(stderr.clone()))));
    }
    let mut side_tasks = Vec::new();
    if let (Some(mut from), Some(mut to)) = (streams.stdin, child.stdin.take()) {
        side_tasks.push(tokio::spawn(async move {
            while let Some(data) = from.recv().await {
                if to.write_all(&data).await.is_err() {
                    break;
                }
            }
            // Dropping the pipe is the command's end of input.
        }));
    }
    if let Some(mut r) = streams.resize {
        side_tasks.push(tokio::spawn(async move {
            while r.recv().await.is_some() {} // no terminal to resize
        }));
    }
    let ended = conn.ended();
    let code = tokio::select! {
        c = wait_exit(&mut child, pumps) => c.ok(),
        () = ended.cancelled() => None,
    };
    for t in side_tasks {
        t.abort();
    }
    match code {
        Some(code) => {
            for s in [&streams.stdout, &streams.stderr].into_iter().flatten() {
                let _ = s.writer().finish().await;
            }
            if let Some(e) = streams.error.as_ref().map(Stream::writer) {
                let status = exit_status(&command, code);
                let body = if protocol == PROTOCOLS[0] {
                    Some(status.to_string())
                } else {
                    status["message"].as_str().map(String::from)
                };
                if let Some(b) = body {
                    let _ = e.write(b.as_bytes()).await;
                }
                let _ = e.finish().await;
            }
        }
        None => kill(pgid),
    }
    conn.close().await;
}

/// Takes the client's streams until the `expected` ones are there, answering each.
async fn collect(conn: &mut Connection, expected: usize) -> Option<Streams> {
    let mut s = Streams::default();
    let mut received = 0;
    while received < expected {
        let stream = conn.accept().await?;
        let slot = match stream.header("streamtype") {
            Some("error") => &mut s.error,
            Some("stdin") => &mut s.stdin,
            Some("stdout") => &mut s.stdout,
            Some("stderr") => &mut s.stderr,
            Some("resize") => &mut s.resize,
            other => {
                tracing::debug!(streamtype = ?other, "exec: unexpected stream type");
                stream.reset(rst::PROTOCOL_ERROR).await;
                continue;
            }
        };
        stream.reply().await.ok()?;
        if slot.replace(stream).is_none() {
            received += 1;
        }
    }
    Some(s)
}

/// Writes a pipe's data to a stream, or drains it when the client did not ask for it.
fn to_stream(
    w: Option<StreamWriter>,
) -> impl FnMut(bytes::Bytes) -> std::pin::Pin<Box<dyn Future<Output = bool> + Send>> {
    move |data| {
        let w = w.clone();
        Box::pin(async move {
            match w {
                Some(w) => w.write(&data).await.is_ok(),
                None => true,
            }
        })
    }
}
