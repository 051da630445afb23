//! Schemas of the built-in kinds, generated from `k8s-openapi`'s `schemars` implementations
//! (the same Go-derived definitions the rest of the server uses), plus the vendor extensions
//! upstream's generator adds and `k8s-openapi` does not carry: `x-kubernetes-group-version-kind`
//! on kinds and the list markers (`x-kubernetes-patch-strategy`, `x-kubernetes-patch-merge-key`,
//! `x-kubernetes-list-type`, `x-kubernetes-list-map-keys`) of the fields listed in `LIST_MARKERS`,
//! copied from the Go types' `+patchStrategy`/`+listType` markers.

use k8s_openapi::api::{
    apps::v1 as apps, authentication::v1 as authn, authorization::v1 as authz,
    autoscaling::v1 as autoscaling, batch::v1 as batch, coordination::v1 as coordination,
    core::v1 as core, discovery::v1 as discovery, events::v1 as events, policy::v1 as policy,
    rbac::v1 as rbac, storage::v1 as storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value, json};

fn add<T: JsonSchema>(generator: &mut SchemaGenerator) -> String {
    generator.subschema_for::<T>();
    T::schema_name().into_owned()
}

/// Registers the schema of a built-in kind (and what it references) and returns its
/// component name, or `None` for a kind this table does not know.
pub fn register(
    generator: &mut SchemaGenerator,
    group: &str,
    version: &str,
    kind: &str,
) -> Option<String> {
    let g = generator;
    let name = match (group, version, kind) {
        ("", "v1", "Namespace") => add::<core::Namespace>(g),
        ("", "v1", "Pod") => add::<core::Pod>(g),
        ("", "v1", "Service") => add::<core::Service>(g),
        ("", "v1", "Endpoints") => add::<core::Endpoints>(g),
        ("", "v1", "PersistentVolumeClaim") => add::<core::PersistentVolumeClaim>(g),
        ("", "v1", "PersistentVolume") => add::<core::PersistentVolume>(g),
        ("", "v1", "Secret") => add::<core::Secret>(g),
        ("", "v1", "ConfigMap") => add::<core::ConfigMap>(g),
        ("", "v1", "ServiceAccount") => add::<core::ServiceAccount>(g),
        ("", "v1", "Node") => add::<core::Node>(g),
        ("", "v1", "Event") => add::<core::Event>(g),
        ("", "v1", "Binding") => add::<core::Binding>(g),
        ("events.k8s.io", "v1", "Event") => add::<events::Event>(g),
        ("coordination.k8s.io", "v1", "Lease") => add::<coordination::Lease>(g),
        ("rbac.authorization.k8s.io", "v1", "Role") => add::<rbac::Role>(g),
        ("rbac.authorization.k8s.io", "v1", "RoleBinding") => add::<rbac::RoleBinding>(g),
        ("rbac.authorization.k8s.io", "v1", "ClusterRole") => add::<rbac::ClusterRole>(g),
        ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding") => {
            add::<rbac::ClusterRoleBinding>(g)
        }
        ("batch", "v1", "Job") => add::<batch::Job>(g),
        ("batch", "v1", "CronJob") => add::<batch::CronJob>(g),
        ("policy", "v1", "PodDisruptionBudget") => add::<policy::PodDisruptionBudget>(g),
        ("policy", "v1", "Eviction") => add::<policy::Eviction>(g),
        ("discovery.k8s.io", "v1", "EndpointSlice") => add::<discovery::EndpointSlice>(g),
        ("storage.k8s.io", "v1", "StorageClass") => add::<storage::StorageClass>(g),
        ("apps", "v1", "Deployment") => add::<apps::Deployment>(g),
        ("apps", "v1", "StatefulSet") => add::<apps::StatefulSet>(g),
        ("apps", "v1", "ReplicaSet") => add::<apps::ReplicaSet>(g),
        ("apps", "v1", "DaemonSet") => add::<apps::DaemonSet>(g),
        ("apps", "v1", "ControllerRevision") => add::<apps::ControllerRevision>(g),
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition") => {
            add::<apiextensions::CustomResourceDefinition>(g)
        }
        ("autoscaling", "v1", "Scale") => add::<autoscaling::Scale>(g),
        ("authentication.k8s.io", "v1", "TokenRequest") => add::<authn::TokenRequest>(g),
        ("authentication.k8s.io", "v1", "SelfSubjectReview") => add::<authn::SelfSubjectReview>(g),
        ("authorization.k8s.io", "v1", "SelfSubjectAccessReview") => {
            add::<authz::SelfSubjectAccessReview>(g)
        }
        ("authorization.k8s.io", "v1", "SubjectAccessReview") => {
            add::<authz::SubjectAccessReview>(g)
        }
        ("authorization.k8s.io", "v1", "LocalSubjectAccessReview") => {
            add::<authz::LocalSubjectAccessReview>(g)
        }
        _ => return None,
    };
    Some(name)
}

/// The apimachinery types every group-version document refers to.
pub fn register_meta(generator: &mut SchemaGenerator) {
    add::<meta::ObjectMeta>(generator);
    add::<meta::ListMeta>(generator);
    add::<meta::DeleteOptions>(generator);
    add::<meta::Status>(generator);
    add::<meta::Patch>(generator);
    add::<meta::WatchEvent<Value>>(generator);
}

pub const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
pub const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
pub const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
pub const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
pub const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";

/// Map list: patch strategy `merge` with the merge key, list type `map` with the keys.
const fn map(merge_key: &'static str, keys: &'static [&'static str]) -> Marker {
    Marker {
        strategy: Some("merge"),
        merge_key: Some(merge_key),
        list_type: Some("map"),
        keys,
    }
}

#[derive(Clone, Copy)]
struct Marker {
    strategy: Option<&'static str>,
    merge_key: Option<&'static str>,
    list_type: Option<&'static str>,
    keys: &'static [&'static str],
}

const SET_MERGE: Marker = Marker {
    strategy: Some("merge"),
    merge_key: None,
    list_type: Some("set"),
    keys: &[],
};
const ATOMIC: Marker = Marker {
    strategy: None,
    merge_key: None,
    list_type: Some("atomic"),
    keys: &[],
};
const MERGE_ATOMIC_BY_TYPE: Marker = Marker {
    strategy: Some("merge"),
    merge_key: Some("type"),
    list_type: Some("atomic"),
    keys: &[],
};

/// (component, property, markers), as the upstream Go types declare them.
const LIST_MARKERS: &[(&str, &str, Marker)] = &[
    (
        "io.k8s.api.core.v1.PodSpec",
        "containers",
        map("name", &["name"]),
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "initContainers",
        map("name", &["name"]),
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "ephemeralContainers",
        map("name", &["name"]),
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "imagePullSecrets",
        map("name", &["name"]),
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "hostAliases",
        map("ip", &["ip"]),
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "schedulingGates",
        map("name", &["name"]),
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "topologySpreadConstraints",
        map("topologyKey", &["topologyKey", "whenUnsatisfiable"]),
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "volumes",
        Marker {
            strategy: Some("merge,retainKeys"),
            ..map("name", &["name"])
        },
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "resourceClaims",
        Marker {
            strategy: Some("merge,retainKeys"),
            ..map("name", &["name"])
        },
    ),
    (
        "io.k8s.api.core.v1.Container",
        "env",
        map("name", &["name"]),
    ),
    (
        "io.k8s.api.core.v1.Container",
        "ports",
        map("containerPort", &["containerPort", "protocol"]),
    ),
    (
        "io.k8s.api.core.v1.Container",
        "volumeMounts",
        map("mountPath", &["mountPath"]),
    ),
    (
        "io.k8s.api.core.v1.Container",
        "volumeDevices",
        map("devicePath", &["devicePath"]),
    ),
    ("io.k8s.api.core.v1.Container", "envFrom", ATOMIC),
    ("io.k8s.api.core.v1.Container", "resizePolicy", ATOMIC),
    (
        "io.k8s.api.core.v1.EphemeralContainer",
        "env",
        map("name", &["name"]),
    ),
    (
        "io.k8s.api.core.v1.EphemeralContainer",
        "volumeMounts",
        map("mountPath", &["mountPath"]),
    ),
    (
        "io.k8s.api.core.v1.ServiceSpec",
        "ports",
        map("port", &["port", "protocol"]),
    ),
    (
        "io.k8s.api.core.v1.PodStatus",
        "conditions",
        map("type", &["type"]),
    ),
    ("io.k8s.api.core.v1.PodStatus", "podIPs", map("ip", &["ip"])),
    (
        "io.k8s.api.core.v1.NodeStatus",
        "conditions",
        map("type", &["type"]),
    ),
    (
        "io.k8s.api.core.v1.NodeStatus",
        "addresses",
        map("type", &["type"]),
    ),
    (
        "io.k8s.api.core.v1.PersistentVolumeClaimStatus",
        "conditions",
        map("type", &["type"]),
    ),
    (
        "io.k8s.api.core.v1.NamespaceStatus",
        "conditions",
        map("type", &["type"]),
    ),
    ("io.k8s.api.core.v1.NamespaceSpec", "finalizers", ATOMIC),
    (
        "io.k8s.api.apps.v1.DeploymentStatus",
        "conditions",
        map("type", &["type"]),
    ),
    (
        "io.k8s.api.apps.v1.StatefulSetStatus",
        "conditions",
        map("type", &["type"]),
    ),
    (
        "io.k8s.api.apps.v1.ReplicaSetStatus",
        "conditions",
        map("type", &["type"]),
    ),
    (
        "io.k8s.api.apps.v1.DaemonSetStatus",
        "conditions",
        map("type", &["type"]),
    ),
    (
        "io.k8s.api.batch.v1.JobStatus",
        "conditions",
        MERGE_ATOMIC_BY_TYPE,
    ),
    (
        "io.k8s.api.policy.v1.PodDisruptionBudgetStatus",
        "conditions",
        map("type", &["type"]),
    ),
    (
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "finalizers",
        SET_MERGE,
    ),
    (
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "ownerReferences",
        map("uid", &["uid"]),
    ),
    (
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "managedFields",
        ATOMIC,
    ),
];

/// Adds the list markers of `LIST_MARKERS` to the generated components.
pub fn add_list_markers(schemas: &mut Map<String, Value>) {
    for (component, property, marker) in LIST_MARKERS {
        let Some(prop) = schemas
            .get_mut(*component)
            .and_then(|s| s.get_mut("properties"))
            .and_then(|p| p.get_mut(*property))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        if let Some(s) = marker.strategy {
            prop.insert("x-kubernetes-patch-strategy".into(), json!(s));
        }
        if let Some(k) = marker.merge_key {
            prop.insert("x-kubernetes-patch-merge-key".into(), json!(k));
        }
        if let Some(t) = marker.list_type {
            prop.insert("x-kubernetes-list-type".into(), json!(t));
        }
        if !marker.keys.is_empty() {
            prop.insert("x-kubernetes-list-map-keys".into(), json!(marker.keys));
        }
    }
}
