//! The `paths` of a v3 group-version document: the operations the server answers for each
//! resource, named (`operationId`), tagged and parameterized as upstream's generator does, with
//! `x-kubernetes-action` and `x-kubernetes-group-version-kind`. kubectl reads these to decide
//! whether the server validates fields (`fieldValidation` on the PATCH operation) and which
//! patch types a kind accepts. Watch paths (`/watch/...`, deprecated upstream) and the streaming
//! Pod subresources (`log`, `exec`, `attach`) are not listed.

use serde_json::{Map, Value, json};

use super::{GroupVersion, Names, SCHEMAS, builtin};
use crate::registry::ResourceDef;

const JSON_YAML: [&str; 2] = ["application/json", "application/yaml"];

/// `CoreV1`, `AppsV1`, `RbacAuthorizationV1`, `StewardDevV1alpha1`: the group-version part of
/// an operation id.
fn camel_gv(group: &str, version: &str) -> String {
    let group = if group.is_empty() {
        "core"
    } else {
        group.strip_suffix(".k8s.io").unwrap_or(group)
    };
    let mut out: String = group
        .split(['.', '-'])
        .map(capitalize)
        .collect::<Vec<_>>()
        .join("");
    out.push_str(&capitalize(version));
    out
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// `core_v1`, `apps_v1`, `rbacAuthorization_v1`.
fn tag(group: &str, version: &str) -> String {
    let camel = camel_gv(group, "");
    let mut c = camel.chars();
    let lower: String = match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    };
    format!("{lower}_{version}")
}

fn param(name: &str, location: &str, description: &str, ty: &str) -> Value {
    let mut p = json!({"name": name, "in": location, "description": description,
        "schema": {"type": ty, "uniqueItems": true}});
    if location == "path" {
        p["required"] = json!(true);
    }
    p
}

fn q(name: &str) -> Value {
    let (description, ty) = match name {
        "dryRun" => (
            "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
            "string",
        ),
        "fieldManager" => (
            "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.",
            "string",
        ),
        "fieldValidation" => (
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. This is the default behavior prior to v1.23. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.",
            "string",
        ),
        "force" => (
            "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.",
            "boolean",
        ),
        "gracePeriodSeconds" => (
            "The duration in seconds before the object should be deleted. Value must be non-negative integer. The value zero indicates delete immediately.",
            "integer",
        ),
        "propagationPolicy" => (
            "Whether and how garbage collection will be performed. Acceptable values are: 'Orphan', 'Background', 'Foreground'.",
            "string",
        ),
        "orphanDependents" => (
            "Deprecated: please use the PropagationPolicy, this field will be deprecated in 1.7. Should the dependent objects be orphaned.",
            "boolean",
        ),
        "allowWatchBookmarks" | "watch" | "sendInitialEvents" => (
            "See the Kubernetes API reference for this list/watch parameter.",
            "boolean",
        ),
        "limit" | "timeoutSeconds" => (
            "See the Kubernetes API reference for this list/watch parameter.",
            "integer",
        ),
        _ => (
            "See the Kubernetes API reference for this list/watch parameter.",
            "string",
        ),
    };
    param(name, "query", description, ty)
}

const LIST_PARAMS: [&str; 10] = [
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
    "watch",
];
const WRITE_PARAMS: [&str; 3] = ["dryRun", "fieldManager", "fieldValidation"];
const PATCH_PARAMS: [&str; 4] = ["dryRun", "fieldManager", "fieldValidation", "force"];
const DELETE_PARAMS: [&str; 4] = [
    "dryRun",
    "gracePeriodSeconds",
    "orphanDependents",
    "propagationPolicy",
];

fn content(types: &[&str], schema: &str) -> Value {
    let mut m = Map::new();
    for t in types {
        m.insert(
            t.to_string(),
            json!({"schema": {"$ref": format!("{SCHEMAS}{schema}")}}),
        );
    }
    Value::Object(m)
}

fn responses(codes: &[&str], types: &[&str], schema: &str) -> Value {
    let mut m = Map::new();
    for code in codes {
        let description = match *code {
            "201" => "Created",
            "202" => "Accepted",
            _ => "OK",
        };
        m.insert(
            code.to_string(),
            json!({"description": description, "content": content(types, schema)}),
        );
    }
    m.insert("401".into(), json!({"description": "Unauthorized"}));
    Value::Object(m)
}

struct Op<'a> {
    action: &'a str,
    id: String,
    description: String,
    params: &'a [&'a str],
    body: Option<Value>,
    codes: &'a [&'a str],
    response_types: &'a [&'a str],
    response: &'a str,
    gvk: Option<(&'a str, &'a str, &'a str)>,
}

fn op(o: Op<'_>, tag: &str) -> Value {
    let mut v = json!({
        "tags": [tag],
        "description": o.description,
        "operationId": o.id,
        "responses": responses(o.codes, o.response_types, o.response),
        "x-kubernetes-action": o.action,
    });
    if !o.params.is_empty() {
        v["parameters"] = Value::Array(o.params.iter().map(|p| q(p)).collect());
    }
    if let Some(body) = o.body {
        v["requestBody"] = body;
    }
    if let Some((g, ver, k)) = o.gvk {
        v["x-kubernetes-group-version-kind"] = json!({"group": g, "kind": k, "version": ver});
    }
    v
}

fn body_of(schema: &str) -> Value {
    json!({"content": content(&["*/*"], schema), "required": true})
}

fn patch_body(custom: bool) -> Value {
    let types: &[&str] = if custom {
        &[
            "application/apply-patch+yaml",
            "application/json-patch+json",
            "application/merge-patch+json",
        ]
    } else {
        &[
            "application/apply-patch+yaml",
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
        ]
    };
    json!({"content": content(types, builtin::PATCH), "required": true})
}

fn path_params(namespaced: bool, named: bool) -> Value {
    let mut out = Vec::new();
    if named {
        out.push(param("name", "path", "name of the resource", "string"));
    }
    if namespaced {
        out.push(param(
            "namespace",
            "path",
            "object name and auth scope, such as for teams and projects",
            "string",
        ));
    }
    out.push(param(
        "pretty",
        "query",
        "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget).",
        "string",
    ));
    Value::Array(out)
}

fn prefix(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

/// The operations of one resource.
fn resource_paths(def: &ResourceDef, names: &Names, out: &mut Map<String, Value>) {
    let Some(kind) = names.get(&def.group, &def.version, &def.kind) else {
        return;
    };
    let Some(list) = names.get(&def.group, &def.version, &def.list_kind) else {
        return;
    };
    let gv = camel_gv(&def.group, &def.version);
    let tag = tag(&def.group, &def.version);
    let base = prefix(&def.group, &def.version);
    let (coll, scope) = if def.namespaced {
        (
            format!("{base}/namespaces/{{namespace}}/{}", def.plural),
            "Namespaced",
        )
    } else {
        (format!("{base}/{}", def.plural), "")
    };
    let k = def.kind.as_str();
    let gvk = Some((def.group.as_str(), def.version.as_str(), k));
    let watchable: Vec<&str> = JSON_YAML
        .iter()
        .copied()
        .chain(["application/json;stream=watch"])
        .collect();
    let delete_collection_params: Vec<&str> = DELETE_PARAMS
        .iter()
        .chain(LIST_PARAMS.iter())
        .copied()
        .collect();
    let mut c = json!({
        "get": op(Op { action: "list", id: format!("list{gv}{scope}{k}"),
            description: format!("list or watch objects of kind {k}"), params: &LIST_PARAMS,
            body: None, codes: &["200"], response_types: &watchable, response: list, gvk }, &tag),
        "post": op(Op { action: "post", id: format!("create{gv}{scope}{k}"),
            description: format!("create a {k}"), params: &WRITE_PARAMS, body: Some(body_of(kind)),
            codes: &["200", "201", "202"], response_types: &JSON_YAML, response: kind, gvk }, &tag),
        "delete": op(Op { action: "deletecollection", id: format!("delete{gv}Collection{scope}{k}"),
            description: format!("delete collection of {k}"), params: &delete_collection_params,
            body: Some(json!({"content": content(&["*/*"], builtin::DELETE_OPTIONS)})),
            codes: &["200"], response_types: &JSON_YAML, response: builtin::STATUS, gvk }, &tag),
        "parameters": path_params(def.namespaced, false),
    });
    if let Some(o) = c.as_object_mut() {
        o.retain(|_, v| !v.is_null());
    }
    out.insert(coll.clone(), c);
    let item = json!({
        "get": op(Op { action: "get", id: format!("read{gv}{scope}{k}"),
            description: format!("read the specified {k}"), params: &[], body: None,
            codes: &["200"], response_types: &JSON_YAML, response: kind, gvk }, &tag),
        "put": op(Op { action: "put", id: format!("replace{gv}{scope}{k}"),
            description: format!("replace the specified {k}"), params: &WRITE_PARAMS,
            body: Some(body_of(kind)), codes: &["200", "201"], response_types: &JSON_YAML,
            response: kind, gvk }, &tag),
        "patch": op(Op { action: "patch", id: format!("patch{gv}{scope}{k}"),
            description: format!("partially update the specified {k}"), params: &PATCH_PARAMS,
            body: Some(patch_body(def.is_custom())), codes: &["200", "201"],
            response_types: &JSON_YAML, response: kind, gvk }, &tag),
        "delete": op(Op { action: "delete", id: format!("delete{gv}{scope}{k}"),
            description: format!("delete a {k}"), params: &DELETE_PARAMS,
            body: Some(json!({"content": content(&["*/*"], builtin::DELETE_OPTIONS)})),
            codes: &["200", "202"], response_types: &JSON_YAML, response: kind, gvk }, &tag),
        "parameters": path_params(def.namespaced, true),
    });
    out.insert(format!("{coll}/{{name}}"), item);
    if def.status_subresource {
        out.insert(
            format!("{coll}/{{name}}/status"),
            json!({
                "get": op(Op { action: "get", id: format!("read{gv}{scope}{k}Status"),
                    description: format!("read status of the specified {k}"), params: &[],
                    body: None, codes: &["200"], response_types: &JSON_YAML, response: kind, gvk }, &tag),
                "put": op(Op { action: "put", id: format!("replace{gv}{scope}{k}Status"),
                    description: format!("replace status of the specified {k}"), params: &WRITE_PARAMS,
                    body: Some(body_of(kind)), codes: &["200", "201"], response_types: &JSON_YAML,
                    response: kind, gvk }, &tag),
                "patch": op(Op { action: "patch", id: format!("patch{gv}{scope}{k}Status"),
                    description: format!("partially update status of the specified {k}"),
                    params: &PATCH_PARAMS, body: Some(patch_body(def.is_custom())),
                    codes: &["200", "201"], response_types: &JSON_YAML, response: kind, gvk }, &tag),
                "parameters": path_params(def.namespaced, true),
            }),
        );
    }
    if def.scale.is_some()
        && let Some(scale) = names.get("autoscaling", "v1", "Scale")
    {
        let gvk = Some(("autoscaling", "v1", "Scale"));
        out.insert(
            format!("{coll}/{{name}}/scale"),
            json!({
                "get": op(Op { action: "get", id: format!("read{gv}{scope}{k}Scale"),
                    description: format!("read scale of the specified {k}"), params: &[],
                    body: None, codes: &["200"], response_types: &JSON_YAML, response: scale, gvk }, &tag),
                "put": op(Op { action: "put", id: format!("replace{gv}{scope}{k}Scale"),
                    description: format!("replace scale of the specified {k}"), params: &WRITE_PARAMS,
                    body: Some(body_of(scale)), codes: &["200", "201"], response_types: &JSON_YAML,
                    response: scale, gvk }, &tag),
                "patch": op(Op { action: "patch", id: format!("patch{gv}{scope}{k}Scale"),
                    description: format!("partially update scale of the specified {k}"),
                    params: &PATCH_PARAMS, body: Some(patch_body(def.is_custom())),
                    codes: &["200", "201"], response_types: &JSON_YAML, response: scale, gvk }, &tag),
                "parameters": path_params(def.namespaced, true),
            }),
        );
    }
    for (sub, sub_kind, _) in &def.extra_subresources {
        let target = match *sub_kind {
            "Eviction" => ("policy", "v1", "Eviction"),
            "Binding" => ("", "v1", "Binding"),
            "TokenRequest" => ("authentication.k8s.io", "v1", "TokenRequest"),
            _ => continue,
        };
        let Some(schema) = names.get(target.0, target.1, target.2) else {
            continue;
        };
        out.insert(
            format!("{coll}/{{name}}/{sub}"),
            json!({
                "post": op(Op { action: "post", id: format!("create{gv}{scope}{k}{}", capitalize(sub)),
                    description: format!("create {sub} of a {k}"), params: &WRITE_PARAMS,
                    body: Some(body_of(schema)), codes: &["200", "201", "202"],
                    response_types: &JSON_YAML, response: schema, gvk: Some(target) }, &tag),
                "parameters": path_params(def.namespaced, true),
            }),
        );
    }
    if def.namespaced {
        out.insert(
            format!("{base}/{}", def.plural),
            json!({
                "get": op(Op { action: "list", id: format!("list{gv}{k}ForAllNamespaces"),
                    description: format!("list or watch objects of kind {k}"), params: &LIST_PARAMS,
                    body: None, codes: &["200"], response_types: &watchable, response: list, gvk }, &tag),
                "parameters": path_params(false, false),
            }),
        );
    }
}

/// All paths of a group-version document.
pub fn paths(gv: &GroupVersion, names: &Names) -> Value {
    let mut out = Map::new();
    for def in &gv.defs {
        resource_paths(def, names, &mut out);
    }
    let base = prefix(&gv.group, &gv.version);
    let gvname = camel_gv(&gv.group, &gv.version);
    let tag = tag(&gv.group, &gv.version);
    for (plural, kind, namespaced) in &gv.reviews {
        let Some(schema) = names.get(&gv.group, &gv.version, kind) else {
            continue;
        };
        let (path, scope) = if *namespaced {
            (
                format!("{base}/namespaces/{{namespace}}/{plural}"),
                "Namespaced",
            )
        } else {
            (format!("{base}/{plural}"), "")
        };
        let gvk = Some((gv.group.as_str(), gv.version.as_str(), *kind));
        out.insert(
            path,
            json!({
                "post": op(Op { action: "post", id: format!("create{gvname}{scope}{kind}"),
                    description: format!("create a {kind}"), params: &WRITE_PARAMS,
                    body: Some(body_of(schema)), codes: &["200", "201", "202"],
                    response_types: &JSON_YAML, response: schema, gvk }, &tag),
                "parameters": path_params(*namespaced, false),
            }),
        );
    }
    // The group-version's discovery document, as upstream lists it.
    out.insert(
        format!("{base}/"),
        json!({"get": {"tags": [tag], "description": "get available resources",
            "operationId": format!("get{gvname}APIResources"),
            "responses": {"200": {"description": "OK"}, "401": {"description": "Unauthorized"}}}}),
    );
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids_follow_upstream() {
        assert_eq!(camel_gv("", "v1"), "CoreV1");
        assert_eq!(
            camel_gv("rbac.authorization.k8s.io", "v1"),
            "RbacAuthorizationV1"
        );
        assert_eq!(camel_gv("steward.dev", "v1alpha1"), "StewardDevV1alpha1");
        assert_eq!(
            tag("rbac.authorization.k8s.io", "v1"),
            "rbacAuthorization_v1"
        );
        assert_eq!(tag("", "v1"), "core_v1");
    }
}
