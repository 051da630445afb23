//! (pure) `CrateClusterSpec` → [`ValidatedCrateCluster`]: node sets in order, settings that
//! would fight Steward's own refused, reserved and duplicate users refused, heap ratios and
//! quantities checked. A spec that fails here changes nothing in the cluster.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::ResourceExt;
use steward_api::cratedb::{CrateCluster, CrateUser, Disk, RestartGate, SecretKeySelector};

use super::names::{MASTER_SET, SUPERUSER, SYSTEM_USER};

/// Settings Steward sets on every node and a spec may not override (they name the node, its
/// addresses, its disks and how it finds the cluster).
pub const MANAGED_SETTINGS: [&str; 13] = [
    "cluster.name",
    "node.name",
    "node.master",
    "node.data",
    "path.data",
    "network.host",
    "http.port",
    "psql.port",
    "transport.tcp.port",
    "discovery.seed_hosts",
    "discovery.seed_providers",
    "cluster.initial_master_nodes",
    "gateway.expected_data_nodes",
];

/// One node set, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSet {
    /// `master` or the data set's name.
    pub name: String,
    /// Whether these are the masters.
    pub master: bool,
    /// Nodes wanted.
    pub replicas: i32,
    /// Container resources.
    pub resources: Option<ResourceRequirements>,
    /// JVM heap ratio of the memory limit.
    pub heap_ratio: f64,
    /// Disks.
    pub disk: Disk,
    /// Settings: the cluster's, then the set's (the set's win).
    pub settings: BTreeMap<String, String>,
}

/// A spec that passed validation.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidatedCrateCluster {
    /// Namespace.
    pub namespace: String,
    /// Resource name.
    pub name: String,
    /// `cluster.name`.
    pub cluster_name: String,
    /// Image repository.
    pub registry: String,
    /// Version (the tag).
    pub version: String,
    /// The license Secret key, if any.
    pub license: Option<SecretKeySelector>,
    /// Masters first, then the data sets in spec order.
    pub sets: Vec<NodeSet>,
    /// Users of the spec.
    pub users: Vec<CrateUser>,
    /// The restart gate.
    pub gate: RestartGate,
}

impl ValidatedCrateCluster {
    /// The image every node runs.
    pub fn image(&self) -> String {
        format!("{}:{}", self.registry, self.version)
    }

    /// The masters.
    pub fn masters(&self) -> &NodeSet {
        &self.sets[0]
    }

    /// The data sets, in spec order.
    pub fn data_sets(&self) -> &[NodeSet] {
        &self.sets[1..]
    }

    /// Data nodes wanted in all.
    pub fn data_nodes(&self) -> i32 {
        self.data_sets().iter().map(|s| s.replicas).sum()
    }

    /// The node set named `name`.
    pub fn set(&self, name: &str) -> Option<&NodeSet> {
        self.sets.iter().find(|s| s.name == name)
    }
}

fn check_settings(owner: &str, settings: &BTreeMap<String, String>) -> Result<(), String> {
    for key in settings.keys() {
        if MANAGED_SETTINGS.contains(&key.as_str()) {
            return Err(format!(
                "{owner}: setting {key:?} is set by Steward and cannot be overridden"
            ));
        }
        if key.is_empty() || key.chars().any(|c| c.is_whitespace() || c == '=') {
            return Err(format!("{owner}: setting name {key:?} is not valid"));
        }
    }
    Ok(())
}

fn check_heap(owner: &str, ratio: f64) -> Result<(), String> {
    if !(ratio > 0.0 && ratio <= 1.0) {
        return Err(format!(
            "{owner}: heapRatio {ratio} must be more than 0 and at most 1"
        ));
    }
    Ok(())
}

/// Validates `cluster`'s spec.
pub fn validate(cluster: &CrateCluster) -> Result<ValidatedCrateCluster, String> {
    let spec = &cluster.spec;
    if spec.replicas.is_some() {
        return Err(
            "spec.replicas is not used: scale with spec.nodes.master.replicas or spec.nodes.data[].replicas"
                .into(),
        );
    }
    check_settings("spec.cluster.settings", &spec.cluster.settings)?;
    let master = &spec.nodes.master;
    if master.replicas < 3 {
        return Err(format!(
            "spec.nodes.master.replicas is {}: a cluster needs at least 3 master nodes",
            master.replicas
        ));
    }
    check_heap("spec.nodes.master", master.heap_ratio)?;
    check_settings("spec.nodes.master.settings", &master.settings)?;
    let merged = |own: &BTreeMap<String, String>| {
        let mut all = spec.cluster.settings.clone();
        all.extend(own.clone());
        all
    };
    let mut sets = vec![NodeSet {
        name: MASTER_SET.to_owned(),
        master: true,
        replicas: master.replicas,
        resources: master.resources.clone(),
        heap_ratio: master.heap_ratio,
        disk: master.disk.clone(),
        settings: merged(&master.settings),
    }];
    if spec.nodes.data.is_empty() {
        return Err("spec.nodes.data needs at least one data node set".into());
    }
    let mut seen = BTreeSet::new();
    for (i, d) in spec.nodes.data.iter().enumerate() {
        let owner = format!("spec.nodes.data[{i}] ({})", d.name);
        if d.name == MASTER_SET {
            return Err(format!("{owner}: the name \"master\" is reserved"));
        }
        if !seen.insert(d.name.clone()) {
            return Err(format!("{owner}: data set names must be unique"));
        }
        if d.replicas < 1 {
            return Err(format!("{owner}: replicas must be at least 1"));
        }
        check_heap(&owner, d.heap_ratio)?;
        check_settings(&format!("{owner}.settings"), &d.settings)?;
        sets.push(NodeSet {
            name: d.name.clone(),
            master: false,
            replicas: d.replicas,
            resources: d.resources.clone(),
            heap_ratio: d.heap_ratio,
            disk: d.disk.clone(),
            settings: merged(&d.settings),
        });
    }
    let mut users = BTreeSet::new();
    for u in &spec.users {
        if u.name == SYSTEM_USER || u.name == SUPERUSER {
            return Err(format!(
                "spec.users: {:?} is reserved (Steward manages \"system\", \"crate\" is CrateDB's superuser)",
                u.name
            ));
        }
        if !users.insert(u.name.clone()) {
            return Err(format!("spec.users: {:?} is listed twice", u.name));
        }
    }
    let name = cluster.name_any();
    // The longest child name, `crate-data-<set>-<name>-<ordinal>`, must stay a DNS label
    // (StatefulSet Pods also carry a `controller-revision-hash` label of name + hash).
    let longest = spec
        .nodes
        .data
        .iter()
        .map(|d| d.name.len())
        .max()
        .unwrap_or(0);
    if "crate-data--".len() + longest + name.len() + 3 > 52 {
        return Err(format!(
            "the name {name:?} is too long with data set names of {longest} characters: \
             crate-data-<set>-<name> must stay under 53 characters"
        ));
    }
    Ok(ValidatedCrateCluster {
        namespace: cluster.namespace().unwrap_or_default(),
        name,
        cluster_name: spec.cluster.name.clone(),
        registry: spec.cluster.image_registry.clone(),
        version: spec.cluster.version.clone(),
        license: spec
            .cluster
            .license
            .as_ref()
            .map(|l| l.secret_key_ref.clone()),
        sets,
        users: spec.users.clone(),
        gate: spec.restart.clone(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A cluster of 3 masters, `hot` (2) and `cold` (2), with one user.
    pub(crate) fn cluster() -> CrateCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "steward.dev/v1alpha1",
            "kind": "CrateCluster",
            "metadata": {"name": "c1", "namespace": "db", "uid": "u1"},
            "spec": {
                "cluster": {"name": "crate-dev", "version": "4.8.4"},
                "nodes": {
                    "master": {"replicas": 3},
                    "data": [
                        {"name": "hot", "replicas": 2, "disk": {"count": 2, "size": "4Gi"}},
                        {"name": "cold", "replicas": 2, "settings": {"node.attr.zone": "b"}}
                    ]
                },
                "users": [
                    {"name": "app", "password": {"secretKeyRef": {"name": "app-pw", "key": "password"}}}
                ]
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_valid_spec_lists_masters_then_data_sets_in_order() {
        let v = validate(&cluster()).unwrap();
        let names: Vec<&str> = v.sets.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["master", "hot", "cold"]);
        assert_eq!(v.image(), "crate:4.8.4");
        assert_eq!(v.data_nodes(), 4);
        assert_eq!(v.set("hot").unwrap().disk.count, 2);
        assert_eq!(v.set("cold").unwrap().settings["node.attr.zone"], "b");
    }

    #[test]
    fn invalid_specs_are_refused_with_the_cause() {
        type Edit = Box<dyn Fn(&mut CrateCluster)>;
        let cases: Vec<(Edit, &str)> = vec![
            (
                Box::new(|c| c.spec.nodes.master.replicas = 2),
                "at least 3 master",
            ),
            (
                Box::new(|c| c.spec.nodes.data[1].name = "hot".into()),
                "unique",
            ),
            (
                Box::new(|c| c.spec.nodes.data[0].name = "master".into()),
                "reserved",
            ),
            (Box::new(|c| c.spec.nodes.data.clear()), "at least one data"),
            (
                Box::new(|c| c.spec.users[0].name = "system".into()),
                "reserved",
            ),
            (
                Box::new(|c| {
                    let u = c.spec.users[0].clone();
                    c.spec.users.push(u);
                }),
                "listed twice",
            ),
            (
                Box::new(|c| c.spec.nodes.data[0].heap_ratio = 1.5),
                "heapRatio",
            ),
            (
                Box::new(|c| {
                    c.spec
                        .cluster
                        .settings
                        .insert("node.name".into(), "x".into());
                }),
                "set by Steward",
            ),
            (
                Box::new(|c| c.spec.replicas = Some(3)),
                "spec.nodes.master.replicas",
            ),
            (
                Box::new(|c| c.metadata.name = Some("x".repeat(40))),
                "too long",
            ),
        ];
        for (edit, want) in cases {
            let mut c = cluster();
            edit(&mut c);
            let err = validate(&c).unwrap_err();
            assert!(err.contains(want), "{err} should mention {want}");
        }
    }
}
