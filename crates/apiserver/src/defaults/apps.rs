//! Defaults of apps/v1 workloads that clients and the controllers notice (the real server's
//! `SetDefaults_*`): `replicas: 1`; Deployment `strategy` (RollingUpdate, 25%/25%),
//! `revisionHistoryLimit: 10`, `progressDeadlineSeconds: 600`; StatefulSet
//! `podManagementPolicy: OrderedReady`, `updateStrategy` (RollingUpdate, `partition: 0`),
//! `revisionHistoryLimit: 10`, `persistentVolumeClaimRetentionPolicy` (Retain, Retain) and
//! `volumeMode: Filesystem` on claim templates; Pod defaults on every template.

use serde_json::{Value, json};

use super::pod;
use crate::meta;
use crate::status::Cause;

fn set_default(obj: &mut Value, path: &str, value: Value) {
    if meta::get_path(obj, path).is_none_or(Value::is_null) {
        meta::set_path(obj, path, value);
    }
}

/// Pod defaults for `spec.template`, with causes under `spec.template.spec`.
fn template(obj: &mut Value) -> Vec<Cause> {
    let mut wrapper =
        json!({"spec": meta::get_path(obj, "spec.template.spec").cloned().unwrap_or(json!({}))});
    let causes = pod(&mut wrapper)
        .into_iter()
        .map(|mut c| {
            c.field = format!("spec.template.{}", c.field);
            c
        })
        .collect();
    meta::set_path(obj, "spec.template.spec", wrapper["spec"].take());
    causes
}

pub fn defaults(kind: &str, obj: &mut Value) -> Vec<Cause> {
    if !matches!(
        kind,
        "Deployment" | "StatefulSet" | "ReplicaSet" | "DaemonSet"
    ) {
        return Vec::new();
    }
    if kind != "DaemonSet" {
        set_default(obj, "spec.replicas", json!(1));
    }
    match kind {
        "Deployment" => {
            set_default(obj, "spec.strategy.type", json!("RollingUpdate"));
            if meta::get_path(obj, "spec.strategy.type").and_then(Value::as_str)
                == Some("RollingUpdate")
            {
                set_default(obj, "spec.strategy.rollingUpdate.maxSurge", json!("25%"));
                set_default(
                    obj,
                    "spec.strategy.rollingUpdate.maxUnavailable",
                    json!("25%"),
                );
            }
            set_default(obj, "spec.revisionHistoryLimit", json!(10));
            set_default(obj, "spec.progressDeadlineSeconds", json!(600));
        }
        "StatefulSet" => {
            set_default(obj, "spec.podManagementPolicy", json!("OrderedReady"));
            set_default(obj, "spec.updateStrategy.type", json!("RollingUpdate"));
            if meta::get_path(obj, "spec.updateStrategy.type").and_then(Value::as_str)
                == Some("RollingUpdate")
            {
                set_default(obj, "spec.updateStrategy.rollingUpdate.partition", json!(0));
            }
            set_default(obj, "spec.revisionHistoryLimit", json!(10));
            set_default(
                obj,
                "spec.persistentVolumeClaimRetentionPolicy.whenDeleted",
                json!("Retain"),
            );
            set_default(
                obj,
                "spec.persistentVolumeClaimRetentionPolicy.whenScaled",
                json!("Retain"),
            );
            if let Some(Value::Array(ts)) = obj.pointer_mut("/spec/volumeClaimTemplates") {
                for t in ts {
                    set_default(t, "spec.volumeMode", json!("Filesystem"));
                }
            }
        }
        _ => {}
    }
    template(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_get_upstream_defaults() {
        let mut d = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}}});
        assert!(defaults("Deployment", &mut d).is_empty());
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
        );
        assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
        let mut s = json!({"spec": {"replicas": 3, "updateStrategy": {"type": "OnDelete"},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}],
            "template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}}});
        assert!(defaults("StatefulSet", &mut s).is_empty());
        assert_eq!(s["spec"]["replicas"], 3);
        assert_eq!(s["spec"]["updateStrategy"], json!({"type": "OnDelete"}));
        assert_eq!(s["spec"]["podManagementPolicy"], "OrderedReady");
        assert_eq!(
            s["spec"]["volumeClaimTemplates"][0]["spec"]["volumeMode"],
            "Filesystem"
        );
        let mut bad = json!({"spec": {"template": {"spec": {}}}});
        assert!(!defaults("ReplicaSet", &mut bad).is_empty());
    }
}
