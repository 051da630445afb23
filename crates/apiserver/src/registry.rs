//! The table of resource kinds the server knows: built-in kinds (fixed at start) and the kinds
//! registered from CustomResourceDefinitions. Lookups go by (group, version, plural) for URL
//! routing and by (group, resource) for storage. This module only describes kinds; it holds no
//! objects and performs no validation.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

/// Storage identity of a resource: objects of every served version share it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    pub fn new(group: &str, resource: &str) -> Self {
        Self {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }

    /// `pods` or `leases.coordination.k8s.io`, as the real server prints it in messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

/// How object names are validated for a kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain (most kinds).
    Subdomain,
    /// RFC 1123 label (Namespaces, Services).
    Label,
    /// Anything that is a valid path segment (RBAC kinds: `system:controller:x`).
    PathSegment,
}

/// What happens to `status` in a create request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusOnCreate {
    Keep,
    Drop,
}

/// The `scale` subresource mapping (CRDs and apps kinds).
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleDef {
    pub spec_replicas_path: String,
    pub status_replicas_path: String,
    pub label_selector_path: Option<String>,
}

#[derive(Clone, Debug)]
pub struct ResourceDef {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub list_kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub status_subresource: bool,
    pub scale: Option<ScaleDef>,
    /// Whether `metadata.generation` is maintained.
    pub generation: bool,
    pub name_rule: NameRule,
    pub status_on_create: StatusOnCreate,
    /// Extra subresources listed in discovery: (name, kind, verbs).
    pub extra_subresources: Vec<(&'static str, &'static str, &'static [&'static str])>,
    /// Version objects are stored in (differs from `version` only for multi-version CRDs).
    pub storage_version: String,
    /// `openAPIV3Schema` of this version (CRDs only).
    pub schema: Option<Arc<Value>>,
    /// The compiled `x-kubernetes-validations` of `schema` (CRDs with rules only).
    pub validations: Option<Arc<crate::cel::Validations>>,
    /// Name of the CRD that registered this kind.
    pub crd: Option<String>,
    /// Extra field selectors (CRD `selectableFields`, JSON paths without the leading dot).
    pub selectable_fields: Vec<String>,
    /// CRD `additionalPrinterColumns` (name, type, jsonPath, priority), for Table output.
    pub printer_columns: Vec<Value>,
    /// Another resource whose storage this one shares, converting on the way (events.k8s.io
    /// Events are stored as core/v1 Events; see `convert`).
    pub storage_gr: Option<GroupResource>,
}

impl ResourceDef {
    /// Where objects of this kind are stored (and watched).
    pub fn gr(&self) -> GroupResource {
        match &self.storage_gr {
            Some(gr) => gr.clone(),
            None => GroupResource::new(&self.group, &self.plural),
        }
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn storage_api_version(&self) -> String {
        if self.group.is_empty() {
            self.storage_version.clone()
        } else {
            format!("{}/{}", self.group, self.storage_version)
        }
    }

    pub fn is_custom(&self) -> bool {
        self.crd.is_some()
    }
}

/// Builder for built-in rows.
#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    short: &[&str],
    status: bool,
    generation: bool,
) -> ResourceDef {
    ResourceDef {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        list_kind: format!("{kind}List"),
        namespaced,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: Vec::new(),
        status_subresource: status,
        scale: None,
        generation,
        name_rule: NameRule::Subdomain,
        status_on_create: if status {
            StatusOnCreate::Drop
        } else {
            StatusOnCreate::Keep
        },
        extra_subresources: Vec::new(),
        storage_version: version.into(),
        schema: None,
        validations: None,
        crd: None,
        selectable_fields: Vec::new(),
        printer_columns: Vec::new(),
        storage_gr: None,
    }
}

fn apps_scale() -> Option<ScaleDef> {
    Some(ScaleDef {
        spec_replicas_path: ".spec.replicas".into(),
        status_replicas_path: ".status.replicas".into(),
        label_selector_path: Some(".status.selector".into()),
    })
}

/// Every built-in kind. Kinds marked "stored only" in the docs have no controller here.
pub fn builtin_kinds() -> Vec<ResourceDef> {
    let all = |mut d: ResourceDef| {
        d.categories = vec!["all".into()];
        d
    };
    let mut ns = builtin(
        "",
        "v1",
        "Namespace",
        "namespaces",
        false,
        &["ns"],
        true,
        false,
    );
    ns.name_rule = NameRule::Label;
    ns.status_on_create = StatusOnCreate::Drop;
    ns.extra_subresources = vec![("finalize", "Namespace", &["update"])];
    let mut service_account = builtin(
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        true,
        &["sa"],
        false,
        false,
    );
    service_account.extra_subresources = vec![("token", "TokenRequest", &["create"])];
    let mut pod = all(builtin("", "v1", "Pod", "pods", true, &["po"], true, false));
    pod.extra_subresources = vec![
        ("attach", "PodAttachOptions", &["create", "get"]),
        ("binding", "Binding", &["create"]),
        ("eviction", "Eviction", &["create"]),
        ("exec", "PodExecOptions", &["create", "get"]),
        ("log", "Pod", &["get"]),
    ];
    let mut svc = all(builtin(
        "",
        "v1",
        "Service",
        "services",
        true,
        &["svc"],
        true,
        false,
    ));
    svc.name_rule = NameRule::Label;
    let mut node = builtin("", "v1", "Node", "nodes", false, &["no"], true, false);
    node.status_on_create = StatusOnCreate::Keep;
    let rbac = |kind: &str, plural: &str, namespaced: bool| {
        let mut d = builtin(
            "rbac.authorization.k8s.io",
            "v1",
            kind,
            plural,
            namespaced,
            &[],
            false,
            false,
        );
        d.name_rule = NameRule::PathSegment;
        d
    };
    let apps = |kind: &str, plural: &str, short: &[&str], scale: bool| {
        let mut d = all(builtin("apps", "v1", kind, plural, true, short, true, true));
        if scale {
            d.scale = apps_scale();
        }
        d
    };
    let mut crd = builtin(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
        &["crd", "crds"],
        true,
        true,
    );
    crd.categories = vec!["api-extensions".into()];
    let mut events = builtin(
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        true,
        &["ev"],
        false,
        false,
    );
    events.storage_gr = Some(GroupResource::new("", "events"));
    vec![
        ns,
        pod,
        svc,
        builtin(
            "",
            "v1",
            "Endpoints",
            "endpoints",
            true,
            &["ep"],
            false,
            false,
        ),
        builtin(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
            &["pvc"],
            true,
            false,
        ),
        builtin(
            "",
            "v1",
            "PersistentVolume",
            "persistentvolumes",
            false,
            &["pv"],
            true,
            false,
        ),
        builtin("", "v1", "Secret", "secrets", true, &[], false, false),
        builtin(
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            true,
            &["cm"],
            false,
            false,
        ),
        service_account,
        node,
        builtin("", "v1", "Event", "events", true, &["ev"], false, false),
        events,
        builtin(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            true,
            &[],
            false,
            false,
        ),
        rbac("Role", "roles", true),
        rbac("RoleBinding", "rolebindings", true),
        rbac("ClusterRole", "clusterroles", false),
        rbac("ClusterRoleBinding", "clusterrolebindings", false),
        all(builtin("batch", "v1", "Job", "jobs", true, &[], true, true)),
        all(builtin(
            "batch",
            "v1",
            "CronJob",
            "cronjobs",
            true,
            &["cj"],
            true,
            true,
        )),
        builtin(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
            &["pdb"],
            true,
            true,
        ),
        builtin(
            "discovery.k8s.io",
            "v1",
            "EndpointSlice",
            "endpointslices",
            true,
            &[],
            false,
            false,
        ),
        builtin(
            "storage.k8s.io",
            "v1",
            "StorageClass",
            "storageclasses",
            false,
            &["sc"],
            false,
            false,
        ),
        apps("Deployment", "deployments", &["deploy"], true),
        apps("StatefulSet", "statefulsets", &["sts"], true),
        apps("ReplicaSet", "replicasets", &["rs"], true),
        apps("DaemonSet", "daemonsets", &["ds"], false),
        builtin(
            "apps",
            "v1",
            "ControllerRevision",
            "controllerrevisions",
            true,
            &[],
            false,
            false,
        ),
        crd,
    ]
}

/// All kinds currently served, indexed for routing.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    /// (group, version, plural) -> definition.
    by_path: BTreeMap<(String, String, String), Arc<ResourceDef>>,
}

impl Registry {
    pub fn with_builtins() -> Self {
        let mut r = Self::default();
        for d in builtin_kinds() {
            r.insert(d);
        }
        r
    }

    pub fn insert(&mut self, def: ResourceDef) {
        let key = (def.group.clone(), def.version.clone(), def.plural.clone());
        self.by_path.insert(key, Arc::new(def));
    }

    /// Removes every version registered by the named CRD.
    pub fn remove_crd(&mut self, crd_name: &str) {
        self.by_path
            .retain(|_, d| d.crd.as_deref() != Some(crd_name));
    }

    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.by_path
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// The storage-version definition of a group/resource.
    pub fn storage_def(&self, gr: &GroupResource) -> Option<Arc<ResourceDef>> {
        self.by_path
            .values()
            .find(|d| {
                d.group == gr.group && d.plural == gr.resource && d.version == d.storage_version
            })
            .cloned()
    }

    pub fn all(&self) -> impl Iterator<Item = &Arc<ResourceDef>> {
        self.by_path.values()
    }

    /// Groups with their versions, in registration order of the real server (core first).
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for d in self.by_path.values() {
            let versions = out.entry(d.group.clone()).or_default();
            if !versions.contains(&d.version) {
                versions.push(d.version.clone());
            }
        }
        out
    }

    /// Distinct storage identities.
    pub fn storage_resources(&self) -> Vec<Arc<ResourceDef>> {
        self.by_path
            .values()
            .filter(|d| d.version == d.storage_version && d.storage_gr.is_none())
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_routable() {
        let r = Registry::with_builtins();
        let lease = r.lookup("coordination.k8s.io", "v1", "leases").unwrap();
        assert_eq!(lease.kind, "Lease");
        assert!(lease.namespaced);
        assert_eq!(lease.gr().qualified(), "leases.coordination.k8s.io");
        assert!(r.lookup("", "v1", "pods").unwrap().status_subresource);
        assert!(!r.lookup("", "v1", "nodes").unwrap().namespaced);
    }
}
