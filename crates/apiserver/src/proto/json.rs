//! Message ⇄ JSON for Kubernetes types, driven by the protobuf descriptors. Field names are the
//! JSON names already (Kubernetes' `generated.proto` names each field after its JSON tag); the
//! types whose JSON is not an object are translated by their message name:
//! * `meta.v1.Time` / `MicroTime` ⇄ RFC 3339 (seconds / microseconds), a zero time is absent;
//! * `meta.v1.Duration` ⇄ Go's duration string (`1h2m3s`);
//! * `util.intstr.IntOrString` ⇄ a number or a string;
//! * `api.resource.Quantity` ⇄ its string;
//! * `meta.v1.FieldsV1` and `runtime.RawExtension` ⇄ the JSON they carry (a `RawExtension`
//!   holding an enveloped protobuf object is decoded);
//! * a message whose only field is a repeated `items` (Go's named slices: `ExtraValue`, …) ⇄ an
//!   array;
//! * Go's embedded structs (`Volume.volumeSource`, `Probe.handler`, the `LocalObjectReference`
//!   of key selectors, …), which protobuf nests and JSON inlines, are merged into their parent;
//! * CRD schemas: `JSONSchemaProps` spells `$ref`, `$schema` and `x-kubernetes-*` in JSON, and
//!   its `JSON`, `…OrBool`, `…OrArray`, `…OrStringArray` are a value, a bool or schema, a
//!   schema or list.
//!
//! Go writes a non-pointer field even when it holds its zero value; an empty string read from
//! the wire is therefore left out (Go's JSON would omit it too), while numbers and booleans,
//! which may be pointers where zero is meaningful (`replicas: 0`), are kept.

use base64::Engine;
use protobuf::MessageDyn;
use std::collections::HashMap;

use protobuf::reflect::{
    FieldDescriptor, MessageDescriptor, ReflectValueBox, ReflectValueRef, RuntimeFieldType,
    RuntimeType,
};
use serde_json::{Map, Value};

/// A body that is not a valid message of its kind, or an object that does not fit its message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Error(String, bool);

impl Error {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into(), false)
    }

    /// A kind without a protobuf form (a custom resource): the body is `415`, not `400`.
    pub fn no_form(message: impl Into<String>) -> Self {
        Self(message.into(), true)
    }

    pub fn wire(e: protobuf::Error) -> Self {
        Self(format!("protobuf: {e}"), false)
    }

    /// Whether the kind has no protobuf form (see [`Error::no_form`]).
    pub fn is_no_form(&self) -> bool {
        self.1
    }
}

const TIME: &str = "apimachinery.pkg.apis.meta.v1.Time";
const MICRO_TIME: &str = "apimachinery.pkg.apis.meta.v1.MicroTime";
const DURATION: &str = "apimachinery.pkg.apis.meta.v1.Duration";
const FIELDS_V1: &str = "apimachinery.pkg.apis.meta.v1.FieldsV1";
const RAW_EXTENSION: &str = "apimachinery.pkg.runtime.RawExtension";
const INT_OR_STRING: &str = "apimachinery.pkg.util.intstr.IntOrString";
const QUANTITY: &str = "apimachinery.pkg.api.resource.Quantity";
const SCHEMA: &str = "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps";
const SCHEMA_JSON: &str = "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSON";
const SCHEMA_OR_BOOL: &str =
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool";
const SCHEMA_OR_ARRAY: &str =
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray";
const SCHEMA_OR_STRINGS: &str =
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray";

/// Go embedded structs: nested in protobuf, inlined in JSON (`message.field`).
const INLINE: &[&str] = &[
    "api.core.v1.ConfigMapEnvSource.localObjectReference",
    "api.core.v1.ConfigMapKeySelector.localObjectReference",
    "api.core.v1.ConfigMapProjection.localObjectReference",
    "api.core.v1.ConfigMapVolumeSource.localObjectReference",
    "api.core.v1.SecretEnvSource.localObjectReference",
    "api.core.v1.SecretKeySelector.localObjectReference",
    "api.core.v1.SecretProjection.localObjectReference",
    "api.core.v1.EphemeralContainer.ephemeralContainerCommon",
    "api.core.v1.PersistentVolumeSpec.persistentVolumeSource",
    "api.core.v1.Volume.volumeSource",
    "api.core.v1.Probe.handler",
    "api.networking.v1.IngressRule.ingressRuleValue",
];

fn is_inline(desc: &MessageDescriptor, field: &str) -> bool {
    INLINE.iter().any(|f| {
        f.strip_prefix(desc.full_name())
            .and_then(|r| r.strip_prefix('.'))
            == Some(field)
    })
}

/// A field's JSON key: its name, except in CRD schemas.
fn json_key(desc: &MessageDescriptor, field: &str) -> String {
    if desc.full_name() != SCHEMA {
        return field.to_string();
    }
    match field {
        "ref" => "$ref".into(),
        "schema" => "$schema".into(),
        f => match f.strip_prefix("xKubernetes") {
            Some(rest) => {
                let mut out = String::from("x-kubernetes");
                for c in rest.chars() {
                    if c.is_ascii_uppercase() {
                        out.push('-');
                        out.push(c.to_ascii_lowercase());
                    } else {
                        out.push(c);
                    }
                }
                out
            }
            None => f.to_string(),
        },
    }
}

/// A Go named slice: one repeated field called `items`.
fn is_slice(desc: &MessageDescriptor) -> bool {
    let mut fields = desc.fields();
    matches!((fields.next(), fields.next()), (Some(f), None) if f.name() == "items" && f.is_repeated())
}

/// The JSON of a message; `None` for a value Go's JSON leaves out (a zero time).
pub fn to_json(msg: &dyn MessageDyn) -> Result<Value, Error> {
    Ok(message_json(msg)?.unwrap_or(Value::Null))
}

fn message_json(msg: &dyn MessageDyn) -> Result<Option<Value>, Error> {
    let desc = msg.descriptor_dyn();
    let field = |name: &str| desc.field_by_name(name).and_then(|f| f.get_singular(msg));
    let value = match desc.full_name() {
        TIME | MICRO_TIME => {
            let seconds = field("seconds").and_then(|v| v.to_i64()).unwrap_or(0);
            let nanos = field("nanos").and_then(|v| v.to_i32()).unwrap_or(0);
            if seconds == 0 && nanos == 0 {
                return Ok(None);
            }
            let ts = jiff::Timestamp::new(seconds, nanos)
                .map_err(|e| Error::new(format!("invalid time: {e}")))?;
            let format = if desc.full_name() == TIME {
                "%Y-%m-%dT%H:%M:%SZ"
            } else {
                "%Y-%m-%dT%H:%M:%S%.6fZ"
            };
            Value::String(ts.strftime(format).to_string())
        }
        DURATION => Value::String(go_duration(
            field("duration").and_then(|v| v.to_i64()).unwrap_or(0),
        )),
        INT_OR_STRING => {
            if field("type").and_then(|v| v.to_i64()).unwrap_or(0) == 1 {
                Value::String(
                    field("strVal")
                        .and_then(|v| v.to_str().map(String::from))
                        .unwrap_or_default(),
                )
            } else {
                Value::from(field("intVal").and_then(|v| v.to_i32()).unwrap_or(0))
            }
        }
        QUANTITY => match field("string").and_then(|v| v.to_str().map(String::from)) {
            Some(s) if !s.is_empty() => Value::String(s),
            _ => return Ok(None),
        },
        SCHEMA_OR_BOOL => match field("schema") {
            Some(ReflectValueRef::Message(m)) => return message_json(&*m),
            _ => Value::Bool(field("allows").and_then(|v| v.to_bool()).unwrap_or(false)),
        },
        SCHEMA_OR_ARRAY | SCHEMA_OR_STRINGS => match field("schema") {
            Some(ReflectValueRef::Message(m)) => return message_json(&*m),
            _ => {
                let mut items = Vec::new();
                if let Some(f) = desc.fields().nth(1) {
                    for v in f.get_repeated(msg) {
                        items.push(value_json(v)?.unwrap_or(Value::Null));
                    }
                }
                Value::Array(items)
            }
        },
        FIELDS_V1 | RAW_EXTENSION | SCHEMA_JSON => {
            let name = if desc.full_name() == FIELDS_V1 {
                "Raw"
            } else {
                "raw"
            };
            let Some(raw) = field(name).and_then(|v| v.to_bytes().map(<[u8]>::to_vec)) else {
                return Ok(None);
            };
            embedded(&raw)?
        }
        _ if is_slice(&desc) => {
            let mut items = Vec::new();
            if let Some(f) = desc.fields().next() {
                for v in f.get_repeated(msg) {
                    items.push(value_json(v)?.unwrap_or(Value::Null));
                }
            }
            Value::Array(items)
        }
        _ => {
            let mut obj = Map::new();
            for f in desc.fields() {
                let v = match f.runtime_field_type() {
                    RuntimeFieldType::Singular(_) => match f.get_singular(msg) {
                        Some(ReflectValueRef::String("")) | None => None,
                        Some(v) => value_json(v)?,
                    },
                    RuntimeFieldType::Repeated(_) => {
                        let list = f.get_repeated(msg);
                        if list.is_empty() {
                            None
                        } else {
                            let mut items = Vec::with_capacity(list.len());
                            for v in list {
                                items.push(value_json(v)?.unwrap_or(Value::Null));
                            }
                            Some(Value::Array(items))
                        }
                    }
                    RuntimeFieldType::Map(_, _) => {
                        let map = f.get_map(msg);
                        if map.is_empty() {
                            None
                        } else {
                            let mut out = Map::new();
                            for (k, v) in &map {
                                let key = match k {
                                    ReflectValueRef::String(s) => s.to_string(),
                                    other => other.to_string(),
                                };
                                out.insert(key, value_json(v)?.unwrap_or(Value::Null));
                            }
                            Some(Value::Object(out))
                        }
                    }
                };
                match v {
                    Some(Value::Object(inner)) if is_inline(&desc, f.name()) => obj.extend(inner),
                    Some(v) => {
                        obj.insert(json_key(&desc, f.name()), v);
                    }
                    None => {}
                }
            }
            Value::Object(obj)
        }
    };
    Ok(Some(value))
}

fn value_json(v: ReflectValueRef) -> Result<Option<Value>, Error> {
    Ok(Some(match v {
        ReflectValueRef::U32(n) => Value::from(n),
        ReflectValueRef::U64(n) => Value::from(n),
        ReflectValueRef::I32(n) => Value::from(n),
        ReflectValueRef::I64(n) => Value::from(n),
        ReflectValueRef::F32(n) => Value::from(f64::from(n)),
        ReflectValueRef::F64(n) => Value::from(n),
        ReflectValueRef::Bool(b) => Value::Bool(b),
        ReflectValueRef::String(s) => Value::String(s.to_string()),
        ReflectValueRef::Bytes(b) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        ReflectValueRef::Enum(d, n) => match d.value_by_number(n) {
            Some(e) => Value::String(e.name().to_string()),
            None => Value::from(n),
        },
        ReflectValueRef::Message(m) => return message_json(&*m),
    }))
}

/// The JSON an embedded object carries: JSON itself, or an enveloped protobuf object.
fn embedded(raw: &[u8]) -> Result<Value, Error> {
    if raw.starts_with(&super::MAGIC) {
        return super::decode(raw);
    }
    serde_json::from_slice(raw).map_err(|e| Error::new(format!("invalid embedded object: {e}")))
}

/// Go's `time.Duration.String()` for whole and fractional seconds (`1h2m3.5s`, `0s`, `250ms`).
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n < 1_000_000_000 {
        let (unit, div) = if n < 1_000 {
            ("ns", 1)
        } else if n < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{sign}{}{unit}", trim_fraction(n, div));
    }
    let (h, rest) = (n / 3_600_000_000_000, n % 3_600_000_000_000);
    let (m, rest) = (rest / 60_000_000_000, rest % 60_000_000_000);
    let secs = trim_fraction(rest, 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{sign}{secs}s"),
        (0, m) => format!("{sign}{m}m{secs}s"),
        (h, m) => format!("{sign}{h}h{m}m{secs}s"),
    }
}

fn trim_fraction(n: u64, div: u64) -> String {
    let (whole, frac) = (n / div, n % div);
    if frac == 0 {
        return whole.to_string();
    }
    let width = div.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

fn parse_go_duration(s: &str) -> Result<i64, Error> {
    let bad = || Error::new(format!("invalid duration {s:?}"));
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let number: f64 = rest[..end].parse().map_err(|_| bad())?;
        rest = &rest[end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        total += number * scale;
        rest = &rest[unit_end..];
    }
    let n = total.round() as i64;
    Ok(if neg { -n } else { n })
}

/// The message of `desc` holding a JSON value. Fields the message lacks (`apiVersion` and
/// `kind` at the top, which travel in the envelope) are left out.
pub fn from_json(desc: &MessageDescriptor, v: &Value) -> Result<Box<dyn MessageDyn>, Error> {
    let mut msg = desc.new_instance();
    let set = |msg: &mut dyn MessageDyn, name: &str, value: ReflectValueBox| {
        if let Some(f) = desc.field_by_name(name) {
            f.set_singular_field(msg, value);
        }
    };
    match desc.full_name() {
        TIME | MICRO_TIME => {
            if let Some(s) = v.as_str() {
                let ts: jiff::Timestamp = s
                    .parse()
                    .map_err(|e| Error::new(format!("invalid time {s:?}: {e}")))?;
                set(&mut *msg, "seconds", ReflectValueBox::I64(ts.as_second()));
                set(
                    &mut *msg,
                    "nanos",
                    ReflectValueBox::I32(ts.subsec_nanosecond()),
                );
            }
        }
        DURATION => {
            let nanos = match v {
                Value::String(s) => parse_go_duration(s)?,
                other => other.as_i64().unwrap_or(0),
            };
            set(&mut *msg, "duration", ReflectValueBox::I64(nanos));
        }
        // Go's generated marshaller writes all three fields, zero values included
        // (`type: 0, intVal: 8080, strVal: ""`), and clients see them.
        INT_OR_STRING => {
            let (kind, int, string) = match v {
                Value::String(s) => (1, 0, s.clone()),
                other => {
                    let n = other
                        .as_i64()
                        .and_then(|n| i32::try_from(n).ok())
                        .ok_or_else(|| Error::new(format!("invalid int-or-string {other}")))?;
                    (0, n, String::new())
                }
            };
            set(&mut *msg, "type", ReflectValueBox::I64(kind));
            set(&mut *msg, "intVal", ReflectValueBox::I32(int));
            set(&mut *msg, "strVal", ReflectValueBox::String(string));
        }
        QUANTITY => {
            let s = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            set(&mut *msg, "string", ReflectValueBox::String(s));
        }
        FIELDS_V1 => set(
            &mut *msg,
            "Raw",
            ReflectValueBox::Bytes(v.to_string().into_bytes()),
        ),
        RAW_EXTENSION | SCHEMA_JSON => {
            set(
                &mut *msg,
                "raw",
                ReflectValueBox::Bytes(v.to_string().into_bytes()),
            );
        }
        SCHEMA_OR_BOOL | SCHEMA_OR_ARRAY | SCHEMA_OR_STRINGS => match v {
            Value::Bool(b) => set(&mut *msg, "allows", ReflectValueBox::Bool(*b)),
            Value::Array(items) => {
                if let Some(f) = desc.fields().nth(1) {
                    let RuntimeFieldType::Repeated(elem) = f.runtime_field_type() else {
                        return Err(Error::new("schema list without a repeated field"));
                    };
                    let mut list = f.mut_repeated(&mut *msg);
                    for item in items {
                        list.push(value_box(&elem, item)?);
                    }
                }
            }
            schema => {
                let props = MessageDescriptor::clone(
                    &desc
                        .field_by_name("schema")
                        .and_then(|f| match f.runtime_field_type() {
                            RuntimeFieldType::Singular(RuntimeType::Message(d)) => Some(d),
                            _ => None,
                        })
                        .ok_or_else(|| Error::new("schema field without a message type"))?,
                );
                set(
                    &mut *msg,
                    "schema",
                    ReflectValueBox::Message(from_json(&props, schema)?),
                );
                if desc.full_name() == SCHEMA_OR_BOOL {
                    set(&mut *msg, "allows", ReflectValueBox::Bool(true));
                }
            }
        },
        _ if is_slice(desc) => {
            if let (Some(f), Some(items)) = (desc.fields().next(), v.as_array()) {
                let elem = match f.runtime_field_type() {
                    RuntimeFieldType::Repeated(t) => t,
                    _ => return Err(Error::new("slice without a repeated field")),
                };
                let mut list = f.mut_repeated(&mut *msg);
                for item in items {
                    list.push(value_box(&elem, item)?);
                }
            }
        }
        _ => {
            let Some(obj) = v.as_object() else {
                return Err(Error::new(format!(
                    "expected an object for {}, got {v}",
                    desc.name()
                )));
            };
            let keys: HashMap<String, FieldDescriptor> = desc
                .fields()
                .map(|f| (json_key(desc, f.name()), f))
                .collect();
            for f in desc.fields().filter(|f| is_inline(desc, f.name())) {
                if let RuntimeFieldType::Singular(RuntimeType::Message(d)) = f.runtime_field_type()
                {
                    let inner = from_json(&d, v)?;
                    if d.fields().any(|g| g.has_field(&*inner)) {
                        f.set_singular_field(&mut *msg, ReflectValueBox::Message(inner));
                    }
                }
            }
            for (key, value) in obj {
                if value.is_null() {
                    continue;
                }
                let Some(f) = keys.get(key) else {
                    continue;
                };
                match f.runtime_field_type() {
                    RuntimeFieldType::Singular(t) => {
                        f.set_singular_field(&mut *msg, value_box(&t, value)?);
                    }
                    RuntimeFieldType::Repeated(t) => {
                        let items = value.as_array().ok_or_else(|| {
                            Error::new(format!("expected a list for {}.{key}", desc.name()))
                        })?;
                        let mut list = f.mut_repeated(&mut *msg);
                        for item in items {
                            list.push(value_box(&t, item)?);
                        }
                    }
                    RuntimeFieldType::Map(kt, vt) => {
                        let entries = value.as_object().ok_or_else(|| {
                            Error::new(format!("expected a map for {}.{key}", desc.name()))
                        })?;
                        let mut map = f.mut_map(&mut *msg);
                        for (k, item) in entries {
                            map.insert(
                                value_box(&kt, &Value::String(k.clone()))?,
                                value_box(&vt, item)?,
                            );
                        }
                    }
                }
            }
        }
    }
    Ok(msg)
}

fn value_box(t: &RuntimeType, v: &Value) -> Result<ReflectValueBox, Error> {
    let mismatch = || Error::new(format!("value {v} does not fit a {t}"));
    let int = || -> Result<i64, Error> {
        match v {
            Value::Number(n) => n
                .as_i64()
                .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
                .ok_or_else(mismatch),
            Value::String(s) => s.parse().map_err(|_| mismatch()),
            Value::Bool(b) => Ok(i64::from(*b)),
            _ => Err(mismatch()),
        }
    };
    Ok(match t {
        RuntimeType::I32 => ReflectValueBox::I32(i32::try_from(int()?).map_err(|_| mismatch())?),
        RuntimeType::I64 => ReflectValueBox::I64(int()?),
        RuntimeType::U32 => ReflectValueBox::U32(u32::try_from(int()?).map_err(|_| mismatch())?),
        RuntimeType::U64 => ReflectValueBox::U64(u64::try_from(int()?).map_err(|_| mismatch())?),
        RuntimeType::F32 => ReflectValueBox::F32(v.as_f64().ok_or_else(mismatch)? as f32),
        RuntimeType::F64 => ReflectValueBox::F64(v.as_f64().ok_or_else(mismatch)?),
        RuntimeType::Bool => ReflectValueBox::Bool(v.as_bool().ok_or_else(mismatch)?),
        RuntimeType::String => ReflectValueBox::String(match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }),
        RuntimeType::VecU8 => ReflectValueBox::Bytes(
            base64::engine::general_purpose::STANDARD
                .decode(v.as_str().ok_or_else(mismatch)?)
                .map_err(|_| mismatch())?,
        ),
        RuntimeType::Enum(d) => {
            let n = match v {
                Value::String(s) => d.value_by_name(s).map(|e| e.value()).ok_or_else(mismatch)?,
                _ => i32::try_from(int()?).map_err(|_| mismatch())?,
            };
            ReflectValueBox::Enum(d.clone(), n)
        }
        RuntimeType::Message(d) => ReflectValueBox::Message(from_json(d, v)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_and_print_as_go_does() {
        for (nanos, text) in [
            (0, "0s"),
            (1_500_000_000, "1.5s"),
            (3_723_000_000_000, "1h2m3s"),
            (60_000_000_000, "1m0s"),
            (250_000_000, "250ms"),
            (-2_000_000_000, "-2s"),
        ] {
            assert_eq!(go_duration(nanos), text);
            assert_eq!(parse_go_duration(text).expect("parses"), nanos, "{text}");
        }
        assert!(parse_go_duration("5 parsecs").is_err());
    }
}
