//! Time as a seam: the operator reads "now" only through [`Clock`], so deadline logic is tested
//! with an injected clock instead of sleeps.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;

/// A source of the current time.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> Timestamp;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that moves only when told to, for tests.
#[derive(Clone, Debug)]
pub struct ManualClock(Arc<Mutex<Timestamp>>);

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self(Arc::new(Mutex::new(start)))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        if let Ok(mut now) = self.0.lock() {
            let signed = jiff::SignedDuration::try_from(by).unwrap_or(jiff::SignedDuration::MAX);
            *now = now.saturating_add(signed).unwrap_or(*now);
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        self.0
            .lock()
            .map(|now| *now)
            .unwrap_or_else(|poisoned| *poisoned.into_inner())
    }
}

/// `1h2m5s` from seconds.
pub fn human_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    let (h, m, s) = (s / 3600, (s % 3600) / 60, s % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

/// Formats a timestamp the way Kubernetes does (RFC 3339, seconds precision, `Z`).
pub fn format_time(at: Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Parses an RFC 3339 timestamp written by [`format_time`] or by the API server.
pub fn parse_time(text: &str) -> Option<Timestamp> {
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_advances_and_formats() {
        let clock = ManualClock::new("2026-01-02T03:04:05Z".parse().unwrap());
        clock.advance(Duration::from_secs(61));
        assert_eq!(format_time(clock.now()), "2026-01-02T03:05:06Z");
        assert_eq!(parse_time("2026-01-02T03:05:06Z"), Some(clock.now()));
    }
}
