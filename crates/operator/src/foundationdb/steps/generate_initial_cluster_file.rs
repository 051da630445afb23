//! GenerateInitialClusterFile — once, when the cluster has no connection string: takes
//! `seedConnectionString`, or chooses `2R - 1` coordinators among the Pods that have an address
//! (storage first, then log, then stateless; each in another zone) and writes
//! `<description>:<random ID>@<coordinators>` to `status.connectionString` (seed 002). The
//! ConfigMap carries it to the Pods on the next pass. It waits until every storage process
//! group's Pod has an address: otherwise a slow start (a loaded Node) left only a stateless Pod
//! to choose, and the first coordinator sat where a lost Pod loses it (found in CI: the
//! buggification e2e crash-looped that stateless group, and the database lost its only
//! coordinator).

use async_trait::async_trait;
use rand::Rng;
use rand::distr::Alphanumeric;

use super::{SOON, class_of, group_pods};
use crate::error::Error;
use crate::foundationdb::FdbPass;
use crate::foundationdb::build::PORT;
use crate::foundationdb::plan::{self, Candidate};
use crate::pipeline::{EventType, Outcome, SubReconciler};
use steward_api::foundationdb::ProcessClass;

/// See the module documentation.
pub struct GenerateInitialClusterFile;

/// (pure) The cluster file's description: the cluster's name with what FoundationDB does not
/// allow (anything but letters, digits and `_`) as `_`.
pub fn description(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// (pure) Of `(id, is storage, has an address)` of the groups, the storage groups whose Pod has
/// no address yet.
pub fn storage_without_address(groups: &[(String, bool, bool)]) -> Vec<String> {
    groups
        .iter()
        .filter(|(_, storage, addressed)| *storage && !addressed)
        .map(|(id, ..)| id.clone())
        .collect()
}

#[async_trait]
impl SubReconciler<FdbPass> for GenerateInitialClusterFile {
    fn name(&self) -> &'static str {
        "GenerateInitialClusterFile"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        if pass.status.connection_string.is_some() {
            return Ok(Outcome::Continue);
        }
        if let Some(seed) = pass.cluster.spec.seed_connection_string.clone() {
            pass.status.connection_string = Some(seed.trim().to_owned());
            return Ok(Outcome::requeue(
                SOON,
                "cluster file taken from seedConnectionString",
            ));
        }
        let pods = group_pods(pass);
        let candidates: Vec<Candidate> = pass
            .status
            .process_groups
            .iter()
            .filter(|g| g.removal_timestamp.is_none())
            .filter_map(|g| {
                let pod = pods.get(&g.process_group_id)?;
                let ip = pod.status.as_ref()?.pod_ip.clone()?;
                let zone = pod.spec.as_ref()?.node_name.clone()?;
                Some(Candidate {
                    address: format!("{ip}:{PORT}"),
                    class: class_of(pass, g)?,
                    zone,
                })
            })
            .collect();
        let rows: Vec<(String, bool, bool)> = pass
            .status
            .process_groups
            .iter()
            .filter(|g| g.removal_timestamp.is_none())
            .map(|g| {
                let storage = class_of(pass, g) == Some(ProcessClass::Storage);
                // As for a candidate: an address and a Node.
                let addressed = pods.get(&g.process_group_id).is_some_and(|p| {
                    p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some()
                        && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                });
                (g.process_group_id.clone(), storage, addressed)
            })
            .collect();
        let waiting = storage_without_address(&rows);
        if !waiting.is_empty() {
            return Ok(Outcome::requeue(
                SOON,
                format!(
                    "the first coordinators wait for the storage Pods' addresses: {}",
                    waiting.join(", ")
                ),
            ));
        }
        let want = pass.coordinators_wanted();
        let chosen = match plan::choose_coordinators(&candidates, &[], want) {
            Ok(c) => c,
            Err(why) => {
                return Ok(Outcome::requeue(
                    SOON,
                    format!("cannot choose the first coordinators yet: {why}"),
                ));
            }
        };
        let id: String = rand::rng()
            .sample_iter(&Alphanumeric)
            .take(16)
            .map(char::from)
            .collect();
        let connection = format!("{}:{id}@{}", description(&pass.core.name), chosen.join(","));
        pass.core.event(
            EventType::Normal,
            "ClusterFileGenerated",
            "GenerateInitialClusterFile",
            format!("coordinators {}", chosen.join(", ")),
        );
        pass.status.connection_string = Some(connection);
        Ok(Outcome::requeue(SOON, "cluster file generated"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_coordinators_wait_for_every_storage_pods_address() {
        let row = |id: &str, storage: bool, addressed: bool| (id.to_owned(), storage, addressed);
        assert_eq!(
            storage_without_address(&[
                row("demo-storage-1", true, false),
                row("demo-storage-2", true, true),
                row("demo-stateless-1", false, true),
                row("demo-log-1", false, false),
            ]),
            ["demo-storage-1"]
        );
        assert!(storage_without_address(&[row("demo-storage-1", true, true)]).is_empty());
    }
}
