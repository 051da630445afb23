//! kubectl against the embedded server's authentication and RBAC. kubectl (client-go) attaches
//! credentials only to TLS connections (kubernetes/kubectl#744), and this server speaks plain
//! HTTP: kubectl is always `system:anonymous` here, whatever token its kubeconfig holds. So
//! `steward dev` binds `cluster-admin` to `system:anonymous` (`anonymous_cluster_admin`) and
//! its kubeconfig works with kubectl, while on a default server kubectl gets what anonymous
//! gets. kubectl binary: `$KUBECTL`, else `$HOME/.cache/steward-ci/kubectl-venv/bin/kubectl`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use steward_apiserver::{ApiServerHandle, ServerConfig, kubeconfig_yaml, start};

#[path = "support/kubectl.rs"]
mod support;

/// Runs kubectl; returns (success, stdout, stderr).
fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let bin = support::kubectl_bin();
    let out = Command::new(&bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {} (set KUBECTL): {e}", bin.display()));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

fn client(server: &ApiServerHandle, token: &str) -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.auth_info.token = Some(token.to_string().into());
    Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dev_kubeconfig_is_admin_for_kubectl() {
    let server = start(ServerConfig {
        anonymous_cluster_admin: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile_dir();
    let kc = dir.join("kubeconfig");
    std::fs::write(&kc, server.kubeconfig_yaml()).unwrap();
    let (ok, out, err) = kubectl(
        &kc,
        &[
            "get",
            "clusterrolebinding",
            "steward:anonymous-cluster-admin",
            "-o",
            "jsonpath={.roleRef.name}",
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(out, "cluster-admin");
    let (ok, _, err) = kubectl(&kc, &["label", "namespace", "default", "by=kubectl"]);
    assert!(ok, "{err}");
    let (ok, out, err) = kubectl(
        &kc,
        &[
            "get",
            "ns",
            "default",
            "-o",
            "jsonpath={.metadata.labels.by}",
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(out, "kubectl");
    // kubectl 1.37 sends SelfSubjectAccessReview bodies as protobuf.
    let (ok, out, err) = kubectl(&kc, &["auth", "can-i", "delete", "nodes"]);
    assert!(ok, "{err}");
    assert_eq!(out, "yes");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sends_no_token_over_plain_http_so_it_is_anonymous() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = client(&server, &server.admin_token());
    let pp = PostParams::default();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    accounts
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap(),
        )
        .await
        .unwrap();
    Api::<Role>::namespaced(admin.clone(), "default")
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "robot"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]}))
            .unwrap(),
        )
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "robot"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "robot"},
            "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "default"}]}))
            .unwrap(),
        )
        .await
        .unwrap();
    let request: TokenRequest = serde_json::from_value(json!({"spec": {"audiences": []}})).unwrap();
    let token = accounts
        .create_token_request("robot", &pp, &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
        .unwrap();
    // kube-rs sends the token: the ServiceAccount may list Pods.
    let pods: Api<Pod> = Api::namespaced(client(&server, &token), "default");
    pods.list(&ListParams::default()).await.unwrap();
    let dir = tempfile_dir();
    let kc = dir.join("robot");
    std::fs::write(&kc, kubeconfig_yaml(&server.url(), &token)).unwrap();
    // (Anonymous may not read discovery either, so the request goes raw.)
    let (ok, _, err) = kubectl(&kc, &["get", "--raw", "/api/v1/namespaces/default/pods"]);
    assert!(!ok);
    assert!(
        err.contains("User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""),
        "{err}"
    );
    // Anonymous may not even ask: the review is refused before its body is read.
    let (ok, _, err) = kubectl(&kc, &["auth", "can-i", "list", "pods", "-n", "default"]);
    assert!(!ok);
    assert!(
        err.contains(
            "selfsubjectaccessreviews.authorization.k8s.io is forbidden: User \"system:anonymous\""
        ),
        "{err}"
    );
    // The public information stays public.
    let (ok, out, err) = kubectl(&kc, &["version", "-o", "json"]);
    assert!(ok, "{err}");
    assert!(out.contains("\"gitVersion\": \"v1.36.2+steward\""), "{out}");
    server.shutdown().await;
}

/// A fresh directory under the system temp dir.
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "steward-kubectl-auth-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}
