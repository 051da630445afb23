//! A converged cluster is read, never re-written (issue 17): once an etcd, a PostgreSQL and a
//! CrateDB cluster (on stand-in Pods) have settled, a full reconcile pass makes no write to the API server — no apply of
//! a child that did not change, no status patch that says the same, no Event — and reads its
//! Secrets from the operator's caches, not with GETs. Counted from the
//! API server's own `apiserver_request_total` (kube-apiserver's counter, which the embedded
//! server publishes too), not timed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::e2e::{Plane, true_condition};
use kube::api::{Patch, PatchParams};
use steward_api::cratedb::CrateCluster;
use steward_api::etcd::EtcdCluster;
use steward_api::postgres::PostgresCluster;

/// Writes (and GETs of Secrets) by (verb, resource/subresource), leaving out what is not the operator's reconcile:
/// Leases (leader election and Node heartbeats), Nodes and Pod status (the node agent or
/// kubelet), and the test's own nudges of the cluster object. On the embedded plane they come
/// from the API server's own counter (only this test's clients talk to it); on a real cluster,
/// where that counter has every client's requests (other tests' namespaces being deleted,
/// kube-controller-manager), from the operator's own client (`common::counting`).
async fn writes(plane: &Plane, cluster_resource: &str) -> BTreeMap<String, u64> {
    let counted: Vec<(String, String, String, u64)> = match plane.operator_requests() {
        Some(requests) => requests
            .into_iter()
            .filter_map(|(key, n)| {
                let (verb, rest) = key.split_once(' ')?;
                let (resource, sub) = rest.split_once('/')?;
                Some((verb.to_owned(), resource.to_owned(), sub.to_owned(), n))
            })
            .collect(),
        None => server_counts(plane).await,
    };
    let mut out = BTreeMap::new();
    for (verb, resource, sub, count) in counted {
        // Secrets are read from the operator's caches: a GET of one is counted too.
        let secret_read = verb == "GET" && resource == "secrets";
        if !matches!(verb.as_str(), "POST" | "PUT" | "PATCH" | "DELETE") && !secret_read {
            continue;
        }
        let skipped = matches!(resource.as_str(), "leases" | "nodes")
            || (resource == "pods" && sub == "status")
            || (resource == cluster_resource && sub.is_empty());
        if skipped {
            continue;
        }
        *out.entry(format!("{verb} {resource}/{sub}")).or_insert(0) += count;
    }
    out
}

/// `apiserver_request_total` by verb, resource and subresource.
async fn server_counts(plane: &Plane) -> Vec<(String, String, String, u64)> {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = plane.client.request_text(request).await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .map(|line| {
            let label = |name: &str| {
                line.split(&format!("{name}=\""))
                    .nth(1)
                    .and_then(|rest| rest.split('"').next())
                    .unwrap_or_default()
                    .to_owned()
            };
            let count = line
                .rsplit(' ')
                .next()
                .and_then(|c| c.parse::<f64>().ok())
                .unwrap_or(0.0) as u64;
            (
                label("verb"),
                label("resource"),
                label("subresource"),
                count,
            )
        })
        .collect()
}

/// Reconcile passes of `controller` so far (the operator's own counter).
fn passes(plane: &Plane, controller: &str) -> u64 {
    plane
        .operator()
        .metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("steward_reconcile_passes_total{"))
        .filter(|l| l.contains(&format!("controller=\"{controller}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Nudges the cluster (an annotation: a watch event, no new generation) and waits until the
/// controller has finished a pass after it.
async fn full_pass<K>(plane: &Plane, controller: &str, name: &str, n: u32)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let before = passes(plane, controller);
    let patch =
        serde_json::json!({"metadata": {"annotations": {"steward.dev/test-nudge": n.to_string()}}});
    plane
        .api::<K>()
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    plane
        .eventually(
            &format!("a {controller} pass after nudge {n}"),
            Duration::from_secs(30),
            || async { (passes(plane, controller) > before).then_some(()) },
        )
        .await;
}

/// The writes of one full pass over the settled cluster: after a first pass (anything the
/// settling left to write), a second pass must add none.
async fn assert_steady<K>(plane: &Plane, controller: &str, resource: &str, name: &str)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    full_pass::<K>(plane, controller, name, 1).await;
    let before = writes(plane, resource).await;
    full_pass::<K>(plane, controller, name, 2).await;
    full_pass::<K>(plane, controller, name, 3).await;
    let after = writes(plane, resource).await;
    let added: BTreeMap<&String, u64> = after
        .iter()
        .map(|(k, v)| (k, v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, d)| *d > 0)
        .collect();
    assert!(
        added.is_empty(),
        "two full passes over the settled {controller} cluster wrote: {added:?}"
    );
}

#[tokio::test]
async fn a_pass_over_a_settled_etcd_cluster_writes_nothing() {
    let plane = Plane::start().await;
    plane
        .apply(
            "apiVersion: steward.dev/v1alpha1\nkind: EtcdCluster\nmetadata:\n  name: calm\nspec:\n  replicas: 3\n  version: 3.4.23\n",
        )
        .await;
    plane
        .wait_for::<EtcdCluster, _>("calm settled", "calm", Duration::from_secs(90), |c| {
            c.status.as_ref().is_some_and(|s| {
                true_condition(&s.common, "Available").is_some()
                    && s.ready_members == 3
                    && s.members.iter().all(|m| m.healthy && !m.learner)
                    && s.common.operation.is_none()
            })
        })
        .await;
    assert_steady::<EtcdCluster>(&plane, "etcd", "etcdclusters", "calm").await;
    plane.shutdown().await;
}

#[tokio::test]
async fn a_pass_over_a_settled_postgres_cluster_writes_nothing() {
    let plane = Plane::start().await;
    plane
        .apply(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: calm-app\ndata:\n  password: Y2FsbS1wdy0x\n---\napiVersion: steward.dev/v1alpha1\nkind: PostgresCluster\nmetadata:\n  name: calm\nspec:\n  version: \"15\"\n  instances: 2\n  users:\n    - name: app\n      databases: [app]\n      passwordSecret:\n        name: calm-app\n",
        )
        .await;
    plane
        .wait_for::<PostgresCluster, _>("calm settled", "calm", Duration::from_secs(120), |c| {
            c.status.as_ref().is_some_and(|s| {
                true_condition(&s.common, "Available").is_some()
                    && s.ready_instances == 2
                    && s.instances.iter().all(|i| i.ready)
                    && s.users.iter().any(|u| u.name == "app" && u.ready)
                    && s.common.operation.is_none()
            })
        })
        .await;
    assert_steady::<PostgresCluster>(&plane, "postgres", "postgresclusters", "calm").await;
    plane.shutdown().await;
}

#[tokio::test]
async fn a_pass_over_a_settled_cratedb_cluster_writes_nothing() {
    let plane = Plane::start().await;
    plane
        .apply(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: calm-license}\nstringData: {license: \"standin:e2e:16\"}\n---\n\
             apiVersion: v1\nkind: Secret\nmetadata: {name: calm-app}\nstringData: {password: calm-pw-1}\n---\n\
             apiVersion: steward.dev/v1alpha1\nkind: CrateCluster\nmetadata: {name: calm}\nspec:\n  cluster:\n    name: calm\n    version: \"4.8.4\"\n    license: {secretKeyRef: {name: calm-license, key: license}}\n  nodes:\n    master: {replicas: 3, disk: {size: 1Gi}}\n    data:\n      - {name: hot, replicas: 1, disk: {size: 1Gi}}\n  users:\n    - name: app\n      password: {secretKeyRef: {name: calm-app, key: password}}\n",
        )
        .await;
    plane
        .wait_for::<CrateCluster, _>("calm settled", "calm", Duration::from_secs(180), |c| {
            c.status.as_ref().is_some_and(|s| {
                true_condition(&s.common, "Available").is_some()
                    && s.bootstrap.done
                    && s.health.as_deref() == Some("GREEN")
                    && s.ready_nodes == 4
                    && s.users.iter().any(|u| u.name == "app" && u.ready)
                    && s.common.operation.is_none()
            })
        })
        .await;
    assert_steady::<CrateCluster>(&plane, "cratedb", "crateclusters", "calm").await;
    plane.shutdown().await;
}

#[test]
fn the_operators_requests_are_keyed_as_the_api_server_counts_them() {
    let k = |m: http::Method, u: &str| common::counting::key(&m, &u.parse().unwrap()).unwrap();
    assert_eq!(
        k(
            http::Method::PATCH,
            "/apis/steward.dev/v1alpha1/namespaces/n/etcdclusters/e/status?fieldManager=x"
        ),
        "PATCH etcdclusters/status"
    );
    assert_eq!(
        k(http::Method::GET, "/api/v1/namespaces/n/secrets/s"),
        "GET secrets/"
    );
    assert_eq!(
        k(http::Method::GET, "/api/v1/namespaces/n/secrets"),
        "LIST secrets/"
    );
    assert_eq!(
        k(
            http::Method::GET,
            "/api/v1/secrets?watch=true&resourceVersion=1"
        ),
        "WATCH secrets/"
    );
    assert_eq!(k(http::Method::DELETE, "/api/v1/nodes/a"), "DELETE nodes/");
    assert_eq!(
        k(http::Method::POST, "/api/v1/namespaces/n/events"),
        "POST events/"
    );
}
