//! What a StatefulSet's children look like, as pure functions: its ControllerRevisions (the Pod
//! template stored as upstream's `{"spec":{"template":{...,"$patch":"replace"}}}` patch, named
//! `<set>-<hash>`), the Pod of an ordinal (`<set>-<ordinal>` with the labels
//! `statefulset.kubernetes.io/pod-name`, `apps.kubernetes.io/pod-index` and
//! `controller-revision-hash`, `hostname` and `subdomain = serviceName`, one volume per claim
//! template), its claims (`<template>-<set>-<ordinal>`, the template's labels plus the set's
//! `matchLabels`) and the owner references `persistentVolumeClaimRetentionPolicy` asks for.

use serde_json::{Value, json};

use crate::controllers::workload::{PodName, controller_ref, pod_from_template, template_hash};
use crate::meta;

pub const REVISION_LABEL: &str = "controller-revision-hash";
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
const HASH_LABEL: &str = "controller.kubernetes.io/hash";

fn set_name(set: &Value) -> &str {
    meta::name(set).unwrap_or_default()
}

/// The ControllerRevision for the set's current template, numbered `number`.
pub fn revision(set: &Value, number: i64) -> Value {
    let mut template = meta::get_path(set, "spec.template")
        .cloned()
        .unwrap_or(json!({}));
    template["$patch"] = json!("replace");
    let data = json!({"spec": {"template": template}});
    let collisions = meta::get_path(set, "status.collisionCount").and_then(Value::as_i64);
    let hash = template_hash(&data, collisions);
    let mut labels = meta::get_path(set, "spec.selector.matchLabels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    labels.insert(HASH_LABEL.into(), json!(hash));
    json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": format!("{}-{hash}", set_name(set)), "labels": labels,
            "ownerReferences": [controller_ref(set, "apps/v1", "StatefulSet")]},
        "data": data, "revision": number})
}

/// The Pod template a ControllerRevision holds.
pub fn revision_template(rev: &Value) -> Value {
    let mut t = meta::get_path(rev, "data.spec.template")
        .cloned()
        .unwrap_or(json!({}));
    if let Some(m) = t.as_object_mut() {
        m.remove("$patch");
    }
    t
}

pub fn claim_name(template: &Value, set: &Value, ordinal: i64) -> String {
    format!(
        "{}-{}-{ordinal}",
        meta::name(template).unwrap_or_default(),
        set_name(set)
    )
}

fn claim_templates(set: &Value) -> Vec<Value> {
    meta::get_path(set, "spec.volumeClaimTemplates")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The claims of an ordinal, without owner references.
pub fn claims(set: &Value, ordinal: i64) -> Vec<Value> {
    let selector = meta::get_path(set, "spec.selector.matchLabels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    claim_templates(set)
        .iter()
        .map(|t| {
            let mut labels = meta::labels(t);
            labels.extend(selector.clone());
            let mut md = json!({"name": claim_name(t, set, ordinal), "labels": labels});
            if let Some(a) = meta::get_path(t, "metadata.annotations") {
                md["annotations"] = a.clone();
            }
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": md,
                "spec": t.get("spec").cloned().unwrap_or(json!({}))})
        })
        .collect()
}

/// The Pod of `ordinal` from `template` at revision `rev`.
pub fn pod(set: &Value, template: &Value, rev: &str, ordinal: i64) -> Value {
    let name = format!("{}-{ordinal}", set_name(set));
    let labels =
        json!({POD_NAME_LABEL: name, POD_INDEX_LABEL: ordinal.to_string(), REVISION_LABEL: rev});
    let owner = controller_ref(set, "apps/v1", "StatefulSet");
    let mut pod = pod_from_template(template, PodName::Exact(&name), owner, &labels);
    pod["spec"]["hostname"] = json!(name);
    if let Some(svc) = meta::get_path(set, "spec.serviceName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        pod["spec"]["subdomain"] = json!(svc);
    }
    let mut volumes: Vec<Value> = pod["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for t in claim_templates(set) {
        let vname = meta::name(&t).unwrap_or_default().to_string();
        volumes.retain(|v| v["name"] != vname.as_str());
        volumes.push(json!({"name": vname, "persistentVolumeClaim": {"claimName": claim_name(&t, set, ordinal)}}));
    }
    if !volumes.is_empty() {
        pod["spec"]["volumes"] = Value::Array(volumes);
    }
    pod
}

fn plain_ref(owner: &Value, api_version: &str, kind: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": meta::name(owner).unwrap_or_default(),
        "uid": meta::uid(owner).unwrap_or_default()})
}

/// The owner references a claim should carry under the set's retention policy (upstream
/// `updateClaimOwnerRefForSetAndPod`): `whenDeleted: Delete` → the set, `whenScaled: Delete` →
/// the Pod while its ordinal is scaled away (with both, the Pod replaces the set then). Other
/// owners are kept.
pub fn claim_owners(set: &Value, claim: &Value, pod: Option<&Value>, in_range: bool) -> Vec<Value> {
    let policy = |k: &str| {
        meta::get_path(
            set,
            &format!("spec.persistentVolumeClaimRetentionPolicy.{k}"),
        )
        .and_then(Value::as_str)
            == Some("Delete")
    };
    let (deleted, scaled) = (policy("whenDeleted"), policy("whenScaled"));
    let set_uid = meta::uid(set).unwrap_or_default();
    let pod_uid = pod.and_then(meta::uid).unwrap_or_default();
    let mut refs: Vec<Value> = meta::owner_references(claim)
        .into_iter()
        .filter(|r| r["uid"] != set_uid && (pod_uid.is_empty() || r["uid"] != pod_uid))
        .collect();
    let scaled_away = scaled && !in_range && pod.is_some();
    if deleted && !scaled_away {
        refs.push(plain_ref(set, "apps/v1", "StatefulSet"));
    }
    if let (true, Some(p)) = (scaled_away, pod) {
        refs.push(plain_ref(p, "v1", "Pod"));
    }
    refs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(policy: Value) -> Value {
        json!({"metadata": {"name": "db", "uid": "s1"}, "spec": {"serviceName": "db-hl",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c"}],
                "volumes": [{"name": "data", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "x"}}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": {"k": "v"}}, "spec": {"accessModes": ["ReadWriteOnce"]}}],
            "persistentVolumeClaimRetentionPolicy": policy}})
    }

    #[test]
    fn pods_carry_identity_and_claim_volumes() {
        let s = set(json!({}));
        let t = meta::get_path(&s, "spec.template").cloned().unwrap();
        let p = pod(&s, &t, "db-abc", 2);
        assert_eq!(p["metadata"]["name"], "db-2");
        assert_eq!(
            p["metadata"]["labels"],
            json!({"app": "db", POD_NAME_LABEL: "db-2",
            POD_INDEX_LABEL: "2", REVISION_LABEL: "db-abc"})
        );
        assert_eq!(p["spec"]["hostname"], "db-2");
        assert_eq!(p["spec"]["subdomain"], "db-hl");
        assert_eq!(
            p["spec"]["volumes"],
            json!([{"name": "cfg", "configMap": {"name": "x"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-2"}}])
        );
        assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);
        let c = claims(&s, 2);
        assert_eq!(c[0]["metadata"]["name"], "data-db-2");
        assert_eq!(c[0]["metadata"]["labels"], json!({"k": "v", "app": "db"}));
    }

    #[test]
    fn revisions_round_trip_the_template_and_change_with_it() {
        let s = set(json!({}));
        let r = revision(&s, 1);
        assert!(r["metadata"]["name"].as_str().unwrap().starts_with("db-"));
        assert_eq!(revision_template(&r), s["spec"]["template"]);
        let mut changed = s.clone();
        changed["spec"]["template"]["metadata"]["labels"]["v"] = json!("2");
        assert_ne!(
            revision(&changed, 2)["metadata"]["name"],
            r["metadata"]["name"]
        );
    }

    #[test]
    fn retention_policy_picks_owners() {
        let pod = json!({"metadata": {"name": "db-3", "uid": "p3"}});
        let claim =
            json!({"metadata": {"name": "data-db-3", "ownerReferences": [{"uid": "other"}]}});
        let uids = |refs: Vec<Value>| {
            refs.iter()
                .map(|r| r["uid"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        let retain = set(json!({"whenDeleted": "Retain", "whenScaled": "Retain"}));
        assert_eq!(
            uids(claim_owners(&retain, &claim, Some(&pod), false)),
            ["other"]
        );
        let deleted = set(json!({"whenDeleted": "Delete"}));
        assert_eq!(
            uids(claim_owners(&deleted, &claim, Some(&pod), true)),
            ["other", "s1"]
        );
        let scaled = set(json!({"whenScaled": "Delete"}));
        assert_eq!(
            uids(claim_owners(&scaled, &claim, Some(&pod), true)),
            ["other"]
        );
        assert_eq!(
            uids(claim_owners(&scaled, &claim, Some(&pod), false)),
            ["other", "p3"]
        );
        let both = set(json!({"whenDeleted": "Delete", "whenScaled": "Delete"}));
        assert_eq!(
            uids(claim_owners(&both, &claim, Some(&pod), false)),
            ["other", "p3"]
        );
        assert_eq!(
            uids(claim_owners(&both, &claim, Some(&pod), true)),
            ["other", "s1"]
        );
    }
}
