//! Users' password Secrets, for every engine (seed 000, "User Passwords"): reading a user's
//! Secret and labelling it `steward.dev/user-password` (so its changes wake the controller),
//! and Steward's record of the passwords the database holds (`applied-passwords`), which a
//! rotation needs to log in with the **old** password.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;

use crate::error::Error;
use crate::resources::secrets::key_of;
use crate::resources::{Labels, child_meta};
use crate::runtime::stores::cached_or_get;

/// The label on every Secret a cluster's user takes its password from.
pub const USER_PASSWORD_LABEL: &str = "steward.dev/user-password";

/// A user's Secret as read.
#[derive(Debug, PartialEq, Eq)]
pub enum UserSecret {
    /// The password and the Secret's `resourceVersion` (after labelling).
    Found {
        /// The Secret's version.
        version: Option<String>,
        /// The clear-text password; never logged.
        password: crate::resources::secrets::Password,
    },
    /// The Secret does not exist.
    Missing(String),
    /// The key is missing, empty or not UTF-8.
    Invalid(String),
}

/// Reads `secret_name`'s `key` (from the labelled cache, else a GET) and labels the Secret if
/// it is not yet; the version returned is the labelled one, so labelling is not mistaken for a
/// change on the next pass.
pub async fn user_secret(
    api: &Api<Secret>,
    cache: &Store<Secret>,
    namespace: &str,
    secret_name: &str,
    key: &str,
) -> Result<UserSecret, Error> {
    let object = format!("{namespace}/{secret_name}");
    let secret = match cached_or_get(cache, api, namespace, secret_name).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            return Ok(UserSecret::Missing(format!(
                "Secret {secret_name} not found"
            )));
        }
        Err(source) => return Err(Error::kube("get Secret", object, source)),
    };
    let secret = if secret.labels().contains_key(USER_PASSWORD_LABEL) {
        secret
    } else {
        let body = serde_json::json!({"metadata": {"labels": {USER_PASSWORD_LABEL: "true"}}});
        api.patch(secret_name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(|source| Error::kube("label Secret", object.clone(), source))?
    };
    match key_of(&secret, key).filter(|p| !p.expose().is_empty()) {
        Some(password) => Ok(UserSecret::Found {
            version: secret.resource_version(),
            password,
        }),
        None => Ok(UserSecret::Invalid(format!(
            "Secret {secret_name} has no non-empty UTF-8 key {key:?}"
        ))),
    }
}

/// Steward's record of the passwords in the database, by user (Secret `name`).
pub async fn read_applied(
    api: &Api<Secret>,
    cache: &Store<Secret>,
    namespace: &str,
    name: &str,
) -> Result<BTreeMap<String, String>, Error> {
    let secret = cached_or_get(cache, api, namespace, name)
        .await
        .map_err(|source| Error::kube("get Secret", format!("{namespace}/{name}"), source))?;
    Ok(secret
        .and_then(|s| s.data)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| String::from_utf8(v.0).ok().map(|v| (k, v)))
        .collect())
}

/// Writes the record (creating it, owned by `owner`, on first use).
pub async fn write_applied<K: kube::Resource<DynamicType = ()>>(
    api: &Api<Secret>,
    owner: &K,
    engine: &'static str,
    name: &str,
    applied: &BTreeMap<String, String>,
) -> Result<(), Error> {
    let instance = owner.meta().name.clone().unwrap_or_default();
    let labels = Labels::new(engine, instance, "applied-passwords");
    let Some(metadata) = child_meta(owner, name.to_owned(), &labels, &BTreeMap::new()) else {
        return Err(Error::Internal {
            message: "cluster has no UID or namespace".into(),
        });
    };
    let namespace = metadata.namespace.clone().unwrap_or_default();
    let secret = Secret {
        metadata,
        data: Some(
            applied
                .iter()
                .map(|(k, v)| (k.clone(), ByteString(v.clone().into_bytes())))
                .collect(),
        ),
        type_: Some("Opaque".into()),
        ..Secret::default()
    };
    let object = format!("{namespace}/{name}");
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let body = serde_json::json!({"data": secret.data});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&body))
                .await
                .map(|_| ())
                .map_err(|source| Error::kube("update Secret", object, source))
        }
        Err(source) => Err(Error::kube("create Secret", object, source)),
    }
}
