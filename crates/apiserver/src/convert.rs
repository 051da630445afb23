//! Conversion between the two Event APIs. events.k8s.io/v1 Events are stored as core/v1 Events
//! (as the real server does), so `kubectl get events`, `kubectl describe` and kube-runtime's
//! `Recorder` see the same objects. Field mapping: `regarding`↔`involvedObject`,
//! `note`↔`message`, `reportingController`↔`reportingComponent`, `deprecatedSource`↔`source`,
//! `deprecatedFirstTimestamp`↔`firstTimestamp`, `deprecatedLastTimestamp`↔`lastTimestamp`,
//! `deprecatedCount`↔`count`; other fields keep their names. No other kinds convert.

use serde_json::{Value, json};

use crate::registry::ResourceDef;

const RENAMES: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

pub fn is_events_v1(def: &ResourceDef) -> bool {
    def.group == "events.k8s.io" && def.kind == "Event"
}

fn rename(obj: &mut Value, forward: bool) {
    let Value::Object(m) = obj else { return };
    for (a, b) in RENAMES {
        let (from, to) = if forward { (a, b) } else { (b, a) };
        if let Some(v) = m.remove(from) {
            m.insert(to.into(), v);
        }
    }
}

/// events.k8s.io/v1 → core/v1.
pub fn event_to_core(obj: &mut Value) {
    rename(obj, true);
    if let Value::Object(m) = obj {
        m.insert("apiVersion".into(), json!("v1"));
        m.insert("kind".into(), json!("Event"));
        // core/v1 requires an involvedObject; events.k8s.io allows a missing regarding.
        m.entry("involvedObject").or_insert_with(|| json!({}));
    }
}

/// core/v1 → events.k8s.io/v1.
pub fn event_from_core(obj: &mut Value) {
    rename(obj, false);
    if let Value::Object(m) = obj {
        m.insert("apiVersion".into(), json!("events.k8s.io/v1"));
        m.insert("kind".into(), json!("Event"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Pod", "name": "p"}, "note": "hello", "reason": "R", "reportingController": "steward",
            "series": {"count": 2}});
        let mut core = v1.clone();
        event_to_core(&mut core);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "hello");
        assert_eq!(core["reportingComponent"], "steward");
        event_from_core(&mut core);
        assert_eq!(core, v1);
    }
}
