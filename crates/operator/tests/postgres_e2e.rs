//! PostgreSQL end to end: real PostgreSQL instances run as Pods by the node agent, managed by
//! the operator, on a fresh control plane per test (see `common/e2e.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::e2e::{Plane, connect, pod_ip, secret_value, true_condition, with_webhooks};
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams};
use steward_api::common::{OperationKind, OperationPhase};
use steward_api::postgres::{FailoverProgress, InstanceRole, PostgresCluster};
use tokio::sync::Mutex;

const BOOT: Duration = Duration::from_secs(120);

fn manifest(name: &str, instances: i32, extra: &str) -> String {
    manifest_with_failover(name, instances, "{detectionDelaySeconds: 2}", extra)
}

/// `failover` is the `spec.failover` mapping in flow style.
fn manifest_with_failover(name: &str, instances: i32, failover: &str, extra: &str) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: PostgresCluster\nmetadata:\n  name: {name}\nspec:\n  version: \"15\"\n  instances: {instances}\n  failover: {failover}\n  healthGate:\n    checks: 2\n    intervalSeconds: 1\n{extra}"
    )
}

/// Available, `want` ready instances, every replica streaming, nothing in progress.
fn settled(want: i32) -> impl Fn(&PostgresCluster) -> bool {
    move |c: &PostgresCluster| {
        let Some(s) = &c.status else { return false };
        true_condition(&s.common, "Available").is_some()
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
    create_from(plane, name, instances, &manifest(name, instances, extra)).await
}

async fn create_from(plane: &Plane, name: &str, instances: i32, yaml: &str) -> PostgresCluster {
    plane.apply(yaml).await;
    plane
        .wait_for::<PostgresCluster, _>(
            &format!("{name} with {instances} ready instances"),
            name,
            BOOT,
            settled(instances),
        )
        .await
}

/// Inserts ids 0, 1, ... into a new table `w` through the `-primary` Service every 20 ms,
/// reconnecting after any error, and records which inserts were acknowledged, and when.
struct Writer {
    acked: Arc<Mutex<Vec<(i32, std::time::Instant)>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    async fn start(plane: &Plane, cluster: &str) -> Self {
        primary(plane, cluster)
            .await
            .batch_execute("CREATE TABLE w (id int primary key)")
            .await
            .unwrap();
        let acked = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let ip = service_ip(plane, &format!("{cluster}-primary")).await;
        let password = secret_value(plane, &format!("{cluster}-superuser"), "password").await;
        let task = {
            let (acked, stop) = (acked.clone(), stop.clone());
            tokio::spawn(async move {
                let mut next = 0;
                let mut client: Option<tokio_postgres::Client> = None;
                while !stop.load(Ordering::Relaxed) {
                    if client.is_none() {
                        client = connect(&ip, "steward", &password, "postgres").await.ok();
                    }
                    if let Some(c) = &client {
                        let id = [&next as &(dyn tokio_postgres::types::ToSql + Sync)];
                        let insert = c.execute("INSERT INTO w VALUES ($1)", &id);
                        match tokio::time::timeout(Duration::from_secs(3), insert).await {
                            Ok(Ok(_)) => {
                                acked.lock().await.push((next, std::time::Instant::now()));
                            }
                            _ => client = None,
                        }
                        next += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        Self { acked, stop, task }
    }

    /// Waits for more acknowledged writes, stops, and checks that every acknowledged insert
    /// is on the current primary.
    async fn resumes_and_lost_nothing(self, plane: &Plane, cluster: &str) {
        let before = self.acked.lock().await.len();
        plane
            .eventually("writes resume", Duration::from_secs(30), || {
                let acked = self.acked.clone();
                async move { (acked.lock().await.len() > before + 5).then_some(()) }
            })
            .await;
        let acked = self.stop().await;
        assert!(acked.len() > 5, "the writer got writes through: {acked:?}");
        assert_none_lost(plane, cluster, &acked).await;
    }

    /// Stops; returns the acknowledged ids with the time each was acknowledged.
    async fn stop(self) -> Vec<(i32, std::time::Instant)> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        self.acked.lock().await.clone()
    }
}

/// Waits until the switchover or fail-over request `id` made `primary` the primary and the
/// cluster settled again with 3 ready instances.
async fn handled(plane: &Plane, cluster: &str, primary: &str, id: &str) -> PostgresCluster {
    plane
        .wait_for::<PostgresCluster, _>(
            &format!("request {id} handled: {primary} is the primary"),
            cluster,
            BOOT,
            |c| {
                settled(3)(c)
                    && c.status.as_ref().is_some_and(|s| {
                        s.current_primary.as_deref() == Some(primary)
                            && s.last_switchover.as_deref() == Some(id)
                    })
            },
        )
        .await
}

async fn service_ip(plane: &Plane, name: &str) -> String {
    let svc = plane.api::<Service>().get(name).await.unwrap();
    svc.spec.unwrap().cluster_ip.unwrap()
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

/// Kills an instance's postmaster every 100 ms until stopped, so that an instance whose
/// container restarts it stays down.
struct Killer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<u32>,
}

impl Killer {
    /// `pattern` as made by [`postmaster_pattern`].
    fn start(pattern: String) -> Self {
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
        Self { stop, task }
    }

    /// Stops killing; returns how many times a postmaster was found and killed.
    async fn stop(self) -> u32 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// A `pkill -f`/`pgrep -f` pattern for the command line of the postmaster of `instance` of
/// `cluster` (its Pod IP, its name and the test's namespace): it matches this plane's instance
/// only, even once the node agent has handed the address back for other agents to reuse.
async fn postmaster_pattern(plane: &Plane, cluster: &str, instance: &str) -> String {
    let ip = pod_ip(plane, instance).await.replace('.', "\\.");
    format!(
        "listen_addresses={ip} .*cluster_name={instance} .*host={cluster}-primary\\.{}\\.svc ",
        plane.namespace
    )
}

/// Whether a process matching `pattern` runs.
fn postmaster_runs(pattern: &str) -> bool {
    std::process::Command::new("pgrep")
        .args(["-f", pattern])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
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
    // The replicas' budget lets a drain take one replica at a time.
    let budget = plane.disruptions_allowed("trio-replicas", 1).await;
    assert_eq!(
        (budget.current_healthy, budget.desired_healthy),
        (Some(2), Some(1))
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
    drop(p);
    // A writer through the -primary Service records every acknowledged insert.
    let writer = Writer::start(&plane, "fo").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Kill the primary's postmaster, and again whenever its container restarts it: a primary
    // that crashes in a loop stays not ready past the detection delay (a single kill is
    // survived by a container restart within the delay, which is no reason to fail over).
    let killer = Killer::start(postmaster_pattern(&plane, "fo", "fo-0").await);
    let c = plane
        .wait_for::<PostgresCluster, _>("a replica promoted", "fo", Duration::from_secs(60), |c| {
            c.status.as_ref().is_some_and(|s| {
                s.current_primary.as_deref().is_some_and(|p| p != "fo-0")
                    && s.pending_failover.is_none()
            })
        })
        .await;
    let kills = killer.stop().await;
    assert!(kills >= 1, "the postmaster of fo-0 was found and killed");
    let new_primary = c.status.unwrap().current_primary.unwrap();
    // Writes resume through the -primary Service, and every acknowledged one is there.
    writer.resumes_and_lost_nothing(&plane, "fo").await;
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
    let mut plane = Plane::start().await;
    create(&plane, "sw", 3, "").await;
    let p = primary(&plane, "sw").await;
    p.batch_execute("CREATE TABLE t (v int); INSERT INTO t VALUES (1);")
        .await
        .unwrap();
    drop(p);
    // Switchover to a named replica, under a writer: the old primary is demoted only after
    // the target replayed its last position, so no acknowledged write is lost.
    let writer = Writer::start(&plane, "sw").await;
    plane
        .patch_spec::<PostgresCluster>(
            "sw",
            serde_json::json!({"switchover": {"id": "one", "target": "sw-2"}}),
        )
        .await;
    let c = handled(&plane, "sw", "sw-2", "one").await;
    writer.resumes_and_lost_nothing(&plane, "sw").await;
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
    plane
        .patch_spec::<PostgresCluster>("sw", serde_json::json!({"instances": 2}))
        .await;
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
    plane
        .patch_spec::<PostgresCluster>("sw", serde_json::json!({"instances": 3}))
        .await;
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
    plane
        .patch_spec::<PostgresCluster>("sw", serde_json::json!({"parameters": {"work_mem": "8MB"}}))
        .await;
    // The operator restarts while an instance is behind the health gate: the new one carries
    // on with the same operation and does not restart that instance again. The gate is set in
    // the pass that deletes the Pod, whose object stays (Terminating, same uid) while
    // PostgreSQL shuts down; so wait until the gated instance runs in its replacement Pod.
    let (gated, gated_uid, started_at) = plane
        .eventually(
            "an instance behind the health gate, running in its new Pod",
            Duration::from_secs(180),
            || {
                let (plane, before) = (&plane, &before);
                async move {
                    let c = plane.api::<PostgresCluster>().get("sw").await.ok()?;
                    let s = c.status?;
                    let op = s
                        .common
                        .operation
                        .filter(|o| o.kind == OperationKind::Restart)?;
                    let gated = s.restart_gate?.instance;
                    let pod = plane.api::<Pod>().get_opt(&gated).await.ok()??;
                    let uid = pod.uid()?;
                    (pod.metadata.deletion_timestamp.is_none() && before.get(&gated) != Some(&uid))
                        .then_some((gated, uid, op.started_at))
                }
            },
        )
        .await;
    plane.restart_operator().await;
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
    assert_eq!(
        after.get(&gated),
        Some(&gated_uid),
        "{gated} was restarted once, not again by the new operator"
    );
    let last = c
        .status
        .as_ref()
        .unwrap()
        .common
        .last_operation
        .clone()
        .unwrap();
    assert_eq!(
        last.started_at, started_at,
        "one Restart operation, resumed"
    );
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
    // A setting Steward owns, and a value PostgreSQL would refuse at start (checked against
    // its own settings catalogue): both named, nothing started that would crash-loop.
    plane
        .apply(&manifest(
            "bad",
            1,
            "  parameters:\n    port: \"6543\"\n    shared_buffers: notanumber\n",
        ))
        .await;
    plane
        .wait_for::<PostgresCluster, _>("InvalidSpec", "bad", Duration::from_secs(20), |c| {
            c.status.as_ref().is_some_and(|s| {
                s.common.conditions.iter().any(|x| {
                    x.type_ == "Degraded"
                        && x.status == "True"
                        && x.reason == "InvalidSpec"
                        && x.message.contains("port")
                        && x.message
                            .contains("parameters.shared_buffers value \"notanumber\"")
                })
            })
        })
        .await;
    let events: kube::Api<k8s_openapi::api::events::v1::Event> = plane.api();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let warned = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .any(|e| {
                e.reason.as_deref() == Some("InvalidSpec")
                    && e.type_.as_deref() == Some("Warning")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("shared_buffers"))
            });
        if warned {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a Warning Event names the bad parameter"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pods = plane
        .api::<Pod>()
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(pods.items.is_empty());
    // A running cluster given an invalid spec keeps running.
    create(&plane, "ok", 1, "").await;
    plane
        .patch_spec::<PostgresCluster>(
            "ok",
            serde_json::json!({"users": [{"name": "steward", "passwordSecret": {"name": "x"}}]}),
        )
        .await;
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

/// A setting PostgreSQL accepts by type but cannot start with: the condition quotes its FATAL
/// line, which reaches the operator through the container's termination message (the node
/// agent fills it from the log, as kubelet does under `FallbackToLogsOnError`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_that_cannot_start_is_reported_with_its_fatal_line() {
    let plane = Plane::start().await;
    plane
        .apply(&manifest(
            "lib",
            1,
            "  parameters:\n    shared_preload_libraries: steward_missing_library\n",
        ))
        .await;
    let c = plane
        .wait_for::<PostgresCluster, _>("PrimaryFailing", "lib", Duration::from_secs(60), |c| {
            c.status.as_ref().is_some_and(|s| {
                s.common.conditions.iter().any(|x| {
                    x.type_ == "Available" && x.status == "False" && x.reason == "PrimaryFailing"
                })
            })
        })
        .await;
    let available = c
        .status
        .unwrap()
        .common
        .conditions
        .into_iter()
        .find(|x| x.type_ == "Available")
        .unwrap();
    assert!(
        available.message.contains("FATAL:")
            && available.message.contains("steward_missing_library"),
        "{}",
        available.message
    );
    plane.shutdown().await;
}

async fn plane_apply_err(plane: &Plane, yaml: &str) -> String {
    match steward_operator::dev::apply_manifests(&plane.client, yaml, &plane.namespace).await {
        Ok(applied) => panic!("{applied:?} was accepted"),
        Err(e) => e.to_string(),
    }
}

/// Finished reconcile passes of the PostgreSQL controller of the running operator instance.
fn postgres_passes(plane: &Plane) -> u64 {
    plane
        .operator()
        .metrics
        .encode()
        .lines()
        .filter(|l| {
            l.starts_with("steward_reconcile_passes_total{")
                && l.contains("controller=\"postgres\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn degraded_reason(c: &PostgresCluster) -> Option<String> {
    true_condition(&c.status.as_ref()?.common, "Degraded").map(|x| x.reason.clone())
}

async fn in_recovery(plane: &Plane, cluster: &str, instance: &str) -> bool {
    superuser_on(plane, cluster, instance)
        .await
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .unwrap()
        .get(0)
}

async fn labelled_primary(plane: &Plane) -> Vec<String> {
    plane
        .api::<Pod>()
        .list(&ListParams::default().labels("steward.dev/role=primary"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| p.name_any())
        .collect()
}

/// A manual fail-over requested while the primary is down and automatic fail-over is off,
/// held at the fencing step by a finalizer on the old primary's Pod across an operator
/// restart; and the fail-over webhook.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn manual_failover_of_a_down_primary_waits_for_fencing_across_an_operator_restart() {
    const HOLD: &str = "e2e.steward.dev/hold";
    let (hook_url, hooks) = common::hooks::receiver(axum::http::StatusCode::OK).await;
    let mut plane = with_webhooks(&hook_url).await;
    let yaml = manifest_with_failover("mf", 3, "{automatic: false, detectionDelaySeconds: 2}", "");
    let c = create_from(&plane, "mf", 3, &yaml).await;
    assert_eq!(c.status.unwrap().current_primary.as_deref(), Some("mf-0"));
    let pods = plane.api::<Pod>();
    let clusters = plane.api::<PostgresCluster>();

    // Hold the primary's Pod object with a finalizer of the test's own.
    let pod = pods.get("mf-0").await.unwrap();
    let mut finalizers = pod.metadata.finalizers.clone().unwrap_or_default();
    finalizers.push(HOLD.to_owned());
    pods.patch(
        "mf-0",
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"metadata": {"finalizers": finalizers}})),
    )
    .await
    .unwrap();

    // The primary stays down: its postmaster is killed whenever its container restarts it.
    let old_postmaster = postmaster_pattern(&plane, "mf", "mf-0").await;
    let killer = Killer::start(old_postmaster.clone());
    let c = plane
        .wait_for::<PostgresCluster, _>(
            "Degraded/PrimaryNotReady",
            "mf",
            Duration::from_secs(60),
            |c| degraded_reason(c).as_deref() == Some("PrimaryNotReady"),
        )
        .await;
    // No fail-over on its own: the operator keeps evaluating the down primary well past the
    // detection delay (wall clock and at least three passes) and changes nothing.
    let since = c
        .status
        .as_ref()
        .and_then(|s| s.primary_unready_since.as_deref())
        .and_then(steward_operator::clock::parse_time)
        .expect("primaryUnreadySince is recorded");
    let until = since + jiff::SignedDuration::from_secs(3 * 2); // three detection delays
    let passes = postgres_passes(&plane);
    plane
        .eventually(
            "three passes past the detection delay",
            Duration::from_secs(60),
            || {
                let (clusters, plane) = (&clusters, &plane);
                async move {
                    let c = clusters.get("mf").await.ok()?;
                    let s = c.status.as_ref()?;
                    assert_eq!(s.current_primary.as_deref(), Some("mf-0"), "{s:#?}");
                    assert!(s.pending_failover.is_none(), "{s:#?}");
                    assert!(s.common.operation.is_none(), "{s:#?}");
                    assert_eq!(
                        degraded_reason(&c).as_deref(),
                        Some("PrimaryNotReady"),
                        "{s:#?}"
                    );
                    (jiff::Timestamp::now() > until && postgres_passes(plane) >= passes + 3)
                        .then_some(())
                }
            },
        )
        .await;
    assert_eq!(labelled_primary(&plane).await, ["mf-0"]);
    assert!(in_recovery(&plane, "mf", "mf-2").await);

    // A manual fail-over to mf-2: the old primary's Pod is deleted and held Terminating.
    plane
        .patch_spec::<PostgresCluster>(
            "mf",
            serde_json::json!({"switchover": {"id": "manual-1", "target": "mf-2"}}),
        )
        .await;
    let expected = FailoverProgress {
        from: "mf-0".into(),
        target: "mf-2".into(),
        switchover: false,
        demoted_at_lsn: None,
        request: Some("manual-1".into()),
        reason: "request".into(),
    };
    let fencing = |c: &PostgresCluster| {
        c.status.as_ref().is_some_and(|s| {
            s.pending_failover.as_ref() == Some(&expected)
                && s.current_primary.as_deref() == Some("mf-0")
                && s.common.operation.as_ref().is_some_and(|o| {
                    o.kind == OperationKind::Failover
                        && o.phase == OperationPhase::Running
                        && o.step == "FencePrimary"
                })
        })
    };
    plane
        .wait_for::<PostgresCluster, _>("FencePrimary", "mf", Duration::from_secs(60), fencing)
        .await;
    // The node agent stops the containers of the Terminating Pod and deletes it with grace 0,
    // as the kubelet does; the finalizer keeps the object.
    let held = plane
        .wait_for::<Pod, _>(
            "mf-0 stopped and held by its finalizer",
            "mf-0",
            Duration::from_secs(90),
            |p| {
                p.metadata.deletion_timestamp.is_some()
                    && p.metadata.deletion_grace_period_seconds == Some(0)
            },
        )
        .await;
    assert!(
        held.finalizers().iter().any(|f| f == HOLD),
        "{:?}",
        held.metadata
    );
    let kills = killer.stop().await;
    assert!(kills >= 1, "the postmaster of mf-0 was found and killed");
    assert!(
        !postmaster_runs(&old_postmaster),
        "mf-0's containers were stopped"
    );
    // The fencing rule: nothing is promoted while the old primary's Pod exists.
    assert!(
        in_recovery(&plane, "mf", "mf-2").await,
        "mf-2 is not promoted yet"
    );
    assert_eq!(labelled_primary(&plane).await, ["mf-0"]);

    // An operator restart resumes the fail-over from status and keeps waiting.
    plane.restart_operator().await;
    plane
        .eventually(
            "the restarted operator ran three passes",
            Duration::from_secs(60),
            || {
                let plane = &plane;
                async move { (postgres_passes(plane) >= 3).then_some(()) }
            },
        )
        .await;
    let c = clusters.get("mf").await.unwrap();
    assert!(fencing(&c), "{:#?}", c.status);
    assert!(
        in_recovery(&plane, "mf", "mf-2").await,
        "mf-2 is not promoted yet"
    );
    assert_eq!(labelled_primary(&plane).await, ["mf-0"]);
    assert!(
        !postmaster_runs(&old_postmaster),
        "the held Pod runs nothing"
    );
    assert!(
        pods.get("mf-0")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );

    // Releasing the Pod completes the fail-over; the old primary rejoins as a replica.
    let rest: Vec<String> = held
        .finalizers()
        .iter()
        .filter(|f| *f != HOLD)
        .cloned()
        .collect();
    pods.patch(
        "mf-0",
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"metadata": {"finalizers": rest}})),
    )
    .await
    .unwrap();
    let c = handled(&plane, "mf", "mf-2", "manual-1").await;
    assert!(degraded_reason(&c).is_none(), "{:#?}", c.status);
    let s = c.status.unwrap();
    let old = s.instances.iter().find(|i| i.name == "mf-0").unwrap();
    assert_eq!(old.role, InstanceRole::Replica);
    assert!(old.timeline.unwrap() >= 2, "{old:?}");
    let last = s.common.last_operation.unwrap();
    assert_eq!(
        (last.kind, last.phase),
        (OperationKind::Failover, OperationPhase::Succeeded)
    );
    assert_eq!(labelled_primary(&plane).await, ["mf-2"]);
    // Writes through the -primary Service land on mf-2 and reach the rejoined mf-0.
    let p = primary(&plane, "mf").await;
    let server: String = p
        .query_one("SELECT host(inet_server_addr())", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(server, pod_ip(&plane, "mf-2").await);
    p.batch_execute("CREATE TABLE after_failover (v int); INSERT INTO after_failover VALUES (7);")
        .await
        .unwrap();
    let r = superuser_on(&plane, "mf", "mf-0").await;
    plane
        .eventually("the row reaches mf-0", Duration::from_secs(30), || {
            let r = &r;
            async move {
                let row = r
                    .query_opt("SELECT v FROM after_failover", &[])
                    .await
                    .ok()??;
                (row.get::<_, i32>(0) == 7).then_some(())
            }
        })
        .await;

    // The webhook: the fail-over's end is notified (Steward's `failover` event, beyond the
    // seed's scale and upgrade), naming both primaries; the bootstrap is not notified, so it
    // is the first and only delivery.
    plane
        .eventually(
            "the fail-over notification",
            Duration::from_secs(30),
            || {
                let hooks = hooks.clone();
                async move { (!hooks.all().is_empty()).then_some(()) }
            },
        )
        .await;
    let got: Vec<(Option<String>, serde_json::Value)> = hooks
        .all()
        .into_iter()
        .map(|(auth, body)| (auth, serde_json::from_str(&body).unwrap()))
        .collect();
    assert_eq!(
        got,
        [(
            // steward:hook-pass
            Some("Basic c3Rld2FyZDpob29rLXBhc3M=".to_owned()),
            serde_json::json!({
                "cluster": "mf",
                "event": "failover",
                "namespace": plane.namespace,
                "scale_data": null,
                "status": "success",
                "upgrade_data": null,
                "failover_data": {"old_primary": "mf-0", "new_primary": "mf-2", "switchover": false},
            })
        )]
    );
    assert_eq!(
        plane
            .operator()
            .metrics
            .webhook_count("failover", "success"),
        1
    );
    plane.shutdown().await;
}

/// The Node a Pod is bound to.
async fn node_of(plane: &Plane, pod: &str) -> String {
    let pod = plane.api::<Pod>().get(pod).await.unwrap();
    pod.spec.unwrap().node_name.unwrap()
}

/// The longest time between two acknowledged writes within `[from, to]`.
fn longest_gap(
    acked: &[(i32, std::time::Instant)],
    from: std::time::Instant,
    to: std::time::Instant,
) -> Duration {
    acked
        .windows(2)
        .filter(|w| w[1].1 >= from && w[0].1 <= to)
        .map(|w| w[1].1 - w[0].1)
        .max()
        .unwrap_or_default()
}

/// Every acknowledged id is stored on the primary.
async fn assert_none_lost(plane: &Plane, cluster: &str, acked: &[(i32, std::time::Instant)]) {
    let rows = primary(plane, cluster)
        .await
        .query("SELECT id FROM w", &[])
        .await
        .unwrap();
    let stored: std::collections::BTreeSet<i32> = rows.iter().map(|r| r.get(0)).collect();
    let lost: Vec<i32> = acked
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| !stored.contains(id))
        .collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
}

/// `kubectl drain` of each of three Nodes in turn with a writer running: the replicas' budget
/// lets one replica go at a time, the primary's budget holds the primary until the operator,
/// seeing its Node cordoned, has switched over to a replica on another Node. One primary
/// throughout, no acknowledged write lost; the longest write gap around the primary's drain is
/// printed (docs/performance.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn draining_each_node_in_turn_keeps_one_primary_and_every_acknowledged_write() {
    let plane = Plane::start_with_nodes(3).await;
    create(&plane, "dr", 3, "").await;
    let mut placed = std::collections::BTreeSet::new();
    for i in 0..3 {
        placed.insert(node_of(&plane, &format!("dr-{i}")).await);
    }
    assert_eq!(placed.len(), 3, "one instance per Node: {placed:?}");
    let writer = Writer::start(&plane, "dr").await;
    let two_primaries = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (pods, flag, stop) = (plane.api::<Pod>(), two_primaries.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let labelled = pods
                    .list(&ListParams::default().labels("steward.dev/role=primary"))
                    .await
                    .map(|l| l.items.len())
                    .unwrap_or_default();
                if labelled > 1 {
                    flag.store(true, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let mut primary_drain = None;
    for node in plane.nodes() {
        let before = plane.api::<PostgresCluster>().get("dr").await.unwrap();
        let old_primary = before.status.unwrap().current_primary.unwrap();
        let held_primary = node_of(&plane, &old_primary).await == node;
        let started = std::time::Instant::now();
        let said = plane.kubectl(&[
            "drain",
            &node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=180s",
        ]);
        assert!(said.contains("drained"), "{said}");
        let drained = std::time::Instant::now();
        let now = plane.api::<PostgresCluster>().get("dr").await.unwrap();
        let status = now.status.unwrap();
        if held_primary {
            // Either the primary's budget refused its eviction until the switchover, or the
            // switchover (started by the cordon, kubectl's first step) was done before kubectl
            // reached the primary's Pod — then the Pod it evicted was already a replica. Either
            // way the primary is never evicted: the write gap below is the switchover's.
            if !said.contains("disruption budget") {
                eprintln!("the switchover finished before the drain reached the primary: {said}");
            }
            let new_primary = status.current_primary.clone().unwrap();
            assert_ne!(new_primary, old_primary);
            assert_ne!(node_of(&plane, &new_primary).await, node);
            let op = status.common.last_operation.clone().unwrap();
            assert_eq!(
                (op.kind, op.phase),
                (OperationKind::Failover, OperationPhase::Succeeded)
            );
            assert_eq!(op.change.switchover, Some(true), "{op:?}");
            primary_drain = Some((started, drained));
        } else {
            assert_eq!(
                status.current_primary.as_deref(),
                Some(old_primary.as_str())
            );
        }
        plane.kubectl(&["uncordon", &node]);
        plane
            .wait_for::<PostgresCluster, _>(
                &format!("three ready instances after draining {node}"),
                "dr",
                BOOT,
                settled(3),
            )
            .await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let acked = writer.stop().await;
    stop.store(true, Ordering::Relaxed);
    watcher.await.unwrap();
    assert!(
        !two_primaries.load(Ordering::Relaxed),
        "two Pods were labelled primary at once"
    );
    assert!(
        acked.len() > 100,
        "the writer made progress: {}",
        acked.len()
    );
    assert_none_lost(&plane, "dr", &acked).await;
    let (from, to) = primary_drain.expect("one of the Nodes held the primary");
    eprintln!(
        "postgres drains: {} inserts acknowledged; drain of the primary's Node took {:.1} s, \
         longest write gap {:.2} s",
        acked.len(),
        (to - from).as_secs_f64(),
        longest_gap(&acked, from, to).as_secs_f64()
    );
    plane.shutdown().await;
}

/// The primary's Node is cut off from the API server while its PostgreSQL keeps running (a
/// partitioned machine). The operator never promotes a replica while the old primary may still
/// accept writes: it says which Node is lost and what a person must confirm. Once the person
/// confirms (the machine is off, the Pod force-deleted), the fail-over completes and writes are
/// accepted on the new primary. Prints the detection and recovery times.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_primary_node_is_reported_and_never_yields_two_writable_primaries() {
    common::e2e::embedded_only(common::e2e::LOST_NODE_REAL);
    let plane = Plane::start_with_nodes(3).await;
    create(&plane, "nl", 3, "").await;
    let nodes = plane.nodes();
    // The first Node's agent also carries the Service proxy of the whole plane: keep the
    // primary off it, so that cutting the primary's Node leaves Services working.
    if node_of(&plane, "nl-0").await == nodes[0] {
        let mut target = None;
        for i in 1..3 {
            if node_of(&plane, &format!("nl-{i}")).await != nodes[0] {
                target = Some(format!("nl-{i}"));
            }
        }
        let target = target.unwrap();
        plane
            .patch_spec::<PostgresCluster>(
                "nl",
                serde_json::json!({"switchover": {"id": "off-first-node", "target": target}}),
            )
            .await;
        handled(&plane, "nl", &target, "off-first-node").await;
    }
    let old = plane
        .api::<PostgresCluster>()
        .get("nl")
        .await
        .unwrap()
        .status
        .unwrap()
        .current_primary
        .unwrap();
    let lost = node_of(&plane, &old).await;
    let writer = Writer::start(&plane, "nl").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let old_direct = superuser_on(&plane, "nl", &old).await;
    let replicas: Vec<String> = (0..3)
        .map(|i| format!("nl-{i}"))
        .filter(|n| *n != old)
        .collect();
    let acked_before = writer.stop().await;

    let cut = std::time::Instant::now();
    plane.partition_node(&lost);
    let reported = plane
        .wait_for::<PostgresCluster, _>(
            "the lost Node is reported",
            "nl",
            Duration::from_secs(180),
            |c| degraded_reason(c).as_deref() == Some("PrimaryNodeLost"),
        )
        .await;
    let detected = cut.elapsed();
    let message = true_condition(&reported.status.as_ref().unwrap().common, "Degraded")
        .unwrap()
        .message
        .clone();
    for part in [lost.as_str(), "--force", old.as_str()] {
        assert!(message.contains(part), "{part} in {message}");
    }
    // Held: the old primary still runs and takes writes, every other instance is a replica.
    for _ in 0..5 {
        old_direct
            .execute("INSERT INTO w VALUES (-1 - (random() * 1e9)::int)", &[])
            .await
            .expect("the cut-off primary still accepts writes: it is the only one");
        for r in &replicas {
            assert!(
                in_recovery(&plane, "nl", r).await,
                "{r} was promoted while {old} runs"
            );
        }
        assert_eq!(labelled_primary(&plane).await, std::slice::from_ref(&old));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // A person confirms: the machine is off, its Pod goes.
    plane.power_off_node(&lost);
    let confirmed = std::time::Instant::now();
    plane.kubectl(&[
        "-n",
        &plane.namespace,
        "delete",
        "pod",
        &old,
        "--force",
        "--grace-period=0",
    ]);
    let after = plane
        .wait_for::<PostgresCluster, _>("a new primary", "nl", BOOT, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.current_primary.as_deref().is_some_and(|p| p != old)
                    && s.pending_failover.is_none()
            })
        })
        .await;
    let new = after.status.unwrap().current_primary.unwrap();
    assert!(replicas.contains(&new));
    let session = primary(&plane, "nl").await;
    session
        .execute("INSERT INTO w VALUES (1000000000)", &[])
        .await
        .unwrap();
    let recovered = confirmed.elapsed();
    assert_none_lost(&plane, "nl", &acked_before).await;
    assert_eq!(labelled_primary(&plane).await, std::slice::from_ref(&new));
    eprintln!(
        "postgres node loss: lost Node {lost} reported after {:.1} s (node monitor grace 40 s + \
         detection delay 2 s); writes accepted on {new} {:.1} s after the confirmation",
        detected.as_secs_f64(),
        recovered.as_secs_f64()
    );
    plane.shutdown().await;
}

/// `spec.backups.pgbackrest` on a new cluster: Steward creates the repository host (claim, Pod,
/// Service), the TLS Secret and the stanza (a Job), and every instance archives its WAL there
/// with real pgBackRest: a switched segment shows up in `pg_stat_archiver`. With the repository
/// host gone, `ContinuousArchiving` turns false with the failing segment, and true again once it
/// is back. A replica re-added on its old claim after more WAL than the primary keeps restores
/// the missing segments from the archive.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_backups_on_wal_is_archived_to_the_clusters_pgbackrest_repository() {
    let plane = Plane::start().await;
    // The primary keeps one segment for its standbys: a standby that falls further behind
    // needs the archive.
    let extra = "  parameters: {wal_keep_size: 16MB}\n  backups:\n    pgbackrest:\n      retentionFull: 2\n      storage: {size: 1Gi}\n";
    create(&plane, "bk", 2, extra).await;
    let c = plane
        .wait_for::<PostgresCluster, _>("the stanza", "bk", BOOT, |c| {
            c.status
                .as_ref()
                .and_then(|s| s.backups.as_ref())
                .is_some_and(|b| b.stanza.as_deref() == Some("db"))
        })
        .await;
    assert_eq!(c.status.unwrap().backups.unwrap().repository, "bk-repo");
    let repo = plane.api::<Pod>().get("bk-repo").await.unwrap();
    assert!(steward_operator::resources::pods::is_ready(&repo));
    let tls = plane
        .api::<Secret>()
        .get("bk-pgbackrest-tls")
        .await
        .unwrap();
    assert_eq!(tls.immutable, Some(true));
    let session = primary(&plane, "bk").await;
    session
        .batch_execute("CREATE TABLE archived (id int); INSERT INTO archived VALUES (1)")
        .await
        .unwrap();
    let segment: String = session
        .query_one("SELECT pg_walfile_name(pg_switch_wal())", &[])
        .await
        .unwrap()
        .get(0);
    let archived = plane
        .eventually(
            &format!("segment {segment} archived"),
            Duration::from_secs(60),
            || {
                let session = &session;
                let segment = segment.clone();
                async move {
                    let row = session
                        .query_one(
                            "SELECT coalesce(last_archived_wal, ''), failed_count FROM pg_stat_archiver",
                            &[],
                        )
                        .await
                        .ok()?;
                    let last: String = row.get(0);
                    (last >= segment).then_some((last, row.get::<_, i64>(1)))
                }
            },
        )
        .await;
    eprintln!(
        "archived up to {} ({} failed attempts before the stanza existed)",
        archived.0, archived.1
    );
    let archiving = |want: &'static str| {
        move |c: &PostgresCluster| {
            c.status.as_ref().is_some_and(|s| {
                s.common
                    .conditions
                    .iter()
                    .any(|x| x.type_ == "ContinuousArchiving" && x.reason == want)
            })
        }
    };
    plane
        .wait_for::<PostgresCluster, _>("archiving reported", "bk", BOOT, archiving("Archiving"))
        .await;
    // The repository host stops (paused, so Steward does not bring it back yet): WAL fails to
    // archive and the condition says so.
    plane
        .patch_spec::<PostgresCluster>("bk", serde_json::json!({"paused": true}))
        .await;
    plane
        .api::<Pod>()
        .delete("bk-repo", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    let switch = || async {
        let _ = session
            .batch_execute("INSERT INTO archived VALUES (2); SELECT pg_switch_wal()")
            .await;
    };
    let failing = plane
        .eventually("archiving fails", Duration::from_secs(90), || async {
            switch().await;
            tokio::time::sleep(Duration::from_secs(1)).await;
            let c = plane.api::<PostgresCluster>().get("bk").await.ok()?;
            archiving("ArchiveFailing")(&c).then_some(c)
        })
        .await;
    let message = failing
        .status
        .unwrap()
        .common
        .conditions
        .into_iter()
        .find(|c| c.type_ == "ContinuousArchiving")
        .unwrap()
        .message;
    assert!(message.contains("failed at"), "{message}");
    // Back: archiving catches up and the condition turns true again.
    plane
        .patch_spec::<PostgresCluster>("bk", serde_json::json!({"paused": false}))
        .await;
    plane
        .eventually("archiving resumes", Duration::from_secs(120), || async {
            switch().await;
            tokio::time::sleep(Duration::from_secs(1)).await;
            let c = plane.api::<PostgresCluster>().get("bk").await.ok()?;
            archiving("Archiving")(&c).then_some(())
        })
        .await;
    // A replica removed (its claim kept) and re-added after more WAL than the primary keeps:
    // it restores the missing segments from the archive, then streams again.
    plane
        .patch_spec::<PostgresCluster>("bk", serde_json::json!({"instances": 1}))
        .await;
    plane
        .wait_for::<PostgresCluster, _>("one instance", "bk", BOOT, settled(1))
        .await;
    for _ in 0..4 {
        switch().await;
    }
    session.batch_execute("CHECKPOINT").await.unwrap();
    switch().await;
    session.batch_execute("CHECKPOINT").await.unwrap();
    plane
        .patch_spec::<PostgresCluster>("bk", serde_json::json!({"instances": 2}))
        .await;
    plane
        .wait_for::<PostgresCluster, _>("the replica back", "bk", BOOT, settled(2))
        .await;
    let logs = kube::api::LogParams {
        container: Some("postgres".into()),
        ..Default::default()
    };
    let log = plane.api::<Pod>().logs("bk-1", &logs).await.unwrap();
    assert!(
        log.contains("from archive"),
        "bk-1 restored WAL from the archive: {log}"
    );
    plane.shutdown().await;
}

/// Waits until the cluster's repository has its stanza.
async fn with_stanza(plane: &Plane, cluster: &str) {
    plane
        .wait_for::<PostgresCluster, _>("the stanza", cluster, BOOT, |c| {
            c.status
                .as_ref()
                .and_then(|s| s.backups.as_ref())
                .is_some_and(|b| b.stanza.is_some())
        })
        .await;
}

/// Ends the primary's WAL segment and waits until it is archived.
async fn switch_and_archive(plane: &Plane, primary: &tokio_postgres::Client) {
    let segment: String = primary
        .query_one("SELECT pg_walfile_name(pg_switch_wal())", &[])
        .await
        .unwrap()
        .get(0);
    plane
        .eventually("the switched segment archived", BOOT, || {
            let segment = segment.clone();
            async move {
                let row = primary
                    .query_one(
                        "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver",
                        &[],
                    )
                    .await
                    .ok()?;
                (row.get::<_, String>(0) >= segment).then_some(())
            }
        })
        .await;
}

fn backup_manifest(name: &str, cluster: &str, type_: &str) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: PostgresBackup\nmetadata:\n  name: {name}\nspec:\n  cluster: {cluster}\n  type: {type_}\n"
    )
}

/// Backups (issue 13): `PostgresBackup`s created at once run one at a time, in order, each as
/// the cluster's `Backup` operation, by real pgBackRest in a Job: a full backup, an incremental
/// one built on it, and a second full one — which, with `retentionFull: 1`, expires the first
/// and the incremental built on it. Each backup's status has its label, type, times, WAL range
/// and sizes; the cluster's lists what the repository holds (`pgbackrest info`); every backup
/// is notified (`backup` webhook).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backups_run_one_at_a_time_and_retention_expires_the_oldest() {
    use steward_api::pgbackrest::{BackupPhase, BackupType, PostgresBackup};
    let (hook_url, hooks) = common::hooks::receiver(axum::http::StatusCode::OK).await;
    let plane = with_webhooks(&hook_url).await;
    let extra = "  backups:\n    pgbackrest:\n      retentionFull: 1\n      storage: {size: 1Gi}\n";
    create(&plane, "bu", 1, extra).await;
    with_stanza(&plane, "bu").await;
    primary(&plane, "bu")
        .await
        .batch_execute("CREATE TABLE t (id int); INSERT INTO t SELECT generate_series(1, 10000)")
        .await
        .unwrap();
    let yaml = [
        backup_manifest("b1-full", "bu", "full"),
        backup_manifest("b2-incr", "bu", "incr"),
        backup_manifest("b3-full", "bu", "full"),
    ]
    .join("---\n");
    plane.apply(&yaml).await;
    let mut got = Vec::new();
    for name in ["b1-full", "b2-incr", "b3-full"] {
        let b = plane
            .wait_for::<PostgresBackup, _>(&format!("{name} done"), name, BOOT, backup_ended)
            .await;
        let s = b.status.unwrap();
        assert_eq!(s.phase, Some(BackupPhase::Completed), "{name}: {s:?}");
        got.push(s);
    }
    let (full, incr) = (&got[0], &got[1]);
    let full_label = full.label.clone().unwrap();
    assert!(full_label.ends_with('F'), "{full_label}");
    assert_eq!(full.type_, Some(BackupType::Full));
    assert!(full.size.unwrap() > 10_000_000, "{full:?}");
    assert!(
        full.repository_size.unwrap() > 0 && full.wal_start.is_some() && full.lsn_stop.is_some()
    );
    assert_eq!(full.job.as_deref(), Some("b1-full-job"));
    assert!(full.duration.as_deref().unwrap().ends_with('s'));
    // The incremental backup ran after the full one and builds on it.
    let incr_label = incr.label.clone().unwrap();
    assert!(
        incr_label.starts_with(&format!("{full_label}_")) && incr_label.ends_with('I'),
        "{incr_label}"
    );
    assert_eq!(incr.type_, Some(BackupType::Incr));
    assert!(
        incr.delta_size.unwrap() < full.delta_size.unwrap(),
        "{incr:?}"
    );
    assert!(incr.start_time.clone().unwrap() >= full.stop_time.clone().unwrap());
    let third = got[2].label.clone().unwrap();
    assert!(third.ends_with('F') && third != full_label);

    // Retention: one full backup is kept; the first and the incremental on it expired.
    for name in ["b1-full", "b2-incr"] {
        plane
            .wait_for::<PostgresBackup, _>(&format!("{name} expired"), name, BOOT, |b| {
                b.status.as_ref().and_then(|s| s.expired) == Some(true)
            })
            .await;
    }
    // The cluster's own record of the repository follows on its next pass (it reads
    // `pgbackrest info` itself, after the backups' controller did).
    let c = plane
        .wait_for::<PostgresCluster, _>("the cluster's record after the expiry", "bu", BOOT, |c| {
            c.status
                .as_ref()
                .and_then(|s| s.backups.as_ref())
                .is_some_and(|r| r.backup_count == Some(1))
        })
        .await;
    let status = c.status.unwrap();
    let repo = status.backups.unwrap();
    assert_eq!(repo.backup_count, Some(1), "{repo:?}");
    assert_eq!(repo.backups.len(), 1);
    assert_eq!(repo.backups[0].label, third);
    assert_eq!(repo.backups[0].backup.as_deref(), Some("b3-full"));
    assert_eq!(repo.first_recoverability_point, got[2].stop_time);
    assert_eq!(repo.last_successful_backup, got[2].stop_time);
    assert!(repo.wal_min.is_some() && repo.wal_max.is_some());
    let last = status.common.last_operation.unwrap();
    assert_eq!(
        (last.kind, last.phase),
        (OperationKind::Backup, OperationPhase::Succeeded)
    );
    assert_eq!(last.change.backup_label.as_deref(), Some(third.as_str()));
    assert!(status.common.operation.is_none());

    // Every backup was notified, in order.
    let bodies = plane
        .eventually(
            "three backup notifications",
            Duration::from_secs(30),
            || {
                let hooks = hooks.clone();
                async move {
                    let all = hooks.all();
                    (all.len() >= 3).then_some(all)
                }
            },
        )
        .await;
    let labels: Vec<serde_json::Value> = bodies
        .iter()
        .map(|(_, body)| serde_json::from_str::<serde_json::Value>(body).unwrap())
        .inspect(|v| {
            assert_eq!(v["event"], "backup", "{v}");
            assert_eq!(v["status"], "success", "{v}");
            assert_eq!(v["cluster"], "bu", "{v}");
        })
        .map(|v| v["backup_data"].clone())
        .collect();
    assert_eq!(
        labels,
        [
            serde_json::json!({"backup": "b1-full", "type": "full", "label": full_label, "error": null}),
            serde_json::json!({"backup": "b2-incr", "type": "incr", "label": incr_label, "error": null}),
            serde_json::json!({"backup": "b3-full", "type": "full", "label": third, "error": null}),
        ]
    );
    plane.shutdown().await;
}

fn restore_manifest(name: &str, cluster: &str, target: &str) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: PostgresRestore\nmetadata:\n  name: {name}\nspec:\n  cluster: {cluster}\n{target}"
    )
}

/// The backup has ended: completed or failed.
fn backup_ended(b: &steward_api::pgbackrest::PostgresBackup) -> bool {
    use steward_api::pgbackrest::BackupPhase;
    b.status
        .as_ref()
        .is_some_and(|s| matches!(s.phase, Some(BackupPhase::Completed | BackupPhase::Failed)))
}

/// Takes a backup and waits for it to complete.
async fn backed_up(plane: &Plane, name: &str, cluster: &str, type_: &str) {
    use steward_api::pgbackrest::{BackupPhase, PostgresBackup};
    plane.apply(&backup_manifest(name, cluster, type_)).await;
    let b = plane
        .wait_for::<PostgresBackup, _>(&format!("{name} done"), name, BOOT, backup_ended)
        .await;
    assert_eq!(
        b.status.as_ref().and_then(|s| s.phase),
        Some(BackupPhase::Completed),
        "{b:?}"
    );
}

async fn restore_done(plane: &Plane, name: &str) -> steward_api::pgbackrest::PostgresRestoreStatus {
    use steward_api::pgbackrest::{PostgresRestore, RestorePhase};
    plane
        .wait_for::<PostgresRestore, _>(
            &format!("{name} done"),
            name,
            Duration::from_secs(300),
            |r| {
                r.status.as_ref().is_some_and(|s| {
                    matches!(
                        s.phase,
                        Some(RestorePhase::Completed | RestorePhase::Failed)
                    )
                })
            },
        )
        .await
        .status
        .unwrap()
}

async fn wait_ids(session: &tokio_postgres::Client, count: i64) {
    let row = session
        .query_one("SELECT count(*), coalesce(max(id), 0) FROM t", &[])
        .await
        .unwrap();
    let (n, max): (i64, i32) = (row.get(0), row.get(1));
    assert_eq!(
        (n, i64::from(max)),
        (count, count),
        "rows after the restore"
    );
}

/// Point-in-time restore (issue 13, seed "pgbackrest Restore"): a full backup, rows, an
/// incremental backup, rows, time T, rows — a restore to T brings back exactly the rows
/// committed before T, on a new claim for the primary; the replica clones the restored primary
/// and streams on its new timeline; the previous claims are kept, labelled and reported;
/// fail-over is back on; a full backup follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_point_in_time_restore_brings_back_exactly_the_rows_before_the_target() {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use steward_api::pgbackrest::{BackupPhase, PostgresBackup, RestorePhase};
    let plane = Plane::start().await;
    let extra = "  backups:\n    pgbackrest:\n      storage: {size: 1Gi}\n";
    create(&plane, "rs", 2, extra).await;
    with_stanza(&plane, "rs").await;
    let session = primary(&plane, "rs").await;
    let insert = |from: i32, to: i32| format!("INSERT INTO t SELECT generate_series({from}, {to})");
    session
        .batch_execute("CREATE TABLE t (id int primary key)")
        .await
        .unwrap();
    session.batch_execute(&insert(1, 100)).await.unwrap();
    backed_up(&plane, "rs-b1", "rs", "full").await;
    session.batch_execute(&insert(101, 200)).await.unwrap();
    backed_up(&plane, "rs-b2", "rs", "incr").await;
    session.batch_execute(&insert(201, 300)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let target: String = session
        .query_one(
            "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    session.batch_execute(&insert(301, 400)).await.unwrap();
    drop(session);

    plane
        .apply(&restore_manifest(
            "rs-r1",
            "rs",
            &format!("  target: {{time: \"{target}\"}}\n"),
        ))
        .await;
    let done = restore_done(&plane, "rs-r1").await;
    assert_eq!(done.phase, Some(RestorePhase::Completed), "{done:?}");
    assert_eq!(done.primary.as_deref(), Some("rs-0"));
    assert_eq!(done.claim.as_deref(), Some("rs-0-pgdata-r1"));
    assert_eq!(done.previous_claims, ["rs-0-pgdata", "rs-1-pgdata"]);
    assert_eq!(done.backup.as_deref(), Some("rs-r1-full"));

    // Exactly the rows committed before T.
    let c = plane
        .wait_for::<PostgresCluster, _>("rs settled on the restored data", "rs", BOOT, settled(2))
        .await;
    let status = c.status.unwrap();
    assert_eq!(status.data_epoch, Some(1));
    assert!(status.restore.is_none(), "fail-over is back on");
    // The last operation is the restore's, or the full backup that follows it.
    let last = status.common.last_operation.unwrap();
    assert!(
        matches!(last.kind, OperationKind::Restore | OperationKind::Backup)
            && last.phase == OperationPhase::Succeeded,
        "{last:?}"
    );
    wait_ids(&primary(&plane, "rs").await, 300).await;
    // The replica cloned the restored primary: it streams on the new timeline.
    let replica = status.instances.iter().find(|i| i.name == "rs-1").unwrap();
    assert!(
        replica.streaming && replica.timeline > Some(1),
        "{replica:?}"
    );
    // The previous claims are kept and labelled; the full backup follows.
    let claims = plane.api::<PersistentVolumeClaim>();
    for old in ["rs-0-pgdata", "rs-1-pgdata"] {
        let claim = claims.get(old).await.unwrap();
        assert_eq!(
            claim
                .labels()
                .get("steward.dev/restored-by")
                .map(String::as_str),
            Some("rs-r1")
        );
    }
    let full = plane
        .wait_for::<PostgresBackup, _>(
            "the full backup after the restore",
            "rs-r1-full",
            BOOT,
            |b| {
                b.status
                    .as_ref()
                    .is_some_and(|s| s.phase == Some(BackupPhase::Completed))
            },
        )
        .await;
    assert_eq!(
        full.status.unwrap().type_,
        Some(steward_api::pgbackrest::BackupType::Full)
    );
    plane.shutdown().await;
}

/// A restore that fails — a target past the end of the archive: the restored primary cannot
/// reach it — is reported with PostgreSQL's FATAL line and leaves the cluster stopped; a new
/// `PostgresRestore` re-runs it (latest) without deleting anything again, and continues across
/// an operator restart in the middle.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_restore_is_reported_and_a_rerun_completes_across_an_operator_restart() {
    use steward_api::pgbackrest::{PostgresRestore, RestorePhase};
    let mut plane = Plane::start().await;
    let extra = "  backups:\n    pgbackrest:\n      storage: {size: 1Gi}\n";
    create(&plane, "rf", 1, extra).await;
    with_stanza(&plane, "rf").await;
    let session = primary(&plane, "rf").await;
    session
        .batch_execute(
            "CREATE TABLE t (id int primary key); INSERT INTO t SELECT generate_series(1, 50)",
        )
        .await
        .unwrap();
    backed_up(&plane, "rf-b1", "rf", "full").await;
    session
        .batch_execute("INSERT INTO t SELECT generate_series(51, 80)")
        .await
        .unwrap();
    drop(session);

    // A target an hour ahead: no WAL reaches it.
    let ahead = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_hours(1))
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    plane
        .apply(&restore_manifest(
            "rf-bad",
            "rf",
            &format!("  target: {{time: \"{ahead}\"}}\n"),
        ))
        .await;
    let bad = restore_done(&plane, "rf-bad").await;
    assert_eq!(bad.phase, Some(RestorePhase::Failed), "{bad:?}");
    let error = bad.error.unwrap();
    assert!(
        error.contains("recovery ended before configured recovery target was reached"),
        "{error}"
    );
    let c = plane.api::<PostgresCluster>().get("rf").await.unwrap();
    let status = c.status.unwrap();
    assert!(status.restore.as_ref().is_some_and(|r| r.failed.is_some()));
    assert!(
        status
            .common
            .conditions
            .iter()
            .any(|c| c.reason == "RestoreFailed"),
        "{:?}",
        status.common.conditions
    );

    // The re-run, to the end of the archive; the operator restarts during its restore Job.
    plane.apply(&restore_manifest("rf-rerun", "rf", "")).await;
    plane
        .wait_for::<PostgresRestore, _>("the re-run's restore Job", "rf-rerun", BOOT, |r| {
            r.status.as_ref().and_then(|s| s.step.as_deref()) == Some("RestoreJob")
        })
        .await;
    let started = plane
        .api::<PostgresCluster>()
        .get("rf")
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
        .wait_for::<PostgresCluster, _>("the restore resumed", "rf", BOOT, |c| {
            c.status
                .as_ref()
                .and_then(|s| s.common.operation.as_ref())
                .is_some_and(|op| op.kind == OperationKind::Restore && op.step != "StopInstances")
        })
        .await;
    let op = resumed.status.unwrap().common.operation.unwrap();
    assert_eq!(
        op.started_at, started,
        "the same operation continued after the restart"
    );
    let rerun = restore_done(&plane, "rf-rerun").await;
    assert_eq!(rerun.phase, Some(RestorePhase::Completed), "{rerun:?}");
    assert_eq!(
        rerun.claim.as_deref(),
        Some("rf-0-pgdata-r1"),
        "the same claim"
    );
    assert_eq!(rerun.previous_claims, ["rf-0-pgdata"]);
    let c = plane
        .wait_for::<PostgresCluster, _>("rf settled", "rf", BOOT, settled(1))
        .await;
    assert!(c.status.unwrap().restore.is_none());
    wait_ids(&primary(&plane, "rf").await, 80).await;
    plane.shutdown().await;
}

/// A clone (issue 13, beyond the seed): a new cluster with `dataSource` restores another
/// cluster's repository (to its end) instead of `initdb` — the source keeps running untouched;
/// the clone has every row, the source's system identifier, its own repository and stanza;
/// writes to the clone stay there; its `dataSource` cannot change.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_cluster_clones_another_clusters_repository_and_leaves_the_source_alone() {
    let plane = Plane::start().await;
    let backups = "  backups:\n    pgbackrest:\n      storage: {size: 1Gi}\n";
    create(&plane, "src", 1, backups).await;
    with_stanza(&plane, "src").await;
    let source = primary(&plane, "src").await;
    source
        .batch_execute(
            "CREATE TABLE t (id int primary key); INSERT INTO t SELECT generate_series(1, 60)",
        )
        .await
        .unwrap();
    backed_up(&plane, "src-b1", "src", "full").await;
    source
        .batch_execute("INSERT INTO t SELECT generate_series(61, 90)")
        .await
        .unwrap();
    // The rows after the backup reach the archive: the clone restores to the archive's end.
    switch_and_archive(&plane, &source).await;

    let clone = format!("{backups}  dataSource:\n    pgbackrest:\n      cluster: src\n");
    let c = create(&plane, "cl", 1, &clone).await;
    let status = c.status.unwrap();
    assert_eq!(status.cloned_from.as_deref(), Some("src (latest)"));
    let src = plane
        .api::<PostgresCluster>()
        .get("src")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(
        status.system_identifier, src.system_identifier,
        "a restore of the source"
    );
    wait_ids(&primary(&plane, "cl").await, 90).await;
    // Its own repository gets its own stanza; writes to the clone stay there.
    plane
        .wait_for::<PostgresCluster, _>("the clone's stanza", "cl", BOOT, |c| {
            c.status
                .as_ref()
                .and_then(|s| s.backups.as_ref())
                .is_some_and(|b| b.stanza.is_some() && b.repository == "cl-repo")
        })
        .await;
    primary(&plane, "cl")
        .await
        .batch_execute("INSERT INTO t VALUES (1000)")
        .await
        .unwrap();
    wait_ids(&source, 90).await;
    // dataSource is read once: changing it is refused.
    let refused = plane
        .api::<PostgresCluster>()
        .patch(
            "cl",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"spec": {"dataSource": {"pgbackrest": {"cluster": "other"}}}}),
            ),
        )
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("dataSource is read when the cluster is created"),
        "{refused}"
    );
    plane.shutdown().await;
}

/// The scheduler (issue 14, first part): a `pgbackrest` schedule every 10 s fires at its
/// seconds (UTC) — each run a `PostgresBackup` named after its slot, created within a second
/// of it — keeps `successfulRunsHistoryLimit` runs, and runs a slot that fell while the
/// operator was down exactly once (the newest missed one). A schedule every 2 s whose runs
/// outlast its slots skips them and says so (`concurrencyPolicy: Forbid`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn schedules_fire_on_their_seconds_once_per_slot_across_an_operator_restart() {
    use steward_api::pgbackrest::PostgresBackup;
    use steward_api::schedule::Schedule;
    let mut plane = Plane::start().await;
    let extra = "  backups:\n    pgbackrest:\n      storage: {size: 1Gi}\n";
    create(&plane, "sc", 1, extra).await;
    with_stanza(&plane, "sc").await;
    let schedule = |name: &str, cron: &str, type_: &str, limit: u32| {
        format!(
            "apiVersion: steward.dev/v1alpha1\nkind: Schedule\nmetadata:\n  name: {name}\nspec:\n  cluster: sc\n  schedule: \"{cron}\"\n  type: pgbackrest\n  pgbackrest: {{type: {type_}}}\n  successfulRunsHistoryLimit: {limit}\n"
        )
    };
    plane
        .apply(&schedule("every10", "*/10 * * * * *", "incr", 2))
        .await;
    plane
        .apply(&schedule("every2", "*/2 * * * * *", "full", 1))
        .await;
    let runs = |s: &Schedule, phase: &str| {
        s.status
            .as_ref()
            .map_or(0, |s| s.runs.iter().filter(|r| r.phase == phase).count())
    };
    let s = plane
        .wait_for::<Schedule, _>("two runs of every10", "every10", BOOT, |s| {
            runs(s, "Succeeded") >= 2
        })
        .await;
    let status = s.status.unwrap();
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Valid" && c.status == "True")
    );
    assert!(status.next_schedule_time.is_some() && status.last_successful_time.is_some());
    // Every run is named after its slot, a multiple of 10 s, and was created within a second.
    let backups = plane.api::<PostgresBackup>();
    let every10 = || {
        let backups = backups.clone();
        async move {
            backups
                .list(&ListParams::default().labels("steward.dev/schedule=every10"))
                .await
                .map(|list| list.items)
        }
    };
    let mine = every10().await.unwrap();
    assert!(!mine.is_empty());
    for b in &mine {
        let slot: i64 = b
            .name_any()
            .strip_prefix("every10-")
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(slot % 10, 0, "{}", b.name_any());
        let created = b
            .metadata
            .creation_timestamp
            .as_ref()
            .unwrap()
            .0
            .as_second();
        assert!(
            (0..=1).contains(&(created - slot)),
            "{} created at {created}",
            b.name_any()
        );
    }
    // Overlap: every2's runs outlast its slots; those slots are skipped and reported.
    plane
        .wait_for::<Schedule, _>("every2 skipping a slot", "every2", BOOT, |s| {
            s.status
                .as_ref()
                .and_then(|s| s.last_error.as_deref())
                .is_some_and(|e| e.contains("is still active (concurrencyPolicy Forbid)"))
        })
        .await;
    plane
        .api::<Schedule>()
        .delete("every2", &Default::default())
        .await
        .unwrap();

    // The operator is down across two slots of every10: the newest missed slot runs, once; the
    // older one does not. It goes down once every10's runs have ended (a run still active at the
    // restart would rightly skip the missed slots: concurrencyPolicy Forbid) and 2-5 s past a
    // slot T (a slot that fired between this check and the stop would leave a run the returning
    // operator still sees active). It comes back 1 s past T+20, so that its first pass has 9 s
    // before T+30: with a fixed 12 s pause the new operator came back 4-9 s past T+10, and a
    // first pass that took longer than the 1-6 s left before T+20 (caches filling on a loaded
    // machine) rightly ran T+20, a slot after the restart, which the test did not count
    // (issue 33).
    let slot = plane
        .eventually("every10's runs ended, mid-slot", BOOT, || async {
            let now = jiff::Timestamp::now().as_second();
            let ended = every10().await.ok()?.iter().all(backup_ended);
            (ended && (2..=5).contains(&(now % 10))).then_some(now - now % 10)
        })
        .await;
    let back = jiff::Timestamp::from_second(slot + 21).unwrap();
    let (down, up) = plane.restart_operator_at(back).await;
    let (down, up) = (down.as_second(), up.as_second());
    assert!(
        down < slot + 10 && up >= slot + 20,
        "down at {down}, up at {up}: slots {} and {} must fall in between",
        slot + 10,
        slot + 20
    );
    let slots_in = |items: &[PostgresBackup]| {
        items
            .iter()
            .filter_map(|b| b.name_any().strip_prefix("every10-")?.parse::<i64>().ok())
            .filter(|t| *t > down && *t <= up)
            .collect::<Vec<_>>()
    };
    plane
        .eventually("the missed slot run", BOOT, || async {
            (!slots_in(&every10().await.ok()?).is_empty()).then_some(())
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let items = every10().await.unwrap();
    assert_eq!(
        slots_in(&items),
        vec![slot + 20],
        "one run for the slots missed while down: the newest"
    );
    // History: at most two succeeded runs are kept.
    let s = plane
        .wait_for::<Schedule, _>("every10 after the restart", "every10", BOOT, |s| {
            runs(s, "Succeeded") >= 2
        })
        .await;
    assert!(runs(&s, "Succeeded") <= 2, "{:?}", s.status);
    plane.shutdown().await;
}

fn policy_manifest(name: &str, sql: &str) -> String {
    format!(
        "apiVersion: steward.dev/v1alpha1\nkind: PostgresPolicy\nmetadata:\n  name: {name}\nspec:\n  sql: {}\n",
        serde_json::to_string(sql).unwrap()
    )
}

/// The applied entry of policy `name` in the cluster's status, once it has a result of
/// version other than `not`.
async fn applied_policy(
    plane: &Plane,
    cluster: &str,
    name: &str,
    not: Option<&str>,
) -> steward_api::policy::AppliedPolicy {
    let c = plane
        .wait_for::<PostgresCluster, _>(&format!("policy {name} applied"), cluster, BOOT, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.policies
                    .iter()
                    .any(|p| p.name == name && p.result.is_some() && p.version.as_deref() != not)
            })
        })
        .await;
    c.status
        .unwrap()
        .policies
        .into_iter()
        .find(|p| p.name == name)
        .unwrap()
}

/// SQL policies (issue 14): `spec.policies` runs each `PostgresPolicy` once per version of its
/// SQL (inline or from a ConfigMap) and records the result — a SQL error included, never
/// retried in a loop; a `policy` schedule runs a policy on its cron as the replication user
/// (the seed's default) and records each run; a ConfigMap labelled `steward.dev/scheduler=true`
/// in the operator's namespace is a schedule too, and deleting it removes the schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn policies_run_once_per_version_on_clusters_and_on_schedules_and_configmaps_are_schedules() {
    use steward_api::schedule::Schedule;
    let plane = Plane::start().await;
    let extra = "  policies:\n  - name: mk-table\n  - name: from-cm\n  - name: broken\n";
    plane
        .apply(&[
            policy_manifest(
                "mk-table",
                "CREATE TABLE IF NOT EXISTS ticks (src text); GRANT SELECT, INSERT ON ticks TO replicator",
            ),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pol-sql\ndata:\n  sql: INSERT INTO ticks VALUES ('cm'), ('cm')\n".to_owned(),
            "apiVersion: steward.dev/v1alpha1\nkind: PostgresPolicy\nmetadata:\n  name: from-cm\nspec:\n  configMap: {name: pol-sql, key: sql}\n".to_owned(),
            policy_manifest("broken", "INSERT INTO no_such_table VALUES (1)"),
            policy_manifest("tick", "INSERT INTO ticks VALUES ('schedule')"),
        ]
        .join("---\n"))
        .await;
    create(&plane, "pol", 1, extra).await;
    let made = applied_policy(&plane, "pol", "mk-table", None).await;
    let result = made.result.clone().unwrap();
    assert_eq!(result.phase, "Succeeded", "{made:?}");
    let from_cm = applied_policy(&plane, "pol", "from-cm", None).await;
    assert_eq!(
        from_cm.result.as_ref().unwrap().rows_affected,
        Some(2),
        "{from_cm:?}"
    );
    let broken = applied_policy(&plane, "pol", "broken", None).await;
    let why = broken
        .result
        .as_ref()
        .unwrap()
        .error
        .clone()
        .unwrap_or_default();
    assert!(why.contains("no_such_table"), "{broken:?}");
    // Once per version: the ConfigMap's rows went in once, the broken policy is not retried.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let session = primary(&plane, "pol").await;
    let count = |src: &'static str| {
        let session = &session;
        async move {
            session
                .query_one("SELECT count(*) FROM ticks WHERE src = $1", &[&src])
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    assert_eq!(count("cm").await, 2);
    let again = applied_policy(&plane, "pol", "broken", None).await;
    assert_eq!(
        again.result, broken.result,
        "a failed version is not run again"
    );
    // A new version runs.
    plane
        .apply(&policy_manifest(
            "broken",
            "INSERT INTO ticks VALUES ('fixed')",
        ))
        .await;
    let fixed = applied_policy(&plane, "pol", "broken", broken.version.as_deref()).await;
    assert_eq!(fixed.result.unwrap().phase, "Succeeded");
    assert_eq!(count("fixed").await, 1);

    // A policy schedule every 2 s, as the replication user.
    plane
        .apply("apiVersion: steward.dev/v1alpha1\nkind: Schedule\nmetadata:\n  name: ticker\nspec:\n  cluster: pol\n  schedule: \"*/2 * * * * *\"\n  type: policy\n  policy: {name: tick}\n")
        .await;
    let s = plane
        .wait_for::<Schedule, _>("two policy runs", "ticker", BOOT, |s| {
            s.status
                .as_ref()
                .is_some_and(|s| s.runs.iter().filter(|r| r.phase == "Succeeded").count() >= 2)
        })
        .await;
    let status = s.status.unwrap();
    assert!(
        status
            .runs
            .iter()
            .filter(|r| r.phase == "Succeeded")
            .all(|r| r.rows_affected == Some(1) && r.duration_ms.is_some()),
        "{status:?}"
    );
    assert!(count("schedule").await >= 2);
    plane
        .api::<Schedule>()
        .delete("ticker", &Default::default())
        .await
        .unwrap();

    // A one-off run: a schedule whose slot is far away, asked to run now (once per value).
    plane
        .apply("apiVersion: steward.dev/v1alpha1\nkind: Schedule\nmetadata:\n  name: once\nspec:\n  cluster: pol\n  schedule: \"0 0 0 1 JAN ?\"\n  type: policy\n  policy: {name: tick}\n")
        .await;
    let before = count("schedule").await;
    let annotate = |value: &'static str| {
        let api = plane.api::<Schedule>();
        async move {
            api.patch(
                "once",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"steward.dev/run-now": value}}})),
            )
            .await
            .unwrap();
        }
    };
    annotate("1").await;
    plane
        .wait_for::<Schedule, _>("the one-off run", "once", BOOT, |s| {
            s.status.as_ref().is_some_and(|s| {
                s.last_run_now.as_deref() == Some("1")
                    && s.runs.iter().any(|r| r.phase == "Succeeded")
            })
        })
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(count("schedule").await, before + 1, "one run per value");

    // The same as a seed-style ConfigMap in the operator's namespace.
    let own = plane.own_namespace();
    let maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(plane.client.clone(), &own);
    let json = serde_json::json!({
        "namespace": plane.namespace, "cluster": "pol", "schedule": "*/2 * * * * *",
        "type": "policy", "policy": {"name": "tick"}
    });
    let mut map = k8s_openapi::api::core::v1::ConfigMap::default();
    map.metadata.name = Some("cm-ticker".into());
    map.metadata.labels = Some([("steward.dev/scheduler".to_owned(), "true".to_owned())].into());
    map.data = Some([("schedule".to_owned(), json.to_string())].into());
    maps.create(&Default::default(), &map).await.unwrap();
    let s = plane
        .wait_for::<Schedule, _>("the ConfigMap's schedule running", "cm-ticker", BOOT, |s| {
            s.status
                .as_ref()
                .is_some_and(|s| s.runs.iter().any(|r| r.phase == "Succeeded"))
        })
        .await;
    assert_eq!(s.spec.cluster, "pol");
    maps.delete("cm-ticker", &Default::default()).await.unwrap();
    plane
        .eventually("the ConfigMap's schedule gone", BOOT, || {
            let api = plane.api::<Schedule>();
            async move { api.get_opt("cm-ticker").await.ok()?.is_none().then_some(()) }
        })
        .await;
    plane.shutdown().await;
}

/// Backups proven restorable (issue 14): a `verify` schedule restores the newest backup into
/// a scratch claim and Pod of its own, waits for recovery, runs its check query and records
/// the result on the cluster (`status.lastVerifiedRestore`), in its own status and as a
/// `restore_verified` webhook; the scratch objects are deleted and the cluster's instance is
/// untouched. A backup whose files were removed from the repository is reported as failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_verify_schedule_proves_the_newest_backup_and_reports_a_broken_one() {
    use steward_api::schedule::Schedule;
    let (hook_url, hooks) = common::hooks::receiver(axum::http::StatusCode::OK).await;
    let plane = with_webhooks(&hook_url).await;
    let extra = "  backups:\n    pgbackrest:\n      storage: {size: 1Gi}\n";
    create(&plane, "vf", 1, extra).await;
    with_stanza(&plane, "vf").await;
    primary(&plane, "vf")
        .await
        .batch_execute("CREATE TABLE t (id int); INSERT INTO t SELECT generate_series(1, 3)")
        .await
        .unwrap();
    backed_up(&plane, "vf-full", "vf", "full").await;
    let label = plane
        .wait_for::<PostgresCluster, _>("the backup listed", "vf", BOOT, |c| {
            c.status
                .as_ref()
                .and_then(|s| s.backups.as_ref())
                .is_some_and(|b| !b.backups.is_empty())
        })
        .await
        .status
        .unwrap()
        .backups
        .unwrap()
        .backups[0]
        .label
        .clone();
    // A row after the backup, archived: recovery must replay it from the WAL archive.
    let session = primary(&plane, "vf").await;
    session
        .batch_execute("INSERT INTO t VALUES (4)")
        .await
        .unwrap();
    switch_and_archive(&plane, &session).await;
    let pod_uid = plane.api::<Pod>().get("vf-0").await.unwrap().uid();
    plane
        .apply("apiVersion: steward.dev/v1alpha1\nkind: Schedule\nmetadata:\n  name: prove\nspec:\n  cluster: vf\n  schedule: \"*/5 * * * * *\"\n  type: verify\n  verify: {query: \"SELECT count(*) FROM t\", expected: \"4\"}\n")
        .await;
    let c = plane
        .wait_for::<PostgresCluster, _>("a verified restore", "vf", Duration::from_secs(300), |c| {
            c.status
                .as_ref()
                .and_then(|s| s.last_verified_restore.as_ref())
                .is_some()
        })
        .await;
    let verified = c.status.unwrap().last_verified_restore.unwrap();
    assert_eq!(verified.phase, "Succeeded", "{verified:?}");
    assert_eq!(verified.backup.as_deref(), Some(label.as_str()));
    assert_eq!(
        verified.result.as_deref(),
        Some("4"),
        "the archived row was replayed"
    );
    assert!(verified.recovered_to.is_some(), "{verified:?}");
    // Suspend, so that no new run starts while the scratch objects are checked.
    plane
        .patch_spec::<Schedule>("prove", serde_json::json!({"suspend": true}))
        .await;
    plane
        .eventually("the scratch objects deleted", BOOT, || {
            let (pods, claims, jobs, schedules) = (
                plane.api::<Pod>(),
                plane.api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(),
                plane.api::<k8s_openapi::api::batch::v1::Job>(),
                plane.api::<Schedule>(),
            );
            let lp = ListParams::default().labels("app.kubernetes.io/component=verify");
            async move {
                let running = schedules
                    .get("prove")
                    .await
                    .ok()?
                    .status
                    .is_some_and(|s| !s.active.is_empty());
                let left: Vec<String> = pods
                    .list(&lp)
                    .await
                    .ok()?
                    .items
                    .iter()
                    .map(|p| format!("Pod {}", p.name_any()))
                    .chain(
                        claims
                            .list(&lp)
                            .await
                            .ok()?
                            .items
                            .iter()
                            .map(|c| format!("claim {}", c.name_any())),
                    )
                    .chain(
                        jobs.list(&lp)
                            .await
                            .ok()?
                            .items
                            .iter()
                            .map(|j| format!("Job {}", j.name_any())),
                    )
                    .collect();
                (left.is_empty() && !running).then_some(())
            }
        })
        .await;
    assert_eq!(plane.api::<Pod>().get("vf-0").await.unwrap().uid(), pod_uid);
    let notified = hooks
        .all()
        .iter()
        .map(|(_, b)| serde_json::from_str::<serde_json::Value>(b).unwrap())
        .find(|v| v["event"] == "restore_verified")
        .expect("a restore_verified webhook");
    assert_eq!(notified["status"], "success", "{notified}");
    assert_eq!(notified["verify_data"]["backup"], label.as_str());
    assert_eq!(notified["verify_data"]["result"], "4");

    // The run to compare with is the last one recorded now that the schedule is idle: a run
    // that started before the suspend finishes, and records its (good) result, after the one
    // read above (issue 35: taking `verified` as "before" let that run's success pass for the
    // run after the break).
    let before = plane
        .api::<PostgresCluster>()
        .get("vf")
        .await
        .unwrap()
        .status
        .and_then(|s| s.last_verified_restore)
        .expect("a verified restore recorded");
    assert_eq!(before.phase, "Succeeded", "{before:?}");
    // Break the backup: remove every file of the set but its manifest, whatever the layout
    // (files under `pg_data/`, or bundles under `bundle/`).
    plane.kubectl(&[
        "-n",
        &plane.namespace,
        "exec",
        "vf-repo",
        "-c",
        "pgbackrest",
        "--",
        "sh",
        "-c",
        &format!(
            "cd /pgbackrest/repo/backup/db/{label} && \
             find . -mindepth 1 -maxdepth 1 ! -name 'backup.manifest*' -exec rm -rf {{}} + && \
             test -z \"$(find . -type f ! -name 'backup.manifest*')\""
        ),
    ]);
    plane
        .patch_spec::<Schedule>("prove", serde_json::json!({"suspend": false}))
        .await;
    let c = plane
        .wait_for::<PostgresCluster, _>(
            "a failed verification",
            "vf",
            Duration::from_secs(300),
            |c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.last_verified_restore.as_ref())
                    .is_some_and(|v| v.run != before.run)
            },
        )
        .await;
    let failed = c.status.unwrap().last_verified_restore.unwrap();
    assert_eq!(failed.phase, "Failed", "{failed:?}");
    assert!(
        failed.error.as_deref().unwrap_or_default().contains(&label),
        "{failed:?}"
    );
    plane
        .eventually("a failure notified", Duration::from_secs(30), || {
            let hooks = hooks.clone();
            async move {
                hooks
                    .all()
                    .iter()
                    .map(|(_, b)| serde_json::from_str::<serde_json::Value>(b).unwrap())
                    .any(|v| v["event"] == "restore_verified" && v["status"] == "failure")
                    .then_some(())
            }
        })
        .await;
    plane.shutdown().await;
}

/// `pg_basebackup` backups (issue 14, seed "pgBaseBackup Schedules"): a `pgbasebackup`
/// schedule creates `PostgresBackup`s of method `pgbasebackup` on a cluster without a
/// pgBackRest repository; each streams a base backup into the cluster's backup claim
/// `<cluster>-backup`; a new cluster with `dataSource.pgbasebackup` starts on a copy of one,
/// with the source's rows and passwords.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pgbasebackup_schedule_fills_the_backup_claim_and_a_new_cluster_starts_from_it() {
    use steward_api::pgbackrest::{BackupMethod, BackupPhase, PostgresBackup};
    use steward_api::schedule::Schedule;
    let plane = Plane::start().await;
    create(&plane, "bb", 1, "").await;
    primary(&plane, "bb")
        .await
        .batch_execute("CREATE TABLE t (id int); INSERT INTO t SELECT generate_series(1, 7)")
        .await
        .unwrap();
    plane
        .apply("apiVersion: steward.dev/v1alpha1\nkind: Schedule\nmetadata:\n  name: bb-base\nspec:\n  cluster: bb\n  schedule: \"*/3 * * * * *\"\n  type: pgbasebackup\n")
        .await;
    let s = plane
        .wait_for::<Schedule, _>("a pg_basebackup run", "bb-base", BOOT, |s| {
            s.status
                .as_ref()
                .is_some_and(|s| s.runs.iter().any(|r| r.phase == "Succeeded"))
        })
        .await;
    plane
        .patch_spec::<Schedule>("bb-base", serde_json::json!({"suspend": true}))
        .await;
    let run = s
        .status
        .unwrap()
        .runs
        .into_iter()
        .find(|r| r.phase == "Succeeded")
        .unwrap()
        .name;
    let backup = plane.api::<PostgresBackup>().get(&run).await.unwrap();
    assert_eq!(backup.spec.method, BackupMethod::Pgbasebackup);
    let status = backup.status.unwrap();
    assert_eq!(status.phase, Some(BackupPhase::Completed), "{status:?}");
    assert_eq!(status.label.as_deref(), Some(run.as_str()));
    assert!(
        plane
            .api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>()
            .get_opt("bb-backup")
            .await
            .unwrap()
            .is_some()
    );
    let extra = format!("  dataSource:\n    pgbasebackup: {{cluster: bb, backup: {run}}}\n");
    let copy = create(&plane, "bb2", 1, &extra).await;
    assert!(
        copy.status
            .as_ref()
            .and_then(|s| s.cloned_from.as_deref())
            .is_some_and(|c| c.contains(&run)),
        "{:?}",
        copy.status
    );
    let n: i64 = primary(&plane, "bb2")
        .await
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 7);
    assert_eq!(
        secret_value(&plane, "bb2-superuser", "password").await,
        secret_value(&plane, "bb-superuser", "password").await,
        "the copy's data has the source's roles: its Secrets start with their passwords"
    );
    plane.shutdown().await;
}
