//! Helpers shared by the workload controllers (ReplicaSet, Deployment, StatefulSet, disruption):
//! Pod readiness and availability as kube-controller-manager reads them, `metav1.LabelSelector`
//! matching, int-or-percent scaling, template hashes and Pods built from templates. All pure.

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::meta;

pub fn phase(pod: &Value) -> &str {
    meta::get_path(pod, "status.phase")
        .and_then(Value::as_str)
        .unwrap_or("Pending")
}

/// Neither finished (`Succeeded`/`Failed`) nor being deleted (upstream `IsPodActive`).
pub fn is_active(pod: &Value) -> bool {
    !matches!(phase(pod), "Succeeded" | "Failed") && !meta::is_deleting(pod)
}

fn ready_condition(pod: &Value) -> Option<&Value> {
    meta::get_path(pod, "status.conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == "Ready")
}

/// The Pod's `Ready` condition is `True`.
pub fn is_ready(pod: &Value) -> bool {
    ready_condition(pod).is_some_and(|c| c["status"] == "True")
}

/// Time left until a ready Pod counts as available after `min_ready` seconds (zero once it
/// does); `None` for a Pod that is not ready.
pub fn until_available(pod: &Value, min_ready: i64, now: jiff::Timestamp) -> Option<Duration> {
    if !is_ready(pod) {
        return None;
    }
    if min_ready <= 0 {
        return Some(Duration::ZERO);
    }
    let since = ready_condition(pod)
        .and_then(|c| c["lastTransitionTime"].as_str())
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .unwrap_or(now);
    let elapsed = Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO);
    Some(Duration::from_secs(min_ready.unsigned_abs()).saturating_sub(elapsed))
}

pub fn is_available(pod: &Value, min_ready: i64, now: jiff::Timestamp) -> bool {
    until_available(pod, min_ready, now) == Some(Duration::ZERO)
}

/// Whether a `metav1.LabelSelector` selects these labels. A null or empty selector selects
/// nothing, as the workload and disruption controllers treat it.
pub fn selects(selector: Option<&Value>, labels: &Map<String, Value>) -> bool {
    let Some(sel) = selector.filter(|s| s.is_object()) else {
        return false;
    };
    let none = Vec::new();
    let empty = Map::new();
    let match_labels = sel["matchLabels"].as_object().unwrap_or(&empty);
    let exprs = sel["matchExpressions"].as_array().unwrap_or(&none);
    if match_labels.is_empty() && exprs.is_empty() {
        return false;
    }
    let label_ok = match_labels.iter().all(|(k, v)| labels.get(k) == Some(v));
    label_ok
        && exprs.iter().all(|e| {
            let value = e["key"].as_str().and_then(|k| labels.get(k));
            let values = e["values"].as_array().unwrap_or(&none);
            match e["operator"].as_str().unwrap_or_default() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

/// The owner reference with `controller: true`, if any.
pub fn controller_of(obj: &Value) -> Option<Value> {
    meta::owner_references(obj)
        .into_iter()
        .find(|r| r["controller"] == true)
}

/// A controller reference to `owner` (with `blockOwnerDeletion`, as the controllers set it).
pub fn controller_ref(owner: &Value, api_version: &str, kind: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": meta::name(owner).unwrap_or_default(),
        "uid": meta::uid(owner).unwrap_or_default(), "controller": true, "blockOwnerDeletion": true})
}

/// `spec.replicas`, 1 when unset (the apps/v1 default).
pub fn replicas(obj: &Value) -> i64 {
    meta::get_path(obj, "spec.replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

/// An int-or-string (`3`, `"25%"`) scaled against `total`, rounding percentages up or down
/// (upstream `GetScaledValueFromIntOrPercent`). `None` when malformed.
pub fn scaled(v: &Value, total: i64, round_up: bool) -> Option<i64> {
    if let Some(i) = v.as_i64() {
        return Some(i);
    }
    let pct: i64 = v.as_str()?.strip_suffix('%')?.parse().ok()?;
    let product = pct * total;
    Some(if round_up {
        (product + 99).div_euclid(100)
    } else {
        product.div_euclid(100)
    })
}

/// Objects serialised with sorted keys, so equal templates hash equally.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for k in keys {
                out.push_str(&json!(k).to_string());
                out.push(':');
                canonical(&m[k], out);
                out.push(',');
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for x in a {
                canonical(x, out);
                out.push(',');
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A short hash of a Pod template in the alphabet upstream uses (FNV-32a over the template,
/// and the collision count when set, printed in decimal and mapped through `SafeEncodeString`).
/// The bytes hashed differ from upstream's Go dump, so the values differ too.
pub fn template_hash(template: &Value, collision_count: Option<i64>) -> String {
    let mut text = String::new();
    canonical(template, &mut text);
    if let Some(c) = collision_count {
        text.push_str(&c.to_string());
    }
    let mut h: u32 = 0x811c_9dc5;
    for b in text.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    h.to_string()
        .bytes()
        .map(|b| char::from(ALPHABET[usize::from(b) % ALPHABET.len()]))
        .collect()
}

/// A Pod from `template` with the given name (or `generateName`), controller reference and
/// extra labels: the template's labels, annotations and finalizers, then its spec.
pub fn pod_from_template(
    template: &Value,
    name: PodName<'_>,
    owner: Value,
    extra: &Value,
) -> Value {
    let mut md = json!({"ownerReferences": [owner]});
    match name {
        PodName::Exact(n) => md["name"] = json!(n),
        PodName::Prefix(p) => md["generateName"] = json!(p),
    }
    for k in ["labels", "annotations", "finalizers"] {
        if let Some(v) = template.get("metadata").and_then(|m| m.get(k)) {
            md[k] = v.clone();
        }
    }
    if let Some(extra) = extra.as_object().filter(|e| !e.is_empty()) {
        let mut labels = md["labels"].as_object().cloned().unwrap_or_default();
        labels.extend(extra.clone());
        md["labels"] = Value::Object(labels);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": md,
        "spec": template.get("spec").cloned().unwrap_or(json!({}))})
}

pub enum PodName<'a> {
    Exact(&'a str),
    Prefix(&'a str),
}

/// Stored objects of `gr` that have a controller, grouped by the controller's uid.
pub fn by_controller(
    state: &crate::store::State,
    gr: &crate::registry::GroupResource,
) -> std::collections::HashMap<String, Vec<Value>> {
    let mut out: std::collections::HashMap<String, Vec<Value>> = std::collections::HashMap::new();
    for o in state.list(gr, None) {
        if let Some(r) = controller_of(o) {
            out.entry(r["uid"].as_str().unwrap_or_default().to_string())
                .or_default()
                .push(o.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_and_percentages() {
        let labels = json!({"app": "db", "tier": "x"})
            .as_object()
            .cloned()
            .unwrap();
        let sel = json!({"matchLabels": {"app": "db"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["x", "y"]},
                {"key": "gone", "operator": "DoesNotExist"}]});
        assert!(selects(Some(&sel), &labels));
        assert!(!selects(
            Some(&json!({"matchLabels": {"app": "web"}})),
            &labels
        ));
        assert!(!selects(Some(&json!({})), &labels));
        assert!(!selects(None, &labels));
        assert_eq!(scaled(&json!("25%"), 10, true), Some(3));
        assert_eq!(scaled(&json!("25%"), 10, false), Some(2));
        assert_eq!(scaled(&json!(2), 10, false), Some(2));
        assert_eq!(scaled(&json!("x"), 10, false), None);
    }

    #[test]
    fn template_hashes_ignore_key_order_and_use_the_safe_alphabet() {
        let a = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": 1}});
        let b = json!({"spec": {"x": 1}, "metadata": {"labels": {"b": "2", "a": "1"}}});
        assert_eq!(template_hash(&a, None), template_hash(&b, None));
        assert_ne!(template_hash(&a, None), template_hash(&a, Some(1)));
        assert!(
            template_hash(&a, None)
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c))
        );
    }

    #[test]
    fn availability_waits_for_min_ready_seconds() {
        let now: jiff::Timestamp = "2026-01-01T00:00:10Z".parse().unwrap();
        let pod = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
            "lastTransitionTime": "2026-01-01T00:00:05Z"}]}});
        assert!(is_available(&pod, 0, now));
        assert!(is_available(&pod, 5, now));
        assert_eq!(until_available(&pod, 8, now), Some(Duration::from_secs(3)));
        assert_eq!(until_available(&json!({}), 0, now), None);
    }
}
