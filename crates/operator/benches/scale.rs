//! Steward at many clusters (issues 11 and 17; record results in docs/performance.md):
//! the embedded API server in this process, `steward operator` as a separate process, and
//! `--clusters N` clusters (default 1,000): half `EtcdCluster` (3 members), half
//! `PostgresCluster` (3 instances, one user), from the examples. No node agent runs, so Pods
//! stay Pending, as in issue 17's measurement on a real API server.
//!
//! Phases and figures:
//! 1. **Create** the clusters, 16 requests in flight: the apply time, and the slowest
//!    `/readyz` the API server answered meanwhile (a stalling server shows here).
//! 2. **First child**: start the operator; the time until every cluster has its first child
//!    (its Service), and the last cluster's time; and the time the embedded API server's
//!    controllers held its store meanwhile (its `steward_dev_controller_seconds_total`), as
//!    again for the steady window.
//! 3. **Steady state** (`--steady S` seconds, default 60, after `--settle S` seconds, default
//!    90): the operator's RSS (anonymous and file-backed, and its peak) and CPU share of one
//!    core (from `/proc`), the API writes in that window (the API server's resourceVersion
//!    advances by one per stored change, Events included) and the operator's requests by verb
//!    (the API server's own `apiserver_request_total`: no other client runs).
//! 4. The API server's RSS (this process: the server, its client and the bench).
//!
//! Each point ends with one line:
//! `clusters=N operator_rss_mib=X operator_cpu_pct=Y api_writes_per_min=Z last_first_child_s=W`.
//!
//! `cargo bench -p steward-operator --bench scale` (add `-- --clusters 10,100,1000 --steady S`;
//! each point starts a fresh API server and operator). With `--engine cratedb` every cluster is
//! a `CrateCluster` from `examples/cratedb-cluster.yaml` (3 masters, two data sets of 2, a
//! user, a license): the per-cluster cost to set beside the stock CrateDB operator's. With
//! `--engine foundationdb` every cluster is a `FoundationDBCluster` from
//! `examples/foundationdb-cluster.yaml` (2 storage, 1 log, 1 stateless process group; `--storage
//! N` sets the storage count, e.g. one cluster of 100 process groups) and phase 2 also reports
//! when every process group's Pod exists (the first pass's AddProcessGroups/AddPVCs/AddPods).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use steward_api::etcd::EtcdCluster;
use steward_api::postgres::PostgresCluster;
use steward_operator::embedded::Embedded;

#[path = "common/process.rs"]
mod process;
use process::{Operator, arg, cpu_ticks, rss_mib, status_mib};

const NS: &str = "db";

/// Objects of kind `K` (all namespaces) written after resourceVersion `since`.
async fn written_since<K>(client: &Client, since: u64) -> usize
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let api: Api<K> = Api::all(client.clone());
    let list = api.list_metadata(&ListParams::default()).await.unwrap();
    list.items
        .iter()
        .filter(|o| {
            o.resource_version()
                .and_then(|rv| rv.parse::<u64>().ok())
                .is_some_and(|rv| rv > since)
        })
        .count()
}

/// Which kinds were written after `since` (objects written, not writes: an object written
/// twice counts once).
async fn written_kinds(client: &Client, since: u64) -> String {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Endpoints, PersistentVolumeClaim, Pod};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use k8s_openapi::api::events::v1::Event;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let counts = [
        (
            "EtcdCluster",
            written_since::<EtcdCluster>(client, since).await,
        ),
        (
            "PostgresCluster",
            written_since::<PostgresCluster>(client, since).await,
        ),
        (
            "CrateCluster",
            written_since::<steward_api::cratedb::CrateCluster>(client, since).await,
        ),
        (
            "FoundationDBCluster",
            written_since::<steward_api::foundationdb::FoundationDBCluster>(client, since).await,
        ),
        (
            "StatefulSet",
            written_since::<k8s_openapi::api::apps::v1::StatefulSet>(client, since).await,
        ),
        (
            "EtcdPeer",
            written_since::<steward_api::etcd::EtcdPeer>(client, since).await,
        ),
        ("Pod", written_since::<Pod>(client, since).await),
        ("Service", written_since::<Service>(client, since).await),
        (
            "PersistentVolumeClaim",
            written_since::<PersistentVolumeClaim>(client, since).await,
        ),
        ("Secret", written_since::<Secret>(client, since).await),
        ("ConfigMap", written_since::<ConfigMap>(client, since).await),
        (
            "PodDisruptionBudget",
            written_since::<PodDisruptionBudget>(client, since).await,
        ),
        ("Endpoints", written_since::<Endpoints>(client, since).await),
        (
            "EndpointSlice",
            written_since::<EndpointSlice>(client, since).await,
        ),
        ("Event", written_since::<Event>(client, since).await),
        ("Lease", written_since::<Lease>(client, since).await),
    ];
    counts
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The API server's current resourceVersion (a list's).
async fn resource_version(client: &Client) -> u64 {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let list = api
        .list_metadata(&ListParams::default().limit(1))
        .await
        .unwrap();
    list.metadata
        .resource_version
        .and_then(|rv| rv.parse().ok())
        .unwrap()
}

fn etcd(name: &str) -> EtcdCluster {
    serde_saphyr::from_str(
        &include_str!("../../../examples/etcd-cluster.yaml")
            .replace("name: example", &format!("name: {name}"))
            .replace("namespace: default", &format!("namespace: {NS}")),
    )
    .unwrap()
}

/// The CrateDB example's Secrets and cluster, named `name`.
fn cratedb(name: &str) -> (Vec<Secret>, steward_api::cratedb::CrateCluster) {
    let text = include_str!("../../../examples/cratedb-cluster.yaml")
        .replace("name: demo-crate", &format!("name: {name}"))
        .replace("namespace: default", &format!("namespace: {NS}"));
    let docs = steward_operator::dev::parse_manifests(&text).unwrap();
    let secrets = docs
        .iter()
        .filter(|d| d["kind"] == "Secret")
        .map(|d| serde_json::from_value(d.clone()).unwrap())
        .collect();
    let cluster = docs
        .iter()
        .find(|d| d["kind"] == "CrateCluster")
        .map(|d| serde_json::from_value(d.clone()).unwrap())
        .unwrap();
    (secrets, cluster)
}

/// The series of `name` in two `/metrics` samples that grew between them: (labels, growth).
fn series_delta(before: &str, after: &str, name: &str) -> Vec<(String, f64)> {
    let parse = |text: &str| -> std::collections::HashMap<String, f64> {
        text.lines()
            .filter_map(|l| {
                let rest = l.strip_prefix(name)?;
                let (labels, value) = rest.rsplit_once(' ')?;
                Some((
                    labels.trim_matches(|c| c == '{' || c == '}').to_owned(),
                    value.parse().ok()?,
                ))
            })
            .collect()
    };
    let (before, after) = (parse(before), parse(after));
    let mut out: Vec<(String, f64)> = after
        .into_iter()
        .map(|(labels, v)| {
            let grown = v - before.get(&labels).copied().unwrap_or(0.0);
            (labels, grown)
        })
        .filter(|(_, grown)| *grown > 0.0)
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// What the clusters are: half etcd and half PostgreSQL (the default), or all of one engine
/// (`--engine cratedb`, `--engine foundationdb`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mix {
    EtcdAndPostgres,
    CrateDb,
    FoundationDb,
}

fn mix() -> Mix {
    let args: Vec<String> = std::env::args().collect();
    match args
        .windows(2)
        .find(|w| w[0] == "--engine")
        .map(|w| w[1].as_str())
    {
        None => Mix::EtcdAndPostgres,
        Some("cratedb") => Mix::CrateDb,
        Some("foundationdb") => Mix::FoundationDb,
        Some(other) => panic!("--engine {other}: expected cratedb or foundationdb"),
    }
}

/// The FoundationDB example, named `name`, with `storage` storage process groups.
fn foundationdb(name: &str, storage: u64) -> steward_api::foundationdb::FoundationDBCluster {
    let mut cluster: steward_api::foundationdb::FoundationDBCluster = serde_saphyr::from_str(
        &include_str!("../../../examples/foundationdb-cluster.yaml")
            .replace("name: demo-fdb", &format!("name: {name}"))
            .replace("namespace: default", &format!("namespace: {NS}")),
    )
    .unwrap();
    let mut value = serde_json::to_value(&cluster).unwrap();
    value["spec"]["processCounts"]["storage"] = serde_json::json!(storage);
    cluster = serde_json::from_value(value).unwrap();
    cluster
}

/// Process groups per FoundationDB cluster: the storage count and the example's log and
/// stateless process.
fn foundationdb_groups(storage: u64) -> usize {
    usize::try_from(storage).unwrap() + 2
}

fn postgres(name: &str) -> (Secret, PostgresCluster) {
    let text = include_str!("../../../examples/postgres-cluster.yaml")
        .replace("name: demo-pg", &format!("name: {name}"))
        .replace("namespace: default", &format!("namespace: {NS}"));
    let mut docs = text.split("\n---\n");
    let secret = serde_saphyr::from_str(docs.next().unwrap()).unwrap();
    let cluster = serde_saphyr::from_str(docs.next().unwrap()).unwrap();
    (secret, cluster)
}

/// FoundationDB: waits until every cluster has a Pod for each of its `groups` process groups
/// and prints when the last cluster got its last one (since `started`, the operator's start).
async fn all_process_groups(
    client: &Client,
    n: u64,
    groups: usize,
    started: Instant,
    deadline: Instant,
) {
    use k8s_openapi::api::core::v1::Pod;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut done: std::collections::HashMap<String, Duration> = Default::default();
    while (done.len() as u64) < n && Instant::now() < deadline {
        let list = pods
            .list_metadata(&ListParams::default().labels("app.kubernetes.io/name=foundationdb"))
            .await
            .unwrap();
        let mut per_cluster: std::collections::HashMap<String, usize> = Default::default();
        for pod in list.items {
            if let Some(cluster) = pod.labels().get("app.kubernetes.io/instance") {
                *per_cluster.entry(cluster.clone()).or_default() += 1;
            }
        }
        for (cluster, count) in per_cluster {
            if count >= groups {
                done.entry(cluster).or_insert_with(|| started.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(250 * n.div_ceil(1000).max(1))).await;
    }
    let last = done.values().max().copied().unwrap_or_default();
    println!(
        "every process group's Pod: {}/{n} clusters complete ({groups} Pods each), the last at {:.1} s",
        done.len(),
        last.as_secs_f64()
    );
}

/// p50 and p99 of `steward_reconcile_pass_duration_seconds` between two `/metrics` samples, per
/// controller: the upper bound of the bucket holding each quantile.
fn pass_quantiles(before: &str, after: &str) -> String {
    let buckets = series_delta(
        before,
        after,
        "steward_reconcile_pass_duration_seconds_bucket",
    );
    let mut by_controller: std::collections::BTreeMap<String, Vec<(f64, f64)>> = Default::default();
    for (labels, n) in buckets {
        let field = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
        };
        let (Some(controller), Some(le)) = (field("controller"), field("le")) else {
            continue;
        };
        let bound = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap_or(f64::INFINITY)
        };
        by_controller
            .entry(controller)
            .or_default()
            .push((bound, n));
    }
    by_controller
        .into_iter()
        .map(|(controller, mut cumulative)| {
            cumulative.sort_by(|a, b| a.0.total_cmp(&b.0));
            let total = cumulative.last().map_or(0.0, |(_, n)| *n);
            let at = |q: f64| {
                cumulative
                    .iter()
                    .find(|(_, n)| *n >= q * total)
                    .map_or(f64::INFINITY, |(b, _)| *b)
            };
            format!(
                "{controller}: {total:.0} passes, p50 <= {:.0} ms, p99 <= {:.0} ms",
                at(0.5) * 1000.0,
                at(0.99) * 1000.0
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The API server's `/metrics` text.
async fn server_metrics(client: &Client) -> String {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    client.request_text(req).await.unwrap_or_default()
}

/// The embedded control plane's controller time between two `/metrics` samples (its
/// controllers run under the store's lock: time no request was answered); empty on a real API
/// server, which publishes no such series.
fn controller_time(before: &str, after: &str, over: Duration) -> String {
    let mut secs = series_delta(before, after, "steward_dev_controller_seconds_total");
    if secs.is_empty() {
        return "not published (a real API server)".to_owned();
    }
    let passes = series_delta(before, after, "steward_dev_controller_passes_total");
    secs.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = secs.iter().map(|(_, t)| t).sum();
    format!(
        "{total:.1} s of {:.0} s; most: {}",
        over.as_secs_f64(),
        secs.iter()
            .take(6)
            .map(|(labels, t)| {
                let n = passes
                    .iter()
                    .find(|(l, _)| l == labels)
                    .map_or(0.0, |(_, n)| *n);
                format!(
                    "{} {t:.1} s ({n:.0} passes)",
                    labels.trim_start_matches("controller=")
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// `apiserver_request_total` summed by verb, and by `VERB resource[/subresource]`.
async fn requests_by_verb(client: &Client) -> std::collections::BTreeMap<String, u64> {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    let label = |line: &str, name: &str| -> String {
        line.split(&format!("{name}=\""))
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_default()
            .to_owned()
    };
    let mut out = std::collections::BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let verb = label(line, "verb");
        let (resource, sub) = (label(line, "resource"), label(line, "subresource"));
        let n: u64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        *out.entry(verb.clone()).or_insert(0) += n;
        let what = if sub.is_empty() {
            resource
        } else {
            format!("{resource}/{sub}")
        };
        *out.entry(format!("{verb} {what}")).or_insert(0) += n;
    }
    out
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let steady = arg("--steady", 60);
    let args: Vec<String> = std::env::args().collect();
    let points: Vec<u64> = args
        .iter()
        .position(|a| a == "--clusters")
        .and_then(|i| args.get(i + 1))
        .map_or_else(
            || vec![1000],
            |list| {
                list.split(',')
                    .filter_map(|n| n.trim().parse().ok())
                    .collect()
            },
        );
    let mut lines = Vec::new();
    for n in points {
        lines.push(point(n, steady).await);
    }
    println!();
    for line in lines {
        println!("{line}");
    }
}

/// One point: `n` clusters on a fresh API server and operator; its summary line.
async fn point(n: u64, steady: u64) -> String {
    let plane = Embedded::start(&[NS, "steward-system"]).await.unwrap();
    let client = plane.client.clone();
    let mix = mix();
    let storage = arg("--storage", 2);
    if mix == Mix::CrateDb {
        println!("scale: {n} clusters (CrateDB: 3 masters + 2 + 2 data nodes each)");
    } else if mix == Mix::FoundationDb {
        println!(
            "scale: {n} clusters (FoundationDB: {storage} storage, 1 log, 1 stateless process groups each)"
        );
    } else {
        println!(
            "scale: {n} clusters ({} etcd, {} PostgreSQL)",
            n / 2,
            n - n / 2
        );
    }

    // The password Secret of every PostgreSQL cluster's user; CrateDB's user and license.
    let mut secrets = vec![postgres("pg").0];
    secrets.extend(cratedb("crate").0);
    for secret in secrets {
        Api::<Secret>::namespaced(client.clone(), NS)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    // 1. Create, while a prober measures /readyz.
    let slowest = Arc::new(AtomicU64::new(0));
    let probing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let prober = {
        let (client, slowest, probing) = (client.clone(), slowest.clone(), probing.clone());
        tokio::spawn(async move {
            while probing.load(Ordering::Relaxed) {
                let started = Instant::now();
                let req = http::Request::get("/readyz").body(Vec::new()).unwrap();
                let _ = client.request_text(req).await;
                let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                slowest.fetch_max(ms, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let started = Instant::now();
    let names: Vec<(bool, String)> = (0..n).map(|i| (i % 2 == 0, format!("c{i:05}"))).collect();
    futures::stream::iter(names.clone())
        .for_each_concurrent(16, |(is_etcd, name)| {
            let client = client.clone();
            async move {
                if mix == Mix::CrateDb {
                    Api::<steward_api::cratedb::CrateCluster>::namespaced(client, NS)
                        .create(&PostParams::default(), &cratedb(&name).1)
                        .await
                        .unwrap();
                } else if mix == Mix::FoundationDb {
                    Api::<steward_api::foundationdb::FoundationDBCluster>::namespaced(client, NS)
                        .create(&PostParams::default(), &foundationdb(&name, storage))
                        .await
                        .unwrap();
                } else if is_etcd {
                    Api::<EtcdCluster>::namespaced(client, NS)
                        .create(&PostParams::default(), &etcd(&name))
                        .await
                        .unwrap();
                } else {
                    Api::<PostgresCluster>::namespaced(client, NS)
                        .create(&PostParams::default(), &postgres(&name).1)
                        .await
                        .unwrap();
                }
            }
        })
        .await;
    let applied = started.elapsed();
    probing.store(false, Ordering::Relaxed);
    prober.await.unwrap();
    println!(
        "create: {n} clusters in {:.1} s ({:.0}/s); slowest /readyz meanwhile {} ms",
        applied.as_secs_f64(),
        n as f64 / applied.as_secs_f64(),
        slowest.load(Ordering::Relaxed)
    );

    // 2. The operator, as its own process, until every cluster has its first child.
    let dir = tempfile::tempdir().unwrap();
    let server_before = server_metrics(&client).await;
    let started = Instant::now();
    let operator = Operator::start(&plane, dir.path());
    let pid = operator.0.id();
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let mut first_child: std::collections::HashMap<String, Duration> = Default::default();
    let deadline = Instant::now() + Duration::from_secs(arg("--wait", 600));
    let wanted: std::collections::HashSet<&str> = names.iter().map(|(_, n)| n.as_str()).collect();
    while first_child.len() < names.len() && Instant::now() < deadline {
        // FoundationDB's first child is its ConfigMap `<cluster>-config` (it has no Service).
        let listed: Vec<String> = if mix == Mix::FoundationDb {
            let list = config_maps.list_metadata(&ListParams::default()).await;
            list.unwrap()
                .items
                .iter()
                .map(ResourceExt::name_any)
                .collect()
        } else {
            let list = services.list_metadata(&ListParams::default()).await;
            list.unwrap()
                .items
                .iter()
                .map(ResourceExt::name_any)
                .collect()
        };
        for name in listed {
            // Services are `<cluster>`, `<cluster>-client`, `<cluster>-primary`, `-replicas`;
            // CrateDB's `crate-discovery-<cluster>` and `crate-<cluster>`.
            let name = name
                .strip_prefix("crate-discovery-")
                .or_else(|| name.strip_prefix("crate-"))
                .unwrap_or(&name);
            let cluster = name.split('-').next().unwrap_or_default();
            if wanted.contains(cluster) {
                first_child
                    .entry(cluster.to_owned())
                    .or_insert_with(|| started.elapsed());
            }
        }
        // A list of every Service is itself load on the API server: every 250 ms per 1,000
        // clusters (at 10,000 clusters the figures are then within 2.5 s).
        tokio::time::sleep(Duration::from_millis(250 * n.div_ceil(1000).max(1))).await;
    }
    let mut operator = operator;
    operator.assert_running(dir.path());
    let got = names
        .iter()
        .filter(|(_, name)| first_child.contains_key(name))
        .count();
    let mut times: Vec<Duration> = first_child.values().copied().collect();
    times.sort();
    let at = |q: f64| {
        let i = ((times.len() as f64 * q).ceil() as usize).clamp(1, times.len().max(1)) - 1;
        times.get(i).map_or(0.0, Duration::as_secs_f64)
    };
    println!(
        "first child: {got}/{n} clusters; p50 {:.1} s, p90 {:.1} s, p99 {:.1} s, last {:.1} s \
         (operator started at 0)",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
    if mix == Mix::FoundationDb {
        all_process_groups(&client, n, foundationdb_groups(storage), started, deadline).await;
    }
    println!(
        "  the embedded API server's controllers meanwhile: {}",
        controller_time(
            &server_before,
            &server_metrics(&client).await,
            started.elapsed()
        )
    );

    // 3. Steady state.
    tokio::time::sleep(Duration::from_secs(arg("--settle", 90))).await;
    let server0 = server_metrics(&client).await;
    let (rv0, ticks0, verbs0, metrics0, t0) = (
        resource_version(&client).await,
        cpu_ticks(pid),
        requests_by_verb(&client).await,
        operator.metrics_text().unwrap_or_default(),
        Instant::now(),
    );
    tokio::time::sleep(Duration::from_secs(steady)).await;
    let (rv1, ticks1, verbs1, metrics1, elapsed) = (
        resource_version(&client).await,
        cpu_ticks(pid),
        requests_by_verb(&client).await,
        operator.metrics_text().unwrap_or_default(),
        t0.elapsed(),
    );
    let cpu = (ticks1 - ticks0) as f64 / 100.0 / elapsed.as_secs_f64() * 100.0;
    let rss = rss_mib(&pid.to_string());
    let part = |field| status_mib(&pid.to_string(), field);
    println!(
        "steady ({steady} s): operator RSS {rss:.0} MiB (anonymous {:.0}, file-backed {:.0}; \
         peak {:.0}), CPU {cpu:.1} % of a core, API writes {}",
        part("RssAnon"),
        part("RssFile"),
        part("VmHWM"),
        rv1 - rv0
    );
    let heap = |state: &str| {
        operator
            .metric(&format!("steward_allocator_bytes{{state=\"{state}\"}}"))
            .map_or("?".to_owned(), |b| format!("{:.0}", b / 1048576.0))
    };
    println!(
        "  operator heap (jemalloc): allocated {} MiB, active {}, resident {}, retained {}",
        heap("allocated"),
        heap("active"),
        heap("resident"),
        heap("retained")
    );
    println!(
        "  pass time in that window, per controller (from the operator's histogram; bucket upper bounds): {}",
        pass_quantiles(&metrics0, &metrics1)
    );
    // Where the passes' time went: the operator's own step histograms over the window.
    let passes = series_delta(&metrics0, &metrics1, "steward_reconcile_passes_total");
    println!(
        "  passes in that window: {}",
        passes
            .iter()
            .map(|(labels, n)| format!("{labels} {n:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut steps = series_delta(
        &metrics0,
        &metrics1,
        "steward_reconcile_step_duration_seconds_sum",
    );
    steps.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = steps.iter().map(|(_, t)| t).sum();
    println!(
        "  step time in that window: {:.2} s in all (wall clock, awaits included); most: {}",
        total,
        steps
            .iter()
            .take(8)
            .map(|(labels, t)| format!("{labels} {:.0} ms", t * 1000.0))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  the embedded API server's controllers in that window: {}",
        controller_time(&server0, &server_metrics(&client).await, elapsed)
    );
    let delta: Vec<(String, u64)> = verbs1
        .iter()
        .map(|(v, n)| (v.clone(), n - verbs0.get(v).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    // The bench's own reads (resourceVersion, written kinds, /metrics) are LISTs and GETs.
    let show = |keep: &dyn Fn(&str) -> bool| {
        delta
            .iter()
            .filter(|(v, _)| keep(v))
            .map(|(v, n)| format!("{v} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "  requests by verb in that window (the bench's own LIST/GET included): {}",
        show(&|v| !v.contains(' '))
    );
    println!(
        "  writes by resource (a server-side apply that changes nothing is a PATCH too): {}",
        show(&|v| v.contains(' ')
            && !v.starts_with("GET")
            && !v.starts_with("LIST")
            && !v.starts_with("WATCH"))
    );
    println!(
        "  reads by resource (the bench's own included): {}",
        show(&|v| v.contains(' ') && (v.starts_with("GET") || v.starts_with("LIST")))
    );
    let writes: u64 = delta
        .iter()
        .filter(|(v, _)| matches!(v.as_str(), "POST" | "PUT" | "PATCH" | "DELETE"))
        .map(|(_, n)| n)
        .sum();
    let writes_per_min = writes as f64 * 60.0 / elapsed.as_secs_f64();
    println!(
        "  objects written in that window: {}",
        written_kinds(&client, rv0).await
    );
    println!(
        "API server process (server + bench) RSS {:.0} MiB",
        rss_mib("self")
    );
    drop(operator);
    plane.server.shutdown().await;
    format!(
        "clusters={n} operator_rss_mib={rss:.0} operator_cpu_pct={cpu:.1} api_writes_per_min={writes_per_min:.1} last_first_child_s={:.1}",
        at(1.0)
    )
}
