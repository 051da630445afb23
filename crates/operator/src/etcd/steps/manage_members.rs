//! ManageMembers — NOT IMPLEMENTED YET. Will compare the etcd member list to `replicas` and add
//! or remove exactly one member per pass (seed steps 2–4). Until then it reports, through the
//! `Degraded` condition and one Warning Event, that membership is not managed; it changes
//! nothing.

use std::time::Duration;

use async_trait::async_trait;

use crate::conditions;
use crate::error::Error;
use crate::etcd::EtcdPass;
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// See the module documentation.
pub struct ManageMembers;

/// The message users see.
pub const NOT_IMPLEMENTED: &str = "etcd member management (peers, Pods, PVCs, member list) is not implemented yet; no etcd members are created";

#[async_trait]
impl SubReconciler<EtcdPass> for ManageMembers {
    fn name(&self) -> &'static str {
        "ManageMembers"
    }

    async fn reconcile(&self, pass: &mut EtcdPass) -> Result<Outcome, Error> {
        let already = conditions::get(&pass.core.status.conditions, "Degraded")
            .is_some_and(|c| c.reason == "NotImplemented");
        if !already {
            pass.core.event(
                EventType::Warning,
                "NotImplemented",
                "ManageMembers",
                NOT_IMPLEMENTED,
            );
        }
        pass.core.degrade("NotImplemented", NOT_IMPLEMENTED);
        // Not converged: the generation is never marked reconciled while members are unmanaged.
        Ok(Outcome::requeue(
            Duration::from_secs(300),
            "member management is not implemented",
        ))
    }
}
