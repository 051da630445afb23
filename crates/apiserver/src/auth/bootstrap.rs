//! The default ClusterRoles and ClusterRoleBindings a real server creates at start (a subset):
//! `cluster-admin` (bound to `system:masters`), the aggregated user-facing roles `admin`,
//! `edit` and `view` with the `system:aggregate-to-*` roles they gather, `system:basic-user`
//! (self reviews), `system:discovery` and `system:public-info-viewer`; and, as the embedded
//! server also plays metrics-server, the role metrics-server's manifest installs,
//! `system:aggregated-metrics-reader` (read `metrics.k8s.io`, aggregated into `admin`, `edit`
//! and `view`). Missing ones are created at start; existing ones (from a snapshot, or edited by
//! a user) are left alone.

use serde_json::{Value, json};

use super::index::RBAC_GROUP;
use crate::meta;
use crate::registry::GroupResource;
use crate::store::{EventType, State};

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn urls(paths: &[&str]) -> Value {
    json!({"nonResourceURLs": paths, "verbs": ["get"]})
}

const READ: [&str; 3] = ["get", "list", "watch"];
const WRITE: [&str; 6] = [
    "create",
    "delete",
    "deletecollection",
    "patch",
    "update",
    "get",
];

fn cluster_role(name: &str, labels: Value, rules: Vec<Value>, aggregate: Option<&str>) -> Value {
    let mut labels = labels;
    labels["kubernetes.io/bootstrapping"] = json!("rbac-defaults");
    let mut role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels,
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "rules": rules,
    });
    if let Some(to) = aggregate {
        role["aggregationRule"] = json!({"clusterRoleSelectors": [
            {"matchLabels": {format!("rbac.authorization.k8s.io/aggregate-to-{to}"): "true"}}]});
    }
    role
}

fn binding(name: &str, role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"apiGroup": RBAC_GROUP, "kind": "Group", "name": g}))
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    })
}

pub fn cluster_roles() -> Vec<Value> {
    let to = |names: &[&str]| {
        let mut m = json!({});
        for n in names {
            m[format!("rbac.authorization.k8s.io/aggregate-to-{n}")] = json!("true");
        }
        m
    };
    let core_read = [
        "configmaps",
        "endpoints",
        "persistentvolumeclaims",
        "persistentvolumeclaims/status",
        "pods",
        "pods/log",
        "pods/status",
        "services",
        "services/status",
        "serviceaccounts",
        "events",
        "namespaces",
        "namespaces/status",
    ];
    let core_write = [
        "configmaps",
        "endpoints",
        "persistentvolumeclaims",
        "pods",
        "pods/attach",
        "pods/exec",
        "pods/portforward",
        "secrets",
        "services",
        "serviceaccounts",
    ];
    let apps = [
        "deployments",
        "statefulsets",
        "replicasets",
        "daemonsets",
        "deployments/scale",
        "statefulsets/scale",
        "replicasets/scale",
    ];
    vec![
        cluster_role(
            "cluster-admin",
            json!({}),
            vec![
                rule(&["*"], &["*"], &["*"]),
                json!({"nonResourceURLs": ["*"], "verbs": ["*"]}),
            ],
            None,
        ),
        cluster_role("admin", json!({}), vec![], Some("admin")),
        cluster_role("edit", to(&["admin"]), vec![], Some("edit")),
        cluster_role("view", to(&["admin", "edit"]), vec![], Some("view")),
        cluster_role(
            "system:aggregate-to-admin",
            to(&["admin"]),
            vec![
                rule(
                    &[RBAC_GROUP],
                    &["roles", "rolebindings"],
                    &[
                        "create",
                        "delete",
                        "deletecollection",
                        "get",
                        "list",
                        "patch",
                        "update",
                        "watch",
                    ],
                ),
                rule(
                    &["authorization.k8s.io"],
                    &["localsubjectaccessreviews"],
                    &["create"],
                ),
            ],
            None,
        ),
        cluster_role(
            "system:aggregate-to-edit",
            to(&["edit"]),
            vec![
                rule(&[""], &core_write, &WRITE),
                rule(&[""], &["secrets"], &READ),
                rule(&["apps"], &apps, &WRITE),
                rule(&["batch"], &["jobs", "cronjobs"], &WRITE),
                rule(&["policy"], &["poddisruptionbudgets"], &WRITE),
                rule(&["coordination.k8s.io"], &["leases"], &WRITE),
            ],
            None,
        ),
        cluster_role(
            "system:aggregate-to-view",
            to(&["view"]),
            vec![
                rule(&[""], &core_read, &READ),
                rule(&["apps"], &apps, &READ),
                rule(
                    &["batch"],
                    &["jobs", "cronjobs", "jobs/status", "cronjobs/status"],
                    &READ,
                ),
                rule(
                    &["policy"],
                    &["poddisruptionbudgets", "poddisruptionbudgets/status"],
                    &READ,
                ),
                rule(&["discovery.k8s.io"], &["endpointslices"], &READ),
                rule(&["events.k8s.io"], &["events"], &READ),
            ],
            None,
        ),
        // metrics-server's own (its manifest's labels: not a bootstrapping default).
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "system:aggregated-metrics-reader", "labels": {
                "k8s-app": "metrics-server",
                "rbac.authorization.k8s.io/aggregate-to-admin": "true",
                "rbac.authorization.k8s.io/aggregate-to-edit": "true",
                "rbac.authorization.k8s.io/aggregate-to-view": "true"}},
            "rules": [rule(&["metrics.k8s.io"], &["pods", "nodes"], &READ)],
        }),
        cluster_role(
            "system:basic-user",
            json!({}),
            vec![
                rule(
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    &["create"],
                ),
                rule(
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                    &["create"],
                ),
            ],
            None,
        ),
        cluster_role(
            "system:discovery",
            json!({}),
            vec![urls(&[
                "/api",
                "/api/*",
                "/apis",
                "/apis/*",
                "/healthz",
                "/livez",
                "/openapi",
                "/openapi/*",
                "/readyz",
                "/version",
                "/version/",
            ])],
            None,
        ),
        cluster_role(
            "system:public-info-viewer",
            json!({}),
            vec![urls(&[
                "/healthz",
                "/livez",
                "/readyz",
                "/version",
                "/version/",
            ])],
            None,
        ),
    ]
}

pub fn cluster_role_bindings() -> Vec<Value> {
    vec![
        binding("cluster-admin", "cluster-admin", &[super::MASTERS]),
        binding(
            "system:basic-user",
            "system:basic-user",
            &["system:authenticated"],
        ),
        binding(
            "system:discovery",
            "system:discovery",
            &["system:authenticated"],
        ),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
    ]
}

/// The binding `ServerConfig::anonymous_cluster_admin` adds.
pub const ANONYMOUS_ADMIN: &str = "steward:anonymous-cluster-admin";

fn anonymous_admin() -> Value {
    let mut b = binding(ANONYMOUS_ADMIN, "cluster-admin", &[]);
    b["subjects"] = json!([{"apiGroup": RBAC_GROUP, "kind": "User", "name": "system:anonymous"}]);
    b
}

/// Creates the missing default roles and bindings, and adds or removes the anonymous admin
/// binding as configured.
pub fn ensure(state: &mut State, anonymous_cluster_admin: bool) {
    let bindings_gr = GroupResource::new(RBAC_GROUP, "clusterrolebindings");
    let mut bindings = cluster_role_bindings();
    if anonymous_cluster_admin {
        bindings.push(anonymous_admin());
    } else if let Some(old) = state.get(&bindings_gr, "", ANONYMOUS_ADMIN).cloned() {
        state.remove(&bindings_gr, old);
    }
    let sets = [
        (
            GroupResource::new(RBAC_GROUP, "clusterroles"),
            cluster_roles(),
        ),
        (bindings_gr, bindings),
    ];
    for (gr, objects) in sets {
        for mut obj in objects {
            let name = meta::name(&obj).unwrap_or_default().to_string();
            if state.get(&gr, "", &name).is_some() {
                continue;
            }
            let m = meta::meta_mut(&mut obj);
            m.insert("uid".into(), json!(meta::new_uid()));
            m.insert("creationTimestamp".into(), json!(meta::now()));
            state.put(&gr, obj, EventType::Added);
        }
    }
}
