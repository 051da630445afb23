//! Long-running operations recorded in status: start, advance, finish, and the deadline.
//!
//! The record lives only in `status.operation` (and `status.lastOperation` once finished), never
//! in memory, so a restarted operator continues where it left off and still enforces the
//! deadline. These functions are pure: the pipeline turns their results into Events, webhooks
//! and metrics.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use steward_api::common::{
    CommonStatus, Operation, OperationChange, OperationKind, OperationPhase,
};

use crate::clock::{format_time, parse_time};

/// What to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperationRequest {
    /// The kind.
    pub kind: OperationKind,
    /// First step name.
    pub step: String,
    /// Units of work in total.
    pub total: u32,
    /// Old and new values.
    pub change: OperationChange,
    /// The first message.
    pub message: String,
}

/// Result of [`start`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Started {
    /// A new operation was recorded.
    New,
    /// An operation of this kind for this generation was already running; it continues.
    Resumed,
    /// Another operation is running; the caller must wait for it.
    Busy(OperationKind),
    /// The same operation already failed for this generation; destructive work stays blocked
    /// until the spec changes.
    Blocked(String),
}

/// Starts an operation unless one is running. Idempotent: calling it again on the next pass
/// for the same kind resumes the recorded operation (keeping its deadline). A running operation
/// of the same kind started by an older generation is taken over by the new generation, keeping
/// its start time and deadline, so that editing the spec mid-operation cannot extend the
/// deadline forever.
pub fn start(
    status: &mut CommonStatus,
    request: OperationRequest,
    generation: i64,
    now: Timestamp,
    timeout: Duration,
) -> Started {
    if let Some(op) = &mut status.operation {
        if op.kind != request.kind {
            return Started::Busy(op.kind);
        }
        if op.generation != generation {
            op.generation = generation;
            op.change = request.change;
            op.total = request.total.max(op.done);
            op.progress = progress(op.done, op.total);
            op.message = request.message;
        }
        return Started::Resumed;
    }
    if let Some(reason) = blocked_by_failure(status, generation)
        && status
            .last_operation
            .as_ref()
            .is_some_and(|op| op.kind == request.kind)
    {
        return Started::Blocked(reason);
    }
    let deadline = now
        .saturating_add(SignedDuration::try_from(timeout).unwrap_or(SignedDuration::MAX))
        .unwrap_or(now);
    status.operation = Some(Operation {
        kind: request.kind,
        phase: OperationPhase::Running,
        generation,
        step: request.step,
        done: 0,
        total: request.total,
        progress: progress(0, request.total),
        started_at: format_time(now),
        deadline: format_time(deadline),
        finished_at: None,
        message: request.message,
        change: request.change,
    });
    Started::New
}

/// Records progress of the running operation of `kind`. Does nothing if none is running.
pub fn advance(
    status: &mut CommonStatus,
    kind: OperationKind,
    step: &str,
    done: u32,
    message: impl Into<String>,
) {
    if let Some(op) = status.operation.as_mut().filter(|op| op.kind == kind) {
        op.step = step.to_owned();
        op.done = done.min(op.total.max(done));
        op.total = op.total.max(done);
        op.progress = progress(op.done, op.total);
        op.message = message.into();
    }
}

/// Finishes the running operation of `kind` and moves it to `lastOperation`. Returns the
/// finished record (for notifications), or `None` if no such operation was running.
pub fn finish(
    status: &mut CommonStatus,
    kind: OperationKind,
    phase: OperationPhase,
    now: Timestamp,
    message: impl Into<String>,
) -> Option<Operation> {
    if status.operation.as_ref().is_none_or(|op| op.kind != kind) {
        return None;
    }
    let mut op = status.operation.take()?;
    op.phase = phase;
    if phase == OperationPhase::Succeeded {
        op.done = op.total;
        op.progress = progress(op.done, op.total);
    }
    op.finished_at = Some(format_time(now));
    op.message = message.into();
    status.last_operation = Some(op.clone());
    Some(op)
}

/// Fails the running operation if its deadline has passed. Returns the failed record.
pub fn expire(status: &mut CommonStatus, now: Timestamp) -> Option<Operation> {
    let op = status.operation.as_ref()?;
    let deadline = parse_time(&op.deadline)?;
    if now < deadline {
        return None;
    }
    let kind = op.kind;
    let message = format!(
        "{} did not finish before its deadline {} (stopped at step {}, {}); no further \
         destructive action is taken until the spec changes",
        kind.as_str(),
        op.deadline,
        op.step,
        op.progress
    );
    finish(status, kind, OperationPhase::Failed, now, message)
}

/// Why destructive steps must not run: the last operation failed for the current generation.
/// A new spec generation clears the block (the user has changed their intent).
/// A failed backup blocks nothing: it changed nothing, and is reported on its own object. A
/// failed restore holds the cluster by its own record (`status.restore`), which a re-run or
/// the restore's deletion clears, not by the spec generation. A failed operation that was
/// Why the last `Backup` operation, run for backup `name`, failed — if it did.
pub fn failed_backup(status: &CommonStatus, name: &str) -> Option<String> {
    status
        .last_operation
        .as_ref()
        .filter(|op| {
            op.kind == OperationKind::Backup
                && op.phase == OperationPhase::Failed
                && op.change.backup.as_deref() == Some(name)
        })
        .map(|op| op.message.clone())
}

/// rolled back (`change.rolledBack`: the cluster runs as before it) blocks nothing either.
pub fn blocked_by_failure(status: &CommonStatus, generation: i64) -> Option<String> {
    let op = status.last_operation.as_ref()?;
    (op.phase == OperationPhase::Failed
        && op.generation == generation
        && op.change.rolled_back != Some(true)
        && !matches!(op.kind, OperationKind::Backup | OperationKind::Restore))
    .then(|| format!("{} operation failed: {}", op.kind.as_str(), op.message))
}

fn progress(done: u32, total: u32) -> String {
    format!("{done}/{total}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    fn scale(total: u32) -> OperationRequest {
        OperationRequest {
            kind: OperationKind::Scale,
            step: "AddMember".into(),
            total,
            change: OperationChange::default(),
            message: "scaling 3 -> 5".into(),
        }
    }

    fn clock() -> ManualClock {
        ManualClock::new("2026-03-01T00:00:00Z".parse().unwrap())
    }

    #[test]
    fn start_is_idempotent_and_keeps_the_deadline() {
        let clock = clock();
        let mut s = CommonStatus::default();
        assert_eq!(
            start(&mut s, scale(2), 1, clock.now(), Duration::from_secs(3600)),
            Started::New
        );
        let deadline = s.operation.as_ref().unwrap().deadline.clone();
        assert_eq!(deadline, "2026-03-01T01:00:00Z");
        clock.advance(Duration::from_secs(600));
        assert_eq!(
            start(&mut s, scale(2), 2, clock.now(), Duration::from_secs(3600)),
            Started::Resumed
        );
        let op = s.operation.as_ref().unwrap();
        assert_eq!(
            (op.deadline.as_str(), op.generation),
            (deadline.as_str(), 2)
        );
    }

    #[test]
    fn a_second_kind_waits_for_the_running_one() {
        let clock = clock();
        let mut s = CommonStatus::default();
        start(&mut s, scale(2), 1, clock.now(), Duration::from_secs(60));
        let upgrade = OperationRequest {
            kind: OperationKind::Upgrade,
            ..scale(3)
        };
        assert_eq!(
            start(&mut s, upgrade, 1, clock.now(), Duration::from_secs(60)),
            Started::Busy(OperationKind::Scale)
        );
    }

    #[test]
    fn progress_and_finish_move_the_record_to_last_operation() {
        let clock = clock();
        let mut s = CommonStatus::default();
        start(&mut s, scale(2), 1, clock.now(), Duration::from_secs(60));
        advance(
            &mut s,
            OperationKind::Scale,
            "PromoteLearner",
            1,
            "member-3 added",
        );
        assert_eq!(s.operation.as_ref().unwrap().progress, "1/2");
        let done = finish(
            &mut s,
            OperationKind::Scale,
            OperationPhase::Succeeded,
            clock.now(),
            "ok",
        )
        .unwrap();
        assert_eq!(
            (done.progress.as_str(), done.phase),
            ("2/2", OperationPhase::Succeeded)
        );
        assert!(s.operation.is_none());
        assert_eq!(s.last_operation.as_ref(), Some(&done));
        assert!(
            finish(
                &mut s,
                OperationKind::Scale,
                OperationPhase::Failed,
                clock.now(),
                ""
            )
            .is_none()
        );
    }

    #[test]
    fn deadline_fails_the_operation_and_blocks_until_the_spec_changes() {
        let clock = clock();
        let mut s = CommonStatus::default();
        start(&mut s, scale(2), 4, clock.now(), Duration::from_secs(3600));
        clock.advance(Duration::from_secs(3599));
        assert!(expire(&mut s, clock.now()).is_none());
        clock.advance(Duration::from_secs(1));
        let failed = expire(&mut s, clock.now()).unwrap();
        assert_eq!(failed.phase, OperationPhase::Failed);
        assert!(failed.message.contains("deadline"), "{}", failed.message);
        assert!(s.operation.is_none());
        assert!(blocked_by_failure(&s, 4).is_some());
        assert!(matches!(
            start(&mut s, scale(2), 4, clock.now(), Duration::from_secs(3600)),
            Started::Blocked(_)
        ));
        // A new generation is a new intent: the block is lifted.
        assert!(blocked_by_failure(&s, 5).is_none());
        assert_eq!(
            start(&mut s, scale(2), 5, clock.now(), Duration::from_secs(3600)),
            Started::New
        );
    }

    #[test]
    fn the_record_survives_a_restart_through_serialisation() {
        let clock = clock();
        let mut s = CommonStatus::default();
        start(&mut s, scale(2), 1, clock.now(), Duration::from_secs(10));
        let stored = serde_json::to_value(&s).unwrap();
        // A new operator process reads the stored status and enforces the same deadline.
        let mut restored: CommonStatus = serde_json::from_value(stored).unwrap();
        clock.advance(Duration::from_secs(11));
        assert!(expire(&mut restored, clock.now()).is_some());
    }
}
