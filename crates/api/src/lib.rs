//! Steward's custom resource types, API group `steward.dev`, version `v1alpha1`.
//!
//! This crate holds CRD structs only: serde, schemars and the kube derive. No client, no runtime.
//! Field documentation becomes the CRD's descriptions, so it is written for users.
#![forbid(unsafe_code)]

pub mod common;
pub mod cratedb;
pub mod etcd;
pub mod foundationdb;
pub mod pgbackrest;
pub mod pgupgrade;
pub mod policy;
pub mod postgres;
pub mod schedule;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
    ValidationRule,
};
use kube::CustomResourceExt;

/// The API group of every Steward kind.
pub const GROUP: &str = "steward.dev";
/// The served and stored version of every Steward kind.
pub const VERSION: &str = "v1alpha1";

/// Every CRD Steward serves, in a stable order (the order of `deploy/crds/steward.dev.yaml`).
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![
        etcd::EtcdCluster::crd(),
        etcd::EtcdPeer::crd(),
        etcd::EtcdBackup::crd(),
        postgres::PostgresCluster::crd(),
        pgbackrest::PostgresBackup::crd(),
        pgbackrest::PostgresRestore::crd(),
        pgupgrade::PostgresUpgrade::crd(),
        schedule::Schedule::crd(),
        policy::PostgresPolicy::crd(),
        cratedb::CrateCluster::crd(),
        foundationdb::FoundationDBCluster::crd(),
        foundationdb::FoundationDBBackup::crd(),
        foundationdb::FoundationDBRestore::crd(),
    ];
    for crd in &mut crds {
        let root_rules = root_rules(&crd.spec.names.kind);
        for version in &mut crd.spec.versions {
            if let Some(schema) = version
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut())
                && !root_rules.is_empty()
            {
                schema
                    .x_kubernetes_validations
                    .get_or_insert_with(Vec::new)
                    .extend(root_rules.iter().cloned());
            }
        }
        for version in &mut crd.spec.versions {
            if let Some(schema) = version
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut())
            {
                known_formats(schema);
            }
        }
    }
    crds
}

/// Rules on a whole object (they see its spec and its stored status, which a rule on the spec
/// cannot): `PostgresCluster.spec.version` changes only to the version of the `PostgresUpgrade`
/// the cluster's status says runs (the operator writes it at the upgrade's end).
fn root_rules(kind: &str) -> Vec<ValidationRule> {
    match kind {
        "PostgresCluster" => vec![ValidationRule {
            rule: "self.spec.version == oldSelf.spec.version \
                   || int(self.spec.version) == int(oldSelf.spec.version) \
                   || (has(oldSelf.status) && has(oldSelf.status.upgrade) \
                       && self.spec.version == oldSelf.status.upgrade.toVersion)"
                .to_owned(),
            message: Some(
                "spec.version is the PostgreSQL major version: it changes through a PostgresUpgrade (pg_upgrade), not by editing the cluster"
                    .to_owned(),
            ),
            field_path: Some(".spec.version".to_owned()),
            ..ValidationRule::default()
        }],
        _ => Vec::new(),
    }
}

/// The integer formats a Kubernetes API server knows are `int32` and `int64` (it warns
/// `unrecognized format` on any other, on every apply of the CRD). schemars writes `uint32` and
/// `uint64` for unsigned fields, with `minimum: 0`: a `uint32` becomes `int64` (every value
/// fits), a `uint64` loses its format (the minimum stays).
fn known_formats(schema: &mut JSONSchemaProps) {
    schema.format = match schema.format.take().as_deref() {
        Some("uint32") => Some("int64".to_owned()),
        Some("uint64" | "uint" | "uint8" | "uint16" | "int8" | "int16") => None,
        other => other.map(str::to_owned),
    };
    let children = schema
        .properties
        .iter_mut()
        .flat_map(|p| p.values_mut())
        .chain(schema.items.iter_mut().flat_map(|i| match i {
            JSONSchemaPropsOrArray::Schema(s) => std::slice::from_mut(s.as_mut()),
            JSONSchemaPropsOrArray::Schemas(v) => v.as_mut_slice(),
        }))
        .chain(
            schema
                .additional_properties
                .iter_mut()
                .filter_map(|a| match a {
                    JSONSchemaPropsOrBool::Schema(s) => Some(s.as_mut()),
                    JSONSchemaPropsOrBool::Bool(_) => None,
                }),
        )
        .chain(schema.all_of.iter_mut().flatten())
        .chain(schema.any_of.iter_mut().flatten())
        .chain(schema.one_of.iter_mut().flatten())
        .chain(schema.not.iter_mut().map(|n| n.as_mut()));
    for child in children {
        known_formats(child);
    }
}
