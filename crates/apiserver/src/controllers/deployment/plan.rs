//! What the Deployment controller does for one Deployment, as a pure function of the Deployment,
//! the ReplicaSets it controls and their Pods (upstream 1.33): find the ReplicaSet whose template
//! equals the Deployment's (ignoring `pod-template-hash`) or create `<deploy>-<hash>`; roll with
//! `RollingUpdate` (scale the new set up within `maxSurge`, then old sets down while
//! `replicas - maxUnavailable` Pods stay available, unhealthy old Pods first) or `Recreate` (old
//! sets to zero, wait until their Pods are gone, then the new set to `replicas`); number
//! revisions (`deployment.kubernetes.io/revision`); once complete, delete old empty sets beyond
//! `revisionHistoryLimit`; and compute status and the `Available`/`Progressing` conditions.

use std::time::Duration;

use serde_json::{Value, json};

use super::status;
use crate::controllers::workload::{is_active, replicas, scaled, template_hash};
use crate::meta;

pub const HASH_LABEL: &str = "pod-template-hash";
pub const REVISION: &str = "deployment.kubernetes.io/revision";

#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// A new ReplicaSet to create.
    pub create: Option<Value>,
    /// ReplicaSets whose `spec.replicas` changes.
    pub scale: Vec<(String, i64)>,
    /// The existing new ReplicaSet, whose revision and `minReadySeconds` follow the Deployment.
    pub new_rs: Option<String>,
    pub revision: String,
    /// `max-replicas` annotation for scaled sets (`replicas + maxSurge`).
    pub max_replicas: i64,
    /// Old ReplicaSets to delete (history limit).
    pub delete: Vec<String>,
    pub status: Value,
    pub requeue: Option<Duration>,
}

fn int(v: &Value, path: &str) -> i64 {
    meta::get_path(v, path).and_then(Value::as_i64).unwrap_or(0)
}

/// An annotation's value.
pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    meta::meta(obj)?.get("annotations")?.get(key)?.as_str()
}

pub fn revision_of(rs: &Value) -> i64 {
    annotation(rs, REVISION)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn without_hash(template: Option<&Value>) -> Value {
    let mut t = template.cloned().unwrap_or(json!({}));
    if let Some(l) = t
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        l.remove(HASH_LABEL);
        if l.is_empty()
            && let Some(m) = t.pointer_mut("/metadata").and_then(Value::as_object_mut)
        {
            m.remove("labels");
        }
    }
    t
}

pub fn is_rolling(d: &Value) -> bool {
    meta::get_path(d, "spec.strategy.type").and_then(Value::as_str) != Some("Recreate")
}

/// (maxSurge, maxUnavailable) resolved against `replicas` (upstream `ResolveFenceposts`).
pub fn fenceposts(d: &Value) -> (i64, i64) {
    if !is_rolling(d) {
        return (0, 0);
    }
    let desired = replicas(d);
    let get = |k: &str| meta::get_path(d, &format!("spec.strategy.rollingUpdate.{k}")).cloned();
    let surge = scaled(&get("maxSurge").unwrap_or(json!("25%")), desired, true).unwrap_or(0);
    let unavailable = scaled(
        &get("maxUnavailable").unwrap_or(json!("25%")),
        desired,
        false,
    )
    .unwrap_or(0);
    if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable)
    }
}

/// The new ReplicaSet for `d`: `<deploy>-<hash>`, the template's labels plus the hash.
fn new_replica_set(d: &Value, hash: &str, start: i64, revision: i64, max: i64) -> Value {
    let name = format!("{}-{hash}", meta::name(d).unwrap_or_default());
    let mut template = without_hash(meta::get_path(d, "spec.template"));
    meta::set_path(
        &mut template,
        &format!("metadata.labels.{HASH_LABEL}"),
        json!(hash),
    );
    let mut selector = meta::get_path(d, "spec.selector")
        .cloned()
        .unwrap_or(json!({}));
    meta::set_path(
        &mut selector,
        &format!("matchLabels.{HASH_LABEL}"),
        json!(hash),
    );
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "labels": template["metadata"]["labels"].clone(),
            "annotations": {REVISION: revision.to_string(),
                "deployment.kubernetes.io/desired-replicas": replicas(d).to_string(),
                "deployment.kubernetes.io/max-replicas": max.to_string()},
            "ownerReferences": [crate::controllers::workload::controller_ref(d, "apps/v1", "Deployment")]},
        "spec": {"replicas": start, "minReadySeconds": int(d, "spec.minReadySeconds"),
            "selector": selector, "template": template}})
}

/// The plan for `d` given its ReplicaSets (oldest first) and the Pods of those sets.
pub fn plan(d: &Value, sets: &[Value], pods: &[Value], now: jiff::Timestamp) -> Plan {
    let desired = replicas(d);
    let (surge, max_unavailable) = fenceposts(d);
    let mut out = Plan {
        max_replicas: desired + surge,
        ..Plan::default()
    };
    let template = without_hash(meta::get_path(d, "spec.template"));
    let mut sets: Vec<Value> = sets.to_vec();
    sets.sort_by_key(|s| {
        meta::str_field(s, "creationTimestamp")
            .unwrap_or_default()
            .to_string()
    });
    let new_idx = sets
        .iter()
        .position(|s| without_hash(meta::get_path(s, "spec.template")) == template);
    let max_old = sets
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != new_idx)
        .map(|(_, s)| revision_of(s))
        .max()
        .unwrap_or(0);
    let paused = meta::get_path(d, "spec.paused").and_then(Value::as_bool) == Some(true);
    let active = !paused && !meta::is_deleting(d);
    let spec_sum = |sets: &[Value]| sets.iter().map(|s| int(s, "spec.replicas")).sum::<i64>();
    let mut created = None;
    let new_idx = match new_idx {
        Some(i) => {
            let rev = revision_of(&sets[i]);
            out.revision = if rev > max_old { rev } else { max_old + 1 }.to_string();
            out.new_rs = meta::name(&sets[i]).map(String::from);
            Some(i)
        }
        None if active => {
            let old_running = pods.iter().any(|p| is_active(p) || meta::is_deleting(p));
            let start = if is_rolling(d) {
                let total = spec_sum(&sets);
                (desired + surge - total).clamp(0, desired)
            } else if old_running || spec_sum(&sets) > 0 {
                -1
            } else {
                desired
            };
            if start >= 0 {
                let hash = template_hash(
                    &template,
                    meta::get_path(d, "status.collisionCount").and_then(Value::as_i64),
                );
                let rs = new_replica_set(d, &hash, start, max_old + 1, desired + surge);
                created = meta::name(&rs).map(String::from);
                out.revision = (max_old + 1).to_string();
                sets.push(rs.clone());
                out.create = Some(rs);
                Some(sets.len() - 1)
            } else {
                None
            }
        }
        None => None,
    };
    if out.revision.is_empty() {
        out.revision = annotation(d, REVISION).unwrap_or_default().to_string();
    }
    let olds: Vec<usize> = (0..sets.len()).filter(|i| Some(*i) != new_idx).collect();
    if active && out.create.is_none() {
        if is_rolling(d) {
            roll(
                &mut out,
                &sets,
                new_idx,
                &olds,
                desired,
                surge,
                max_unavailable,
            );
        } else {
            recreate(&mut out, &sets, new_idx, &olds, pods, desired);
        }
    }
    if paused {
        // A paused Deployment only follows `replicas` on its current set.
        if let Some(i) = new_idx
            && int(&sets[i], "spec.replicas") != desired
        {
            out.scale.push((
                meta::name(&sets[i]).unwrap_or_default().to_string(),
                desired,
            ));
        }
    }
    let (status, requeue) =
        status::compute(d, &sets, new_idx, created.as_deref(), max_unavailable, now);
    if status::complete(d, &status) {
        let limit = meta::get_path(d, "spec.revisionHistoryLimit")
            .and_then(Value::as_i64)
            .unwrap_or(10);
        let mut empty: Vec<&Value> = olds
            .iter()
            .map(|i| &sets[*i])
            .filter(|s| {
                int(s, "spec.replicas") == 0
                    && int(s, "status.replicas") == 0
                    && !meta::is_deleting(s)
            })
            .collect();
        empty.sort_by_key(|s| revision_of(s));
        let surplus = empty
            .len()
            .saturating_sub(usize::try_from(limit.max(0)).unwrap_or(0));
        out.delete = empty[..surplus]
            .iter()
            .filter_map(|s| meta::name(s).map(String::from))
            .collect();
    }
    out.status = status;
    out.requeue = requeue;
    out
}

fn name_of(sets: &[Value], i: usize) -> String {
    meta::name(&sets[i]).unwrap_or_default().to_string()
}

/// One RollingUpdate step: scale the new set up (or down to `replicas`), else old sets down.
fn roll(
    out: &mut Plan,
    sets: &[Value],
    new_idx: Option<usize>,
    olds: &[usize],
    desired: i64,
    surge: i64,
    max_unavailable: i64,
) {
    let spec = |i: usize| int(&sets[i], "spec.replicas");
    let avail = |i: usize| int(&sets[i], "status.availableReplicas");
    let total: i64 = (0..sets.len()).map(spec).sum();
    if let Some(n) = new_idx {
        let new_spec = spec(n);
        let target = if new_spec > desired {
            desired
        } else {
            new_spec + (desired + surge - total).max(0).min(desired - new_spec)
        };
        if target != new_spec {
            out.scale.push((name_of(sets, n), target));
            return;
        }
    }
    let old_total: i64 = olds.iter().map(|i| spec(*i)).sum();
    if old_total == 0 {
        return;
    }
    let min_available = desired - max_unavailable;
    let new_unavailable = new_idx.map_or(0, |n| spec(n) - avail(n));
    let mut budget = total - min_available - new_unavailable;
    if budget <= 0 {
        return;
    }
    let mut target: Vec<(usize, i64)> = olds.iter().map(|i| (*i, spec(*i))).collect();
    // Unhealthy old Pods go first, within the budget.
    for (i, t) in target.iter_mut() {
        let unhealthy = (*t - avail(*i)).max(0).min(budget);
        *t -= unhealthy;
        budget -= unhealthy;
    }
    let available: i64 = (0..sets.len()).map(avail).sum();
    let mut more = (available - min_available).max(0);
    for (_, t) in target.iter_mut() {
        let down = (*t).min(more);
        *t -= down;
        more -= down;
    }
    for (i, t) in target {
        if t != spec(i) {
            out.scale.push((name_of(sets, i), t));
        }
    }
}

/// Recreate: old sets to zero; once their Pods are gone, the new set to `replicas`.
fn recreate(
    out: &mut Plan,
    sets: &[Value],
    new_idx: Option<usize>,
    olds: &[usize],
    pods: &[Value],
    desired: i64,
) {
    for i in olds {
        if int(&sets[*i], "spec.replicas") != 0 {
            out.scale.push((name_of(sets, *i), 0));
        }
    }
    let old_uids: Vec<&str> = olds.iter().filter_map(|i| meta::uid(&sets[*i])).collect();
    let old_running = pods.iter().any(|p| {
        crate::controllers::workload::controller_of(p)
            .is_some_and(|r| old_uids.iter().any(|u| r["uid"] == *u))
            && !matches!(
                crate::controllers::workload::phase(p),
                "Succeeded" | "Failed"
            )
    });
    if let Some(n) = new_idx
        && out.scale.is_empty()
        && !old_running
        && int(&sets[n], "spec.replicas") != desired
    {
        out.scale.push((name_of(sets, n), desired));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> jiff::Timestamp {
        "2026-01-01T00:10:00Z".parse().unwrap()
    }

    fn deploy(replicas: i64, image: &str, strategy: Value) -> Value {
        json!({"metadata": {"name": "web", "uid": "d1", "generation": 1},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "strategy": strategy,
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": image}]}}}})
    }

    /// The ReplicaSet `d` would create, with `spec`/`available` replicas and a revision.
    fn rs_of(d: &Value, spec: i64, available: i64, rev: i64, created: &str) -> Value {
        let hash = template_hash(&without_hash(d.pointer("/spec/template")), None);
        let mut rs = new_replica_set(d, &hash, spec, rev, 0);
        rs["metadata"]["uid"] = json!(format!("rs-{rev}"));
        rs["metadata"]["creationTimestamp"] = json!(created);
        rs["status"] =
            json!({"replicas": spec, "readyReplicas": available, "availableReplicas": available});
        rs
    }

    fn scale_of(p: &Plan) -> Vec<(String, i64)> {
        p.scale.clone()
    }

    #[test]
    fn fenceposts_resolve_ints_and_percentages() {
        let d = |ru: Value| {
            deploy(
                10,
                "v1",
                json!({"type": "RollingUpdate", "rollingUpdate": ru}),
            )
        };
        assert_eq!(fenceposts(&d(json!({}))), (3, 2));
        assert_eq!(
            fenceposts(&d(json!({"maxSurge": 0, "maxUnavailable": 0}))),
            (0, 1)
        );
        assert_eq!(
            fenceposts(&d(json!({"maxSurge": "10%", "maxUnavailable": 4}))),
            (1, 4)
        );
        assert_eq!(
            fenceposts(&deploy(10, "v1", json!({"type": "Recreate"}))),
            (0, 0)
        );
    }

    #[test]
    fn a_new_deployment_creates_its_replica_set() {
        let d = deploy(3, "v1", json!({}));
        let p = plan(&d, &[], &[], now());
        let rs = p.create.unwrap();
        let name = rs["metadata"]["name"].as_str().unwrap();
        let hash = rs["spec"]["template"]["metadata"]["labels"][HASH_LABEL]
            .as_str()
            .unwrap();
        assert_eq!(name, format!("web-{hash}"));
        assert_eq!(rs["spec"]["replicas"], 3);
        assert_eq!(
            rs["spec"]["selector"]["matchLabels"],
            json!({"app": "web", HASH_LABEL: hash})
        );
        assert_eq!(rs["metadata"]["annotations"][REVISION], "1");
        assert_eq!(p.revision, "1");
        let c = &p.status["conditions"];
        assert!(
            c.as_array()
                .unwrap()
                .iter()
                .any(|c| c["reason"] == "NewReplicaSetCreated"
                    && c["message"] == format!("Created new replica set \"{name}\""))
        );
    }

    #[test]
    fn rolling_update_surges_then_scales_old_sets_down_within_max_unavailable() {
        let strategy =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}});
        let v1 = deploy(4, "v1", strategy.clone());
        let old = rs_of(&v1, 4, 4, 1, "2026-01-01T00:00:00Z");
        let v2 = deploy(4, "v2", strategy);
        let p = plan(&v2, std::slice::from_ref(&old), &[], now());
        let new = p.create.clone().unwrap();
        assert_eq!(new["spec"]["replicas"], 1);
        assert_eq!(p.revision, "2");
        assert!(p.scale.is_empty());
        // New set at 1 (not available yet): old sets may lose one Pod (4 + 1 - 3 - 1).
        let new = rs_of(&v2, 1, 0, 2, "2026-01-01T00:05:00Z");
        let p = plan(&v2, &[old.clone(), new.clone()], &[], now());
        assert_eq!(scale_of(&p), [(meta::name(&old).unwrap().to_string(), 3)]);
        // Old at 3: surge room again for the new set.
        let old3 = rs_of(&v1, 3, 3, 1, "2026-01-01T00:00:00Z");
        let p = plan(&v2, &[old3, new.clone()], &[], now());
        assert_eq!(scale_of(&p), [(meta::name(&new).unwrap().to_string(), 2)]);
        // Unavailable old Pods are removed first, within the budget.
        let sick = rs_of(&v1, 3, 1, 1, "2026-01-01T00:00:00Z");
        let new2 = rs_of(&v2, 2, 2, 2, "2026-01-01T00:05:00Z");
        let p = plan(&v2, &[sick, new2], &[], now());
        assert_eq!(scale_of(&p), [(meta::name(&old).unwrap().to_string(), 1)]);
    }

    #[test]
    fn recreate_waits_for_old_pods_before_creating() {
        let v1 = deploy(2, "v1", json!({"type": "Recreate"}));
        let v2 = deploy(2, "v2", json!({"type": "Recreate"}));
        let old = rs_of(&v1, 2, 2, 1, "2026-01-01T00:00:00Z");
        let p = plan(&v2, std::slice::from_ref(&old), &[], now());
        assert!(p.create.is_none());
        assert_eq!(scale_of(&p), [(meta::name(&old).unwrap().to_string(), 0)]);
        let empty = rs_of(&v1, 0, 0, 1, "2026-01-01T00:00:00Z");
        let pod = json!({"metadata": {"name": "x", "ownerReferences": [{"uid": "rs-1", "controller": true}]},
            "status": {"phase": "Running"}});
        assert!(
            plan(&v2, std::slice::from_ref(&empty), &[pod], now())
                .create
                .is_none()
        );
        let p = plan(&v2, &[empty], &[], now());
        assert_eq!(p.create.unwrap()["spec"]["replicas"], 2);
    }

    #[test]
    fn a_complete_rollout_is_reported_and_old_history_trimmed() {
        let mut d = deploy(2, "v9", json!({}));
        d["spec"]["revisionHistoryLimit"] = json!(1);
        let olds: Vec<Value> = (1..=3)
            .map(|r| {
                rs_of(
                    &deploy(2, &format!("v{r}"), json!({})),
                    0,
                    0,
                    r,
                    &format!("2026-01-01T00:0{r}:00Z"),
                )
            })
            .collect();
        let mut sets = olds.clone();
        sets.push(rs_of(&d, 2, 2, 4, "2026-01-01T00:09:00Z"));
        d["status"] = json!({"conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
            "lastUpdateTime": "2026-01-01T00:09:00Z", "lastTransitionTime": "2026-01-01T00:09:00Z"}]});
        let p = plan(&d, &sets, &[], now());
        assert!(p.scale.is_empty() && p.create.is_none());
        assert_eq!(
            p.delete,
            [meta::name(&olds[0]).unwrap(), meta::name(&olds[1]).unwrap()]
        );
        let by = |t: &str| {
            p.status["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == t)
                .cloned()
                .unwrap()
        };
        assert_eq!(by("Available")["reason"], "MinimumReplicasAvailable");
        assert_eq!(by("Progressing")["reason"], "NewReplicaSetAvailable");
        assert_eq!(
            by("Progressing")["lastTransitionTime"],
            "2026-01-01T00:09:00Z"
        );
        assert_eq!(p.status["updatedReplicas"], 2);
        assert_eq!(p.status["unavailableReplicas"], 0);
    }

    #[test]
    fn no_progress_past_the_deadline_is_reported() {
        let mut d = deploy(2, "v1", json!({}));
        d["spec"]["progressDeadlineSeconds"] = json!(60);
        let rs = rs_of(&d, 2, 0, 1, "2026-01-01T00:00:00Z");
        d["status"] = json!({"replicas": 2, "updatedReplicas": 2, "conditions": [{"type": "Progressing", "status": "True",
            "reason": "ReplicaSetUpdated", "lastUpdateTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        let p = plan(&d, &[rs], &[], now());
        let c = p.status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Progressing")
            .cloned()
            .unwrap();
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some("False"), Some("ProgressDeadlineExceeded"))
        );
        assert!(
            c["message"]
                .as_str()
                .unwrap()
                .ends_with("has timed out progressing.")
        );
    }
}
