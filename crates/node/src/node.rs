//! The Node object: registration (labels, capacity, addresses, kubelet endpoint, node info)
//! and the Ready heartbeat.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::config::NodeConfig;
use crate::error::NodeError;
use crate::pods::envs::NodeFacts;
use crate::pods::volumes::FIELD_MANAGER;

pub const KUBELET_VERSION: &str = "v1.36.2-steward";

/// CPU count and memory of this machine.
pub fn facts() -> NodeFacts {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let memory_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(1 << 20);
    NodeFacts {
        cpus,
        memory_bytes: memory_kib * 1024,
    }
}

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn os_image() -> String {
    read_trim("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".into())
}

pub fn labels(cfg: &NodeConfig) -> BTreeMap<String, String> {
    let mut l = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), cfg.name.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), arch().to_string()),
        ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
        ("beta.kubernetes.io/arch".to_string(), arch().to_string()),
    ]);
    l.extend(cfg.labels.clone());
    l
}

/// The conditions for a heartbeat; `since` is the Ready condition's transition time.
fn conditions(ready: bool, since: Timestamp, now: Timestamp) -> Value {
    let cond = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": Timestamp::to_string(&now.round(jiff::Unit::Second).unwrap_or(now)),
            "lastTransitionTime": since.round(jiff::Unit::Second).unwrap_or(since).to_string()})
    };
    json!([
        cond(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        cond(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        cond(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        if ready {
            cond(
                "Ready",
                "True",
                "KubeletReady",
                "steward-node is posting ready status",
            )
        } else {
            cond("Ready", "False", "KubeletNotReady", "steward-node stopped")
        },
    ])
}

/// The full Node status the agent owns.
pub fn status(kubelet_port: u16, facts: NodeFacts, ready: bool, since: Timestamp) -> Value {
    let capacity = json!({
        "cpu": facts.cpus.to_string(),
        "memory": format!("{}Ki", facts.memory_bytes / 1024),
        "pods": "110",
        "ephemeral-storage": "100Gi",
    });
    json!({
        "capacity": capacity,
        "allocatable": capacity,
        "conditions": conditions(ready, since, Timestamp::now()),
        // Only the address the kubelet API answers on: a real API server prefers a Hostname
        // address, and the Node's name does not resolve.
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "nodeInfo": {
            "kubeletVersion": KUBELET_VERSION,
            "operatingSystem": "linux",
            "architecture": arch(),
            "containerRuntimeVersion": concat!("steward-node://", env!("CARGO_PKG_VERSION")),
            "kernelVersion": read_trim("/proc/sys/kernel/osrelease"),
            "osImage": os_image(),
            "machineID": read_trim("/etc/machine-id"),
            "systemUUID": read_trim("/etc/machine-id"),
            "bootID": read_trim("/proc/sys/kernel/random/boot_id"),
        },
    })
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// Creates the Node or updates its labels, then writes its status.
pub async fn register(client: &Client, cfg: &NodeConfig, status: Value) -> Result<(), NodeError> {
    let api: Api<Node> = Api::all(client.clone());
    let labels = labels(cfg);
    match api
        .get_opt(&cfg.name)
        .await
        .map_err(NodeError::kube("reading the Node"))?
    {
        None => {
            let node = Node {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    labels: Some(labels),
                    ..Default::default()
                },
                ..Default::default()
            };
            api.create(
                &PostParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..Default::default()
                },
                &node,
            )
            .await
            .map_err(NodeError::kube("creating the Node"))?;
        }
        Some(_) => {
            api.patch(
                &cfg.name,
                &params(),
                &Patch::Merge(json!({"metadata": {"labels": labels}})),
            )
            .await
            .map_err(NodeError::kube("labelling the Node"))?;
        }
    }
    write_status(client, &cfg.name, status).await
}

/// Writes the Node status (heartbeat).
pub async fn write_status(client: &Client, name: &str, status: Value) -> Result<(), NodeError> {
    let api: Api<Node> = Api::all(client.clone());
    api.patch_status(name, &params(), &Patch::Merge(json!({"status": status})))
        .await
        .map_err(NodeError::kube("writing the Node status"))?;
    Ok(())
}
