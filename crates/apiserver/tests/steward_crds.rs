//! Steward's own CRDs on the embedded server: every `x-kubernetes-validations` rule they carry
//! compiles, and the rules hold as on a real cluster (immutable major version, storage class,
//! peer identity; instance-storage ordinals below `instances` and unique), while valid updates
//! and status writes go through. The shipped `deploy/crds/steward.dev.yaml` is accepted as it
//! is, its rules within upstream's estimated cost budgets.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Config};
use serde_json::{Value, json};
use steward_api::etcd::{EtcdCluster, EtcdPeer};
use steward_api::postgres::PostgresCluster;
use steward_apiserver::{ApiServerHandle, ServerConfig};

async fn empty_server() -> (ApiServerHandle, Client) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = steward_apiserver::start(ServerConfig::default())
        .await
        .unwrap();
    let mut config = Config::new(server.url().parse().unwrap());
    config.auth_info.token = Some(server.admin_token().into());
    let client = Client::try_from(config).unwrap();
    (server, client)
}

async fn server() -> (ApiServerHandle, Client) {
    let (server, client) = empty_server().await;
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in steward_api::crds() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    (server, client)
}

fn refusal<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> String {
    match r {
        Err(kube::Error::Api(s)) if s.code == 422 => s.message,
        other => panic!("expected 422 Invalid, got {other:?}"),
    }
}

fn merge(spec: Value) -> Patch<Value> {
    Patch::Merge(json!({"spec": spec}))
}

/// The file the operator's users apply (and the operator installs at start-up) is accepted:
/// every rule compiles and stays within the per-rule and per-schema cost budgets.
#[tokio::test]
async fn the_shipped_crd_file_is_accepted() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/crds/steward.dev.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let (server, client) = empty_server().await;
    let api = Api::<CustomResourceDefinition>::all(client);
    let mut created = 0;
    for doc in text.split("\n---\n") {
        let doc = doc.trim_start_matches("---\n");
        if doc.trim().is_empty() {
            continue;
        }
        let crd: CustomResourceDefinition = serde_saphyr::from_str(doc).unwrap();
        let name = crd.metadata.name.clone().unwrap_or_default();
        if let Err(e) = api.create(&PostParams::default(), &crd).await {
            panic!("{name} refused: {e}");
        }
        created += 1;
    }
    assert_eq!(created, steward_api::crds().len());
    server.shutdown().await;
}

#[tokio::test]
async fn postgres_cluster_rules_hold() {
    let (server, client) = server().await;
    let api: Api<PostgresCluster> = Api::namespaced(client, "default");
    let pp = PatchParams::default();
    let cluster: PostgresCluster = serde_json::from_value(json!({
        "apiVersion": "steward.dev/v1alpha1", "kind": "PostgresCluster",
        "metadata": {"name": "db"},
        "spec": {"version": "15", "instances": 3, "storage": {"storageClassName": "fast"},
            "instanceStorage": [{"ordinal": 2, "storage": {"size": "5Gi"}}]}}))
    .unwrap();
    api.create(&PostParams::default(), &cluster).await.unwrap();

    let msg = refusal(api.patch("db", &pp, &merge(json!({"version": "16"}))).await);
    // The rule is on the whole object (it lets the version change only to the toVersion of
    // the PostgresUpgrade the stored status says runs); the cause names spec.version.
    assert!(
        msg.contains(
            "spec.version: Invalid value: spec.version is the PostgreSQL major version: it changes through a PostgresUpgrade"
        ),
        "{msg}"
    );
    let msg = refusal(
        api.patch(
            "db",
            &pp,
            &merge(json!({"storage": {"storageClassName": "slow"}})),
        )
        .await,
    );
    assert!(
        msg.contains("storage.storageClassName is immutable"),
        "{msg}"
    );
    let msg = refusal(api.patch("db", &pp, &merge(json!({"instances": 2}))).await);
    assert!(
        msg.contains("instanceStorage ordinals must be between 0 and instances - 1"),
        "{msg}"
    );
    let twice = json!({"instanceStorage": [
        {"ordinal": 1, "storage": {"size": "5Gi"}}, {"ordinal": 1, "storage": {"size": "6Gi"}}]});
    let msg = refusal(api.patch("db", &pp, &merge(twice)).await);
    assert!(
        msg.contains("instanceStorage lists an ordinal more than once"),
        "{msg}"
    );

    // A valid update goes through.
    let grown = api
        .patch("db", &pp, &merge(json!({"instances": 5, "paused": true})))
        .await
        .unwrap();
    assert_eq!(grown.spec.instances, 5);
    // Status writes are not blocked by the spec's transition rules.
    let status = Patch::Merge(json!({"status": {"readyInstances": 2, "replicas": 3}}));
    let written = api.patch_status("db", &pp, &status).await.unwrap();
    assert_eq!(written.status.unwrap().ready_instances, 2);
    server.shutdown().await;
}

#[tokio::test]
async fn etcd_rules_hold() {
    let (server, client) = server().await;
    let pp = PatchParams::default();
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), "default");
    let cluster: EtcdCluster = serde_json::from_value(json!({
        "apiVersion": "steward.dev/v1alpha1", "kind": "EtcdCluster", "metadata": {"name": "e"},
        "spec": {"replicas": 3, "version": "3.5.17", "storage": {"storageClassName": "fast"}}}))
    .unwrap();
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let msg = refusal(
        clusters
            .patch(
                "e",
                &pp,
                &merge(json!({"storage": {"storageClassName": null}})),
            )
            .await,
    );
    assert!(
        msg.contains("storage.storageClassName is immutable"),
        "{msg}"
    );
    clusters
        .patch("e", &pp, &merge(json!({"replicas": 5, "version": "3.6.0"})))
        .await
        .unwrap();

    let peers: Api<EtcdPeer> = Api::namespaced(client, "default");
    let peer: EtcdPeer = serde_json::from_value(json!({
        "apiVersion": "steward.dev/v1alpha1", "kind": "EtcdPeer", "metadata": {"name": "e-0"},
        "spec": {"clusterName": "e", "version": "3.5.17", "memberId": "8e9e05c52164694d",
            "bootstrap": {"initialCluster": [{"name": "e-0", "peerUrl": "http://e-0:2380"}],
                "initialClusterState": "new", "initialClusterToken": "uid-1"}}}))
    .unwrap();
    peers.create(&PostParams::default(), &peer).await.unwrap();
    for (change, message) in [
        (
            json!({"clusterName": "other"}),
            "spec.clusterName: Invalid value: \"other\": clusterName is immutable",
        ),
        (
            json!({"memberId": "1"}),
            "spec.memberId: Invalid value: \"1\": memberId is immutable",
        ),
        (
            json!({"bootstrap": {"initialClusterToken": "uid-2"}}),
            "spec.bootstrap.initialClusterToken: Invalid value: \"uid-2\": initialClusterToken is immutable",
        ),
    ] {
        let msg = refusal(peers.patch("e-0", &pp, &merge(change)).await);
        assert!(msg.contains(message), "{msg}");
    }
    // Fields that may change still do.
    let upgraded = peers
        .patch("e-0", &pp, &merge(json!({"version": "3.6.0"})))
        .await
        .unwrap();
    assert_eq!(upgraded.spec.version, "3.6.0");
    server.shutdown().await;
}
