//! CronJob schedules as Kubernetes parses them (robfig/cron's standard parser): five fields
//! (minute, hour, day of month, month, day of week) with `*`, `?`, lists, ranges, steps
//! (`a/n` means `a-max/n`) and month/weekday names; `@yearly`, `@annually`, `@monthly`,
//! `@weekly`, `@daily`, `@midnight`, `@hourly` and `@every <duration>`. When both day fields are
//! restricted a day matches either; if one of them is `*` or `?`, both must match. Times are
//! evaluated in a time zone (the CronJob's `timeZone`, else UTC). Pure.

use std::time::Duration;

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

#[derive(Clone, Debug, PartialEq)]
pub enum Schedule {
    Fields(Fields),
    /// `@every d`: `d` after the previous time (whole seconds, at least one).
    Every(Duration),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Fields {
    minutes: u64,
    hours: u64,
    dom: u64,
    months: u64,
    dow: u64,
    /// The day-of-month / day-of-week field was `*` or `?` (no step).
    dom_star: bool,
    dow_star: bool,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

struct Bounds {
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

fn value(s: &str, b: &Bounds) -> Result<u32, String> {
    if let Some(i) = b.names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
        return Ok(b.min + u32::try_from(i).unwrap_or(0));
    }
    s.parse::<u32>().map_err(|_| {
        format!("failed to parse int from {s}: strconv.Atoi: parsing {s:?}: invalid syntax")
    })
}

/// One field: the bit set and whether it was a bare `*`/`?`.
fn field(expr: &str, b: &Bounds) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let mut star = false;
    for part in expr.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (part, None),
        };
        let (mut lo, mut hi, is_star) = if range == "*" || range == "?" {
            (b.min, b.max, true)
        } else if let Some((l, h)) = range.split_once('-') {
            (value(l, b)?, value(h, b)?, false)
        } else {
            let v = value(range, b)?;
            (v, v, false)
        };
        let step = match step {
            Some(s) => {
                let n = s.parse::<u32>().map_err(|_| {
                    format!(
                        "failed to parse int from {s}: strconv.Atoi: parsing {s:?}: invalid syntax"
                    )
                })?;
                if !is_star && !range.contains('-') {
                    hi = b.max;
                }
                n
            }
            None => 1,
        };
        if is_star && step == 1 {
            star = true;
        }
        if lo < b.min {
            return Err(format!(
                "beginning of range ({lo}) below minimum ({}): {part}",
                b.min
            ));
        }
        if hi > b.max {
            return Err(format!(
                "end of range ({hi}) above maximum ({}): {part}",
                b.max
            ));
        }
        if lo > hi {
            return Err(format!(
                "beginning of range ({lo}) beyond end of range ({hi}): {part}"
            ));
        }
        if step == 0 {
            return Err(format!("step of range should be a positive number: {part}"));
        }
        while lo <= hi {
            bits |= 1 << lo;
            lo += step;
        }
    }
    Ok((bits, star))
}

fn parse_every(d: &str) -> Result<Duration, String> {
    let mut total = 0f64;
    let mut rest = d.trim();
    if rest.is_empty() {
        return Err(format!("failed to parse duration @every {d}"));
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("failed to parse duration @every {d}: missing unit"))?;
        let n: f64 = rest[..num_end]
            .parse()
            .map_err(|_| format!("failed to parse duration @every {d}"))?;
        let unit_end = rest[num_end..]
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .map_or(rest.len(), |i| num_end + i);
        let scale = match &rest[num_end..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 0.000_001,
            "ns" => 0.000_000_001,
            u => {
                return Err(format!(
                    "failed to parse duration @every {d}: unknown unit {u:?}"
                ));
            }
        };
        total += n * scale;
        rest = &rest[unit_end..];
    }
    // robfig rounds down to whole seconds, with one second as the minimum.
    Ok(Duration::from_secs((total.floor() as u64).max(1)))
}

/// Parses a schedule (errors worded like robfig/cron's, which the real server reports).
pub fn parse(spec: &str) -> Result<Schedule, String> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Err("empty spec string".into());
    }
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        return Err("cannot use TZ or CRON_TZ in schedule, use timeZone field instead".into());
    }
    let expanded = match spec {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        s if s.starts_with("@every ") => return parse_every(&s[7..]).map(Schedule::Every),
        s if s.starts_with('@') => return Err(format!("unrecognized descriptor: {s}")),
        s => s,
    };
    let parts: Vec<&str> = expanded.split_whitespace().collect();
    if parts.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            parts.len(),
            parts.join(" ")
        ));
    }
    let (minutes, _) = field(
        parts[0],
        &Bounds {
            min: 0,
            max: 59,
            names: &[],
        },
    )?;
    let (hours, _) = field(
        parts[1],
        &Bounds {
            min: 0,
            max: 23,
            names: &[],
        },
    )?;
    let (dom, dom_star) = field(
        parts[2],
        &Bounds {
            min: 1,
            max: 31,
            names: &[],
        },
    )?;
    let (months, _) = field(
        parts[3],
        &Bounds {
            min: 1,
            max: 12,
            names: &MONTHS,
        },
    )?;
    let (dow, dow_star) = field(
        parts[4],
        &Bounds {
            min: 0,
            max: 6,
            names: &DAYS,
        },
    )?;
    Ok(Schedule::Fields(Fields {
        minutes,
        hours,
        dom,
        months,
        dow,
        dom_star,
        dow_star,
    }))
}

fn has(bits: u64, v: i8) -> bool {
    u32::try_from(v).is_ok_and(|v| v < 64 && bits & (1 << v) != 0)
}

impl Fields {
    fn day_matches(&self, dt: DateTime) -> bool {
        let dom = has(self.dom, dt.day());
        let dow = has(self.dow, dt.weekday().to_sunday_zero_offset());
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    fn next(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let start = after.to_zoned(tz.clone()).datetime();
        let mut dt = start
            .with()
            .second(0)
            .subsec_nanosecond(0)
            .build()
            .ok()?
            .checked_add(1.minute())
            .ok()?;
        let limit = start.year() + 5;
        while dt.year() <= limit {
            if !has(self.months, dt.month()) {
                dt = dt
                    .first_of_month()
                    .start_of_day()
                    .checked_add(1.month())
                    .ok()?;
            } else if !self.day_matches(dt) {
                dt = dt.start_of_day().checked_add(1.day()).ok()?;
            } else if !has(self.hours, dt.hour()) {
                dt = dt
                    .with()
                    .minute(0)
                    .build()
                    .ok()?
                    .checked_add(1.hour())
                    .ok()?;
            } else if !has(self.minutes, dt.minute()) {
                dt = dt.checked_add(1.minute()).ok()?;
            } else {
                let ts = tz.to_ambiguous_timestamp(dt).compatible().ok()?;
                if ts > after {
                    return Some(ts);
                }
                dt = dt.checked_add(1.minute()).ok()?;
            }
        }
        None
    }
}

impl Schedule {
    /// The first activation strictly after `after`, in `tz`; `None` when there is none within
    /// five years (e.g. `0 0 30 2 *`).
    pub fn next(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        match self {
            Self::Fields(f) => f.next(after, tz),
            Self::Every(d) => {
                let whole = Timestamp::from_second(after.as_second()).ok()?;
                whole
                    .checked_add(jiff::SignedDuration::try_from(*d).ok()?)
                    .ok()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn next(spec: &str, after: &str) -> String {
        parse(spec)
            .unwrap()
            .next(t(after), &TimeZone::UTC)
            .unwrap()
            .to_string()
    }

    #[test]
    fn fields_lists_ranges_steps_and_names() {
        assert_eq!(
            next("* * * * *", "2025-01-01T00:00:30Z"),
            "2025-01-01T00:01:00Z"
        );
        assert_eq!(
            next("*/15 * * * *", "2025-01-01T00:16:00Z"),
            "2025-01-01T00:30:00Z"
        );
        assert_eq!(
            next("5,35 9-17 * * *", "2025-01-01T17:40:00Z"),
            "2025-01-02T09:05:00Z"
        );
        assert_eq!(
            next("10/20 * * * *", "2025-01-01T00:31:00Z"),
            "2025-01-01T00:50:00Z"
        );
        assert_eq!(
            next("0 0 1 jan *", "2025-03-01T00:00:00Z"),
            "2026-01-01T00:00:00Z"
        );
        // 2025-01-04 is a Saturday.
        assert_eq!(
            next("0 12 * * SAT", "2025-01-01T00:00:00Z"),
            "2025-01-04T12:00:00Z"
        );
        assert_eq!(
            next("0 12 ? * mon-fri", "2025-01-04T00:00:00Z"),
            "2025-01-06T12:00:00Z"
        );
        // Both day fields restricted: either matches (the 10th, or a Monday).
        assert_eq!(
            next("0 0 10 * 1", "2025-01-07T00:00:00Z"),
            "2025-01-10T00:00:00Z"
        );
        assert_eq!(
            next("0 0 10 * 1", "2025-01-10T00:00:00Z"),
            "2025-01-13T00:00:00Z"
        );
        assert!(
            parse("0 0 30 2 *")
                .unwrap()
                .next(t("2025-01-01T00:00:00Z"), &TimeZone::UTC)
                .is_none()
        );
    }

    #[test]
    fn descriptors_every_and_errors() {
        assert_eq!(
            next("@hourly", "2025-01-01T00:00:00Z"),
            "2025-01-01T01:00:00Z"
        );
        assert_eq!(
            next("@daily", "2025-01-01T00:00:00Z"),
            "2025-01-02T00:00:00Z"
        );
        assert_eq!(
            next("@weekly", "2025-01-01T00:00:00Z"),
            "2025-01-05T00:00:00Z"
        );
        assert_eq!(
            next("@yearly", "2025-01-01T00:00:00Z"),
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            next("@every 1h30m", "2025-01-01T00:00:00.5Z"),
            "2025-01-01T01:30:00Z"
        );
        assert_eq!(
            parse("* * *").unwrap_err(),
            "expected exactly 5 fields, found 3: [* * *]"
        );
        assert!(
            parse("60 * * * *")
                .unwrap_err()
                .contains("above maximum (59)")
        );
        assert!(parse("* * * * 7").is_err());
        assert!(parse("*/0 * * * *").is_err());
        assert!(parse("@fortnightly").is_err());
        assert!(parse("TZ=UTC * * * * *").is_err());
    }

    #[test]
    fn time_zones() {
        let berlin = TimeZone::get("Europe/Berlin").unwrap();
        let s = parse("0 9 * * *").unwrap();
        // 09:00 in Berlin is 08:00 UTC in winter and 07:00 UTC in summer.
        assert_eq!(
            s.next(t("2025-01-01T00:00:00Z"), &berlin)
                .unwrap()
                .to_string(),
            "2025-01-01T08:00:00Z"
        );
        assert_eq!(
            s.next(t("2025-07-01T00:00:00Z"), &berlin)
                .unwrap()
                .to_string(),
            "2025-07-01T07:00:00Z"
        );
    }
}
