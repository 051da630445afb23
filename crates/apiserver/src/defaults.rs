//! Defaulting and the little validation done for built-in kinds, mirroring the real server's
//! strategies where clients notice: Namespace phase/finalizer/name label, Pod defaults and
//! `Pending` phase, Service ClusterIP allocation (see `ipam`) and port defaults, PVC `Pending`
//! phase and the `kubernetes.io/pvc-protection` finalizer, required Pod containers, Job and CronJob defaults (see `batch`), apps/v1 workload defaults (see `apps`). Everything else in built-in specs is
//! stored as sent, without schema validation or pruning.

use serde_json::{Value, json};

mod apps;
mod batch;

/// The finalizer every new PersistentVolumeClaim gets (`StorageObjectInUseProtection`).
pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";

use crate::ipam::Allocator;
use crate::meta;
use crate::registry::ResourceDef;
use crate::status::Cause;

/// Called on create, after system metadata is set. `ips` allocates Service ClusterIPs.
pub fn on_create(def: &ResourceDef, obj: &mut Value, ips: &mut Allocator<'_>) -> Vec<Cause> {
    if def.group == "batch" {
        return on_batch(def, obj);
    }
    if def.group == "apps" {
        return apps::defaults(&def.kind, obj);
    }
    if !def.group.is_empty() {
        return Vec::new();
    }
    match def.kind.as_str() {
        "Namespace" => {
            namespace(obj);
            obj["status"] = json!({"phase": "Active"});
            if meta::get_path(obj, "spec.finalizers").is_none() {
                meta::set_path(obj, "spec.finalizers", json!(["kubernetes"]));
            }
            Vec::new()
        }
        "Pod" => {
            let causes = pod(obj);
            default_toleration_seconds(obj);
            priority(obj);
            obj["status"] = json!({"phase": "Pending", "qosClass": qos(obj)});
            causes
        }
        "Service" => {
            let causes = service(obj, None, ips);
            obj["status"] = json!({"loadBalancer": {}});
            causes
        }
        "Secret" => {
            secret_string_data(obj);
            default_str(obj, "type", "Opaque");
            Vec::new()
        }
        "PersistentVolumeClaim" => {
            if meta::get_path(obj, "spec.volumeMode").is_none() {
                meta::set_path(obj, "spec.volumeMode", json!("Filesystem"));
            }
            obj["status"] = json!({"phase": "Pending"});
            // The StorageObjectInUseProtection admission plugin; the pvc-protection controller
            // removes the finalizer once no Pod uses the claim.
            let mut finalizers = meta::finalizers(obj);
            if !finalizers.iter().any(|f| f == PVC_PROTECTION) {
                finalizers.push(PVC_PROTECTION.to_owned());
                meta::set_finalizers(obj, &finalizers);
            }
            Vec::new()
        }
        _ => Vec::new(),
    }
}

/// Called on update of the main resource (`old` is the stored object).
pub fn on_update(
    def: &ResourceDef,
    old: &Value,
    obj: &mut Value,
    ips: &mut Allocator<'_>,
) -> Vec<Cause> {
    if def.group == "batch" {
        return on_batch(def, obj);
    }
    if def.group == "apps" {
        return apps::defaults(&def.kind, obj);
    }
    if !def.group.is_empty() {
        return Vec::new();
    }
    match def.kind.as_str() {
        "Namespace" => {
            namespace(obj);
            Vec::new()
        }
        "Pod" => pod(obj),
        "Service" => service(obj, Some(old), ips),
        "Secret" => {
            secret_string_data(obj);
            default_str(obj, "type", "Opaque");
            Vec::new()
        }
        _ => Vec::new(),
    }
}

fn on_batch(def: &ResourceDef, obj: &mut Value) -> Vec<Cause> {
    match def.kind.as_str() {
        "Job" => batch::job(obj),
        "CronJob" => batch::cronjob(obj),
        _ => Vec::new(),
    }
}

fn namespace(obj: &mut Value) {
    let name = meta::name(obj).unwrap_or_default().to_string();
    let m = meta::meta_mut(obj);
    let labels = m.entry("labels").or_insert_with(|| json!({}));
    if let Value::Object(l) = labels {
        l.insert("kubernetes.io/metadata.name".into(), json!(name));
    }
}

/// The `Priority` admission plugin for a Pod that names no priority class (and no class is
/// the global default: this server has none): priority 0, `PreemptLowerPriority`.
fn priority(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    if spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .is_some_and(|c| !c.is_empty())
    {
        return;
    }
    if spec.get("priority").is_none_or(Value::is_null) {
        spec["priority"] = json!(0);
    }
    default_str(spec, "preemptionPolicy", "PreemptLowerPriority");
}

/// The `DefaultTolerationSeconds` admission plugin: a Pod that does not tolerate the
/// `not-ready` or `unreachable` `NoExecute` taint gets a 300 s toleration for it, so the node
/// lifecycle controller evicts it five minutes after its Node is lost.
fn default_toleration_seconds(obj: &mut Value) {
    let mut tolerations: Vec<Value> = meta::get_path(obj, "spec.tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let before = tolerations.len();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let tolerated = tolerations.iter().any(|t| {
            let effect_ok = t["effect"]
                .as_str()
                .is_none_or(|e| e.is_empty() || e == "NoExecute");
            let key_ok = match t["key"].as_str() {
                None | Some("") => t["operator"] == "Exists",
                Some(k) => k == key,
            };
            effect_ok && key_ok
        });
        if !tolerated {
            tolerations.push(
                json!({"key": key, "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": 300}),
            );
        }
    }
    if tolerations.len() != before {
        meta::set_path(obj, "spec.tolerations", Value::Array(tolerations));
    }
}

/// A Secret's `stringData` is write-only: the real server's conversion to the internal
/// version (`Convert_v1_Secret_To_core_Secret`) merges it into `data`, base64-encoded, a
/// `stringData` key winning over a `data` key of the same name, and the field is never stored
/// or returned. Done on every write (create, update, every patch type and apply), since each
/// reaches here with the whole object.
fn secret_string_data(obj: &mut Value) {
    use base64::Engine;
    let Some(Value::Object(map)) = obj.as_object_mut().and_then(|o| o.remove("stringData")) else {
        return;
    };
    if map.is_empty() {
        return;
    }
    if !obj.get("data").is_some_and(Value::is_object) {
        obj["data"] = json!({});
    }
    if let Some(Value::Object(data)) = obj.get_mut("data") {
        for (key, value) in map {
            let text = match value {
                Value::String(s) => s,
                other => other.to_string(),
            };
            let encoded = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
            data.insert(key, Value::String(encoded));
        }
    }
}

fn default_str(obj: &mut Value, field: &str, value: &str) {
    if obj.get(field).is_none_or(Value::is_null) {
        obj[field] = json!(value);
    }
}

fn pod(obj: &mut Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if !obj.get("spec").is_some_and(Value::is_object) {
        obj["spec"] = json!({});
    }
    let Some(spec) = obj.get_mut("spec") else {
        return causes;
    };
    default_str(spec, "restartPolicy", "Always");
    default_str(spec, "dnsPolicy", "ClusterFirst");
    default_str(spec, "schedulerName", "default-scheduler");
    default_str(spec, "serviceAccountName", "default");
    // The deprecated `serviceAccount` mirrors `serviceAccountName` (v1 conversion).
    if let Some(name) = spec.get("serviceAccountName").cloned() {
        spec["serviceAccount"] = name;
    }
    if spec.get("enableServiceLinks").is_none_or(Value::is_null) {
        spec["enableServiceLinks"] = json!(true);
    }
    if spec.get("terminationGracePeriodSeconds").is_none() {
        spec["terminationGracePeriodSeconds"] = json!(30);
    }
    if spec.get("securityContext").is_none() {
        spec["securityContext"] = json!({});
    }
    match spec.get_mut("containers").and_then(Value::as_array_mut) {
        Some(cs) if !cs.is_empty() => {
            for (i, c) in cs.iter_mut().enumerate() {
                if c.get("name")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    causes.push(Cause::required(&format!("spec.containers[{i}].name")));
                }
                let image = c
                    .get("image")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                if image.is_empty() {
                    causes.push(Cause::required(&format!("spec.containers[{i}].image")));
                }
                let tag = image
                    .rsplit('/')
                    .next()
                    .and_then(|last| last.split_once(':'))
                    .map(|x| x.1);
                let policy = if tag.is_none_or(|t| t == "latest") {
                    "Always"
                } else {
                    "IfNotPresent"
                };
                default_str(c, "imagePullPolicy", policy);
                default_str(c, "terminationMessagePath", "/dev/termination-log");
                default_str(c, "terminationMessagePolicy", "File");
                if c.get("resources").is_none() {
                    c["resources"] = json!({});
                }
                if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports {
                        default_str(p, "protocol", "TCP");
                    }
                }
            }
        }
        _ => causes.push(Cause::required("spec.containers")),
    }
    causes
}

fn qos(obj: &Value) -> &'static str {
    let containers = meta::get_path(obj, "spec.containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in &containers {
        let req = c
            .get("resources")
            .and_then(|r| r.get("requests"))
            .and_then(Value::as_object);
        let lim = c
            .get("resources")
            .and_then(|r| r.get("limits"))
            .and_then(Value::as_object);
        any |= req.is_some_and(|m| !m.is_empty()) || lim.is_some_and(|m| !m.is_empty());
        let full = |r: &str| {
            lim.and_then(|m| m.get(r)).is_some()
                && req
                    .and_then(|m| m.get(r))
                    .is_none_or(|q| Some(q) == lim.and_then(|m| m.get(r)))
        };
        guaranteed &= full("cpu") && full("memory");
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn service(obj: &mut Value, old: Option<&Value>, ips: &mut Allocator<'_>) -> Vec<Cause> {
    let mut causes = Vec::new();
    if !obj.get("spec").is_some_and(Value::is_object) {
        obj["spec"] = json!({});
    }
    let old_ip = old
        .and_then(|o| meta::get_path(o, "spec.clusterIP"))
        .and_then(Value::as_str)
        .filter(|ip| !ip.is_empty())
        .map(String::from);
    let Some(spec) = obj.get_mut("spec") else {
        return causes;
    };
    default_str(spec, "type", "ClusterIP");
    default_str(spec, "sessionAffinity", "None");
    let external_name = spec.get("type").and_then(Value::as_str) == Some("ExternalName");
    if !external_name {
        let requested = spec
            .get("clusterIP")
            .and_then(Value::as_str)
            .filter(|ip| !ip.is_empty())
            .or_else(|| {
                spec.get("clusterIPs")
                    .and_then(|ips| ips.get(0))
                    .and_then(Value::as_str)
                    .filter(|ip| !ip.is_empty())
            })
            .map(String::from);
        let ip = match (requested, old_ip) {
            (None, Some(kept)) => Some(kept),
            (None, None) => match ips.allocate() {
                Ok(ip) => Some(ip.to_string()),
                Err(c) => {
                    causes.push(c);
                    None
                }
            },
            (Some(r), Some(o)) if r == o => Some(r),
            (Some(r), Some(_)) => {
                causes.push(Cause {
                    reason: "FieldValueInvalid",
                    field: "spec.clusterIPs[0]".into(),
                    message: format!("Invalid value: []string{{\"{r}\"}}: may not change once set"),
                });
                None
            }
            (Some(r), None) if r == "None" => Some(r),
            (Some(r), None) => match ips.claim(&r) {
                Ok(()) => Some(r),
                Err(c) => {
                    causes.push(c);
                    None
                }
            },
        };
        if let Some(ip) = ip {
            spec["clusterIP"] = json!(ip);
            spec["clusterIPs"] = json!([ip]);
        }
        default_str(spec, "ipFamilyPolicy", "SingleStack");
        if spec.get("ipFamilies").is_none() {
            spec["ipFamilies"] = json!(["IPv4"]);
        }
        default_str(spec, "internalTrafficPolicy", "Cluster");
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            default_str(p, "protocol", "TCP");
            if p.get("targetPort").is_none()
                && let Some(port) = p.get("port").cloned()
            {
                p["targetPort"] = port;
            }
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipam::ServiceCidr;
    use crate::registry::Registry;

    #[test]
    fn pod_and_service_defaults() {
        let r = Registry::with_builtins();
        let mut next = 10;
        let mut ip = Allocator {
            cidr: ServiceCidr::default(),
            next: &mut next,
            in_use: Default::default(),
        };
        let mut p = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}});
        assert!(on_create(&r.lookup("", "v1", "pods").unwrap(), &mut p, &mut ip).is_empty());
        assert_eq!(p["status"]["phase"], "Pending");
        assert_eq!(
            p["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
        assert_eq!(p["status"]["qosClass"], "BestEffort");
        let mut bad = json!({"metadata": {"name": "p"}, "spec": {}});
        assert_eq!(
            on_create(&r.lookup("", "v1", "pods").unwrap(), &mut bad, &mut ip)[0].field,
            "spec.containers"
        );
        let svc = r.lookup("", "v1", "services").unwrap();
        let mut s = json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}});
        on_create(&svc, &mut s, &mut ip);
        assert_eq!(s["spec"]["clusterIP"], "127.96.0.10");
        assert_eq!(
            s["spec"]["ports"][0],
            json!({"port": 80, "protocol": "TCP", "targetPort": 80})
        );
        let mut s2 = json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 81}]}});
        on_update(&svc, &s, &mut s2, &mut ip);
        assert_eq!(s2["spec"]["clusterIP"], "127.96.0.10");
        let mut headless = json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None"}});
        on_create(&svc, &mut headless, &mut ip);
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
        let mut moved = json!({"metadata": {"name": "s"}, "spec": {"clusterIP": "127.96.0.99"}});
        let causes = on_update(&svc, &s, &mut moved, &mut ip);
        assert_eq!(
            causes[0].message,
            "Invalid value: []string{\"127.96.0.99\"}: may not change once set"
        );
    }
}
