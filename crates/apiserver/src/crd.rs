//! CustomResourceDefinitions: validation of the CRD object itself, its `status` (accepted
//! names, `NamesAccepted`/`Established` conditions, stored versions — set synchronously on
//! every write instead of by a controller), and the `ResourceDef`s it registers, one per served
//! version. All served versions share one storage; objects are read and written as-is with
//! `apiVersion` rewritten, because conversion webhooks do not exist here. The CEL rules of
//! every version are compiled here (a rule that does not compile refuses the CRD) and kept in
//! the `ResourceDef`s. Structural-schema checks of the CRD's own schema are not performed.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::cel;
use crate::meta;
use crate::registry::{NameRule, ResourceDef, ScaleDef, StatusOnCreate};
use crate::status::Cause;

/// The finalizer the real server adds to CRDs to delete their objects first.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

fn s<'a>(v: &'a Value, path: &str) -> Option<&'a str> {
    meta::get_path(v, path)
        .and_then(Value::as_str)
        .filter(|x| !x.is_empty())
}

/// Checks the CRD and returns the definitions of its served versions.
pub fn defs(crd: &Value) -> Result<Vec<ResourceDef>, Vec<Cause>> {
    let mut causes = Vec::new();
    let group = s(crd, "spec.group").unwrap_or_default().to_string();
    let plural = s(crd, "spec.names.plural").unwrap_or_default().to_string();
    let kind = s(crd, "spec.names.kind").unwrap_or_default().to_string();
    if group.is_empty() {
        causes.push(Cause::required("spec.group"));
    }
    if plural.is_empty() {
        causes.push(Cause::required("spec.names.plural"));
    }
    if kind.is_empty() {
        causes.push(Cause::required("spec.names.kind"));
    }
    let name = meta::name(crd).unwrap_or_default();
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    let scope = s(crd, "spec.scope").unwrap_or_default();
    if scope != "Namespaced" && scope != "Cluster" {
        causes.push(Cause::not_supported(
            "spec.scope",
            &json!(scope),
            &[json!("Cluster"), json!("Namespaced")],
        ));
    }
    let versions = meta::get_path(crd, "spec.versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::required("spec.versions"));
    }
    let storage: Vec<&Value> = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .collect();
    if !versions.is_empty() && storage.len() != 1 {
        causes.push(Cause::invalid(
            "spec.versions",
            &json!(storage.len()),
            "must have exactly one version marked as storage version",
        ));
    }
    // When every version carries the same schema, upstream's conversion to the internal version
    // moves it to `spec.validation` (and clears the versions'): it is checked once, and its
    // errors are reported under `spec.validation.openAPIV3Schema`.
    let shared = versions
        .first()
        .and_then(|v| v.get("schema"))
        .filter(|first| versions.iter().all(|v| v.get("schema") == Some(*first)))
        .and_then(|sc| sc.get("openAPIV3Schema"))
        .map(|sc| cel::compile(sc, "spec.validation.openAPIV3Schema"));
    let shared = match shared {
        Some(Ok(compiled)) => Some(compiled.map(Arc::new)),
        Some(Err(c)) => {
            causes.extend(c);
            Some(None)
        }
        None => None,
    };
    let mut validations = Vec::with_capacity(versions.len());
    for (i, v) in versions.iter().enumerate() {
        let schema_path = format!("spec.versions[{i}].schema.openAPIV3Schema");
        if let Some(compiled) = &shared {
            validations.push(compiled.clone());
        } else {
            match meta::get_path(v, "schema.openAPIV3Schema")
                .map(|sc| cel::compile(sc, &schema_path))
            {
                Some(Ok(compiled)) => validations.push(compiled.map(Arc::new)),
                Some(Err(c)) => {
                    causes.extend(c);
                    validations.push(None);
                }
                None => validations.push(None),
            }
        }
        if s(v, "name").is_none() {
            causes.push(Cause::required(&format!("spec.versions[{i}].name")));
        }
        if meta::get_path(v, "schema.openAPIV3Schema").is_none() {
            causes.push(Cause {
                reason: "FieldValueRequired",
                field: format!("spec.versions[{i}].schema.openAPIV3Schema"),
                message: "Required value: schemas are required".into(),
            });
        }
    }
    if !causes.is_empty() {
        return Err(causes);
    }
    let storage_version = storage
        .first()
        .and_then(|v| s(v, "name"))
        .unwrap_or_default()
        .to_string();
    let names = meta::get_path(crd, "spec.names")
        .cloned()
        .unwrap_or(Value::Null);
    let out = versions
        .iter()
        .zip(validations)
        .filter(|(v, _)| v.get("served").and_then(Value::as_bool) == Some(true))
        .map(|(v, validations)| {
            let status = meta::get_path(v, "subresources.status").is_some();
            let scale = meta::get_path(v, "subresources.scale").map(|sc| ScaleDef {
                spec_replicas_path: s(sc, "specReplicasPath")
                    .unwrap_or(".spec.replicas")
                    .to_string(),
                status_replicas_path: s(sc, "statusReplicasPath")
                    .unwrap_or(".status.replicas")
                    .to_string(),
                label_selector_path: s(sc, "labelSelectorPath").map(String::from),
            });
            ResourceDef {
                group: group.clone(),
                version: s(v, "name").unwrap_or_default().to_string(),
                kind: kind.clone(),
                plural: plural.clone(),
                singular: s(&names, "singular")
                    .map(String::from)
                    .unwrap_or_else(|| kind.to_lowercase()),
                list_kind: s(&names, "listKind")
                    .map(String::from)
                    .unwrap_or_else(|| format!("{kind}List")),
                namespaced: scope == "Namespaced",
                short_names: meta::strings(names.get("shortNames")),
                categories: meta::strings(names.get("categories")),
                status_subresource: status,
                scale,
                generation: true,
                name_rule: NameRule::Subdomain,
                status_on_create: if status {
                    StatusOnCreate::Drop
                } else {
                    StatusOnCreate::Keep
                },
                extra_subresources: Vec::new(),
                storage_version: storage_version.clone(),
                schema: meta::get_path(v, "schema.openAPIV3Schema")
                    .cloned()
                    .map(Arc::new),
                validations,
                crd: Some(name.to_string()),
                storage_gr: None,
                printer_columns: v
                    .get("additionalPrinterColumns")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
                selectable_fields: v
                    .get("selectableFields")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                            .map(|p| p.trim_start_matches('.').to_string())
                            .collect()
                    })
                    .unwrap_or_default(),
            }
        })
        .collect();
    Ok(out)
}

fn condition(old: &[Value], ty: &str, status: &str, reason: &str, message: &str) -> Value {
    let time = old
        .iter()
        .find(|c| {
            c.get("type").and_then(Value::as_str) == Some(ty)
                && c.get("status").and_then(Value::as_str) == Some(status)
        })
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(meta::now()));
    json!({"type": ty, "status": status, "reason": reason, "message": message, "lastTransitionTime": time})
}

/// Sets the status the real CRD controllers would converge to.
pub fn set_status(crd: &mut Value) {
    let names = meta::get_path(crd, "spec.names")
        .cloned()
        .unwrap_or(json!({}));
    let kind = s(&names, "kind").unwrap_or_default().to_string();
    let mut accepted = names.clone();
    if s(&accepted, "singular").is_none() {
        accepted["singular"] = json!(kind.to_lowercase());
    }
    if s(&accepted, "listKind").is_none() {
        accepted["listKind"] = json!(format!("{kind}List"));
    }
    let old_conditions = meta::get_path(crd, "status.conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut conditions = vec![
        condition(
            &old_conditions,
            "NamesAccepted",
            "True",
            "NoConflicts",
            "no conflicts found",
        ),
        condition(
            &old_conditions,
            "Established",
            "True",
            "InitialNamesAccepted",
            "the initial names have been accepted",
        ),
    ];
    if meta::is_deleting(crd) {
        conditions.push(condition(
            &old_conditions,
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        ));
    }
    let mut stored = meta::strings(meta::get_path(crd, "status.storedVersions"));
    if let Some(v) = meta::get_path(crd, "spec.versions")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        })
        .and_then(|v| s(v, "name"))
        && !stored.iter().any(|x| x == v)
    {
        stored.push(v.to_string());
    }
    crd["status"] =
        json!({"acceptedNames": accepted, "conditions": conditions, "storedVersions": stored});
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn sample() -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [
                    {"name": "v1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object"}},
                     "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}}},
                    {"name": "v1beta1", "served": true, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {"name": "v1alpha1", "served": false, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
    }

    #[test]
    fn served_versions_become_defs() {
        let d = defs(&sample()).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].storage_version, "v1");
        assert_eq!(d[1].version, "v1beta1");
        assert_eq!(
            d[0].scale.as_ref().unwrap().spec_replicas_path,
            ".spec.size"
        );
        assert!(d[0].status_subresource && !d[1].status_subresource);
        let mut c = sample();
        set_status(&mut c);
        assert_eq!(c["status"]["conditions"][1]["type"], "Established");
        assert_eq!(c["status"]["acceptedNames"]["listKind"], "WidgetList");
        assert_eq!(c["status"]["storedVersions"], json!(["v1"]));
    }

    #[test]
    fn rejects_bad_names() {
        let mut c = sample();
        c["metadata"]["name"] = json!("wrong");
        assert_eq!(defs(&c).unwrap_err()[0].field, "metadata.name");
    }
}
