//! The Secrets and ConfigMaps a pod refers to (env, envFrom, volumes), fetched together so the
//! rest of the pod set-up is pure.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::{Api, Client};

/// Key → bytes of one Secret or ConfigMap.
pub type Data = BTreeMap<String, Vec<u8>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Secret,
    ConfigMap,
}

impl Kind {
    /// How kubelet's messages name the kind (`secret "x" not found`).
    pub fn lower(self) -> &'static str {
        match self {
            Kind::Secret => "secret",
            Kind::ConfigMap => "configmap",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Kind::Secret => "Secret",
            Kind::ConfigMap => "ConfigMap",
        }
    }
}

/// Fetched objects; `None` records a NotFound.
#[derive(Clone, Debug, Default)]
pub struct Objects {
    pub namespace: String,
    pub found: HashMap<(Kind, String), Option<Data>>,
}

impl Objects {
    pub fn get(&self, kind: Kind, name: &str) -> Option<&Data> {
        self.found
            .get(&(kind, name.to_string()))
            .and_then(Option::as_ref)
    }
}

/// Every Secret/ConfigMap name the pod refers to.
pub fn references(pod: &Pod) -> BTreeSet<(Kind, String)> {
    let mut out = BTreeSet::new();
    let Some(spec) = &pod.spec else {
        return out;
    };
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        for e in c.env.iter().flatten() {
            let Some(vf) = &e.value_from else { continue };
            if let Some(r) = &vf.secret_key_ref {
                out.insert((Kind::Secret, r.name.clone()));
            }
            if let Some(r) = &vf.config_map_key_ref {
                out.insert((Kind::ConfigMap, r.name.clone()));
            }
        }
        for ef in c.env_from.iter().flatten() {
            if let Some(r) = &ef.secret_ref {
                out.insert((Kind::Secret, r.name.clone()));
            }
            if let Some(r) = &ef.config_map_ref {
                out.insert((Kind::ConfigMap, r.name.clone()));
            }
        }
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            out.insert((Kind::Secret, s));
        }
        if let Some(c) = &v.config_map {
            out.insert((Kind::ConfigMap, c.name.clone()));
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(s) = &src.secret {
                out.insert((Kind::Secret, s.name.clone()));
            }
            if let Some(c) = &src.config_map {
                out.insert((Kind::ConfigMap, c.name.clone()));
            }
        }
    }
    out
}

/// Fetches every referenced object. API errors other than NotFound are returned.
pub async fn fetch(client: &Client, pod: &Pod) -> Result<Objects, kube::Error> {
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let mut found = HashMap::new();
    for (kind, name) in references(pod) {
        let data = match kind {
            Kind::Secret => secrets.get_opt(&name).await?.map(secret_data),
            Kind::ConfigMap => config_maps.get_opt(&name).await?.map(config_map_data),
        };
        found.insert((kind, name), data);
    }
    Ok(Objects { namespace, found })
}

/// A Secret's `data`, as a kubelet reads it (an API server folds `stringData` into it).
fn secret_data(s: Secret) -> Data {
    s.data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}

fn config_map_data(c: ConfigMap) -> Data {
    let mut out: Data = c
        .binary_data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    for (k, v) in c.data.unwrap_or_default() {
        out.insert(k, v.into_bytes());
    }
    out
}
