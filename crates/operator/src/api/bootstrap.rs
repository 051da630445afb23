//! The initial admin (as Argo CD's `argocd-initial-admin-secret`): when the operator starts and
//! no Secret labelled `steward.dev/api-user` exists in its namespace, it creates
//!
//! - `steward-api-initial-admin` (unlabelled: not a user) holding `username` (`admin`) and
//!   `password`, a random 24-character password, and
//! - `steward-api-admin`, the user: labelled, `username: admin`, `roles: admin`,
//!   `password-hash` (argon2 of that password).
//!
//! The password's record is created first and a replica that loses the race (`409`) reads the
//! winner's, so the user always matches it. Nothing ships a default password and nothing logs
//! this one: read it with `kubectl get secret steward-api-initial-admin -o
//! jsonpath='{.data.password}' | base64 -d`. Once any user exists, this does nothing.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use rand::Rng;

use super::access::{USER_LABEL, hash_password};

/// The user Secret of the initial admin.
pub const ADMIN_SECRET: &str = "steward-api-admin";
/// The Secret holding the initial admin's user name and password.
pub const INITIAL_ADMIN_SECRET: &str = "steward-api-initial-admin";
/// The initial admin's user name.
pub const ADMIN_USER: &str = "admin";
/// Characters of a generated password.
const PASSWORD_LENGTH: usize = 24;

/// Why the initial admin could not be made.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The Kubernetes API refused or did not answer.
    #[error("{action} the initial API admin ({namespace}/{secret}) failed: {source}")]
    Kube {
        /// What was being done.
        action: &'static str,
        /// The namespace.
        namespace: String,
        /// The Secret.
        secret: String,
        /// The error.
        #[source]
        source: Box<kube::Error>,
    },
    /// The initial admin Secret exists but has no usable password.
    #[error("Secret {namespace}/{secret} has no usable key {key}")]
    Invalid {
        /// The namespace.
        namespace: String,
        /// The Secret.
        secret: String,
        /// The key.
        key: &'static str,
    },
    /// Hashing the password failed.
    #[error("hashing the initial admin's password failed: {0}")]
    Hash(String),
}

impl BootstrapError {
    /// Whether trying again later may help (see [`super::tls::TlsError::is_transient`]).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Kube { source, .. } => match source.as_ref() {
                kube::Error::Api(s) => s.code >= 500 || s.code == 429,
                _ => true,
            },
            Self::Invalid { .. } | Self::Hash(_) => false,
        }
    }
}

/// What [`ensure_initial_admin`] found or did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bootstrap {
    /// API users exist: nothing was done.
    UsersExist,
    /// The initial admin was created now (by this call or, in a race, by another replica).
    Created,
}

/// (pure) A random password of [`PASSWORD_LENGTH`] letters and digits, starting with a letter
/// (so it reads as a string in YAML, as in `cli.yaml`).
pub fn generate_password() -> String {
    const LETTERS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    const ALPHANUMERIC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let mut password = String::with_capacity(PASSWORD_LENGTH);
    password.push(char::from(LETTERS[rng.random_range(0..LETTERS.len())]));
    while password.len() < PASSWORD_LENGTH {
        password.push(char::from(
            ALPHANUMERIC[rng.random_range(0..ALPHANUMERIC.len())],
        ));
    }
    password
}

fn secret(namespace: &str, name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> Secret {
    let mut all_labels = BTreeMap::from([
        ("app.kubernetes.io/part-of".to_owned(), "steward".to_owned()),
        ("app.kubernetes.io/component".to_owned(), "api".to_owned()),
    ]);
    all_labels.extend(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(all_labels),
            ..Default::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

/// The initial admin's password, from the Secret [`INITIAL_ADMIN_SECRET`] in `namespace`
/// (`None` when it does not exist). For `steward dev up`'s `cli.yaml`; never log it.
pub async fn initial_password(
    client: &Client,
    namespace: &str,
) -> Result<Option<String>, BootstrapError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let Some(found) =
        api.get_opt(INITIAL_ADMIN_SECRET)
            .await
            .map_err(|source| BootstrapError::Kube {
                action: "reading",
                namespace: namespace.to_owned(),
                secret: INITIAL_ADMIN_SECRET.to_owned(),
                source: Box::new(source),
            })?
    else {
        return Ok(None);
    };
    password_of(&found, namespace).map(Some)
}

fn password_of(secret: &Secret, namespace: &str) -> Result<String, BootstrapError> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get("password"))
        .and_then(|p| String::from_utf8(p.0.clone()).ok())
        .filter(|p| !p.is_empty())
        .ok_or_else(|| BootstrapError::Invalid {
            namespace: namespace.to_owned(),
            secret: INITIAL_ADMIN_SECRET.to_owned(),
            key: "password",
        })
}

/// Creates the initial admin in `namespace` when no API user exists there (see the module
/// doc). Idempotent; safe to run on every replica at once.
pub async fn ensure_initial_admin(
    client: &Client,
    namespace: &str,
) -> Result<Bootstrap, BootstrapError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let kube_error = |action, secret: &str, source: kube::Error| BootstrapError::Kube {
        action,
        namespace: namespace.to_owned(),
        secret: secret.to_owned(),
        source: Box::new(source),
    };
    let users = api
        .list_metadata(&ListParams::default().labels(USER_LABEL).limit(1))
        .await
        .map_err(|e| kube_error("listing users for", USER_LABEL, e))?;
    if !users.items.is_empty() {
        return Ok(Bootstrap::UsersExist);
    }
    // The password's record first: whoever loses the race uses the winner's password.
    let mut password = generate_password();
    let record = secret(
        namespace,
        INITIAL_ADMIN_SECRET,
        &[],
        &[("username", ADMIN_USER), ("password", &password)],
    );
    match api.create(&PostParams::default(), &record).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let found = api
                .get(INITIAL_ADMIN_SECRET)
                .await
                .map_err(|e| kube_error("reading", INITIAL_ADMIN_SECRET, e))?;
            password = password_of(&found, namespace)?;
        }
        Err(e) => return Err(kube_error("creating", INITIAL_ADMIN_SECRET, e)),
    }
    let hash = hash_password(&password).map_err(BootstrapError::Hash)?;
    let user = secret(
        namespace,
        ADMIN_SECRET,
        &[(USER_LABEL, "true")],
        &[
            ("username", ADMIN_USER),
            ("roles", "admin"),
            ("password-hash", &hash),
        ],
    );
    match api.create(&PostParams::default(), &user).await {
        Ok(_) => tracing::info!(
            namespace,
            user = ADMIN_USER,
            password_secret = INITIAL_ADMIN_SECRET,
            "API: created the initial admin; its password is in the Secret named here"
        ),
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(kube_error("creating", ADMIN_SECRET, e)),
    }
    Ok(Bootstrap::Created)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::access::ApiUser;

    #[test]
    fn generated_passwords_are_long_alphanumeric_and_start_with_a_letter() {
        let a = generate_password();
        assert_eq!(a.len(), PASSWORD_LENGTH);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert!(a.starts_with(|c: char| c.is_ascii_alphabetic()));
        assert_ne!(a, generate_password());
    }

    #[tokio::test]
    async fn the_initial_admin_is_made_once_and_its_password_never_logged() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let plane = crate::embedded::Embedded::start(&["steward-system"])
            .await
            .unwrap();
        let logs = crate::api::test_logs::CapturedLogs::install();
        let client = &plane.client;
        // Two replicas at once, then again: one admin, one password.
        let (a, b) = tokio::join!(
            ensure_initial_admin(client, "steward-system"),
            ensure_initial_admin(client, "steward-system")
        );
        assert_eq!(a.unwrap(), Bootstrap::Created);
        assert_eq!(b.unwrap(), Bootstrap::Created);
        assert_eq!(
            ensure_initial_admin(client, "steward-system")
                .await
                .unwrap(),
            Bootstrap::UsersExist
        );
        let password = initial_password(client, "steward-system")
            .await
            .unwrap()
            .unwrap();
        let api: Api<Secret> = Api::namespaced(client.clone(), "steward-system");
        let users = api
            .list(&ListParams::default().labels(USER_LABEL))
            .await
            .unwrap()
            .items;
        assert_eq!(users.len(), 1);
        let data = users[0]
            .data
            .clone()
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        let admin = ApiUser::from_data(&data).unwrap();
        assert_eq!(
            (admin.name.as_str(), admin.roles.as_slice()),
            ("admin", &["admin".to_owned()][..])
        );
        assert!(admin.verify(&password));
        let text = logs.text();
        assert!(text.contains(INITIAL_ADMIN_SECRET), "{text}");
        assert!(!text.contains(&password));
    }
}
