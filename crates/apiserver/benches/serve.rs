//! The embedded API server holding many objects (issue 11; record results in
//! docs/performance.md). The server runs in this process; every request goes through HTTP with
//! kube-rs, as a client's would.
//!
//! 1. **Fill**: `--namespaces N` namespaces (default 100), each with `--per-ns M` objects
//!    (default 100) in equal parts ConfigMaps (1 KiB of data), Services (a ClusterIP each) and
//!    Pods, 16 requests in flight. Reports the time, objects stored (the namespaces' own
//!    ServiceAccount and root CA ConfigMap included) and the process RSS.
//! 2. **GET** of a random object, `--gets` times (default 2,000): p50, p99, max.
//! 3. **LIST** of one namespace's ConfigMaps, `--lists` times (default 300), and of all Pods
//!    with a label selector that matches a tenth of them, 30 times: p50, p99, max.
//! 4. **WATCH**: a cluster-wide ConfigMap watch is open; each of `--writes` updates (default
//!    500) is timed from the write's answer to the event's arrival: p50, p99, max. And the time
//!    to the first event of a new watch with its initial list (one namespace), 100 times.
//!
//! `cargo bench -p steward-apiserver --bench serve` (add `-- --namespaces N --per-ns M`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Client, Config};
use serde_json::json;
use steward_apiserver::{ServerConfig, start};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// p50, p99 and max of durations, in milliseconds.
fn percentiles(mut d: Vec<Duration>) -> String {
    d.sort();
    let at = |q: f64| d[((d.len() as f64 * q).ceil() as usize).clamp(1, d.len()) - 1];
    let ms = |x: Duration| x.as_secs_f64() * 1000.0;
    format!(
        "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} samples)",
        ms(at(0.50)),
        ms(at(0.99)),
        ms(d[d.len() - 1]),
        d.len()
    )
}

/// A cheap deterministic sequence (no extra dependency).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % n
    }
}

fn object(kind: usize, i: usize) -> serde_json::Value {
    let labels = json!({"app": format!("a{}", i % 10), "i": i.to_string()});
    match kind {
        0 => json!({"metadata": {"name": format!("cm-{i}"), "labels": labels},
            "data": {"payload": "x".repeat(1024)}}),
        1 => json!({"metadata": {"name": format!("svc-{i}"), "labels": labels},
            "spec": {"selector": {"app": "a"}, "ports": [{"port": 80, "targetPort": 8080}]}}),
        _ => json!({"metadata": {"name": format!("pod-{i}"), "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "registry.example/c:1",
                "ports": [{"containerPort": 8080}]}]}}),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let namespaces = arg("--namespaces", 100);
    let per_ns = arg("--per-ns", 100);
    let gets = arg("--gets", 2000);
    let lists = arg("--lists", 300);
    let writes = arg("--writes", 500);
    let server = start(ServerConfig::default()).await.unwrap();
    let mut config = Config::new(server.url().parse().unwrap());
    config.auth_info.token = Some(server.admin_token().into());
    let client = Client::try_from(config).unwrap();
    println!(
        "embedded API server: {namespaces} namespaces x {per_ns} objects, RSS at start {:.0} MiB",
        rss_mib()
    );

    // 1. Fill.
    let started = Instant::now();
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    for n in 0..namespaces {
        let ns = serde_json::from_value(json!({"metadata": {"name": format!("ns-{n}")}})).unwrap();
        ns_api.create(&PostParams::default(), &ns).await.unwrap();
    }
    let jobs = (0..namespaces).flat_map(|n| (0..per_ns).map(move |i| (n, i)));
    futures::stream::iter(jobs)
        .map(|(n, i)| {
            let client = client.clone();
            async move {
                let ns = format!("ns-{n}");
                let pp = PostParams::default();
                let body = object(i % 3, i);
                match i % 3 {
                    0 => Api::<ConfigMap>::namespaced(client, &ns)
                        .create(&pp, &serde_json::from_value(body).unwrap())
                        .await
                        .map(drop),
                    1 => Api::<Service>::namespaced(client, &ns)
                        .create(&pp, &serde_json::from_value(body).unwrap())
                        .await
                        .map(drop),
                    _ => Api::<Pod>::namespaced(client, &ns)
                        .create(&pp, &serde_json::from_value(body).unwrap())
                        .await
                        .map(drop),
                }
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
    let fill = started.elapsed();
    // Let the controllers (endpoints, scheduler, namespace defaults) settle.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut stored = 0;
    for plural in [
        "configmaps",
        "services",
        "pods",
        "serviceaccounts",
        "endpoints",
    ] {
        let req = http::Request::get(format!("/api/v1/{plural}?limit=1"))
            .body(Vec::new())
            .unwrap();
        let list: serde_json::Value = client.request(req).await.unwrap();
        let rest = list["metadata"]["remainingItemCount"].as_u64().unwrap_or(0);
        stored += rest + list["items"].as_array().map_or(0, |i| i.len() as u64);
    }
    println!(
        "fill: {} objects in {:.1} s; stored (ConfigMaps, Services, Pods, ServiceAccounts, Endpoints): {stored}; RSS {:.0} MiB",
        namespaces * per_ns,
        fill.as_secs_f64(),
        rss_mib()
    );

    // 2. GET.
    let mut rng = Lcg(42);
    let mut samples = Vec::with_capacity(gets);
    for _ in 0..gets {
        let (n, i) = (rng.below(namespaces), rng.below(per_ns / 3) * 3);
        let api = Api::<ConfigMap>::namespaced(client.clone(), &format!("ns-{n}"));
        let t = Instant::now();
        api.get(&format!("cm-{i}")).await.unwrap();
        samples.push(t.elapsed());
    }
    println!("GET configmap: {}", percentiles(samples));

    // 3. LIST.
    let mut samples = Vec::with_capacity(lists);
    for _ in 0..lists {
        let api =
            Api::<ConfigMap>::namespaced(client.clone(), &format!("ns-{}", rng.below(namespaces)));
        let t = Instant::now();
        api.list(&ListParams::default()).await.unwrap();
        samples.push(t.elapsed());
    }
    println!("LIST configmaps of one namespace: {}", percentiles(samples));
    let mut samples = Vec::new();
    let pods: Api<Pod> = Api::all(client.clone());
    for k in 0..30 {
        let t = Instant::now();
        pods.list(&ListParams::default().labels(&format!("app=a{}", k % 10)))
            .await
            .unwrap();
        samples.push(t.elapsed());
    }
    println!(
        "LIST pods of all namespaces, label selector: {}",
        percentiles(samples)
    );

    // 4. WATCH.
    let all: Api<ConfigMap> = Api::all(client.clone());
    let rv = all
        .list_metadata(&ListParams::default().limit(1))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = all
        .watch(&WatchParams::default().timeout(290), &rv)
        .await
        .unwrap()
        .boxed();
    let mut samples = Vec::with_capacity(writes);
    for w in 0..writes {
        let (n, i) = (rng.below(namespaces), rng.below(per_ns / 3) * 3);
        let api = Api::<ConfigMap>::namespaced(client.clone(), &format!("ns-{n}"));
        let name = format!("cm-{i}");
        let patch = Patch::Merge(json!({"data": {"w": w.to_string()}}));
        api.patch(&name, &PatchParams::default(), &patch)
            .await
            .unwrap();
        let t = Instant::now();
        loop {
            match stream.next().await.expect("watch open").unwrap() {
                WatchEvent::Modified(o)
                    if o.data.as_ref().and_then(|d| d.get("w")) == Some(&w.to_string()) =>
                {
                    break;
                }
                _ => {}
            }
        }
        samples.push(t.elapsed());
    }
    println!(
        "WATCH event after the write's answer: {}",
        percentiles(samples)
    );
    let mut samples = Vec::with_capacity(100);
    for _ in 0..100 {
        let api =
            Api::<ConfigMap>::namespaced(client.clone(), &format!("ns-{}", rng.below(namespaces)));
        let t = Instant::now();
        let mut s = api
            .watch(&WatchParams::default().timeout(5), "0")
            .await
            .unwrap()
            .boxed();
        s.next().await.expect("an initial event").unwrap();
        samples.push(t.elapsed());
    }
    println!(
        "WATCH start to first initial event (one namespace): {}",
        percentiles(samples)
    );
    println!("RSS at the end {:.0} MiB", rss_mib());
    server.shutdown().await;
}
