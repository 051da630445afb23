//! The kubelet HTTP API the API server proxies `pods/log` and `pods/exec` to (plain HTTP on
//! `cfg.kubelet_bind`): `GET /containerLogs/{ns}/{pod}/{container}` and
//! `GET|POST /exec/{ns}/{pod}/{container}` (WebSocket, `v5`/`v4.channel.k8s.io`).

mod exec;
mod logs;

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::agent::Shared;

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(logs::container_logs),
        )
        .route(
            "/exec/{namespace}/{pod}/{container}",
            get(exec::exec).post(exec::exec),
        )
        .with_state(shared)
}

/// Serves until `cancel`.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, cancel: CancellationToken) {
    let app = router(shared);
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(async move { cancel.cancelled().await })
        .await
    {
        tracing::error!(error = %e, "kubelet API server failed");
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, message.into()).into_response()
}

fn truthy(v: Option<&str>) -> bool {
    matches!(v, Some("true" | "1" | "True" | "TRUE"))
}

/// Decodes an `application/x-www-form-urlencoded` query into pairs, keeping repeated keys.
fn query_pairs(raw: Option<&str>) -> Vec<(String, String)> {
    raw.unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_keeps_repeated_keys_and_decodes() {
        let q = query_pairs(Some(
            "command=sh&command=-c&command=echo+hi%20%26%26+exit%203&stdout=1&x=%",
        ));
        let cmds: Vec<&str> = q
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(cmds, vec!["sh", "-c", "echo hi && exit 3"]);
        assert_eq!(q.last().unwrap(), &("x".to_string(), "%".to_string()));
    }
}
