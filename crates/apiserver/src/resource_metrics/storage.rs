//! (pure) The last two points of every node and container, and the usage computed from them,
//! with metrics-server's rules (`pkg/storage/node.go`, `pod.go`, `types.go`):
//!
//! - a new point moves the stored one to `prev` only when it is newer; otherwise the older
//!   `prev` is kept while it is older than the new point;
//! - a container whose start time is not before the stored point's timestamp has restarted:
//!   its old points are dropped;
//! - a container that started less than one resolution ago, but at least 10 s before its
//!   point, gets its start (zero CPU time) as `prev`, so a fresh container shows sooner;
//! - a node or container missing from a scrape is forgotten (its scrape failed or it is gone);
//! - usage is `(cpu - prev cpu) / (at - prev at)` nanocores, the last working set, over the
//!   window `at - prev at`; a Pod has usage only when every container has, and its time is
//!   its earliest container's.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::decode::{PodKey, Point};

/// metrics-server's `freshContainerMinMetricsResolution`.
const FRESH_CONTAINER_MIN: SignedDuration = SignedDuration::from_secs(10);

/// Usage over a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub cpu_nanocores: u64,
    pub memory: u64,
}

/// When a usage was measured and over how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeInfo {
    pub at: Timestamp,
    pub window: SignedDuration,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UsageError {
    #[error("unexpected decrease in startTime of node/container")]
    StartDecreased,
    #[error("unexpected decrease in cumulative CPU usage value")]
    CpuDecreased,
    #[error("the two points have no time between them")]
    NoWindow,
}

type Containers = HashMap<String, Point>;

#[derive(Debug, Default)]
pub struct Storage {
    resolution: Duration,
    nodes: HashMap<String, Point>,
    prev_nodes: HashMap<String, Point>,
    pods: HashMap<PodKey, Containers>,
    prev_pods: HashMap<PodKey, Containers>,
}

fn zero() -> Timestamp {
    Timestamp::UNIX_EPOCH
}

fn at(p: &Point) -> Timestamp {
    p.at.unwrap_or_else(zero)
}

impl Storage {
    pub fn new(resolution: Duration) -> Self {
        Self {
            resolution,
            ..Self::default()
        }
    }

    /// Records one round of scrapes: every node's point and every Pod's container points.
    pub fn store(
        &mut self,
        nodes: BTreeMap<String, Point>,
        pods: BTreeMap<PodKey, BTreeMap<String, Point>>,
    ) {
        let mut prev_nodes = HashMap::new();
        for (name, new) in &nodes {
            if let Some(last) = self.nodes.get(name) {
                if at(new) > at(last) {
                    prev_nodes.insert(name.clone(), *last);
                } else if let Some(prev) = self.prev_nodes.get(name)
                    && at(prev) < at(new)
                {
                    prev_nodes.insert(name.clone(), *prev);
                }
            }
        }
        self.nodes = nodes.into_iter().collect();
        self.prev_nodes = prev_nodes;

        let resolution = SignedDuration::try_from(self.resolution).unwrap_or(SignedDuration::MAX);
        let mut last_pods = HashMap::new();
        let mut prev_pods = HashMap::new();
        for (key, containers) in pods {
            let mut prev_containers = Containers::new();
            for (name, new) in &containers {
                let start = new.start.unwrap_or_else(zero);
                let age = at(new).duration_since(start);
                if start < at(new) && age < resolution && age >= FRESH_CONTAINER_MIN {
                    let from_start = Point {
                        at: Some(start),
                        cpu_ns: 0,
                        ..*new
                    };
                    prev_containers.insert(name.clone(), from_start);
                    continue;
                }
                let Some(last) = self.pods.get(&key).and_then(|p| p.get(name)) else {
                    continue;
                };
                if start >= at(last) {
                    continue; // restarted since the stored point
                }
                if at(new) > at(last) {
                    prev_containers.insert(name.clone(), *last);
                } else if let Some(prev) = self.prev_pods.get(&key).and_then(|p| p.get(name))
                    && at(prev) < at(new)
                {
                    prev_containers.insert(name.clone(), *prev);
                }
            }
            if !prev_containers.is_empty() {
                prev_pods.insert(key.clone(), prev_containers);
            }
            last_pods.insert(key, containers.into_iter().collect());
        }
        self.pods = last_pods;
        self.prev_pods = prev_pods;
    }

    /// A node's usage, once two of its points are known.
    pub fn node(&self, name: &str) -> Option<(TimeInfo, Usage)> {
        let last = self.nodes.get(name)?;
        let prev = self.prev_nodes.get(name)?;
        match usage(last, prev) {
            Ok(u) => Some(u),
            Err(e) => {
                tracing::debug!(node = name, error = %e, "skipping node usage metric");
                None
            }
        }
    }

    /// A Pod's containers' usage (by container name), once every container has two points.
    pub fn pod(&self, key: &PodKey) -> Option<(TimeInfo, Vec<(String, Usage)>)> {
        let last = self.pods.get(key)?;
        let prev = self.prev_pods.get(key)?;
        let mut names: Vec<&String> = last.keys().collect();
        names.sort();
        let mut out = Vec::new();
        let mut earliest: Option<TimeInfo> = None;
        for name in names {
            let p = prev.get(name)?;
            match usage(&last[name], p) {
                Ok((ti, u)) => {
                    out.push((name.clone(), u));
                    if earliest.is_none_or(|e| e.at > ti.at) {
                        earliest = Some(ti);
                    }
                }
                Err(e) => {
                    tracing::debug!(pod = ?key, container = %name, error = %e, "skipping container usage metric");
                }
            }
        }
        Some((earliest?, out))
    }
}

/// (pure) Usage between two points of one node or container.
pub fn usage(last: &Point, prev: &Point) -> Result<(TimeInfo, Usage), UsageError> {
    if last.start.unwrap_or_else(zero) < prev.start.unwrap_or_else(zero) {
        return Err(UsageError::StartDecreased);
    }
    if last.cpu_ns < prev.cpu_ns {
        return Err(UsageError::CpuDecreased);
    }
    let window = at(last).duration_since(at(prev));
    if window <= SignedDuration::ZERO {
        return Err(UsageError::NoWindow);
    }
    let rate = (last.cpu_ns - prev.cpu_ns) as f64 / window.as_secs_f64();
    Ok((
        TimeInfo {
            at: at(last),
            window,
        },
        Usage {
            cpu_nanocores: rate as u64,
            memory: last.memory,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn point(start: Option<i64>, at_s: i64, cpu_s: f64, memory: u64) -> Point {
        Point {
            start: start.map(ts),
            at: Some(ts(at_s)),
            cpu_ns: (cpu_s * 1e9) as u64,
            memory,
        }
    }

    fn key() -> PodKey {
        ("t".into(), "burn".into())
    }

    fn pods(p: Point) -> BTreeMap<PodKey, BTreeMap<String, Point>> {
        BTreeMap::from([(key(), BTreeMap::from([("c".to_string(), p)]))])
    }

    fn nodes(p: Point) -> BTreeMap<String, Point> {
        BTreeMap::from([("n1".to_string(), p)])
    }

    #[test]
    fn the_rate_of_the_cpu_counter_over_the_window() {
        let mut s = Storage::new(Duration::from_secs(15));
        s.store(
            nodes(point(None, 100, 10.0, 4096)),
            pods(point(Some(0), 100, 1.0, 1)),
        );
        assert_eq!(s.node("n1"), None, "one point is not a rate");
        assert_eq!(s.pod(&key()), None);
        s.store(
            nodes(point(None, 115, 13.0, 8192)),
            pods(point(Some(0), 115, 16.0, 2)),
        );
        let (ti, u) = s.node("n1").unwrap();
        assert_eq!(ti.window, SignedDuration::from_secs(15));
        assert_eq!(ti.at, ts(115));
        assert_eq!(
            u,
            Usage {
                cpu_nanocores: 200_000_000,
                memory: 8192
            }
        );
        let (_, cs) = s.pod(&key()).unwrap();
        assert_eq!(
            cs,
            [(
                "c".to_string(),
                Usage {
                    cpu_nanocores: 1_000_000_000,
                    memory: 2
                }
            )]
        );
        // The same point again keeps the pair; a missing node is forgotten.
        s.store(BTreeMap::new(), pods(point(Some(0), 115, 16.0, 2)));
        assert_eq!(s.node("n1"), None);
        assert!(s.pod(&key()).is_some());
    }

    #[test]
    fn a_restart_drops_the_old_points_and_a_fresh_container_counts_from_its_start() {
        let mut s = Storage::new(Duration::from_secs(15));
        s.store(BTreeMap::new(), pods(point(Some(0), 100, 50.0, 1)));
        // Restarted at 105: its counter began again.
        s.store(BTreeMap::new(), pods(point(Some(105), 130, 1.0, 1)));
        assert_eq!(s.pod(&key()), None);
        // Started 12 s before its first point (within one resolution, past 10 s): from start.
        let mut s = Storage::new(Duration::from_secs(15));
        s.store(BTreeMap::new(), pods(point(Some(88), 100, 6.0, 1)));
        let (ti, cs) = s.pod(&key()).unwrap();
        assert_eq!(ti.window, SignedDuration::from_secs(12));
        assert_eq!(cs[0].1.cpu_nanocores, 500_000_000);
    }

    #[test]
    fn decreases_are_refused() {
        let a = point(Some(10), 100, 5.0, 1);
        assert_eq!(
            usage(&point(Some(10), 110, 4.0, 1), &a),
            Err(UsageError::CpuDecreased)
        );
        assert_eq!(
            usage(&point(Some(5), 110, 6.0, 1), &a),
            Err(UsageError::StartDecreased)
        );
        assert_eq!(usage(&a, &a), Err(UsageError::NoWindow));
    }
}
