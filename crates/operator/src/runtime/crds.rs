//! Waiting for Steward's CRDs: controllers start only once every CRD is `Established`; if they
//! are missing the operator says how to install them instead of failing watches forever.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::{Client, ResourceExt};

/// Why the CRDs are not usable.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// Some CRDs are missing or not established before the deadline.
    #[error(
        "Steward's CRDs are not installed or not established: {missing}; install them with \
         `steward crd | kubectl apply -f -` (or `kubectl apply -f deploy/crds/`)"
    )]
    NotEstablished {
        /// Comma-separated CRD names.
        missing: String,
    },
}

fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conds| {
            conds
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// Names of the wanted CRDs that are not established, in order.
async fn missing(api: &Api<CustomResourceDefinition>, wanted: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for name in wanted {
        match api.get_opt(name).await {
            Ok(Some(crd)) if established(&crd) => {}
            Ok(_) => out.push(name.clone()),
            Err(err) => {
                tracing::warn!(crd = %name, error = %err, "reading CRD failed");
                out.push(name.clone());
            }
        }
    }
    out
}

/// Waits up to `timeout` for every Steward CRD to be established.
pub async fn wait_established(client: &Client, timeout: Duration) -> Result<(), CrdError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let wanted: Vec<String> = steward_api::crds().iter().map(|c| c.name_any()).collect();
    let deadline = Instant::now() + timeout;
    let mut logged = false;
    loop {
        let missing = missing(&api, &wanted).await;
        if missing.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(CrdError::NotEstablished {
                missing: missing.join(", "),
            });
        }
        if !logged {
            tracing::warn!(missing = %missing.join(", "), "waiting for Steward's CRDs to be established");
            logged = true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
