//! A webhook receiver on 127.0.0.1 for the tests that check deliveries.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

/// One POST: (authorization header, body).
pub type Request = (Option<String>, String);

/// Every POST received, in order of arrival.
#[derive(Clone, Default)]
pub struct Received(pub Arc<Mutex<Vec<Request>>>);

impl Received {
    /// What arrived so far.
    pub fn all(&self) -> Vec<Request> {
        self.0.lock().unwrap().clone()
    }
}

/// Starts a receiver answering every POST to `/hook` with `status`; its URL and what it got.
pub async fn receiver(status: StatusCode) -> (String, Received) {
    let received = Received::default();
    let sink = received.clone();
    let app = Router::new().route(
        "/hook",
        post(move |headers: HeaderMap, body: Bytes| {
            let sink = sink.clone();
            async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                sink.0
                    .lock()
                    .unwrap()
                    .push((auth, String::from_utf8_lossy(&body).into_owned()));
                status
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/hook"), received)
}
