//! Steward's custom resource types, API group `steward.dev`, version `v1alpha1`.
//!
//! This crate holds CRD structs only: serde, schemars and the kube derive. No client, no runtime.
//! Field documentation becomes the CRD's descriptions, so it is written for users.
#![forbid(unsafe_code)]

pub mod common;
pub mod cratedb;
pub mod etcd;
pub mod pgbackrest;
pub mod policy;
pub mod postgres;
pub mod schedule;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The API group of every Steward kind.
pub const GROUP: &str = "steward.dev";
/// The served and stored version of every Steward kind.
pub const VERSION: &str = "v1alpha1";

/// Every CRD Steward serves, in a stable order (the order of `deploy/crds/steward.dev.yaml`).
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        etcd::EtcdCluster::crd(),
        etcd::EtcdPeer::crd(),
        postgres::PostgresCluster::crd(),
        pgbackrest::PostgresBackup::crd(),
        pgbackrest::PostgresRestore::crd(),
        schedule::Schedule::crd(),
        policy::PostgresPolicy::crd(),
        cratedb::CrateCluster::crd(),
    ]
}
