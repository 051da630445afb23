//! (pure) A kubelet's `/metrics/resource` answer read into one node point and the points of
//! its Pods' containers, with metrics-server's rules (`pkg/scraper/client/resource/decode.go`):
//! a sample without a timestamp takes the scrape's time; the node point is dropped unless it has
//! a timestamp, CPU and memory; a Pod is dropped when one of its containers lacks CPU or memory
//! (a zero counts as lacking, as there). The text format itself is read by `prometheus-parse`.

use std::collections::BTreeMap;

use jiff::Timestamp;
use prometheus_parse::{Scrape, Value};

/// One measurement of a node or a container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Point {
    /// When the container started (`None` for a node), from `container_start_time_seconds`.
    pub start: Option<Timestamp>,
    /// When the CPU figure was read (the memory one's when it came later, as in
    /// metrics-server, which keeps the last timestamp it sees).
    pub at: Option<Timestamp>,
    /// Cumulative CPU time, nanoseconds.
    pub cpu_ns: u64,
    /// Working set, bytes.
    pub memory: u64,
}

/// A Pod by namespace and name.
pub type PodKey = (String, String);

/// What one scrape of one kubelet yields.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    pub node: Option<Point>,
    pub pods: BTreeMap<PodKey, BTreeMap<String, Point>>,
}

#[derive(Debug, thiserror::Error)]
#[error("the kubelet's resource metrics could not be parsed: {0}")]
pub struct DecodeError(#[from] std::io::Error);

fn value(v: &Value) -> Option<f64> {
    match v {
        Value::Counter(x) | Value::Gauge(x) | Value::Untyped(x) => Some(*x),
        _ => None,
    }
}

fn stamp(ms: i64) -> Option<Timestamp> {
    Timestamp::from_millisecond(ms).ok()
}

/// Reads `text`, scraped at `now`.
pub fn decode(text: &str, now: Timestamp) -> Result<Batch, DecodeError> {
    let default = chrono_time(now);
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = Scrape::parse_at(lines, default)?;
    let mut node = Point::default();
    let mut pods: BTreeMap<PodKey, BTreeMap<String, Point>> = BTreeMap::new();
    for s in &scrape.samples {
        let Some(v) = value(&s.value) else { continue };
        let at = stamp(s.timestamp.timestamp_millis());
        let container = || -> Option<(PodKey, String)> {
            Some((
                (
                    s.labels.get("namespace")?.to_string(),
                    s.labels.get("pod")?.to_string(),
                ),
                s.labels.get("container")?.to_string(),
            ))
        };
        match s.metric.as_str() {
            "node_cpu_usage_seconds_total" => {
                node.cpu_ns = nanos(v);
                node.at = at;
            }
            "node_memory_working_set_bytes" => {
                node.memory = v as u64;
                node.at = at;
            }
            name @ ("container_cpu_usage_seconds_total"
            | "container_memory_working_set_bytes"
            | "container_start_time_seconds") => {
                let Some((pod, c)) = container() else {
                    continue;
                };
                let p = pods.entry(pod).or_default().entry(c).or_default();
                match name {
                    "container_cpu_usage_seconds_total" => {
                        p.cpu_ns = nanos(v);
                        p.at = at;
                    }
                    "container_memory_working_set_bytes" => {
                        p.memory = v as u64;
                        p.at = at;
                    }
                    _ => p.start = Timestamp::from_nanosecond(nanos(v).into()).ok(),
                }
            }
            _ => {}
        }
    }
    let node = (node.at.is_some() && node.cpu_ns > 0 && node.memory > 0).then_some(node);
    pods.retain(|_, containers| {
        containers
            .values()
            .all(|p| p.at.is_some() && p.cpu_ns > 0 && p.memory > 0)
    });
    Ok(Batch { node, pods })
}

/// Seconds as nanoseconds (saturating; negative is zero).
fn nanos(seconds: f64) -> u64 {
    (seconds * 1e9) as u64
}

/// `now` in the parser's clock type.
fn chrono_time(now: Timestamp) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_millis(now.as_millisecond()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="c",namespace="t",pod="burn"} 1.5 1700000000200
container_cpu_usage_seconds_total{container="idle",namespace="t",pod="half"} 0 1700000000200
container_cpu_usage_seconds_total{container="ok",namespace="t",pod="half"} 2 1700000000200
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="c",namespace="t",pod="burn"} 4096 1700000000200
container_memory_working_set_bytes{container="idle",namespace="t",pod="half"} 4096 1700000000200
container_memory_working_set_bytes{container="ok",namespace="t",pod="half"} 4096 1700000000200
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="c",namespace="t",pod="burn"} 1699999990.5
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 12.5 1700000000123
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1048576 1700000000123
# TYPE scrape_error gauge
scrape_error 0
"#;

    fn ts(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(ms).unwrap()
    }

    #[test]
    fn a_kubelet_answer_becomes_points() {
        let b = decode(TEXT, ts(1_800_000_000_000)).unwrap();
        assert_eq!(
            b.node,
            Some(Point {
                start: None,
                at: Some(ts(1_700_000_000_123)),
                cpu_ns: 12_500_000_000,
                memory: 1_048_576
            })
        );
        let burn = &b.pods[&("t".to_string(), "burn".to_string())]["c"];
        assert_eq!(burn.cpu_ns, 1_500_000_000);
        assert_eq!(burn.memory, 4096);
        assert_eq!(burn.at, Some(ts(1_700_000_000_200)));
        assert_eq!(burn.start, Some(ts(1_699_999_990_500)));
        // A container without CPU time takes its whole Pod out, as in metrics-server.
        assert!(!b.pods.contains_key(&("t".to_string(), "half".to_string())));
    }

    #[test]
    fn samples_without_timestamps_take_the_scrape_time_and_incomplete_nodes_drop() {
        let b = decode(
            "node_cpu_usage_seconds_total 3\nnode_memory_working_set_bytes 10\n",
            ts(5_000),
        )
        .unwrap();
        assert_eq!(b.node.unwrap().at, Some(ts(5_000)));
        let b = decode("node_cpu_usage_seconds_total 3 1000\n", ts(5_000)).unwrap();
        assert_eq!(b.node, None, "no memory figure");
    }
}
