//! Graceful deletion of Pods, as the real registry does it (`rest.BeforeDelete` with the Pod
//! strategy's `CheckGracefulDelete`): a Pod bound to a node and not yet terminal gets
//! `deletionTimestamp = now + grace` and `deletionGracePeriodSeconds = grace` and stays until the
//! kubelet (here: the node agent) deletes it again with `gracePeriodSeconds: 0`. A later delete
//! may only shorten the grace period. Unbound and terminal Pods get grace 0 and go at once, and
//! so do Pods whose Node does not exist (the real PodGC's job, done here on delete). Pure: the
//! caller reads the store and applies the decision.

use serde_json::{Value, json};

use crate::meta;

/// What a delete does to an object whose kind supports graceful deletion.
#[derive(Clone, Debug, PartialEq)]
pub enum Grace {
    /// Not deleting yet, or a shorter period: set these and store (or remove when 0 and no
    /// finalizer remains).
    Set { timestamp: String, seconds: i64 },
    /// Deletion is already pending with an equal or shorter period: change nothing.
    Pending,
    /// Already deleting with grace 0 (or none): remove now, subject to finalizers.
    Now,
}

/// The grace period the Pod strategy picks: the request's, else the Pod's
/// `terminationGracePeriodSeconds`, else 0; 0 when unbound, terminal or its Node is gone;
/// negative values become 1.
pub fn pod_grace_period(pod: &Value, requested: Option<i64>, node_exists: bool) -> i64 {
    let mut period = requested
        .or_else(|| {
            meta::get_path(pod, "spec.terminationGracePeriodSeconds").and_then(Value::as_i64)
        })
        .unwrap_or(0);
    let bound = meta::get_path(pod, "spec.nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let terminal = matches!(
        meta::get_path(pod, "status.phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if !bound || terminal || !node_exists {
        period = 0;
    }
    if period < 0 { 1 } else { period }
}

/// The decision for deleting `obj` (a Pod) with the period `period` computed by
/// [`pod_grace_period`] and the period the client asked for, at `now`.
pub fn decide(obj: &Value, requested: Option<i64>, period: i64, now: jiff::Timestamp) -> Grace {
    let requested = requested.map(|r| if r < 0 { 1 } else { r });
    if !meta::is_deleting(obj) {
        return Grace::Set {
            timestamp: format_ts(now + jiff::SignedDuration::from_secs(period)),
            seconds: period,
        };
    }
    let current = meta::meta(obj)
        .and_then(|m| m.get("deletionGracePeriodSeconds"))
        .and_then(Value::as_i64)
        .map(|c| if c < 0 { 1 } else { c });
    let Some(current) = current.filter(|c| *c != 0) else {
        return Grace::Now;
    };
    // The Pod's own rules (unbound, terminal, node gone) make a requested period shorter too.
    let wanted = match requested {
        Some(r) => Some(r.min(period)),
        None if period == 0 => Some(0),
        None => None,
    };
    match wanted {
        Some(w) if w < current => {
            let started = meta::str_field(obj, "deletionTimestamp")
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .map(|t| t - jiff::SignedDuration::from_secs(current))
                .unwrap_or(now);
            Grace::Set {
                timestamp: format_ts(started + jiff::SignedDuration::from_secs(w)),
                seconds: w,
            }
        }
        _ => Grace::Pending,
    }
}

/// `deletionGracePeriodSeconds` (0 when absent). An object whose last finalizer goes is only
/// removed when this is 0; a Pod still terminating waits for its node agent.
pub fn seconds(obj: &Value) -> i64 {
    meta::meta(obj)
        .and_then(|m| m.get("deletionGracePeriodSeconds"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// Applies a `Grace::Set` to an object.
pub fn mark(obj: &mut Value, timestamp: &str, seconds: i64) {
    let m = meta::meta_mut(obj);
    m.insert("deletionTimestamp".into(), json!(timestamp));
    m.insert("deletionGracePeriodSeconds".into(), json!(seconds));
}

fn format_ts(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(node: Option<&str>, phase: &str) -> Value {
        let mut p = json!({"metadata": {"name": "p"}, "spec": {"terminationGracePeriodSeconds": 30},
            "status": {"phase": phase}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        p
    }

    fn at(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn grace_period_follows_the_pod_strategy() {
        let bound = pod(Some("n1"), "Running");
        assert_eq!(pod_grace_period(&bound, None, true), 30);
        assert_eq!(pod_grace_period(&bound, Some(5), true), 5);
        assert_eq!(pod_grace_period(&bound, Some(-3), true), 1);
        assert_eq!(pod_grace_period(&bound, None, false), 0, "node gone");
        assert_eq!(pod_grace_period(&pod(None, "Pending"), Some(10), true), 0);
        assert_eq!(
            pod_grace_period(&pod(Some("n1"), "Succeeded"), None, true),
            0
        );
        assert_eq!(pod_grace_period(&pod(Some("n1"), "Failed"), None, true), 0);
    }

    #[test]
    fn later_deletes_may_only_shorten() {
        let now = at("2025-01-01T00:00:00Z");
        let mut p = pod(Some("n1"), "Running");
        let Grace::Set { timestamp, seconds } = decide(&p, None, 30, now) else {
            panic!("first delete sets the grace period");
        };
        assert_eq!((timestamp.as_str(), seconds), ("2025-01-01T00:00:30Z", 30));
        mark(&mut p, &timestamp, seconds);
        let later = at("2025-01-01T00:00:10Z");
        assert_eq!(decide(&p, Some(60), 60, later), Grace::Pending);
        assert_eq!(decide(&p, None, 30, later), Grace::Pending);
        assert_eq!(
            decide(&p, Some(5), 5, later),
            Grace::Set {
                timestamp: "2025-01-01T00:00:05Z".into(),
                seconds: 5
            }
        );
        assert_eq!(
            decide(&p, Some(0), 0, later),
            Grace::Set {
                timestamp: "2025-01-01T00:00:00Z".into(),
                seconds: 0
            }
        );
        // The node went away: the next delete removes the Pod.
        assert!(matches!(
            decide(&p, None, 0, later),
            Grace::Set { seconds: 0, .. }
        ));
        mark(&mut p, "2025-01-01T00:00:00Z", 0);
        assert_eq!(decide(&p, None, 30, later), Grace::Now);
    }
}
