//! The real kubectl against the embedded server's workload controllers: `rollout status` on a
//! Deployment and a StatefulSet. kubectl is `$KUBECTL`, else the CI venv's
//! (`$HOME/.cache/steward-ci/kubectl-venv/bin/kubectl`). No kubelet runs here, so a background
//! task plays it, marking every Pod Running and Ready.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Config};
use serde_json::{Value, json};
use steward_apiserver::{ApiServerHandle, ServerConfig, start};

pub fn kubectl_bin() -> PathBuf {
    match std::env::var("KUBECTL") {
        Ok(k) if !k.is_empty() => k.into(),
        _ => PathBuf::from(std::env::var("HOME").unwrap_or_default())
            .join(".cache/steward-ci/kubectl-venv/bin/kubectl"),
    }
}

pub struct Plane {
    pub client: Client,
    pub server: ApiServerHandle,
    kubeconfig: tempfile_path::Path,
}

mod tempfile_path {
    /// A kubeconfig file removed on drop.
    pub struct Path(pub std::path::PathBuf);
    impl Drop for Path {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

pub async fn plane() -> Plane {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = start(ServerConfig::default()).await.unwrap();
    let client = Client::try_from(Config::new(server.url().parse().unwrap())).unwrap();
    let path = std::env::temp_dir().join(format!(
        "steward-kubectl-{}-{}.yaml",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::write(&path, server.kubeconfig_yaml()).unwrap();
    Plane {
        client,
        server,
        kubeconfig: tempfile_path::Path(path),
    }
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

impl Plane {
    pub async fn kubectl(&self, args: &[&str]) -> Output {
        let bin = kubectl_bin();
        tokio::process::Command::new(&bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig.0)
            .args(args)
            .output()
            .await
            .unwrap_or_else(|e| panic!("running {} (set KUBECTL): {e}", bin.display()))
    }

    /// Plays the kubelet until dropped: every Pod that is not Ready becomes Running and Ready.
    pub fn kubelet(&self) -> tokio::task::JoinHandle<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "default");
        tokio::spawn(async move {
            loop {
                for p in pods
                    .list(&ListParams::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default()
                {
                    let ready = p
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        });
                    if !ready && p.metadata.deletion_timestamp.is_none() {
                        let _ = pods.patch_status(p.metadata.name.as_deref().unwrap_or_default(), &PatchParams::default(),
                            &Patch::Merge(json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}))).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }
}

pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn template(app: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}}, "spec": {"terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
}

#[tokio::test]
async fn rollout_status_completes_for_deployments_and_statefulsets() {
    let plane = plane().await;
    let kubelet = plane.kubelet();
    let deployments: Api<Deployment> = Api::namespaced(plane.client.clone(), "default");
    let d: Deployment =
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"replicas": 3,
        "selector": {"matchLabels": {"app": "web"}}, "template": template("web")}}))
        .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let out = plane
        .kubectl(&["rollout", "status", "deployment/web", "--timeout=30s"])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("deployment \"web\" successfully rolled out"),
        "{}",
        text(&out)
    );
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {"v": "2"}}}}})),
        )
        .await
        .unwrap();
    let out = plane
        .kubectl(&["rollout", "status", "deployment/web", "--timeout=30s"])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    let out = plane
        .kubectl(&["rollout", "history", "deployment/web"])
        .await;
    assert!(text(&out).contains('2'), "{}", text(&out));

    let sets: Api<StatefulSet> = Api::namespaced(plane.client.clone(), "default");
    let s: StatefulSet = serde_json::from_value(json!({"metadata": {"name": "db"}, "spec": {"replicas": 3,
        "serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": template("db")}})).unwrap();
    sets.create(&PostParams::default(), &s).await.unwrap();
    let out = plane
        .kubectl(&["rollout", "status", "statefulset/db", "--timeout=30s"])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("partitioned roll out complete")
            || text(&out).contains("rolling update complete"),
        "{}",
        text(&out)
    );
    kubelet.abort();
    plane.server.shutdown().await;
}
