//! (pure) What a PostgreSQL cluster looks like to the operator, and the decisions taken from
//! it: which replica to promote ([`choose_target`]), whether the primary has been down long
//! enough to fail over ([`failover_due`]), which instance to add or remove next
//! ([`plan_scale`]) and which instance a rolling restart handles next ([`plan_restart`]).
//! Nothing here touches the network.

use steward_api::postgres::InstanceRole;

use crate::postgres::admin::{ArchiverStats, Lsn, ServerInfo, WalPosition};
pub use crate::resources::nodes::NodeState;
use jiff::Timestamp;

/// One instance as observed on this pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstanceView {
    /// Instance (and Pod) name.
    pub name: String,
    /// Its ordinal.
    pub ordinal: u32,
    /// A Pod exists and is not being deleted.
    pub pod: bool,
    /// A Pod exists and is being deleted.
    pub terminating: bool,
    /// The role label on its Pod.
    pub labelled: Option<InstanceRole>,
    /// The Pod is Ready.
    pub pod_ready: bool,
    /// The Pod's IP.
    pub ip: Option<String>,
    /// The Pod runs an older spec than wanted (its spec hash differs).
    pub stale: bool,
    /// Its claim exists.
    pub claim: bool,
    /// What the server said, when it answered.
    pub info: Option<ServerInfo>,
    /// Its WAL position, when it answered.
    pub wal: Option<WalPosition>,
    /// A replica streaming from the primary (seen in the primary's `pg_stat_replication`).
    pub streaming: bool,
    /// The scheduler's message when its Pod cannot be placed on any node.
    pub unschedulable: Option<String>,
    /// The last FATAL line of the database container's last failed run.
    pub last_fatal: Option<String>,
    /// The Node its Pod is bound to.
    pub node: Option<String>,
    /// What that Node says about itself.
    pub node_state: NodeState,
    /// WAL archiving, asked of the primary while backups are on.
    pub archiver: Option<ArchiverStats>,
}

impl InstanceView {
    /// Answered over SQL with a ready Pod.
    pub fn answering(&self) -> bool {
        self.pod && self.pod_ready && self.info.is_some()
    }

    /// Answering and writable.
    pub fn writable(&self) -> bool {
        self.answering() && self.info.is_some_and(|i| !i.in_recovery)
    }

    /// Answering and in recovery (a standby).
    pub fn standby(&self) -> bool {
        self.answering() && self.info.is_some_and(|i| i.in_recovery)
    }

    /// How far its data goes: a standby's received (or replayed) position, a primary's
    /// current one.
    pub fn position(&self) -> Option<Lsn> {
        match self.wal? {
            WalPosition::Primary { current } => Some(current),
            WalPosition::Standby { receive, replay } => match (receive, replay) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
        }
    }

    /// The replayed position (what a promoted standby would serve).
    pub fn replayed(&self) -> Option<Lsn> {
        self.wal.and_then(|w| w.applied())
    }
}

/// The best replica to promote: answering standbys only, the one with the most WAL (received
/// or replayed), ties broken by name. With `requested`, that instance if it qualifies.
pub fn choose_target(
    instances: &[InstanceView],
    primary: &str,
    requested: Option<&str>,
) -> Result<String, String> {
    let candidates: Vec<&InstanceView> = instances
        .iter()
        .filter(|i| i.name != primary && i.standby() && i.node_state != NodeState::Lost)
        .collect();
    if let Some(want) = requested {
        return match instances.iter().find(|i| i.name == want) {
            None => Err(format!(
                "switchover target {want} is not an instance of this cluster"
            )),
            Some(_) if want == primary => Err(format!("{want} is already the primary")),
            Some(i) if !i.standby() => Err(format!(
                "switchover target {want} is not a ready, answering replica"
            )),
            Some(i) => Ok(i.name.clone()),
        };
    }
    candidates
        .iter()
        .max_by(|a, b| {
            // A replica on a cordoned Node is promoted only when no other can be: its Node is
            // about to be drained.
            (a.node_state == NodeState::Usable)
                .cmp(&(b.node_state == NodeState::Usable))
                .then_with(|| a.position().cmp(&b.position()))
                .then_with(|| b.ordinal.cmp(&a.ordinal))
        })
        .map(|i| i.name.clone())
        .ok_or_else(|| "no ready replica answers; nothing can be promoted".to_owned())
}

/// The replica to switch over to because the primary's Node is cordoned: the best answering
/// replica on a usable Node. `Ok(None)` when the primary's Node is not cordoned.
pub fn maintenance_target(
    instances: &[InstanceView],
    primary: &str,
) -> Result<Option<String>, String> {
    let Some(current) = instances.iter().find(|i| i.name == primary) else {
        return Ok(None);
    };
    if current.node_state != NodeState::Cordoned {
        return Ok(None);
    }
    let node = current.node.as_deref().unwrap_or("?");
    match choose_target(instances, primary, None) {
        Ok(target)
            if instances
                .iter()
                .any(|i| i.name == target && i.node_state == NodeState::Usable) =>
        {
            Ok(Some(target))
        }
        Ok(_) => Err(format!(
            "the Node {node} of primary {primary} is cordoned and every answering replica is on \
             a cordoned Node too; the primary's disruption budget holds the drain"
        )),
        Err(why) => Err(format!(
            "the Node {node} of primary {primary} is cordoned and no replica can take over \
             ({why}); the primary's disruption budget holds the drain"
        )),
    }
}

/// Whether the primary has been not ready long enough for an automatic fail-over: at least
/// `delay_seconds`. `unready_since` is kept in status with whole seconds (truncated), so the
/// elapsed whole seconds must exceed the delay — at most one second more than it.
pub fn failover_due(unready_since: Option<Timestamp>, now: Timestamp, delay_seconds: u32) -> bool {
    unready_since
        .is_some_and(|since| now.as_second() - since.as_second() > i64::from(delay_seconds))
}

/// The next instance to create or remove.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScaleAction {
    /// Nothing to do.
    Converged,
    /// Create the instance with this ordinal (a replica).
    Add(u32),
    /// Remove this replica.
    Remove(String),
}

/// Adds the lowest free ordinal while fewer than `wanted` instances exist; removes the
/// highest-ordinal replica (never the primary) while more do. One change per pass.
pub fn plan_scale(
    existing: &[u32],
    primary_ordinal: Option<u32>,
    wanted: u32,
    cluster: &str,
) -> ScaleAction {
    let count = u32::try_from(existing.len()).unwrap_or(u32::MAX);
    if count < wanted {
        let free = (0..).find(|o| !existing.contains(o)).unwrap_or(count);
        return ScaleAction::Add(free);
    }
    if count > wanted {
        let victim = existing
            .iter()
            .filter(|o| Some(**o) != primary_ordinal)
            .max()
            .copied();
        if let Some(v) = victim {
            return ScaleAction::Remove(format!("{cluster}-{v}"));
        }
    }
    ScaleAction::Converged
}

/// The next thing a rolling restart does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestartAction {
    /// Every instance runs the wanted spec.
    Done,
    /// Delete this replica's Pod (it is recreated with the new spec).
    RestartReplica(String),
    /// Wait: an instance is coming back or not healthy.
    Wait(String),
    /// Every replica is done: switch over to a replica so that the old primary can restart
    /// as a replica.
    Switchover,
    /// A single-instance cluster: restart the primary itself (a short outage).
    RestartPrimary(String),
}

/// Replicas first in ordinal order, each back and healthy before the next; then a switchover
/// so that the primary restarts last, as a replica.
pub fn plan_restart(instances: &[InstanceView], primary: &str) -> RestartAction {
    let mut replicas: Vec<&InstanceView> = instances.iter().filter(|i| i.name != primary).collect();
    replicas.sort_by_key(|i| i.ordinal);
    if let Some(down) = replicas
        .iter()
        .find(|i| !(i.stale || (i.standby() && i.streaming)))
    {
        return RestartAction::Wait(format!("{} is not back and streaming yet", down.name));
    }
    if let Some(next) = replicas.iter().find(|i| i.stale) {
        return RestartAction::RestartReplica(next.name.clone());
    }
    match instances.iter().find(|i| i.name == primary) {
        Some(p) if p.stale && replicas.is_empty() => RestartAction::RestartPrimary(p.name.clone()),
        Some(p) if p.stale => RestartAction::Switchover,
        _ => RestartAction::Done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(in_recovery: bool) -> ServerInfo {
        ServerInfo {
            version_num: 150_000,
            in_recovery,
            timeline: 1,
            system_identifier: 7,
        }
    }

    fn standby(ordinal: u32, lsn: u64) -> InstanceView {
        InstanceView {
            name: format!("demo-{ordinal}"),
            ordinal,
            pod: true,
            pod_ready: true,
            claim: true,
            labelled: Some(InstanceRole::Replica),
            info: Some(info(true)),
            wal: Some(WalPosition::Standby {
                receive: Some(Lsn(lsn)),
                replay: Some(Lsn(lsn.saturating_sub(1))),
            }),
            streaming: true,
            ..InstanceView::default()
        }
    }

    fn primary(ordinal: u32) -> InstanceView {
        InstanceView {
            labelled: Some(InstanceRole::Primary),
            info: Some(info(false)),
            wal: Some(WalPosition::Primary { current: Lsn(100) }),
            streaming: false,
            ..standby(ordinal, 100)
        }
    }

    #[test]
    fn the_most_advanced_replica_wins_and_ties_go_to_the_lower_name() {
        let all = [primary(0), standby(1, 50), standby(2, 80)];
        assert_eq!(choose_target(&all, "demo-0", None), Ok("demo-2".into()));
        let all = [primary(0), standby(1, 80), standby(2, 80)];
        assert_eq!(choose_target(&all, "demo-0", None), Ok("demo-1".into()));
        let mut down = standby(2, 999);
        down.pod_ready = false;
        let all = [primary(0), standby(1, 10), down];
        assert_eq!(
            choose_target(&all, "demo-0", None),
            Ok("demo-1".into()),
            "a replica that does not answer is never promoted"
        );
        assert!(choose_target(&[primary(0)], "demo-0", None).is_err());
    }

    #[test]
    fn a_requested_target_must_be_an_answering_replica() {
        let mut lagging = standby(2, 1);
        let all = [primary(0), standby(1, 80), lagging.clone()];
        assert_eq!(
            choose_target(&all, "demo-0", Some("demo-2")),
            Ok("demo-2".into())
        );
        assert!(
            choose_target(&all, "demo-0", Some("demo-0"))
                .unwrap_err()
                .contains("already")
        );
        assert!(
            choose_target(&all, "demo-0", Some("demo-9"))
                .unwrap_err()
                .contains("not an instance")
        );
        lagging.info = None;
        let all = [primary(0), standby(1, 80), lagging];
        assert!(choose_target(&all, "demo-0", Some("demo-2")).is_err());
    }

    fn on(mut view: InstanceView, node: &str, state: NodeState) -> InstanceView {
        view.node = Some(node.into());
        view.node_state = state;
        view
    }

    #[test]
    fn replicas_on_cordoned_nodes_come_last_and_on_lost_nodes_never() {
        let all = [
            primary(0),
            on(standby(1, 90), "b", NodeState::Cordoned),
            on(standby(2, 10), "c", NodeState::Usable),
        ];
        assert_eq!(choose_target(&all, "demo-0", None), Ok("demo-2".into()));
        let all = [
            primary(0),
            on(standby(1, 90), "b", NodeState::Cordoned),
            on(standby(2, 99), "c", NodeState::Lost),
        ];
        assert_eq!(
            choose_target(&all, "demo-0", None),
            Ok("demo-1".into()),
            "a fail-over takes a replica on a cordoned node when nothing else can serve"
        );
        let all = [primary(0), on(standby(1, 99), "b", NodeState::Lost)];
        assert!(choose_target(&all, "demo-0", None).is_err());
    }

    #[test]
    fn a_cordoned_primary_moves_to_a_replica_on_a_usable_node() {
        let usable = [
            on(primary(0), "a", NodeState::Usable),
            on(standby(1, 90), "b", NodeState::Usable),
        ];
        assert_eq!(maintenance_target(&usable, "demo-0"), Ok(None));
        let cordoned = [
            on(primary(0), "a", NodeState::Cordoned),
            on(standby(1, 10), "b", NodeState::Usable),
            on(standby(2, 90), "a", NodeState::Cordoned),
        ];
        assert_eq!(
            maintenance_target(&cordoned, "demo-0"),
            Ok(Some("demo-1".into()))
        );
        let stuck = [
            on(primary(0), "a", NodeState::Cordoned),
            on(standby(2, 90), "a", NodeState::Cordoned),
        ];
        let why = maintenance_target(&stuck, "demo-0").unwrap_err();
        assert!(
            why.contains("Node a") && why.contains("cordoned Node too"),
            "{why}"
        );
        let alone = [on(primary(0), "a", NodeState::Cordoned)];
        let why = maintenance_target(&alone, "demo-0").unwrap_err();
        assert!(why.contains("no replica can take over"), "{why}");
    }

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn fail_over_waits_for_the_detection_delay() {
        let t0 = ts(1_000);
        assert!(!failover_due(None, ts(5_000), 10));
        assert!(!failover_due(Some(t0), ts(1_009), 10));
        // 1_000 may stand for 1_000.9: ten whole seconds later is not yet ten seconds.
        assert!(!failover_due(Some(t0), ts(1_010), 10));
        assert!(failover_due(Some(t0), ts(1_011), 10));
    }

    #[test]
    fn scaling_adds_the_lowest_free_ordinal_and_never_removes_the_primary() {
        assert_eq!(plan_scale(&[0, 1], Some(0), 3, "demo"), ScaleAction::Add(2));
        assert_eq!(plan_scale(&[0, 2], Some(0), 3, "demo"), ScaleAction::Add(1));
        assert_eq!(
            plan_scale(&[0, 1, 2], Some(0), 2, "demo"),
            ScaleAction::Remove("demo-2".into())
        );
        assert_eq!(
            plan_scale(&[0, 1, 2], Some(2), 2, "demo"),
            ScaleAction::Remove("demo-1".into())
        );
        assert_eq!(plan_scale(&[2], Some(2), 1, "demo"), ScaleAction::Converged);
        assert_eq!(
            plan_scale(&[0, 1], Some(0), 2, "demo"),
            ScaleAction::Converged
        );
    }

    #[test]
    fn a_rolling_restart_does_replicas_in_order_then_switches_over() {
        let mut all = vec![primary(0), standby(1, 1), standby(2, 1)];
        for i in &mut all {
            i.stale = true;
        }
        assert_eq!(
            plan_restart(&all, "demo-0"),
            RestartAction::RestartReplica("demo-1".into())
        );
        all[1].stale = false;
        all[1].streaming = false;
        assert!(
            matches!(plan_restart(&all, "demo-0"), RestartAction::Wait(w) if w.contains("demo-1"))
        );
        all[1].streaming = true;
        assert_eq!(
            plan_restart(&all, "demo-0"),
            RestartAction::RestartReplica("demo-2".into())
        );
        all[2].stale = false;
        assert_eq!(plan_restart(&all, "demo-0"), RestartAction::Switchover);
        all[0].stale = false;
        assert_eq!(plan_restart(&all, "demo-0"), RestartAction::Done);
        let mut single = vec![primary(0)];
        single[0].stale = true;
        assert_eq!(
            plan_restart(&single, "demo-0"),
            RestartAction::RestartPrimary("demo-0".into())
        );
    }
}
