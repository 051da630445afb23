//! A bound on the operator's API requests in flight (issue 17). kube's client speaks HTTP/1.1
//! and opens a connection for every request in flight, so 1,000 clusters reconciled at once
//! meant well over a thousand connections to the API server, and requests failing to be sent
//! in the burst (each a reconcile error and a back-off). With the bound, requests beyond it
//! wait in the operator for a permit, and the client's pool reuses at most that many
//! connections (plus one per watch). Watches are long-lived and never wait: they do not count.
//!
//! A permit is held until the response's body is read to its end (or dropped), since the
//! connection is busy until then.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{BoxError, Layer, Service};

/// The default bound (`--api-max-in-flight`).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;

/// Builds the operator's client from `config` with at most `max` requests in flight (watches
/// apart).
pub fn client(config: kube::Config, max: usize) -> Result<kube::Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&InFlightLayer::new(max))
        .build())
}

/// The layer of [`InFlight`].
#[derive(Clone, Debug)]
pub struct InFlightLayer {
    permits: Arc<Semaphore>,
}

impl InFlightLayer {
    /// At most `max` requests (at least one) in flight through every service of this layer.
    pub fn new(max: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max.max(1))),
        }
    }

    /// Permits free now.
    #[cfg(test)]
    fn available(&self) -> usize {
        self.permits.available_permits()
    }
}

impl<S> Layer<S> for InFlightLayer {
    type Service = InFlight<S>;

    fn layer(&self, inner: S) -> InFlight<S> {
        InFlight {
            inner,
            permits: self.permits.clone(),
        }
    }
}

/// A service that waits for a permit before it sends a request (see the module docs).
#[derive(Clone, Debug)]
pub struct InFlight<S> {
    inner: S,
    permits: Arc<Semaphore>,
}

/// `?watch=true` (or `1`): a watch, which holds its connection for minutes by design.
fn is_watch<B>(request: &Request<B>) -> bool {
    request.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1"))
    })
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for InFlight<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = Response<Held<ResBody>>;
    type Error = BoxError;
    type Future =
        Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let permits = (!is_watch(&request)).then(|| self.permits.clone());
        // The inner future sends nothing until it is polled, after the permit is held.
        let response = self.inner.call(request);
        Box::pin(async move {
            let permit = match permits {
                Some(p) => Some(p.acquire_owned().await.map_err(Box::new)?),
                None => None,
            };
            let response = response.await.map_err(Into::into)?;
            Ok(response.map(|body| Held { body, permit }))
        })
    }
}

/// A response body that holds its request's permit until it is read to the end or dropped.
#[derive(Debug)]
pub struct Held<B> {
    body: B,
    permit: Option<OwnedSemaphorePermit>,
}

impl<B: Body + Unpin> Body for Held<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.permit = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// A service that counts requests being served and answers after `delay`.
    #[derive(Clone)]
    struct Slow {
        now: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
        delay: Duration,
    }

    impl Service<Request<()>> for Slow {
        type Response = Response<Full<bytes::Bytes>>;
        type Error = BoxError;
        type Future =
            Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            let (now, most, delay) = (self.now.clone(), self.most.clone(), self.delay);
            Box::pin(async move {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                now.fetch_sub(1, Ordering::SeqCst);
                Ok(Response::new(Full::new(bytes::Bytes::from_static(b"{}"))))
            })
        }
    }

    fn slow() -> Slow {
        Slow {
            now: Arc::new(AtomicUsize::new(0)),
            most: Arc::new(AtomicUsize::new(0)),
            delay: Duration::from_millis(20),
        }
    }

    #[tokio::test]
    async fn no_more_than_the_bound_are_in_flight_and_all_are_answered() {
        let inner = slow();
        let layer = InFlightLayer::new(4);
        let tasks: Vec<_> = (0..40)
            .map(|i| {
                let mut svc = layer.layer(inner.clone());
                tokio::spawn(async move {
                    let request = Request::get(format!("/api/v1/pods?i={i}"))
                        .body(())
                        .unwrap();
                    let response = svc.call(request).await.unwrap();
                    response.into_body().collect().await.unwrap().to_bytes()
                })
            })
            .collect();
        for task in tasks {
            assert_eq!(&task.await.unwrap()[..], b"{}");
        }
        assert_eq!(inner.most.load(Ordering::SeqCst), 4);
        assert_eq!(layer.available(), 4, "every permit is back");
    }

    #[tokio::test]
    async fn a_permit_is_held_until_the_body_is_read_and_watches_never_wait() {
        let inner = slow();
        let layer = InFlightLayer::new(1);
        let mut svc = layer.layer(inner.clone());
        let unread = svc
            .call(Request::get("/api/v1/pods").body(()).unwrap())
            .await
            .unwrap();
        assert_eq!(layer.available(), 0, "the body is not read yet");
        // A watch goes through while the only permit is held.
        let watch = tokio::time::timeout(
            Duration::from_secs(5),
            svc.call(
                Request::get("/api/v1/pods?watch=true&resourceVersion=1")
                    .body(())
                    .unwrap(),
            ),
        )
        .await;
        assert!(watch.is_ok_and(|r| r.is_ok()));
        // Another request waits until the first body is read.
        let mut waiting = Box::pin(svc.call(Request::get("/api/v1/nodes").body(()).unwrap()));
        assert!(
            tokio::time::timeout(Duration::from_millis(100), &mut waiting)
                .await
                .is_err()
        );
        unread.into_body().collect().await.unwrap();
        assert!(
            tokio::time::timeout(Duration::from_secs(5), waiting)
                .await
                .is_ok_and(|r| r.is_ok())
        );
    }

    #[test]
    fn watches_are_told_by_their_query() {
        let get = |uri: &str| Request::get(uri).body(()).unwrap();
        assert!(is_watch(&get("/api/v1/pods?watch=true")));
        assert!(is_watch(&get("/api/v1/pods?labelSelector=a&watch=1")));
        assert!(!is_watch(&get("/api/v1/pods?watch=false")));
        assert!(!is_watch(&get("/api/v1/pods?fieldSelector=watch%3Dtrue")));
        assert!(!is_watch(&get("/api/v1/pods")));
    }
}
