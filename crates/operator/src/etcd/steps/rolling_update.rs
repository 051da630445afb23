//! RollingUpdate — rolls a changed version, image repository or Pod template out to the peers
//! one member at a time: followers first in ordinal order, the leader last (leadership is
//! handed to an updated member first). Before each member the whole cluster must be healthy:
//! quorate, every member answering, every member Pod ready and running its peer's current spec.
//! A version change is an `Upgrade` operation (`UPGRADE_TIMEOUT`), anything else a `Restart`.
//! etcd supports upgrades one minor version at a time and no minor downgrades; other jumps are
//! refused with `Degraded=UnsupportedUpgrade` and nothing is touched.
//!
//! 3.5 → 3.6: etcd 3.6 replays a member's WAL from its last snapshot and panics on any v2
//! request there other than a member's attributes or the cluster version ("detected disallowed
//! v2 WAL", etcd-io/etcd#20809). A cluster that ran 3.4 has such records: 3.4's `GET /health`
//! (the members' readiness probe) proposes a v2 `QGET` through raft on every call, and 3.5's
//! default `--snapshot-count` (100,000) keeps them in the WAL for long. So each 3.5 member is
//! first restarted on 3.5 with `--snapshot-count=1` (its peer's `snapshotCount`), the clean-up
//! etcd's 3.6 upgrade guide gives: its first applied entry makes it snapshot. Once it is healthy
//! again it moves to 3.6, which clears the setting.

use crate::resources::pods::CachedPod;
use std::time::Duration;

use async_trait::async_trait;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use steward_api::common::{OperationChange, OperationKind, OperationPhase};
use steward_api::etcd::EtcdPeer;

use crate::error::Error;
use crate::etcd::build::member::{SPEC_HASH, pod};
use crate::etcd::steps::reconcile_peers::cluster_peers;
use crate::etcd::validate::parse_version;
use crate::etcd::{EtcdPass, names::ClusterNames};
use crate::operation::{OperationRequest, Started};
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::resources::pods::is_ready;

/// See the module documentation.
pub struct RollingUpdate;

/// Why an upgrade from `from` to `to` is not supported, if it is not.
pub fn unsupported_jump(from: &str, to: &str) -> Option<String> {
    let (Ok(a), Ok(b)) = (parse_version(from), parse_version(to)) else {
        return None;
    };
    if b.minor > a.minor + 1 {
        return Some(format!(
            "etcd upgrades one minor version at a time: {from} → {to} skips 3.{}; upgrade to 3.{}.x first",
            a.minor + 1,
            a.minor + 1
        ));
    }
    if b.minor < a.minor {
        return Some(format!(
            "etcd does not support minor version downgrades ({from} → {to})"
        ));
    }
    None
}

/// (pure) Whether a member on `peer_version` must first restart with `--snapshot-count=1`
/// before it moves to `target` (3.5 → 3.6, not done yet): see the module documentation.
pub fn needs_v2_snapshot(peer_version: &str, target: &str, snapshot_count: Option<u64>) -> bool {
    matches!(
        (parse_version(peer_version), parse_version(target)),
        (Ok(a), Ok(b)) if (a.minor, b.minor) == (5, 6)
    ) && snapshot_count != Some(1)
}

fn pod_current(pod: &CachedPod, peer: &EtcdPeer, names: &ClusterNames) -> bool {
    let want = self::pod(peer, names)
        .and_then(|p| p.metadata.annotations)
        .and_then(|a| a.get(SPEC_HASH).cloned());
    let have = pod.annotations().get(SPEC_HASH).map(str::to_owned);
    want.is_some() && want == have
}

#[async_trait]
impl SubReconciler<EtcdPass> for RollingUpdate {
    fn name(&self) -> &'static str {
        "RollingUpdate"
    }

    async fn reconcile(&self, pass: &mut EtcdPass) -> Result<Outcome, Error> {
        let Some(observed) = pass.observed.clone().filter(|o| o.quorate()) else {
            return Ok(Outcome::Continue);
        };
        let spec = &pass.cluster.spec;
        let peers = cluster_peers(pass);
        let stale: Vec<_> = peers
            .iter()
            .filter(|p| {
                p.spec.version != spec.version
                    || p.spec.repository != spec.repository
                    || p.spec.pod_template != spec.pod_template
                    || p.spec.snapshot_count.is_some()
            })
            .cloned()
            .collect();
        let running = pass.core.status.operation.as_ref().map(|op| op.kind);
        if stale.is_empty() {
            for kind in [OperationKind::Upgrade, OperationKind::Restart] {
                if running == Some(kind) && all_current(pass, &peers) {
                    pass.core.finish_operation(
                        kind,
                        OperationPhase::Succeeded,
                        format!("all {} members run the current spec", peers.len()),
                    );
                }
            }
            return Ok(Outcome::Continue);
        }
        let from = observed.min_version().unwrap_or_default();
        if let Some(why) = unsupported_jump(&from, &spec.version) {
            pass.core.degrade("UnsupportedUpgrade", why);
            return Ok(Outcome::Continue);
        }
        let version_change = stale.iter().any(|p| p.spec.version != spec.version);
        let kind = if version_change {
            OperationKind::Upgrade
        } else {
            OperationKind::Restart
        };
        let total = u32::try_from(peers.len()).unwrap_or(1);
        match pass.core.start_operation(OperationRequest {
            kind,
            step: "UpdateMember".into(),
            total,
            change: OperationChange {
                old_version: version_change.then(|| from.clone()),
                new_version: version_change.then(|| spec.version.clone()),
                old_registry: stale
                    .iter()
                    .find(|p| p.spec.repository != spec.repository)
                    .map(|p| p.spec.repository.clone()),
                new_registry: stale
                    .iter()
                    .any(|p| p.spec.repository != spec.repository)
                    .then(|| spec.repository.clone()),
                ..OperationChange::default()
            },
            message: format!("updating {} members one at a time", stale.len()),
        }) {
            Started::New | Started::Resumed => {}
            Started::Busy(other) => {
                return Ok(Outcome::requeue(
                    Duration::from_secs(5),
                    format!("update waits for the running {} operation", other.as_str()),
                ));
            }
            Started::Blocked(why) => {
                pass.core.degrade("OperationFailed", why);
                return Ok(Outcome::Continue);
            }
        }
        let done = total.saturating_sub(u32::try_from(stale.len()).unwrap_or(0));
        // Health gate: everyone answers, every Pod is ready and current.
        let members = observed.members.len();
        let healthy = observed
            .members
            .iter()
            .filter(|m| observed.healthy(m.id))
            .count();
        if healthy < members || !all_current(pass, &peers) {
            pass.core.advance_operation(
                kind,
                "WaitForHealthy",
                done,
                format!("{healthy} of {members} members healthy; waiting before the next member"),
            );
            return Ok(Outcome::requeue(
                Duration::from_secs(2),
                "waiting for a healthy cluster",
            ));
        }
        let leader = observed.leader();
        let id_of = |name: &str| {
            observed
                .members
                .iter()
                .find(|m| m.name == name)
                .map(|m| m.id)
        };
        let mut order = stale.clone();
        order.sort_by_key(|p| {
            (
                id_of(&p.name_any()) == leader,
                pass.names.ordinal(&p.name_any()),
            )
        });
        let Some(next) = order.first() else {
            return Ok(Outcome::Continue);
        };
        let next_name = next.name_any();
        if id_of(&next_name) == leader && observed.voters().count() > 1 {
            // Hand leadership to an updated (or any other healthy) voter first.
            let to = observed
                .voters()
                .filter(|m| Some(m.id) != leader && observed.healthy(m.id))
                .min_by_key(|m| stale.iter().any(|p| p.name_any() == m.name));
            if let (Some(to), Some(admin), Some(url)) =
                (to, pass.admin.as_ref(), pass.endpoints.get(&next_name))
            {
                if let Err(err) = admin.move_leader(url, to.id).await {
                    tracing::warn!(error = %err, "moving leadership before the update failed; updating the leader anyway");
                } else {
                    pass.core.event(
                        EventType::Normal,
                        "LeaderMoved",
                        "RollingUpdate",
                        format!(
                            "moved leadership from {next_name} to {} before updating it",
                            to.name
                        ),
                    );
                    return Ok(Outcome::requeue(Duration::from_secs(1), "leader moved"));
                }
            }
        }
        let snapshot_first =
            needs_v2_snapshot(&next.spec.version, &spec.version, next.spec.snapshot_count);
        let patch = if snapshot_first {
            serde_json::json!({ "spec": { "snapshotCount": 1 } })
        } else {
            serde_json::json!({
                "spec": {
                    "version": spec.version,
                    "repository": spec.repository,
                    "podTemplate": spec.pod_template,
                    "snapshotCount": null,
                }
            })
        };
        let api: Api<EtcdPeer> = pass.ctx.api(&pass.core.namespace);
        api.patch(&next_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| {
                Error::kube(
                    "patch EtcdPeer",
                    format!("{}/{next_name}", pass.core.namespace),
                    source,
                )
            })?;
        if snapshot_first {
            let message = format!(
                "restarting {next_name} on {} with --snapshot-count=1 so that it snapshots its v2 WAL records before {} (etcd's 3.6 upgrade guide)",
                next.spec.version, spec.version
            );
            pass.core.event(
                EventType::Normal,
                "MemberSnapshotting",
                "RollingUpdate",
                message.clone(),
            );
            pass.core
                .advance_operation(kind, "SnapshotMember", done, message);
            return Ok(Outcome::requeue(
                Duration::from_secs(2),
                format!("{next_name} restarts to snapshot"),
            ));
        }
        pass.core.event(
            EventType::Normal,
            "MemberUpdating",
            "RollingUpdate",
            format!("updating member {next_name} to {}", spec.version),
        );
        pass.core
            .advance_operation(kind, "UpdateMember", done, format!("updating {next_name}"));
        Ok(Outcome::requeue(
            Duration::from_secs(2),
            format!("updating {next_name}"),
        ))
    }
}

fn all_current(pass: &EtcdPass, peers: &[std::sync::Arc<EtcdPeer>]) -> bool {
    peers.iter().all(|peer| {
        let key = ObjectRef::<CachedPod>::new(&peer.name_any()).within(&pass.core.namespace);
        pass.stores
            .pods
            .get(&key)
            .is_some_and(|p| is_ready(&p) && pod_current(&p, peer, &pass.names))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_minor_at_a_time_and_no_minor_downgrades() {
        assert_eq!(unsupported_jump("3.4.23", "3.4.30"), None);
        assert_eq!(
            unsupported_jump("3.4.23", "3.4.1"),
            None,
            "patch downgrades are fine"
        );
        assert_eq!(unsupported_jump("3.4.23", "3.5.0"), None);
        assert!(unsupported_jump("3.4.23", "3.6.0").unwrap().contains("3.5"));
        assert_eq!(unsupported_jump("3.5.34", "3.6.15"), None);
        assert!(
            unsupported_jump("3.5.1", "3.4.23")
                .unwrap()
                .contains("downgrade")
        );
    }

    #[test]
    fn a_3_5_member_snapshots_once_before_it_moves_to_3_6() {
        assert!(needs_v2_snapshot("3.5.34", "3.6.15", None));
        assert!(!needs_v2_snapshot("3.5.34", "3.6.15", Some(1)), "done once");
        assert!(needs_v2_snapshot("3.5.34", "3.6.15", Some(100)));
        assert!(!needs_v2_snapshot("3.4.23", "3.5.34", None));
        assert!(!needs_v2_snapshot("3.5.1", "3.5.34", None));
        assert!(!needs_v2_snapshot("3.6.15", "3.6.15", Some(1)));
    }
}
