//! PostgreSQL on three Nodes (record results in docs/performance.md):
//! - **drain of the primary's Node**: `kubectl drain` with a writer inserting every 10 ms
//!   through the `-primary` Service; the primary's disruption budget holds the eviction while
//!   the operator switches over to a replica on another Node. Figures: how long the drain
//!   took, and the longest gap between acknowledged writes during it;
//! - **node loss**: the primary's machine powers off (node agent gone, processes killed). The
//!   operator cannot know the machine is off, so it reports `PrimaryNodeLost` and waits for a
//!   person; the figures are power-off → condition (detection: the node monitor grace period
//!   plus the detection delay), and confirmation (`kubectl delete pod --force`) → first write
//!   acknowledged by the new primary.
//!
//! Needs root (the node agents) and kubectl (`$KUBECTL`, as `scripts/prereqs.sh` installs it).
//! `cargo bench -p steward-operator --bench nodes` (add `-- --runs N`, default 3).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
#[path = "common/postgres.rs"]
mod pg;

use std::time::{Duration, Instant};

use common::kubectl;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use pg::{Writer, settled, until};
use steward_api::postgres::PostgresCluster;
use steward_operator::dev::apply_manifests;

const NAMESPACE: &str = "default";

async fn pod(client: &kube::Client, name: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    pods.get(name).await.unwrap()
}

async fn node_of(client: &kube::Client, name: &str) -> String {
    pod(client, name).await.spec.unwrap().node_name.unwrap()
}

async fn ip_of(client: &kube::Client, name: &str) -> String {
    pod(client, name).await.status.unwrap().pod_ip.unwrap()
}

fn primary_of(c: &PostgresCluster) -> String {
    c.status.as_ref().unwrap().current_primary.clone().unwrap()
}

fn degraded_because(c: &PostgresCluster, reason: &str) -> bool {
    c.status.as_ref().is_some_and(|s| {
        s.common
            .conditions
            .iter()
            .any(|x| x.type_ == "Degraded" && x.status == "True" && x.reason == reason)
    })
}

struct Row {
    drain: Duration,
    drain_gap: Duration,
    detected: Duration,
    recovered: Duration,
}

async fn run(run: usize) -> Row {
    let dir = tempfile::tempdir().unwrap();
    let plane = common::plane_with_nodes(&dir, 3).await;
    let client = plane.embedded.client.clone();
    let api: Api<PostgresCluster> = Api::namespaced(client.clone(), NAMESPACE);
    let name = format!("nodes{run}");
    let manifest = format!(
        "apiVersion: steward.dev/v1alpha1\nkind: PostgresCluster\nmetadata:\n  name: {name}\nspec:\n  version: \"15\"\n  instances: 3\n"
    );
    apply_manifests(&client, &manifest, NAMESPACE)
        .await
        .unwrap();
    let (_, c) = until(&api, &name, "ready with 3 instances", |c| settled(c, 3)).await;
    let writer = Writer::for_cluster(&client, NAMESPACE, &name).await;

    // Drain of the primary's Node.
    let old = primary_of(&c);
    let node = node_of(&client, &old).await;
    let started = Instant::now();
    kubectl(
        &plane,
        &[
            "drain",
            &node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=180s",
        ],
    );
    let drained = Instant::now();
    let drain_gap = writer.longest_gap(started, drained);
    kubectl(&plane, &["uncordon", &node]);
    let (_, c) = until(&api, &name, "settled after the drain", |c| settled(c, 3)).await;

    // Node loss. The first Node's agent carries the plane's Service proxy: keep the primary
    // off it, so that the writer's Service still routes once that primary's machine is gone.
    let mut primary = primary_of(&c);
    let first = plane.node.name().to_owned();
    if node_of(&client, &primary).await == first {
        let mut target = None;
        for i in 0..3 {
            let instance = format!("{name}-{i}");
            if instance != primary && node_of(&client, &instance).await != first {
                target = Some(instance);
            }
        }
        let target = target.unwrap();
        let patch =
            serde_json::json!({"spec": {"switchover": {"id": "off-first", "target": target}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        until(&api, &name, "off the first Node", |c| {
            settled(c, 3) && primary_of(c) == target
        })
        .await;
        primary = target;
    }
    let lost = node_of(&client, &primary).await;
    let handle = plane.more_nodes.iter().find(|n| n.name() == lost).unwrap();
    let off = Instant::now();
    handle.power_off();
    let (_, c) = until(&api, &name, "reporting the lost Node", |c| {
        degraded_because(c, "PrimaryNodeLost")
    })
    .await;
    let detected = off.elapsed();
    let target = c.status.unwrap().pending_failover.unwrap().target;
    let target_ip = ip_of(&client, &target).await;
    // The person confirms the machine is off.
    let confirmed = Instant::now();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    pods.delete(&primary, &now).await.unwrap();
    let resumed = writer.first_after(confirmed, Some(&target_ip)).await;
    let recovered = resumed - confirmed;
    writer.stop().await;
    println!(
        "run {run}: drain of the primary's Node {:.2} s, longest write gap {:.2} s | node loss: \
         reported after {:.1} s, writes on the new primary {:.2} s after the confirmation",
        (drained - started).as_secs_f64(),
        drain_gap.as_secs_f64(),
        detected.as_secs_f64(),
        recovered.as_secs_f64()
    );
    plane.shutdown().await;
    Row {
        drain: drained - started,
        drain_gap,
        detected,
        recovered,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let runs = common::runs();
    let mut rows = Vec::new();
    for i in 0..runs {
        rows.push(run(i).await);
    }
    let median = |f: fn(&Row) -> Duration| {
        let mut v: Vec<f64> = rows.iter().map(|r| f(r).as_secs_f64()).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "median of {runs}: drain {:.2} s, longest write gap {:.2} s | node loss reported {:.1} s, \
         confirmation → write {:.2} s",
        median(|r| r.drain),
        median(|r| r.drain_gap),
        median(|r| r.detected),
        median(|r| r.recovered),
    );
}
