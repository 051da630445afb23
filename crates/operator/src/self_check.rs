//! `steward self-check`: runs the operator end to end against the embedded API server and
//! reports what it observed. Exits non-zero when something the operator promises is missing.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use steward_api::etcd::EtcdCluster;
use steward_operator::config::operator_args_from;
use steward_operator::embedded::Embedded;

const EXAMPLE: &str = include_str!("../../../examples/etcd-cluster.yaml");

pub async fn run() -> anyhow::Result<()> {
    let started = Instant::now();
    let plane = Embedded::start(&["steward-system"]).await?;
    println!("embedded API server: {}", plane.server.url());
    let args = operator_args_from([
        "--http-addr",
        "127.0.0.1:0",
        "--api-addr",
        "127.0.0.1:0",
        "--identity",
        "self-check",
    ])?;
    let operator = steward_operator::runtime::start(plane.client.clone(), args).await?;
    println!("operator HTTP endpoint: http://{}", operator.http_addr);

    let cluster: EtcdCluster = serde_saphyr::from_str(EXAMPLE).context("parsing the example")?;
    let clusters: Api<EtcdCluster> = Api::namespaced(plane.client.clone(), "default");
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .context("creating the example")?;
    println!("created EtcdCluster default/example from examples/etcd-cluster.yaml");

    let deadline = Instant::now() + Duration::from_secs(30);
    let observed = loop {
        let current = clusters.get("example").await?;
        let done = current
            .status
            .as_ref()
            .and_then(|s| s.common.observed_generation)
            == Some(1);
        if done {
            break current;
        }
        if Instant::now() > deadline {
            bail!("the operator did not write status within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let services: Api<Service> = Api::namespaced(plane.client.clone(), "default");
    let headless = services
        .get("example")
        .await
        .context("headless Service missing")?;
    let cluster_ip = headless.spec.and_then(|s| s.cluster_ip).unwrap_or_default();
    println!("headless Service default/example: clusterIP={cluster_ip}");
    if let Some(status) = &observed.status {
        for c in &status.common.conditions {
            println!(
                "condition {}={} ({}): {}",
                c.type_, c.status, c.reason, c.message
            );
        }
    }
    let metrics = reqwest::get(format!("http://{}/metrics", operator.http_addr))
        .await?
        .text()
        .await?;
    let leader = metrics.lines().any(|l| l == "steward_leader 1");
    println!(
        "leader: {leader}; metrics served: {} lines",
        metrics.lines().count()
    );
    operator.shutdown().await.map_err(anyhow::Error::msg)?;
    plane.server.shutdown().await;
    if cluster_ip != "None" || !leader {
        bail!("self-check failed");
    }
    println!(
        "self-check passed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
