//! Server-side apply: one field manager per scope (`steward/<scope>`), always forced, never
//! get-compare-update. The applier records what it applied so the orphan sweep knows what to
//! keep.

use std::collections::BTreeSet;
use std::fmt::Debug;

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

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

/// Applies children with one field manager.
#[derive(Clone)]
pub struct Applier {
    client: Client,
    manager: String,
}

impl Applier {
    /// An applier whose field manager is `steward/<scope>`.
    pub fn new(client: Client, scope: &str) -> Self {
        Self {
            client,
            manager: format!("steward/{scope}"),
        }
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
