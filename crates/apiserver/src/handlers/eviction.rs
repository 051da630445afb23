//! `POST pods/{name}/eviction` (policy/v1 Eviction), as kube-apiserver's eviction REST decides
//! (1.33): a Pod that is Pending, finished or already being deleted is deleted without looking
//! at budgets; otherwise the budgets of its namespace whose selector selects it are consulted —
//! none: delete; more than one: 500; one: a Pod that is not Ready while the budget is healthy
//! (`currentHealthy >= desiredHealthy > 0`, or `unhealthyPodEvictionPolicy: AlwaysAllow`) is
//! deleted without using the budget; a budget the controller has not observed yet, or with no
//! disruption left, refuses with 429 `TooManyRequests` naming the budget in a `DisruptionBudget`
//! cause; else `disruptionsAllowed` drops by one, the Pod is recorded in `disruptedPods`, and the
//! Pod is deleted gracefully with the Eviction's `deleteOptions`, after a `DisruptionTarget`
//! condition (`EvictionByEvictionAPI`) is set on it. `dryRun` computes the same answer and
//! writes nothing.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::{Request, Target, json_response};
use crate::controllers::workload::{is_ready, phase, selects};
use crate::meta;
use crate::registry::GroupResource;
use crate::status::{ApiError, ApiResult};
use crate::write::delete::{DeleteOptions, delete};
use crate::write::{Fields, commit};

/// Upstream's bound on `disruptedPods`.
const MAX_DISRUPTED: usize = 2000;

#[derive(Debug, PartialEq)]
pub enum Decision {
    /// Delete the Pod; `budget` is the budget's new status when the eviction uses it.
    Delete { budget: Option<(String, Value)> },
}

fn too_many(message: String, retry_after: i64) -> ApiError {
    let mut details = json!({"causes": [{"reason": "DisruptionBudget", "message": message}]});
    if retry_after > 0 {
        details["retryAfterSeconds"] = json!(retry_after);
    }
    ApiError::new(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
    )
    .with_details(details)
}

/// What evicting `pod` does, given the budgets of its namespace, at `now`.
pub fn decide(pod: &Value, budgets: &[Value], now: &str) -> ApiResult<Decision> {
    if matches!(phase(pod), "Pending" | "Succeeded" | "Failed") || meta::is_deleting(pod) {
        return Ok(Decision::Delete { budget: None });
    }
    let labels = meta::labels(pod);
    let matching: Vec<&Value> = budgets
        .iter()
        .filter(|b| selects(meta::get_path(b, "spec.selector"), &labels))
        .collect();
    let pdb = match matching.as_slice() {
        [] => return Ok(Decision::Delete { budget: None }),
        [one] => *one,
        _ => {
            // Upstream answers with a bare `metav1.Status` (code 500, no reason, no details),
            // not an `InternalError` (`pkg/registry/core/pod/storage/eviction.go`).
            return Err(ApiError {
                code: 500,
                reason: "",
                message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
                details: None,
            });
        }
    };
    let name = meta::name(pdb).unwrap_or_default().to_string();
    let int = |k: &str| {
        meta::get_path(pdb, &format!("status.{k}"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    if !is_ready(pod) {
        let always = meta::get_path(pdb, "spec.unhealthyPodEvictionPolicy").and_then(Value::as_str)
            == Some("AlwaysAllow");
        if always || (int("currentHealthy") >= int("desiredHealthy") && int("desiredHealthy") > 0) {
            return Ok(Decision::Delete { budget: None });
        }
    }
    if int("observedGeneration") < meta::generation(pdb) {
        return Err(too_many(
            format!("The disruption budget {name} is still being processed by the server."),
            10,
        ));
    }
    let allowed = int("disruptionsAllowed");
    if allowed < 0 {
        return Err(ApiError::forbidden(format!(
            "poddisruptionbudgets.policy \"{name}\" is forbidden: pdb disruptions allowed is negative"
        )));
    }
    let mut status = pdb.get("status").cloned().unwrap_or(json!({}));
    if status["disruptedPods"]
        .as_object()
        .is_some_and(|m| m.len() > MAX_DISRUPTED)
    {
        return Err(ApiError::forbidden(format!(
            "poddisruptionbudgets.policy \"{name}\" is forbidden: DisruptedPods map too big - too many evictions not confirmed by PDB controller"
        )));
    }
    if allowed == 0 {
        return Err(too_many(
            format!(
                "The disruption budget {name} needs {} healthy pods and has {} currently",
                int("desiredHealthy"),
                int("currentHealthy")
            ),
            0,
        ));
    }
    status["disruptionsAllowed"] = json!(allowed - 1);
    if allowed == 1
        && let Some(cs) = status["conditions"].as_array_mut()
    {
        for c in cs.iter_mut().filter(|c| c["type"] == "DisruptionAllowed") {
            if c["status"] != "False" {
                c["lastTransitionTime"] = json!(now);
            }
            c["status"] = json!("False");
            c["reason"] = json!("InsufficientPods");
            c["message"] = json!("");
        }
    }
    if !status["disruptedPods"].is_object() {
        status["disruptedPods"] = json!({});
    }
    status["disruptedPods"][meta::name(pod).unwrap_or_default()] = json!(now);
    Ok(Decision::Delete {
        budget: Some((name, status)),
    })
}

pub fn evict(req: &Request, t: &Target) -> ApiResult<Response> {
    let body = req.json_body()?;
    if let Some(n) = meta::name(&body)
        && n != t.name()
    {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let opts = DeleteOptions::parse(body.get("deleteOptions"), None)?;
    let dry = req.dry_run()? || opts.dry_run;
    let manager = req.manager();
    let mut state = req.server.lock();
    state.dry_run = dry;
    let pods_gr = t.def.gr();
    let pod = state
        .get(&pods_gr, t.ns(), t.name())
        .cloned()
        .ok_or_else(|| ApiError::not_found(&pods_gr, t.name()))?;
    let pdb_gr = GroupResource::new("policy", "poddisruptionbudgets");
    let budgets: Vec<Value> = state.list(&pdb_gr, Some(t.ns())).cloned().collect();
    let now = meta::now();
    let Decision::Delete { budget } = decide(&pod, &budgets, &now)?;
    if let (Some((name, status)), Some(def)) = (budget, state.registry.storage_def(&pdb_gr))
        && let Some(old) = state.get(&pdb_gr, t.ns(), &name).cloned()
    {
        let mut new = old.clone();
        new["status"] = status;
        commit(
            &mut state,
            &def,
            &old,
            new,
            "status",
            Fields::Record(&manager),
        )?;
    }
    if !matches!(phase(&pod), "Succeeded" | "Failed") && !meta::is_deleting(&pod) {
        let mut new = pod.clone();
        let mut conditions: Vec<Value> = meta::get_path(&pod, "status.conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        conditions.retain(|c| c["type"] != "DisruptionTarget");
        conditions.push(
            json!({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting", "lastProbeTime": null, "lastTransitionTime": now}),
        );
        meta::set_path(&mut new, "status.conditions", Value::Array(conditions));
        commit(
            &mut state,
            &t.def,
            &pod,
            new,
            "status",
            Fields::Record(&manager),
        )?;
    }
    delete(&mut state, &t.def, t.ns(), t.name(), &opts)?;
    Ok(json_response(
        StatusCode::CREATED,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(phase: &str, ready: bool) -> Value {
        json!({"metadata": {"name": "p", "labels": {"app": "web"}}, "status": {"phase": phase,
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
    }

    fn pdb(name: &str, allowed: i64, current: i64, desired: i64) -> Value {
        json!({"metadata": {"name": name, "generation": 1}, "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"observedGeneration": 1, "disruptionsAllowed": allowed, "currentHealthy": current, "desiredHealthy": desired,
                "conditions": [{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods", "message": ""}]}})
    }

    fn refused(r: ApiResult<Decision>) -> ApiError {
        match r {
            Err(e) => e,
            Ok(d) => panic!("expected a refusal, got {d:?}"),
        }
    }

    #[test]
    fn a_budget_with_room_is_decremented_and_records_the_pod() {
        let Decision::Delete { budget } =
            decide(&pod("Running", true), &[pdb("b", 1, 3, 2)], "T").unwrap();
        let (name, st) = budget.unwrap();
        assert_eq!(name, "b");
        assert_eq!(st["disruptionsAllowed"], 0);
        assert_eq!(st["disruptedPods"], json!({"p": "T"}));
        assert_eq!(st["conditions"][0]["reason"], "InsufficientPods");
    }

    #[test]
    fn an_exhausted_or_unobserved_budget_refuses_with_429() {
        let e = refused(decide(&pod("Running", true), &[pdb("b", 0, 2, 2)], "T"));
        assert_eq!((e.code, e.reason), (429, "TooManyRequests"));
        assert_eq!(
            e.message,
            "Cannot evict pod as it would violate the pod's disruption budget."
        );
        let d = e.details.unwrap();
        assert_eq!(
            d["causes"][0],
            json!({"reason": "DisruptionBudget", "message": "The disruption budget b needs 2 healthy pods and has 2 currently"})
        );
        assert!(d.get("retryAfterSeconds").is_none());
        let mut stale = pdb("b", 1, 3, 2);
        stale["metadata"]["generation"] = json!(2);
        let e = refused(decide(&pod("Running", true), &[stale], "T"));
        assert_eq!(e.code, 429);
        assert_eq!(e.details.unwrap()["retryAfterSeconds"], 10);
    }

    #[test]
    fn pending_finished_and_unhealthy_pods_and_several_budgets() {
        let full = [pdb("b", 0, 2, 2)];
        assert_eq!(
            decide(&pod("Pending", false), &full, "T").unwrap(),
            Decision::Delete { budget: None }
        );
        assert_eq!(
            decide(&pod("Failed", false), &full, "T").unwrap(),
            Decision::Delete { budget: None }
        );
        // Not Ready while the budget is healthy: deleted without using it.
        assert_eq!(
            decide(&pod("Running", false), &full, "T").unwrap(),
            Decision::Delete { budget: None }
        );
        assert_eq!(
            refused(decide(&pod("Running", false), &[pdb("b", 0, 1, 2)], "T")).code,
            429
        );
        assert_eq!(
            decide(&pod("Running", true), &[], "T").unwrap(),
            Decision::Delete { budget: None }
        );
        let e = refused(decide(
            &pod("Running", true),
            &[pdb("a", 1, 3, 2), pdb("b", 1, 3, 2)],
            "T",
        ));
        assert_eq!((e.code, e.reason), (500, ""));
        assert_eq!(
            e.message,
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
        );
        assert_eq!(e.details, None);
    }
}
