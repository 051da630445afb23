//! A network partition between this agent and the API server, for tests of node loss: while
//! partitioned, every request of the agent's client fails, and every response already streaming
//! (the pod watch, above all) ends with an error at its next frame, so the agent neither tells
//! nor hears anything — no heartbeat, no status, no deletion of its Pods — while the Pod
//! processes go on running, as on a machine cut off from the control plane. The kubelet API
//! refuses connections too. Healing the partition lets everything reconnect.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use kube::Client;
use kube::client::Body;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The switch.
#[derive(Clone, Debug, Default)]
pub struct Partition(Arc<AtomicBool>);

impl Partition {
    /// Cuts the agent off (idempotent).
    pub fn cut(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Reconnects it (idempotent).
    pub fn heal(&self) {
        self.0.store(false, Ordering::SeqCst);
    }

    /// Whether the agent is cut off.
    pub fn is_cut(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// `client` behind this switch.
    pub fn wrap(&self, client: Client) -> Client {
        let default_ns = client.default_namespace().to_owned();
        let switch = self.clone();
        let service = tower::service_fn(move |request: http::Request<Body>| {
            let (client, switch) = (client.clone(), switch.clone());
            async move {
                if switch.is_cut() {
                    return Err::<http::Response<CutBody>, BoxError>(cut_error());
                }
                let response = client.send(request).await.map_err(BoxError::from)?;
                Ok(response.map(|body| CutBody {
                    inner: Box::pin(body),
                    switch,
                }))
            }
        });
        Client::new(service, default_ns)
    }
}

fn cut_error() -> BoxError {
    "the node agent is partitioned from the API server (test)".into()
}

/// A response body that fails once the partition is cut.
pub struct CutBody {
    inner: Pin<Box<Body>>,
    switch: Partition,
}

impl http_body::Body for CutBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        if self.switch.is_cut() {
            return Poll::Ready(Some(Err(cut_error())));
        }
        self.inner
            .as_mut()
            .poll_frame(cx)
            .map(|frame| frame.map(|f| f.map_err(BoxError::from)))
    }
}
