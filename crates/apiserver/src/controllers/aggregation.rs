//! The ClusterRole aggregation controller (kube-controller-manager's
//! `clusterrole-aggregation`): a ClusterRole with `aggregationRule.clusterRoleSelectors` gets
//! as `rules` the union, without duplicates, of the rules of every other ClusterRole whose
//! labels match one of the selectors, in name order.

use serde_json::{Value, json};

use crate::meta;
use crate::registry::GroupResource;
use crate::store::State;
use crate::write::{Fields, commit};

const MANAGER: &str = "clusterrole-aggregation-controller";

/// A `metav1.LabelSelector` (matchLabels and matchExpressions) against `labels`; an empty
/// selector matches nothing here, as the aggregation controller treats it.
fn selector_matches(sel: &Value, labels: &serde_json::Map<String, Value>) -> bool {
    let match_labels = sel["matchLabels"].as_object().cloned().unwrap_or_default();
    let exprs = sel["matchExpressions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if match_labels.is_empty() && exprs.is_empty() {
        return false;
    }
    match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
        && exprs.iter().all(|e| {
            let value = e["key"].as_str().and_then(|k| labels.get(k));
            let values = meta::strings(e.get("values"));
            let in_values = value
                .and_then(Value::as_str)
                .is_some_and(|v| values.iter().any(|x| x == v));
            match e["operator"].as_str().unwrap_or_default() {
                "In" => in_values,
                "NotIn" => !in_values,
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

/// Brings every aggregated ClusterRole up to date; does nothing when no RBAC object changed
/// since the pass that recorded `seen` (the `State::rbac_rev` it saw).
pub fn reconcile(state: &mut State, seen: &mut Option<u64>) {
    if *seen == Some(state.rbac_rev) {
        return;
    }
    *seen = Some(state.rbac_rev);
    let gr = GroupResource::new(crate::auth::index::RBAC_GROUP, "clusterroles");
    let Some(def) = state.registry.storage_def(&gr) else {
        return;
    };
    let roles: Vec<Value> = state.list(&gr, None).cloned().collect();
    for role in &roles {
        let Some(selectors) = role["aggregationRule"]["clusterRoleSelectors"].as_array() else {
            continue;
        };
        let own = meta::name(role).unwrap_or_default();
        let mut rules: Vec<Value> = Vec::new();
        for other in &roles {
            if meta::name(other) == Some(own) || meta::is_deleting(other) {
                continue;
            }
            let labels = meta::labels(other);
            if !selectors.iter().any(|s| selector_matches(s, &labels)) {
                continue;
            }
            for r in other["rules"].as_array().into_iter().flatten() {
                if !rules.contains(r) {
                    rules.push(r.clone());
                }
            }
        }
        let current = role.get("rules").cloned().unwrap_or(json!([]));
        if current == Value::Array(rules.clone()) || (current.is_null() && rules.is_empty()) {
            continue;
        }
        let mut new = role.clone();
        new["rules"] = Value::Array(rules);
        if let Err(e) = commit(state, &def, role, new, "", Fields::Record(MANAGER)) {
            tracing::debug!(error = %e.message, role = own, "clusterrole aggregation write failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_need_a_requirement_and_match_labels_and_expressions() {
        let labels = json!({"a": "1", "b": "2"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        assert!(!selector_matches(&json!({}), &labels));
        assert!(selector_matches(
            &json!({"matchLabels": {"a": "1"}}),
            &labels
        ));
        assert!(!selector_matches(
            &json!({"matchLabels": {"a": "2"}}),
            &labels
        ));
        assert!(selector_matches(
            &json!({"matchExpressions": [{"key": "b", "operator": "In", "values": ["2", "3"]}]}),
            &labels
        ));
        assert!(selector_matches(
            &json!({"matchExpressions": [{"key": "c", "operator": "DoesNotExist"}]}),
            &labels
        ));
        assert!(!selector_matches(
            &json!({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["2"]}]}),
            &labels
        ));
    }
}
