//! Setting conditions without losing `lastTransitionTime`.

use jiff::Timestamp;
use steward_api::common::Condition;

use crate::clock::format_time;

/// `True`, `False` or `Unknown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The condition holds.
    True,
    /// It does not.
    False,
    /// Nobody knows.
    Unknown,
}

impl Status {
    /// The API string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }

    /// `True` when `holds`, else `False`.
    pub fn from_bool(holds: bool) -> Self {
        if holds { Self::True } else { Self::False }
    }
}

/// Sets a condition. `lastTransitionTime` changes only when `status` changes; reason, message
/// and observed generation are always updated. Returns whether the status flipped.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: Status,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: Timestamp,
) -> bool {
    let message = message.into();
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        let flipped = existing.status != status.as_str();
        if flipped {
            existing.status = status.as_str().to_owned();
            existing.last_transition_time = format_time(now);
        }
        existing.reason = reason.to_owned();
        existing.message = message;
        existing.observed_generation = generation;
        return flipped;
    }
    conditions.push(Condition {
        type_: type_.to_owned(),
        status: status.as_str().to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: format_time(now),
        observed_generation: generation,
    });
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    true
}

/// Finds a condition by type.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition exists with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_is_kept_when_status_does_not_change() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let mut conds = Vec::new();
        assert!(set(
            &mut conds,
            "Available",
            Status::False,
            "Starting",
            "",
            Some(1),
            t0
        ));
        assert!(!set(
            &mut conds,
            "Available",
            Status::False,
            "Waiting",
            "members",
            Some(2),
            t1
        ));
        let c = get(&conds, "Available").unwrap();
        assert_eq!(c.last_transition_time, "2026-01-01T00:00:00Z");
        assert_eq!(
            (c.reason.as_str(), c.observed_generation),
            ("Waiting", Some(2))
        );
        assert!(set(
            &mut conds,
            "Available",
            Status::True,
            "Quorate",
            "",
            Some(2),
            t1
        ));
        assert_eq!(
            get(&conds, "Available").unwrap().last_transition_time,
            "2026-01-01T01:00:00Z"
        );
        assert!(is_true(&conds, "Available"));
    }
}
