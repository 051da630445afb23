//! (pure, except [`generate_password`]) The two Secrets Steward generates for a cluster: its
//! superuser `steward` (`<cluster>-superuser`) and the streaming replication user `replicator`
//! (`<cluster>-replication`), each with the keys `username` and `password`
//! (`kubernetes.io/basic-auth`).
//!
//! **Created once.** The engine creates each Secret when it is missing, with a freshly
//! [generated](generate_password) password, and never applies it again: the password is also in
//! the database (written by `initdb`/the entrypoint), so a new one in the Secret would lock the
//! operator and the replicas out. The builders therefore take the password as an argument
//! rather than making one, and mark the Secret `immutable`, so the API server refuses any later
//! change of its data; only a delete (and a new cluster) gives a new password.
//!
//! The credential types and helpers every engine shares live in `resources::secrets`.

use steward_api::postgres::PostgresCluster;

use crate::postgres::names::{ENGINE, REPLICATION_USER, SUPERUSER};
use crate::postgres::validate::ValidatedPostgresCluster;

pub use crate::resources::secrets::{
    CredentialSecret, PASSWORD_KEY, PASSWORD_LEN, Password, SECRET_TYPE, USERNAME_KEY,
    credential_secret, generate_password, key_of, password_of,
};

/// The superuser Secret `<cluster>-superuser` (`username: steward`). `None` when the owner was
/// never stored. Create it once; never apply it again (see the module documentation).
pub fn superuser_secret(
    owner: &PostgresCluster,
    cluster: &ValidatedPostgresCluster,
    password: &Password,
) -> Option<CredentialSecret> {
    let name = cluster.names().superuser_secret();
    credential_secret(owner, ENGINE, name, "superuser", SUPERUSER, password)
}

/// The replication Secret `<cluster>-replication` (`username: replicator`). `None` when the
/// owner was never stored. Create it once; never apply it again (see the module documentation).
pub fn replication_secret(
    owner: &PostgresCluster,
    cluster: &ValidatedPostgresCluster,
    password: &Password,
) -> Option<CredentialSecret> {
    let name = cluster.names().replication_secret();
    credential_secret(
        owner,
        ENGINE,
        name,
        "replication",
        REPLICATION_USER,
        password,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::validate::tests::{cluster, validated};
    use k8s_openapi::api::core::v1::Secret;
    use std::collections::BTreeMap;

    #[test]
    fn the_secrets_carry_the_user_and_the_given_password() {
        let owner = cluster("demo", 3, "16");
        let v = validated(&owner);
        let password = Password::new("s3cret-value");
        let superuser = superuser_secret(&owner, &v, &password)
            .unwrap()
            .into_secret();
        assert_eq!(superuser.metadata.name.as_deref(), Some("demo-superuser"));
        assert_eq!(superuser.metadata.namespace.as_deref(), Some("db"));
        assert_eq!(superuser.type_.as_deref(), Some(SECRET_TYPE));
        assert_eq!(superuser.immutable, Some(true), "created once");
        let data = superuser.data.clone().unwrap();
        assert_eq!(data[USERNAME_KEY].0, b"steward");
        assert_eq!(password_of(&superuser), Some(password.clone()));
        let owner_ref = &superuser.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner_ref.kind.as_str(), owner_ref.controller),
            ("PostgresCluster", Some(true))
        );
        let labels = superuser.metadata.labels.unwrap();
        assert_eq!(labels["app.kubernetes.io/name"], "postgres");
        assert_eq!(labels["app.kubernetes.io/instance"], "demo");

        let replication = replication_secret(&owner, &v, &password)
            .unwrap()
            .into_secret();
        assert_eq!(
            replication.metadata.name.as_deref(),
            Some("demo-replication")
        );
        assert_eq!(replication.data.unwrap()[USERNAME_KEY].0, b"replicator");
    }

    #[test]
    fn passwords_never_appear_in_debug_output() {
        let owner = cluster("demo", 1, "16");
        let v = validated(&owner);
        let password = Password::generate();
        let clear = password.expose().to_owned();
        let secret = superuser_secret(&owner, &v, &password).unwrap();
        for text in [
            format!("{password:?}"),
            format!("{secret:?}"),
            format!("{secret:#?}"),
        ] {
            assert!(!text.contains(&clear), "{text}");
            assert!(!text.contains(&format!("{:?}", clear.as_bytes())), "{text}");
        }
        assert!(format!("{secret:?}").contains("demo-superuser"));
        assert!(format!("{secret:?}").contains("password"), "keys are shown");
    }

    #[test]
    fn unsaved_owners_and_missing_passwords() {
        let mut owner = cluster("demo", 1, "16");
        let v = validated(&owner);
        owner.metadata.uid = None;
        assert!(superuser_secret(&owner, &v, &Password::new("x")).is_none());
        assert!(replication_secret(&owner, &v, &Password::new("x")).is_none());
        let mut secret = Secret::default();
        assert_eq!(password_of(&secret), None);
        let data = |v: &str| {
            Some(BTreeMap::from([(
                PASSWORD_KEY.to_owned(),
                k8s_openapi::ByteString(v.as_bytes().to_vec()),
            )]))
        };
        secret.data = data("pw");
        assert_eq!(
            password_of(&secret).map(|p| p.expose().to_owned()),
            Some("pw".into())
        );
        secret.data = data("");
        assert_eq!(password_of(&secret), None);
        // `stringData` is what a client writes, never what an API server returns.
        secret.data = None;
        secret.string_data = Some(BTreeMap::from([(PASSWORD_KEY.to_owned(), "pw".to_owned())]));
        assert_eq!(password_of(&secret), None);
    }
}
