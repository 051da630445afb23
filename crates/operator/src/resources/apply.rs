//! Server-side apply: one field manager per scope (`steward/<scope>`), always forced, never
//! get-compare-update. The applier records what it applied so the orphan sweep knows what to
//! keep.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Debug;
use std::hash::{DefaultHasher, Hasher};
use std::sync::{Arc, Mutex};

use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;

use crate::resources::packed::CachedMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::runtime::stores::Indexed;

/// Names of the children applied on one pass, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppliedSet(BTreeSet<(String, String)>);

impl AppliedSet {
    /// Records an applied object.
    pub fn insert(&mut self, kind: &str, name: &str) {
        self.0.insert((kind.to_owned(), name.to_owned()));
    }

    /// Whether `kind/name` was applied.
    pub fn contains(&self, kind: &str, name: &str) -> bool {
        self.0.contains(&(kind.to_owned(), name.to_owned()))
    }
}

/// What the appliers of one operator applied last, by object (kind, namespace, name): a hash
/// of the body sent and the `resourceVersion` the server returned. In memory only: a restarted
/// operator applies everything once.
#[derive(Clone, Debug, Default)]
pub struct AppliedMemo(Arc<Mutex<HashMap<ObjectKey, (u64, String)>>>);

/// (kind, namespace, name).
type ObjectKey = (String, String, String);

impl AppliedMemo {
    fn get(&self, key: &ObjectKey) -> Option<(u64, String)> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .cloned()
    }

    fn put(&self, key: ObjectKey, value: (u64, String)) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, value);
    }
}

/// A hash of `obj`'s JSON body, serialised straight into the hasher: most passes compare it
/// with the memo and stop there, so no body text is built for them.
fn body_hash<K: Serialize>(obj: &K) -> Result<u64> {
    struct HashWriter(DefaultHasher);
    impl std::io::Write for HashWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.write(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut writer = HashWriter(DefaultHasher::new());
    serde_json::to_writer(&mut writer, obj).map_err(|source| Error::Serde {
        what: "applied object",
        source,
    })?;
    Ok(writer.0.finish())
}

/// Where [`Applier::apply_unless_current`] reads the `resourceVersion` the watch last saw of
/// an object: a cache of the objects, or of their metadata only.
pub trait VersionCache<K> {
    /// The cached `resourceVersion` of `obj` (by namespace and name); `None` if not cached.
    fn version_of(&self, obj: &K) -> Option<String>;
}

impl<K> VersionCache<K> for Store<K>
where
    K: Resource<DynamicType = ()> + Clone,
{
    fn version_of(&self, obj: &K) -> Option<String> {
        self.get(&ObjectRef::from_obj(obj))
            .and_then(|o| o.resource_version())
    }
}

impl<K> VersionCache<K> for Indexed<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    fn version_of(&self, obj: &K) -> Option<String> {
        (**self).version_of(obj)
    }
}

impl<K> VersionCache<K> for Store<PartialObjectMeta<K>>
where
    K: Resource<DynamicType = ()> + Clone,
{
    fn version_of(&self, obj: &K) -> Option<String> {
        let mut key = ObjectRef::<PartialObjectMeta<K>>::new(&obj.name_any());
        if let Some(ns) = obj.namespace() {
            key = key.within(&ns);
        }
        self.get(&key).and_then(|o| o.resource_version())
    }
}

impl<K> VersionCache<K> for Indexed<CachedMeta<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    fn version_of(&self, obj: &K) -> Option<String> {
        let mut key = ObjectRef::<CachedMeta<K>>::new(&obj.name_any());
        if let Some(ns) = obj.namespace() {
            key = key.within(&ns);
        }
        self.get(&key).and_then(|o| o.resource_version())
    }
}

/// Applies children with one field manager.
#[derive(Clone)]
pub struct Applier {
    client: Client,
    manager: String,
    memo: Option<AppliedMemo>,
}

impl Applier {
    /// An applier whose field manager is `steward/<scope>`.
    pub fn new(client: Client, scope: &str) -> Self {
        Self {
            client,
            manager: format!("steward/{scope}"),
            memo: None,
        }
    }

    /// The same applier, remembering what it applied in `memo` (see [`Self::apply_unless_current`]).
    pub fn with_memo(mut self, memo: AppliedMemo) -> Self {
        self.memo = Some(memo);
        self
    }

    /// [`Self::apply`], unless nothing can have changed: this operator last applied the same
    /// body to this object, and `cache` holds the object at the `resourceVersion` that apply
    /// returned — so nobody changed, deleted or re-created it since. A
    /// converged cluster then costs no request (a server-side apply that changes nothing is
    /// still a PATCH the server must process). Anything else — another body, another version,
    /// no cache entry, no memo (tests), a restarted operator — applies.
    pub async fn apply_unless_current<K>(
        &self,
        obj: &K,
        cache: &impl VersionCache<K>,
        applied: &mut AppliedSet,
    ) -> Result<()>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + Debug
            + Serialize
            + DeserializeOwned,
    {
        let cached_version = cache.version_of(obj);
        let kind = K::kind(&()).to_string();
        let key = (
            kind.clone(),
            obj.namespace().unwrap_or_default(),
            obj.name_any(),
        );
        let hash = body_hash(obj)?;
        if let Some(memo) = &self.memo
            && let (Some((last, version)), Some(cached)) = (memo.get(&key), &cached_version)
            && last == hash
            && version == *cached
        {
            applied.insert(&kind, &key.2);
            return Ok(());
        }
        let out = self.apply(obj, applied).await?;
        if let (Some(memo), Some(version)) = (&self.memo, out.resource_version()) {
            memo.put(key, (hash, version));
        }
        Ok(())
    }

    /// The patch parameters: apply, forced, with this manager.
    pub fn params(&self) -> PatchParams {
        PatchParams::apply(&self.manager).force()
    }

    /// Server-side applies `obj` (which must carry name and namespace) and records it.
    pub async fn apply<K>(&self, obj: &K, applied: &mut AppliedSet) -> Result<K>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + Debug
            + Serialize
            + DeserializeOwned,
    {
        let name = obj.name_any();
        let namespace = obj.namespace().unwrap_or_default();
        let api: Api<K> = Api::namespaced(self.client.clone(), &namespace);
        let mut body = serde_json::to_value(obj).map_err(|source| Error::Serde {
            what: "applied object",
            source,
        })?;
        if let Some(map) = body.as_object_mut() {
            map.insert("apiVersion".into(), K::api_version(&()).into());
            map.insert("kind".into(), K::kind(&()).into());
            if let Some(meta) = map.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                meta.remove("resourceVersion");
                meta.remove("managedFields");
            }
        }
        let kind = K::kind(&());
        let out = api
            .patch(&name, &self.params(), &Patch::Apply(body))
            .await
            .map_err(|source| Error::kube("apply", format!("{kind} {namespace}/{name}"), source))?;
        applied.insert(&kind, &name);
        Ok(out)
    }
}

#[cfg(test)]
mod memo_tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};

    async fn patches(client: &Client) -> u64 {
        let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
        let text = client.request_text(req).await.unwrap();
        text.lines()
            .filter(|l| l.contains("resource=\"services\"") && l.contains("verb=\"PATCH\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// A cache holding the Service `ns/svc` at `version` (empty for `None`), as the watch
    /// would.
    fn cache_at(version: Option<String>) -> kube::runtime::reflector::Store<Service> {
        let (store, mut writer) = kube::runtime::reflector::store();
        if let Some(v) = version {
            let mut svc = service(80);
            svc.metadata.resource_version = Some(v);
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(svc));
        }
        store
    }

    fn service(port: i32) -> Service {
        Service {
            metadata: kube::api::ObjectMeta {
                name: Some("svc".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                ports: Some(vec![ServicePort {
                    port,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[tokio::test]
    async fn an_unchanged_apply_of_an_unchanged_object_sends_nothing() {
        let plane = crate::embedded::Embedded::start(&["ns"]).await.unwrap();
        let client = plane.client.clone();
        let applier = Applier::new(client.clone(), "test").with_memo(AppliedMemo::default());
        let mut applied = AppliedSet::default();
        let api: Api<Service> = Api::namespaced(client.clone(), "ns");
        let version = |s: Service| s.metadata.resource_version;

        applier
            .apply_unless_current(&service(80), &cache_at(None), &mut applied)
            .await
            .unwrap();
        assert_eq!(patches(&client).await, 1);
        let live = version(api.get("svc").await.unwrap());
        // The cache holds what was applied: nothing is sent, the object still counts as applied.
        let mut again = AppliedSet::default();
        applier
            .apply_unless_current(&service(80), &cache_at(live.clone()), &mut again)
            .await
            .unwrap();
        assert_eq!(patches(&client).await, 1);
        assert!(again.contains("Service", "svc"));
        // A new body, a cache that lags or lacks the object, someone else's change: applied.
        applier
            .apply_unless_current(&service(81), &cache_at(live.clone()), &mut again)
            .await
            .unwrap();
        assert_eq!(patches(&client).await, 2);
        applier
            .apply_unless_current(&service(81), &cache_at(live), &mut again)
            .await
            .unwrap();
        assert_eq!(
            patches(&client).await,
            3,
            "the cached version is not the one last applied"
        );
        let live = version(api.get("svc").await.unwrap());
        applier
            .apply_unless_current(&service(81), &cache_at(None), &mut again)
            .await
            .unwrap();
        assert_eq!(patches(&client).await, 4, "no cache entry");
        api.patch(
            "svc",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"by": "hand"}}})),
        )
        .await
        .unwrap();
        let edited = version(api.get("svc").await.unwrap());
        assert_ne!(edited, live);
        applier
            .apply_unless_current(&service(81), &cache_at(edited), &mut again)
            .await
            .unwrap();
        assert_eq!(patches(&client).await, 6, "edited by someone else: applied");
        // Without a memo (tests, a fresh operator) every call applies.
        let plain = Applier::new(client.clone(), "test");
        let live = version(api.get("svc").await.unwrap());
        plain
            .apply_unless_current(&service(81), &cache_at(live), &mut again)
            .await
            .unwrap();
        assert_eq!(patches(&client).await, 7);
    }
}
