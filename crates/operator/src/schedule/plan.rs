//! (pure) What a schedule does now: which slot is due, and whether it runs, is skipped or was
//! missed. A slot is handled once: `cursor` (the last handled slot, in status) only moves
//! forward, and only the newest slot since the cursor is looked at — slots missed while the
//! operator was down collapse into one run, as a CronJob's do.

use jiff::Timestamp;

use super::cron::CronSchedule;

/// The slot due now, and what to do with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotAction {
    /// Nothing is due.
    Idle,
    /// Run the slot.
    Run(Timestamp),
    /// The slot is too late (`startingDeadlineSeconds`): it is reported, not run.
    Missed(Timestamp, String),
    /// The slot is skipped (suspended, a run still active): the reason, or none when quiet.
    Skip(Timestamp, Option<String>),
}

/// The state a decision reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inputs<'a> {
    /// The last handled slot, or the schedule's creation.
    pub cursor: Timestamp,
    /// Now.
    pub now: Timestamp,
    /// `startingDeadlineSeconds`.
    pub deadline: Option<i64>,
    /// `suspend`.
    pub suspended: bool,
    /// A run still going, when the policy forbids overlap.
    pub blocking_run: Option<&'a str>,
}

/// Decides the slot due at `inputs.now`, and the next slot after it.
pub fn decide(cron: &CronSchedule, inputs: &Inputs<'_>) -> (SlotAction, Option<Timestamp>) {
    let next = cron.next_after(inputs.now);
    let action = match cron.latest_until(inputs.now) {
        Some(slot) if slot > inputs.cursor => {
            let late = inputs.now.as_second() - slot.as_second();
            if inputs.suspended {
                SlotAction::Skip(slot, None)
            } else if let Some(deadline) = inputs.deadline.filter(|d| late > *d) {
                SlotAction::Missed(
                    slot,
                    format!(
                        "slot {slot} missed: {late}s late, startingDeadlineSeconds is {deadline}"
                    ),
                )
            } else if let Some(run) = inputs.blocking_run {
                SlotAction::Skip(
                    slot,
                    Some(format!(
                        "slot {slot} skipped: run {run} is still active (concurrencyPolicy Forbid)"
                    )),
                )
            } else {
                SlotAction::Run(slot)
            }
        }
        _ => SlotAction::Idle,
    };
    (action, next)
}

/// (pure) The run that blocks a slot under `concurrencyPolicy: Forbid`: the first active one
/// whose Job has not ended (`ended`: runs whose Job finished while their record still says
/// they run).
pub fn blocking<'a>(active: &'a [String], ended: &[String]) -> Option<&'a str> {
    active
        .iter()
        .find(|run| !ended.contains(run))
        .map(String::as_str)
}

/// The name of a slot's run: `<schedule>-<slot in Unix seconds>` — the same on every
/// attempt, so that a run is created once whoever creates it and however often.
pub fn run_name(schedule: &str, slot: Timestamp) -> String {
    format!("{schedule}-{}", slot.as_second())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::cron::parse;

    #[test]
    fn a_run_whose_job_ended_does_not_block_while_its_record_catches_up() {
        let active = vec!["nightly-1".to_owned(), "nightly-2".to_owned()];
        assert_eq!(blocking(&active, &[]), Some("nightly-1"));
        assert_eq!(
            blocking(&active, &["nightly-1".to_owned()]),
            Some("nightly-2")
        );
        let both = ["nightly-1".to_owned(), "nightly-2".to_owned()];
        assert_eq!(blocking(&active, &both), None);
        assert_eq!(blocking(&[], &[]), None);
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn inputs(cursor: &str, now: &str) -> Inputs<'static> {
        Inputs {
            cursor: at(cursor),
            now: at(now),
            deadline: None,
            suspended: false,
            blocking_run: None,
        }
    }

    #[test]
    fn a_slot_runs_once_and_missed_ones_collapse() {
        let every10 = parse("*/10 * * * * *").unwrap();
        let (a, next) = decide(
            &every10,
            &inputs("2026-11-26T07:00:00Z", "2026-11-26T07:00:05Z"),
        );
        assert_eq!(a, SlotAction::Idle);
        assert_eq!(next, Some(at("2026-11-26T07:00:10Z")));
        let (a, _) = decide(
            &every10,
            &inputs("2026-11-26T07:00:00Z", "2026-11-26T07:00:10Z"),
        );
        assert_eq!(a, SlotAction::Run(at("2026-11-26T07:00:10Z")));
        // Handled: the cursor is on it; the same moment decides nothing again.
        let (a, _) = decide(
            &every10,
            &inputs("2026-11-26T07:00:10Z", "2026-11-26T07:00:10Z"),
        );
        assert_eq!(a, SlotAction::Idle);
        // Down for a minute: the newest slot only.
        let (a, _) = decide(
            &every10,
            &inputs("2026-11-26T07:00:10Z", "2026-11-26T07:01:13Z"),
        );
        assert_eq!(a, SlotAction::Run(at("2026-11-26T07:01:10Z")));
    }

    /// Issue 33, the schedules e2e's lost "missed slot": the operator stopped at 07:00:05 and
    /// a new one started at 07:00:17, after slot 07:00:10. Its first pass decides on the clock
    /// of that pass, not of the start: at 07:00:19 it runs 07:00:10; if filling its caches on a
    /// loaded machine takes it past 07:00:20, it runs 07:00:20 — a slot after the restart — and
    /// 07:00:10 collapses into it, as a CronJob's missed schedules do. The e2e counted only
    /// slots up to the start, so it waited for a run that rightly never came.
    #[test]
    fn a_first_pass_after_the_next_slot_runs_that_slot_and_the_missed_one_collapses() {
        let every10 = parse("*/10 * * * * *").unwrap();
        let cursor = "2026-11-26T07:00:00Z";
        let (a, next) = decide(&every10, &inputs(cursor, "2026-11-26T07:00:19Z"));
        assert_eq!(a, SlotAction::Run(at("2026-11-26T07:00:10Z")));
        assert_eq!(next, Some(at("2026-11-26T07:00:20Z")));
        let (a, next) = decide(&every10, &inputs(cursor, "2026-11-26T07:00:21Z"));
        assert_eq!(a, SlotAction::Run(at("2026-11-26T07:00:20Z")));
        assert_eq!(next, Some(at("2026-11-26T07:00:30Z")));
        // And the slot it ran is handled: nothing runs 07:00:10 afterwards.
        let (a, _) = decide(
            &every10,
            &inputs("2026-11-26T07:00:20Z", "2026-11-26T07:00:22Z"),
        );
        assert_eq!(a, SlotAction::Idle);
    }

    #[test]
    fn deadlines_suspension_and_overlap() {
        let every10 = parse("*/10 * * * * *").unwrap();
        let mut i = inputs("2026-11-26T07:00:00Z", "2026-11-26T07:00:17Z");
        i.deadline = Some(5);
        let (a, _) = decide(&every10, &i);
        assert!(
            matches!(a, SlotAction::Missed(slot, ref why) if slot == at("2026-11-26T07:00:10Z") && why.contains("7s late"))
        );
        i.deadline = Some(10);
        assert_eq!(
            decide(&every10, &i).0,
            SlotAction::Run(at("2026-11-26T07:00:10Z"))
        );
        i.suspended = true;
        assert_eq!(
            decide(&every10, &i).0,
            SlotAction::Skip(at("2026-11-26T07:00:10Z"), None)
        );
        i.suspended = false;
        i.blocking_run = Some("nightly-1795676400");
        let (a, _) = decide(&every10, &i);
        assert!(
            matches!(a, SlotAction::Skip(_, Some(ref why)) if why.contains("nightly-1795676400 is still active"))
        );
        assert_eq!(
            run_name("nightly", at("2026-11-26T07:00:10Z")),
            "nightly-1795676410"
        );
    }
}
