//! ProvisionRepository — with `spec.backups.pgbackrest`, makes the cluster's pgBackRest
//! repository exist (seed 004: the `pgo-backrest-repo` deployment, one per cluster): its claim
//! `<cluster>-repo` (created when missing, never modified; no owner), its Pod (created when
//! missing, replaced when its spec changed or it ended), and — once the primary accepts writes
//! and the repository host is ready — the stanza, created by the Job `<cluster>-stanza-create`
//! and recorded in `status.backups.stanza`. Until the stanza exists the instances'
//! `archive_command` fails and PostgreSQL keeps the WAL and retries, so nothing is lost. A
//! failed Job is reported (`Degraded=True/StanzaCreateFailed`) and retried after it is deleted.

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams, Preconditions, PropagationPolicy};
use kube::runtime::reflector::ObjectRef;
use steward_api::postgres::BackupsStatus;

use crate::error::Error;
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::postgres::PostgresPass;
use crate::postgres::build::instance::SPEC_HASH;
use crate::postgres::build::pgbackrest::{self, STANZA};
use crate::postgres::steps::{SOON, validated};
use crate::resources::pods::{has_ended, is_ready};

/// See the module documentation.
pub struct ProvisionRepository;

/// How often a pass looks at a running stanza Job.
const JOB_POLL: Duration = Duration::from_secs(2);

pub use crate::resources::jobs::job_outcome;

#[async_trait]
impl SubReconciler<PostgresPass> for ProvisionRepository {
    fn name(&self) -> &'static str {
        "ProvisionRepository"
    }

    async fn reconcile(&self, pass: &mut PostgresPass) -> Result<Outcome, Error> {
        let valid = validated(pass)?;
        if valid.pgbackrest.is_none() {
            pass.status.backups = None;
            return Ok(Outcome::Continue);
        }
        if valid.paused {
            return Ok(Outcome::Continue);
        }
        let names = pass.names.clone();
        let ns = pass.core.namespace.clone();
        let status = pass.status.backups.get_or_insert_with(|| BackupsStatus {
            repository: names.repo(),
            ..BackupsStatus::default()
        });
        status.repository = names.repo();

        // 1. The claim.
        let claim_ref = ObjectRef::new(&names.repo()).within(&ns);
        if pass.stores.claims.get(&claim_ref).is_none() {
            let Some(claim) = pgbackrest::repo_claim(&valid) else {
                return Ok(Outcome::Continue);
            };
            let api: Api<PersistentVolumeClaim> = pass.ctx.api(&ns);
            match api.create(&PostParams::default(), &claim).await {
                Ok(_) => pass.core.event(
                    EventType::Normal,
                    "RepositoryClaimCreated",
                    "ProvisionRepository",
                    format!(
                        "created claim {} for the pgBackRest repository",
                        names.repo()
                    ),
                ),
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(source) => {
                    return Err(Error::kube(
                        "create PersistentVolumeClaim",
                        pass.object(),
                        source,
                    ));
                }
            }
        }

        // 2. The repository host.
        let Some(desired) = pgbackrest::repo_pod(&pass.cluster, &valid) else {
            return Err(Error::Internal {
                message: "cluster has no UID or namespace".into(),
            });
        };
        let current = pass
            .stores
            .pods
            .of_instance(&ns, &names.cluster)
            .into_iter()
            .find(|p| p.name_any() == names.repo());
        let pods: Api<Pod> = pass.ctx.api(&ns);
        let ready = match current {
            None => {
                match pods.create(&PostParams::default(), &desired).await {
                    Ok(_) => pass.core.event(
                        EventType::Normal,
                        "RepositoryHostCreated",
                        "ProvisionRepository",
                        format!("created the pgBackRest repository host {}", names.repo()),
                    ),
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(source) => return Err(Error::kube("create Pod", pass.object(), source)),
                }
                false
            }
            Some(pod) if pod.metadata.deletion_timestamp.is_some() => false,
            Some(pod) => {
                let want = desired.annotations().get(SPEC_HASH).map(String::as_str);
                if pod.annotations().get(SPEC_HASH) != want || has_ended(&pod) {
                    let params = DeleteParams {
                        preconditions: Some(Preconditions {
                            uid: pod.uid(),
                            resource_version: None,
                        }),
                        ..DeleteParams::default()
                    };
                    match pods.delete(&names.repo(), &params).await {
                        Ok(_) | Err(kube::Error::Api(_)) => {}
                        Err(source) => {
                            return Err(Error::kube("delete Pod", pass.object(), source));
                        }
                    }
                    false
                } else {
                    is_ready(&pod)
                }
            }
        };

        // 3. The stanza, once the primary writes and the repository host is up.
        if pass
            .status
            .backups
            .as_ref()
            .is_some_and(|b| b.stanza.is_some())
        {
            return Ok(Outcome::Continue);
        }
        let primary_writable = pass
            .primary()
            .and_then(|p| pass.instance(&p).map(|v| v.writable()))
            .unwrap_or(false);
        if !primary_writable || !ready {
            return Ok(Outcome::requeue(
                SOON * 2,
                "the stanza waits for a writable primary and the repository host",
            ));
        }
        let jobs: Api<Job> = pass.ctx.api(&ns);
        let object = format!("{ns}/{}", names.stanza_job());
        let job = jobs
            .get_opt(&names.stanza_job())
            .await
            .map_err(|source| Error::kube("get Job", object.clone(), source))?;
        match job.as_ref().and_then(job_outcome) {
            None if job.is_none() => {
                let Some(job) = pgbackrest::stanza_job(&pass.cluster, &valid) else {
                    return Err(Error::Internal {
                        message: "cluster has no UID or namespace".into(),
                    });
                };
                match jobs.create(&PostParams::default(), &job).await {
                    Ok(_) | Err(kube::Error::Api(_)) => {}
                    Err(source) => return Err(Error::kube("create Job", object, source)),
                }
                Ok(Outcome::requeue(JOB_POLL, "creating the stanza"))
            }
            None => Ok(Outcome::requeue(JOB_POLL, "creating the stanza")),
            Some(Ok(())) => {
                if let Some(b) = pass.status.backups.as_mut() {
                    b.stanza = Some(STANZA.to_owned());
                }
                pass.core.event(
                    EventType::Normal,
                    "StanzaCreated",
                    "ProvisionRepository",
                    format!(
                        "created stanza {STANZA} in repository {}; WAL archiving starts",
                        names.repo()
                    ),
                );
                Ok(Outcome::Continue)
            }
            Some(Err(why)) => {
                let message = format!(
                    "Job {} failed ({why}); it is deleted and run again",
                    names.stanza_job()
                );
                pass.core.degrade("StanzaCreateFailed", message);
                let params = DeleteParams {
                    propagation_policy: Some(PropagationPolicy::Background),
                    ..DeleteParams::default()
                };
                match jobs.delete(&names.stanza_job(), &params).await {
                    Ok(_) | Err(kube::Error::Api(_)) => {}
                    Err(source) => return Err(Error::kube("delete Job", object, source)),
                }
                Ok(Outcome::requeue(SOON * 10, "the stanza Job failed"))
            }
        }
    }
}
