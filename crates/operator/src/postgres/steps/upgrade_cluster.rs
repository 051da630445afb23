//! UpgradeCluster — runs a `PostgresUpgrade` (seed 004, "Upgrade - pgupgrades") as the
//! cluster's `Upgrade` operation, with its progress in `status.upgrade` so that a restarted
//! operator continues it. An offline major-version upgrade with `pg_upgrade`, as CloudNativePG
//! and Crunchy's `PGUpgrade` do it:
//!
//! 1. refuse (the upgrade `Failed`, Event `UpgradeRefused`, nothing touched): a `toVersion` that
//!    is not newer than the cluster's `spec.version`, another operation running, and — where
//!    the cluster has a pgBackRest repository and the upgrade does not say `withoutBackup` — no
//!    backup that ended after the cluster's last operation;
//! 2. automatic fail-over off (while `status.upgrade` is set);
//! 3. `StopInstances` — the instance Pods are deleted (fast shutdown; their claims stay);
//! 4. `UpgradeJob` — a new claim for the primary, `<primary>-pgdata-r<n>` (the next
//!    generation of data claims), and the Job `<upgrade>-pg-upgrade` (`build::upgrade`):
//!    `initdb` of the new version, `pg_upgrade --check`, `pg_upgrade` in copy mode. A failed
//!    check or Job fails the upgrade with its report and the cluster comes back by itself on
//!    its claims and version: nothing was written to them;
//! 5. `StartPrimary` — the cluster moves to generation `n` (`status.dataEpoch`) and the primary
//!    starts on the upgraded data with the new image; it must answer as the new version;
//! 6. `RecloneReplicas` — the replicas start on new, empty claims of generation `n` and clone
//!    the upgraded primary;
//! 7. `UpgradeStanza` — with a repository: `pgbackrest stanza-upgrade` in the Job
//!    `<upgrade>-stanza-upgrade` (the stanza learns the new version and system identifier;
//!    archiving resumes). A failure is a Warning, not a stopped cluster;
//! 8. `Analyze` — `vacuumdb --all --analyze-in-stages` in the Job `<upgrade>-analyze`
//!    (`pg_upgrade` does not carry statistics over). A failure is a Warning;
//! 9. `Finish` — `spec.version` (and `spec.image`) say the new version, the previous claims
//!    are labelled `steward.dev/upgraded-by=<upgrade>` (never deleted by Steward), a full
//!    backup `<upgrade>-full` is requested, fail-over is back, the operation succeeds.
//!
//! A primary that cannot start on the new version (its FATAL line) or the deadline after step 5
//! fail the upgrade and hold the cluster stopped (`Degraded=True/UpgradeFailed`): deleting the
//! `PostgresUpgrade` brings it back on its previous claims and version.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use steward_api::common::{Operation, OperationChange, OperationKind, OperationPhase};
use steward_api::pgupgrade::{
    PostgresUpgrade, PostgresUpgradeStatus, UpgradePhase, UpgradeProgress,
};
use steward_api::postgres::{BackupsStatus, PostgresCluster};

use crate::clock::{format_time, parse_time};
use crate::error::Error;
use crate::operation::OperationRequest;
use crate::pipeline::{EventType, Outcome, SubReconciler};
use crate::postgres::PostgresPass;
use crate::postgres::build::{pgbackrest, upgrade as build};
use crate::postgres::names::ClusterNames;
use crate::postgres::steps::provision_repository::job_outcome;
use crate::postgres::steps::restore_cluster::{
    claim_of_generation, claims_of, not_started, replicas_not_streaming, request_full_backup,
    retire_claims, stop_instances,
};
use crate::postgres::steps::run_backups::last_words;
use crate::postgres::steps::{SOON, validated};
use crate::postgres::validate::ValidatedPostgresCluster;

/// See the module documentation.
pub struct UpgradeCluster;

/// The label on the claims an upgrade replaced, naming it.
pub const UPGRADED_BY: &str = "steward.dev/upgraded-by";

/// The steps, in order.
pub const STEPS: [&str; 7] = [
    "StopInstances",
    "UpgradeJob",
    "StartPrimary",
    "RecloneReplicas",
    "UpgradeStanza",
    "Analyze",
    "Finish",
];

fn step_index(step: &str) -> u32 {
    STEPS
        .iter()
        .position(|s| *s == step)
        .and_then(|i| u32::try_from(i).ok())
        .unwrap_or(0)
}

/// (pure) Whether the instances run the new version at this point of the upgrade: from
/// `StartPrimary` on (the cluster is on the upgraded claims).
pub fn runs_new_version(progress: &UpgradeProgress) -> bool {
    step_index(&progress.step) >= step_index("StartPrimary")
}

/// (pure) Why an upgrade of a cluster at major version `from` must be refused before anything
/// changes: a version that is not newer, and — where the cluster has a repository and the
/// upgrade does not say `withoutBackup` — no backup that ended after the cluster's last
/// operation (other than a backup).
pub fn refusal(
    upgrade: &PostgresUpgrade,
    from: u32,
    repository: bool,
    backups: Option<&BackupsStatus>,
    last_operation: Option<&Operation>,
) -> Option<String> {
    let to = &upgrade.spec.to_version;
    let Ok(to_major) = to.parse::<u32>() else {
        return Some(format!(
            "toVersion {to:?} is not a PostgreSQL major version"
        ));
    };
    if to_major <= from {
        return Some(format!(
            "toVersion {to} is not newer than the cluster's version {from}: pg_upgrade only moves to a newer major version"
        ));
    }
    if !repository || upgrade.spec.without_backup {
        return None;
    }
    let Some(last) = backups.and_then(|b| b.last_successful_backup.as_deref()) else {
        return Some(
            "the cluster's pgBackRest repository holds no backup: take one first (a PostgresBackup), or set withoutBackup: true"
                .into(),
        );
    };
    let change = last_operation
        .filter(|op| op.kind != OperationKind::Backup)
        .and_then(|op| Some((op, parse_time(op.finished_at.as_deref()?)?)));
    match (parse_time(last), change) {
        (Some(backup), Some((op, changed))) if backup < changed => Some(format!(
            "the newest backup ({last}) is older than the cluster's last {} operation (ended {}): take a backup first, or set withoutBackup: true",
            op.kind.as_str(),
            op.finished_at.as_deref().unwrap_or_default()
        )),
        _ => None,
    }
}

/// (pure) The cluster's upgrades, oldest first.
pub fn upgrades_of(
    all: &[Arc<PostgresUpgrade>],
    namespace: &str,
    cluster: &str,
) -> Vec<Arc<PostgresUpgrade>> {
    crate::postgres::steps::run_backups::of_cluster(all, namespace, cluster, |u| {
        u.spec.cluster.as_str()
    })
}

fn unstarted(u: &PostgresUpgrade) -> bool {
    matches!(
        u.status.as_ref().and_then(|s| s.phase),
        None | Some(UpgradePhase::Pending)
    )
}

fn current(u: &PostgresUpgrade) -> PostgresUpgradeStatus {
    u.status.clone().unwrap_or_default()
}

fn with_status(u: &PostgresUpgrade, status: PostgresUpgradeStatus) -> PostgresUpgrade {
    let mut u = u.clone();
    u.status = Some(status);
    u
}

async fn write_status(
    pass: &PostgresPass,
    upgrade: &PostgresUpgrade,
    status: PostgresUpgradeStatus,
) -> Result<(), Error> {
    if upgrade.status.as_ref() == Some(&status) {
        return Ok(());
    }
    crate::postgres::steps::run_backups::patch_status::<PostgresUpgrade>(
        pass,
        &upgrade.name_any(),
        &status,
    )
    .await
}

async fn refuse(
    pass: &mut PostgresPass,
    upgrade: &PostgresUpgrade,
    why: String,
) -> Result<(), Error> {
    pass.core.event(
        EventType::Warning,
        "UpgradeRefused",
        "Upgrade",
        format!("{}: {why}; nothing was changed", upgrade.name_any()),
    );
    let mut status = current(upgrade);
    status.phase = Some(UpgradePhase::Failed);
    status.message = Some("refused; nothing was changed".into());
    status.error = Some(why);
    status.finished_at = Some(format_time(pass.core.now));
    write_status(pass, upgrade, status).await
}

async fn pending(pass: &PostgresPass, upgrade: &PostgresUpgrade, why: &str) -> Result<(), Error> {
    let mut status = current(upgrade);
    status.phase = Some(UpgradePhase::Pending);
    status.message = Some(why.to_owned());
    write_status(pass, upgrade, status).await
}

/// Records the step on the operation, the progress and the upgrade.
async fn enter(
    pass: &mut PostgresPass,
    progress: &mut UpgradeProgress,
    upgrade: Option<&PostgresUpgrade>,
    step: &str,
    message: String,
) -> Result<(), Error> {
    progress.step = step.to_owned();
    pass.core.advance_operation(
        OperationKind::Upgrade,
        step,
        step_index(step),
        message.clone(),
    );
    pass.status.upgrade = Some(progress.clone());
    if let Some(u) = upgrade {
        let mut status = current(u);
        status.phase = Some(UpgradePhase::Running);
        status.step = Some(step.to_owned());
        status.message = Some(message);
        write_status(pass, u, status).await?;
    }
    Ok(())
}

/// Fails the upgrade before the cluster moved: nothing was written to its claims, so it comes
/// back on them with its version. The operation is recorded as rolled back (it does not block
/// a retry).
async fn roll_back(
    pass: &mut PostgresPass,
    progress: &UpgradeProgress,
    upgrade: Option<&PostgresUpgrade>,
    why: String,
) -> Result<Outcome, Error> {
    pass.status.upgrade = None;
    let message = format!(
        "{} failed at {}: {why}; the cluster comes back on its claims with PostgreSQL {}",
        progress.name, progress.step, progress.from_version
    );
    pass.core.event(
        EventType::Warning,
        "UpgradeFailed",
        "Upgrade",
        message.clone(),
    );
    if let Some(op) = pass.core.status.operation.as_mut() {
        op.change.rolled_back = Some(true);
    }
    pass.core
        .finish_operation(OperationKind::Upgrade, OperationPhase::Failed, message);
    if let Some(op) = pass
        .core
        .status
        .last_operation
        .as_mut()
        .filter(|op| op.kind == OperationKind::Upgrade)
    {
        op.change.rolled_back = Some(true);
    }
    if let Some(u) = upgrade {
        let mut status = current(u);
        status.phase = Some(UpgradePhase::Failed);
        status.error = Some(why);
        status.message = Some(format!(
            "failed at {}; the cluster runs PostgreSQL {} on its previous claims",
            progress.step, progress.from_version
        ));
        status.finished_at = Some(format_time(pass.core.now));
        write_status(pass, u, status).await?;
    }
    Ok(Outcome::stop(
        SOON,
        "the upgrade failed; the cluster comes back on its claims",
    ))
}

fn held_message(progress: &UpgradeProgress, why: &str) -> String {
    format!(
        "upgrade {} failed at {}: {why}; the cluster stays stopped: delete {} to come back on the previous claims with PostgreSQL {}",
        progress.name, progress.step, progress.name, progress.from_version
    )
}

/// Fails the upgrade after the cluster moved: it stays stopped until the upgrade is deleted.
async fn fail_held(
    pass: &mut PostgresPass,
    progress: &mut UpgradeProgress,
    upgrade: Option<&PostgresUpgrade>,
    why: String,
) -> Result<Outcome, Error> {
    progress.failed = Some(why.clone());
    pass.status.upgrade = Some(progress.clone());
    pass.core.event(
        EventType::Warning,
        "UpgradeFailed",
        "Upgrade",
        held_message(progress, &why),
    );
    pass.core
        .finish_operation(OperationKind::Upgrade, OperationPhase::Failed, why.clone());
    pass.core
        .degrade("UpgradeFailed", held_message(progress, &why));
    if let Some(u) = upgrade {
        let mut status = current(u);
        status.phase = Some(UpgradePhase::Failed);
        status.error = Some(why);
        status.message = Some(format!(
            "failed at {}; delete this PostgresUpgrade to come back on the previous claims",
            progress.step
        ));
        status.finished_at = Some(format_time(pass.core.now));
        write_status(pass, u, status).await?;
    }
    Ok(Outcome::Continue)
}

/// The image's repository (what the webhook calls the registry).
fn repository(image: &str) -> String {
    let image = image.split('@').next().unwrap_or(image);
    let last_slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[last_slash..].find(':') {
        Some(i) => image[..last_slash + i].to_owned(),
        None => image.to_owned(),
    }
}

/// Starts the oldest unstarted upgrade, or refuses it.
async fn begin(
    pass: &mut PostgresPass,
    valid: &ValidatedPostgresCluster,
    upgrade: &PostgresUpgrade,
) -> Result<Outcome, Error> {
    if let Some(op) = &pass.core.status.operation {
        let why = format!(
            "another operation is running ({}: {}); create the PostgresUpgrade again once it is done",
            op.kind.as_str(),
            op.message
        );
        refuse(pass, upgrade, why).await?;
        return Ok(Outcome::Continue);
    }
    if let Some(why) = refusal(
        upgrade,
        valid.version,
        valid.pgbackrest.is_some(),
        pass.status.backups.as_ref(),
        pass.core.status.last_operation.as_ref(),
    ) {
        refuse(pass, upgrade, why).await?;
        return Ok(Outcome::Continue);
    }
    if valid.paused {
        pending(pass, upgrade, "the cluster is paused").await?;
        return Ok(Outcome::requeue(SOON * 5, "upgrade waits: cluster paused"));
    }
    let primary = pass.primary().unwrap_or_else(|| pass.names.instance(0));
    if !pass.instance(&primary).is_some_and(|v| v.writable()) {
        pending(
            pass,
            upgrade,
            &format!("waiting for the primary {primary} to accept writes"),
        )
        .await?;
        return Ok(Outcome::requeue(SOON * 5, "upgrade waits for the primary"));
    }
    let name = upgrade.name_any();
    let from = valid.version.to_string();
    let to = upgrade.spec.to_version.clone();
    let image = build::target_image(upgrade);
    let from_epoch = pass.names.epoch;
    let epoch = from_epoch + 1;
    let started = pass.core.start_operation(OperationRequest {
        kind: OperationKind::Upgrade,
        step: STEPS[0].into(),
        total: u32::try_from(STEPS.len()).unwrap_or(7),
        change: OperationChange {
            old_version: Some(from.clone()),
            new_version: Some(to.clone()),
            old_registry: Some(repository(&valid.image)),
            new_registry: Some(repository(&image)),
            ..OperationChange::default()
        },
        message: format!("upgrade {name}: PostgreSQL {from} to {to}"),
    });
    if let Some(kind) = not_started(started) {
        refuse(
            pass,
            upgrade,
            format!("another operation is running ({kind})"),
        )
        .await?;
        return Ok(Outcome::Continue);
    }
    let mut progress = UpgradeProgress {
        name: name.clone(),
        step: STEPS[0].into(),
        from_version: from.clone(),
        to_version: to.clone(),
        image,
        from_epoch,
        epoch,
        primary: primary.clone(),
        previous_claims: claims_of(pass, valid, from_epoch),
        ..UpgradeProgress::default()
    };
    let mut status = current(upgrade);
    status.started_at = Some(format_time(pass.core.now));
    status.from_version = Some(from.clone());
    status.primary = Some(primary.clone());
    status.claim = Some(ClusterNames::claim_at(&primary, epoch));
    status.previous_claims.clone_from(&progress.previous_claims);
    status.error = None;
    let upgrade = with_status(upgrade, status);
    pass.core.event(
        EventType::Warning,
        "UpgradeStarted",
        "Upgrade",
        format!(
            "{name}: upgrading {} from PostgreSQL {from} to {to} with pg_upgrade; the instances stop; automatic fail-over is off until it is done; the current claims ({}) are kept",
            pass.core.name,
            progress.previous_claims.join(", ")
        ),
    );
    enter(
        pass,
        &mut progress,
        Some(&upgrade),
        STEPS[0],
        "stopping the instances (their claims stay)".into(),
    )
    .await?;
    advance(pass, valid, progress, Some(&upgrade)).await
}

/// Creates `job` unless a Job of its name exists; returns the existing one.
async fn ensure_job(
    pass: &PostgresPass,
    name: &str,
    desired: Option<Job>,
) -> Result<Option<Job>, Error> {
    let ns = pass.core.namespace.clone();
    let jobs: Api<Job> = pass.ctx.api(&ns);
    let object = format!("{ns}/{name}");
    if let Some(job) = jobs
        .get_opt(name)
        .await
        .map_err(|s| Error::kube("get Job", object.clone(), s))?
    {
        return Ok(Some(job));
    }
    let Some(desired) = desired else {
        return Err(Error::Internal {
            message: format!("the Job {name} could not be built (an owner without a UID)"),
        });
    };
    match jobs.create(&PostParams::default(), &desired).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
        Err(source) => Err(Error::kube("create Job", object, source)),
    }
}

/// A failed Job's reason with the last lines of its log.
fn job_failure(pass: &PostgresPass, job: &Job, name: &str, why: &str) -> String {
    let words = last_words(pass, job)
        .map(|w| format!(": {w}"))
        .unwrap_or_default();
    format!("Job {name} failed ({why}){words}")
}

/// Takes the next step of the upgrade in progress.
async fn advance(
    pass: &mut PostgresPass,
    valid: &ValidatedPostgresCluster,
    mut progress: UpgradeProgress,
    upgrade: Option<&PostgresUpgrade>,
) -> Result<Outcome, Error> {
    match progress.step.as_str() {
        "StopInstances" => {
            if stop_instances(pass).await? {
                let message = format!("pg_upgrade of {} into a new claim", progress.primary);
                enter(pass, &mut progress, upgrade, "UpgradeJob", message).await?;
                return Ok(Outcome::requeue(SOON, "pg_upgrade Job next"));
            }
            Ok(Outcome::requeue(
                SOON * 2,
                "waiting for the instances to stop",
            ))
        }
        "UpgradeJob" => {
            let Some(u) = upgrade else {
                let why = "the PostgresUpgrade was deleted before its Job ran".to_owned();
                return roll_back(pass, &progress, None, why).await;
            };
            let claim = claim_of_generation(pass, valid, &progress.primary, progress.epoch).await?;
            let job_name = build::upgrade_job_name(&progress.name);
            let old_claim = ClusterNames::claim_at(&progress.primary, progress.from_epoch);
            let what = build::UpgradeJob {
                from: &progress.from_version,
                to: &progress.to_version,
                old_claim: &old_claim,
                new_claim: &claim,
            };
            let Some(job) =
                ensure_job(pass, &job_name, build::upgrade_job(u, valid, &what)).await?
            else {
                let mut status = current(u);
                status.job = Some(job_name.clone());
                status.message = Some(format!(
                    "pg_upgrade runs in Job {job_name} from claim {old_claim} into claim {claim}"
                ));
                write_status(pass, u, status).await?;
                return Ok(Outcome::requeue(SOON * 3, "the pg_upgrade Job runs"));
            };
            match job_outcome(&job) {
                None => Ok(Outcome::requeue(SOON * 3, "the pg_upgrade Job runs")),
                Some(Err(why)) => {
                    let why = job_failure(pass, &job, &job_name, &why);
                    roll_back(pass, &progress, Some(u), why).await
                }
                Some(Ok(())) => {
                    let message = format!(
                        "starting {} on PostgreSQL {}",
                        progress.primary, progress.to_version
                    );
                    enter(pass, &mut progress, upgrade, "StartPrimary", message).await?;
                    Ok(Outcome::requeue(SOON, "starting the upgraded primary"))
                }
            }
        }
        "StartPrimary" => {
            if pass.names.epoch != progress.epoch {
                // The cluster moves to the new claims; the next pass sees it under their names.
                pass.status.data_epoch = Some(progress.epoch);
                pass.status.current_primary = Some(progress.primary.clone());
                pass.status.upgrade = Some(progress.clone());
                return Ok(Outcome::stop(
                    SOON,
                    "the cluster moves to the upgraded claims",
                ));
            }
            let view = pass.instance(&progress.primary).cloned();
            let major = view
                .as_ref()
                .and_then(|v| v.info.as_ref())
                .map(|i| (i.version_num / 10_000).to_string());
            if view.as_ref().is_some_and(|v| v.writable())
                && major.as_deref() == Some(progress.to_version.as_str())
            {
                enter(
                    pass,
                    &mut progress,
                    upgrade,
                    "RecloneReplicas",
                    "the replicas clone the upgraded primary".into(),
                )
                .await?;
                return Ok(Outcome::requeue(SOON, "replicas next"));
            }
            if let Some(major) = major.filter(|m| *m != progress.to_version) {
                let why = format!(
                    "the upgraded primary {} answers as PostgreSQL {major}, not {}: its image runs the wrong version",
                    progress.primary, progress.to_version
                );
                return fail_held(pass, &mut progress, upgrade, why).await;
            }
            if let Some(fatal) = view
                .as_ref()
                .filter(|v| !v.pod_ready)
                .and_then(|v| v.last_fatal.clone())
            {
                let why = format!(
                    "the upgraded primary {} cannot start: {fatal}",
                    progress.primary
                );
                return fail_held(pass, &mut progress, upgrade, why).await;
            }
            Ok(Outcome::requeue(SOON * 2, "the upgraded primary starts"))
        }
        "RecloneReplicas" => {
            let waiting = replicas_not_streaming(pass, valid, &progress.primary);
            if !waiting.is_empty() {
                return Ok(Outcome::requeue(
                    SOON * 2,
                    format!("waiting for {} to stream", waiting.join(", ")),
                ));
            }
            enter(
                pass,
                &mut progress,
                upgrade,
                "UpgradeStanza",
                "upgrading the pgBackRest stanza".into(),
            )
            .await?;
            Ok(Outcome::requeue(SOON, "stanza next"))
        }
        "UpgradeStanza" => {
            let stanza = pass
                .status
                .backups
                .as_ref()
                .is_some_and(|b| b.stanza.is_some());
            if let (true, Some(u)) = (valid.pgbackrest.is_some() && stanza, upgrade) {
                let job_name = pgbackrest::stanza_upgrade_job_name(&progress.name);
                let desired = pgbackrest::stanza_upgrade_job(u, valid);
                let Some(job) = ensure_job(pass, &job_name, desired).await? else {
                    return Ok(Outcome::requeue(SOON * 3, "stanza-upgrade runs"));
                };
                match job_outcome(&job) {
                    None => return Ok(Outcome::requeue(SOON * 3, "stanza-upgrade runs")),
                    Some(Err(why)) => {
                        let why = job_failure(pass, &job, &job_name, &why);
                        pass.core.event(
                            EventType::Warning,
                            "StanzaUpgradeFailed",
                            "Upgrade",
                            format!(
                                "{}: {why}; archiving and backups fail until `pgbackrest stanza-upgrade` succeeds",
                                progress.name
                            ),
                        );
                        progress.stanza_error = Some(why);
                    }
                    Some(Ok(())) => {}
                }
            }
            enter(
                pass,
                &mut progress,
                upgrade,
                "Analyze",
                "rebuilding the planner's statistics (vacuumdb --analyze-in-stages)".into(),
            )
            .await?;
            Ok(Outcome::requeue(SOON, "statistics next"))
        }
        "Analyze" => {
            if let Some(u) = upgrade {
                let job_name = build::analyze_job_name(&progress.name);
                let desired = build::analyze_job(u, valid, &progress.image);
                let Some(job) = ensure_job(pass, &job_name, desired).await? else {
                    return Ok(Outcome::requeue(SOON * 3, "vacuumdb runs"));
                };
                match job_outcome(&job) {
                    None => return Ok(Outcome::requeue(SOON * 3, "vacuumdb runs")),
                    Some(Err(why)) => {
                        let why = job_failure(pass, &job, &job_name, &why);
                        pass.core.event(
                            EventType::Warning,
                            "AnalyzeFailed",
                            "Upgrade",
                            format!(
                                "{}: {why}; the planner has no statistics until ANALYZE runs (autovacuum will)",
                                progress.name
                            ),
                        );
                    }
                    Some(Ok(())) => {}
                }
            }
            enter(
                pass,
                &mut progress,
                upgrade,
                "Finish",
                "the cluster's spec says the new version; a full backup follows".into(),
            )
            .await?;
            finish(pass, valid, progress, upgrade).await
        }
        "Finish" => finish(pass, valid, progress, upgrade).await,
        other => Err(Error::Internal {
            message: format!("unknown upgrade step {other:?} in status.upgrade"),
        }),
    }
}

/// Writes the new version into the cluster's spec, labels the previous claims, requests the
/// full backup, ends the operation.
async fn finish(
    pass: &mut PostgresPass,
    valid: &ValidatedPostgresCluster,
    progress: UpgradeProgress,
    upgrade: Option<&PostgresUpgrade>,
) -> Result<Outcome, Error> {
    let ns = pass.core.namespace.clone();
    let image = upgrade.and_then(|u| u.spec.image.clone());
    let patch = serde_json::json!({"spec": {"version": progress.to_version, "image": image}});
    let clusters: Api<PostgresCluster> = pass.ctx.api(&ns);
    clusters
        .patch(
            &pass.core.name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(|s| Error::kube("patch PostgresCluster spec.version", pass.object(), s))?;
    retire_claims(pass, &progress.previous_claims, UPGRADED_BY, &progress.name).await?;
    let mut backup = None;
    if let Some(u) = upgrade
        && valid.pgbackrest.is_some()
        && progress.stanza_error.is_none()
    {
        backup = Some(request_full_backup(pass, u).await?);
    }
    pass.status.upgrade = None;
    let mut message = format!(
        "{} runs PostgreSQL {} on the upgraded data ({}), its replicas stream; automatic fail-over is {} again; previous claims kept: {}",
        progress.primary,
        progress.to_version,
        ClusterNames::claim_at(&progress.primary, progress.epoch),
        if valid.failover.automatic {
            "on"
        } else {
            "off (as set)"
        },
        progress.previous_claims.join(", ")
    );
    if let Some(err) = &progress.stanza_error {
        message.push_str(&format!(
            "; the pgBackRest stanza was not upgraded ({err}): no backup was taken"
        ));
    }
    pass.core.event(
        EventType::Normal,
        "UpgradeCompleted",
        "Upgrade",
        format!("{}: {message}", progress.name),
    );
    pass.core.finish_operation(
        OperationKind::Upgrade,
        OperationPhase::Succeeded,
        message.clone(),
    );
    if let Some(u) = upgrade {
        let mut status = current(u);
        status.phase = Some(UpgradePhase::Completed);
        status.step = Some("Finish".into());
        status.message = Some(message);
        status.backup = backup;
        status.finished_at = Some(format_time(pass.core.now));
        write_status(pass, u, status).await?;
    }
    Ok(Outcome::requeue(SOON, "upgrade completed"))
}

#[async_trait]
impl SubReconciler<PostgresPass> for UpgradeCluster {
    fn name(&self) -> &'static str {
        "UpgradeCluster"
    }

    async fn reconcile(&self, pass: &mut PostgresPass) -> Result<Outcome, Error> {
        let valid = validated(pass)?;
        let all = pass.stores.upgrades.state();
        let upgrades = upgrades_of(&all, &pass.core.namespace, &pass.core.name);
        let Some(mut progress) = pass.status.upgrade.clone() else {
            let Some(next) = upgrades.iter().find(|u| unstarted(u)).cloned() else {
                return Ok(Outcome::Continue);
            };
            if pass.status.restore.is_some() {
                let why = "a restore holds the cluster".to_owned();
                pending(pass, &next, &why).await?;
                return Ok(Outcome::Continue);
            }
            return begin(pass, &valid, &next).await;
        };
        let own = upgrades
            .iter()
            .find(|u| u.name_any() == progress.name)
            .cloned();
        for other in upgrades
            .iter()
            .filter(|u| u.name_any() != progress.name && unstarted(u))
        {
            let why = format!("upgrade {} is running", progress.name);
            refuse(pass, other, why).await?;
        }
        if let Some(why) = progress.failed.clone() {
            if own.is_none() {
                // Abandoned: back on the previous claims and version, which were never touched.
                pass.status.data_epoch = (progress.from_epoch > 0).then_some(progress.from_epoch);
                pass.status.upgrade = None;
                pass.core.event(
                    EventType::Warning,
                    "UpgradeAbandoned",
                    "Upgrade",
                    format!(
                        "{} was deleted after it failed: the cluster comes back on its previous claims ({}) with PostgreSQL {}; the upgraded claim {} is kept",
                        progress.name,
                        progress.previous_claims.join(", "),
                        progress.from_version,
                        ClusterNames::claim_at(&progress.primary, progress.epoch)
                    ),
                );
                return Ok(Outcome::stop(
                    SOON,
                    "the cluster moves back to its previous claims",
                ));
            }
            pass.core
                .degrade("UpgradeFailed", held_message(&progress, &why));
            return Ok(Outcome::Continue);
        }
        let moved = runs_new_version(&progress);
        if own.is_none() && !moved {
            let why = format!("PostgresUpgrade {} was deleted", progress.name);
            return roll_back(pass, &progress, None, why).await;
        }
        // The deadline ended the operation: before the move the cluster comes back; after it,
        // it is held.
        let running = pass
            .core
            .status
            .operation
            .as_ref()
            .is_some_and(|op| op.kind == OperationKind::Upgrade);
        if !running {
            let why = pass
                .core
                .status
                .last_operation
                .as_ref()
                .filter(|op| op.kind == OperationKind::Upgrade)
                .map(|op| op.message.clone())
                .unwrap_or_else(|| "the Upgrade operation ended".into());
            if !moved {
                return roll_back(pass, &progress, own.as_deref(), why).await;
            }
            return fail_held(pass, &mut progress, own.as_deref(), why).await;
        }
        advance(pass, &valid, progress, own.as_deref()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upgrade(to: &str, without_backup: bool) -> PostgresUpgrade {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "steward.dev/v1alpha1", "kind": "PostgresUpgrade",
            "metadata": {"name": "u", "namespace": "team"},
            "spec": {"cluster": "db", "toVersion": to, "withoutBackup": without_backup}
        }))
        .unwrap()
    }

    fn op(kind: OperationKind, finished: &str) -> Operation {
        Operation {
            kind,
            phase: OperationPhase::Succeeded,
            generation: 1,
            step: "Done".into(),
            done: 1,
            total: 1,
            progress: "1/1".into(),
            started_at: finished.into(),
            deadline: finished.into(),
            finished_at: Some(finished.into()),
            message: String::new(),
            change: OperationChange::default(),
        }
    }

    fn backups(last: Option<&str>) -> BackupsStatus {
        BackupsStatus {
            last_successful_backup: last.map(str::to_owned),
            ..BackupsStatus::default()
        }
    }

    #[test]
    fn only_a_newer_major_version_is_accepted() {
        for to in ["15", "14"] {
            let why = refusal(&upgrade(to, false), 15, false, None, None).unwrap();
            assert!(
                why.contains("is not newer than the cluster's version 15"),
                "{why}"
            );
        }
        assert_eq!(refusal(&upgrade("16", false), 15, false, None, None), None);
        assert_eq!(refusal(&upgrade("17", false), 15, false, None, None), None);
    }

    #[test]
    fn with_a_repository_a_backup_newer_than_the_last_change_is_needed() {
        let u = upgrade("16", false);
        let why = refusal(&u, 15, true, Some(&backups(None)), None).unwrap();
        assert!(why.contains("holds no backup"), "{why}");
        let scale = op(OperationKind::Scale, "2026-12-07T12:00:00Z");
        let old = backups(Some("2026-12-07T11:00:00Z"));
        let why = refusal(&u, 15, true, Some(&old), Some(&scale)).unwrap();
        assert!(
            why.contains("older than the cluster's last scale operation"),
            "{why}"
        );
        let new = backups(Some("2026-12-07T12:30:00Z"));
        assert_eq!(refusal(&u, 15, true, Some(&new), Some(&scale)), None);
        // The last operation being the backup itself is no change.
        let backup = op(OperationKind::Backup, "2026-12-07T13:00:00Z");
        assert_eq!(refusal(&u, 15, true, Some(&new), Some(&backup)), None);
        // Said explicitly: no backup needed.
        let without = upgrade("16", true);
        assert_eq!(
            refusal(&without, 15, true, Some(&backups(None)), None),
            None
        );
        // No repository: nothing to check.
        assert_eq!(refusal(&u, 15, false, None, Some(&scale)), None);
    }

    #[test]
    fn the_instances_run_the_new_version_from_start_primary_on() {
        let mut p = UpgradeProgress {
            step: "UpgradeJob".into(),
            ..UpgradeProgress::default()
        };
        assert!(!runs_new_version(&p));
        for step in ["StartPrimary", "RecloneReplicas", "Analyze", "Finish"] {
            p.step = step.into();
            assert!(runs_new_version(&p), "{step}");
        }
        assert_eq!(
            repository("docker.io/library/postgres:16.2"),
            "docker.io/library/postgres"
        );
        assert_eq!(repository("localhost:5000/pg"), "localhost:5000/pg");
    }
}
