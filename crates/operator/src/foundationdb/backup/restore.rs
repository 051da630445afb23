//! The restore reconciler (seed 002: StartRestore). A `FoundationDBRestore` is carried out once:
//! `Pending` → `Running` (written before anything runs) → `fdbrestore start -w` in a backup
//! agent's Pod (where the backup's files are) → `Completed` with the version, or `Failed` with
//! FoundationDB's reason (e.g. a destination that is not empty). A pass that finds it `Running`
//! first asks `fdbrestore status`: a restore that finished while the operator was away is
//! adopted, not run twice. Never retried once failed: create another.
//!
//! Into another cluster than the backup's (`destinationClusterName` in the same namespace): the
//! restore waits for that cluster's connection string, applies it as a key of the backup's
//! `<backup>-restore-destinations` ConfigMap (mounted, optional, in the agents at
//! `/var/restore-destinations`), and runs `fdbrestore` in a backup agent's Pod — where the
//! backup's files are — with `--dest-cluster-file` pointing there, once the file has reached the
//! Pod. The destination must be empty, by FoundationDB's rule.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kube::api::Api;
use steward_api::common::{OperationKind, OperationPhase, condition_types};
use steward_api::foundationdb::{
    FoundationDBBackup, FoundationDBRestore, FoundationDBRestoreStatus, RestoreState,
};

use super::build::{AGENT_COMPONENT, backup_url};
use super::running_pods;
use crate::conditions::Status;
use crate::error::Error;
use crate::foundationdb::admin::{FdbAdmin, FdbError};
use crate::foundationdb::build::{CLUSTER_FILE_KEY, CONFIG_MOUNT};
use crate::operation::OperationRequest;
use crate::pipeline::{EventType, Outcome, Pass, PassCore, Pipeline, SubReconciler};
use crate::resources::pods::CachedPod;
use crate::runtime::context::Context;
use crate::runtime::stores::Indexed;

/// The controller name.
pub const CONTROLLER: &str = "foundationdb-restore";

/// One pass over a `FoundationDBRestore`.
pub struct RestorePass {
    /// Shared pass state.
    pub core: PassCore,
    /// The restore.
    pub restore: Arc<FoundationDBRestore>,
    /// Status being computed.
    pub status: FoundationDBRestoreStatus,
    /// Pods.
    pub pods: Indexed<CachedPod>,
    /// Shared context.
    pub ctx: Arc<Context>,
}

impl Pass for RestorePass {
    fn core(&self) -> &PassCore {
        &self.core
    }
    fn core_mut(&mut self) -> &mut PassCore {
        &mut self.core
    }
}

/// The restore pipeline: the status step around StartRestore.
pub fn pipeline() -> Pipeline<RestorePass> {
    Pipeline::new(
        CONTROLLER,
        Box::new(UpdateRestoreStatus),
        vec![Box::new(StartRestore)],
    )
}

/// UpdateRestoreStatus — `Available` from the restore's state (`Restored`, `Restoring`,
/// `Pending`, `Failed` with the reason), and a requeue until it is done.
pub struct UpdateRestoreStatus;

#[async_trait]
impl SubReconciler<RestorePass> for UpdateRestoreStatus {
    fn name(&self) -> &'static str {
        "UpdateRestoreStatus"
    }

    async fn reconcile(&self, pass: &mut RestorePass) -> Result<Outcome, Error> {
        let message = pass.status.message.clone();
        let (status, reason) = match pass.status.state {
            RestoreState::Completed => (Status::True, "Restored"),
            RestoreState::Running => (Status::False, "Restoring"),
            RestoreState::Pending => (Status::False, "Pending"),
            RestoreState::Failed => (Status::False, "Failed"),
        };
        pass.core
            .set_condition(condition_types::AVAILABLE, status, reason, message.clone());
        if pass.status.state == RestoreState::Failed {
            pass.core.degrade("RestoreFailed", message);
        }
        Ok(match pass.status.state {
            RestoreState::Pending | RestoreState::Running => {
                Outcome::requeue(Duration::from_secs(3), "restore not finished")
            }
            _ => Outcome::Continue,
        })
    }
}

/// (pure) The version `fdbrestore` printed (`Restored to version <v>`), if any.
pub fn restored_version(output: &str) -> Option<u64> {
    output.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("Restored to version")?;
        rest.trim().trim_end_matches('.').parse().ok()
    })
}

/// StartRestore — see the module documentation.
pub struct StartRestore;

impl StartRestore {
    fn fail(pass: &mut RestorePass, message: String) -> Outcome {
        pass.status.state = RestoreState::Failed;
        pass.status.message = message.clone();
        pass.core.event(
            EventType::Warning,
            "RestoreFailed",
            "StartRestore",
            message.clone(),
        );
        pass.core
            .finish_operation(OperationKind::Restore, OperationPhase::Failed, message);
        Outcome::Continue
    }
}

#[async_trait]
impl SubReconciler<RestorePass> for StartRestore {
    fn name(&self) -> &'static str {
        "StartRestore"
    }

    fn destructive(&self) -> bool {
        true
    }

    async fn reconcile(&self, pass: &mut RestorePass) -> Result<Outcome, Error> {
        if matches!(
            pass.status.state,
            RestoreState::Completed | RestoreState::Failed
        ) {
            return Ok(Outcome::Continue);
        }
        let spec = pass.restore.spec.clone();
        let backups: Api<FoundationDBBackup> =
            Api::namespaced(pass.ctx.client.clone(), &pass.core.namespace);
        let Some(backup) = backups.get_opt(&spec.backup_name).await.map_err(|source| {
            Error::kube(
                "get",
                format!("FoundationDBBackup {}", spec.backup_name),
                source,
            )
        })?
        else {
            pass.status.message = format!("FoundationDBBackup {} does not exist", spec.backup_name);
            return Ok(Outcome::requeue(
                Duration::from_secs(10),
                pass.status.message.clone(),
            ));
        };
        let elsewhere = backup.spec.cluster_name != spec.destination_cluster_name;
        let cluster_file = if elsewhere {
            match destination_file(pass, &backup).await? {
                Ok(path) => path,
                Err(wait) => return Ok(wait),
            }
        } else {
            format!("{CONFIG_MOUNT}/{CLUSTER_FILE_KEY}")
        };
        let agents = running_pods(
            &pass.pods,
            &pass.core.namespace,
            &spec.backup_name,
            Some(AGENT_COMPONENT),
        );
        let Some(agent) = agents.first().cloned() else {
            pass.status.message =
                format!("waiting for a running backup agent of {}", spec.backup_name);
            return Ok(Outcome::requeue(
                Duration::from_secs(5),
                pass.status.message.clone(),
            ));
        };
        let admin: Arc<dyn FdbAdmin> = pass.ctx.seam::<Arc<dyn FdbAdmin>>()?;
        if pass.status.state == RestoreState::Pending {
            let restorable = backup
                .status
                .as_ref()
                .and_then(|s| s.backup_details.as_ref())
                .is_some_and(|d| d.restorable);
            if !restorable {
                pass.status.message =
                    format!("waiting for backup {} to be restorable", spec.backup_name);
                return Ok(Outcome::requeue(
                    Duration::from_secs(5),
                    pass.status.message.clone(),
                ));
            }
            // Recorded before anything runs: a later pass adopts what happened.
            let prior = match admin
                .tool(
                    &agent,
                    vec![
                        "fdbrestore".into(),
                        "status".into(),
                        "--dest-cluster-file".into(),
                        cluster_file.clone(),
                    ],
                )
                .await
            {
                Ok(text) => text,
                // Another cluster's file reaches the agent's Pod some seconds after the
                // ConfigMap is written (the kubelet's sync).
                Err(e) if elsewhere => {
                    pass.status.message = format!(
                        "waiting for {}'s cluster file in agent Pod {}: {e}",
                        spec.destination_cluster_name, agent.pod
                    );
                    return Ok(Outcome::requeue(
                        Duration::from_secs(5),
                        pass.status.message.clone(),
                    ));
                }
                Err(e) => {
                    return Err(Error::Database {
                        cluster: format!(
                            "{}/{}",
                            pass.core.namespace, spec.destination_cluster_name
                        ),
                        message: e.to_string(),
                    });
                }
            };
            pass.status.prior_restore_status = Some(prior.trim().to_owned());
            pass.status.state = RestoreState::Running;
            pass.status.message = format!("restoring from {}", backup_url(&spec.backup_name));
            pass.core.start_operation(OperationRequest {
                kind: OperationKind::Restore,
                step: "StartRestore".into(),
                total: 1,
                change: Default::default(),
                message: pass.status.message.clone(),
            });
            return Ok(Outcome::requeue(Duration::from_secs(1), "restore recorded"));
        }
        // Running: adopt a restore that already finished.
        let status = admin
            .tool(
                &agent,
                vec![
                    "fdbrestore".into(),
                    "status".into(),
                    "--dest-cluster-file".into(),
                    cluster_file.clone(),
                ],
            )
            .await;
        if let Ok(text) = &status
            && text.contains("completed")
            && pass.status.prior_restore_status.as_deref() != Some(text.trim())
        {
            pass.status.state = RestoreState::Completed;
            pass.status.version = text
                .split_whitespace()
                .filter_map(|w| w.trim_end_matches(['.', ',', ')']).parse::<u64>().ok())
                .next_back();
            pass.status.message = "restored".into();
            pass.core.finish_operation(
                OperationKind::Restore,
                OperationPhase::Succeeded,
                "restored",
            );
            return Ok(Outcome::Continue);
        }
        let mut argv = vec![
            "fdbrestore".to_owned(),
            "start".to_owned(),
            "-r".to_owned(),
            backup_url(&spec.backup_name),
            "--dest-cluster-file".to_owned(),
            cluster_file,
            "-w".to_owned(),
        ];
        if let Some(v) = spec.version {
            argv.extend(["-v".to_owned(), v.to_string()]);
        }
        match admin.tool(&agent, argv).await {
            Ok(out) => {
                pass.status.state = RestoreState::Completed;
                pass.status.version = restored_version(&out);
                pass.status.message = format!(
                    "restored to version {}",
                    pass.status
                        .version
                        .map(|v| v.to_string())
                        .unwrap_or_else(|| "unknown".into())
                );
                pass.core.event(
                    EventType::Normal,
                    "Restored",
                    "StartRestore",
                    pass.status.message.clone(),
                );
                pass.core.finish_operation(
                    OperationKind::Restore,
                    OperationPhase::Succeeded,
                    pass.status.message.clone(),
                );
                Ok(Outcome::Continue)
            }
            Err(FdbError::Command(why)) => Ok(Self::fail(pass, why)),
            Err(e) => {
                pass.status.message = format!("fdbrestore could not run: {e}");
                Ok(Outcome::requeue(
                    Duration::from_secs(5),
                    pass.status.message.clone(),
                ))
            }
        }
    }
}

/// The path, in a backup agent's Pod, of the cluster file of the restore's destination (another
/// cluster than the backup's): its connection string applied to the backup's
/// `<backup>-restore-destinations` ConfigMap under this restore's own field manager. `Err`: the
/// outcome to wait with (no such cluster yet, or no connection string yet).
async fn destination_file(
    pass: &mut RestorePass,
    backup: &FoundationDBBackup,
) -> Result<Result<String, Outcome>, Error> {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;
    use kube::api::{Patch, PatchParams};
    use steward_api::foundationdb::FoundationDBCluster;

    let dest = pass.restore.spec.destination_cluster_name.clone();
    let clusters: Api<FoundationDBCluster> =
        Api::namespaced(pass.ctx.client.clone(), &pass.core.namespace);
    let cluster = clusters
        .get_opt(&dest)
        .await
        .map_err(|source| Error::kube("get", format!("FoundationDBCluster {dest}"), source))?;
    let connection_string = cluster
        .as_ref()
        .and_then(|c| c.status.as_ref())
        .and_then(|s| s.connection_string.clone());
    let Some(cs) = connection_string else {
        pass.status.message = if cluster.is_none() {
            format!("FoundationDBCluster {dest} (spec.destinationClusterName) does not exist")
        } else {
            format!("waiting for FoundationDBCluster {dest} to have a connection string")
        };
        return Ok(Err(Outcome::requeue(
            Duration::from_secs(10),
            pass.status.message.clone(),
        )));
    };
    let Some(cm) = super::build::destinations(backup, &dest, &cs) else {
        return Err(Error::Internal {
            message: "backup has no UID or namespace".into(),
        });
    };
    let name = super::build::destinations_name(&backup.name_any());
    let api: Api<ConfigMap> = Api::namespaced(pass.ctx.client.clone(), &pass.core.namespace);
    let manager = format!("steward-restore-{}", pass.core.name);
    api.patch(
        &name,
        &PatchParams::apply(&manager).force(),
        &Patch::Apply(&cm),
    )
    .await
    .map_err(|source| {
        Error::kube(
            "apply",
            format!("ConfigMap {}/{name}", pass.core.namespace),
            source,
        )
    })?;
    Ok(Ok(format!(
        "{}/{}",
        super::build::DESTINATIONS_MOUNT,
        super::build::destination_key(&dest)
    )))
}

/// A restore pass with the stored status.
pub fn new_pass(
    ctx: &Arc<Context>,
    pods: Indexed<CachedPod>,
    restore: Arc<FoundationDBRestore>,
) -> RestorePass {
    let stored = restore.status.clone().unwrap_or_default();
    RestorePass {
        core: ctx.pass_core(CONTROLLER, restore.as_ref(), stored.common.clone(), None),
        status: stored,
        restore,
        pods,
        ctx: ctx.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_restored_version_is_read() {
        assert_eq!(
            restored_version("Restoring backup to version: 7\nRestored to version 42\n"),
            Some(42)
        );
        assert_eq!(restored_version("nothing"), None);
    }
}
