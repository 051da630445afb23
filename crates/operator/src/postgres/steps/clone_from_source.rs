//! CloneFromSource — a new cluster with `spec.dataSource.pgbackrest` gets its first primary's
//! data from another cluster's pgBackRest repository instead of `initdb`: a clone, to rehearse
//! a restore (or to start a copy) without touching the source. As the `Bootstrap` operation's
//! first step, before ProvisionInstances creates the primary:
//!
//! - the source must be a `PostgresCluster` of this namespace with a repository and a stanza,
//!   of the same major version (else `Degraded=True/DataSourceUnavailable`, and it waits);
//! - the claim `<cluster>-0-pgdata` is created and the Job `<cluster>-clone` runs
//!   `pgbackrest restore` into it with `source.conf` (the source's repository, its client
//!   certificate) and the target; the primary then starts on that data, recovers to the target
//!   and promotes itself, reading the source's archive with the same `source.conf`;
//! - a failed Job is reported (`Degraded=True/CloneFailed`, with pgBackRest's error) and not
//!   retried: the cluster is to be deleted and created again with a better `dataSource`.
//!
//! `status.clonedFrom` records it done; the step never runs again (the spec's `dataSource`
//! cannot change).

use async_trait::async_trait;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::ObjectRef;
use steward_api::common::{GroupReplicas, OperationChange, OperationKind};
use steward_api::pgbackrest::{BackupMethod, BackupPhase, PostgresBackup};
use steward_api::postgres::{PgBaseBackupSource, PostgresCluster};

use crate::error::Error;
use crate::operation::OperationRequest;
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::postgres::PostgresPass;
use crate::postgres::build::{basebackup, instance, pgbackrest};
use crate::postgres::steps::provision_repository::job_outcome;
use crate::postgres::steps::run_backups::last_words;
use crate::postgres::steps::{SOON, validated};

/// See the module documentation.
pub struct CloneFromSource;

/// (pure) Why `source` cannot be cloned yet, if it cannot.
pub fn unavailable(source: Option<&PostgresCluster>, name: &str, version: &str) -> Option<String> {
    let Some(source) = source else {
        return Some(format!(
            "dataSource: cluster {name} does not exist in this namespace"
        ));
    };
    if source
        .spec
        .backups
        .as_ref()
        .and_then(|b| b.pgbackrest.as_ref())
        .is_none()
    {
        return Some(format!(
            "dataSource: cluster {name} has no spec.backups.pgbackrest"
        ));
    }
    if source.spec.version != version {
        return Some(format!(
            "dataSource: cluster {name} runs PostgreSQL {}, this cluster {version}: a restore needs the same major version",
            source.spec.version
        ));
    }
    let stanza = source
        .status
        .as_ref()
        .and_then(|s| s.backups.as_ref())
        .and_then(|b| b.stanza.as_ref());
    stanza
        .is_none()
        .then(|| format!("dataSource: the repository of cluster {name} has no stanza yet"))
}

#[async_trait]
impl SubReconciler<PostgresPass> for CloneFromSource {
    fn name(&self) -> &'static str {
        "CloneFromSource"
    }

    async fn reconcile(&self, pass: &mut PostgresPass) -> Result<Outcome, Error> {
        let valid = validated(pass)?;
        let Some(source_cluster) = valid.source_cluster().map(str::to_owned) else {
            return Ok(Outcome::Continue);
        };
        if pass.status.cloned_from.is_some()
            || pass.status.system_identifier.is_some()
            || valid.paused
        {
            return Ok(Outcome::Continue);
        }
        let ns = pass.core.namespace.clone();
        let clusters: Api<PostgresCluster> = pass.ctx.api(&ns);
        let found = clusters
            .get_opt(&source_cluster)
            .await
            .map_err(|s| Error::kube("get PostgresCluster", format!("{ns}/{source_cluster}"), s))?;
        let version = pass.cluster.spec.version.clone();
        let why = match &valid.base_backup_source {
            Some(base) => {
                let backups: Api<PostgresBackup> = pass.ctx.api(&ns);
                let backup = backups.get_opt(&base.backup).await.map_err(|s| {
                    Error::kube("get PostgresBackup", format!("{ns}/{}", base.backup), s)
                })?;
                base_backup_unavailable(found.as_ref(), backup.as_ref(), base, &version)
            }
            None => unavailable(found.as_ref(), &source_cluster, &version),
        };
        if let Some(why) = why {
            pass.core.degrade("DataSourceUnavailable", why.clone());
            return Ok(Outcome::stop(SOON * 10, why));
        }
        // What is cloned, for messages and `status.clonedFrom`.
        let (what, done_as) = match (&valid.base_backup_source, &valid.data_source) {
            (Some(base), _) => (
                format!("the pg_basebackup {} of {}", base.backup, base.cluster),
                format!("{} (pg_basebackup {})", base.cluster, base.backup),
            ),
            (None, Some(source)) => {
                let target = source
                    .target
                    .as_ref()
                    .map(|t| {
                        t.time
                            .clone()
                            .or_else(|| t.lsn.clone())
                            .or_else(|| t.xid.clone())
                            .or_else(|| t.name.clone())
                            .unwrap_or_default()
                    })
                    .unwrap_or_else(|| "latest".into());
                (
                    format!("the repository of {} ({target})", source.cluster),
                    format!("{} ({target})", source.cluster),
                )
            }
            (None, None) => return Ok(Outcome::Continue),
        };
        let first = pass.names.instance(0);
        pass.core.start_operation(OperationRequest {
            kind: OperationKind::Bootstrap,
            step: "CloneFromSource".into(),
            total: valid.instances.max(1),
            change: OperationChange {
                new_replicas: vec![GroupReplicas {
                    name: "instances".into(),
                    replicas: i32::try_from(valid.instances).unwrap_or(i32::MAX),
                }],
                ..OperationChange::default()
            },
            message: format!("copying {what} into {first}"),
        });
        let claim = pass.names.claim(&first);
        if pass
            .stores
            .claims
            .get(&ObjectRef::new(&claim).within(&ns))
            .is_none()
        {
            let Some(desired) = instance::claim(&pass.cluster, &valid, 0) else {
                return Err(Error::Internal {
                    message: "cluster has no UID".into(),
                });
            };
            let claims: Api<PersistentVolumeClaim> = pass.ctx.api(&ns);
            match claims.create(&PostParams::default(), &desired).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(s) => {
                    return Err(Error::kube(
                        "create PersistentVolumeClaim",
                        pass.object(),
                        s,
                    ));
                }
            }
        }
        let jobs: Api<Job> = pass.ctx.api(&ns);
        let name = pass.names.clone_job();
        let object = format!("{ns}/{name}");
        let job = jobs
            .get_opt(&name)
            .await
            .map_err(|s| Error::kube("get Job", object.clone(), s))?;
        let Some(job) = job else {
            let desired = if valid.base_backup_source.is_some() {
                basebackup::clone_job(&pass.cluster, &valid)
            } else {
                pgbackrest::clone_job(&pass.cluster, &valid)
            };
            let Some(desired) = desired else {
                return Err(Error::Internal {
                    message: "cluster has no UID or dataSource".into(),
                });
            };
            match jobs.create(&PostParams::default(), &desired).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(s) => return Err(Error::kube("create Job", object, s)),
            }
            pass.core.event(
                EventType::Normal,
                "CloneStarted",
                "Bootstrap",
                format!("copying {what} into {claim} (Job {name})"),
            );
            return Ok(Outcome::stop(SOON * 3, "the clone Job runs"));
        };
        match job_outcome(&job) {
            None => Ok(Outcome::stop(SOON * 3, "the clone Job runs")),
            Some(Err(why)) => {
                let words = last_words(pass, &job)
                    .map(|w| format!(": {w}"))
                    .unwrap_or_default();
                let message = format!(
                    "Job {name} failed ({why}){words}; delete the cluster and create it again with a dataSource that can be restored"
                );
                pass.core.degrade("CloneFailed", message.clone());
                Ok(Outcome::stop(SOON * 30, message))
            }
            Some(Ok(())) => {
                pass.status.cloned_from = Some(done_as);
                pass.core.event(
                    EventType::Normal,
                    "ClonedFromSource",
                    "Bootstrap",
                    format!("copied {what} into {claim}; the primary starts on it"),
                );
                Ok(Outcome::Continue)
            }
        }
    }
}

/// (pure) Why the `pg_basebackup` a `dataSource.pgbasebackup` names cannot be copied yet, if
/// it cannot.
pub fn base_backup_unavailable(
    source: Option<&PostgresCluster>,
    backup: Option<&PostgresBackup>,
    wanted: &PgBaseBackupSource,
    version: &str,
) -> Option<String> {
    let (name, b) = (&wanted.cluster, &wanted.backup);
    let Some(source) = source else {
        return Some(format!(
            "dataSource: cluster {name} does not exist in this namespace"
        ));
    };
    if source.spec.version != version {
        return Some(format!(
            "dataSource: cluster {name} runs PostgreSQL {}, this cluster {version}: a base backup needs the same major version",
            source.spec.version
        ));
    }
    let Some(backup) = backup else {
        return Some(format!("dataSource: PostgresBackup {b} does not exist"));
    };
    if backup.spec.cluster != *name || backup.spec.method != BackupMethod::Pgbasebackup {
        return Some(format!(
            "dataSource: PostgresBackup {b} is not a pgbasebackup backup of cluster {name}"
        ));
    }
    let phase = backup.status.as_ref().and_then(|s| s.phase);
    (phase != Some(BackupPhase::Completed))
        .then(|| format!("dataSource: PostgresBackup {b} has not completed (phase {phase:?})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_api::postgres::PostgresClusterSpec;

    #[test]
    fn a_source_must_have_a_repository_a_stanza_and_the_same_major_version() {
        assert!(
            unavailable(None, "prod", "15")
                .unwrap()
                .contains("does not exist")
        );
        let mut prod = PostgresCluster::new("prod", PostgresClusterSpec::new(1, "15"));
        assert!(
            unavailable(Some(&prod), "prod", "15")
                .unwrap()
                .contains("no spec.backups.pgbackrest")
        );
        prod.spec.backups = Some(steward_api::postgres::BackupsSpec {
            pgbackrest: Some(serde_json::from_value(serde_json::json!({})).unwrap()),
        });
        assert!(
            unavailable(Some(&prod), "prod", "16")
                .unwrap()
                .contains("same major version")
        );
        assert!(
            unavailable(Some(&prod), "prod", "15")
                .unwrap()
                .contains("no stanza yet")
        );
        prod.status = Some(
            serde_json::from_value(serde_json::json!({
            "backups": {"repository": "prod-repo", "stanza": "db"}}))
            .unwrap(),
        );
        assert_eq!(unavailable(Some(&prod), "prod", "15"), None);
    }

    #[test]
    fn a_base_backup_source_must_be_a_completed_pgbasebackup_of_that_cluster() {
        let wanted = PgBaseBackupSource {
            cluster: "prod".into(),
            backup: "b1".into(),
        };
        let prod = PostgresCluster::new("prod", PostgresClusterSpec::new(1, "15"));
        let why = |b: Option<&PostgresBackup>| {
            base_backup_unavailable(Some(&prod), b, &wanted, "15").unwrap_or_default()
        };
        assert!(
            base_backup_unavailable(None, None, &wanted, "15")
                .unwrap()
                .contains("does not exist")
        );
        assert!(
            base_backup_unavailable(Some(&prod), None, &wanted, "16")
                .unwrap()
                .contains("same major version")
        );
        assert!(why(None).contains("PostgresBackup b1 does not exist"));
        let mut b: PostgresBackup = serde_json::from_value(serde_json::json!({
            "apiVersion": "steward.dev/v1alpha1", "kind": "PostgresBackup",
            "metadata": {"name": "b1"}, "spec": {"cluster": "prod"}}))
        .unwrap();
        assert!(why(Some(&b)).contains("is not a pgbasebackup backup of cluster prod"));
        b.spec.method = BackupMethod::Pgbasebackup;
        assert!(why(Some(&b)).contains("has not completed"));
        b.status = Some(serde_json::from_value(serde_json::json!({"phase": "Completed"})).unwrap());
        assert_eq!(
            base_backup_unavailable(Some(&prod), Some(&b), &wanted, "15"),
            None
        );
    }
}
