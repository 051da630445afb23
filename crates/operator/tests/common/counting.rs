//! The operator's own API requests, counted in its client (a tower layer): on a real cluster the
//! API server's `apiserver_request_total` counts every client's requests — the namespace
//! controller deleting another test's namespace, kube-controller-manager's writes — so a test
//! that checks what the operator writes counts here instead.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// Requests by `"<VERB> <resource>/<subresource>"`, with the API server's verb names (`GET` for
/// one object, `LIST` and `WATCH` for collections, `POST`, `PUT`, `PATCH`, `DELETE`).
#[derive(Clone, Debug, Default)]
pub struct Requests(Arc<Mutex<BTreeMap<String, u64>>>);

impl Requests {
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }

    fn record(&self, key: String) {
        if let Ok(mut m) = self.0.lock() {
            *m.entry(key).or_insert(0) += 1;
        }
    }
}

/// The key of a request: its verb and `resource/subresource`, from the URL as the API server
/// reads it (`/api/v1/namespaces/ns/pods/name/status`, `/apis/group/version/resource`).
pub fn key(method: &http::Method, uri: &http::Uri) -> Option<String> {
    let parts: Vec<&str> = uri.path().trim_start_matches('/').split('/').collect();
    let rest = match parts.first() {
        Some(&"api") => parts.get(2..)?,
        Some(&"apis") => parts.get(3..)?,
        _ => return None,
    };
    let (resource, name, sub) = match rest {
        ["namespaces", _, resource, tail @ ..] => (*resource, tail.first(), tail.get(1)),
        [resource, tail @ ..] => (*resource, tail.first(), tail.get(1)),
        [] => return None,
    };
    let watch = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let verb = match *method {
        http::Method::GET if watch => "WATCH",
        http::Method::GET if name.is_none() => "LIST",
        ref m => m.as_str(),
    };
    Some(format!("{verb} {resource}/{}", sub.copied().unwrap_or("")))
}

/// The layer that counts into `Requests`.
#[derive(Clone)]
pub struct CountLayer(pub Requests);

impl<S> tower::Layer<S> for CountLayer {
    type Service = Count<S>;
    fn layer(&self, inner: S) -> Count<S> {
        Count {
            inner,
            requests: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Count<S> {
    inner: S,
    requests: Requests,
}

impl<S, B> tower::Service<http::Request<B>> for Count<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if let Some(k) = key(req.method(), req.uri()) {
            self.requests.record(k);
        }
        self.inner.call(req)
    }
}
