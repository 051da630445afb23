//! ValidateSpec — parses the spec once into `ValidatedPostgresCluster`. An invalid spec
//! degrades the cluster with `InvalidSpec`, emits one Warning Event per distinct problem, and
//! stops the pass until the spec changes. It never deletes or changes anything.

use std::time::Duration;

use async_trait::async_trait;
use steward_api::common::condition_types;

use crate::conditions;
use crate::error::Error;
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::postgres::{PostgresPass, validate};

/// See the module documentation.
pub struct ValidateSpec;

#[async_trait]
impl SubReconciler<PostgresPass> for ValidateSpec {
    fn name(&self) -> &'static str {
        "ValidateSpec"
    }

    async fn reconcile(&self, pass: &mut PostgresPass) -> Result<Outcome, Error> {
        match validate::validate(&pass.cluster) {
            Ok(valid) => {
                pass.validated = Some(valid);
                pass.core.status.generations.has_invalid_spec = None;
                Ok(Outcome::Continue)
            }
            Err(message) => {
                let repeated =
                    conditions::get(&pass.core.status.conditions, condition_types::DEGRADED)
                        .is_some_and(|c| c.reason == "InvalidSpec" && c.message == message);
                if !repeated {
                    pass.core.event(
                        EventType::Warning,
                        "InvalidSpec",
                        "Validate",
                        message.clone(),
                    );
                }
                pass.core.status.generations.has_invalid_spec = Some(pass.core.generation);
                pass.core.degrade("InvalidSpec", message.clone());
                Ok(Outcome::stop(
                    Duration::from_secs(300),
                    format!("invalid spec: {message}"),
                ))
            }
        }
    }
}
