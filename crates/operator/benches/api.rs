//! The REST API's `show cluster` (issue 15; record results in docs/performance.md): the
//! embedded API server in this process holding `--clusters N` `PostgresCluster`s (default
//! 100), the REST API served over HTTPS on it, and `--concurrency C` clients (default 4)
//! asking for a random cluster for `--seconds S` (default 10) each way:
//! - `GET …/clusters/postgres/<name>` with a bearer token (the CLI after `steward login`);
//! - the same with basic auth (an argon2 check per call: the cost of not logging in);
//! - the same object straight from the Kubernetes API (`GET postgresclusters/<name>`, the
//!   floor: the REST API makes that one call per request);
//! - and, sequentially, `kubectl get postgrescluster <name> -o json` (`$KUBECTL`), what a user
//!   without the API would run, including its process start.
//!
//! Each prints requests per second and p50 / p99 latency.
//! `cargo bench -p steward-operator --bench api` (add `-- --clusters N --concurrency C --seconds S`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use kube::api::{Api, PostParams};
use steward_api::postgres::{PostgresCluster, PostgresClusterSpec};
use steward_operator::api::access::{AccessTable, ApiUser, LoginLimiter, hash_password};
use steward_operator::api::listen::serve_https;
use steward_operator::api::server::ApiState;
use steward_operator::api::tls::ServingCert;
use steward_operator::api::tokens::TokenKey;
use steward_operator::clock::SystemClock;
use steward_operator::embedded::Embedded;
use tokio_util::sync::CancellationToken;

#[path = "common/process.rs"]
mod process;
use process::arg;

const NS: &str = "bench";

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

struct Figures {
    label: &'static str,
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    n: usize,
}

fn figures(label: &'static str, mut latencies: Vec<Duration>, elapsed: Duration) -> Figures {
    latencies.sort();
    Figures {
        label,
        rps: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_ms: percentile(&latencies, 0.5),
        p99_ms: percentile(&latencies, 0.99),
        n: latencies.len(),
    }
}

/// Runs `call` from `concurrency` tasks for `seconds`; every call must succeed.
async fn drive<F, Fut>(concurrency: usize, seconds: u64, call: F) -> (Vec<Duration>, Duration)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let call = Arc::new(call);
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for worker in 0..concurrency {
        let call = call.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            let mut i = worker;
            while Instant::now() < until {
                let t = Instant::now();
                call(i).await;
                out.push(t.elapsed());
                i += concurrency;
            }
            out
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    (all, started.elapsed())
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let clusters = arg("--clusters", 100) as usize;
    let concurrency = arg("--concurrency", 4) as usize;
    let seconds = arg("--seconds", 10);

    // kubectl sends no credentials over plain HTTP (as in `steward dev`).
    let config = steward_apiserver::ServerConfig {
        anonymous_cluster_admin: true,
        ..Default::default()
    };
    let plane = Embedded::start_with(config, &[NS]).await.unwrap();
    let api: Api<PostgresCluster> = Api::namespaced(plane.client.clone(), NS);
    for i in 0..clusters {
        let c = PostgresCluster::new(&format!("pg-{i}"), PostgresClusterSpec::new(3, "15"));
        api.create(&PostParams::default(), &c).await.unwrap();
    }
    let password = "bench-Password-1";
    let data = BTreeMap::from([
        ("username".to_owned(), b"admin".to_vec()),
        (
            "password-hash".to_owned(),
            hash_password(password).unwrap().into_bytes(),
        ),
        ("roles".to_owned(), b"admin".to_vec()),
    ]);
    let state = Arc::new(ApiState {
        client: plane.client.clone(),
        access: RwLock::new(AccessTable::new(
            vec![ApiUser::from_data(&data).unwrap()],
            Vec::new(),
        )),
        limiter: Mutex::new(LoginLimiter::default()),
        tokens: TokenKey::new(&[7; 32]).unwrap(),
        clock: Arc::new(SystemClock),
    });
    let cert = ServingCert::generate(&["localhost".into(), "127.0.0.1".into()]).unwrap();
    let stop = CancellationToken::new();
    let (addr, _task): (SocketAddr, _) =
        serve_https("127.0.0.1:0".parse().unwrap(), &cert, state, stop.clone())
            .await
            .unwrap();
    let http = reqwest::Client::builder()
        .tls_certs_only(reqwest::Certificate::from_pem_bundle(cert.ca_pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let base = format!("https://localhost:{}", addr.port());
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("admin:{password}"))
    );
    let login: serde_json::Value = http
        .post(format!("{base}/api/v1/login"))
        .header("Authorization", &basic)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let bearer = format!("Bearer {}", login["token"].as_str().unwrap());

    let mut results = Vec::new();
    for (label, auth) in [
        ("REST API, bearer token", bearer.clone()),
        ("REST API, basic auth", basic.clone()),
    ] {
        let http = http.clone();
        let base = base.clone();
        let (lat, elapsed) = drive(concurrency, seconds, move |i| {
            let request = http
                .get(format!(
                    "{base}/api/v1/namespaces/{NS}/clusters/postgres/pg-{}",
                    i % clusters
                ))
                .header("Authorization", auth.clone());
            async move {
                let r = request.send().await.unwrap();
                assert!(r.status().is_success(), "{}", r.status());
                let _ = r.bytes().await.unwrap();
            }
        })
        .await;
        results.push(figures(label, lat, elapsed));
    }
    let direct = api.clone();
    let (lat, elapsed) = drive(concurrency, seconds, move |i| {
        let api = direct.clone();
        async move {
            api.get(&format!("pg-{}", i % clusters)).await.unwrap();
        }
    })
    .await;
    results.push(figures("Kubernetes API, same object", lat, elapsed));

    // kubectl, one process per call as a user runs it (sequential: it is CPU-bound here).
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kubeconfig.path(), plane.server.kubeconfig_yaml()).unwrap();
    let started = Instant::now();
    let mut lat = Vec::new();
    let mut i = 0;
    while started.elapsed() < Duration::from_secs(seconds) {
        let t = Instant::now();
        let out = tokio::process::Command::new(&kubectl)
            .args(["get", "postgrescluster", &format!("pg-{}", i % clusters)])
            .args(["-n", NS, "-o", "json"])
            .env("KUBECONFIG", kubeconfig.path())
            .output()
            .await
            .unwrap_or_else(|e| panic!("running {kubectl} (set KUBECTL): {e}"));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        lat.push(t.elapsed());
        i += 1;
    }
    results.push(figures(
        "kubectl get -o json (sequential)",
        lat,
        started.elapsed(),
    ));
    stop.cancel();

    println!(
        "show cluster: {clusters} PostgresClusters, {concurrency} concurrent clients, {seconds} s each"
    );
    println!(
        "{:<36} {:>10} {:>9} {:>9} {:>8}",
        "client", "req/s", "p50 ms", "p99 ms", "calls"
    );
    for f in &results {
        println!(
            "{:<36} {:>10.1} {:>9.2} {:>9.2} {:>8}",
            f.label, f.rps, f.p50_ms, f.p99_ms, f.n
        );
    }
    let token = &results[0];
    let kubectl = &results[3];
    println!(
        "clusters={clusters} api_show_rps={:.1} api_show_p99_ms={:.2} kubectl_get_rps={:.1} kubectl_get_p99_ms={:.2}",
        token.rps, token.p99_ms, kubectl.rps, kubectl.p99_ms
    );
}
