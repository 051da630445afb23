//! Watch streams: newline-delimited `{"type", "object"}` events over a chunked response.
//! Starts with synthetic ADDED events (RV empty or "0", or `sendInitialEvents=true`, which also
//! ends the initial batch with a BOOKMARK annotated `k8s.io/initial-events-end`), or resumes
//! after a given RV from the in-memory history (an RV older than the history yields an ERROR
//! event with a 410 `Expired` Status, then the stream ends). Applies namespace, label and field
//! selectors (objects moving in or out of the selection become ADDED/DELETED), sends periodic
//! BOOKMARKs when allowed, and ends at `timeoutSeconds` or server shutdown.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::meta;
use crate::registry::ResourceDef;
use crate::selectors::Selectors;
use crate::server::Server;
use crate::status::{ApiError, ApiResult};
use crate::store::{EventType, WatchEvent};
use crate::write::to_version;

pub struct WatchRequest {
    pub def: Arc<ResourceDef>,
    pub namespace: Option<String>,
    pub selectors: Selectors,
    pub resource_version: Option<String>,
    pub send_initial_events: bool,
    pub bookmarks: bool,
    pub timeout: Option<Duration>,
    /// Frames of protobuf `WatchEvent`s instead of JSON lines (the kind has a protobuf form).
    pub protobuf: bool,
}

/// Marks a streamed response, which content negotiation must not buffer.
#[derive(Clone, Copy, Debug)]
pub struct Streamed;

/// A JSON line re-written as a protobuf watch frame.
fn protobuf_frame(line: &Bytes) -> Bytes {
    let framed = serde_json::from_slice::<Value>(line)
        .map_err(|e| crate::proto::Error::new(e.to_string()))
        .and_then(|event| crate::proto::watch_frame(&event));
    match framed {
        Ok(frame) => Bytes::from(frame),
        Err(e) => {
            tracing::warn!(error = %e, "a watch event could not be encoded as protobuf");
            let status = ApiError::internal(format!("a watch event could not be encoded: {e}"));
            crate::proto::watch_frame(&json!({"type": "ERROR", "object": status.to_status()}))
                .map(Bytes::from)
                .unwrap_or_default()
        }
    }
}

fn line(etype: &str, object: &Value) -> Bytes {
    let mut s = json!({"type": etype, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

fn bookmark(def: &ResourceDef, rv: u64, initial_end: bool) -> Bytes {
    let mut md = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        &json!({"kind": def.kind, "apiVersion": def.api_version(), "metadata": md}),
    )
}

fn expired(requested: u64, floor: u64) -> Bytes {
    let e = ApiError::expired(format!("too old resource version: {requested} ({floor})"));
    line("ERROR", &e.to_status())
}

impl WatchRequest {
    fn in_scope(&self, obj: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| meta::namespace(obj) == Some(ns))
    }

    fn visible(&self, obj: &Value) -> bool {
        self.in_scope(obj) && crate::selectors::matches_as(&self.selectors, &self.def, obj)
    }

    /// The event a watcher with this request sees for a stored event, if any.
    fn translate(&self, e: &WatchEvent) -> Option<Bytes> {
        if e.gr != self.def.gr() {
            return None;
        }
        let now = self.visible(&e.object);
        let etype = match (e.etype, &e.prev) {
            (EventType::Modified, Some(prev)) => match (self.visible(prev), now) {
                (true, true) => EventType::Modified,
                (false, true) => EventType::Added,
                (true, false) => EventType::Deleted,
                (false, false) => return None,
            },
            (t, _) if now => t,
            _ => return None,
        };
        Some(line(etype.as_str(), &to_version(&self.def, &e.object)))
    }
}

pub fn start(server: Arc<Server>, req: WatchRequest) -> ApiResult<Response> {
    if req.send_initial_events && !req.bookmarks {
        return Err(ApiError::new(
            422,
            "Invalid",
            "ListOptions.meta.k8s.io \"\" is invalid: allowWatchBookmarks: Required value: allowWatchBookmarks required when sendInitialEvents is set",
        ));
    }
    let requested = match req.resource_version.as_deref() {
        None | Some("") | Some("0") => None,
        // NotOlderThan: the current state is always at least as new as the given RV.
        Some(rv) if req.send_initial_events => {
            rv.parse::<u64>().map_err(|_| bad_rv(rv))?;
            None
        }
        Some(rv) => Some(rv.parse::<u64>().map_err(|_| bad_rv(rv))?),
    };
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let mut initial = Vec::new();
    let mut listed: Vec<Arc<Value>> = Vec::new();
    let mut cursor;
    let mut stop_now = false;
    {
        let state = server.lock();
        cursor = state.rv;
        match requested {
            None => {
                // The visible objects' handles under the lock; their lines after it.
                listed.extend(
                    state
                        .list_shared(&req.def.gr(), req.namespace.as_deref())
                        .filter(|obj| req.visible(obj))
                        .cloned(),
                );
            }
            Some(rv) => match state.events_after(rv) {
                Ok(_) => cursor = rv,
                Err(floor) => {
                    initial.push(expired(rv, floor));
                    stop_now = true;
                }
            },
        }
    }
    if requested.is_none() {
        initial.extend(
            listed
                .iter()
                .map(|obj| line("ADDED", &to_version(&req.def, obj))),
        );
        if req.send_initial_events {
            initial.push(bookmark(&req.def, cursor, true));
        }
    }
    let protobuf = req.protobuf;
    tokio::spawn(async move {
        for chunk in initial {
            if tx.send(chunk).await.is_err() {
                return;
            }
        }
        if stop_now {
            return;
        }
        stream(server, req, tx, cursor).await;
    });
    let body = Body::from_stream(futures::stream::unfold(rx, move |mut rx| async move {
        rx.recv().await.map(|b| {
            let chunk = if protobuf { protobuf_frame(&b) } else { b };
            (Ok::<Bytes, std::io::Error>(chunk), rx)
        })
    }));
    let content_type = if protobuf {
        crate::proto::WATCH_MEDIA_TYPE
    } else {
        "application/json"
    };
    let mut response = ([(axum::http::header::CONTENT_TYPE, content_type)], body).into_response();
    response.extensions_mut().insert(Streamed);
    Ok(response)
}

fn bad_rv(rv: &str) -> ApiError {
    ApiError::bad_request(format!("invalid resource version: {rv:?}"))
}

async fn stream(server: Arc<Server>, req: WatchRequest, tx: mpsc::Sender<Bytes>, mut cursor: u64) {
    let mut rv_rx = server.rv_rx.clone();
    let deadline = tokio::time::Instant::now() + req.timeout.unwrap_or(Duration::from_secs(1800));
    let mut ticker = tokio::time::interval(server.bookmark_interval);
    ticker.tick().await;
    loop {
        rv_rx.borrow_and_update();
        let batch = server.lock().events_after(cursor);
        match batch {
            Err(floor) => {
                let _ = tx.send(expired(cursor, floor)).await;
                return;
            }
            Ok(events) => {
                for e in events {
                    cursor = e.rv;
                    if let Some(chunk) = req.translate(&e)
                        && tx.send(chunk).await.is_err()
                    {
                        return;
                    }
                }
            }
        }
        tokio::select! {
            changed = rv_rx.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep_until(deadline) => return,
            _ = server.cancel.cancelled() => return,
            _ = tx.closed() => return,
            _ = ticker.tick(), if req.bookmarks => {
                if tx.send(bookmark(&req.def, cursor, false)).await.is_err() {
                    return;
                }
            }
        }
    }
}
