//! Users, passwords and cluster-level privileges.
//!
//! - Users: `CREATE USER`, `ALTER USER`, `DROP USER`
//!   (<https://cratedb.com/docs/crate/reference/en/latest/sql/statements/create-user.html>,
//!   `alter-user.html`, `drop-user.html`): a user may have a password; setting it to NULL
//!   removes it; a user can change their own password.
//! - Privileges (<https://cratedb.com/docs/crate/reference/en/latest/admin/privileges.html>):
//!   the superuser `crate` may do anything; others need `DQL` (SELECT), `DML` (INSERT,
//!   UPDATE, DELETE), `DDL` (CREATE/DROP/ALTER TABLE) or `AL` (users, `SET GLOBAL`);
//!   `ALL` is all four. Only the `CLUSTER` class is modelled, not schema or table grants.
//!
//! Passwords are stored as Argon2id PHC strings (never in clear) with salts drawn from a
//! counter, so a run stays deterministic. CrateDB itself stores a salted PBKDF2 hash.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};

use super::nodes::fnv1a;
use super::{Cluster, ModelError};

/// The built-in superuser.
pub const SUPERUSER: &str = "crate";

/// A cluster-level privilege type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Privilege {
    Dql,
    Dml,
    Ddl,
    Al,
}

impl Privilege {
    pub const ALL: [Privilege; 4] = [
        Privilege::Dql,
        Privilege::Dml,
        Privilege::Ddl,
        Privilege::Al,
    ];

    pub fn parse(word: &str) -> Option<Self> {
        match word.to_ascii_uppercase().as_str() {
            "DQL" => Some(Privilege::Dql),
            "DML" => Some(Privilege::Dml),
            "DDL" => Some(Privilege::Ddl),
            "AL" => Some(Privilege::Al),
            _ => None,
        }
    }
}

impl fmt::Display for Privilege {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Privilege::Dql => "DQL",
            Privilege::Dml => "DML",
            Privilege::Ddl => "DDL",
            Privilege::Al => "AL",
        })
    }
}

/// A database user. The password is only ever held as a hash.
/// Serialized (with the hash) only into the published cluster state and `path.data`, as
/// CrateDB keeps its users' hashes in its cluster state on disk.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub name: String,
    pub superuser: bool,
    password_hash: Option<String>,
    pub privileges: BTreeSet<Privilege>,
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("User")
            .field("name", &self.name)
            .field("superuser", &self.superuser)
            .field("has_password", &self.password_hash.is_some())
            .field("privileges", &self.privileges)
            .finish()
    }
}

impl User {
    pub(crate) fn superuser() -> Self {
        Self {
            name: SUPERUSER.to_owned(),
            superuser: true,
            password_hash: None,
            privileges: BTreeSet::new(),
        }
    }

    pub fn has_password(&self) -> bool {
        self.password_hash.is_some()
    }

    pub fn has(&self, privilege: Privilege) -> bool {
        self.superuser || self.privileges.contains(&privilege)
    }
}

/// Small Argon2id parameters: the stand-in hashes on every login and its tests must be fast.
fn hasher() -> Argon2<'static> {
    match Params::new(1024, 1, 1, None) {
        Ok(params) => Argon2::new(Algorithm::Argon2id, Version::V0x13, params),
        Err(_) => Argon2::default(),
    }
}

impl Cluster {
    fn hash_password(&mut self, user: &str, password: &str) -> Result<String, ModelError> {
        self.salt_counter += 1;
        let mut salt = [0u8; 16];
        salt[..8].copy_from_slice(&self.salt_counter.to_be_bytes());
        salt[8..].copy_from_slice(&fnv1a(user.as_bytes(), 0xcbf2_9ce4_8422_2325).to_be_bytes());
        let salt = SaltString::encode_b64(&salt)
            .map_err(|e| ModelError::InvalidArgument(format!("salt: {e}")))?;
        hasher()
            .hash_password(password.as_bytes(), &salt)
            .map(|h| h.to_string())
            .map_err(|e| ModelError::InvalidArgument(format!("password hashing failed: {e}")))
    }

    /// Checks a login. The superuser without a password is trusted (as CrateDB's default
    /// host-based configuration trusts `crate`); any other user needs their password.
    pub fn authenticate(&self, user: &str, password: Option<&str>) -> Result<&User, ModelError> {
        let failed = || {
            ModelError::Unauthorized(format!(
                "password authentication failed for user \"{user}\""
            ))
        };
        let u = self.users.get(user).ok_or_else(failed)?;
        match (&u.password_hash, password) {
            (None, _) if u.superuser => Ok(u),
            (Some(hash), Some(pw)) => {
                let parsed = PasswordHash::new(hash).map_err(|_| failed())?;
                hasher()
                    .verify_password(pw.as_bytes(), &parsed)
                    .map_err(|_| failed())?;
                Ok(u)
            }
            _ => Err(failed()),
        }
    }

    pub fn users(&self) -> impl Iterator<Item = &User> {
        self.users.values()
    }

    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.get(name)
    }

    /// `CREATE USER name [WITH (password = …)]`, issued by `by`.
    pub fn create_user(
        &mut self,
        by: &str,
        name: &str,
        password: Option<&str>,
    ) -> Result<(), ModelError> {
        self.ensure_writable()?;
        self.require(by, Privilege::Al)?;
        if self.users.contains_key(name) {
            return Err(ModelError::UserAlreadyExists(name.to_owned()));
        }
        let password_hash = password.map(|p| self.hash_password(name, p)).transpose()?;
        self.users.insert(
            name.to_owned(),
            User {
                name: name.to_owned(),
                superuser: false,
                password_hash,
                privileges: BTreeSet::new(),
            },
        );
        Ok(())
    }

    /// `ALTER USER name SET (password = …)`; `None` removes the password. Users may change
    /// their own password; changing another's needs `AL`.
    pub fn alter_user_password(
        &mut self,
        by: &str,
        name: &str,
        password: Option<&str>,
    ) -> Result<(), ModelError> {
        self.ensure_writable()?;
        if by != name {
            self.require(by, Privilege::Al)?;
        }
        if !self.users.contains_key(name) {
            return Err(ModelError::UserUnknown(name.to_owned()));
        }
        let hash = password.map(|p| self.hash_password(name, p)).transpose()?;
        if let Some(u) = self.users.get_mut(name) {
            u.password_hash = hash;
        }
        Ok(())
    }

    /// `DROP USER [IF EXISTS] name`. The superuser cannot be dropped.
    pub fn drop_user(&mut self, by: &str, name: &str, if_exists: bool) -> Result<bool, ModelError> {
        self.ensure_writable()?;
        self.require(by, Privilege::Al)?;
        match self.users.get(name) {
            None if if_exists => Ok(false),
            None => Err(ModelError::UserUnknown(name.to_owned())),
            Some(u) if u.superuser => Err(ModelError::Unauthorized(format!(
                "Cannot drop a superuser '{name}'"
            ))),
            Some(_) => {
                self.users.remove(name);
                Ok(true)
            }
        }
    }

    /// `GRANT … TO name` (`revoke = false`) or `REVOKE … FROM name` at cluster level. The
    /// grantor needs `AL` and must hold what it grants. Returns how many privileges changed.
    pub fn grant(
        &mut self,
        by: &str,
        privileges: &[Privilege],
        name: &str,
        revoke: bool,
    ) -> Result<usize, ModelError> {
        self.ensure_writable()?;
        self.require(by, Privilege::Al)?;
        for p in privileges {
            self.require(by, *p)?;
        }
        let u = self
            .users
            .get_mut(name)
            .ok_or_else(|| ModelError::UserUnknown(name.to_owned()))?;
        if u.superuser {
            return Err(ModelError::Unauthorized(format!(
                "Cannot alter privileges for superuser '{name}'"
            )));
        }
        let changed = privileges
            .iter()
            .filter(|p| {
                if revoke {
                    u.privileges.remove(p)
                } else {
                    u.privileges.insert(**p)
                }
            })
            .count();
        Ok(changed)
    }

    /// Refuses unless `user` holds `privilege` (or is the superuser).
    pub fn require(&self, user: &str, privilege: Privilege) -> Result<(), ModelError> {
        match self.users.get(user) {
            Some(u) if u.has(privilege) => Ok(()),
            _ => Err(ModelError::MissingPrivilege {
                privilege,
                user: user.to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClusterConfig, NodeSpec};

    fn cluster() -> Cluster {
        let mut c = Cluster::new(ClusterConfig::default());
        c.join(NodeSpec::new("n0"));
        c
    }

    #[test]
    fn passwords_are_hashed_and_checked() {
        let mut c = cluster();
        c.create_user(SUPERUSER, "system", Some("s3cret")).ok();
        assert!(c.authenticate("system", Some("s3cret")).is_ok());
        assert!(c.authenticate("system", Some("nope")).is_err());
        assert!(c.authenticate("system", None).is_err());
        assert!(c.authenticate(SUPERUSER, None).is_ok());
        let debug = format!("{:?}", c.user("system"));
        assert!(!debug.contains("s3cret") && debug.contains("has_password: true"));
        assert!(c.user("system").is_some_and(|u| {
            !u.password_hash
                .as_deref()
                .unwrap_or("s3cret")
                .contains("s3cret")
        }));
    }

    #[test]
    fn create_twice_is_already_exists_and_privileges_are_enforced() {
        let mut c = cluster();
        c.create_user(SUPERUSER, "system", Some("a")).ok();
        assert_eq!(
            c.create_user(SUPERUSER, "system", Some("a")),
            Err(ModelError::UserAlreadyExists("system".into()))
        );
        assert!(matches!(
            c.create_user("system", "app", None),
            Err(ModelError::MissingPrivilege { .. })
        ));
        assert_eq!(c.grant(SUPERUSER, &Privilege::ALL, "system", false), Ok(4));
        assert!(c.create_user("system", "app", Some("b")).is_ok());
        assert!(c.grant("system", &[Privilege::Dql], "app", false).is_ok());
        assert!(matches!(
            c.grant("app", &[Privilege::Dql], "app", false),
            Err(ModelError::MissingPrivilege { .. })
        ));
        assert!(
            c.grant(SUPERUSER, &[Privilege::Al], SUPERUSER, false)
                .is_err()
        );
        assert!(c.drop_user("system", SUPERUSER, false).is_err());
    }

    #[test]
    fn users_change_their_own_password_and_the_old_one_stops_working() {
        let mut c = cluster();
        c.create_user(SUPERUSER, "app", Some("old")).ok();
        assert!(c.alter_user_password("app", "app", Some("new")).is_ok());
        assert!(c.authenticate("app", Some("old")).is_err());
        assert!(c.authenticate("app", Some("new")).is_ok());
        assert!(c.alter_user_password("app", SUPERUSER, Some("x")).is_err());
    }
}
