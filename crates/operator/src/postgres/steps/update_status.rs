//! UpdateStatus — runs first and last. Computes the engine's status from what
//! `ObserveInstances` saw: every instance's role, readiness, timeline, LSN and lag behind the
//! primary, whether it streams; `readyInstances`, `replicas` (for the scale subresource), the
//! selector, the system identifier; the `Available` condition (a writable primary; when the
//! primary's Pod cannot be scheduled, reason `Unschedulable` with the scheduler's message) and
//! `Replicating` (every replica streams); `Degraded=Unschedulable` while any instance's Pod
//! cannot be placed; with backups on, `ContinuousArchiving` from the primary's
//! `pg_stat_archiver` ([`archiving`]). Finishes the `Bootstrap` operation once the primary
//! and every wanted replica are up. Never writes; the runtime writes status once per pass.

use async_trait::async_trait;
use steward_api::common::{OperationKind, OperationPhase, condition_types};
use steward_api::postgres::{InstanceRole, InstanceStatus};

use crate::conditions::Status;
use crate::error::Error;
use crate::pipeline::{Outcome, SubReconciler};
use crate::postgres::PostgresPass;
use crate::postgres::admin::{ArchiverStats, WalPosition};
use crate::resources::Labels;

/// See the module documentation.
pub struct UpdateStatus;

/// The condition type of WAL archiving's health.
pub const CONTINUOUS_ARCHIVING: &str = "ContinuousArchiving";

fn at(seconds: Option<i64>) -> String {
    seconds
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .map_or_else(|| "an unknown time".to_owned(), |t| t.to_string())
}

/// (pure) `ContinuousArchiving` from the stanza and the primary's `pg_stat_archiver`; `None`
/// when the primary did not answer (the condition keeps what it said).
pub fn archiving(
    stanza: Option<&str>,
    archiver: Option<&ArchiverStats>,
) -> Option<(Status, &'static str, String)> {
    if stanza.is_none() {
        return Some((
            Status::False,
            "StanzaPending",
            "the pgBackRest stanza is not created yet; PostgreSQL keeps its WAL until it is"
                .to_owned(),
        ));
    }
    let a = archiver?;
    let last = match &a.last_archived_wal {
        Some(wal) => format!("last archived {wal} at {}", at(a.last_archived_time)),
        None => "nothing archived yet".to_owned(),
    };
    if a.failing() {
        return Some((
            Status::False,
            "ArchiveFailing",
            format!(
                "archiving {} failed at {} ({} failed attempts so far; PostgreSQL keeps the WAL \
                 and retries); {last}",
                a.last_failed_wal.as_deref().unwrap_or("a segment"),
                at(a.last_failed_time),
                a.failed_count
            ),
        ));
    }
    Some((Status::True, "Archiving", last))
}

#[async_trait]
impl SubReconciler<PostgresPass> for UpdateStatus {
    fn name(&self) -> &'static str {
        "UpdateStatus"
    }

    async fn reconcile(&self, pass: &mut PostgresPass) -> Result<Outcome, Error> {
        pass.status.selector = format!(
            "{},app.kubernetes.io/component=instance",
            Labels::cluster_selector("postgres", &pass.core.name)
        );
        let generation = pass.core.generation;
        let wanted = pass.cluster.spec.instances;
        if !pass.observed {
            pass.core.status.generations.needs_scale =
                (pass.status.replicas != wanted).then_some(generation);
            return Ok(Outcome::Continue);
        }
        let primary = pass.primary();
        let primary_lsn = primary
            .as_deref()
            .and_then(|p| pass.instance(p))
            .and_then(|v| match v.wal {
                Some(WalPosition::Primary { current }) => Some(current),
                _ => None,
            });
        let members: Vec<String> = pass
            .status
            .instances
            .iter()
            .map(|i| i.name.clone())
            .collect();
        let mut instances = Vec::new();
        for name in members {
            let view = pass.instance(&name);
            let role = if primary.as_deref() == Some(name.as_str()) {
                InstanceRole::Primary
            } else {
                InstanceRole::Replica
            };
            let ready = view.is_some_and(|v| match role {
                InstanceRole::Primary => v.writable(),
                InstanceRole::Replica => v.standby(),
            });
            let lsn = view.and_then(|v| v.replayed());
            let lag = match (role, lsn, primary_lsn) {
                (InstanceRole::Replica, Some(l), Some(p)) => Some(l.bytes_behind(p)),
                _ => None,
            };
            instances.push(InstanceStatus {
                name: name.clone(),
                role,
                ready,
                timeline: view.and_then(|v| v.info).map(|i| i.timeline),
                lsn: lsn.map(|l| l.to_string()),
                lag_bytes: lag,
                streaming: view.is_some_and(|v| v.streaming),
            });
        }
        instances.sort_by_key(|i| pass.names.ordinal(&i.name));
        let ready = instances.iter().filter(|i| i.ready).count();
        let replicas_total = instances
            .iter()
            .filter(|i| i.role == InstanceRole::Replica)
            .count();
        let streaming = instances.iter().filter(|i| i.streaming).count();
        pass.status.ready_instances = i32::try_from(ready).unwrap_or(i32::MAX);
        pass.status.replicas = i32::try_from(instances.len()).unwrap_or(i32::MAX);
        let primary_view = primary.as_deref().and_then(|p| pass.instance(p)).cloned();
        if let Some(info) = primary_view.as_ref().and_then(|v| v.info) {
            pass.status.system_identifier = Some(info.system_identifier.to_string());
        }
        let writable = primary_view.as_ref().is_some_and(|v| v.writable());
        let unplaced: Vec<String> = pass
            .instances
            .iter()
            .filter_map(|v| Some(format!("{}: {}", v.name, v.unschedulable.as_ref()?)))
            .collect();
        if !unplaced.is_empty() {
            pass.core.degrade(
                "Unschedulable",
                format!("Pods cannot be scheduled: {}", unplaced.join("; ")),
            );
        }
        let primary_unplaced = primary_view.as_ref().and_then(|v| v.unschedulable.clone());
        match (&primary, writable) {
            (Some(p), true) => pass.core.set_condition(
                condition_types::AVAILABLE,
                Status::True,
                "PrimaryWritable",
                format!(
                    "primary {p} accepts writes; {ready} of {} instances ready",
                    instances.len()
                ),
            ),
            (Some(p), false) => match primary_unplaced {
                Some(why) => pass.core.set_condition(
                    condition_types::AVAILABLE,
                    Status::False,
                    "Unschedulable",
                    format!("primary {p} cannot be scheduled: {why}"),
                ),
                None => match primary_view.as_ref().and_then(|v| v.last_fatal.clone()) {
                    // PostgreSQL said why it stopped: say it (a bad setting, a full disk, ...).
                    Some(fatal) => pass.core.set_condition(
                        condition_types::AVAILABLE,
                        Status::False,
                        "PrimaryFailing",
                        format!(
                            "primary {p} does not accept writes; its last run ended with: {fatal}"
                        ),
                    ),
                    None => pass.core.set_condition(
                        condition_types::AVAILABLE,
                        Status::False,
                        "PrimaryNotReady",
                        format!("primary {p} does not accept writes"),
                    ),
                },
            },
            (None, _) => pass.core.set_condition(
                condition_types::AVAILABLE,
                Status::False,
                "NoPrimary",
                "no primary yet",
            ),
        }
        if streaming == replicas_total {
            pass.core.set_condition(
                "Replicating",
                Status::True,
                "AllStreaming",
                format!("{streaming} of {replicas_total} replicas streaming"),
            );
        } else {
            pass.core.set_condition(
                "Replicating",
                Status::False,
                "NotStreaming",
                format!("{streaming} of {replicas_total} replicas streaming"),
            );
        }
        let bootstrapping = pass
            .core
            .status
            .operation
            .as_ref()
            .is_some_and(|op| op.kind == OperationKind::Bootstrap);
        if bootstrapping
            && writable
            && i32::try_from(ready).unwrap_or(0) >= wanted
            && streaming == replicas_total
        {
            pass.core.finish_operation(
                OperationKind::Bootstrap,
                OperationPhase::Succeeded,
                format!("primary and {replicas_total} streaming replicas ready"),
            );
        }
        if pass
            .validated
            .as_ref()
            .is_some_and(|v| v.pgbackrest.is_some())
        {
            let stanza = pass.status.backups.as_ref().and_then(|b| b.stanza.clone());
            let archiver = primary_view.as_ref().and_then(|v| v.archiver.clone());
            let last_archived = archiver
                .as_ref()
                .and_then(|a| a.last_archived_time)
                .and_then(|t| jiff::Timestamp::from_second(t).ok())
                .map(crate::clock::format_time);
            if let (Some(b), Some(at)) = (pass.status.backups.as_mut(), last_archived) {
                b.last_recoverability_point = Some(at);
            }
            if let Some((status, reason, message)) = archiving(stanza.as_deref(), archiver.as_ref())
            {
                pass.core
                    .set_condition(CONTINUOUS_ARCHIVING, status, reason, message);
            }
        } else {
            pass.core
                .status
                .conditions
                .retain(|c| c.type_ != CONTINUOUS_ARCHIVING);
        }
        pass.status.instances = instances;
        pass.core.status.generations.needs_scale =
            (pass.status.replicas != wanted).then_some(generation);
        Ok(Outcome::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archiving_is_healthy_until_a_failure_comes_after_the_last_success() {
        let (status, reason, _) = archiving(None, None).unwrap();
        assert_eq!((status, reason), (Status::False, "StanzaPending"));
        assert_eq!(archiving(Some("db"), None), None, "unknown: unchanged");
        let fresh = ArchiverStats::default();
        let (status, reason, message) = archiving(Some("db"), Some(&fresh)).unwrap();
        assert_eq!((status, reason), (Status::True, "Archiving"));
        assert_eq!(message, "nothing archived yet");
        let mut stats = ArchiverStats {
            archived_count: 3,
            last_archived_wal: Some("000000010000000000000003".into()),
            last_archived_time: Some(1_800_000_100),
            failed_count: 1,
            last_failed_wal: Some("000000010000000000000001".into()),
            last_failed_time: Some(1_800_000_000),
        };
        let (status, _, message) = archiving(Some("db"), Some(&stats)).unwrap();
        assert_eq!(status, Status::True, "an old failure is over");
        assert!(message.contains("000000010000000000000003"), "{message}");
        stats.last_failed_time = Some(1_800_000_200);
        stats.last_failed_wal = Some("000000010000000000000004".into());
        stats.failed_count = 4;
        let (status, reason, message) = archiving(Some("db"), Some(&stats)).unwrap();
        assert_eq!((status, reason), (Status::False, "ArchiveFailing"));
        assert!(
            message.contains("archiving 000000010000000000000004 failed"),
            "{message}"
        );
        assert!(message.contains("4 failed attempts"), "{message}");
    }
}
