//! Label and annotation maps as the caches keep them, and the metadata-only cached object.
//!
//! A `BTreeMap<String, String>` holds its entries in a node of eleven slots however few they
//! are (640 bytes with jemalloc's size classes) plus two strings per entry: ~900 bytes for a
//! child's six labels, and a cached Pod carries two such maps. At 1,000 clusters the caches
//! hold ~8,000 of them. [`PackedMap`] keeps the same entries in one string and one array of
//! offsets (~250 bytes), and the cached kinds that steps read by label ([`CachedMeta`] here,
//! [`crate::resources::pods::CachedPod`]) keep their maps packed, with `labels()` and
//! `annotations()` of their own; their `metadata` holds neither map.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Deserializer};

/// kubectl's copy of the whole object it last applied: never read, often the largest
/// annotation, so no cache keeps it.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A string map (labels, annotations) packed for a cache: every key and value in one string,
/// in key order, and where each ends. Read-only; built from the object's map.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PackedMap {
    /// Key, value, key, value... one after the other.
    text: Box<str>,
    /// The end in `text` of each key and each value, alternately.
    ends: Box<[usize]>,
}

impl PackedMap {
    /// The entries of `map`, packed.
    pub fn new(map: &BTreeMap<String, String>) -> Self {
        let mut text = String::with_capacity(map.iter().map(|(k, v)| k.len() + v.len()).sum());
        let mut ends = Vec::with_capacity(map.len() * 2);
        for (key, value) in map {
            text.push_str(key);
            ends.push(text.len());
            text.push_str(value);
            ends.push(text.len());
        }
        Self {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
        }
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.ends.chunks_exact(2).scan(0, |start, ends| {
            let (key_end, value_end) = (ends[0], ends[1]);
            let entry = (
                self.text.get(*start..key_end)?,
                self.text.get(key_end..value_end)?,
            );
            *start = value_end;
            Some(entry)
        })
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// Whether every entry of `wanted` is in the map with the same value.
    pub fn has_all(&self, wanted: &BTreeMap<String, String>) -> bool {
        wanted.iter().all(|(k, v)| self.get(k) == Some(v.as_str()))
    }
}

impl fmt::Debug for PackedMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// Takes the labels and annotations out of `meta`, packed (kubectl's last-applied annotation
/// dropped), and drops its managed fields: what every packed cached kind keeps of its
/// metadata.
pub fn pack_meta(meta: &mut ObjectMeta) -> (PackedMap, PackedMap) {
    meta.managed_fields = None;
    let labels = meta.labels.take().unwrap_or_default();
    let mut annotations = meta.annotations.take().unwrap_or_default();
    annotations.remove(LAST_APPLIED);
    (PackedMap::new(&labels), PackedMap::new(&annotations))
}

/// A `K` as a metadata-only cache keeps it (Services, claims: kinds whose steps read only
/// metadata): its metadata, with the labels and annotations packed. Watched through
/// metadata-only requests, like kube's `PartialObjectMeta<K>`. Read labels through
/// [`CachedMeta::labels`]: `metadata.labels` is always empty.
pub struct CachedMeta<K> {
    /// The object's metadata, without labels, annotations and managed fields.
    pub metadata: ObjectMeta,
    labels: PackedMap,
    annotations: PackedMap,
    kind: PhantomData<fn() -> K>,
}

impl<K> CachedMeta<K> {
    /// `metadata` as the cache keeps it.
    pub fn new(mut metadata: ObjectMeta) -> Self {
        let (labels, annotations) = pack_meta(&mut metadata);
        Self {
            metadata,
            labels,
            annotations,
            kind: PhantomData,
        }
    }

    /// The object's labels.
    pub fn labels(&self) -> &PackedMap {
        &self.labels
    }

    /// The object's annotations (without kubectl's last-applied copy).
    pub fn annotations(&self) -> &PackedMap {
        &self.annotations
    }
}

impl<K> Clone for CachedMeta<K> {
    fn clone(&self) -> Self {
        Self {
            metadata: self.metadata.clone(),
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for CachedMeta<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedMeta")
            .field("metadata", &self.metadata)
            .field("labels", &self.labels)
            .field("annotations", &self.annotations)
            .finish()
    }
}

impl<K> PartialEq for CachedMeta<K> {
    fn eq(&self, other: &Self) -> bool {
        self.metadata == other.metadata
            && self.labels == other.labels
            && self.annotations == other.annotations
    }
}

/// What a watch or list item decodes into: the metadata only (the rest of the item, and its
/// `apiVersion` and `kind`, are skipped).
#[derive(Deserialize)]
struct MetadataOnly {
    #[serde(default)]
    metadata: ObjectMeta,
}

impl<'de, K> Deserialize<'de> for CachedMeta<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        MetadataOnly::deserialize(deserializer).map(|m| Self::new(m.metadata))
    }
}

impl<K: Resource> Resource for CachedMeta<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn metadata_api() -> bool {
        true
    }

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn unpacked(packed: &PackedMap) -> BTreeMap<String, String> {
        packed
            .iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn a_packed_map_answers_as_the_map_it_was_built_from() {
        let labels = map(&[
            ("app.kubernetes.io/name", "etcd"),
            ("app.kubernetes.io/instance", "demo"),
            ("app.kubernetes.io/component", "member"),
            ("empty", ""),
            ("", "empty-key"),
        ]);
        let packed = PackedMap::new(&labels);
        assert_eq!(packed.iter().count(), 5);
        for (k, v) in &labels {
            assert_eq!(packed.get(k), Some(v.as_str()), "{k}");
        }
        assert_eq!(packed.get("app.kubernetes.io"), None);
        assert_eq!(packed.get("app.kubernetes.io/instancedemo"), None);
        assert_eq!(packed.get("other"), None);
        assert_eq!(unpacked(&packed), labels);
        assert!(
            packed
                .iter()
                .map(|(k, _)| k)
                .eq(labels.keys().map(String::as_str))
        );
        assert!(packed.has_all(&map(&[("app.kubernetes.io/instance", "demo")])));
        assert!(!packed.has_all(&map(&[("app.kubernetes.io/instance", "other")])));
        assert_eq!(format!("{packed:?}"), format!("{labels:?}"));

        let empty = PackedMap::new(&BTreeMap::new());
        assert_eq!(empty.iter().count(), 0);
        assert_eq!(empty.get(""), None);
        assert_eq!(empty, PackedMap::default());
    }

    #[test]
    fn cached_metadata_keeps_labels_and_annotations_packed_and_drops_what_no_step_reads() {
        let service = serde_json::json!({
            "apiVersion": "meta.k8s.io/v1",
            "kind": "PartialObjectMetadata",
            "metadata": {
                "name": "demo", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "labels": {"app.kubernetes.io/instance": "demo"},
                "annotations": {"a": "b", LAST_APPLIED: "{\"huge\": true}"},
                "managedFields": [{"manager": "steward", "operation": "Apply"}],
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "demo", "uid": "o"}],
            },
            "spec": {"clusterIP": "None"},
        });
        let cached: CachedMeta<Service> = serde_json::from_value(service).unwrap();
        assert_eq!(
            cached.labels().get("app.kubernetes.io/instance"),
            Some("demo")
        );
        assert_eq!(unpacked(cached.annotations()), map(&[("a", "b")]));
        assert_eq!(cached.metadata.labels, None);
        assert_eq!(cached.metadata.annotations, None);
        assert_eq!(cached.metadata.managed_fields, None);
        assert_eq!(cached.meta().resource_version.as_deref(), Some("7"));
        assert_eq!(
            cached.meta().owner_references.as_ref().map(Vec::len),
            Some(1)
        );
        assert_eq!(CachedMeta::<Service>::plural(&()), "services");
        assert!(CachedMeta::<Service>::metadata_api());
        assert_eq!(cached.clone(), cached);
    }
}
