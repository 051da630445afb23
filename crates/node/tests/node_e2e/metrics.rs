//! Resource metrics: the kubelet API's `/metrics/resource` (what metrics-server scrapes), and
//! `kubectl top` against an embedded plane that scrapes it for `metrics.k8s.io`. kubectl is
//! `$KUBECTL`, else the CI venv's (`$HOME/.cache/steward-ci/kubectl-venv/bin/kubectl`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use steward_apiserver::ServerConfig;

use crate::common::*;

const T: Duration = Duration::from_secs(30);

/// A Pod whose only container spins a CPU, and one whose container sleeps.
async fn burn_and_idle(env: &Env) {
    for (name, script) in [("burn", "while :; do :; done"), ("idle", "exec sleep 300")] {
        env.create::<Pod>(json!({
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36",
                "command": ["sh", "-c", script]}]}
        }))
        .await;
    }
    env.wait_ready("burn", T).await;
    env.wait_ready("idle", T).await;
}

/// The samples of one scrape, by metric name and `namespace/pod/container` (empty for the
/// node), read with a Prometheus text parser; and the raw text.
async fn scrape(env: &Env) -> (HashMap<(String, String), f64>, String) {
    let (code, text) = kubelet_get(env.node().kubelet_addr(), "/metrics/resource").await;
    assert_eq!(code, 200, "{text}");
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
    let mut out = HashMap::new();
    for s in scrape.samples {
        let v = match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            other => panic!("{}: unexpected value {other:?}", s.metric),
        };
        let who = ["namespace", "pod", "container"]
            .iter()
            .filter_map(|k| s.labels.get(k))
            .collect::<Vec<_>>()
            .join("/");
        out.insert((s.metric, who), v);
    }
    (out, text)
}

fn get(samples: &HashMap<(String, String), f64>, metric: &str, who: &str) -> Option<f64> {
    samples.get(&(metric.to_string(), who.to_string())).copied()
}

#[tokio::test]
async fn resource_metrics_count_the_cpu_a_pod_burns() {
    let env = start(26).await;
    burn_and_idle(&env).await;
    let (first, text) = scrape(&env).await;
    for family in [
        "# TYPE node_cpu_usage_seconds_total counter",
        "# TYPE node_memory_working_set_bytes gauge",
        "# TYPE container_cpu_usage_seconds_total counter",
        "# TYPE container_memory_working_set_bytes gauge",
        "# TYPE container_start_time_seconds gauge",
        "# TYPE pod_cpu_usage_seconds_total counter",
        "# TYPE pod_memory_working_set_bytes gauge",
        "# TYPE scrape_error gauge",
    ] {
        assert!(text.contains(family), "{family} missing:\n{text}");
    }
    // Usage samples carry the time they were read (ms), as the kubelet writes them.
    let now_ms = jiff::Timestamp::now().as_millisecond();
    for line in text.lines().filter(|l| {
        l.starts_with("container_cpu_usage_seconds_total{") || l.starts_with("node_cpu_usage")
    }) {
        let ts: i64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!((now_ms - ts).abs() < 60_000, "{line}");
    }
    assert_eq!(get(&first, "scrape_error", ""), Some(0.0));
    assert!(get(&first, "node_cpu_usage_seconds_total", "").unwrap() > 0.0);
    assert!(get(&first, "node_memory_working_set_bytes", "").unwrap() > 0.0);
    assert!(get(&first, "container_memory_working_set_bytes", "t/burn/c").unwrap() > 0.0);
    let started = get(&first, "container_start_time_seconds", "t/burn/c").unwrap();
    assert!(
        (now_ms as f64 / 1000.0 - started).abs() < 120.0,
        "{started}"
    );
    let cpu = |s: &HashMap<_, _>, pod: &str| {
        get(
            s,
            "container_cpu_usage_seconds_total",
            &format!("t/{pod}/c"),
        )
        .unwrap()
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (second, _) = scrape(&env).await;
    let burnt = cpu(&second, "burn") - cpu(&first, "burn");
    let idled = cpu(&second, "idle") - cpu(&first, "idle");
    // A spinning shell gets most of a core even on a loaded two-core machine; a sleeping one
    // next to nothing.
    assert!(burnt > 0.5, "burn used {burnt} s of CPU in 2 s");
    assert!(idled < 0.1, "idle used {idled} s of CPU in 2 s");
    let pod_total = get(&second, "pod_cpu_usage_seconds_total", "t/burn").unwrap();
    assert!((pod_total - cpu(&second, "burn")).abs() < 1e-6);
    env.shutdown().await;
}

fn kubectl_bin() -> PathBuf {
    match std::env::var("KUBECTL") {
        Ok(k) if !k.is_empty() => k.into(),
        _ => PathBuf::from(std::env::var("HOME").unwrap_or_default())
            .join(".cache/steward-ci/kubectl-venv/bin/kubectl"),
    }
}

/// Runs kubectl against the plane until it succeeds and its output has `needle`.
async fn kubectl_until(kubeconfig: &std::path::Path, args: &[&str], needle: &str) -> String {
    let deadline = Instant::now() + T;
    loop {
        let out = tokio::process::Command::new(kubectl_bin())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .output()
            .await
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() && text.contains(needle) {
            return text;
        }
        assert!(Instant::now() < deadline, "kubectl {args:?}: {text}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A row's cells under the header's columns.
fn row<'a>(text: &'a str, first: &str) -> (Vec<&'a str>, Vec<&'a str>) {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let cells: Vec<&str> = lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|c| c.first() == Some(&first))
        .unwrap_or_else(|| panic!("no row {first}:\n{text}"));
    (header, cells)
}

fn millicores(cell: &str) -> u64 {
    match cell.strip_suffix('m') {
        Some(m) => m.parse().unwrap(),
        None => cell.parse::<u64>().unwrap() * 1000,
    }
}

fn mebibytes(cell: &str) -> u64 {
    cell.strip_suffix("Mi").unwrap().parse().unwrap()
}

#[tokio::test]
async fn kubectl_top_shows_the_node_and_a_burning_pod() {
    let env = start_with(
        27,
        ServerConfig {
            // kubectl sends no token over plain HTTP, as with `steward dev`.
            anonymous_cluster_admin: true,
            metric_resolution: Duration::from_secs(1),
            ..ServerConfig::default()
        },
    )
    .await;
    let kubeconfig = env.dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, env.server.as_ref().unwrap().kubeconfig_yaml()).unwrap();
    burn_and_idle(&env).await;
    let nodes = kubectl_until(&kubeconfig, &["top", "node"], "steward-test").await;
    let (header, cells) = row(&nodes, "steward-test");
    assert_eq!(
        header,
        ["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"],
        "{nodes}"
    );
    assert!(millicores(cells[1]) > 0, "{nodes}");
    assert!(mebibytes(cells[3]) > 0, "{nodes}");
    assert!(
        cells[2].ends_with('%') && cells[4].ends_with('%'),
        "{nodes}"
    );
    // The burning Pod is seen over one window of at least a second: most of a core.
    let pods = kubectl_until(&kubeconfig, &["top", "pod", "-A"], "burn").await;
    let (header, burn) = row(&pods, "t");
    assert_eq!(
        header,
        ["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"],
        "{pods}"
    );
    println!("{nodes}{pods}");
    let burn = if burn[1] == "burn" {
        burn
    } else {
        pods.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|c| c.get(1) == Some(&"burn"))
            .unwrap()
    };
    assert!(millicores(burn[2]) > 300, "{pods}");
    assert!(mebibytes(burn[3]) > 0, "{pods}");
    let idle = kubectl_until(
        &kubeconfig,
        &["top", "pod", "-n", "t", "-l", "app=idle"],
        "idle",
    )
    .await;
    let (_, idle) = row(&idle, "idle");
    assert!(millicores(idle[1]) < 100, "idle: {idle:?}");
    env.shutdown().await;
}
