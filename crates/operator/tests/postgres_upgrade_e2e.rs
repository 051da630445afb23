//! PostgreSQL major-version upgrades end to end (issue 31, seed 004 "Upgrade - pgupgrades"):
//! real PostgreSQL 15 (Debian) upgraded to 16 (`/usr/lib/postgresql/16`, installed by
//! `scripts/prereqs.sh`) with real `pg_upgrade`, real pgBackRest, Pods run by the node agent.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::e2e::{Plane, connect, secret_value, true_condition, with_webhooks};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
use steward_api::common::{OperationKind, OperationPhase};
use steward_api::pgupgrade::{PostgresUpgrade, UpgradePhase};
use steward_api::postgres::{InstanceRole, PostgresCluster};

const BOOT: Duration = Duration::from_secs(120);
const UPGRADE: Duration = Duration::from_secs(300);

fn cluster(name: &str, instances: i32, extra: &str) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: PostgresCluster\nmetadata:\n  name: {name}\nspec:\n  version: \"15\"\n  instances: {instances}\n  failover: {{detectionDelaySeconds: 2}}\n  healthGate:\n    checks: 2\n    intervalSeconds: 1\n{extra}"
    )
}

fn upgrade(name: &str, cluster: &str, to: &str, extra: &str) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: PostgresUpgrade\nmetadata:\n  name: {name}\nspec:\n  cluster: {cluster}\n  toVersion: \"{to}\"\n{extra}"
    )
}

fn settled(want: i32) -> impl Fn(&PostgresCluster) -> bool {
    move |c: &PostgresCluster| {
        let Some(s) = &c.status else { return false };
        true_condition(&s.common, "Available").is_some()
            && s.ready_instances == want
            && s.instances
                .iter()
                .all(|i| i.ready && (i.role == InstanceRole::Primary || i.streaming))
            && s.common.operation.is_none()
    }
}

async fn primary(plane: &Plane, cluster: &str) -> tokio_postgres::Client {
    let svc = plane
        .api::<Service>()
        .get(&format!("{cluster}-primary"))
        .await
        .unwrap();
    let ip = svc.spec.unwrap().cluster_ip.unwrap();
    let password = secret_value(plane, &format!("{cluster}-superuser"), "password").await;
    plane
        .eventually(
            "the -primary Service routes to a writable primary",
            Duration::from_secs(60),
            || {
                let (ip, password) = (ip.clone(), password.clone());
                async move {
                    let c = connect(&ip, "steward", &password, "postgres").await.ok()?;
                    let row = c.query_one("SELECT pg_is_in_recovery()", &[]).await.ok()?;
                    (!row.get::<_, bool>(0)).then_some(c)
                }
            },
        )
        .await
}

async fn apply_err(plane: &Plane, yaml: &str) -> String {
    match steward_operator::dev::apply_manifests(&plane.client, yaml, &plane.namespace).await {
        Ok(applied) => panic!("{applied:?} was accepted"),
        Err(e) => e.to_string(),
    }
}

async fn ended(plane: &Plane, name: &str) -> PostgresUpgrade {
    plane
        .wait_for::<PostgresUpgrade, _>(&format!("{name} ended"), name, UPGRADE, |u| {
            u.status.as_ref().is_some_and(|s| {
                matches!(
                    s.phase,
                    Some(UpgradePhase::Completed | UpgradePhase::Failed)
                )
            })
        })
        .await
}

async fn server_major(session: &tokio_postgres::Client) -> i32 {
    let row = session
        .query_one(
            "SELECT current_setting('server_version_num')::int / 10000",
            &[],
        )
        .await
        .unwrap();
    row.get(0)
}

/// A refused upgrade changes nothing; an upgrade whose `pg_upgrade --check` fails (a `regproc`
/// column, which pg_upgrade cannot carry) comes back on 15 by itself with the check's report;
/// once the column is gone, the upgrade runs across an operator restart: rows intact, the
/// replica streams on 16, the stanza upgraded and a full backup taken on 16, the old claims
/// kept and labelled, `spec.version` 16, the upgrade webhook sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_moves_from_15_to_16_after_a_refused_and_a_failed_attempt() {
    use steward_api::pgbackrest::{BackupPhase, PostgresBackup};
    let (hook_url, hooks) = common::hooks::receiver(axum::http::StatusCode::OK).await;
    let mut plane = with_webhooks(&hook_url).await;
    let extra = "  backups:\n    pgbackrest:\n      storage: {size: 1Gi}\n";
    plane.apply(&cluster("up", 2, extra)).await;
    plane
        .wait_for::<PostgresCluster, _>("up settled", "up", BOOT, settled(2))
        .await;
    plane
        .wait_for::<PostgresCluster, _>("the stanza", "up", BOOT, |c| {
            c.status
                .as_ref()
                .and_then(|s| s.backups.as_ref())
                .is_some_and(|b| b.stanza.is_some())
        })
        .await;
    let session = primary(&plane, "up").await;
    assert_eq!(server_major(&session).await, 15);
    session
        .batch_execute(
            "CREATE TABLE t (id int primary key, v text); \
             INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, 500) g; \
             CREATE TABLE bad (f regproc); INSERT INTO bad VALUES ('now')",
        )
        .await
        .unwrap();
    drop(session);

    // Refused: the repository holds no backup yet. Nothing moves.
    plane.apply(&upgrade("up-nobackup", "up", "16", "")).await;
    let refused = ended(&plane, "up-nobackup").await.status.unwrap();
    assert_eq!(refused.phase, Some(UpgradePhase::Failed));
    assert!(
        refused
            .error
            .as_deref()
            .unwrap()
            .contains("holds no backup"),
        "{refused:?}"
    );
    assert_eq!(
        refused.message.as_deref(),
        Some("refused; nothing was changed")
    );
    // A version that is not newer is refused by the same rule.
    plane
        .apply(&upgrade("up-old", "up", "14", "  withoutBackup: true\n"))
        .await;
    let old = ended(&plane, "up-old").await.status.unwrap();
    assert!(
        old.error.unwrap().contains("is not newer"),
        "refused downgrade"
    );
    let c = plane.api::<PostgresCluster>().get("up").await.unwrap();
    assert!(c.status.as_ref().unwrap().common.operation.is_none());
    assert_eq!(c.status.unwrap().data_epoch, None, "nothing moved");
    // spec.version cannot be edited into a major upgrade.
    let edit = apply_err(
        &plane,
        &cluster("up", 2, extra).replace("version: \"15\"", "version: \"16\""),
    )
    .await;
    assert!(edit.contains("changes through a PostgresUpgrade"), "{edit}");

    // A backup; then the check fails on the regproc column: back on 15, by itself.
    plane
        .apply("apiVersion: steward.dev/v1alpha1\nkind: PostgresBackup\nmetadata:\n  name: up-b1\nspec:\n  cluster: up\n  type: full\n")
        .await;
    let b = plane
        .wait_for::<PostgresBackup, _>("up-b1 done", "up-b1", BOOT, |b| {
            b.status
                .as_ref()
                .is_some_and(|s| s.phase == Some(BackupPhase::Completed))
        })
        .await;
    assert!(b.status.unwrap().label.is_some());
    plane.apply(&upgrade("up-check", "up", "16", "")).await;
    let failed = ended(&plane, "up-check").await.status.unwrap();
    assert_eq!(failed.phase, Some(UpgradePhase::Failed), "{failed:?}");
    let error = failed.error.unwrap();
    assert!(error.contains("pg_upgrade --check failed"), "{error}");
    assert!(error.contains("reg*"), "the check's own report: {error}");
    plane
        .wait_for::<PostgresCluster, _>("up back on 15", "up", BOOT, settled(2))
        .await;
    let session = primary(&plane, "up").await;
    assert_eq!(server_major(&session).await, 15, "still 15");
    let c = plane.api::<PostgresCluster>().get("up").await.unwrap();
    assert_eq!(c.spec.version, "15");
    let last = c.status.unwrap().common.last_operation.unwrap();
    assert_eq!(
        (last.kind, last.phase, last.change.rolled_back),
        (OperationKind::Upgrade, OperationPhase::Failed, Some(true))
    );

    // Fixed; the upgrade runs, and the operator restarts in its pg_upgrade step.
    session.batch_execute("DROP TABLE bad").await.unwrap();
    drop(session);
    plane
        .apply(&upgrade("up-16", "up", "16", "  withoutBackup: true\n"))
        .await;
    plane
        .wait_for::<PostgresUpgrade, _>("up-16 in its Job", "up-16", UPGRADE, |u| {
            u.status.as_ref().and_then(|s| s.step.as_deref()) == Some("UpgradeJob")
        })
        .await;
    let started = plane
        .api::<PostgresCluster>()
        .get("up")
        .await
        .unwrap()
        .status
        .unwrap()
        .common
        .operation
        .unwrap()
        .started_at;
    plane.restart_operator().await;
    // The new operator resumes the same operation (same start, same deadline).
    let resumed = plane
        .wait_for::<PostgresCluster, _>("the upgrade resumed", "up", UPGRADE, |c| {
            c.status
                .as_ref()
                .and_then(|s| s.common.operation.as_ref())
                .is_some_and(|op| {
                    op.kind == OperationKind::Upgrade
                        && !["StopInstances", "UpgradeJob"].contains(&op.step.as_str())
                })
        })
        .await;
    let op = resumed.status.unwrap().common.operation.unwrap();
    assert_eq!(
        op.started_at, started,
        "the same operation continued after the restart"
    );
    let done = ended(&plane, "up-16").await.status.unwrap();
    assert_eq!(done.phase, Some(UpgradePhase::Completed), "{done:?}");
    assert_eq!(done.from_version.as_deref(), Some("15"));
    assert_eq!(done.previous_claims, ["up-0-pgdata", "up-1-pgdata"]);
    assert_eq!(done.backup.as_deref(), Some("up-16-full"));
    let c = plane
        .wait_for::<PostgresCluster, _>("up settled on 16", "up", UPGRADE, |c| {
            c.spec.version == "16" && settled(2)(c)
        })
        .await;
    let status = c.status.unwrap();
    assert!(status.upgrade.is_none());
    let session = primary(&plane, "up").await;
    assert_eq!(server_major(&session).await, 16);
    let row = session
        .query_one("SELECT count(*), sum(length(v)) FROM t", &[])
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i64>(1)),
        (500, 500 * 32)
    );
    // Statistics were rebuilt.
    let analyzed = session
        .query_one(
            "SELECT last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = 't'",
            &[],
        )
        .await
        .unwrap();
    assert!(analyzed.get::<_, bool>(0), "t analyzed after the upgrade");
    // The replica streams on 16.
    let replica = status
        .instances
        .iter()
        .find(|i| i.role == InstanceRole::Replica)
        .unwrap()
        .name
        .clone();
    let streaming = session
        .query_one(
            "SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'",
            &[&replica],
        )
        .await
        .unwrap();
    assert_eq!(streaming.get::<_, i64>(0), 1);
    session
        .batch_execute("INSERT INTO t VALUES (501, 'after')")
        .await
        .unwrap();
    // The full backup on 16, through the upgraded stanza.
    let full = plane
        .wait_for::<PostgresBackup, _>("up-16-full done", "up-16-full", BOOT, |b| {
            b.status.as_ref().is_some_and(|s| {
                matches!(s.phase, Some(BackupPhase::Completed | BackupPhase::Failed))
            })
        })
        .await;
    assert_eq!(
        full.status.as_ref().and_then(|s| s.phase),
        Some(BackupPhase::Completed),
        "{full:?}"
    );
    // The old claims are kept and labelled.
    for claim in ["up-0-pgdata", "up-1-pgdata"] {
        let pvc = plane
            .api::<PersistentVolumeClaim>()
            .get(claim)
            .await
            .unwrap();
        let labels = pvc.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get("steward.dev/upgraded-by").map(String::as_str),
            Some("up-16")
        );
    }
    // The webhook of the upgrade's end.
    plane
        .eventually("the upgrade webhook", Duration::from_secs(30), || {
            let hooks = hooks.clone();
            async move {
                hooks.all().iter().find_map(|(_, body)| {
                    let h: serde_json::Value = serde_json::from_str(body).ok()?;
                    (h["event"] == "upgrade"
                        && h["status"] == "success"
                        && h["upgrade_data"]["new_version"] == "16"
                        && h["upgrade_data"]["old_version"] == "15")
                        .then_some(())
                })
            }
        })
        .await;
    plane.shutdown().await;
}
