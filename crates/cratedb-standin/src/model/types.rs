//! CrateDB's data types, as far as the stand-in models them.
//!
//! Follows "Data types"
//! (<https://cratedb.com/docs/crate/reference/en/latest/general/ddl/data-types.html>): type
//! names and their aliases (`int`/`integer`/`int4`, `long`/`bigint`/`int8`, `string`/`text`/
//! `varchar`, `timestamp` = `timestamp without time zone`, `timestamptz` = `timestamp with time
//! zone`, `array(t)` / `t[]`, `object`), and how a value of each is stored: timestamps as
//! milliseconds since the epoch (what CrateDB answers on HTTP), numbers and booleans as such,
//! objects and arrays as JSON. Types the stand-in does not model (`ip`, `geo_point`,
//! `numeric`, …) are [`DataType::Undefined`]: stored as given, their type inferred from values.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A column's or an expression's type.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DataType {
    /// No known type (NULL, or a type the stand-in does not model).
    Undefined,
    Boolean,
    SmallInt,
    Integer,
    BigInt,
    Real,
    Double,
    Text,
    /// `timestamp without time zone`.
    Timestamp,
    /// `timestamp with time zone`.
    TimestampTz,
    Object,
    Array(Box<DataType>),
}

impl DataType {
    /// The type a CrateDB type name denotes (case and spacing ignored; a length such as
    /// `varchar(255)` is accepted and ignored). `None` for names the stand-in does not know.
    pub fn from_sql(name: &str) -> Option<Self> {
        let norm = name
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_ascii_lowercase();
        if let Some(inner) = norm.strip_suffix("[]") {
            return Self::from_sql(inner).map(|t| Self::Array(Box::new(t)));
        }
        if let Some(inner) = norm
            .strip_prefix("array")
            .map(str::trim_start)
            .and_then(|r| r.strip_prefix('('))
            .and_then(|r| r.strip_suffix(')'))
        {
            return Self::from_sql(inner).map(|t| Self::Array(Box::new(t)));
        }
        // `varchar(10)`, `character varying(10)`, `object(dynamic)`: the argument is ignored.
        let base = norm.split('(').next().unwrap_or_default().trim();
        Some(match base {
            "boolean" | "bool" => Self::Boolean,
            "smallint" | "short" | "int2" | "byte" | "tinyint" => Self::SmallInt,
            "integer" | "int" | "int4" => Self::Integer,
            "bigint" | "long" | "int8" => Self::BigInt,
            "real" | "float" | "float4" => Self::Real,
            "double" | "double precision" | "float8" => Self::Double,
            "text" | "string" | "varchar" | "character varying" | "name" => Self::Text,
            "timestamp" | "timestamp without time zone" => Self::Timestamp,
            "timestamptz" | "timestamp with time zone" => Self::TimestampTz,
            "object" => Self::Object,
            _ => return None,
        })
    }

    /// CrateDB's name of the type, as `information_schema.columns.data_type` shows it.
    pub fn name(&self) -> String {
        match self {
            Self::Undefined => "undefined".to_owned(),
            Self::Boolean => "boolean".to_owned(),
            Self::SmallInt => "smallint".to_owned(),
            Self::Integer => "integer".to_owned(),
            Self::BigInt => "bigint".to_owned(),
            Self::Real => "real".to_owned(),
            Self::Double => "double precision".to_owned(),
            Self::Text => "text".to_owned(),
            Self::Timestamp => "timestamp without time zone".to_owned(),
            Self::TimestampTz => "timestamp with time zone".to_owned(),
            Self::Object => "object".to_owned(),
            Self::Array(inner) => format!("{}_array", inner.name()),
        }
    }

    /// The type of a value seen without a declared type: an integer that fits 32 bits is an
    /// `integer` (as CrateDB types an integer literal), a larger one a `bigint`.
    pub fn of_value(v: &Value) -> Self {
        match v {
            Value::Null => Self::Undefined,
            Value::Bool(_) => Self::Boolean,
            Value::Number(n) => match n.as_i64() {
                Some(i) if i32::try_from(i).is_ok() => Self::Integer,
                Some(_) => Self::BigInt,
                None => Self::Double,
            },
            Value::String(_) => Self::Text,
            Value::Object(_) => Self::Object,
            Value::Array(items) => Self::Array(Box::new(
                items
                    .iter()
                    .map(Self::of_value)
                    .find(|t| *t != Self::Undefined)
                    .unwrap_or(Self::Undefined),
            )),
        }
    }

    /// The type both of two types fit into (`integer` and `bigint` → `bigint`); `Undefined`
    /// gives way to the other.
    pub fn widen(self, other: Self) -> Self {
        use DataType::*;
        let rank = |t: &DataType| match t {
            SmallInt => 1,
            Integer => 2,
            BigInt => 3,
            Real => 4,
            Double => 5,
            _ => 0,
        };
        match (self, other) {
            (Undefined, t) | (t, Undefined) => t,
            (a, b) if rank(&a) > 0 && rank(&b) > 0 => {
                if rank(&a) >= rank(&b) {
                    a
                } else {
                    b
                }
            }
            (a, _) => a,
        }
    }

    /// `value` converted to this type, as CrateDB converts a value written to a column or
    /// cast: numbers from numbers or numeric text, booleans from `true`/`false`/`t`/`f`,
    /// timestamps from milliseconds or ISO 8601 text (`2024-05-01`, `2024-05-01T10:00:00Z`,
    /// `2024-05-01 10:00:00.5+02:00`; without a time zone UTC, and a `timestamp without time
    /// zone` ignores one that is given). The error says why the value does not convert.
    pub fn coerce(&self, value: Value) -> Result<Value, String> {
        if value.is_null() {
            return Ok(value);
        }
        let bad = |v: &Value| format!("Cannot cast value `{v}` to type `{}`", self.name());
        match self {
            Self::Undefined => Ok(value),
            Self::Boolean => match &value {
                Value::Bool(_) => Ok(value),
                Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
                    "true" | "t" => Ok(Value::Bool(true)),
                    "false" | "f" => Ok(Value::Bool(false)),
                    _ => Err(bad(&value)),
                },
                _ => Err(bad(&value)),
            },
            Self::SmallInt | Self::Integer | Self::BigInt => {
                let i = match &value {
                    Value::Number(n) => n.as_i64().or_else(|| {
                        n.as_f64()
                            .filter(|f| f.is_finite() && f.abs() < 9.2e18)
                            .map(|f| f.round() as i64)
                    }),
                    Value::String(s) => s.trim().parse::<i64>().ok(),
                    _ => None,
                }
                .ok_or_else(|| bad(&value))?;
                let fits = match self {
                    Self::SmallInt => i16::try_from(i).is_ok(),
                    Self::Integer => i32::try_from(i).is_ok(),
                    _ => true,
                };
                if fits {
                    Ok(Value::from(i))
                } else {
                    Err(format!("{i} is out of range for type {}", self.name()))
                }
            }
            Self::Real | Self::Double => match &value {
                Value::Number(n) => n.as_f64().map(Value::from).ok_or_else(|| bad(&value)),
                Value::String(s) => s
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite())
                    .map(Value::from)
                    .ok_or_else(|| bad(&value)),
                _ => Err(bad(&value)),
            },
            Self::Text => match value {
                Value::String(_) => Ok(value),
                Value::Number(_) | Value::Bool(_) => Ok(Value::String(value.to_string())),
                other => Err(bad(&other)),
            },
            Self::Timestamp | Self::TimestampTz => match &value {
                Value::Number(n) => n
                    .as_i64()
                    .or_else(|| n.as_f64().map(|f| f as i64))
                    .map(Value::from)
                    .ok_or_else(|| bad(&value)),
                Value::String(s) => parse_timestamp(s, *self == Self::TimestampTz)
                    .map(Value::from)
                    .ok_or_else(|| bad(&value)),
                _ => Err(bad(&value)),
            },
            Self::Object => match value {
                Value::Object(_) => Ok(value),
                Value::String(ref s) => match serde_json::from_str::<Value>(s) {
                    Ok(v @ Value::Object(_)) => Ok(v),
                    _ => Err(bad(&value)),
                },
                other => Err(bad(&other)),
            },
            Self::Array(inner) => match value {
                // PostgreSQL's array literal, as PostgreSQL clients send an array parameter.
                Value::String(ref s) if s.trim_start().starts_with('{') => {
                    match parse_text_array(s) {
                        Some(v) => self.coerce(v),
                        None => Err(bad(&value)),
                    }
                }
                Value::Array(items) => items
                    .into_iter()
                    .map(|v| inner.coerce(v))
                    .collect::<Result<Vec<_>, _>>()
                    .map(Value::Array),
                other => Err(bad(&other)),
            },
        }
    }

    /// The type's ID in the HTTP endpoint's `col_types` ("Column types", `interfaces/http.html`):
    /// an array is `[100, inner]`.
    pub fn http_id(&self) -> Value {
        Value::from(match self {
            Self::Undefined => 0,
            Self::Boolean => 3,
            Self::Text => 4,
            Self::Double => 6,
            Self::Real => 7,
            Self::SmallInt => 8,
            Self::Integer => 9,
            Self::BigInt => 10,
            Self::TimestampTz => 11,
            Self::Object => 12,
            Self::Timestamp => 15,
            Self::Array(inner) => return Value::Array(vec![Value::from(100), inner.http_id()]),
        })
    }
}

/// A one-dimensional array in PostgreSQL's text format (`{a,"b c",NULL}`) as a JSON array of
/// strings and NULLs (the column's type converts them further); `None` if malformed.
pub fn parse_text_array(text: &str) -> Option<Value> {
    let inner = text.trim().strip_prefix('{')?.strip_suffix('}')?;
    let mut items = Vec::new();
    if inner.trim().is_empty() {
        return Some(Value::Array(items));
    }
    let mut chars = inner.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut item = String::new();
        let quoted = chars.peek() == Some(&'"');
        if quoted {
            chars.next();
            loop {
                match chars.next()? {
                    '\\' => item.push(chars.next()?),
                    '"' => break,
                    c => item.push(c),
                }
            }
            while chars.peek().is_some_and(|c| *c != ',') {
                chars.next();
            }
        } else {
            while let Some(c) = chars.peek().copied() {
                if c == ',' {
                    break;
                }
                if c == '{' || c == '"' {
                    return None;
                }
                item.push(c);
                chars.next();
            }
        }
        let item = if quoted { item } else { item.trim().to_owned() };
        items.push(if !quoted && item.eq_ignore_ascii_case("NULL") {
            Value::Null
        } else {
            Value::String(item)
        });
        match chars.next() {
            Some(',') => {}
            None => return Some(Value::Array(items)),
            Some(_) => return None,
        }
    }
}

/// Milliseconds since the epoch of an ISO 8601 date or date-time. With `with_zone`, an offset
/// in the text is applied; without it (or when absent) the time is read as UTC.
pub fn parse_timestamp(text: &str, with_zone: bool) -> Option<i64> {
    let text = text.trim();
    if with_zone && let Ok(ts) = text.parse::<jiff::Timestamp>() {
        return Some(ts.as_millisecond());
    }
    // The civil part: everything before a `Z` or an offset that follows the time.
    let civil_text = match text.find('T').or_else(|| text.find(' ')) {
        Some(t) => {
            let (date, time) = text.split_at(t);
            let end = time
                .char_indices()
                .skip(1)
                .find(|(_, c)| matches!(c, 'Z' | 'z' | '+' | '-'))
                .map_or(time.len(), |(i, _)| i);
            format!("{date}T{}", time[1..end].trim())
        }
        None => text.to_owned(),
    };
    let civil = civil_text
        .parse::<jiff::civil::DateTime>()
        .ok()
        .or_else(|| {
            civil_text
                .parse::<jiff::civil::Date>()
                .ok()
                .map(|d| d.to_datetime(jiff::civil::Time::midnight()))
        })?;
    civil
        .to_zoned(jiff::tz::TimeZone::UTC)
        .ok()
        .map(|z| z.timestamp().as_millisecond())
}

/// `millis` since the epoch as `YYYY-MM-DD HH:MM:SS.fff` (UTC).
pub fn format_timestamp(millis: i64) -> Option<String> {
    let ts = jiff::Timestamp::from_millisecond(millis).ok()?;
    Some(ts.strftime("%Y-%m-%d %H:%M:%S%.3f").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_and_aliases() {
        assert_eq!(DataType::from_sql("INT"), Some(DataType::Integer));
        assert_eq!(
            DataType::from_sql("double  precision"),
            Some(DataType::Double)
        );
        assert_eq!(DataType::from_sql("TIMESTAMP"), Some(DataType::Timestamp));
        assert_eq!(
            DataType::from_sql("timestamp with time zone"),
            Some(DataType::TimestampTz)
        );
        assert_eq!(DataType::from_sql("varchar(20)"), Some(DataType::Text));
        assert_eq!(
            DataType::from_sql("array(text)"),
            Some(DataType::Array(Box::new(DataType::Text)))
        );
        assert_eq!(
            DataType::from_sql("bigint[]"),
            Some(DataType::Array(Box::new(DataType::BigInt)))
        );
        assert_eq!(DataType::from_sql("geo_point"), None);
    }

    #[test]
    fn coerces_written_values() {
        assert_eq!(
            DataType::TimestampTz.coerce(json!("2024-05-01T10:00:00Z")),
            Ok(json!(1_714_557_600_000_i64))
        );
        assert_eq!(
            DataType::TimestampTz.coerce(json!("2024-05-01 12:00:00+02:00")),
            Ok(json!(1_714_557_600_000_i64))
        );
        assert_eq!(
            DataType::Timestamp.coerce(json!("2024-05-01T10:00:00+02:00")),
            Ok(json!(1_714_557_600_000_i64))
        );
        assert_eq!(
            DataType::Timestamp.coerce(json!("2024-05-01")),
            Ok(json!(1_714_521_600_000_i64))
        );
        assert_eq!(DataType::Double.coerce(json!(1)), Ok(json!(1.0)));
        assert_eq!(DataType::Integer.coerce(json!("7")), Ok(json!(7)));
        assert!(DataType::SmallInt.coerce(json!(70000)).is_err());
        assert!(DataType::Boolean.coerce(json!("maybe")).is_err());
        assert_eq!(
            format_timestamp(1_714_557_600_500).as_deref(),
            Some("2024-05-01 10:00:00.500")
        );
    }

    #[test]
    fn parses_text_arrays() {
        assert_eq!(
            parse_text_array(r#"{a,"b\"c",NULL, d }"#),
            Some(json!(["a", "b\"c", null, "d"]))
        );
        assert_eq!(parse_text_array("{}"), Some(json!([])));
        assert_eq!(parse_text_array("{{1},{2}}"), None);
        assert_eq!(parse_text_array("1,2"), None);
    }

    #[test]
    fn http_ids_follow_the_documented_table() {
        assert_eq!(DataType::Integer.http_id(), json!(9));
        assert_eq!(
            DataType::Array(Box::new(DataType::Text)).http_id(),
            json!([100, 4])
        );
        assert_eq!(
            DataType::of_value(&json!(5_000_000_000_i64)),
            DataType::BigInt
        );
    }
}
