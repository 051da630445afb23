//! `GET /containerLogs/{namespace}/{pod}/{container}` with `follow`, `tailLines`, `previous`,
//! `timestamps`, `sinceSeconds`, `sinceTime` and `limitBytes`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::Response;
use jiff::Timestamp;
use tokio::sync::mpsc;

use super::{error, query_pairs, truthy};
use crate::agent::Shared;
use crate::logs::{self, LogOptions};

pub async fn container_logs(
    State(shared): State<Arc<Shared>>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    RawQuery(raw): RawQuery,
) -> Response {
    let q = query_pairs(raw.as_deref());
    let get = |k: &str| {
        q.iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let Some(rt) = shared.registry.find(&namespace, &pod) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("pod \"{pod}\" not found in namespace \"{namespace}\" on this node"),
        );
    };
    let dir = rt.log_dir(&container);
    let instances = logs::instances(&dir);
    let previous = truthy(get("previous"));
    let chosen = if previous {
        instances
            .len()
            .checked_sub(2)
            .and_then(|i| instances.get(i))
    } else {
        instances.last()
    };
    let Some(instance) = chosen.copied() else {
        let message = if previous {
            format!("previous terminated container \"{container}\" in pod \"{pod}\" not found")
        } else {
            format!(
                "container \"{container}\" in pod \"{pod}\" is waiting to start: ContainerCreating"
            )
        };
        return error(StatusCode::BAD_REQUEST, message);
    };
    let since = get("sinceSeconds")
        .and_then(|s| s.parse::<i64>().ok())
        .and_then(|s| {
            Timestamp::now()
                .checked_sub(jiff::SignedDuration::from_secs(s))
                .ok()
        })
        .or_else(|| get("sinceTime").and_then(|t| t.parse::<Timestamp>().ok()));
    let opts = LogOptions {
        follow: truthy(get("follow")) && !previous,
        tail_lines: get("tailLines")
            .and_then(|s| s.parse::<i64>().ok())
            .and_then(|n| usize::try_from(n).ok()),
        timestamps: truthy(get("timestamps")),
        since,
        limit_bytes: get("limitBytes")
            .and_then(|s| s.parse::<i64>().ok())
            .and_then(|n| usize::try_from(n).ok()),
    };
    let (tx, rx) = mpsc::channel::<Vec<u8>>(16);
    tokio::spawn(logs::stream_file(
        logs::instance_path(&dir, instance),
        opts,
        shared.launcher.logs.clone(),
        tx,
    ));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|chunk| (Ok::<_, std::convert::Infallible>(chunk), rx))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "building response"))
}
