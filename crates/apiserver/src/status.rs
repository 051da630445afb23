//! API errors rendered as `metav1.Status` bodies, with the reasons, codes and message wording of
//! the real API server (kube-rs turns them into `kube::Error::Api`). This module only formats
//! errors; deciding when one applies is up to the callers.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::registry::{GroupResource, ResourceDef};

/// One field-level cause of an `Invalid` error.
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, `FieldValueForbidden`...
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

impl Cause {
    pub fn invalid(field: &str, value: &Value, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid",
            field: field.to_string(),
            message: format!("Invalid value: {}: {detail}", short_value(value)),
        }
    }

    pub fn required(field: &str) -> Self {
        Self {
            reason: "FieldValueRequired",
            field: field.to_string(),
            message: "Required value".into(),
        }
    }

    pub fn forbidden(field: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueForbidden",
            field: field.to_string(),
            message: format!("Forbidden: {detail}"),
        }
    }

    pub fn not_supported(field: &str, value: &Value, allowed: &[Value]) -> Self {
        let allowed: Vec<String> = allowed.iter().map(short_value).collect();
        Self {
            reason: "FieldValueNotSupported",
            field: field.to_string(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                short_value(value),
                allowed.join(", ")
            ),
        }
    }

    pub fn type_invalid(field: &str, value: &Value, expected: &str) -> Self {
        Self {
            reason: "FieldValueTypeInvalid",
            field: field.to_string(),
            message: format!(
                "Invalid value: {}: {field} in body must be of type {expected}: {:?}",
                short_value(value),
                type_name(value)
            ),
        }
    }

    /// `field: message` as printed inside the error message.
    pub fn render(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A value as a field error prints it: strings quoted, objects and lists by their type.
pub fn short_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

/// A failed request, convertible into an HTTP response with a Status body.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

pub type ApiResult<T> = Result<T, ApiError>;

fn details(gr: &GroupResource, name: &str) -> Value {
    let mut d = json!({ "name": name, "kind": gr.resource });
    if !gr.group.is_empty() {
        d["group"] = json!(gr.group);
    }
    d
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn not_found(gr: &GroupResource, name: &str) -> Self {
        Self {
            details: Some(details(gr, name)),
            ..Self::new(
                404,
                "NotFound",
                format!("{} \"{name}\" not found", gr.qualified()),
            )
        }
    }

    /// Unknown URL / resource type.
    pub fn no_route() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    pub fn already_exists(gr: &GroupResource, name: &str) -> Self {
        Self {
            details: Some(details(gr, name)),
            ..Self::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", gr.qualified()),
            )
        }
    }

    pub fn conflict(gr: &GroupResource, name: &str, why: &str) -> Self {
        Self {
            details: Some(details(gr, name)),
            ..Self::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": {why}",
                    gr.qualified()
                ),
            )
        }
    }

    pub fn stale(gr: &GroupResource, name: &str) -> Self {
        Self::conflict(
            gr,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn invalid(def: &ResourceDef, name: &str, causes: Vec<Cause>) -> Self {
        let rendered: Vec<String> = causes.iter().map(Cause::render).collect();
        let joined = if rendered.len() == 1 {
            rendered.join("")
        } else {
            format!("[{}]", rendered.join(", "))
        };
        let kind_label = if def.group.is_empty() {
            def.kind.clone()
        } else {
            format!("{}.{}", def.kind, def.group)
        };
        let mut d = json!({ "name": name, "kind": def.kind });
        if !def.group.is_empty() {
            d["group"] = json!(def.group);
        }
        d["causes"] = Value::Array(
            causes
                .iter()
                .map(|c| json!({ "reason": c.reason, "message": c.message, "field": c.field }))
                .collect(),
        );
        Self {
            details: Some(d),
            ..Self::new(
                422,
                "Invalid",
                format!("{kind_label} \"{name}\" is invalid: {joined}"),
            )
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    pub fn not_implemented(message: impl Into<String>) -> Self {
        Self::new(501, "NotImplemented", message)
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        if self.reason.is_empty() {
            // `reason` is omitted when unknown (a plain error turned into a 500), as upstream.
            if let Some(o) = s.as_object_mut() {
                o.remove("reason");
            }
        }
        s
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.to_status().to_string();
        (
            code,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    #[test]
    fn messages_match_the_real_server() {
        let gr = GroupResource::new("coordination.k8s.io", "leases");
        assert_eq!(
            ApiError::not_found(&gr, "a").message,
            "leases.coordination.k8s.io \"a\" not found"
        );
        let r = Registry::with_builtins();
        let pod = r.lookup("", "v1", "pods").unwrap();
        let e = ApiError::invalid(&pod, "p", vec![Cause::required("spec.containers")]);
        assert_eq!(
            e.message,
            "Pod \"p\" is invalid: spec.containers: Required value"
        );
        assert_eq!(
            e.to_status()["details"]["causes"][0]["field"],
            "spec.containers"
        );
    }
}
