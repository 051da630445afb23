//! `spec.parameters` checked against PostgreSQL's own settings catalogue (`pg_settings`: type,
//! unit, range, enum values), as the server would check `postgresql.conf` — so a bad value is
//! an `InvalidSpec` condition naming it instead of a primary that will not start. The
//! catalogues are written by `scripts/pg-settings.sh` from the installed PostgreSQL; a major
//! version without one is not checked this way. Names with a dot (`pg_stat_statements.max`)
//! belong to extensions and are not checked either.

use std::collections::HashMap;
use std::sync::LazyLock;

/// One row of `pg_settings`.
struct Setting {
    vartype: String,
    unit: String,
    min: Option<f64>,
    max: Option<f64>,
    enumvals: Vec<String>,
}

fn parse(text: &str) -> HashMap<String, Setting> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let [name, vartype, unit, min, max, enums] = f.as_slice() else {
                return None;
            };
            Some((
                name.to_ascii_lowercase(),
                Setting {
                    vartype: (*vartype).to_string(),
                    unit: (*unit).to_string(),
                    min: min.parse().ok(),
                    max: max.parse().ok(),
                    enumvals: enums
                        .split(',')
                        .filter(|e| !e.is_empty())
                        .map(str::to_string)
                        .collect(),
                },
            ))
        })
        .collect()
}

static PG15: LazyLock<HashMap<String, Setting>> =
    LazyLock::new(|| parse(include_str!("pg15_settings.tsv")));
static PG16: LazyLock<HashMap<String, Setting>> =
    LazyLock::new(|| parse(include_str!("pg16_settings.tsv")));

fn catalogue(major: u32) -> Option<&'static HashMap<String, Setting>> {
    match major {
        15 => Some(&PG15),
        16 => Some(&PG16),
        _ => None,
    }
}

/// Memory units in bytes and time units in milliseconds, as `postgresql.conf` spells them.
const MEMORY: [(&str, f64); 5] = [
    ("B", 1.0),
    ("kB", 1024.0),
    ("MB", 1024.0 * 1024.0),
    ("GB", 1024.0 * 1024.0 * 1024.0),
    ("TB", 1024.0 * 1024.0 * 1024.0 * 1024.0),
];
const TIME: [(&str, f64); 6] = [
    ("us", 0.001),
    ("ms", 1.0),
    ("s", 1000.0),
    ("min", 60_000.0),
    ("h", 3_600_000.0),
    ("d", 86_400_000.0),
];

/// The size of a setting's unit in its family's base (bytes or milliseconds), and the family.
fn base_unit(unit: &str) -> Option<(f64, &'static [(&'static str, f64)])> {
    if let Some(n) = unit.strip_suffix("kB").and_then(|n| n.parse::<f64>().ok()) {
        return Some((n * 1024.0, &MEMORY));
    }
    MEMORY
        .iter()
        .find(|(u, _)| *u == unit)
        .map(|(_, f)| (*f, &MEMORY[..]))
        .or_else(|| {
            TIME.iter()
                .find(|(u, _)| *u == unit)
                .map(|(_, f)| (*f, &TIME[..]))
        })
}

/// A number as PostgreSQL reads one: decimal, `0x` hex for integers, optional exponent.
fn number(text: &str, integer: bool) -> Option<f64> {
    if integer && let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        return i64::from_str_radix(hex, 16).ok().map(|n| n as f64);
    }
    text.parse::<f64>().ok().filter(|n| n.is_finite())
}

/// A value in the setting's own unit, reading a unit suffix when the setting has one.
fn in_setting_unit(value: &str, setting: &Setting) -> Result<f64, String> {
    let integer = setting.vartype == "integer";
    let v = value.trim();
    if let Some(n) = number(v, integer) {
        return Ok(n);
    }
    let Some((size, family)) = base_unit(&setting.unit) else {
        return Err(String::new());
    };
    let split = v
        .find(|c: char| c.is_ascii_alphabetic())
        .ok_or_else(String::new)?;
    let (digits, suffix) = v.split_at(split);
    let n = number(digits.trim(), false).ok_or_else(String::new)?;
    let factor = family
        .iter()
        .find(|(u, _)| *u == suffix.trim())
        .map(|(_, f)| *f)
        .ok_or_else(|| {
            let units: Vec<&str> = family.iter().map(|(u, _)| *u).collect();
            format!("valid units are {}", units.join(", "))
        })?;
    Ok(n * factor / size)
}

fn describe(setting: &Setting) -> String {
    let unit = if setting.unit.is_empty() {
        String::new()
    } else {
        let family = base_unit(&setting.unit).map(|(_, f)| {
            let units: Vec<&str> = f.iter().map(|(u, _)| *u).collect();
            units.join(", ")
        });
        format!(
            " (unit {}{})",
            setting.unit,
            family
                .map(|f| format!("; or with one of {f}"))
                .unwrap_or_default()
        )
    };
    let range = match (setting.min, setting.max) {
        (Some(min), Some(max)) => format!(" between {min} and {max}"),
        _ => String::new(),
    };
    match setting.vartype.as_str() {
        "integer" => format!("an integer{range}{unit}"),
        "real" => format!("a number{range}{unit}"),
        other => other.to_string(),
    }
}

/// What is wrong with `name = value` for PostgreSQL `major`; `None` when PostgreSQL would
/// take it (or there is no catalogue to tell).
pub fn check(
    major: u32,
    name: &str,
    value: &str,
    parse_bool: fn(&str) -> Option<bool>,
) -> Option<String> {
    if name.contains('.') {
        return None;
    }
    let catalogue = catalogue(major)?;
    let Some(setting) = catalogue.get(name) else {
        return Some(format!(
            "parameters.{name} is not a PostgreSQL {major} setting"
        ));
    };
    let value = value.trim();
    let unquoted = value
        .strip_prefix('\'')
        .and_then(|v| v.strip_suffix('\''))
        .unwrap_or(value);
    match setting.vartype.as_str() {
        "bool" => parse_bool(unquoted).is_none().then(|| {
            format!("parameters.{name} value {value:?} is not a boolean (on, off, true, false, yes, no, 1, 0)")
        }),
        "enum" => (!setting
            .enumvals
            .iter()
            .any(|e| e.eq_ignore_ascii_case(unquoted)))
        .then(|| {
            format!(
                "parameters.{name} value {value:?} is not one of {}",
                setting.enumvals.join(", ")
            )
        }),
        "integer" | "real" => {
            let bad = |hint: String| {
                format!(
                    "parameters.{name} value {value:?} is not valid: PostgreSQL {major} expects {}{}",
                    describe(setting),
                    if hint.is_empty() { String::new() } else { format!("; {hint}") }
                )
            };
            let n = match in_setting_unit(unquoted, setting) {
                Ok(n) => n,
                Err(hint) => return Some(bad(hint)),
            };
            let n = if setting.vartype == "integer" { n.round() } else { n };
            let below = setting.min.is_some_and(|min| n < min);
            let above = setting.max.is_some_and(|max| n > max);
            (below || above).then(|| bad(format!("{value} is {n} in its unit")))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(v: &str) -> Option<bool> {
        match v.to_ascii_lowercase().as_str() {
            "on" | "true" | "1" | "yes" => Some(true),
            "off" | "false" | "0" | "no" => Some(false),
            _ => None,
        }
    }

    #[test]
    fn the_catalogue_is_postgresqls_own() {
        assert!(PG15.len() > 300);
        let sb = &PG15["shared_buffers"];
        assert_eq!((sb.vartype.as_str(), sb.unit.as_str()), ("integer", "8kB"));
        assert!(PG15.contains_key("datestyle"), "names are case-insensitive");
    }

    #[test]
    fn values_postgresql_accepts_pass() {
        for (name, value) in [
            ("shared_buffers", "128MB"),
            ("shared_buffers", "16384"),
            ("shared_buffers", "1GB"),
            ("work_mem", "4MB"),
            ("work_mem", "0x100"),
            ("statement_timeout", "30s"),
            ("statement_timeout", "1.5min"),
            ("checkpoint_completion_target", "0.9"),
            ("vacuum_cost_delay", "2ms"),
            ("log_min_messages", "WARNING"),
            ("log_statement", "'ddl'"),
            ("jit", "off"),
            ("search_path", "'\"$user\", public'"),
            ("pg_stat_statements.max", "anything"),
        ] {
            assert_eq!(check(15, name, value, b), None, "{name} = {value}");
        }
        assert_eq!(
            check(17, "shared_buffers", "notanumber", b),
            None,
            "no catalogue: no check"
        );
        // 16 has its own catalogue: a setting new in 16 passes there and not in 15.
        assert_eq!(check(16, "debug_io_direct", "''", b), None);
        let m = check(15, "debug_io_direct", "''", b).unwrap();
        assert_eq!(
            m,
            "parameters.debug_io_direct is not a PostgreSQL 15 setting"
        );
        assert!(check(16, "shared_buffers", "notanumber", b).is_some());
    }

    #[test]
    fn values_postgresql_refuses_are_named() {
        let m = check(15, "shared_buffers", "notanumber", b).unwrap();
        assert!(
            m.contains("parameters.shared_buffers value \"notanumber\" is not valid"),
            "{m}"
        );
        assert!(
            m.contains("an integer between 16 and 1073741823 (unit 8kB"),
            "{m}"
        );
        let m = check(15, "shared_buffers", "64kB", b).unwrap();
        assert!(m.contains("64kB is 8 in its unit"), "{m}");
        let m = check(15, "statement_timeout", "5 parsecs", b).unwrap();
        assert!(m.contains("valid units are us, ms, s, min, h, d"), "{m}");
        let m = check(15, "log_min_messages", "chatty", b).unwrap();
        assert!(m.contains("is not one of debug5"), "{m}");
        let m = check(15, "jit", "maybe", b).unwrap();
        assert!(m.contains("is not a boolean"), "{m}");
        let m = check(15, "shared_bufers", "1GB", b).unwrap();
        assert_eq!(m, "parameters.shared_bufers is not a PostgreSQL 15 setting");
    }
}
