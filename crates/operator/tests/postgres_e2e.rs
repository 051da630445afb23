//! PostgreSQL end to end: real PostgreSQL instances run as Pods by the node agent, managed by
//! the operator, on a fresh control plane per test (see `common/e2e.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::e2e::Plane;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams};
use steward_api::common::{OperationKind, OperationPhase};
use steward_api::postgres::{InstanceRole, PostgresCluster};
use tokio::sync::Mutex;

const BOOT: Duration = Duration::from_secs(120);

fn manifest(name: &str, instances: i32, extra: &str) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: PostgresCluster\nmetadata:\n  name: {name}\nspec:\n  version: \"15\"\n  instances: {instances}\n  failover:\n    detectionDelaySeconds: 2\n  healthGate:\n    checks: 2\n    intervalSeconds: 1\n{extra}"
    )
}

/// Available, `want` ready instances, every replica streaming, nothing in progress.
fn settled(want: i32) -> impl Fn(&PostgresCluster) -> bool {
    move |c: &PostgresCluster| {
        let Some(s) = &c.status else { return false };
        let available = s
            .common
            .conditions
            .iter()
            .any(|x| x.type_ == "Available" && x.status == "True");
        available
            && s.ready_instances == want
            && s.replicas == want
            && s.instances
                .iter()
                .all(|i| i.ready && (i.role == InstanceRole::Primary || i.streaming))
            && s.common.operation.is_none()
            && s.pending_failover.is_none()
    }
}

async fn create(plane: &Plane, name: &str, instances: i32, extra: &str) -> PostgresCluster {
    plane.apply(&manifest(name, instances, extra)).await;
    plane
        .wait_for::<PostgresCluster, _>(
            &format!("{name} with {instances} ready instances"),
            name,
            BOOT,
            settled(instances),
        )
        .await
}

async fn secret_value(plane: &Plane, name: &str, key: &str) -> String {
    let s = plane.api::<Secret>().get(name).await.unwrap();
    String::from_utf8(s.data.unwrap()[key].0.clone()).unwrap()
}

async fn service_ip(plane: &Plane, name: &str) -> String {
    let svc = plane.api::<Service>().get(name).await.unwrap();
    svc.spec.unwrap().cluster_ip.unwrap()
}

async fn pod_ip(plane: &Plane, name: &str) -> String {
    let pod = plane.api::<Pod>().get(name).await.unwrap();
    pod.status.unwrap().pod_ip.unwrap()
}

async fn connect(
    host: &str,
    user: &str,
    password: &str,
    db: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut config = tokio_postgres::Config::new();
    config
        .host(host)
        .port(5432)
        .user(user)
        .password(password)
        .dbname(db)
        .connect_timeout(Duration::from_secs(2));
    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// A superuser session through the `-primary` Service, once it routes to a writable primary.
async fn primary(plane: &Plane, cluster: &str) -> tokio_postgres::Client {
    let ip = service_ip(plane, &format!("{cluster}-primary")).await;
    let password = secret_value(plane, &format!("{cluster}-superuser"), "password").await;
    plane
        .eventually(
            "the -primary Service routes to a writable primary",
            Duration::from_secs(30),
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

async fn superuser_on(plane: &Plane, cluster: &str, instance: &str) -> tokio_postgres::Client {
    let ip = pod_ip(plane, instance).await;
    let password = secret_value(plane, &format!("{cluster}-superuser"), "password").await;
    connect(&ip, "steward", &password, "postgres")
        .await
        .unwrap()
}

fn user_secret(name: &str, password: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\nstringData:\n  password: {password}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_replicate_and_users_follow_their_secrets() {
    let plane = Plane::start().await;
    plane
        .apply(&user_secret("app-password", "first-pass-1"))
        .await;
    let users = "  users:\n  - name: app\n    databases: [appdb]\n    passwordSecret:\n      name: app-password\n";
    let c = create(&plane, "trio", 3, users).await;
    let status = c.status.unwrap();
    assert_eq!(status.current_primary.as_deref(), Some("trio-0"));
    let last = status.common.last_operation.expect("bootstrap recorded");
    assert_eq!(
        (last.kind, last.phase),
        (OperationKind::Bootstrap, OperationPhase::Succeeded)
    );
    // Writes on the -primary Service appear on both replicas.
    let p = primary(&plane, "trio").await;
    p.batch_execute("CREATE TABLE t (v int); INSERT INTO t VALUES (42);")
        .await
        .unwrap();
    for replica in ["trio-1", "trio-2"] {
        let r = superuser_on(&plane, "trio", replica).await;
        let in_recovery: bool = r
            .query_one("SELECT pg_is_in_recovery()", &[])
            .await
            .unwrap()
            .get(0);
        assert!(in_recovery, "{replica} is a standby");
        plane
            .eventually(
                &format!("the row reaches {replica}"),
                Duration::from_secs(20),
                || {
                    let r = &r;
                    async move {
                        let row = r.query_opt("SELECT v FROM t", &[]).await.ok()??;
                        (row.get::<_, i32>(0) == 42).then_some(())
                    }
                },
            )
            .await;
        let err = r
            .batch_execute("INSERT INTO t VALUES (1)")
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION),
            "{err:?}"
        );
    }
    // The -primary Service selects exactly the primary's Pod.
    let labelled = plane
        .api::<Pod>()
        .list(&ListParams::default().labels("steward.dev/role=primary"))
        .await
        .unwrap();
    assert_eq!(
        labelled
            .items
            .iter()
            .map(|p| p.name_any())
            .collect::<Vec<_>>(),
        ["trio-0"]
    );
    // The user logs in with its Secret's password and owns its database.
    let svc = service_ip(&plane, "trio-primary").await;
    let app = connect(&svc, "app", "first-pass-1", "appdb").await.unwrap();
    app.batch_execute("CREATE TABLE mine (x int)")
        .await
        .unwrap();
    let labels = plane
        .api::<Secret>()
        .get("app-password")
        .await
        .unwrap()
        .labels()
        .clone();
    assert!(
        labels.contains_key("steward.dev/user-password"),
        "{labels:?}"
    );
    // Rotation: the new password works and the old one stops within seconds.
    plane
        .apply(&user_secret("app-password", "second-pass-2"))
        .await;
    plane
        .eventually("the new password logs in", Duration::from_secs(20), || {
            let svc = svc.clone();
            async move {
                connect(&svc, "app", "second-pass-2", "appdb")
                    .await
                    .ok()
                    .map(|_| ())
            }
        })
        .await;
    assert!(connect(&svc, "app", "first-pass-1", "appdb").await.is_err());
    // Changed inside the database by hand: the next rotation is reported, not looped on.
    p.batch_execute("ALTER USER app PASSWORD 'by-hand-3'")
        .await
        .unwrap();
    plane
        .apply(&user_secret("app-password", "fourth-pass-4"))
        .await;
    let c = plane
        .wait_for::<PostgresCluster, _>(
            "the failed rotation reported",
            "trio",
            Duration::from_secs(20),
            |c| {
                c.status.as_ref().is_some_and(|s| {
                    s.users.iter().any(|u| {
                        u.name == "app"
                            && !u.ready
                            && u.message.contains("changed inside the database")
                    })
                })
            },
        )
        .await;
    let message = &c.status.unwrap().users[0].message;
    assert!(
        !message.contains("by-hand-3") && !message.contains("fourth-pass-4"),
        "{message}"
    );
    assert!(connect(&svc, "app", "by-hand-3", "appdb").await.is_ok());
    plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_primary_promotes_a_replica_and_keeps_synchronous_writes() {
    let plane = Plane::start().await;
    let params = "  parameters:\n    synchronous_standby_names: \"ANY 1 (*)\"\n";
    create(&plane, "fo", 3, params).await;
    let p = primary(&plane, "fo").await;
    p.batch_execute("CREATE TABLE w (id int primary key)")
        .await
        .unwrap();
    drop(p);
    // A writer through the -primary Service records every acknowledged insert.
    let acked = Arc::new(Mutex::new(Vec::<i32>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let ip = service_ip(&plane, "fo-primary").await;
    let password = secret_value(&plane, "fo-superuser", "password").await;
    let writer = {
        let (acked, stop, ip, password) =
            (acked.clone(), stop.clone(), ip.clone(), password.clone());
        tokio::spawn(async move {
            let mut next = 0;
            let mut client: Option<tokio_postgres::Client> = None;
            while !stop.load(Ordering::Relaxed) {
                if client.is_none() {
                    client = connect(&ip, "steward", &password, "postgres").await.ok();
                }
                if let Some(c) = &client {
                    match tokio::time::timeout(
                        Duration::from_secs(3),
                        c.execute("INSERT INTO w VALUES ($1)", &[&next]),
                    )
                    .await
                    {
                        Ok(Ok(_)) => {
                            acked.lock().await.push(next);
                            next += 1;
                        }
                        _ => {
                            client = None;
                            next += 1;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Kill the primary's postmaster, and again whenever its container restarts it: a primary
    // that crashes in a loop stays not ready past the detection delay (a single kill is
    // survived by a container restart within the delay, which is no reason to fail over).
    let old_ip = pod_ip(&plane, "fo-0").await;
    let pattern = format!("listen_addresses={old_ip} ");
    let killer = {
        let pattern = pattern.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut kills = 0;
            while !flag.load(Ordering::Relaxed) {
                let status = std::process::Command::new("pkill")
                    .args(["-9", "-f", &pattern])
                    .status()
                    .unwrap();
                if status.success() {
                    kills += 1;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            kills
        });
        (stop, task)
    };
    let c = plane
        .wait_for::<PostgresCluster, _>("a replica promoted", "fo", Duration::from_secs(60), |c| {
            c.status.as_ref().is_some_and(|s| {
                s.current_primary.as_deref().is_some_and(|p| p != "fo-0")
                    && s.pending_failover.is_none()
            })
        })
        .await;
    killer.0.store(true, Ordering::Relaxed);
    let kills = killer.1.await.unwrap();
    assert!(kills >= 1, "the postmaster of fo-0 was found and killed");
    let new_primary = c.status.unwrap().current_primary.unwrap();
    // Writes resume through the -primary Service.
    let before = acked.lock().await.len();
    plane
        .eventually("writes resume", Duration::from_secs(30), || {
            let acked = acked.clone();
            async move { (acked.lock().await.len() > before + 5).then_some(()) }
        })
        .await;
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    // Every acknowledged write is on the new primary.
    let p = primary(&plane, "fo").await;
    let in_db: Vec<i32> = p
        .query("SELECT id FROM w", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let acked = acked.lock().await.clone();
    let missing: Vec<&i32> = acked.iter().filter(|a| !in_db.contains(a)).collect();
    assert!(missing.is_empty(), "acknowledged writes lost: {missing:?}");
    // The old primary rejoins as a replica; the cluster settles with 3 ready instances.
    let c = plane
        .wait_for::<PostgresCluster, _>("the old primary rejoins", "fo", BOOT, settled(3))
        .await;
    let s = c.status.unwrap();
    assert_eq!(s.current_primary.as_deref(), Some(new_primary.as_str()));
    let old = s.instances.iter().find(|i| i.name == "fo-0").unwrap();
    assert_eq!(old.role, InstanceRole::Replica);
    assert!(old.timeline.unwrap() >= 2, "{old:?}");
    let last = s.common.last_operation.unwrap();
    assert_eq!(
        (last.kind, last.phase),
        (OperationKind::Failover, OperationPhase::Succeeded)
    );
    plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn switchover_scaling_and_a_rolling_restart() {
    let plane = Plane::start().await;
    create(&plane, "sw", 3, "").await;
    let p = primary(&plane, "sw").await;
    p.batch_execute("CREATE TABLE t (v int); INSERT INTO t VALUES (1);")
        .await
        .unwrap();
    drop(p);
    // Switchover to a named replica.
    let clusters = plane.api::<PostgresCluster>();
    let patch = serde_json::json!({"spec": {"switchover": {"id": "one", "target": "sw-2"}}});
    clusters
        .patch("sw", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let c = plane
        .wait_for::<PostgresCluster, _>("switched over to sw-2", "sw", BOOT, |c| {
            settled(3)(c)
                && c.status.as_ref().is_some_and(|s| {
                    s.current_primary.as_deref() == Some("sw-2")
                        && s.last_switchover.as_deref() == Some("one")
                })
        })
        .await;
    assert_eq!(
        c.status
            .unwrap()
            .instances
            .iter()
            .find(|i| i.name == "sw-0")
            .unwrap()
            .role,
        InstanceRole::Replica
    );
    let p = primary(&plane, "sw").await;
    let n: i64 = p
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    p.batch_execute("INSERT INTO t VALUES (2)").await.unwrap();
    drop(p);
    // Scale 3 → 2: the highest-ordinal replica goes, never the primary.
    clusters
        .patch(
            "sw",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {"instances": 2}})),
        )
        .await
        .unwrap();
    let c = plane
        .wait_for::<PostgresCluster, _>("scaled to 2", "sw", BOOT, settled(2))
        .await;
    let names: Vec<String> = c
        .status
        .unwrap()
        .instances
        .iter()
        .map(|i| i.name.clone())
        .collect();
    assert_eq!(names, ["sw-0", "sw-2"]);
    // And back to 3.
    clusters
        .patch(
            "sw",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {"instances": 3}})),
        )
        .await
        .unwrap();
    plane
        .wait_for::<PostgresCluster, _>("scaled to 3", "sw", BOOT, settled(3))
        .await;
    let r = superuser_on(&plane, "sw", "sw-1").await;
    plane
        .eventually("sw-1 has both rows", Duration::from_secs(20), || {
            let r = &r;
            async move {
                (r.query_one("SELECT count(*) FROM t", &[])
                    .await
                    .ok()?
                    .get::<_, i64>(0)
                    == 2)
                    .then_some(())
            }
        })
        .await;
    // A parameter change restarts every instance, the primary last (after a switchover).
    let uids = |pods: &Vec<Pod>| {
        pods.iter()
            .map(|p| (p.name_any(), p.uid().unwrap()))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let before = uids(
        &plane
            .api::<Pod>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items,
    );
    clusters
        .patch(
            "sw",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {"parameters": {"work_mem": "8MB"}}})),
        )
        .await
        .unwrap();
    let c = plane
        .wait_for::<PostgresCluster, _>("restarted", "sw", Duration::from_secs(180), |c| {
            settled(3)(c)
                && c.status
                    .as_ref()
                    .and_then(|s| s.common.last_operation.as_ref())
                    .is_some_and(|o| {
                        o.kind == OperationKind::Restart && o.phase == OperationPhase::Succeeded
                    })
        })
        .await;
    let after = uids(
        &plane
            .api::<Pod>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items,
    );
    for (name, uid) in &before {
        assert_ne!(after.get(name), Some(uid), "{name} was restarted");
    }
    assert_ne!(
        c.status.unwrap().current_primary.as_deref(),
        Some("sw-2"),
        "the old primary restarted as a replica"
    );
    let p = primary(&plane, "sw").await;
    let wm: String = p.query_one("SHOW work_mem", &[]).await.unwrap().get(0);
    assert_eq!(wm, "8MB");
    plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invalid_specs_are_refused_and_nothing_is_deleted() {
    let plane = Plane::start().await;
    // The schema refuses what it can express.
    let err = plane_apply_err(&plane, &manifest("zero", 0, "")).await;
    assert!(err.contains("instances"), "{err}");
    // The operator refuses the rest with a condition and creates nothing.
    plane
        .apply(&manifest("bad", 1, "  parameters:\n    port: \"6543\"\n"))
        .await;
    plane
        .wait_for::<PostgresCluster, _>("InvalidSpec", "bad", Duration::from_secs(20), |c| {
            c.status.as_ref().is_some_and(|s| {
                s.common.conditions.iter().any(|x| {
                    x.type_ == "Degraded" && x.status == "True" && x.message.contains("port")
                })
            })
        })
        .await;
    let pods = plane
        .api::<Pod>()
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(pods.items.is_empty());
    // A running cluster given an invalid spec keeps running.
    create(&plane, "ok", 1, "").await;
    let clusters = plane.api::<PostgresCluster>();
    clusters
        .patch("ok", &PatchParams::default(), &Patch::Merge(&serde_json::json!({"spec": {"users": [{"name": "steward", "passwordSecret": {"name": "x"}}]}})))
        .await
        .unwrap();
    plane
        .wait_for::<PostgresCluster, _>("InvalidSpec", "ok", Duration::from_secs(20), |c| {
            c.status.as_ref().is_some_and(|s| {
                s.common.conditions.iter().any(|x| {
                    x.type_ == "Degraded" && x.status == "True" && x.reason == "InvalidSpec"
                })
            })
        })
        .await;
    let pod = plane.api::<Pod>().get("ok-0").await.unwrap();
    assert!(pod.metadata.deletion_timestamp.is_none());
    let p = primary(&plane, "ok").await;
    p.batch_execute("SELECT 1").await.unwrap();
    plane.shutdown().await;
}

async fn plane_apply_err(plane: &Plane, yaml: &str) -> String {
    match steward_operator::dev::apply_manifests(&plane.client, yaml, &plane.namespace).await {
        Ok(applied) => panic!("{applied:?} was accepted"),
        Err(e) => e.to_string(),
    }
}
