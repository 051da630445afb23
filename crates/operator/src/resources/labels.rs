//! The recommended labels (`app.kubernetes.io/*`) and owner references every child carries.
//! Metadata comes from here only, never repeated in builders.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use kube::ResourceExt;

/// `app.kubernetes.io/name`: the engine (`etcd`, `postgres`...).
pub const NAME: &str = "app.kubernetes.io/name";
/// `app.kubernetes.io/instance`: the cluster resource's name.
pub const INSTANCE: &str = "app.kubernetes.io/instance";
/// `app.kubernetes.io/component`: the child's role (`member`, `headless`, `config`...).
pub const COMPONENT: &str = "app.kubernetes.io/component";
/// `app.kubernetes.io/managed-by`: always `steward`.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The value of `app.kubernetes.io/managed-by`.
pub const MANAGER: &str = "steward";

/// The recommended labels of one child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Labels {
    /// Engine name.
    pub engine: &'static str,
    /// Cluster name.
    pub instance: String,
    /// Component.
    pub component: String,
}

impl Labels {
    /// Labels for a child of `instance` in `engine` with role `component`.
    pub fn new(
        engine: &'static str,
        instance: impl Into<String>,
        component: impl Into<String>,
    ) -> Self {
        Self {
            engine,
            instance: instance.into(),
            component: component.into(),
        }
    }

    /// As a label map.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        let mut map = Self::cluster_labels(self.engine, &self.instance);
        map.insert(COMPONENT.to_owned(), self.component.clone());
        map
    }

    /// The labels every child of the cluster carries, whatever its component.
    pub fn cluster_labels(engine: &str, instance: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (NAME.to_owned(), engine.to_owned()),
            (INSTANCE.to_owned(), instance.to_owned()),
            (MANAGED_BY.to_owned(), MANAGER.to_owned()),
        ])
    }

    /// [`Labels::cluster_labels`] as a label selector string.
    pub fn cluster_selector(engine: &str, instance: &str) -> String {
        Self::cluster_labels(engine, instance)
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Metadata of a child: name, namespace, recommended labels (plus `extra`, which never
/// overrides them) and a controller owner reference to `owner`. Returns `None` when the owner
/// has no UID or namespace yet (it was never stored), which callers treat as "wait".
pub fn child_meta<K>(
    owner: &K,
    name: impl Into<String>,
    labels: &Labels,
    extra: &BTreeMap<String, String>,
) -> Option<ObjectMeta>
where
    K: Resource<DynamicType = ()>,
{
    let owner_ref: OwnerReference = owner.controller_owner_ref(&())?;
    let namespace = owner.namespace()?;
    let mut all = extra.clone();
    all.extend(labels.to_map());
    Some(ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace),
        labels: Some(all),
        owner_references: Some(vec![owner_ref]),
        ..ObjectMeta::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_api::etcd::{EtcdCluster, EtcdClusterSpec};

    fn cluster() -> EtcdCluster {
        let mut c = EtcdCluster::new("demo", EtcdClusterSpec::new(3, "3.5.17"));
        c.metadata.namespace = Some("db".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    #[test]
    fn child_meta_carries_labels_and_a_controller_reference() {
        let extra = BTreeMap::from([
            (MANAGED_BY.to_owned(), "someone-else".to_owned()),
            ("team".to_owned(), "a".to_owned()),
        ]);
        let meta = child_meta(
            &cluster(),
            "demo-0",
            &Labels::new("etcd", "demo", "member"),
            &extra,
        )
        .unwrap();
        let labels = meta.labels.unwrap();
        assert_eq!(labels[MANAGED_BY], "steward", "Steward's labels win");
        assert_eq!(labels["team"], "a");
        assert_eq!(labels[COMPONENT], "member");
        let owner = &meta.owner_references.unwrap()[0];
        assert_eq!(
            (owner.uid.as_str(), owner.controller),
            ("uid-1", Some(true))
        );
        assert_eq!(meta.namespace.as_deref(), Some("db"));
    }

    #[test]
    fn unsaved_owners_have_no_children() {
        let mut c = cluster();
        c.metadata.uid = None;
        assert!(
            child_meta(
                &c,
                "x",
                &Labels::new("etcd", "demo", "member"),
                &BTreeMap::new()
            )
            .is_none()
        );
    }
}
