//! GenerateInitialClusterFile — once, when the cluster has no connection string: takes
//! `seedConnectionString`, or chooses `2R - 1` coordinators among the Pods that have an address
//! (storage first, then log, then stateless; each in another zone) and writes
//! `<description>:<random ID>@<coordinators>` to `status.connectionString` (seed 002). The
//! ConfigMap carries it to the Pods on the next pass.

use async_trait::async_trait;
use rand::Rng;
use rand::distr::Alphanumeric;

use super::{SOON, class_of, group_pods};
use crate::error::Error;
use crate::foundationdb::FdbPass;
use crate::foundationdb::build::PORT;
use crate::foundationdb::plan::{self, Candidate};
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct GenerateInitialClusterFile;

/// (pure) The cluster file's description: the cluster's name with what FoundationDB does not
/// allow (anything but letters, digits and `_`) as `_`.
pub fn description(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
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
        let want = plan::coordinator_count(
            pass.cluster
                .spec
                .database_configuration
                .redundancy_mode
                .replication(),
        );
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
