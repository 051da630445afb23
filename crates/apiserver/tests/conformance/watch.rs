//! Watches: kube-runtime's watcher end to end, resume from a resourceVersion, 410 for expired
//! history, bookmarks, streaming lists (sendInitialEvents) and selector transitions.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::Api;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use serde_json::json;

use crate::support::{cm, env, rv};

/// Every namespace gets `kube-root-ca.crt` from the root CA publisher at a moment of its own (on
/// any API server), possibly after a test's first object: watches that count events leave it out.
const NOT_ROOT_CA: &str = "metadata.name!=kube-root-ca.crt";

async fn next<S, T>(s: &mut S) -> T
where
    S: futures::Stream<Item = T> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(30), s.next())
        .await
        .expect("event in time")
        .expect("stream open")
}

#[tokio::test]
async fn runtime_watcher_sees_create_update_delete() {
    let env = env("watcher").await;
    let api: Api<ConfigMap> = env.api();
    api.create(&PostParams::default(), &cm("before", json!({})))
        .await
        .unwrap();
    let mut stream = watcher(api.clone(), watcher::Config::default().fields(NOT_ROOT_CA)).boxed();
    let mut seen_initial = false;
    loop {
        match next(&mut stream).await.unwrap() {
            watcher::Event::InitApply(o) => {
                seen_initial |= o.metadata.name.as_deref() == Some("before")
            }
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert!(seen_initial);
    api.create(&PostParams::default(), &cm("a", json!({"k": "1"})))
        .await
        .unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let mut log = Vec::new();
    while log.len() < 3 {
        match next(&mut stream).await.unwrap() {
            watcher::Event::Apply(o) => log.push(format!(
                "apply {}",
                o.data
                    .unwrap_or_default()
                    .get("k")
                    .cloned()
                    .unwrap_or_default()
            )),
            watcher::Event::Delete(o) => {
                log.push(format!("delete {}", o.metadata.name.unwrap_or_default()))
            }
            _ => {}
        }
    }
    assert_eq!(log, ["apply 1", "apply 2", "delete a"]);
    env.finish().await;
}

#[tokio::test]
async fn watch_resumes_after_resource_version() {
    let env = env("watch-resume").await;
    let api: Api<ConfigMap> = env.api();
    let a = api
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("b", json!({})))
        .await
        .unwrap();
    let mut s = api
        .watch(
            &WatchParams::default().fields(NOT_ROOT_CA).timeout(10),
            &rv(&a),
        )
        .await
        .unwrap()
        .boxed();
    match next(&mut s).await.unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("b")),
        other => panic!("expected ADDED b, got {other:?}"),
    }
    // resourceVersion "0": synthetic ADDED events for what exists.
    let mut s0 = api
        .watch(&WatchParams::default().fields(NOT_ROOT_CA).timeout(10), "0")
        .await
        .unwrap()
        .boxed();
    let mut names = Vec::new();
    while names.len() < 2 {
        if let WatchEvent::Added(o) = next(&mut s0).await.unwrap() {
            names.push(o.metadata.name.unwrap());
        }
    }
    names.sort();
    assert_eq!(names, ["a", "b"]);
    env.finish().await;
}

#[tokio::test]
async fn watch_from_expired_resource_version_gets_410() {
    let env = env("watch-410").await;
    if let Some(s) = &env.server {
        s.set_watch_history_limit(5);
    }
    let api: Api<ConfigMap> = env.api();
    for i in 0..10 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), json!({})))
            .await
            .unwrap();
    }
    // The expired watch is one on Events: kube-apiserver keeps no watch cache for them, so a
    // watch goes to etcd and RV 1 expires with etcd's first compaction (kube-apiserver compacts
    // every 5 minutes to the revision of the previous tick: about 10 minutes after it starts).
    // A cached resource (ConfigMaps) may serve RV 1 from its watch cache for much longer. On a
    // fresh cluster the watch still replays history: wait there (up to 11 minutes). The
    // embedded server keeps one short history for all kinds, which the ConfigMaps above
    // pushed past RV 1.
    let events: Api<Event> = Api::all(env.client.clone());
    let patience = Duration::from_secs(if env.real { 660 } else { 0 });
    let started = std::time::Instant::now();
    loop {
        let mut s = events
            .watch(&WatchParams::default().timeout(5), "1")
            .await
            .unwrap()
            .boxed();
        let first = tokio::time::timeout(Duration::from_secs(15), s.next()).await;
        match first {
            Ok(Some(Ok(WatchEvent::Error(e)))) => {
                assert_eq!(e.code, 410);
                assert!(e.reason == "Expired" || e.reason == "Gone", "{e:?}");
                break;
            }
            other if started.elapsed() >= patience => {
                panic!("expected a 410 ERROR event, got {other:?}")
            }
            _ => tokio::time::sleep(Duration::from_secs(10)).await,
        }
    }
    // kube-runtime's watcher recovers by relisting.
    let mut w = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut initial = 0;
    loop {
        match next(&mut w).await.unwrap() {
            watcher::Event::InitApply(_) => initial += 1,
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert!(initial >= 10);
    env.finish().await;
}

#[tokio::test]
async fn watch_sends_bookmarks_and_streaming_initial_events() {
    let env = env("watch-bookmark").await;
    let api: Api<ConfigMap> = env.api();
    api.create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();
    let mut s = api
        .watch(&WatchParams::default().initial_events().timeout(120), "")
        .await
        .unwrap()
        .boxed();
    let mut added = 0;
    loop {
        match next(&mut s).await.unwrap() {
            WatchEvent::Added(_) => added += 1,
            WatchEvent::Bookmark(b) => {
                assert_eq!(
                    b.metadata
                        .annotations
                        .get("k8s.io/initial-events-end")
                        .map(String::as_str),
                    Some("true")
                );
                assert!(!b.metadata.resource_version.is_empty());
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(added >= 1);
    // Periodic bookmarks (the real server sends them about once a minute).
    let list = api.list(&ListParams::default()).await.unwrap();
    let list_rv = list.metadata.resource_version.unwrap();
    let mut s = api
        .watch(&WatchParams::default().timeout(120), &list_rv)
        .await
        .unwrap()
        .boxed();
    let deadline = Duration::from_secs(if env.real { 100 } else { 10 });
    let got = tokio::time::timeout(deadline, async {
        while let Some(ev) = s.next().await {
            if let Ok(WatchEvent::Bookmark(b)) = ev {
                return Some(b);
            }
        }
        None
    })
    .await
    .expect("a bookmark in time");
    assert!(got.is_some_and(|b| !b.metadata.resource_version.is_empty()));
    env.finish().await;
}

#[tokio::test]
async fn watch_applies_selectors_with_transitions() {
    let env = env("watch-selector").await;
    let api: Api<ConfigMap> = env.api();
    let start = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut s = api
        .watch(
            &WatchParams::default().labels("team=db").timeout(30),
            &start,
        )
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &cm("other", json!({})))
        .await
        .unwrap();
    let mut c = cm("a", json!({}));
    c.metadata.labels = Some([("team".to_string(), "db".to_string())].into());
    api.create(&PostParams::default(), &c).await.unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "web"}}})),
    )
    .await
    .unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "db"}}})),
    )
    .await
    .unwrap();
    let mut log = Vec::new();
    while log.len() < 3 {
        match next(&mut s).await.unwrap() {
            WatchEvent::Added(o) => log.push(format!("ADDED {}", o.metadata.name.unwrap())),
            WatchEvent::Modified(o) => log.push(format!("MODIFIED {}", o.metadata.name.unwrap())),
            WatchEvent::Deleted(o) => log.push(format!("DELETED {}", o.metadata.name.unwrap())),
            _ => {}
        }
    }
    assert_eq!(log, ["ADDED a", "DELETED a", "ADDED a"]);
    // Field selectors on a watch.
    let mut f = api
        .watch(
            &WatchParams::default()
                .fields("metadata.name=other")
                .timeout(10),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    match next(&mut f).await.unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("other")),
        other => panic!("unexpected {other:?}"),
    }
    env.finish().await;
}

#[tokio::test]
async fn runtime_watcher_with_streaming_lists() {
    let env = env("watcher-stream").await;
    let api: Api<ConfigMap> = env.api();
    api.create(&PostParams::default(), &cm("before", json!({})))
        .await
        .unwrap();
    let mut stream = watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut initial = Vec::new();
    loop {
        match next(&mut stream).await.unwrap() {
            watcher::Event::InitApply(o) => initial.push(o.metadata.name.unwrap_or_default()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert!(initial.contains(&"before".to_string()));
    api.create(&PostParams::default(), &cm("after", json!({})))
        .await
        .unwrap();
    // (The namespace's kube-root-ca.crt may arrive first, as on a real cluster.)
    loop {
        if let watcher::Event::Apply(o) = next(&mut stream).await.unwrap()
            && o.metadata.name.as_deref() == Some("after")
        {
            break;
        }
    }
    env.finish().await;
}
