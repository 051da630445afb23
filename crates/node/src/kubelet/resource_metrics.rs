//! `GET /metrics/resource`: the kubelet's resource metrics, the endpoint metrics-server scrapes,
//! in the Prometheus text format (0.0.4) with the kubelet's metric names, help texts, label
//! names and timestamps (`pkg/kubelet/metrics/collectors/resource_metrics.go`): families in name
//! order, usage samples stamped with the time they were read (milliseconds), start times and
//! the scrape error unstamped. Figures come from `crate::stats`; swap is not measured, so its
//! families are left out, as a kubelet leaves out what it has no figure for.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::agent::Shared;
use crate::stats::{self, Summary, Usage};

const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub async fn resource_metrics(State(shared): State<Arc<Shared>>) -> Response {
    let measured = tokio::task::spawn_blocking(move || stats::summary(&shared.registry)).await;
    let summary = match measured {
        Ok(Ok(s)) => Some(s),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, category = e.category(), "resource metrics: measuring failed");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "resource metrics: the measuring task failed");
            None
        }
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        render(summary.as_ref()),
    )
        .into_response()
}

/// One sample: labels (already in name order), value, optional timestamp.
type Sample = (Vec<(&'static str, String)>, f64, Option<i64>);

struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    samples: Vec<Sample>,
}

fn seconds(ns: u64) -> f64 {
    // f64 holds nanosecond counters exactly up to 2^53 ns (104 days of one core), then to
    // within a microsecond for centuries: what the kubelet's float64 holds too.
    ns as f64 / 1e9
}

fn millis(u: &Usage) -> Option<i64> {
    Some(u.at.as_millisecond())
}

/// (pure) The text of `/metrics/resource` for `summary`; `None` is a failed measurement, which
/// the kubelet reports as `scrape_error 1` and nothing else.
pub fn render(summary: Option<&Summary>) -> String {
    let mut families = vec![
        family(
            "container_cpu_usage_seconds_total",
            "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
            "counter",
        ),
        family(
            "container_memory_working_set_bytes",
            "[STABLE] Current working set of the container in bytes",
            "gauge",
        ),
        family(
            "container_start_time_seconds",
            "[STABLE] Start time of the container since unix epoch in seconds",
            "gauge",
        ),
        family(
            "node_cpu_usage_seconds_total",
            "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
            "counter",
        ),
        family(
            "node_memory_working_set_bytes",
            "[STABLE] Current working set of the node in bytes",
            "gauge",
        ),
        family(
            "pod_cpu_usage_seconds_total",
            "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
            "counter",
        ),
        family(
            "pod_memory_working_set_bytes",
            "[STABLE] Current working set of the pod in bytes",
            "gauge",
        ),
        family(
            "resource_scrape_error",
            "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
            "gauge",
        ),
        family(
            "scrape_error",
            "[ALPHA] 1 if there was an error while getting container metrics, 0 otherwise",
            "gauge",
        ),
    ];
    let error = if summary.is_some() { 0.0 } else { 1.0 };
    families[7].samples.push((Vec::new(), error, None));
    families[8].samples.push((Vec::new(), error, None));
    if let Some(s) = summary {
        families[3]
            .samples
            .push((Vec::new(), seconds(s.node.cpu_ns), millis(&s.node)));
        families[4]
            .samples
            .push((Vec::new(), s.node.working_set as f64, millis(&s.node)));
        for pod in &s.pods {
            let pod_labels = vec![
                ("namespace", pod.namespace.clone()),
                ("pod", pod.name.clone()),
            ];
            for c in &pod.containers {
                let labels = vec![
                    ("container", c.name.clone()),
                    ("namespace", pod.namespace.clone()),
                    ("pod", pod.name.clone()),
                ];
                let start = c.started_at.as_nanosecond() as f64 / 1e9;
                families[0].samples.push((
                    labels.clone(),
                    seconds(c.usage.cpu_ns),
                    millis(&c.usage),
                ));
                families[1].samples.push((
                    labels.clone(),
                    c.usage.working_set as f64,
                    millis(&c.usage),
                ));
                families[2].samples.push((labels, start, None));
            }
            let cpu: u64 = pod.containers.iter().map(|c| c.usage.cpu_ns).sum();
            let mem: u64 = pod.containers.iter().map(|c| c.usage.working_set).sum();
            let at = pod.containers.iter().map(|c| c.usage.at).max();
            let at = at.map(|t| t.as_millisecond());
            families[5]
                .samples
                .push((pod_labels.clone(), seconds(cpu), at));
            families[6].samples.push((pod_labels, mem as f64, at));
        }
    }
    let mut out = String::new();
    for f in families.iter_mut().filter(|f| !f.samples.is_empty()) {
        // As the Prometheus registry writes them: samples in label-value order.
        f.samples.sort_by(|a, b| a.0.cmp(&b.0));
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for (labels, value, ts) in &f.samples {
            out.push_str(f.name);
            if !labels.is_empty() {
                let pairs: Vec<String> = labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                    .collect();
                let _ = write!(out, "{{{}}}", pairs.join(","));
            }
            let _ = write!(out, " {value}");
            if let Some(ts) = ts {
                let _ = write!(out, " {ts}");
            }
            out.push('\n');
        }
    }
    out
}

fn family(name: &'static str, help: &'static str, kind: &'static str) -> Family {
    Family {
        name,
        help,
        kind,
        samples: Vec::new(),
    }
}

/// A label value as the text format escapes it: backslash, double quote and newline.
fn escape(v: &str) -> String {
    v.replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{ContainerStats, PodStats};
    use jiff::Timestamp;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(ms).unwrap()
    }

    #[test]
    fn samples_carry_the_kubelets_names_labels_and_timestamps() {
        let summary = Summary {
            node: Usage {
                cpu_ns: 12_500_000_000,
                working_set: 1_048_576,
                at: at(1_700_000_000_123),
            },
            pods: vec![PodStats {
                namespace: "t".into(),
                name: "burn".into(),
                containers: vec![ContainerStats {
                    name: "c".into(),
                    started_at: at(1_699_999_990_500),
                    usage: Usage {
                        cpu_ns: 1_500_000_000,
                        working_set: 4096,
                        at: at(1_700_000_000_200),
                    },
                }],
            }],
        };
        let text = render(Some(&summary));
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                r#"container_cpu_usage_seconds_total{container="c",namespace="t",pod="burn"} 1.5 1700000000200"#,
                r#"container_memory_working_set_bytes{container="c",namespace="t",pod="burn"} 4096 1700000000200"#,
                r#"container_start_time_seconds{container="c",namespace="t",pod="burn"} 1699999990.5"#,
                "node_cpu_usage_seconds_total 12.5 1700000000123",
                "node_memory_working_set_bytes 1048576 1700000000123",
                r#"pod_cpu_usage_seconds_total{namespace="t",pod="burn"} 1.5 1700000000200"#,
                r#"pod_memory_working_set_bytes{namespace="t",pod="burn"} 4096 1700000000200"#,
                "resource_scrape_error 0",
                "scrape_error 0",
            ]
        );
        assert!(text.contains(
            "# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds\n# TYPE node_cpu_usage_seconds_total counter\n"
        ));
    }

    #[test]
    fn a_failed_measurement_is_a_scrape_error_only() {
        let text = render(None);
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(lines, ["resource_scrape_error 1", "scrape_error 1"]);
        assert_eq!(escape("a\"b\\c\nd"), r#"a\"b\\c\nd"#);
    }
}
