//! (pure) The seed's 6-field cron expressions (seconds, minutes, hours, day of month, month,
//! day of week), always in UTC, parsed by the `croner` crate (seconds required, no year
//! field). `*`, `/`, `,`, `-`, `?` in the day fields, `JAN`–`DEC`, `SUN`–`SAT`; croner's
//! extensions (`L`, `W`, `#`) are accepted too. When both day fields are restricted, a day
//! matching either runs (Vixie cron's rule, as the seed's Go cron library does).

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::Timestamp;
use jiff::tz::TimeZone;

/// A parsed expression.
#[derive(Clone, Debug)]
pub struct CronSchedule {
    cron: Cron,
}

/// Parses a 6-field expression; the error names the expression and what is wrong with it.
pub fn parse(expression: &str) -> Result<CronSchedule, String> {
    let fields = expression.split_whitespace().count();
    if fields != 6 {
        return Err(format!(
            "schedule {expression:?} has {fields} fields; it needs 6: seconds minutes hours day-of-month month day-of-week (UTC)"
        ));
    }
    CronParser::builder()
        .seconds(Seconds::Required)
        .year(Year::Disallowed)
        .build()
        .parse(expression)
        .map(|cron| CronSchedule { cron })
        .map_err(|e| format!("schedule {expression:?} is not a valid cron expression: {e}"))
}

impl CronSchedule {
    /// The first slot strictly after `t`.
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        let zoned = t.to_zoned(TimeZone::UTC);
        self.cron
            .find_next_occurrence(&zoned, false)
            .ok()
            .map(|z| z.timestamp())
    }

    /// The newest slot at or before `t`.
    pub fn latest_until(&self, t: Timestamp) -> Option<Timestamp> {
        let zoned = t.to_zoned(TimeZone::UTC);
        self.cron
            .find_previous_occurrence(&zoned, true)
            .ok()
            .map(|z| z.timestamp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn next(expr: &str, from: &str) -> String {
        parse(expr)
            .unwrap()
            .next_after(at(from))
            .unwrap()
            .to_string()
    }

    #[test]
    fn every_field_ranges_steps_lists_and_names() {
        // Seconds.
        assert_eq!(
            next("*/10 * * * * *", "2026-11-26T07:00:03Z"),
            "2026-11-26T07:00:10Z"
        );
        assert_eq!(
            next("5,35 * * * * *", "2026-11-26T07:00:06Z"),
            "2026-11-26T07:00:35Z"
        );
        // Minutes and hours, with a range and a step inside it.
        assert_eq!(
            next("0 15-45/15 * * * *", "2026-11-26T07:16:00Z"),
            "2026-11-26T07:30:00Z"
        );
        assert_eq!(
            next("0 0 1 * * *", "2026-11-26T01:00:00Z"),
            "2026-11-27T01:00:00Z"
        );
        assert_eq!(
            next("0 0 9-17 * * *", "2026-11-26T17:30:00Z"),
            "2026-11-27T09:00:00Z"
        );
        // Day of month, month by name, `?`.
        assert_eq!(
            next("0 0 0 15 * ?", "2026-11-26T00:00:00Z"),
            "2026-12-15T00:00:00Z"
        );
        assert_eq!(
            next("0 30 2 1 JAN,JUL ?", "2026-11-26T00:00:00Z"),
            "2027-01-01T02:30:00Z"
        );
        // Day of week by name and number, `?` in the day of month.
        assert_eq!(
            next("0 0 6 ? * SUN", "2026-11-26T00:00:00Z"),
            "2026-11-29T06:00:00Z"
        );
        assert_eq!(
            next("0 0 6 ? * 1-5", "2026-11-28T00:00:00Z"),
            "2026-11-30T06:00:00Z"
        );
        assert_eq!(
            next("0 0 6 ? * MON-FRI", "2026-11-27T07:00:00Z"),
            "2026-11-30T06:00:00Z"
        );
        // Lower case names, extra spaces.
        assert_eq!(
            next("  0 0 6 ? * sat ", "2026-11-26T00:00:00Z"),
            "2026-11-28T06:00:00Z"
        );
    }

    #[test]
    fn utc_across_month_ends_and_leap_days() {
        assert_eq!(
            next("0 0 0 31 * ?", "2026-11-26T00:00:00Z"),
            "2026-12-31T00:00:00Z"
        );
        assert_eq!(
            next("0 0 0 31 * ?", "2027-01-31T00:00:00Z"),
            "2027-03-31T00:00:00Z"
        );
        assert_eq!(
            next("0 0 0 29 FEB ?", "2026-03-01T00:00:00Z"),
            "2028-02-29T00:00:00Z"
        );
        assert_eq!(
            next("59 59 23 * * *", "2027-12-31T23:59:59Z"),
            "2028-01-01T23:59:59Z"
        );
        assert_eq!(
            next("0 0 12 1 * *", "2028-02-29T12:00:00Z"),
            "2028-03-01T12:00:00Z"
        );
        let hourly = parse("0 0 * * * *").unwrap();
        assert_eq!(
            hourly
                .latest_until(at("2026-11-26T07:00:00Z"))
                .unwrap()
                .to_string(),
            "2026-11-26T07:00:00Z",
            "a slot at the moment counts"
        );
        assert_eq!(
            hourly
                .latest_until(at("2026-11-26T06:59:59Z"))
                .unwrap()
                .to_string(),
            "2026-11-26T06:00:00Z"
        );
    }

    #[test]
    fn invalid_expressions_say_why() {
        for bad in [
            "* * * * *",
            "0 0 0 * * * 2026",
            "60 * * * * *",
            "* 61 * * * *",
            "* * 24 * * *",
            "* * * 32 * *",
            "* * * * 13 *",
            "* * * * * 8",
            "* * * * FOO *",
            "*/0 * * * * *",
            "a b c d e f",
            "",
        ] {
            let why = parse(bad).unwrap_err();
            assert!(why.contains("schedule"), "{bad:?}: {why}");
        }
    }
}
