//! The disruption controller's status for one PodDisruptionBudget, as a pure function of the
//! budget, its Pods (a null or empty selector selects none), a way to find the scale of a Pod's
//! controller, and the time (upstream 1.33 `trySync`/`failSafe`): expected Pods and desired
//! healthy Pods from `minAvailable` (an integer needs no scale: expected = the Pods) or
//! `maxUnavailable`/a percentage (the sum of the controllers' scales, rounded up); healthy Pods
//! are Ready, not being deleted and not recently evicted (`disruptedPods` entries live two
//! minutes); `disruptionsAllowed = currentHealthy - desiredHealthy` (0 when negative or nothing is
//! expected) and the `DisruptionAllowed` condition (`SufficientPods`/`InsufficientPods`). When a
//! scale cannot be found, the fail-safe: `disruptionsAllowed: 0` and `DisruptionAllowed=False`
//! with reason `SyncFailed` and the error as message, the rest of the status unchanged.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::controllers::workload::{controller_of, is_ready, scaled};
use crate::meta;

/// How long an eviction's entry in `disruptedPods` keeps its Pod out of the healthy count.
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(120);

/// The scale of a controller, by owner reference and namespace: `Ok(Some((uid, replicas)))`,
/// `Ok(None)` when not found, `Err` when its kind has no scale.
pub type ScaleOf<'a> = dyn Fn(&Value, &str) -> Result<Option<(String, i64)>, String> + 'a;

fn ts(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Sum of the scales of the Pods' controllers (upstream `getExpectedScale`); Pods without a
/// controller are left out.
fn expected_scale(pods: &[&Value], scale_of: &ScaleOf<'_>) -> Result<i64, String> {
    let mut scales: BTreeMap<String, i64> = BTreeMap::new();
    for p in pods {
        let Some(owner) = controller_of(p) else {
            continue;
        };
        if owner["uid"]
            .as_str()
            .is_some_and(|u| scales.contains_key(u))
        {
            continue;
        }
        let ns = meta::namespace(p).unwrap_or_default();
        match scale_of(&owner, ns)? {
            Some((uid, n)) => {
                scales.insert(uid, n);
            }
            None => {
                return Err(format!(
                    "found no controllers for pod \"{}\"",
                    meta::name(p).unwrap_or_default()
                ));
            }
        }
    }
    Ok(scales.values().sum())
}

/// (expected Pods, desired healthy Pods).
fn expected(pdb: &Value, pods: &[&Value], scale_of: &ScaleOf<'_>) -> Result<(i64, i64), String> {
    if let Some(mu) = meta::get_path(pdb, "spec.maxUnavailable") {
        let expected = expected_scale(pods, scale_of)?;
        let max = scaled(mu, expected, true)
            .ok_or_else(|| format!("invalid value for IntOrString: {mu}"))?;
        return Ok((expected, (expected - max).max(0)));
    }
    match meta::get_path(pdb, "spec.minAvailable") {
        Some(Value::String(s)) => {
            let expected = expected_scale(pods, scale_of)?;
            let min = scaled(&json!(s), expected, true)
                .ok_or_else(|| format!("invalid value for IntOrString: {s}"))?;
            Ok((expected, min))
        }
        Some(v) => Ok((pods.len() as i64, v.as_i64().unwrap_or(0))),
        None => Ok((pods.len() as i64, 0)),
    }
}

/// upstream `meta.SetStatusCondition` for `DisruptionAllowed`.
fn set_condition(
    status: &mut Value,
    st: &str,
    reason: &str,
    message: &str,
    generation: i64,
    now: &str,
) {
    let mut list: Vec<Value> = status["conditions"].as_array().cloned().unwrap_or_default();
    let transition = list
        .iter()
        .find(|c| c["type"] == "DisruptionAllowed" && c["status"] == st)
        .map_or(json!(now), |c| c["lastTransitionTime"].clone());
    let cond = json!({"type": "DisruptionAllowed", "status": st, "reason": reason, "message": message,
        "observedGeneration": generation, "lastTransitionTime": transition});
    match list.iter_mut().find(|c| c["type"] == "DisruptionAllowed") {
        Some(c) => *c = cond,
        None => list.push(cond),
    }
    status["conditions"] = Value::Array(list);
}

/// The budget's new status and when an entry of `disruptedPods` expires.
pub fn status(
    pdb: &Value,
    pods: &[&Value],
    scale_of: &ScaleOf<'_>,
    now: jiff::Timestamp,
) -> (Value, Option<Duration>) {
    let now_s = ts(now);
    let mut st = match pdb.get("status") {
        Some(Value::Object(m)) => Value::Object(m.clone()),
        _ => json!({}),
    };
    for k in [
        "disruptionsAllowed",
        "currentHealthy",
        "desiredHealthy",
        "expectedPods",
    ] {
        if st.get(k).is_none() {
            st[k] = json!(0);
        }
    }
    let (expected, desired) = match expected(pdb, pods, scale_of) {
        Ok(v) => v,
        Err(e) => {
            st["disruptionsAllowed"] = json!(0);
            let generation = st["observedGeneration"].as_i64().unwrap_or(0);
            set_condition(&mut st, "False", "SyncFailed", &e, generation, &now_s);
            return (st, None);
        }
    };
    let recorded = st["disruptedPods"].as_object().cloned().unwrap_or_default();
    let mut disrupted = Map::new();
    let mut recheck: Option<Duration> = None;
    for p in pods.iter().filter(|p| !meta::is_deleting(p)) {
        let name = meta::name(p).unwrap_or_default();
        let Some(at) = recorded.get(name) else {
            continue;
        };
        let Some(t) = at.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok()) else {
            continue;
        };
        let expires = t + jiff::SignedDuration::try_from(DELETION_TIMEOUT).unwrap_or_default();
        if expires > now {
            let left = Duration::try_from(expires.duration_since(now)).unwrap_or_default();
            recheck = Some(recheck.map_or(left, |r| r.min(left)));
            disrupted.insert(name.to_string(), at.clone());
        }
    }
    let healthy = pods
        .iter()
        .filter(|p| {
            !meta::is_deleting(p) && !disrupted.contains_key(meta::name(p).unwrap_or_default())
        })
        .filter(|p| is_ready(p))
        .count() as i64;
    let allowed = if expected <= 0 {
        0
    } else {
        (healthy - desired).max(0)
    };
    let generation = meta::generation(pdb);
    st["currentHealthy"] = json!(healthy);
    st["desiredHealthy"] = json!(desired);
    st["expectedPods"] = json!(expected);
    st["disruptionsAllowed"] = json!(allowed);
    st["observedGeneration"] = json!(generation);
    match disrupted.is_empty() {
        true => {
            if let Some(m) = st.as_object_mut() {
                m.remove("disruptedPods");
            }
        }
        false => st["disruptedPods"] = Value::Object(disrupted),
    }
    if allowed > 0 {
        set_condition(&mut st, "True", "SufficientPods", "", generation, &now_s);
    } else {
        set_condition(&mut st, "False", "InsufficientPods", "", generation, &now_s);
    }
    (st, recheck.map(|r| r + Duration::from_secs(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> jiff::Timestamp {
        "2026-01-01T00:10:00Z".parse().unwrap()
    }

    fn pdb(spec: Value) -> Value {
        json!({"metadata": {"name": "b", "generation": 2}, "spec": spec})
    }

    fn pod(name: &str, owner: Option<&str>, ready: bool) -> Value {
        let mut p = json!({"metadata": {"name": name, "namespace": "ns"}, "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
        if let Some(o) = owner {
            p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": o, "uid": o, "controller": true}]);
        }
        p
    }

    fn scales(o: &Value, _: &str) -> Result<Option<(String, i64)>, String> {
        match o["uid"].as_str() {
            Some("rs") => Ok(Some(("rs".into(), 4))),
            Some("gone") => Ok(None),
            _ => Err("widgets.example.com does not implement the scale subresource".into()),
        }
    }

    fn cond(st: &Value) -> (String, String, String) {
        let c = &st["conditions"][0];
        let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
        (s("status"), s("reason"), s("message"))
    }

    #[test]
    fn min_available_integer_counts_the_pods_themselves() {
        let pods = [
            pod("a", None, true),
            pod("b", None, true),
            pod("c", None, false),
        ];
        let pods: Vec<&Value> = pods.iter().collect();
        let (st, _) = status(&pdb(json!({"minAvailable": 1})), &pods, &scales, now());
        assert_eq!(
            (st["expectedPods"].as_i64(), st["desiredHealthy"].as_i64()),
            (Some(3), Some(1))
        );
        assert_eq!(
            (
                st["currentHealthy"].as_i64(),
                st["disruptionsAllowed"].as_i64()
            ),
            (Some(2), Some(1))
        );
        assert_eq!(st["observedGeneration"], 2);
        assert_eq!(
            cond(&st),
            ("True".into(), "SufficientPods".into(), String::new())
        );
        let (st, _) = status(&pdb(json!({"minAvailable": 2})), &pods, &scales, now());
        assert_eq!(st["disruptionsAllowed"], 0);
        assert_eq!(
            cond(&st),
            ("False".into(), "InsufficientPods".into(), String::new())
        );
    }

    #[test]
    fn max_unavailable_and_percentages_use_the_controller_scale() {
        let pods = [
            pod("a", Some("rs"), true),
            pod("b", Some("rs"), true),
            pod("c", Some("rs"), true),
        ];
        let pods: Vec<&Value> = pods.iter().collect();
        let (st, _) = status(&pdb(json!({"maxUnavailable": 1})), &pods, &scales, now());
        assert_eq!(
            (st["expectedPods"].as_i64(), st["desiredHealthy"].as_i64()),
            (Some(4), Some(3))
        );
        assert_eq!(st["disruptionsAllowed"], 0);
        let (st, _) = status(&pdb(json!({"minAvailable": "50%"})), &pods, &scales, now());
        assert_eq!(
            (
                st["desiredHealthy"].as_i64(),
                st["disruptionsAllowed"].as_i64()
            ),
            (Some(2), Some(1))
        );
        let (st, _) = status(
            &pdb(json!({"maxUnavailable": "10%"})),
            &pods,
            &scales,
            now(),
        );
        assert_eq!(st["desiredHealthy"], 3);
    }

    #[test]
    fn a_controller_without_scale_fails_safe_unless_min_available_is_an_integer() {
        let pods = [
            pod("a", Some("widget"), true),
            pod("b", Some("widget"), true),
        ];
        let pods: Vec<&Value> = pods.iter().collect();
        let mut budget = pdb(json!({"maxUnavailable": 1}));
        budget["status"] =
            json!({"disruptionsAllowed": 1, "currentHealthy": 2, "observedGeneration": 1});
        let (st, _) = status(&budget, &pods, &scales, now());
        assert_eq!(st["disruptionsAllowed"], 0);
        assert_eq!(st["currentHealthy"], 2);
        assert_eq!(st["observedGeneration"], 1);
        assert_eq!(
            cond(&st),
            (
                "False".into(),
                "SyncFailed".into(),
                "widgets.example.com does not implement the scale subresource".into()
            )
        );
        assert_eq!(st["conditions"][0]["observedGeneration"], 1);
        let (st, _) = status(&pdb(json!({"minAvailable": "50%"})), &pods, &scales, now());
        assert_eq!(cond(&st).1, "SyncFailed");
        let (st, _) = status(&pdb(json!({"minAvailable": 1})), &pods, &scales, now());
        assert_eq!(st["disruptionsAllowed"], 1);
        let gone = [pod("a", Some("gone"), true)];
        let gone: Vec<&Value> = gone.iter().collect();
        let (st, _) = status(&pdb(json!({"maxUnavailable": 1})), &gone, &scales, now());
        assert_eq!(cond(&st).2, "found no controllers for pod \"a\"");
    }

    #[test]
    fn recently_evicted_pods_do_not_count_as_healthy_for_two_minutes() {
        let pods = [pod("a", None, true), pod("b", None, true)];
        let pods: Vec<&Value> = pods.iter().collect();
        let mut budget = pdb(json!({"minAvailable": 1}));
        budget["status"] = json!({"disruptedPods": {"a": "2026-01-01T00:09:30Z", "b": "2026-01-01T00:07:00Z", "x": "2026-01-01T00:09:59Z"}});
        let (st, recheck) = status(&budget, &pods, &scales, now());
        assert_eq!(st["disruptedPods"], json!({"a": "2026-01-01T00:09:30Z"}));
        assert_eq!(
            (
                st["currentHealthy"].as_i64(),
                st["disruptionsAllowed"].as_i64()
            ),
            (Some(1), Some(0))
        );
        assert_eq!(recheck, Some(Duration::from_secs(91)));
    }
}
