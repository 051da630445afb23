//! Leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager). Only the holder
//! reconciles; the Lease is released on graceful shutdown so a standby takes over at once,
//! otherwise after `--lease-duration-seconds`.

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::OperatorArgs;

/// A campaign in progress.
pub struct Leadership {
    /// `true` while this instance holds the Lease.
    pub state: watch::Receiver<bool>,
    task: JoinHandle<Result<kube_lease_manager::LeaseManager, LeaseManagerError>>,
}

impl Leadership {
    /// Stops campaigning and releases the Lease if held.
    pub async fn release(self) {
        drop(self.state);
        match self.task.await {
            Ok(Ok(_)) => tracing::info!("leader Lease released"),
            Ok(Err(err)) => tracing::warn!(error = %err, "releasing the leader Lease failed"),
            Err(err) => tracing::warn!(error = %err, "leader election task ended abnormally"),
        }
    }
}

/// Starts campaigning for the Lease `--lease-name` in `--lease-namespace`.
pub async fn campaign(
    client: &Client,
    args: &OperatorArgs,
    identity: &str,
) -> Result<Leadership, LeaseManagerError> {
    let duration = args.lease_duration_seconds.max(2);
    let grace = (duration / 3).max(1);
    let manager = LeaseManagerBuilder::new(client.clone(), &args.lease_name)
        .with_namespace(&args.lease_namespace)
        .with_identity(identity)
        .with_duration(duration)
        .with_grace(grace)
        .with_field_manager(format!("steward/leader/{identity}"))
        .build()
        .await?;
    let (state, task) = manager.watch().await;
    Ok(Leadership { state, task })
}
