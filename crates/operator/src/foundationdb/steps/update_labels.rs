//! UpdateLabels — the seed (002) keeps the labels and annotations of the resources the operator
//! made up to date with the spec, and sets the core labels the operator relies on; a label or
//! annotation no longer in the spec is left as it is (removing it from the resources is the
//! user's job). Steward: every Pod of the cluster that is not being deleted gets the labels
//! `spec.podTemplate.labels` with Steward's own over them ([`build::pod_labels`]) and the
//! annotations of `spec.podTemplate.annotations` (but those Steward sets itself and the restart
//! trigger, [`build::reserved_annotation`]) that it lacks or has with another value, in one
//! JSON merge patch of its metadata; every claim of a process group gets its core labels
//! ([`build::group_labels`]) the same way. These are not in the Pods' spec hash, so a label
//! change never recreates a Pod. Does nothing when everything is in place; one log line when it
//! patched something, no Event per object.

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Map, Value, json};

use super::{class_of, group_claim, group_pods};
use crate::error::Error;
use crate::foundationdb::{FdbPass, build};
use crate::pipeline::{Outcome, SubReconciler};
use crate::resources::packed::PackedMap;

/// See the module documentation.
pub struct UpdateLabels;

/// (pure) The entries of `wanted` that `have` lacks or has with another value, as a JSON
/// object (empty when none).
pub fn missing(have: &PackedMap, wanted: &BTreeMap<String, String>) -> Map<String, Value> {
    wanted
        .iter()
        .filter(|(k, v)| have.get(k) != Some(v.as_str()))
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// (pure) The merge patch of an object's metadata that adds `labels` and `annotations`;
/// `None` when both are empty.
pub fn metadata_patch(
    labels: Map<String, Value>,
    annotations: Map<String, Value>,
) -> Option<Value> {
    let mut metadata = Map::new();
    if !labels.is_empty() {
        metadata.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    (!metadata.is_empty()).then(|| json!({ "metadata": metadata }))
}

#[async_trait]
impl SubReconciler<FdbPass> for UpdateLabels {
    fn name(&self) -> &'static str {
        "UpdateLabels"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let ns = pass.core.namespace.clone();
        let annotations = build::pod_annotations(&pass.cluster);
        let mut patched_pods = Vec::new();
        let pods: Api<Pod> = Api::namespaced(pass.ctx.client.clone(), &ns);
        for (id, pod) in group_pods(pass) {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some((class, _)) = build::parse_group_id(&pass.prefix, &id) else {
                continue;
            };
            let labels = build::pod_labels(&pass.cluster, &id, class);
            let Some(patch) = metadata_patch(
                missing(pod.labels(), &labels),
                missing(pod.annotations(), &annotations),
            ) else {
                continue;
            };
            match pods
                .patch(&id, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => patched_pods.push(id),
                // Gone since the cache saw it: AddPods makes it again, with its labels.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(source) => {
                    return Err(Error::kube("patch", format!("Pod {ns}/{id}"), source));
                }
            }
        }
        let mut patched_claims = Vec::new();
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(pass.ctx.client.clone(), &ns);
        for g in pass.status.process_groups.clone() {
            let Some(class) = class_of(pass, &g).filter(|c| c.is_stateful()) else {
                continue;
            };
            let Some(claim) = group_claim(pass, &g.process_group_id) else {
                continue;
            };
            if claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let labels = build::group_labels(&pass.core.name, &g.process_group_id, class);
            let Some(patch) = metadata_patch(missing(claim.labels(), &labels), Map::new()) else {
                continue;
            };
            let name = build::claim_name(&g.process_group_id);
            match claims
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => patched_claims.push(name),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(source) => {
                    return Err(Error::kube(
                        "patch",
                        format!("PersistentVolumeClaim {ns}/{name}"),
                        source,
                    ));
                }
            }
        }
        if !patched_pods.is_empty() || !patched_claims.is_empty() {
            tracing::info!(
                cluster = %format!("{ns}/{}", pass.core.name),
                pods = %patched_pods.join(", "),
                claims = %patched_claims.join(", "),
                "labels and annotations updated in place"
            );
        }
        Ok(Outcome::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_missing_or_different_entries_are_patched_and_nothing_is_removed() {
        let have = PackedMap::new(&BTreeMap::from([
            ("a".to_owned(), "1".to_owned()),
            ("b".to_owned(), "2".to_owned()),
            ("old".to_owned(), "x".to_owned()),
        ]));
        let wanted = BTreeMap::from([
            ("a".to_owned(), "1".to_owned()),
            ("b".to_owned(), "3".to_owned()),
            ("c".to_owned(), "4".to_owned()),
        ]);
        let labels = missing(&have, &wanted);
        assert_eq!(Value::Object(labels.clone()), json!({"b": "3", "c": "4"}));
        assert_eq!(
            metadata_patch(labels, Map::new()),
            Some(json!({"metadata": {"labels": {"b": "3", "c": "4"}}}))
        );
        assert_eq!(metadata_patch(Map::new(), Map::new()), None);
    }
}
