//! Create: type and namespace checks, `generateName`, system metadata (uid, creationTimestamp,
//! generation), status reset for kinds with a status subresource, admission, `AlreadyExists`.

use serde_json::{Value, json};

use super::{Fields, admit, after_write, is_crd, to_storage, to_version};
use crate::managed_fields;
use crate::meta;
use crate::registry::{GroupResource, ResourceDef, StatusOnCreate};
use crate::status::{ApiError, ApiResult, Cause};
use crate::store::{EventType, State};

/// Checks `apiVersion`/`kind` of a request body against the endpoint.
pub fn check_type(def: &ResourceDef, body: &Value) -> ApiResult<()> {
    if let Some(av) = body
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        && av != def.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            def.api_version()
        )));
    }
    if let Some(k) = body
        .get("kind")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        && k != def.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            def.kind
        )));
    }
    Ok(())
}

/// Namespace of the URL vs the body; sets the body's namespace.
pub fn check_namespace(def: &ResourceDef, ns: &str, body: &mut Value) -> ApiResult<()> {
    if def.namespaced {
        if let Some(b) = meta::namespace(body)
            && b != ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        meta::meta_mut(body).insert("namespace".into(), json!(ns));
    } else {
        meta::meta_mut(body).remove("namespace");
    }
    Ok(())
}

/// The namespace must exist and not be terminating.
pub fn check_namespace_usable(state: &State, def: &ResourceDef, ns: &str) -> ApiResult<()> {
    if !def.namespaced {
        return Ok(());
    }
    match state.get(&GroupResource::new("", "namespaces"), "", ns) {
        None => Err(ApiError::not_found(&GroupResource::new("", "namespaces"), ns)),
        Some(n) if meta::is_deleting(n) => Err(ApiError::forbidden(format!(
            "unable to create new content in namespace {ns} because it is being terminated"
        ))
        .with_details(json!({"name": ns, "kind": "namespaces", "causes": [{"reason": "NamespaceTerminating",
            "message": format!("namespace {ns} is being terminated"), "field": "metadata.namespace"}]}))),
        Some(_) => Ok(()),
    }
}

fn check_crd_not_terminating(state: &State, def: &ResourceDef) -> ApiResult<()> {
    let Some(crd) = &def.crd else { return Ok(()) };
    let gr = GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions");
    if state.get(&gr, "", crd).is_some_and(meta::is_deleting) {
        return Err(ApiError::method_not_allowed(
            "create not allowed while custom resource definition is terminating",
        ));
    }
    Ok(())
}

pub fn create(
    state: &mut State,
    def: &ResourceDef,
    ns: &str,
    body: Value,
    fields: Fields<'_>,
) -> ApiResult<Value> {
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    let mut obj = body;
    check_type(def, &obj)?;
    check_namespace(def, ns, &mut obj)?;
    check_namespace_usable(state, def, ns)?;
    check_crd_not_terminating(state, def)?;
    if meta::resource_version(&obj).is_some() {
        return Err(ApiError::internal(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    let gr = def.gr();
    let name = match (meta::name(&obj), meta::str_field(&obj, "generateName")) {
        (Some(n), _) => n.to_string(),
        (None, Some(prefix)) => {
            let prefix = prefix.to_string();
            let mut n = format!("{prefix}{}", meta::random_suffix());
            while state.get(&gr, ns, &n).is_some() {
                n = format!("{prefix}{}", meta::random_suffix());
            }
            n
        }
        (None, None) => {
            return Err(ApiError::invalid(
                def,
                "",
                vec![Cause {
                    reason: "FieldValueRequired",
                    field: "metadata.name".into(),
                    message: "Required value: name or generateName is required".into(),
                }],
            ));
        }
    };
    {
        let m = meta::meta_mut(&mut obj);
        m.insert("name".into(), json!(name));
        m.insert("uid".into(), json!(meta::new_uid()));
        m.insert("creationTimestamp".into(), json!(meta::now()));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        if def.generation {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
    }
    if def.status_on_create == StatusOnCreate::Drop
        && let Some(m) = obj.as_object_mut()
    {
        m.remove("status");
    }
    crate::auth::escalation::check(state, def, None, &obj)?;
    let causes = admit(state, def, None, &mut obj);
    if !causes.is_empty() {
        return Err(ApiError::invalid(def, &name, causes));
    }
    if state
        .get(&gr, if def.namespaced { ns } else { "" }, &name)
        .is_some()
    {
        return Err(ApiError::already_exists(&gr, &name));
    }
    to_storage(def, &mut obj);
    if let Fields::Record(manager) = fields {
        managed_fields::record_update(def, &json!({}), &mut obj, manager, "");
    }
    let stored = state.put(&gr, obj, EventType::Added);
    if is_crd(def) {
        after_write(state, def, Some(&stored), &name);
    }
    Ok(to_version(def, &stored))
}
