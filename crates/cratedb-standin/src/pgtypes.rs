//! CrateDB's types on the PostgreSQL wire protocol: the type OID each result column is
//! described with, and its values in the text and binary formats.
//!
//! Follows "PostgreSQL wire protocol → Data types"
//! (<https://cratedb.com/docs/crate/reference/en/latest/interfaces/postgres.html>) and the
//! mapping CrateDB's `PGTypes` makes: `boolean` → `bool` (16), `smallint` → `int2` (21),
//! `integer` → `int4` (23), `bigint` → `int8` (20), `real` → `float4` (700), `double
//! precision` → `float8` (701), `text` → `varchar` (1043), `timestamp with time zone` →
//! `timestamptz` (1184), `timestamp without time zone` → `timestamp` (1114), `object` →
//! `json` (114), arrays → the array type of their element (`int4[]` 1007, `varchar[]` 1015,
//! …; arrays of objects or of unknown elements `json[]` 199, nested arrays `json`), and an
//! unknown type (NULL) → `unknown` (705). Text values are PostgreSQL's: `t`/`f`, decimal
//! numbers, `2024-05-01 10:00:00.000+00` (with time zone; always UTC) and
//! `2024-05-01 10:00:00.000`, JSON for objects, `{"1","2"}` for arrays (every element quoted,
//! `"` and `\` escaped). Binary values are PostgreSQL's binary formats of the same types.

use std::error::Error;

use ::pgwire::api::Type;
use ::pgwire::api::portal::Portal;
use ::pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use ::pgwire::types::ToSqlText;
use ::pgwire::types::format::FormatOptions;
use bytes::{BufMut, BytesMut};
use postgres_types::Kind;
use postgres_types::{IsNull, ToSql, to_sql_checked};
use serde_json::Value;

pub use crate::model::parse_text_array;
use crate::model::{DataType, format_timestamp};

type BoxError = Box<dyn Error + Sync + Send>;

/// Milliseconds between the Unix epoch and PostgreSQL's (2000-01-01).
const PG_EPOCH_MS: i64 = 946_684_800_000;

/// The type a value of `ty` travels as: nested arrays as JSON, arrays of unknown elements as
/// arrays of JSON.
fn wire(ty: &DataType) -> DataType {
    match ty {
        DataType::Array(inner) => match inner.as_ref() {
            DataType::Array(_) => DataType::Object,
            DataType::Undefined => DataType::Array(Box::new(DataType::Object)),
            _ => ty.clone(),
        },
        other => other.clone(),
    }
}

/// The PostgreSQL type a column of `ty` is described with.
pub fn pg_type(ty: &DataType) -> Type {
    match wire(ty) {
        DataType::Undefined => Type::UNKNOWN,
        DataType::Boolean => Type::BOOL,
        DataType::SmallInt => Type::INT2,
        DataType::Integer => Type::INT4,
        DataType::BigInt => Type::INT8,
        DataType::Real => Type::FLOAT4,
        DataType::Double => Type::FLOAT8,
        DataType::Text => Type::VARCHAR,
        DataType::Timestamp => Type::TIMESTAMP,
        DataType::TimestampTz => Type::TIMESTAMPTZ,
        DataType::Object => Type::JSON,
        DataType::Array(inner) => match *inner {
            DataType::Boolean => Type::BOOL_ARRAY,
            DataType::SmallInt => Type::INT2_ARRAY,
            DataType::Integer => Type::INT4_ARRAY,
            DataType::BigInt => Type::INT8_ARRAY,
            DataType::Real => Type::FLOAT4_ARRAY,
            DataType::Double => Type::FLOAT8_ARRAY,
            DataType::Text => Type::VARCHAR_ARRAY,
            DataType::Timestamp => Type::TIMESTAMP_ARRAY,
            DataType::TimestampTz => Type::TIMESTAMPTZ_ARRAY,
            _ => Type::JSON_ARRAY,
        },
    }
}

/// A value as JSON text, a string bare.
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn float_text(f: f64) -> String {
    // `{:?}` keeps a fraction (`1.0`), as PostgreSQL clients expect of a float.
    format!("{f:?}")
}

/// The text format of a non-NULL `value` of type `ty` (already [`wire`]d).
fn text(ty: &DataType, value: &Value) -> String {
    match (ty, value) {
        (DataType::Boolean, Value::Bool(b)) => if *b { "t" } else { "f" }.to_owned(),
        (DataType::SmallInt | DataType::Integer | DataType::BigInt, Value::Number(n)) => n
            .as_i64()
            .map(|i| i.to_string())
            .or_else(|| n.as_f64().map(|f| (f as i64).to_string()))
            .unwrap_or_else(|| n.to_string()),
        (DataType::Real | DataType::Double, Value::Number(n)) => {
            n.as_f64().map_or_else(|| n.to_string(), float_text)
        }
        (DataType::Timestamp, Value::Number(n)) => n
            .as_i64()
            .and_then(format_timestamp)
            .unwrap_or_else(|| n.to_string()),
        (DataType::TimestampTz, Value::Number(n)) => n
            .as_i64()
            .and_then(format_timestamp)
            .map_or_else(|| n.to_string(), |t| format!("{t}+00")),
        (DataType::Array(inner), Value::Array(items)) => {
            let elems: Vec<String> = items
                .iter()
                .map(|v| match v {
                    Value::Null => "NULL".to_owned(),
                    v => {
                        let t = text(inner, v).replace('\\', "\\\\").replace('"', "\\\"");
                        format!("\"{t}\"")
                    }
                })
                .collect();
            format!("{{{}}}", elems.join(","))
        }
        (_, v) => plain(v),
    }
}

/// The binary format of a non-NULL `value` of type `ty` (already [`wire`]d).
fn binary(ty: &DataType, value: &Value, out: &mut BytesMut) {
    let int = || value.as_i64().or_else(|| value.as_f64().map(|f| f as i64));
    match ty {
        DataType::Boolean => out.put_u8(u8::from(value.as_bool().unwrap_or(false))),
        DataType::SmallInt => out.put_i16(int().and_then(|i| i16::try_from(i).ok()).unwrap_or(0)),
        DataType::Integer => out.put_i32(int().and_then(|i| i32::try_from(i).ok()).unwrap_or(0)),
        DataType::BigInt => out.put_i64(int().unwrap_or(0)),
        DataType::Real => out.put_f32(value.as_f64().unwrap_or(0.0) as f32),
        DataType::Double => out.put_f64(value.as_f64().unwrap_or(0.0)),
        DataType::Timestamp | DataType::TimestampTz => {
            out.put_i64(
                int()
                    .unwrap_or(0)
                    .saturating_sub(PG_EPOCH_MS)
                    .saturating_mul(1000),
            );
        }
        DataType::Array(inner) => {
            let items = value.as_array().map(Vec::as_slice).unwrap_or_default();
            let elem_oid = pg_type(inner).oid();
            out.put_i32(i32::from(!items.is_empty()));
            out.put_i32(i32::from(items.iter().any(Value::is_null)));
            out.put_u32(elem_oid);
            if !items.is_empty() {
                out.put_i32(i32::try_from(items.len()).unwrap_or(i32::MAX));
                out.put_i32(1);
            }
            for item in items {
                if item.is_null() {
                    out.put_i32(-1);
                    continue;
                }
                let mut elem = BytesMut::new();
                binary(inner, item, &mut elem);
                out.put_i32(i32::try_from(elem.len()).unwrap_or(i32::MAX));
                out.put_slice(&elem);
            }
        }
        DataType::Undefined | DataType::Text | DataType::Object => {
            out.put_slice(text(ty, value).as_bytes());
        }
    }
}

/// A parameter in the binary format of `ty` as a JSON value: booleans, integers, floats,
/// timestamps (as milliseconds), text and JSON (as strings) and one-dimensional arrays of
/// them. `None` for other types or malformed input.
pub fn decode_binary(ty: &Type, bytes: &[u8]) -> Option<Value> {
    let fixed = |n: usize| -> Option<[u8; 8]> {
        let mut buf = [0u8; 8];
        if bytes.len() != n {
            return None;
        }
        buf[8 - n..].copy_from_slice(bytes);
        Some(buf)
    };
    Some(match *ty {
        Type::BOOL => Value::Bool(*bytes.first()? != 0),
        Type::INT2 => Value::from(i16::from_be_bytes(bytes.try_into().ok()?)),
        Type::INT4 => Value::from(i32::from_be_bytes(bytes.try_into().ok()?)),
        Type::INT8 => Value::from(i64::from_be_bytes(fixed(8)?)),
        Type::FLOAT4 => Value::from(f64::from(f32::from_be_bytes(bytes.try_into().ok()?))),
        Type::FLOAT8 => Value::from(f64::from_be_bytes(fixed(8)?)),
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let micros = i64::from_be_bytes(fixed(8)?);
            Value::from(micros.div_euclid(1000).saturating_add(PG_EPOCH_MS))
        }
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::JSON | Type::UNKNOWN => {
            Value::String(String::from_utf8(bytes.to_vec()).ok()?)
        }
        _ => match ty.kind() {
            postgres_types::Kind::Array(elem) => decode_binary_array(elem, bytes)?,
            _ => return None,
        },
    })
}

fn decode_binary_array(elem: &Type, bytes: &[u8]) -> Option<Value> {
    let mut pos = 0usize;
    let int = |pos: &mut usize| -> Option<i32> {
        let v = i32::from_be_bytes(bytes.get(*pos..*pos + 4)?.try_into().ok()?);
        *pos += 4;
        Some(v)
    };
    let (ndim, _has_null, _oid) = (int(&mut pos)?, int(&mut pos)?, int(&mut pos)?);
    if ndim == 0 {
        return Some(Value::Array(Vec::new()));
    }
    if ndim != 1 {
        return None;
    }
    let (len, _lower) = (int(&mut pos)?, int(&mut pos)?);
    let mut items = Vec::new();
    for _ in 0..len {
        let n = int(&mut pos)?;
        if n < 0 {
            items.push(Value::Null);
            continue;
        }
        let n = usize::try_from(n).ok()?;
        items.push(decode_binary(elem, bytes.get(pos..pos + n)?)?);
        pos += n;
    }
    Some(Value::Array(items))
}

/// A bound parameter as a JSON value, by its declared type: binary ones decoded by
/// [`decode_binary`], text ones as numbers or booleans when declared so, arrays from their
/// `{…}` literal, the rest as text (the column's type converts them further).
pub(crate) fn parameter<S: Clone>(portal: &Portal<S>, idx: usize) -> PgWireResult<Value> {
    let declared = portal
        .statement
        .parameter_types
        .get(idx)
        .cloned()
        .flatten()
        .unwrap_or(Type::TEXT);
    let bad = |what: &str| {
        PgWireError::UserError(Box::new(ErrorInfo::new(
            "ERROR".to_owned(),
            "22P02".to_owned(),
            format!(
                "SQLParseException[malformed parameter ${}: {what}]",
                idx + 1
            ),
        )))
    };
    if portal.parameter_format.is_binary(idx) {
        let raw = portal
            .parameters
            .get(idx)
            .ok_or(PgWireError::ParameterIndexOutOfBound(idx))?;
        return match raw {
            None => Ok(Value::Null),
            Some(bytes) => decode_binary(&declared, bytes).ok_or_else(|| bad(declared.name())),
        };
    }
    Ok(match declared {
        Type::INT2 => portal
            .parameter::<i16>(idx, &declared)?
            .map_or(Value::Null, Value::from),
        Type::INT4 => portal
            .parameter::<i32>(idx, &declared)?
            .map_or(Value::Null, Value::from),
        Type::INT8 => portal
            .parameter::<i64>(idx, &declared)?
            .map_or(Value::Null, Value::from),
        Type::FLOAT4 => portal
            .parameter::<f32>(idx, &declared)?
            .map_or(Value::Null, Value::from),
        Type::FLOAT8 => portal
            .parameter::<f64>(idx, &declared)?
            .map_or(Value::Null, Value::from),
        Type::BOOL => portal
            .parameter::<bool>(idx, &declared)?
            .map_or(Value::Null, Value::from),
        ref array if matches!(array.kind(), Kind::Array(_)) => {
            match portal.parameter::<String>(idx, &Type::TEXT)? {
                None => Value::Null,
                Some(text) => parse_text_array(&text).ok_or_else(|| bad(&text))?,
            }
        }
        _ => portal
            .parameter::<String>(idx, &Type::TEXT)?
            .map_or(Value::Null, Value::from),
    })
}

/// One result value with its column's type, encodable by pgwire in either format.
#[derive(Debug)]
pub struct Cell<'a> {
    pub ty: &'a DataType,
    pub value: &'a Value,
}

impl ToSql for Cell<'_> {
    fn to_sql(&self, _ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        if self.value.is_null() {
            return Ok(IsNull::Yes);
        }
        binary(&wire(self.ty), self.value, out);
        Ok(IsNull::No)
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

impl ToSqlText for Cell<'_> {
    fn to_sql_text(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
        _format_options: &FormatOptions,
    ) -> Result<IsNull, BoxError> {
        if self.value.is_null() {
            return Ok(IsNull::Yes);
        }
        out.put_slice(text(&wire(self.ty), self.value).as_bytes());
        Ok(IsNull::No)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn as_text(ty: DataType, v: Value) -> String {
        text(&wire(&ty), &v)
    }

    #[test]
    fn oids_follow_cratedb() {
        assert_eq!(pg_type(&DataType::Integer).oid(), 23);
        assert_eq!(pg_type(&DataType::BigInt).oid(), 20);
        assert_eq!(pg_type(&DataType::Text).oid(), 1043);
        assert_eq!(pg_type(&DataType::Boolean).oid(), 16);
        assert_eq!(pg_type(&DataType::Double).oid(), 701);
        assert_eq!(pg_type(&DataType::Real).oid(), 700);
        assert_eq!(pg_type(&DataType::TimestampTz).oid(), 1184);
        assert_eq!(pg_type(&DataType::Timestamp).oid(), 1114);
        assert_eq!(pg_type(&DataType::SmallInt).oid(), 21);
        assert_eq!(pg_type(&DataType::Object).oid(), 114);
        assert_eq!(pg_type(&DataType::Undefined).oid(), 705);
        let array = |t| DataType::Array(Box::new(t));
        assert_eq!(pg_type(&array(DataType::Integer)).oid(), 1007);
        assert_eq!(pg_type(&array(DataType::Text)).oid(), 1015);
        assert_eq!(pg_type(&array(DataType::Object)).oid(), 199);
        assert_eq!(pg_type(&array(array(DataType::Integer))).oid(), 114);
    }

    #[test]
    fn text_values_are_postgresql_s() {
        assert_eq!(as_text(DataType::Boolean, json!(true)), "t");
        assert_eq!(as_text(DataType::Double, json!(1.0)), "1.0");
        assert_eq!(as_text(DataType::Integer, json!(7)), "7");
        assert_eq!(
            as_text(DataType::TimestampTz, json!(1_714_557_600_000_i64)),
            "2024-05-01 10:00:00.000+00"
        );
        assert_eq!(
            as_text(DataType::Timestamp, json!(1_714_557_600_000_i64)),
            "2024-05-01 10:00:00.000"
        );
        assert_eq!(as_text(DataType::Object, json!({"a": 1})), r#"{"a":1}"#);
        assert_eq!(
            as_text(
                DataType::Array(Box::new(DataType::Text)),
                json!(["a\"b", null])
            ),
            r#"{"a\"b",NULL}"#
        );
    }

    #[test]
    fn decodes_binary_parameters() {
        assert_eq!(
            decode_binary(&Type::TIMESTAMPTZ, &1000_i64.to_be_bytes()),
            Some(json!(PG_EPOCH_MS + 1))
        );
        let mut out = BytesMut::new();
        binary(
            &DataType::Array(Box::new(DataType::Integer)),
            &json!([5, null]),
            &mut out,
        );
        assert_eq!(
            decode_binary(&Type::INT4_ARRAY, &out),
            Some(json!([5, null]))
        );
        assert_eq!(decode_binary(&Type::INT4, &[0, 1]), None);
    }

    #[test]
    fn binary_values_are_postgresql_s() {
        let mut out = BytesMut::new();
        binary(&DataType::TimestampTz, &json!(PG_EPOCH_MS + 1), &mut out);
        assert_eq!(out.as_ref(), 1000_i64.to_be_bytes());
        let mut out = BytesMut::new();
        binary(
            &DataType::Array(Box::new(DataType::Integer)),
            &json!([5]),
            &mut out,
        );
        let mut want = Vec::new();
        for i in [1_i32, 0, 23, 1, 1, 4, 5] {
            want.extend_from_slice(&i.to_be_bytes());
        }
        assert_eq!(out.as_ref(), want.as_slice());
    }
}
