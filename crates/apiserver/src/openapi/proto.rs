//! The v2 document as protobuf (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`),
//! the only format kubectl and client-go request `/openapi/v2` in (client-side validation,
//! `kubectl explain --output=plaintext-openapiv2`). Messages are the subset of gnostic's
//! `openapi_v2.Document` (`openapiv2/OpenAPIv2.proto`, field numbers as there) that carries
//! `swagger`, `info` and `definitions`; kube-openapi's `proto.NewOpenAPIData` reads only
//! those. Paths are left out (see docs/local-control-plane.md). Encoded with `prost`.

use prost::Message;
use serde_json::Value;

#[derive(Clone, PartialEq, Message)]
pub struct Document {
    #[prost(string, tag = "1")]
    pub swagger: String,
    #[prost(message, optional, tag = "2")]
    pub info: Option<Info>,
    #[prost(message, optional, tag = "8")]
    pub paths: Option<Paths>,
    #[prost(message, optional, tag = "9")]
    pub definitions: Option<Definitions>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Info {
    #[prost(string, tag = "1")]
    pub title: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Paths {}

#[derive(Clone, PartialEq, Message)]
pub struct Definitions {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedSchema {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Any {
    #[prost(string, tag = "2")]
    pub yaml: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedAny {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Any>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TypeItem {
    #[prost(string, repeated, tag = "1")]
    pub value: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ItemsItem {
    #[prost(message, repeated, tag = "1")]
    pub schema: Vec<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Properties {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct AdditionalPropertiesItem {
    #[prost(oneof = "additional_properties_item::Oneof", tags = "1, 2")]
    pub oneof: Option<additional_properties_item::Oneof>,
}

pub mod additional_properties_item {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, tag = "1")]
        Schema(Box<super::Schema>),
        #[prost(bool, tag = "2")]
        Boolean(bool),
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct Schema {
    #[prost(string, tag = "1")]
    pub xref: String,
    #[prost(string, tag = "2")]
    pub format: String,
    #[prost(string, tag = "4")]
    pub description: String,
    #[prost(string, repeated, tag = "19")]
    pub required: Vec<String>,
    #[prost(message, repeated, tag = "20")]
    pub r#enum: Vec<Any>,
    #[prost(message, optional, boxed, tag = "21")]
    pub additional_properties: Option<Box<AdditionalPropertiesItem>>,
    #[prost(message, optional, tag = "22")]
    pub r#type: Option<TypeItem>,
    #[prost(message, optional, tag = "23")]
    pub items: Option<ItemsItem>,
    #[prost(message, repeated, tag = "24")]
    pub all_of: Vec<Schema>,
    #[prost(message, optional, tag = "25")]
    pub properties: Option<Properties>,
    #[prost(message, repeated, tag = "31")]
    pub vendor_extension: Vec<NamedAny>,
}

fn string(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// JSON is YAML: extension values and enum members are carried as their JSON text.
fn any(v: &Value) -> Any {
    Any {
        yaml: v.to_string(),
    }
}

fn named(map: Option<&serde_json::Map<String, Value>>) -> Vec<NamedSchema> {
    map.map(|m| {
        m.iter()
            .map(|(name, s)| NamedSchema {
                name: name.clone(),
                value: Some(schema(s)),
            })
            .collect()
    })
    .unwrap_or_default()
}

/// One v2 JSON schema as a gnostic `Schema`.
pub fn schema(v: &Value) -> Schema {
    let types = match v.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(|t| t.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    };
    let additional_properties = match v.get("additionalProperties") {
        Some(Value::Bool(b)) => Some(additional_properties_item::Oneof::Boolean(*b)),
        Some(s @ Value::Object(_)) => Some(additional_properties_item::Oneof::Schema(Box::new(
            schema(s),
        ))),
        _ => None,
    };
    Schema {
        xref: string(v, "$ref"),
        format: string(v, "format"),
        description: string(v, "description"),
        required: v
            .get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default(),
        r#enum: v
            .get("enum")
            .and_then(Value::as_array)
            .map(|e| e.iter().map(any).collect())
            .unwrap_or_default(),
        additional_properties: additional_properties
            .map(|oneof| Box::new(AdditionalPropertiesItem { oneof: Some(oneof) })),
        r#type: (!types.is_empty()).then_some(TypeItem { value: types }),
        items: v.get("items").filter(|i| i.is_object()).map(|i| ItemsItem {
            schema: vec![schema(i)],
        }),
        all_of: v
            .get("allOf")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(schema).collect())
            .unwrap_or_default(),
        properties: v
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| Properties {
                additional_properties: named(Some(p)),
            }),
        vendor_extension: v
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(k, _)| k.starts_with("x-"))
                    .map(|(k, e)| NamedAny {
                        name: k.clone(),
                        value: Some(any(e)),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// The protobuf encoding of a v2 JSON document.
pub fn encode(doc: &Value) -> Vec<u8> {
    let info = doc.get("info").cloned().unwrap_or(Value::Null);
    Document {
        swagger: string(doc, "swagger"),
        info: Some(Info {
            title: string(&info, "title"),
            version: string(&info, "version"),
        }),
        paths: Some(Paths {}),
        definitions: Some(Definitions {
            additional_properties: named(doc.get("definitions").and_then(Value::as_object)),
        }),
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_definitions() {
        let doc = json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1"},
            "definitions": {"A": {"type": "object", "required": ["b"],
                "properties": {"b": {"$ref": "#/definitions/B", "description": "d"},
                    "m": {"type": "object", "additionalProperties": {"type": "string"}},
                    "l": {"type": "array", "items": {"type": "integer", "format": "int32"}}},
                "x-kubernetes-group-version-kind": [{"group": "", "kind": "A", "version": "v1"}]},
                "B": {"type": "string", "enum": ["x"]}}});
        let decoded = Document::decode(encode(&doc).as_slice()).unwrap();
        assert_eq!(decoded.swagger, "2.0");
        let defs = decoded.definitions.unwrap().additional_properties;
        let a = defs
            .iter()
            .find(|d| d.name == "A")
            .unwrap()
            .value
            .clone()
            .unwrap();
        assert_eq!(a.r#type.unwrap().value, ["object"]);
        assert_eq!(a.required, ["b"]);
        let props = a.properties.unwrap().additional_properties;
        let b = props
            .iter()
            .find(|p| p.name == "b")
            .unwrap()
            .value
            .clone()
            .unwrap();
        assert_eq!(b.xref, "#/definitions/B");
        let l = props
            .iter()
            .find(|p| p.name == "l")
            .unwrap()
            .value
            .clone()
            .unwrap();
        assert_eq!(l.items.unwrap().schema[0].format, "int32");
        assert_eq!(
            a.vendor_extension[0].name,
            "x-kubernetes-group-version-kind"
        );
        assert_eq!(
            serde_json::from_str::<Value>(&a.vendor_extension[0].value.clone().unwrap().yaml)
                .unwrap(),
            json!([{"group": "", "kind": "A", "version": "v1"}])
        );
    }
}
