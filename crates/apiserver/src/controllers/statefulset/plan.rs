//! What the StatefulSet controller does for one set, as a pure function of the set, its Pods,
//! its claims and its ControllerRevisions (upstream 1.33 with default feature gates, so
//! `maxUnavailable` is ignored as there): record a revision for the current template; with
//! `OrderedReady`, create the missing Pod of the lowest ordinal and wait until it is Running and
//! Ready before the next, and remove Pods above `replicas` from the highest ordinal, one at a
//! time, once every other Pod is healthy; with `Parallel`, do all of it at once. Failed (or
//! succeeded) Pods are deleted and come back. `RollingUpdate` then replaces Pods of another
//! revision from the highest ordinal down to `partition`, one at a time, each Ready before the
//! next; `OnDelete` leaves that to the user. Claims are created before their Pod. Status is
//! upstream's: replicas, ready/available/current/updated counts, revisions, observedGeneration.

use std::collections::{BTreeMap, HashSet};

use serde_json::{Value, json};

use super::build::{self, REVISION_LABEL};
use crate::controllers::workload::{is_available, is_ready, phase, replicas};
use crate::meta;

#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub create_revision: Option<Value>,
    pub delete_revisions: Vec<String>,
    pub create_claims: Vec<Value>,
    /// (claim name, owner references) for claims whose owners change.
    pub claim_owners: Vec<(String, Vec<Value>)>,
    pub create_pods: Vec<Value>,
    pub delete_pods: Vec<String>,
    pub status: Value,
}

fn ordinal(set: &Value, pod: &Value) -> Option<i64> {
    let prefix = format!("{}-", meta::name(set).unwrap_or_default());
    meta::name(pod)?.strip_prefix(&prefix)?.parse().ok()
}

fn healthy(pod: &Value, min_ready: i64, now: jiff::Timestamp) -> bool {
    phase(pod) == "Running"
        && is_ready(pod)
        && is_available(pod, min_ready, now)
        && !meta::is_deleting(pod)
}

fn revision_of(pod: &Value) -> &str {
    meta::get_path(pod, &format!("metadata.labels.{REVISION_LABEL}"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn name(v: &Value) -> String {
    meta::name(v).unwrap_or_default().to_string()
}

/// The plan for `set` given its Pods, the claims of its namespace and its revisions, at `now`.
pub fn plan(
    set: &Value,
    pods: &[Value],
    claims: &[Value],
    revisions: &[Value],
    now: jiff::Timestamp,
) -> Plan {
    let mut out = Plan::default();
    // Revisions: the update revision is the current template's; the current one comes from status.
    let max_rev = revisions
        .iter()
        .filter_map(|r| r["revision"].as_i64())
        .max()
        .unwrap_or(0);
    let wanted = build::revision(set, max_rev + 1);
    let update = revisions
        .iter()
        .find(|r| meta::name(r) == meta::name(&wanted))
        .cloned();
    let update = update.unwrap_or_else(|| {
        out.create_revision = Some(wanted.clone());
        wanted
    });
    let update_name = name(&update);
    let status_current = meta::get_path(set, "status.currentRevision").and_then(Value::as_str);
    let current = revisions
        .iter()
        .find(|r| meta::name(r).is_some() && meta::name(r) == status_current)
        .cloned()
        .unwrap_or_else(|| update.clone());
    let current_name = name(&current);

    let start = meta::get_path(set, "spec.ordinals.start")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let count = replicas(set).max(0);
    let min_ready = meta::get_path(set, "spec.minReadySeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let parallel =
        meta::get_path(set, "spec.podManagementPolicy").and_then(Value::as_str) == Some("Parallel");
    let on_delete =
        meta::get_path(set, "spec.updateStrategy.type").and_then(Value::as_str) == Some("OnDelete");
    let partition = meta::get_path(set, "spec.updateStrategy.rollingUpdate.partition")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let by_ordinal: BTreeMap<i64, &Value> = pods
        .iter()
        .filter_map(|p| Some((ordinal(set, p)?, p)))
        .collect();
    let in_range = |o: i64| o >= start && o < start + count;

    // Status from the Pods as they are.
    let mut st = json!({"observedGeneration": meta::generation(set), "replicas": 0, "readyReplicas": 0,
        "availableReplicas": 0, "currentReplicas": 0, "updatedReplicas": 0,
        "currentRevision": current_name, "updateRevision": update_name,
        "collisionCount": meta::get_path(set, "status.collisionCount").cloned().unwrap_or(json!(0))});
    let bump = |st: &mut Value, k: &str| st[k] = json!(st[k].as_i64().unwrap_or(0) + 1);
    for p in by_ordinal.values() {
        bump(&mut st, "replicas");
        if phase(p) == "Running" && is_ready(p) {
            bump(&mut st, "readyReplicas");
            if is_available(p, min_ready, now) {
                bump(&mut st, "availableReplicas");
            }
        }
        if !meta::is_deleting(p) {
            if revision_of(p) == current_name {
                bump(&mut st, "currentReplicas");
            }
            if revision_of(p) == update_name {
                bump(&mut st, "updatedReplicas");
            }
        }
    }
    if !on_delete
        && st["updatedReplicas"] == st["replicas"]
        && st["readyReplicas"] == st["replicas"]
    {
        st["currentRevision"] = json!(update_name);
        st["currentReplicas"] = st["updatedReplicas"].clone();
    }
    if let Some(c) = meta::get_path(set, "status.conditions") {
        st["conditions"] = c.clone();
    }
    out.status = st;

    // Old revisions beyond the history limit, oldest first, unless a Pod still uses them.
    let limit = meta::get_path(set, "spec.revisionHistoryLimit")
        .and_then(Value::as_i64)
        .unwrap_or(10);
    let used: HashSet<&str> = pods.iter().map(revision_of).collect();
    let mut old: Vec<&Value> = revisions
        .iter()
        .filter(|r| {
            let n = meta::name(r).unwrap_or_default();
            n != update_name && n != current_name && !used.contains(n)
        })
        .collect();
    old.sort_by_key(|r| r["revision"].as_i64().unwrap_or(0));
    let surplus = old
        .len()
        .saturating_sub(usize::try_from(limit.max(0)).unwrap_or(0));
    out.delete_revisions = old[..surplus].iter().map(|r| name(r)).collect();

    // Claims: create the missing ones of every ordinal in range; owner references per policy.
    let existing: BTreeMap<String, &Value> = claims.iter().map(|c| (name(c), c)).collect();
    for o in start..start + count {
        for c in build::claims(set, o) {
            if !existing.contains_key(&name(&c)) {
                let owners = build::claim_owners(set, &c, None, true);
                let mut c = c;
                if !owners.is_empty() {
                    c["metadata"]["ownerReferences"] = Value::Array(owners);
                }
                out.create_claims.push(c);
            }
        }
    }
    for (o, p) in &by_ordinal {
        for c in build::claims(set, *o) {
            if let Some(claim) = existing.get(&name(&c)) {
                let owners = build::claim_owners(set, claim, Some(p), in_range(*o));
                if owners != meta::owner_references(claim) {
                    out.claim_owners.push((name(&c), owners));
                }
            }
        }
    }
    if meta::is_deleting(set) {
        return out;
    }

    // Pods of the ordinals in range, lowest first.
    let template_for = |o: i64| {
        if !on_delete && o < start + partition {
            (build::revision_template(&current), current_name.clone())
        } else {
            (build::revision_template(&update), update_name.clone())
        }
    };
    let mut all_present = true;
    for o in start..start + count {
        match by_ordinal.get(&o) {
            None => {
                let (t, rev) = template_for(o);
                out.create_pods.push(build::pod(set, &t, &rev, o));
                all_present = false;
                if !parallel {
                    return out;
                }
            }
            Some(p) if matches!(phase(p), "Failed" | "Succeeded") && !meta::is_deleting(p) => {
                out.delete_pods.push(name(p));
                all_present = false;
                if !parallel {
                    return out;
                }
            }
            Some(p) if !healthy(p, min_ready, now) && !parallel => return out,
            Some(_) => {}
        }
    }
    // Pods above the range, highest first.
    let first_unhealthy = by_ordinal
        .values()
        .find(|p| !healthy(p, min_ready, now))
        .map(|p| name(p));
    for (_, p) in by_ordinal.iter().rev().filter(|(o, _)| !in_range(**o)) {
        if meta::is_deleting(p) {
            if parallel {
                continue;
            }
            return out;
        }
        if !parallel && first_unhealthy.as_ref().is_some_and(|u| *u != name(p)) {
            return out;
        }
        out.delete_pods.push(name(p));
        if !parallel {
            return out;
        }
    }
    if on_delete || !all_present {
        return out;
    }
    // Rolling update, highest ordinal first, down to the partition.
    for o in (start + partition.max(0)..start + count).rev() {
        let Some(p) = by_ordinal.get(&o) else {
            return out;
        };
        if revision_of(p) != update_name && !meta::is_deleting(p) {
            out.delete_pods.push(name(p));
            return out;
        }
        if !healthy(p, min_ready, now) {
            return out;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> jiff::Timestamp {
        "2026-01-01T00:01:00Z".parse().unwrap()
    }

    fn set(replicas: i64, extra: Value) -> Value {
        let mut s = json!({"metadata": {"name": "db", "uid": "s1", "generation": 2},
            "spec": {"replicas": replicas, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "v1"}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}]}});
        if let (Value::Object(spec), Value::Object(e)) = (&mut s["spec"], extra) {
            spec.extend(e);
        }
        s
    }

    /// The Pods a converged set has: built from `set`'s revision, Running and Ready.
    fn pods_of(set: &Value, ordinals: std::ops::Range<i64>, ready: bool) -> (Vec<Value>, Value) {
        let rev = build::revision(set, 1);
        let t = build::revision_template(&rev);
        let pods = ordinals
            .map(|o| {
                let mut p = build::pod(set, &t, rev["metadata"]["name"].as_str().unwrap(), o);
                p["metadata"]["uid"] = json!(format!("p{o}"));
                p["status"] = json!({"phase": "Running", "conditions": [{"type": "Ready",
                    "status": if ready { "True" } else { "False" }, "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
                p
            })
            .collect();
        (pods, rev)
    }

    fn names(v: &[Value]) -> Vec<String> {
        v.iter().map(name).collect()
    }

    #[test]
    fn ordered_ready_creates_one_pod_at_a_time_after_its_claims() {
        let s = set(3, json!({}));
        let p = plan(&s, &[], &[], &[], now());
        assert!(p.create_revision.is_some());
        assert_eq!(names(&p.create_pods), ["db-0"]);
        assert_eq!(
            names(&p.create_claims),
            ["data-db-0", "data-db-1", "data-db-2"]
        );
        let (pods, rev) = pods_of(&s, 0..1, false);
        assert!(
            plan(&s, &pods, &[], std::slice::from_ref(&rev), now())
                .create_pods
                .is_empty()
        );
        let (pods, rev) = pods_of(&s, 0..1, true);
        let p = plan(&s, &pods, &[], &[rev], now());
        assert!(p.create_revision.is_none());
        assert_eq!(names(&p.create_pods), ["db-1"]);
        let parallel = set(3, json!({"podManagementPolicy": "Parallel"}));
        assert_eq!(
            names(&plan(&parallel, &[], &[], &[], now()).create_pods),
            ["db-0", "db-1", "db-2"]
        );
    }

    #[test]
    fn scale_down_goes_from_the_highest_ordinal() {
        let s = set(1, json!({}));
        let (pods, rev) = pods_of(&s, 0..3, true);
        let p = plan(&s, &pods, &[], std::slice::from_ref(&rev), now());
        assert_eq!(p.delete_pods, ["db-2"]);
        assert_eq!(p.status["replicas"], 3);
        assert_eq!(p.status["readyReplicas"], 3);
        let mut waiting = pods.clone();
        waiting[1]["status"]["conditions"][0]["status"] = json!("False");
        assert!(
            plan(&s, &waiting, &[], std::slice::from_ref(&rev), now())
                .delete_pods
                .is_empty()
        );
        let parallel = set(1, json!({"podManagementPolicy": "Parallel"}));
        let (pods, rev) = pods_of(&parallel, 0..3, true);
        assert_eq!(
            plan(&parallel, &pods, &[], &[rev], now()).delete_pods,
            ["db-2", "db-1"]
        );
    }

    #[test]
    fn rolling_update_replaces_from_the_top_down_to_the_partition() {
        let old = set(3, json!({}));
        let (mut pods, rev1) = pods_of(&old, 0..3, true);
        let mut new = set(
            3,
            json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}}),
        );
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("v2");
        new["status"] = json!({"currentRevision": rev1["metadata"]["name"]});
        let p = plan(&new, &pods, &[], std::slice::from_ref(&rev1), now());
        let rev2 = p.create_revision.clone().unwrap();
        assert_eq!(rev2["revision"], 2);
        assert_eq!(p.delete_pods, ["db-2"]);
        assert_eq!(p.status["currentReplicas"], 3);
        assert_eq!(p.status["updatedReplicas"], 0);
        // db-2 came back at the new revision, not Ready yet: wait.
        let t2 = build::revision_template(&rev2);
        pods[2] = build::pod(&new, &t2, rev2["metadata"]["name"].as_str().unwrap(), 2);
        let revs = [rev1.clone(), rev2.clone()];
        assert!(plan(&new, &pods, &[], &revs, now()).delete_pods.is_empty());
        pods[2]["status"] = pods[1]["status"].clone();
        let p = plan(&new, &pods, &[], &revs, now());
        assert_eq!(p.delete_pods, ["db-1"]);
        assert_eq!(p.status["updatedReplicas"], 1);
        assert_eq!(p.status["currentRevision"], rev1["metadata"]["name"]);
        // A Pod below the partition that goes missing comes back at the current revision.
        let p = plan(&new, &pods[1..], &[], &revs, now());
        assert_eq!(
            p.create_pods[0]["metadata"]["labels"][REVISION_LABEL],
            rev1["metadata"]["name"]
        );
        assert_eq!(p.create_pods[0]["spec"]["containers"][0]["image"], "v1");
        // OnDelete never deletes.
        let mut on_delete = new.clone();
        on_delete["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
        assert!(
            plan(&on_delete, &pods, &[], &revs, now())
                .delete_pods
                .is_empty()
        );
    }

    #[test]
    fn failed_pods_are_deleted_and_a_finished_rollout_moves_the_current_revision() {
        let s = set(2, json!({}));
        let (mut pods, rev) = pods_of(&s, 0..2, true);
        let p = plan(&s, &pods, &[], std::slice::from_ref(&rev), now());
        assert_eq!(p.status["currentRevision"], rev["metadata"]["name"]);
        assert_eq!(p.status["updatedReplicas"], 2);
        assert_eq!(p.status["observedGeneration"], 2);
        pods[0]["status"]["phase"] = json!("Failed");
        assert_eq!(plan(&s, &pods, &[], &[rev], now()).delete_pods, ["db-0"]);
    }
}
