//! SPDY/3.1 for the kubelet API's streaming endpoints, which kube-apiserver uses toward the
//! kubelet for exec, attach and port-forward (since 1.30 whatever its own client spoke): an
//! HTTP/1.1 upgrade (`Connection: Upgrade`, `Upgrade: SPDY/3.1`) whose subprotocol is chosen
//! from the client's `X-Stream-Protocol-Version` headers, in the client's order (apimachinery
//! `httpstream.Handshake`), then streams opened by the client (`conn`), framed as the draft
//! says (`frame`).

pub mod conn;
pub mod frame;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;

pub use self::conn::{Connection, Stream, StreamWriter};

pub const PROTOCOL_VERSION_HEADER: &str = "x-stream-protocol-version";
const ACCEPTED_VERSIONS_HEADER: &str = "x-accepted-stream-protocol-versions";

/// Whether the request asks to upgrade to SPDY/3.1.
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    let connection_upgrade = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    let spdy = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("SPDY/3.1"));
    connection_upgrade && spdy
}

/// Why an upgrade was refused, answered as the kubelet answers it.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("unable to upgrade: X-Stream-Protocol-Version is required")]
    NoProtocol,
    #[error(
        "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server accepts {supported:?}"
    )]
    NoMatch {
        offered: Vec<String>,
        supported: &'static [&'static str],
    },
}

impl IntoResponse for HandshakeError {
    fn into_response(self) -> Response {
        match &self {
            Self::NoProtocol => (StatusCode::BAD_REQUEST, self.to_string()).into_response(),
            Self::NoMatch { supported, .. } => {
                let mut resp = (StatusCode::FORBIDDEN, self.to_string()).into_response();
                for s in supported.iter() {
                    resp.headers_mut()
                        .append(ACCEPTED_VERSIONS_HEADER, HeaderValue::from_static(s));
                }
                resp
            }
        }
    }
}

/// The subprotocol both sides speak: the first the client offered that `supported` has.
pub fn negotiate(
    headers: &HeaderMap,
    supported: &'static [&'static str],
) -> Result<&'static str, HandshakeError> {
    let offered: Vec<&str> = headers
        .get_all(PROTOCOL_VERSION_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    if offered.is_empty() {
        return Err(HandshakeError::NoProtocol);
    }
    for o in &offered {
        if let Some(p) = supported.iter().copied().find(|s| s == o) {
            return Ok(p);
        }
    }
    Err(HandshakeError::NoMatch {
        offered: offered.into_iter().map(String::from).collect(),
        supported,
    })
}

/// Answers `101 Switching Protocols` with the chosen subprotocol and runs `session` on the
/// SPDY connection once the upgrade is through.
pub fn upgrade<F, Fut>(mut req: Request, protocol: &'static str, session: F) -> Response
where
    F: FnOnce(Connection) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(error = %e, "SPDY upgrade failed");
                return;
            }
        };
        match Connection::new(TokioIo::new(upgraded)) {
            Ok(conn) => session(conn).await,
            Err(e) => tracing::warn!(error = %e, "SPDY connection not started"),
        }
    });
    let mut resp = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    h.insert(PROTOCOL_VERSION_HEADER, HeaderValue::from_static(protocol));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn upgrade_and_negotiation_follow_the_clients_order() {
        let h = headers(&[
            ("connection", "Upgrade"),
            ("upgrade", "SPDY/3.1"),
            ("x-stream-protocol-version", "v5.channel.k8s.io"),
            ("x-stream-protocol-version", "v4.channel.k8s.io"),
            ("x-stream-protocol-version", "v3.channel.k8s.io"),
        ]);
        assert!(is_upgrade(&h));
        const SUPPORTED: [&str; 3] = [
            "v2.channel.k8s.io",
            "v3.channel.k8s.io",
            "v4.channel.k8s.io",
        ];
        assert_eq!(negotiate(&h, &SUPPORTED).ok(), Some("v4.channel.k8s.io"));
        let status = |e: Option<HandshakeError>| e.map(|e| e.into_response().status());
        let none = negotiate(&headers(&[]), &SUPPORTED).err();
        assert_eq!(status(none), Some(StatusCode::BAD_REQUEST));
        let other = headers(&[("x-stream-protocol-version", "portforward.k8s.io")]);
        let refused = negotiate(&other, &SUPPORTED).err();
        assert_eq!(status(refused), Some(StatusCode::FORBIDDEN));
        assert!(!is_upgrade(&headers(&[("upgrade", "websocket")])));
    }
}
