//! What the real-kubectl tests share: the kubectl binary (`$KUBECTL`, else the CI venv's,
//! `$HOME/.cache/steward-ci/kubectl-venv/bin/kubectl`) and a fresh embedded server with a
//! kubeconfig, a kubectl cache and manifests in a directory of its own.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Output;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::{Api, Client, Config};
use steward_apiserver::{ApiServerHandle, ServerConfig, start};

pub fn kubectl_bin() -> PathBuf {
    match std::env::var("KUBECTL") {
        Ok(k) if !k.is_empty() => k.into(),
        _ => PathBuf::from(std::env::var("HOME").unwrap_or_default())
            .join(".cache/steward-ci/kubectl-venv/bin/kubectl"),
    }
}

/// A directory removed on drop (kubeconfig, kubectl's cache, manifests).
pub struct TempDir(pub PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct Plane {
    pub client: Client,
    pub server: ApiServerHandle,
    pub dir: TempDir,
}

/// A new server (with Steward's CRDs when `crds`) and its directory.
pub async fn plane(crds: bool) -> Plane {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // kubectl sends no token over plain HTTP: it is admin through the anonymous binding, as
    // with `steward dev`.
    let server = start(ServerConfig {
        anonymous_cluster_admin: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut config = Config::new(server.url().parse().unwrap());
    config.auth_info.token = Some(server.admin_token().into());
    let client = Client::try_from(config).unwrap();
    if crds {
        let api = Api::<CustomResourceDefinition>::all(client.clone());
        for crd in steward_api::crds() {
            api.create(&PostParams::default(), &crd).await.unwrap();
        }
    }
    let dir = std::env::temp_dir().join(format!(
        "steward-kubectl-{}-{}",
        std::process::id(),
        server.addr().port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("kubeconfig"), server.kubeconfig_yaml()).unwrap();
    Plane {
        client,
        server,
        dir: TempDir(dir),
    }
}

impl Plane {
    pub async fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_env(args, &[]).await
    }

    /// kubectl with extra environment variables (`KUBE_EDITOR` for `kubectl edit`).
    pub async fn kubectl_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let bin = kubectl_bin();
        tokio::process::Command::new(&bin)
            .envs(env.iter().copied())
            .arg("--kubeconfig")
            .arg(self.dir.0.join("kubeconfig"))
            // No cache shared between tests (each server is new, documents differ).
            .arg("--cache-dir")
            .arg(self.dir.0.join("cache"))
            .args(args)
            .output()
            .await
            .unwrap_or_else(|e| panic!("running {} (set KUBECTL): {e}", bin.display()))
    }

    /// Writes `content` to `name` in the plane's directory; returns its path.
    pub fn file(&self, name: &str, content: &str) -> String {
        let path = self.dir.0.join(name);
        std::fs::write(&path, content).unwrap();
        path.display().to_string()
    }
}
