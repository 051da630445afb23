//! What the cost estimate knows of a schema node, as upstream derives it when it turns a
//! structural schema into CEL declarations (`SchemaDeclType` in `k8s.io/apiserver/pkg/cel/common`
//! and the CRD adaptor in apiextensions-apiserver): the CEL type a node has, the largest size
//! its value can have (`maxLength`, `maxItems`, `maxProperties`, or what the 3 MiB request limit
//! allows), and the smallest size one value takes when serialized (which bounds how many fit in
//! a request). A resource's root (and an embedded resource) sees `apiVersion`, `kind` and a
//! `metadata` holding only `name` and `generateName`, capped at 253 characters.

use serde_json::Value;

use crate::cel::value::escape;

/// The largest request the API server accepts, in bytes.
pub const MAX_REQUEST_BYTES: u64 = 3 * 1024 * 1024;
/// The longest string (or list, or map) a request can hold: the request less its `""`.
const MAX_STRING: u64 = MAX_REQUEST_BYTES - 2;
/// `metadata.name` is a DNS subdomain.
const NAME_MAX: u64 = 253;

/// A schema node seen as a CEL declaration.
#[derive(Clone, Copy, Debug)]
pub enum Decl<'a> {
    /// A node of the CRD's schema; `resource` when it is a resource's root.
    Schema { schema: &'a Value, resource: bool },
    /// `apiVersion` and `kind` of a resource's root.
    PlainString,
    /// `metadata` of a resource's root.
    Meta { name: u64, generate_name: u64 },
    /// `metadata.name` or `metadata.generateName`, with its length cap.
    CappedString(u64),
    /// The key of a map.
    MapKey,
}

/// The shape of a declaration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    IntOrString,
    List,
    Map,
    Object,
    String,
    Bytes,
    Duration,
    Date,
    DateTime,
    Bool,
    Number,
    Integer,
    /// Upstream has no declaration for it (no `type`, an array without `items`...).
    None,
}

/// The CEL type of an expression, as far as costs need it.
#[derive(Clone, Debug)]
pub enum Ty<'a> {
    Dyn,
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Null,
    Duration,
    Timestamp,
    Type,
    Optional(Box<Ty<'a>>),
    List(Box<Ty<'a>>),
    Map(Box<Ty<'a>>, Box<Ty<'a>>),
    Object(Decl<'a>),
}

impl Ty<'_> {
    /// Types whose values all have the same size (cel-go's `isScalar`).
    pub fn is_scalar(&self) -> bool {
        match self {
            Ty::Bool | Ty::Int | Ty::Uint | Ty::Double | Ty::Duration | Ty::Timestamp => true,
            Ty::Optional(t) => t.is_scalar(),
            _ => false,
        }
    }

    pub fn is_dyn(&self) -> bool {
        matches!(self, Ty::Dyn)
    }
}

fn int(schema: &Value, key: &str) -> Option<u64> {
    schema
        .get(key)
        .and_then(|v| v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)))
        .map(|v| v.max(0) as u64)
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool) == Some(true)
}

fn type_is(schema: Option<&Value>, t: &str) -> bool {
    schema.and_then(|s| s.get("type")).and_then(Value::as_str) == Some(t)
}

/// Whether a resource root already declares `apiVersion`, `kind` and `metadata.name` and
/// `metadata.generateName` as upstream would (then it is taken as it is).
fn declares_type_and_meta(schema: &Value) -> bool {
    let props = schema.get("properties");
    let prop = |k: &str| props.and_then(|p| p.get(k));
    let meta = prop("metadata").and_then(|m| m.get("properties"));
    type_is(prop("kind"), "string")
        && type_is(prop("apiVersion"), "string")
        && type_is(prop("metadata"), "object")
        && type_is(meta.and_then(|m| m.get("name")), "string")
        && type_is(meta.and_then(|m| m.get("generateName")), "string")
}

impl<'a> Decl<'a> {
    /// The declaration of a node of the CRD's schema; `root` for the resource's root.
    pub fn node(schema: &'a Value, root: bool) -> Self {
        Decl::Schema {
            schema,
            resource: root || flag(schema, "x-kubernetes-embedded-resource"),
        }
    }

    fn shape(&self) -> Shape {
        let schema = match *self {
            Decl::Schema { schema, .. } => schema,
            Decl::Meta { .. } => return Shape::Object,
            Decl::PlainString | Decl::CappedString(_) | Decl::MapKey => return Shape::String,
        };
        if flag(schema, "x-kubernetes-int-or-string") {
            return Shape::IntOrString;
        }
        let format = schema.get("format").and_then(Value::as_str);
        match schema.get("type").and_then(Value::as_str) {
            Some("array") => match schema.get("items").filter(|i| i.is_object()) {
                Some(items) if Decl::node(items, false).exists() => Shape::List,
                _ => Shape::None,
            },
            Some("object") => match schema.get("additionalProperties").filter(|a| a.is_object()) {
                Some(values) if Decl::node(values, false).exists() => Shape::Map,
                Some(_) => Shape::None,
                None => Shape::Object,
            },
            Some("string") => match format {
                Some("byte") => Shape::Bytes,
                Some("duration") => Shape::Duration,
                Some("date") => Shape::Date,
                Some("date-time") => Shape::DateTime,
                _ => Shape::String,
            },
            Some("boolean") => Shape::Bool,
            Some("number") => Shape::Number,
            Some("integer") => Shape::Integer,
            _ => Shape::None,
        }
    }

    /// Whether upstream declares this node at all (an undeclared field is left out).
    fn exists(&self) -> bool {
        self.shape() != Shape::None
    }

    /// The declaration of field `name` (the CEL name, escaped) of an object.
    pub fn field(&self, name: &str) -> Option<Decl<'a>> {
        match *self {
            Decl::Meta {
                name: n,
                generate_name: g,
            } => match name {
                "name" => Some(Decl::CappedString(n)),
                "generateName" => Some(Decl::CappedString(g)),
                _ => None,
            },
            Decl::Schema { schema, resource } => {
                if self.shape() != Shape::Object {
                    return None;
                }
                if resource && !declares_type_and_meta(schema) {
                    match name {
                        "kind" | "apiVersion" => return Some(Decl::PlainString),
                        "metadata" => return Some(self.meta()),
                        _ => {}
                    }
                }
                let props = schema.get("properties").and_then(Value::as_object)?;
                props
                    .iter()
                    .find(|(k, _)| escape(k).as_deref() == Some(name))
                    .map(|(_, sub)| Decl::node(sub, false))
                    .filter(Decl::exists)
            }
            _ => None,
        }
    }

    /// `metadata` of a resource root: `name` and `generateName`, capped.
    fn meta(&self) -> Decl<'a> {
        let declared = |field: &str| match *self {
            Decl::Schema { schema, .. } => schema
                .get("properties")
                .and_then(|p| p.get("metadata"))
                .and_then(|m| m.get("properties"))
                .and_then(|p| p.get(field))
                .and_then(|f| int(f, "maxLength")),
            _ => None,
        };
        let cap = |field: &str, max: u64| declared(field).map_or(max, |d| d.min(max));
        Decl::Meta {
            name: cap("name", NAME_MAX),
            // The generated suffix is at least one character.
            generate_name: cap("generateName", NAME_MAX - 1),
        }
    }

    /// The items of a list or the values of a map.
    pub fn elem(&self) -> Option<Decl<'a>> {
        let Decl::Schema { schema, .. } = *self else {
            return None;
        };
        let sub = match self.shape() {
            Shape::List => schema.get("items"),
            Shape::Map => schema.get("additionalProperties"),
            _ => None,
        }?;
        Some(Decl::node(sub, false))
    }

    /// Whether this is a map (it has keys).
    pub fn is_map(&self) -> bool {
        self.shape() == Shape::Map
    }

    fn schema_int(&self, key: &str) -> Option<u64> {
        match *self {
            Decl::Schema { schema, .. } => int(schema, key),
            _ => None,
        }
    }

    /// The largest size of a value: characters of a string, bytes of `bytes`, items of a list,
    /// entries of a map; 0 for objects and scalars.
    pub fn max_elements(&self) -> u64 {
        match *self {
            Decl::CappedString(max) => return max * 4,
            Decl::MapKey => return 0,
            _ => {}
        }
        match self.shape() {
            Shape::IntOrString => self.schema_int("maxLength").map_or(MAX_STRING, |m| m * 4),
            Shape::List => self.schema_int("maxItems").unwrap_or_else(|| {
                let min = self.elem().map_or(1, |e| e.min_size());
                MAX_STRING / (min + 1)
            }),
            Shape::Map => self.schema_int("maxProperties").unwrap_or_else(|| {
                let min = self.elem().map_or(1, |e| e.min_size());
                MAX_STRING / (min + 6)
            }),
            Shape::Bytes => self.schema_int("maxLength").unwrap_or(MAX_STRING),
            Shape::Duration | Shape::DateTime => 32,
            Shape::Date => 12,
            Shape::String => {
                if let Some(max) = self.schema_int("maxLength") {
                    return max * 4;
                }
                let longest_enum = match *self {
                    Decl::Schema { schema, .. } => schema
                        .get("enum")
                        .and_then(Value::as_array)
                        .filter(|e| !e.is_empty())
                        .map(|e| {
                            e.iter()
                                .filter_map(Value::as_str)
                                .map(|s| s.len() as u64)
                                .max()
                                .unwrap_or(0)
                        }),
                    _ => None,
                };
                longest_enum.unwrap_or(MAX_STRING)
            }
            Shape::Object | Shape::Bool | Shape::Number | Shape::Integer | Shape::None => 0,
        }
    }

    /// The fewest bytes a value of this node takes in JSON.
    pub fn min_size(&self) -> u64 {
        match self.shape() {
            Shape::IntOrString | Shape::Number | Shape::Integer | Shape::None => 1,
            Shape::List | Shape::Map | Shape::String | Shape::Bytes => 2,
            Shape::Duration => 3,
            Shape::Date => 12,
            Shape::DateTime => 21,
            Shape::Bool => 4,
            Shape::Object => self.object_min_size(),
        }
    }

    /// `{}` plus `"name":value,` for every required property without a default.
    fn object_min_size(&self) -> u64 {
        let Decl::Schema { schema, .. } = *self else {
            return 2;
        };
        let required = crate::meta::strings(schema.get("required"));
        let mut size = 2;
        for name in &required {
            let Some(prop) = schema.get("properties").and_then(|p| p.get(name)) else {
                continue;
            };
            let decl = match *self {
                Decl::Schema { resource: true, .. }
                    if !declares_type_and_meta(schema)
                        && matches!(name.as_str(), "kind" | "apiVersion" | "metadata") =>
                {
                    if name == "metadata" {
                        self.meta()
                    } else {
                        Decl::PlainString
                    }
                }
                _ => Decl::node(prop, false),
            };
            if decl.exists() && prop.get("default").is_none() {
                size += name.len() as u64 + decl.min_size() + 4;
            }
        }
        size
    }

    /// The CEL type of values of this node.
    pub fn ty(&self) -> Ty<'a> {
        match self.shape() {
            Shape::IntOrString | Shape::None => Ty::Dyn,
            Shape::List => Ty::List(Box::new(self.elem().map_or(Ty::Dyn, |e| e.ty()))),
            Shape::Map => Ty::Map(
                Box::new(Ty::String),
                Box::new(self.elem().map_or(Ty::Dyn, |e| e.ty())),
            ),
            Shape::Object => Ty::Object(*self),
            Shape::String => Ty::String,
            Shape::Bytes => Ty::Bytes,
            Shape::Duration => Ty::Duration,
            Shape::Date | Shape::DateTime => Ty::Timestamp,
            Shape::Bool => Ty::Bool,
            Shape::Number => Ty::Double,
            Shape::Integer => Ty::Int,
        }
    }

    /// The largest size of the value at `path` below this node (the steps after the variable:
    /// field names, `@items`, `@values`, `@keys`), as upstream's size estimator finds it.
    pub fn size_at(&self, path: &[String]) -> Option<u64> {
        let mut node = *self;
        for step in path {
            node = match step.as_str() {
                "@items" | "@values" => node.elem()?,
                "@keys" => node.is_map().then_some(Decl::MapKey)?,
                name => node.field(name)?,
            };
        }
        Some(node.max_elements())
    }
}

/// How many values of a node's children one value of the node can hold: 1 for an object,
/// `maxItems`/`maxProperties` for a list/map, `None` when unbounded (upstream's
/// `extractMaxElements`, on the raw schema).
pub fn fan_out(schema: &Value) -> Option<u64> {
    match schema.get("type").and_then(Value::as_str) {
        Some("object") if schema.get("additionalProperties").is_some() => {
            int(schema, "maxProperties")
        }
        Some("array") => int(schema, "maxItems"),
        _ => Some(1),
    }
}
