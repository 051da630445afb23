//! The PostgreSQL instance entrypoint (`postgres::build::script`) proven on the node agent with
//! real PostgreSQL 15: hand-made ConfigMap, Secrets, claims, `-primary` Service and instance
//! Pods (no `PostgresCluster`, so the operator leaves them alone), run as uid 999 the way the
//! official image runs. The test plays the operator's part through the admin seam: it creates
//! the replication role, promotes, and relabels Pods.
//!
//! 1. Bootstrap: the primary initdbs; the replica clones (retrying until the replication role
//!    exists) and streams; a row written on the primary shows on the replica.
//! 2. Fail-over: the primary's Pod is deleted (fast shutdown), the replica is relabelled and
//!    promoted, the old primary's Pod comes back as a replica and rejoins with `pg_rewind`,
//!    streaming on the new timeline.
//! 3. Divergence: the replica is promoted while the primary still takes a write, so the old
//!    primary's data really diverged; it comes back as a replica, `pg_rewind` rewinds it (the
//!    lost write is gone) and it streams from the new primary.
//!
//! Needs root (the node agent) and PostgreSQL 15 in `/usr/lib/postgresql/15/bin`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::e2e::Plane;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use kube::api::{DeleteParams, LogParams, Patch, PatchParams, PostParams};
use serde_json::json;
use steward_operator::postgres::admin::client::PgConnector;
use steward_operator::postgres::admin::{
    ConnectionTarget, PostgresAdmin, PostgresConnector, RoleOptions,
};
use steward_operator::postgres::build::script;
use steward_operator::postgres::names::{self, ClusterNames};
use steward_operator::resources::pods::is_ready;

const CLUSTER: &str = "pg";
/// The image's user and group.
const UID: i64 = 999;
const SUPERUSER_PASSWORD: &str = "S3cretSuperuserPw9";
const REPLICATION_PASSWORD: &str = "R3plicationPw7x";
/// Start-up of a Pod: volumes, initdb or a clone, recovery.
const START: Duration = Duration::from_secs(90);
/// Replication catching up.
const STREAM: Duration = Duration::from_secs(30);
/// Admin calls.
const CALL: Duration = Duration::from_secs(5);

fn secret(name: &str, user: &str, password: &str) -> Secret {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "stringData": {"username": user, "password": password}
    }))
    .unwrap()
}

fn claim(name: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap()
}

/// The ConfigMap, Secrets, claims and `-primary` Service of the cluster.
async fn create_fixtures(plane: &Plane, n: &ClusterNames) {
    let pp = PostParams::default();
    let parameters = BTreeMap::from([("max_connections".to_owned(), "30".to_owned())]);
    let config: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": n.config_map()},
        "data": {
            "postgresql.conf": script::postgresql_conf(&parameters),
            "pg_hba.conf": script::pg_hba_conf(),
            "entrypoint.sh": script::entrypoint(),
        }
    }))
    .unwrap();
    plane.api::<ConfigMap>().create(&pp, &config).await.unwrap();
    let secrets = plane.api::<Secret>();
    let su = secret(&n.superuser_secret(), names::SUPERUSER, SUPERUSER_PASSWORD);
    secrets.create(&pp, &su).await.unwrap();
    let repl = secret(
        &n.replication_secret(),
        names::REPLICATION_USER,
        REPLICATION_PASSWORD,
    );
    secrets.create(&pp, &repl).await.unwrap();
    for ordinal in [0, 1] {
        let c = claim(&n.claim(&n.instance(ordinal)));
        plane
            .api::<PersistentVolumeClaim>()
            .create(&pp, &c)
            .await
            .unwrap();
    }
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": n.primary_service()},
        "spec": {
            "selector": {"app": "pgtest", names::ROLE_LABEL: "primary"},
            "ports": [{"name": "postgres", "port": names::PORT, "targetPort": names::PORT}]
        }
    }))
    .unwrap();
    plane.api::<Service>().create(&pp, &service).await.unwrap();
}

/// An instance Pod as the engine builds it (`build/instance.rs`), in the parts the entrypoint
/// depends on: Secrets readable by the fsGroup only.
fn instance_pod(n: &ClusterNames, instance: &str, role: &str) -> Pod {
    let env = json!([
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "PGROLE", "valueFrom": {"fieldRef": {
            "fieldPath": format!("metadata.labels['{}']", names::ROLE_LABEL)}}},
        {"name": "INSTANCE", "value": instance},
        {"name": "PRIMARY_HOST", "value": n.primary_host()},
        {"name": "PGDATA", "value": names::PGDATA},
    ]);
    serde_json::from_value(json!({
        "metadata": {
            "name": instance,
            "labels": {"app": "pgtest", names::INSTANCE_LABEL: instance, names::ROLE_LABEL: role}
        },
        "spec": {
            "securityContext": {"runAsUser": UID, "runAsGroup": UID, "fsGroup": UID},
            "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "postgres",
                "image": "postgres:15",
                "command": ["sh", format!("{}/entrypoint.sh", names::CONFIG_MOUNT)],
                "env": env,
                "ports": [{"name": "postgres", "containerPort": names::PORT}],
                "readinessProbe": {
                    "exec": {"command": script::readiness_command()},
                    "periodSeconds": 1,
                    "timeoutSeconds": 5
                },
                "volumeMounts": [
                    {"name": "data", "mountPath": names::DATA_MOUNT},
                    {"name": "config", "mountPath": names::CONFIG_MOUNT, "readOnly": true},
                    {"name": "superuser", "mountPath": names::SUPERUSER_MOUNT, "readOnly": true},
                    {"name": "replication", "mountPath": names::REPLICATION_MOUNT, "readOnly": true}
                ]
            }],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": n.claim(instance)}},
                {"name": "config", "configMap": {"name": n.config_map()}},
                {"name": "superuser", "secret": {"secretName": n.superuser_secret(), "defaultMode": 0o440}},
                {"name": "replication", "secret": {"secretName": n.replication_secret(), "defaultMode": 0o440}}
            ]
        }
    }))
    .unwrap()
}

async fn create_pod(plane: &Plane, n: &ClusterNames, instance: &str, role: &str) {
    let mut pod = instance_pod(n, instance, role);
    plane.pin(&mut pod);
    plane
        .api::<Pod>()
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

/// Waits until the Pod is Ready; returns its IP.
async fn ready_ip(plane: &Plane, instance: &str) -> String {
    let pod = plane
        .wait_for::<Pod, _>(&format!("{instance} Ready"), instance, START, is_ready)
        .await;
    pod.status.and_then(|s| s.pod_ip).unwrap()
}

/// Deletes the Pod (graceful: the entrypoint turns SIGTERM into a fast shutdown) and waits
/// until it is gone.
async fn delete_pod(plane: &Plane, instance: &str) {
    let pods = plane.api::<Pod>();
    pods.delete(instance, &DeleteParams::default())
        .await
        .unwrap();
    plane
        .eventually(&format!("{instance} gone"), START, || {
            let pods = pods.clone();
            async move { pods.get_opt(instance).await.ok()?.is_none().then_some(()) }
        })
        .await;
}

async fn set_role(plane: &Plane, instance: &str, role: &str) {
    let patch = json!({"metadata": {"labels": {names::ROLE_LABEL: role}}});
    plane
        .api::<Pod>()
        .patch(instance, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

fn target(ip: &str) -> ConnectionTarget {
    ConnectionTarget::new(ip, 5432, names::SUPERUSER, SUPERUSER_PASSWORD)
}

async fn admin(ip: &str) -> Box<dyn PostgresAdmin> {
    PgConnector
        .connect(&target(ip), CALL)
        .await
        .unwrap_or_else(|e| panic!("connecting to {ip}: {e}"))
}

/// Runs `sql` as the superuser and returns the first column of every row.
async fn sql(ip: &str, sql: &str) -> Result<Vec<String>, tokio_postgres::Error> {
    let config = format!(
        "host={ip} port=5432 user={} password={SUPERUSER_PASSWORD} dbname=postgres \
         connect_timeout=5",
        names::SUPERUSER
    );
    let (client, connection) = tokio_postgres::connect(&config, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let mut values = Vec::new();
    for message in client.simple_query(sql).await? {
        if let tokio_postgres::SimpleQueryMessage::Row(row) = message {
            values.push(row.get(0).unwrap_or_default().to_owned());
        }
    }
    Ok(values)
}

/// Waits until `SELECT x FROM t ORDER BY x` on `ip` gives `want`.
async fn wait_rows(plane: &Plane, ip: &str, want: &[&str]) {
    plane
        .eventually(&format!("rows {want:?} on {ip}"), STREAM, || async move {
            let rows = sql(ip, "SELECT x FROM t ORDER BY x").await.ok()?;
            (rows == want).then_some(())
        })
        .await;
}

/// Waits until `primary` streams to `standby` (by application name).
async fn wait_streaming(plane: &Plane, primary: &str, standby: &str) {
    plane
        .eventually(
            &format!("{standby} streaming from {primary}"),
            STREAM,
            || async move {
                let rows = admin(primary).await.replication().await.ok()?;
                rows.iter()
                    .any(|r| r.application_name == standby && r.state == "streaming")
                    .then_some(())
            },
        )
        .await;
}

async fn logs(plane: &Plane, instance: &str) -> String {
    let text = plane
        .api::<Pod>()
        .logs(instance, &LogParams::default())
        .await
        .unwrap();
    for secret in [SUPERUSER_PASSWORD, REPLICATION_PASSWORD] {
        assert!(!text.contains(secret), "{instance} logged a password");
    }
    text
}

/// Promotes the instance at `ip` and returns its new timeline.
async fn promote(ip: &str) -> u32 {
    let a = admin(ip).await;
    assert!(a.promote(Duration::from_secs(10)).await.unwrap());
    let info = a.server_info().await.unwrap();
    assert!(!info.in_recovery);
    info.timeline
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instances_bootstrap_stream_fail_over_and_rejoin_with_pg_rewind() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the node agent needs root (mount namespaces, setuid)"
    );
    let plane = Plane::start().await;
    let n = ClusterNames::new(CLUSTER, &plane.namespace);
    let (a, b) = (n.instance(0), n.instance(1));
    create_fixtures(&plane, &n).await;
    create_pod(&plane, &n, &a, "primary").await;
    create_pod(&plane, &n, &b, "replica").await;

    // 1. Bootstrap. The replica's clone fails until the replication role exists.
    let ip_a = ready_ip(&plane, &a).await;
    let pa = admin(&ip_a).await;
    let info = pa.server_info().await.unwrap();
    assert!(!info.in_recovery);
    assert_eq!((info.version_num / 10_000, info.timeline), (15, 1));
    let replication = RoleOptions {
        replication: true,
        ..RoleOptions::default()
    };
    pa.create_role(names::REPLICATION_USER, REPLICATION_PASSWORD, &replication)
        .await
        .unwrap();
    sql(
        &ip_a,
        "CREATE TABLE t (x text); INSERT INTO t VALUES ('1 bootstrap')",
    )
    .await
    .unwrap();
    let ip_b = ready_ip(&plane, &b).await;
    wait_streaming(&plane, &ip_a, &b).await;
    let sb = admin(&ip_b).await.server_info().await.unwrap();
    assert!(sb.in_recovery);
    assert_eq!(sb.system_identifier, info.system_identifier);
    wait_rows(&plane, &ip_b, &["1 bootstrap"]).await;
    assert!(logs(&plane, &b).await.contains("cloned from"));
    assert!(logs(&plane, &a).await.contains("initdb"));

    // 2. Fail-over: the primary goes, the replica is relabelled and promoted, the old primary
    // comes back as a replica and rejoins.
    delete_pod(&plane, &a).await;
    set_role(&plane, &b, "primary").await;
    assert_eq!(promote(&ip_b).await, 2);
    create_pod(&plane, &n, &a, "replica").await;
    let ip_a = ready_ip(&plane, &a).await;
    let log = logs(&plane, &a).await;
    assert!(
        log.contains("rejoining") && log.contains("pg_rewind succeeded"),
        "{log}"
    );
    wait_streaming(&plane, &ip_b, &a).await;
    let sa = admin(&ip_a).await.server_info().await.unwrap();
    assert!(sa.in_recovery);
    assert_eq!(sa.timeline, 2);
    wait_rows(&plane, &ip_a, &["1 bootstrap"]).await;
    sql(&ip_b, "INSERT INTO t VALUES ('2 after fail-over')")
        .await
        .unwrap();
    wait_rows(&plane, &ip_a, &["1 bootstrap", "2 after fail-over"]).await;

    // 3. Divergence: promote the replica while the primary still writes; the old primary's
    // data must really be rewound.
    assert_eq!(promote(&ip_a).await, 3);
    sql(&ip_b, "INSERT INTO t VALUES ('3 lost'); CHECKPOINT")
        .await
        .unwrap();
    delete_pod(&plane, &b).await;
    set_role(&plane, &a, "primary").await;
    create_pod(&plane, &n, &b, "replica").await;
    let ip_b = ready_ip(&plane, &b).await;
    let log = logs(&plane, &b).await;
    assert!(
        log.contains("servers diverged") && log.contains("pg_rewind succeeded"),
        "{log}"
    );
    assert!(!log.contains("cloning afresh"), "{log}");
    wait_streaming(&plane, &ip_a, &b).await;
    let sb = admin(&ip_b).await.server_info().await.unwrap();
    assert_eq!((sb.in_recovery, sb.timeline), (true, 3));
    sql(&ip_a, "INSERT INTO t VALUES ('4 after rejoin')")
        .await
        .unwrap();
    wait_rows(
        &plane,
        &ip_b,
        &["1 bootstrap", "2 after fail-over", "4 after rejoin"],
    )
    .await;
    plane.shutdown().await;
}
