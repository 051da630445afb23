//! RemoveIncompatibleProcesses — a process that speaks another protocol than the cluster is
//! listed in `cluster.incompatible_connections`; after an upgrade's bounce it is one that did
//! not come back on the new version. Matched to its process group by address, its Pod is
//! deleted so that AddPods recreates it from the spec (seed 002). Only groups whose process has
//! not reported to the database for [`MISSING_FOR`] qualify (a process that restarts during
//! the bounce is briefly listed too); groups marked for removal and Pods already terminating
//! are left alone.

use std::collections::BTreeSet;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use steward_api::foundationdb::ProcessGroupStatus;

use super::{SOON, condition, conditions as c, delete, group_pods};
use crate::error::Error;
use crate::foundationdb::FdbPass;
use crate::foundationdb::admin::status::address_ip;
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// How long a group's process must have been missing before its incompatible Pod goes.
pub const MISSING_FOR: i64 = 30;

/// See the module documentation.
pub struct RemoveIncompatibleProcesses;

/// (pure) The process groups (not being removed) with an address among `incompatible`
/// (`IP:PORT` or `IP`) whose process has been missing for [`MISSING_FOR`] seconds at `now`.
pub fn incompatible_groups(
    groups: &[ProcessGroupStatus],
    incompatible: &[String],
    now: i64,
) -> Vec<String> {
    let ips: BTreeSet<&str> = incompatible.iter().map(|a| address_ip(a)).collect();
    groups
        .iter()
        .filter(|g| g.removal_timestamp.is_none())
        .filter(|g| g.addresses.iter().any(|a| ips.contains(a.as_str())))
        .filter(|g| {
            condition(g, c::MISSING_PROCESSES).is_some_and(|m| now - m.timestamp >= MISSING_FOR)
        })
        .map(|g| g.process_group_id.clone())
        .collect()
}

#[async_trait]
impl SubReconciler<FdbPass> for RemoveIncompatibleProcesses {
    fn name(&self) -> &'static str {
        "RemoveIncompatibleProcesses"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let Some(db) = &pass.db else {
            return Ok(Outcome::Continue);
        };
        if db.cluster.incompatible_connections.is_empty() {
            return Ok(Outcome::Continue);
        }
        let ids = incompatible_groups(
            &pass.status.process_groups,
            &db.cluster.incompatible_connections,
            pass.core.now.as_second(),
        );
        let pods = group_pods(pass);
        let doomed: Vec<String> = ids
            .into_iter()
            .filter(|id| {
                pods.get(id)
                    .is_some_and(|p| p.metadata.deletion_timestamp.is_none())
            })
            .collect();
        if doomed.is_empty() {
            return Ok(Outcome::Continue);
        }
        let api: Api<Pod> = Api::namespaced(pass.ctx.client.clone(), &pass.core.namespace);
        for id in &doomed {
            delete(&api, id, "Pod", &pass.core.namespace).await?;
        }
        pass.core.event(
            EventType::Normal,
            "IncompatibleProcessesRemoved",
            "RemoveIncompatibleProcesses",
            format!(
                "recreating the Pods of {}: their processes speak another protocol than the cluster",
                doomed.join(", ")
            ),
        );
        Ok(Outcome::requeue(
            SOON,
            "incompatible processes' Pods deleted",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_api::foundationdb::ProcessGroupCondition;

    fn group(id: &str, ip: &str, missing_since: Option<i64>, removing: bool) -> ProcessGroupStatus {
        let mut g: ProcessGroupStatus =
            serde_json::from_value(serde_json::json!({"processGroupID": id})).unwrap();
        g.addresses = vec![ip.to_owned()];
        if let Some(t) = missing_since {
            g.conditions.push(ProcessGroupCondition {
                type_: c::MISSING_PROCESSES.to_owned(),
                timestamp: t,
            });
        }
        if removing {
            g.removal_timestamp = Some("2026-11-28T00:00:00Z".to_owned());
        }
        g
    }

    #[test]
    fn only_long_missing_groups_at_incompatible_addresses_go() {
        let groups = vec![
            group("a", "10.0.0.1", Some(0), false),
            group("b", "10.0.0.2", Some(90), false),
            group("c", "10.0.0.3", None, false),
            group("d", "10.0.0.4", Some(0), true),
            group("e", "10.0.0.5", Some(0), false),
        ];
        let incompatible: Vec<String> = [
            "10.0.0.1:4501",
            "10.0.0.2:4501",
            "10.0.0.3:4501",
            "10.0.0.4:4501",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        // a: missing 100 s; b: only 10 s (still restarting); c: reports; d: being removed;
        // e: not incompatible.
        assert_eq!(
            incompatible_groups(&groups, &incompatible, 100),
            vec!["a".to_owned()]
        );
    }
}
