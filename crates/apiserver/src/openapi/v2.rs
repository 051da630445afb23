//! The OpenAPI v2 (Swagger 2.0) document, derived from the v3 documents of every group-version
//! the way upstream's two generators differ: `#/definitions/` references (with their siblings
//! next to `$ref`), no `nullable`, parameters typed inline, request bodies as a `body`
//! parameter, `consumes`/`produces` lists.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::GroupVersion;

fn convert_schema(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(r)) = o.get_mut("$ref") {
                *r = r.replace(super::SCHEMAS, "#/definitions/");
            }
            // {"allOf": [{"$ref": x}], siblings...} -> {"$ref": x, siblings...}
            let single_ref = match o.get("allOf") {
                Some(Value::Array(a)) if a.len() == 1 => a[0].get("$ref").cloned(),
                _ => None,
            };
            if let Some(Value::String(r)) = single_ref {
                o.remove("allOf");
                o.insert(
                    "$ref".into(),
                    json!(r.replace(super::SCHEMAS, "#/definitions/")),
                );
            }
            o.remove("nullable");
            for child in o.values_mut() {
                convert_schema(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(convert_schema),
        _ => {}
    }
}

fn convert_operation(op: &Value) -> Value {
    let mut out = Map::new();
    let mut params: Vec<Value> = op
        .get("parameters")
        .and_then(Value::as_array)
        .map(|ps| ps.iter().map(convert_parameter).collect())
        .unwrap_or_default();
    if let Some(body) = op.get("requestBody") {
        let content = body.get("content").and_then(Value::as_object);
        let schema = content
            .and_then(|c| c.values().next())
            .and_then(|c| c.get("schema"))
            .cloned()
            .unwrap_or(json!({}));
        let consumes: Vec<&String> = content.map(|c| c.keys().collect()).unwrap_or_default();
        if consumes.iter().any(|c| c.as_str() != "*/*") {
            out.insert("consumes".into(), json!(consumes));
        } else {
            out.insert("consumes".into(), json!(["*/*"]));
        }
        let mut p = json!({"name": "body", "in": "body", "schema": schema});
        if body.get("required").and_then(Value::as_bool) == Some(true) {
            p["required"] = json!(true);
        }
        params.insert(0, p);
    }
    let mut produces: Vec<String> = Vec::new();
    let mut responses = Map::new();
    if let Some(rs) = op.get("responses").and_then(Value::as_object) {
        for (code, r) in rs {
            let mut nr = json!({"description": r.get("description").cloned().unwrap_or(json!(""))});
            if let Some(content) = r.get("content").and_then(Value::as_object) {
                for t in content.keys() {
                    if !produces.contains(t) {
                        produces.push(t.clone());
                    }
                }
                if let Some(schema) = content.values().next().and_then(|c| c.get("schema")) {
                    nr["schema"] = schema.clone();
                }
            }
            responses.insert(code.clone(), nr);
        }
    }
    if !produces.is_empty() {
        out.insert("produces".into(), json!(produces));
    }
    out.insert("schemes".into(), json!(["https"]));
    out.insert("responses".into(), Value::Object(responses));
    if !params.is_empty() {
        out.insert("parameters".into(), Value::Array(params));
    }
    if let Some(o) = op.as_object() {
        for (k, v) in o {
            if !matches!(k.as_str(), "parameters" | "requestBody" | "responses") {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    let mut v = Value::Object(out);
    convert_schema(&mut v);
    v
}

fn convert_parameter(p: &Value) -> Value {
    let mut out = p.clone();
    if let Some(o) = out.as_object_mut()
        && let Some(Value::Object(schema)) = o.remove("schema")
    {
        o.extend(schema);
    }
    out
}

/// The v2 document of every group-version.
pub fn document(gvs: &BTreeMap<String, GroupVersion>) -> Value {
    let mut paths = Map::new();
    let mut definitions = Map::new();
    for gv in gvs.values() {
        let doc = super::v3_document(gv);
        if let Some(ps) = doc.get("paths").and_then(Value::as_object) {
            for (path, item) in ps {
                let mut converted = Map::new();
                if let Some(item) = item.as_object() {
                    for (k, v) in item {
                        if k == "parameters" {
                            let params = v
                                .as_array()
                                .map(|a| a.iter().map(convert_parameter).collect::<Vec<_>>())
                                .unwrap_or_default();
                            converted.insert(k.clone(), Value::Array(params));
                        } else {
                            converted.insert(k.clone(), convert_operation(v));
                        }
                    }
                }
                paths.insert(path.clone(), Value::Object(converted));
            }
        }
        if let Some(schemas) = doc
            .pointer("/components/schemas")
            .and_then(Value::as_object)
        {
            for (name, schema) in schemas {
                let mut s = schema.clone();
                convert_schema(&mut s);
                definitions.insert(name.clone(), s);
            }
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": crate::handlers::discovery::GIT_VERSION},
        "paths": paths,
        "definitions": definitions,
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication", "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    })
}
