//! (pure, except [`generate_password`]) Credentials every engine uses: generated passwords,
//! [`Password`] (redacted in `Debug`), credential Secrets (`kubernetes.io/basic-auth`, created
//! once and immutable: see `postgres::build::secrets` for why) and reading a key of a Secret
//! as an API server returns it.
//!
//! Passwords never show in `Debug` output: [`Password`] and [`CredentialSecret`] redact them.
//! (A bare `k8s_openapi` `Secret` prints its data as bytes: do not log one with `{:?}`.)

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use rand::Rng;
use rand::distr::Alphanumeric;

use crate::resources::{Labels, child_meta};

/// Length of a generated password.
pub const PASSWORD_LEN: usize = 32;
/// The key holding the user name.
pub const USERNAME_KEY: &str = "username";
/// The key holding the password.
pub const PASSWORD_KEY: &str = "password";
/// The type of both Secrets: Kubernetes checks that they have `username` or `password`.
pub const SECRET_TYPE: &str = "kubernetes.io/basic-auth";

/// A fresh password: [`PASSWORD_LEN`] ASCII letters and digits (about 190 bits) from the
/// thread-local CSPRNG (ChaCha, seeded and periodically reseeded from the operating system).
/// Letters and digits only, so it needs no quoting in a connection string or shell.
pub fn generate_password() -> String {
    rand::rng()
        .sample_iter(Alphanumeric)
        .take(PASSWORD_LEN)
        .map(char::from)
        .collect()
}

/// A password. `Debug` shows `Password(<redacted>)`; there is no `Display`, so it cannot end up
/// in a message by accident: use [`Password::expose`] where the clear text is needed.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// Wraps a clear-text password.
    pub fn new(clear: impl Into<String>) -> Self {
        Self(clear.into())
    }

    /// A fresh password from [`generate_password`].
    pub fn generate() -> Self {
        Self(generate_password())
    }

    /// The clear text.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

/// A generated credential Secret. `Debug` shows its name and keys, never the values; take the
/// Secret out with [`CredentialSecret::secret`] or [`CredentialSecret::into_secret`] to create
/// it.
#[derive(Clone, PartialEq)]
pub struct CredentialSecret(Secret);

impl CredentialSecret {
    /// The Secret.
    pub fn secret(&self) -> &Secret {
        &self.0
    }

    /// The Secret, by value.
    pub fn into_secret(self) -> Secret {
        self.0
    }
}

impl fmt::Debug for CredentialSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<&String> = self.0.data.iter().flat_map(|d| d.keys()).collect();
        f.debug_struct("CredentialSecret")
            .field("name", &self.0.metadata.name)
            .field("namespace", &self.0.metadata.namespace)
            .field("keys", &keys)
            .finish_non_exhaustive()
    }
}

/// A generated credential Secret of any engine's cluster `owner` (recommended labels of
/// `engine`, component `component`), immutable. `None` when the owner was never stored.
pub fn credential_secret<K: kube::Resource<DynamicType = ()>>(
    owner: &K,
    engine: &'static str,
    name: String,
    component: &str,
    username: &str,
    password: &Password,
) -> Option<CredentialSecret> {
    let labels = Labels::new(
        engine,
        owner.meta().name.clone().unwrap_or_default(),
        component,
    );
    let metadata = child_meta(owner, name, &labels, &BTreeMap::new())?;
    Some(CredentialSecret(Secret {
        metadata,
        type_: Some(SECRET_TYPE.to_owned()),
        immutable: Some(true),
        data: Some(BTreeMap::from([
            (
                USERNAME_KEY.to_owned(),
                ByteString(username.as_bytes().to_vec()),
            ),
            (
                PASSWORD_KEY.to_owned(),
                ByteString(password.expose().as_bytes().to_vec()),
            ),
        ])),
        string_data: None,
    }))
}

/// The value of `key` in a Secret read back from the API (`data`: an API server folds a
/// written `stringData` into it and never returns `stringData`). `None` when it is missing or
/// not UTF-8.
pub fn key_of(secret: &Secret, key: &str) -> Option<Password> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
        .map(Password)
}

/// The password in a credential Secret read back from the API. `None` when it is missing,
/// empty or not UTF-8.
pub fn password_of(secret: &Secret) -> Option<Password> {
    key_of(secret, PASSWORD_KEY).filter(|p| !p.0.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_passwords_are_long_alphanumeric_and_different() {
        let a = generate_password();
        let b = generate_password();
        assert_eq!(a.len(), PASSWORD_LEN);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()), "{a}");
        assert_ne!(a, b);
        assert_ne!(Password::generate(), Password::generate());
    }
}
