//! CrateDB end to end: the operator against CrateDB stand-in Pods (the node agent runs the
//! stand-in for CrateDB images; several Pods form one cluster over its transport), through the
//! operator's production channels — `crash` over `pods/exec`, the PostgreSQL wire protocol and
//! HTTP `/_sql`. The stand-in is not CrateDB: docs/cratedb-standin.md says what it models.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::e2e::{Plane, connect, pod_ip, secret_value, true_condition, with_webhooks};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use serde_json::{Value, json};
use steward_api::common::{OperationKind, OperationPhase};
use steward_api::cratedb::CrateCluster;
use steward_operator::dev::apply_manifests;

const BOOT: Duration = Duration::from_secs(180);

/// Secrets (the license allows 16 nodes; the user's password) and a cluster of 3 masters and
/// the given data sets.
fn manifest(name: &str, data: &[(&str, i32)], gate: (u32, u64)) -> String {
    let sets: String = data
        .iter()
        .map(|(n, r)| format!("      - {{name: {n}, replicas: {r}, disk: {{size: 1Gi}}}}\n"))
        .collect();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}-license}}\nstringData: {{license: \"standin:e2e:16\"}}\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}-app}}\nstringData: {{password: first-password}}\n---\n\
         apiVersion: steward.dev/v1alpha1\nkind: CrateCluster\nmetadata: {{name: {name}}}\nspec:\n  cluster:\n    name: {name}\n    version: \"4.8.4\"\n    license: {{secretKeyRef: {{name: {name}-license, key: license}}}}\n  nodes:\n    master: {{replicas: 3, disk: {{size: 1Gi}}}}\n    data:\n{sets}  users:\n    - name: app\n      password: {{secretKeyRef: {{name: {name}-app, key: password}}}}\n  restart: {{greenReadings: {}, greenIntervalSeconds: {}}}\n",
        gate.0, gate.1
    )
}

async fn bootstrapped(plane: &Plane, name: &str) -> CrateCluster {
    plane
        .wait_for::<CrateCluster, _>("bootstrap and Available", name, BOOT, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.bootstrap.done
                    && s.health.as_deref() == Some("GREEN")
                    && true_condition(&s.common, "Available").is_some()
            })
        })
        .await
}

/// Events of the test's namespace with one of `reasons`, oldest first, as `(reason, note)`,
/// once one with the last of `reasons` is listed (or after 30 s): the operator posts Events
/// after the status write a test waits for.
async fn events(plane: &Plane, reasons: &[&str]) -> Vec<(String, String)> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let listed = listed_events(plane, reasons).await;
        let last = reasons.last().copied().unwrap_or_default();
        if listed.iter().any(|(r, _)| r == last) || std::time::Instant::now() > deadline {
            return listed;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn listed_events(plane: &Plane, reasons: &[&str]) -> Vec<(String, String)> {
    let mut items = plane
        .api::<Event>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    items.sort_by_key(|e| {
        e.event_time
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
    });
    items
        .into_iter()
        .filter(|e| reasons.contains(&e.reason.as_deref().unwrap_or_default()))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// Runs `stmt` over HTTP `/_sql` on `pod` as `system`.
async fn sql(plane: &Plane, cluster: &str, pod: &str, stmt: &str) -> Value {
    let password = secret_value(plane, &format!("user-system-{cluster}"), "password").await;
    let ip = pod_ip(plane, pod).await;
    let body: Value = reqwest::Client::new()
        .post(format!("http://{ip}:4200/_sql"))
        .basic_auth("system", Some(password))
        .json(&json!({"stmt": stmt}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(body.get("error").is_none(), "{stmt}: {body}");
    body
}

/// Bootstrap in the seed's order — license with crash, then `system` with crash, then the user
/// over the PostgreSQL protocol — a login as the user, and a rotation of its Secret that the
/// operator carries out by logging in with the old password.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bootstrap_sets_the_license_first_and_users_follow_their_secrets() {
    let plane = Plane::start().await;
    plane
        .apply(&manifest("cb", &[("hot", 2), ("cold", 2)], (1, 1)))
        .await;
    bootstrapped(&plane, "cb").await;
    // Bootstrap needs the masters only: data nodes may still be joining when it ends.
    let c = plane
        .wait_for::<CrateCluster, _>("all 7 nodes ready", "cb", BOOT, |c| {
            c.status.as_ref().is_some_and(|s| s.ready_nodes == 7)
        })
        .await;
    let status = c.status.unwrap();
    assert_eq!(status.ready_nodes, 7, "{status:?}");
    assert!(status.master_node.is_some());
    let order = events(&plane, &["LicenseSet", "SystemUserCreated", "UserCreated"]).await;
    let reasons: Vec<&str> = order.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        reasons,
        ["LicenseSet", "SystemUserCreated", "UserCreated"],
        "{order:?}"
    );
    assert!(order[2].1.contains("PostgreSQL protocol"), "{order:?}");
    // Children: one StatefulSet per node set.
    let sets = plane
        .api::<StatefulSet>()
        .list(&ListParams::default())
        .await
        .unwrap();
    let mut names: Vec<String> = sets
        .items
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["crate-data-cold-cb", "crate-data-hot-cb", "crate-master-cb"]
    );

    // The user logs in over the PostgreSQL protocol, on a data node.
    let ip = pod_ip(&plane, "crate-data-hot-cb-0").await;
    let app = connect(&ip, "app", "first-password", "doc").await.unwrap();
    app.simple_query("SELECT name FROM sys.nodes")
        .await
        .unwrap();

    // Rotation: the Secret changes; the operator logs in as app with the old password.
    plane
        .apply("apiVersion: v1\nkind: Secret\nmetadata: {name: cb-app}\nstringData: {password: second-password}\n")
        .await;
    plane
        .eventually("the new password logs in", BOOT, || {
            let ip = ip.clone();
            async move { connect(&ip, "app", "second-password", "doc").await.ok() }
        })
        .await;
    assert!(
        connect(&ip, "app", "first-password", "doc").await.is_err(),
        "the old password no longer logs in"
    );
    let rotated = events(&plane, &["PasswordRotated"]).await;
    assert_eq!(rotated.len(), 1, "{rotated:?}");

    // Removing a data set is not implemented: said so, and its nodes keep running.
    plane
        .patch_spec::<CrateCluster>(
            "cb",
            json!({"nodes": {"data": [{"name": "hot", "replicas": 2, "disk": {"size": "1Gi"}}]}}),
        )
        .await;
    plane
        .wait_for::<CrateCluster, _>("NodeSetRemoved", "cb", BOOT, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.common.conditions.iter().any(|x| {
                    x.type_ == "Degraded"
                        && x.reason == "NodeSetRemoved"
                        && x.message.contains("cold")
                })
            })
        })
        .await;
    let cold = plane
        .api::<StatefulSet>()
        .get("crate-data-cold-cb")
        .await
        .unwrap();
    assert_eq!(cold.spec.unwrap().replicas, Some(2));
    plane.shutdown().await;
}

/// One edit scales masters 3→5, hot 2→3 and cold 2→1 (the issue's scenario): the seed's four steps in order (Events),
/// the departing cold node is emptied before its Pod goes, no shard is lost, the `scale`
/// operation succeeds. A later shrink that would leave a table under-replicated is refused
/// with a condition and removes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scaling_follows_the_seed_order_and_refuses_to_under_replicate() {
    let (hook_url, hooks) = common::hooks::receiver(axum::http::StatusCode::OK).await;
    let mut plane = with_webhooks(&hook_url).await;
    plane
        .apply(&manifest("cs", &[("hot", 2), ("cold", 2)], (1, 1)))
        .await;
    bootstrapped(&plane, "cs").await;
    sql(
        &plane,
        "cs",
        "crate-master-cs-0",
        "CREATE TABLE t (id int) CLUSTERED INTO 4 SHARDS WITH (number_of_replicas = 1)",
    )
    .await;
    plane
        .wait_for::<CrateCluster, _>("table GREEN", "cs", BOOT, |c| {
            c.status.as_ref().and_then(|s| s.health.as_deref()) == Some("GREEN")
        })
        .await;
    plane
        .patch_spec::<CrateCluster>(
            "cs",
            json!({"nodes": {"master": {"replicas": 5}, "data": [
                {"name": "hot", "replicas": 3, "disk": {"size": "1Gi"}},
                {"name": "cold", "replicas": 1, "disk": {"size": "1Gi"}}
            ]}}),
        )
        .await;
    // The operator stops mid-scale (past the masters) and continues where status says.
    plane
        .wait_for::<CrateCluster, _>("scale step 2", "cs", BOOT, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.scale.as_ref().is_some_and(|p| p.step >= 2)
                    || s.common
                        .last_operation
                        .as_ref()
                        .is_some_and(|o| o.kind == OperationKind::Scale)
            })
        })
        .await;
    plane.restart_operator().await;
    let c = plane
        .wait_for::<CrateCluster, _>("the scale operation", "cs", BOOT, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.common
                    .last_operation
                    .as_ref()
                    .is_some_and(|o| o.kind == OperationKind::Scale)
            })
        })
        .await;
    let op = c
        .status
        .as_ref()
        .unwrap()
        .common
        .last_operation
        .clone()
        .unwrap();
    assert_eq!(op.phase, OperationPhase::Succeeded, "{op:?}");
    assert_eq!(op.change.old_master_replicas, Some(3));
    assert_eq!(op.change.new_master_replicas, Some(5));
    let steps = events(
        &plane,
        &[
            "ScaleMasters",
            "ScaleUpDataNodes",
            "DrainNodes",
            "ScaleDownDataNodes",
            "ResetAllocation",
        ],
    )
    .await;
    let reasons: Vec<&str> = steps.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        reasons,
        [
            "ScaleMasters",
            "ScaleUpDataNodes",
            "DrainNodes",
            "ScaleDownDataNodes",
            "ResetAllocation"
        ],
        "{steps:?}"
    );
    assert!(steps[0].1.contains("master to 5"), "{steps:?}");
    assert!(steps[1].1.contains("hot to 3"), "{steps:?}");
    assert!(steps[2].1.contains("crate-data-cold-cs-1"), "{steps:?}");
    assert!(steps[3].1.contains("cold to 1"), "{steps:?}");
    // The seed's `scale` webhook, byte for byte.
    let ns = plane.namespace.clone();
    let want = format!(
        "{{\"cluster\":\"cs\",\"event\":\"scale\",\"namespace\":\"{ns}\",\"scale_data\":{{\"new_data_replicas\":[{{\"name\":\"hot\",\"replicas\":3}},{{\"name\":\"cold\",\"replicas\":1}}],\"new_master_replicas\":5,\"old_data_replicas\":[{{\"name\":\"hot\",\"replicas\":2}},{{\"name\":\"cold\",\"replicas\":2}}],\"old_master_replicas\":3}},\"status\":\"success\",\"upgrade_data\":null}}"
    );
    plane
        .eventually("the scale webhook", BOOT, || {
            let hooks = hooks.clone();
            let want = want.clone();
            async move {
                hooks
                    .all()
                    .iter()
                    .any(|(_, body)| *body == want)
                    .then_some(())
            }
        })
        .await;
    // Nothing lost: every shard copy started, on the remaining nodes.
    let body = sql(
        &plane,
        "cs",
        "crate-master-cs-0",
        "SELECT node['name'], routing_state FROM sys.shards WHERE table_name = 't'",
    )
    .await;
    let rows = body["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 8, "{body}");
    assert!(
        rows.iter()
            .all(|r| r[1] == "STARTED" && r[0] != "crate-data-cold-cs-1"),
        "{body}"
    );

    // Refused: with 4 data nodes, a table with 3 replicas (4 copies) cannot lose one.
    sql(
        &plane,
        "cs",
        "crate-master-cs-0",
        "ALTER TABLE t SET (number_of_replicas = 3)",
    )
    .await;
    plane
        .wait_for::<CrateCluster, _>("four copies", "cs", BOOT, |c| {
            c.status.as_ref().and_then(|s| s.health.as_deref()) == Some("GREEN")
        })
        .await;
    plane
        .patch_spec::<CrateCluster>(
            "cs",
            json!({"nodes": {"master": {"replicas": 5}, "data": [
                {"name": "hot", "replicas": 2, "disk": {"size": "1Gi"}},
                {"name": "cold", "replicas": 1, "disk": {"size": "1Gi"}}
            ]}, "timeouts": {"scalingSeconds": 8}}),
        )
        .await;
    plane
        .wait_for::<CrateCluster, _>("ScaleRefused", "cs", BOOT, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.common.conditions.iter().any(|x| {
                    x.type_ == "Degraded"
                        && x.reason == "ScaleRefused"
                        && x.message.contains("3 replicas")
                })
            })
        })
        .await;
    // The refused scale waits; at its deadline it fails, with the `scale` failure webhook.
    plane
        .eventually("the scale failure webhook", BOOT, || {
            let hooks = hooks.clone();
            async move {
                hooks
                    .all()
                    .iter()
                    .any(|(_, b)| {
                        b.contains("\"event\":\"scale\"") && b.contains("\"status\":\"failure\"")
                    })
                    .then_some(())
            }
        })
        .await;
    let c = plane.api::<CrateCluster>().get("cs").await.unwrap();
    let op = c.status.unwrap().common.last_operation.unwrap();
    assert_eq!(
        (op.kind, op.phase),
        (OperationKind::Scale, OperationPhase::Failed),
        "{op:?}"
    );
    let pods = plane
        .api::<k8s_openapi::api::core::v1::Pod>()
        .list(&ListParams::default().labels("steward.dev/node-set=hot"))
        .await
        .unwrap();
    assert_eq!(pods.items.len(), 3, "nothing was removed");
    let hot = plane
        .api::<StatefulSet>()
        .get("crate-data-hot-cs")
        .await
        .unwrap();
    assert_eq!(hot.spec.unwrap().replicas, Some(3), "nothing was removed");
    plane.shutdown().await;
}

/// A rolling restart (the REST API's annotation): masters in ordinal order, then each data set
/// in spec order, each node behind the health gate (3 GREEN readings here, 1 s apart), and the
/// operator restarted in the middle continues with the next node, restarting none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_restart_follows_the_seed_order_behind_the_health_gate() {
    let (hook_url, hooks) = common::hooks::receiver(axum::http::StatusCode::OK).await;
    let mut plane = with_webhooks(&hook_url).await;
    plane
        .apply(&manifest("cr", &[("hot", 1), ("cold", 1)], (3, 1)))
        .await;
    bootstrapped(&plane, "cr").await;
    plane
        .patch_spec::<CrateCluster>(
            "cr",
            json!({"podTemplate": {"annotations": {"steward.dev/restarted-at": "2026-11-26T00:00:00Z"}}}),
        )
        .await;
    plane
        .wait_for::<CrateCluster, _>("two nodes restarted", "cr", BOOT, |c| {
            c.status
                .as_ref()
                .and_then(|s| s.restart.as_ref())
                .is_some_and(|r| r.restarted.len() >= 2)
        })
        .await;
    plane.restart_operator().await;
    let c = plane
        .wait_for::<CrateCluster, _>("the restart operation", "cr", BOOT, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.common
                    .last_operation
                    .as_ref()
                    .is_some_and(|o| o.kind == OperationKind::Restart)
            })
        })
        .await;
    let op = c.status.unwrap().common.last_operation.unwrap();
    assert_eq!(op.phase, OperationPhase::Succeeded, "{op:?}");
    assert!(
        op.message.contains(
            "restarted 5 nodes in order (crate-master-cr-0, crate-master-cr-1, crate-master-cr-2, \
             crate-data-hot-cr-0, crate-data-cold-cr-0)"
        ),
        "{op:?}"
    );
    // Each node passed the gate: three GREEN readings (the planner's unit tests check the
    // interval); the Events of a kind are one series per cluster.
    let back = events(&plane, &["NodeRestarted"]).await;
    assert!(
        back.iter().all(|(_, n)| n.contains("3 GREEN readings")),
        "{back:?}"
    );

    // A new version is an upgrade: the same order, and the seed's `upgrade` webhook.
    plane
        .patch_spec::<CrateCluster>("cr", json!({"cluster": {"version": "4.8.5"}}))
        .await;
    let c = plane
        .wait_for::<CrateCluster, _>("the upgrade", "cr", BOOT, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.common
                    .last_operation
                    .as_ref()
                    .is_some_and(|o| o.kind == OperationKind::Upgrade)
            })
        })
        .await;
    let status = c.status.unwrap();
    let op = status.common.last_operation.unwrap();
    assert_eq!(op.phase, OperationPhase::Succeeded, "{op:?}");
    assert_eq!(status.image.as_deref(), Some("crate:4.8.5"));
    let pod = plane
        .api::<k8s_openapi::api::core::v1::Pod>()
        .get("crate-data-cold-cr-0")
        .await
        .unwrap();
    assert_eq!(
        pod.spec.unwrap().containers[0].image.as_deref(),
        Some("crate:4.8.5")
    );
    let ns = plane.namespace.clone();
    let want = format!(
        "{{\"cluster\":\"cr\",\"event\":\"upgrade\",\"namespace\":\"{ns}\",\"scale_data\":null,\"status\":\"success\",\"upgrade_data\":{{\"new_registry\":\"crate\",\"new_version\":\"4.8.5\",\"old_registry\":\"crate\",\"old_version\":\"4.8.4\"}}}}"
    );
    plane
        .eventually("the upgrade webhook", BOOT, || {
            let hooks = hooks.clone();
            let want = want.clone();
            async move {
                hooks
                    .all()
                    .iter()
                    .any(|(_, body)| *body == want)
                    .then_some(())
            }
        })
        .await;
    plane.shutdown().await;
}

/// Invalid specs are refused — by the API server (CEL: `kubectl scale`, fewer than 3 masters)
/// or by the operator with an `InvalidSpec` condition — and nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invalid_specs_are_refused_and_nothing_is_created() {
    let plane = Plane::start().await;
    // Fewer than 3 masters: the API server refuses it (the CRD's schema).
    let bad = manifest("ci", &[("hot", 1)], (1, 1))
        .replace("master: {replicas: 3", "master: {replicas: 2");
    let err = apply_manifests(&plane.client, &bad, &plane.namespace)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("replicas"), "{err}");
    assert!(
        plane
            .api::<CrateCluster>()
            .get_opt("ci")
            .await
            .unwrap()
            .is_none()
    );
    // A reserved user name passes the schema and is refused by the operator.
    plane
        .apply(&manifest("ci", &[("hot", 1)], (1, 1)).replace("- name: app", "- name: system"))
        .await;
    plane
        .wait_for::<CrateCluster, _>("InvalidSpec", "ci", BOOT, |c| {
            c.status.as_ref().is_some_and(|s| {
                s.common
                    .conditions
                    .iter()
                    .any(|x| x.reason == "InvalidSpec" && x.message.contains("reserved"))
            })
        })
        .await;
    let sets = plane
        .api::<StatefulSet>()
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(sets.items.is_empty(), "nothing was created");
    // kubectl scale is refused with a message naming spec.nodes.
    let ns = plane.namespace.clone();
    let out = plane.kubectl_refused(&["-n", &ns, "scale", "cratecluster/ci", "--replicas=5"]);
    assert!(out.contains("spec.nodes"), "{out}");
    plane.shutdown().await;
}
