//! The kubelet HTTP API the API server proxies `pods/log` and `pods/exec` to (HTTPS on
//! `cfg.kubelet_bind`, as a real kubelet serves it, with a self-signed certificate the agent
//! makes at start for `127.0.0.1`, `localhost` and the Node's name; a real API server does not
//! verify kubelet certificates unless given `--kubelet-certificate-authority`):
//! `GET /containerLogs/{ns}/{pod}/{container}`, `GET|POST /exec/{ns}/{pod}/{container}`
//! (WebSocket `v5`/`v4.channel.k8s.io`, or SPDY/3.1 `v4`/`v3`/`v2.channel.k8s.io` as
//! kube-apiserver speaks it) and `GET|POST /portForward/{ns}/{pod}` (SPDY/3.1,
//! `portforward.k8s.io`). `/attach/…` answers that attach is not supported: containers'
//! output goes to their log files, not to a terminal one could attach to.
//! `GET /metrics/resource` serves the resource metrics metrics-server scrapes
//! (`resource_metrics`).

mod exec;
mod exec_spdy;
mod logs;
mod portforward;
mod resource_metrics;
mod spdy;

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
        .route("/metrics/resource", get(resource_metrics::resource_metrics))
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(logs::container_logs),
        )
        .route(
            "/exec/{namespace}/{pod}/{container}",
            get(exec::exec).post(exec::exec),
        )
        .route(
            "/portForward/{namespace}/{pod}",
            get(portforward::port_forward).post(portforward::port_forward),
        )
        .route(
            "/attach/{namespace}/{pod}/{container}",
            get(attach).post(attach),
        )
        .with_state(shared)
}

/// A TLS acceptor with a fresh self-signed certificate for the kubelet's names.
pub fn acceptor(node_name: &str) -> Result<tokio_rustls::TlsAcceptor, String> {
    let names = vec![
        "127.0.0.1".to_string(),
        "localhost".to_string(),
        node_name.to_string(),
    ];
    let certified = rcgen::generate_simple_self_signed(names).map_err(|e| e.to_string())?;
    let cert = certified.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .map_err(|e| e.to_string())?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Serves HTTPS (HTTP/1.1 with upgrades for exec, and HTTP/2) until `cancel`.
pub async fn serve(
    listener: TcpListener,
    tls: tokio_rustls::TlsAcceptor,
    shared: Arc<Shared>,
    cancel: CancellationToken,
) {
    let app = router(shared.clone());
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    tracing::warn!(error = %e, "kubelet API accept failed");
                    continue;
                }
            },
            () = cancel.cancelled() => return,
        };
        if shared.partition.is_cut() {
            continue; // unreachable across the partition: the connection is dropped
        }
        let (tls, app, cancel) = (tls.clone(), app.clone(), cancel.clone());
        tokio::spawn(async move {
            let stream = match tls.accept(tcp).await {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::debug!(error = %e, "kubelet API TLS handshake failed");
                    return;
                }
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            let conn = builder
                .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(stream), service);
            tokio::select! {
                served = conn => if let Err(e) = served {
                    tracing::debug!(error = %e, "kubelet API connection ended");
                },
                () = cancel.cancelled() => {}
            }
        });
    }
}

/// Attach would join a container's own stdin/stdout; the agent writes containers' output to
/// log files and gives them no stdin, so there is nothing to attach to.
async fn attach() -> Response {
    error(
        StatusCode::NOT_IMPLEMENTED,
        "attach is not supported by the Steward node agent (containers run without a terminal or stdin; use exec, or logs -f)",
    )
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
