//! The PostgreSQL metrics sidecar end to end: a cluster with `spec.metrics` gets a second
//! container per instance, which the node agent runs as Debian's `prometheus-postgres-exporter`
//! (the image map's stand-in for `quay.io/prometheuscommunity/postgres-exporter`). The exporter
//! logs in as the superuser over the Pod's address and serves `/metrics` on that address.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::e2e::{Plane, true_condition};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::LogParams;
use steward_api::postgres::PostgresCluster;

/// What `scripts/prereqs.sh` installs (Debian's prometheus-postgres-exporter).
const EXPORTER: &str = "/usr/bin/prometheus-postgres-exporter";
const BOOT: Duration = Duration::from_secs(120);
/// A value the test sets, so the exported setting can only come from this instance.
const MAX_CONNECTIONS: &str = "37";

fn manifest(name: &str) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: PostgresCluster\nmetadata:\n  name: {name}\nspec:\n  version: \"15\"\n  instances: 1\n  parameters:\n    max_connections: \"{MAX_CONNECTIONS}\"\n  metrics: {{}}\n"
    )
}

/// Available with one ready instance and nothing in progress.
fn settled(c: &PostgresCluster) -> bool {
    let Some(s) = &c.status else { return false };
    true_condition(&s.common, "Available").is_some()
        && s.ready_instances == 1
        && s.instances.iter().all(|i| i.ready)
        && s.common.operation.is_none()
}

/// Every container of the Pod is reported, running and ready.
fn containers_ready(pod: &Pod) -> bool {
    let want = pod.spec.as_ref().map_or(0, |s| s.containers.len());
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    statuses.len() == want
        && statuses
            .iter()
            .all(|c| c.ready && c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

/// The value of the sample `name` (with exactly `labels`) in a text exposition.
fn sample<'a>(body: &'a str, name: &str, labels: &str) -> Option<&'a str> {
    let prefix = format!("{name}{labels} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(str::trim)
}

/// `/proc/<pid>/cmdline` of every process, as argument vectors.
fn command_lines() -> Vec<Vec<String>> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|raw| {
            raw.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_metrics_sidecar_exports_the_instance_it_runs_beside() {
    assert!(
        Path::new(EXPORTER).is_file(),
        "{EXPORTER} is missing: the metrics sidecar runs Debian's exporter; install it with \
         scripts/prereqs.sh (apt-get install prometheus-postgres-exporter)"
    );
    let plane = Plane::start().await;
    plane.apply(&manifest("watched")).await;
    plane
        .wait_for::<PostgresCluster, _>("watched with one ready instance", "watched", BOOT, settled)
        .await;

    // Two containers, the database and the exporter, both running and ready.
    let pod = plane
        .wait_for::<Pod, _>(
            "watched-0 with both containers ready",
            "watched-0",
            Duration::from_secs(60),
            containers_ready,
        )
        .await;
    let names: Vec<&str> = pod
        .spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["postgres", "metrics"]);
    let status = pod.status.as_ref().unwrap();
    let metrics_status = status
        .container_statuses
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.name == "metrics")
        .unwrap();
    assert_eq!(
        metrics_status.image_id,
        format!("steward-node://{EXPORTER}"),
        "the sidecar runs the host's exporter"
    );
    let ip = status.pod_ip.clone().unwrap();

    // The exporter reached PostgreSQL: `pg_up 1`, and the settings and version it reports are
    // this instance's (label `server` is the address it logged in to: the Pod's).
    let server = format!("{{server=\"{ip}:5432\"}}");
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let url = format!("http://{ip}:9187/metrics");
    let body = plane
        .eventually(
            &format!("{url} reports pg_up 1"),
            Duration::from_secs(60),
            || {
                let (http, url) = (http.clone(), url.clone());
                async move {
                    let response = http.get(&url).send().await.ok()?;
                    if !response.status().is_success() {
                        return None;
                    }
                    let body = response.text().await.ok()?;
                    (sample(&body, "pg_up", "") == Some("1")).then_some(body)
                }
            },
        )
        .await;
    assert_eq!(
        sample(&body, "pg_settings_max_connections", &server),
        Some(MAX_CONNECTIONS),
        "max_connections as spec.parameters set it"
    );
    let version = body
        .lines()
        .find(|l| l.starts_with("pg_static{") && l.contains(&format!("server=\"{ip}:5432\"")))
        .unwrap_or_else(|| panic!("no pg_static sample for {ip}:5432"));
    assert!(
        version.contains("short_version=\"15.") && version.ends_with(" 1"),
        "{version}"
    );
    assert!(
        body.lines().any(|l| {
            l.starts_with("pg_database_size_bytes{datname=\"postgres\"")
                && l.contains(&format!("server=\"{ip}:5432\""))
        }),
        "per-database metrics of the instance are exported"
    );

    // The superuser password reaches the exporter only through its environment (from the
    // Secret): neither the Pod spec, nor a process's arguments, nor the log carry it.
    let secret = plane
        .api::<Secret>()
        .get("watched-superuser")
        .await
        .unwrap();
    let password = String::from_utf8(secret.data.unwrap()["password"].0.clone()).unwrap();
    assert!(password.len() >= 16, "a generated password");
    let spec_json = serde_json::to_string(pod.spec.as_ref().unwrap()).unwrap();
    assert!(!spec_json.contains(&password), "password in the Pod spec");
    let listen = format!("--web.listen-address={ip}:9187");
    let exporters: Vec<Vec<String>> = command_lines()
        .into_iter()
        .filter(|argv| argv.iter().any(|a| a == &listen))
        .collect();
    assert!(
        !exporters.is_empty(),
        "an exporter process listening on the Pod's address ($(POD_IP) expanded)"
    );
    for argv in &exporters {
        assert!(
            argv.iter().all(|a| !a.contains(&password)),
            "password in the arguments of {:?}",
            argv.first()
        );
    }
    let log = plane
        .api::<Pod>()
        .logs(
            "watched-0",
            &LogParams {
                container: Some("metrics".into()),
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    assert!(log.contains(&format!("{ip}:9187")), "{log}");
    assert!(!log.contains(&password), "password in the exporter's log");

    plane.shutdown().await;
}
