//! List semantics per field path, the schema knowledge that server-side apply, strategic merge
//! patch and managedFields need: which lists are associative (and by which keys), which are sets,
//! and which are atomic. Built-in kinds use a fixed table mirroring the Kubernetes Go types'
//! `listType`/`patchMergeKey` markers (only the common fields are covered: see
//! docs/local-control-plane.md); custom resources read `x-kubernetes-list-type` and
//! `x-kubernetes-list-map-keys` from their `openAPIV3Schema`. Lists not known are atomic, as in the
//! real server for schemaless fields.

use serde_json::Value;

use crate::registry::ResourceDef;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType {
    Atomic,
    Set,
    /// Associative list with its key fields.
    Map(Vec<String>),
}

/// Pod spec lists, relative to a pod spec.
const POD_SPEC: &[(&[&str], &[&str])] = &[
    (&["containers"], &["name"]),
    (&["initContainers"], &["name"]),
    (&["ephemeralContainers"], &["name"]),
    (&["volumes"], &["name"]),
    (&["imagePullSecrets"], &["name"]),
    (&["hostAliases"], &["ip"]),
    (&["resourceClaims"], &["name"]),
    (
        &["topologySpreadConstraints"],
        &["topologyKey", "whenUnsatisfiable"],
    ),
];

/// Container lists, relative to a container.
const CONTAINER: &[(&[&str], &[&str])] = &[
    (&["env"], &["name"]),
    (&["ports"], &["containerPort", "protocol"]),
    (&["volumeMounts"], &["mountPath"]),
    (&["volumeDevices"], &["devicePath"]),
    (&["resizePolicy"], &["resourceName"]),
];

/// Where a pod spec lives inside each built-in kind.
fn pod_spec_prefix(def: &ResourceDef) -> Option<&'static [&'static str]> {
    match (def.group.as_str(), def.kind.as_str()) {
        ("", "Pod") => Some(&["spec"]),
        ("batch", "Job") | ("apps", _) => Some(&["spec", "template", "spec"]),
        ("batch", "CronJob") => Some(&["spec", "jobTemplate", "spec", "template", "spec"]),
        _ => None,
    }
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn builtin_list_type(def: &ResourceDef, path: &[String]) -> ListType {
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    match p.as_slice() {
        ["metadata", "finalizers"] => return ListType::Set,
        ["metadata", "ownerReferences"] => return ListType::Map(strs(&["uid"])),
        ["status", "conditions"] => return ListType::Map(strs(&["type"])),
        ["spec", "finalizers"] if def.kind == "Namespace" => return ListType::Set,
        ["spec", "ports"] if def.kind == "Service" => {
            return ListType::Map(strs(&["port", "protocol"]));
        }
        ["status", "addresses"] if def.kind == "Node" => return ListType::Map(strs(&["type"])),
        ["spec", "versions"] if def.kind == "CustomResourceDefinition" => {
            return ListType::Map(strs(&["name"]));
        }
        _ => {}
    }
    if let Some(prefix) = pod_spec_prefix(def)
        && p.len() > prefix.len()
        && p[..prefix.len()] == *prefix
    {
        let rest = &p[prefix.len()..];
        for (suffix, keys) in POD_SPEC {
            if rest == *suffix {
                return ListType::Map(strs(keys));
            }
        }
        let containers = ["containers", "initContainers", "ephemeralContainers"];
        if rest.len() >= 2 && containers.contains(&rest[0]) {
            for (suffix, keys) in CONTAINER {
                if rest[1..] == **suffix {
                    return ListType::Map(strs(keys));
                }
            }
        }
    }
    ListType::Atomic
}

/// Walks a structural schema along field names (list items are transparent).
fn schema_at<'a>(schema: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = schema;
    for name in path {
        if cur.get("type").and_then(Value::as_str) == Some("array") {
            cur = cur.get("items")?;
        }
        cur = match cur.get("properties").and_then(|p| p.get(name)) {
            Some(s) => s,
            None => cur.get("additionalProperties").filter(|a| a.is_object())?,
        };
    }
    Some(cur)
}

fn schema_list_type(schema: &Value, path: &[String]) -> ListType {
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    match p.as_slice() {
        ["metadata", "finalizers"] => return ListType::Set,
        ["metadata", "ownerReferences"] => return ListType::Map(strs(&["uid"])),
        _ => {}
    }
    let Some(s) = schema_at(schema, path) else {
        return ListType::Atomic;
    };
    match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => ListType::Set,
        Some("map") => {
            let keys = s
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|k| k.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            ListType::Map(keys)
        }
        _ => ListType::Atomic,
    }
}

/// The list semantics of the list at `path` (field names from the object root).
pub fn list_type(def: &ResourceDef, path: &[String]) -> ListType {
    match &def.schema {
        Some(schema) if def.is_custom() => schema_list_type(schema, path),
        _ => builtin_list_type(def, path),
    }
}

/// The strategic-merge-patch merge key of a list, `None` for lists replaced as a whole.
/// Primitive lists with a merge strategy (finalizers) answer `Some("")`.
pub fn smp_merge_key(def: &ResourceDef, path: &[String]) -> Option<String> {
    match builtin_list_type(def, path) {
        ListType::Atomic => None,
        ListType::Set => Some(String::new()),
        ListType::Map(keys) => keys.into_iter().next(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    fn p(s: &str) -> Vec<String> {
        s.split('.').map(String::from).collect()
    }

    #[test]
    fn builtin_tables() {
        let r = Registry::with_builtins();
        let pod = r.lookup("", "v1", "pods").unwrap();
        let job = r.lookup("batch", "v1", "jobs").unwrap();
        assert_eq!(
            list_type(&pod, &p("spec.containers")),
            ListType::Map(vec!["name".into()])
        );
        assert_eq!(
            list_type(&job, &p("spec.template.spec.containers.ports")),
            ListType::Map(vec!["containerPort".into(), "protocol".into()])
        );
        assert_eq!(list_type(&pod, &p("spec.tolerations")), ListType::Atomic);
        assert_eq!(list_type(&pod, &p("metadata.finalizers")), ListType::Set);
        assert_eq!(
            smp_merge_key(&pod, &p("spec.containers.ports")),
            Some("containerPort".into())
        );
    }

    #[test]
    fn crd_schema_markers() {
        let schema = serde_json::json!({"type": "object", "properties": {"status": {"type": "object", "properties": {
            "conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                "items": {"type": "object"}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}}}}});
        let mut def = Registry::with_builtins()
            .lookup("", "v1", "configmaps")
            .unwrap()
            .as_ref()
            .clone();
        def.schema = Some(std::sync::Arc::new(schema));
        def.crd = Some("x.y".into());
        assert_eq!(
            list_type(&def, &p("status.conditions")),
            ListType::Map(vec!["type".into()])
        );
        assert_eq!(list_type(&def, &p("status.tags")), ListType::Set);
        assert_eq!(list_type(&def, &p("spec.other")), ListType::Atomic);
    }
}
