//! The orphan sweep: deletes children that carry a cluster's labels and are owned by its UID but
//! were not applied on this pass. Candidates come from the shared caches, not fresh lists. It runs only after a pass that was not stopped early, so a
//! half-finished pass never deletes what it simply did not get to.

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::AppliedSet;
use crate::error::{Error, Result};

/// The names among `existing` that are owned by `owner_uid`, were not applied, and are not
/// already being deleted. Pure, so the rule is tested without an API server.
pub fn plan_orphans(
    existing: &[ObjectMeta],
    kind: &str,
    owner_uid: &str,
    applied: &AppliedSet,
) -> Vec<String> {
    existing
        .iter()
        .filter(|meta| meta.deletion_timestamp.is_none())
        .filter(|meta| {
            meta.owner_references
                .iter()
                .flatten()
                .any(|owner| owner.uid == owner_uid)
        })
        .filter_map(|meta| meta.name.clone())
        .filter(|name| !applied.contains(kind, name))
        .collect()
}

/// Deletes the named objects of kind `K` in `namespace` (the result of [`plan_orphans`] over a
/// cache). Already-gone objects are fine. Returns the names deleted.
pub async fn delete_named<K>(
    client: &Client,
    namespace: &str,
    names: Vec<String>,
) -> Result<Vec<String>>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let kind = K::kind(&()).into_owned();
    for name in &names {
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => tracing::info!(kind, namespace, name, "deleted orphaned child"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(Error::kube(
                    "delete orphan",
                    format!("{kind} {namespace}/{name}"),
                    source,
                ));
            }
        }
    }
    Ok(names)
}

/// Deletes every PersistentVolumeClaim labelled as a child of `engine` cluster `cluster` (the
/// claims have no owner, so garbage collection never removes them) — only those of
/// `component` when given. Used on cluster deletion when a retention policy says `Delete`.
/// Returns the names deleted.
pub async fn delete_cluster_claims(
    client: &Client,
    engine: &str,
    namespace: &str,
    cluster: &str,
    component: Option<&str>,
) -> Result<Vec<String>> {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let mut selector = super::Labels::cluster_selector(engine, cluster);
    if let Some(component) = component {
        selector.push_str(&format!(",{}={component}", super::labels::COMPONENT));
    }
    let list = claims
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .map_err(|source| Error::kube("list claims", format!("{namespace}/{cluster}"), source))?;
    let names = list
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    delete_named::<PersistentVolumeClaim>(client, namespace, names).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    fn meta(name: &str, owner: &str, deleting: bool) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            owner_references: Some(vec![OwnerReference {
                uid: owner.into(),
                ..Default::default()
            }]),
            deletion_timestamp: deleting.then_some(Time(jiff::Timestamp::UNIX_EPOCH)),
            ..Default::default()
        }
    }

    #[test]
    fn only_unapplied_children_of_this_owner_are_orphans() {
        let mut applied = AppliedSet::default();
        applied.insert("Service", "kept");
        let existing = [
            meta("kept", "uid-1", false),
            meta("stale", "uid-1", false),
            meta("other-owner", "uid-2", false),
            meta("going", "uid-1", true),
        ];
        assert_eq!(
            plan_orphans(&existing, "Service", "uid-1", &applied),
            ["stale"]
        );
        // The same name of another kind is not protected.
        assert_eq!(
            plan_orphans(&existing[..1], "ConfigMap", "uid-1", &applied),
            ["kept"]
        );
    }
}
