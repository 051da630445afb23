//! (pure, with a clock passed in) Who may call what: API users (Secrets labelled
//! `steward.dev/api-user`: `username`, `password-hash` — an argon2 PHC string, never a clear
//! password —, `roles`, `namespaces`), their roles, authentication by password, namespace
//! scoping (as Crunchy's `pgouser` namespaces) and the failed-login limiter.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::time::Duration;

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use jiff::Timestamp;

use super::permissions::{Permission, Role};

/// The label that makes a Secret an API user.
pub const USER_LABEL: &str = "steward.dev/api-user";

/// An API user. `Debug` shows no hash.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiUser {
    /// Its name.
    pub name: String,
    /// Its password's argon2 hash (PHC string).
    password_hash: String,
    /// Its roles, by name.
    pub roles: Vec<String>,
    /// The namespaces it may act in; `None`: every namespace.
    pub namespaces: Option<BTreeSet<String>>,
}

impl fmt::Debug for ApiUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiUser")
            .field("name", &self.name)
            .field("roles", &self.roles)
            .field("namespaces", &self.namespaces)
            .finish_non_exhaustive()
    }
}

/// Hashes a password for a user Secret's `password-hash` (argon2id, random salt).
pub fn hash_password(password: &str) -> Result<String, String> {
    let salt = SaltString::encode_b64(&rand::random::<[u8; 16]>()).map_err(|e| e.to_string())?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| format!("hashing: {e}"))
}

impl ApiUser {
    /// (pure) A user from a Secret's data: `username`, `password-hash`, `roles` (names
    /// separated by commas), `namespaces` (names separated by commas, or `*`; absent: every
    /// namespace). The error names the key at fault, never a value.
    pub fn from_data(data: &BTreeMap<String, Vec<u8>>) -> Result<Self, String> {
        let text = |key: &str| -> Result<Option<String>, String> {
            data.get(key)
                .map(|v| {
                    String::from_utf8(v.clone())
                        .map(|s| s.trim().to_owned())
                        .map_err(|_| format!("key {key} is not UTF-8"))
                })
                .transpose()
        };
        let name = text("username")?
            .filter(|n| !n.is_empty())
            .ok_or("key username is missing or empty")?;
        let password_hash = text("password-hash")?.ok_or("key password-hash is missing")?;
        PasswordHash::new(&password_hash)
            .map_err(|_| "key password-hash is not an argon2 PHC string".to_owned())?;
        let list = |s: Option<String>| -> Vec<String> {
            s.unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let roles = list(text("roles")?);
        let namespaces = match text("namespaces")? {
            None => None,
            Some(s) if s == "*" => None,
            Some(s) => Some(list(Some(s)).into_iter().collect()),
        };
        Ok(Self {
            name,
            password_hash,
            roles,
            namespaces,
        })
    }

    /// Whether `password` is this user's.
    pub fn verify(&self, password: &str) -> bool {
        PasswordHash::new(&self.password_hash).is_ok_and(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        })
    }

    /// Whether the user may act in `namespace` (`None`: a call about no namespace).
    pub fn in_namespace(&self, namespace: Option<&str>) -> bool {
        match (&self.namespaces, namespace) {
            (None, _) | (_, None) => true,
            (Some(allowed), Some(ns)) => allowed.contains(ns),
        }
    }
}

/// Why a call is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// No credentials, an unknown user or a wrong password (`401`; which one is not said).
    #[error("authentication failed")]
    Unauthenticated,
    /// Too many failed logins for this user from this source (`429`).
    #[error("too many failed logins; retry in {0} s")]
    RateLimited(u64),
    /// The user's roles do not grant the permission (`403`).
    #[error("user {user} lacks permission {permission}")]
    Forbidden {
        /// The user.
        user: String,
        /// The permission the call needs.
        permission: Permission,
    },
    /// The user may not act in the namespace (`403`).
    #[error("user {user} may not act in namespace {namespace}")]
    OutsideNamespace {
        /// The user.
        user: String,
        /// The namespace.
        namespace: String,
    },
}

/// The users and roles the API knows now.
#[derive(Clone, Debug, Default)]
pub struct AccessTable {
    users: HashMap<String, ApiUser>,
    roles: HashMap<String, Role>,
}

impl AccessTable {
    /// The table of `users` and `roles` (the built-in roles are always there; a role of the
    /// same name defined elsewhere does not replace one).
    pub fn new(users: Vec<ApiUser>, roles: Vec<Role>) -> Self {
        let mut table = Self::default();
        for role in super::permissions::builtin_roles().into_iter().chain(roles) {
            table.roles.entry(role.name.clone()).or_insert(role);
        }
        for user in users {
            table.users.insert(user.name.clone(), user);
        }
        table
    }

    /// The user these credentials log in as.
    pub fn authenticate(&self, name: &str, password: &str) -> Result<&ApiUser, Denied> {
        match self.users.get(name) {
            Some(user) if user.verify(password) => Ok(user),
            // An unknown user costs a hash too, so timing does not tell users apart.
            None => {
                let _ = hash_password(password);
                Err(Denied::Unauthenticated)
            }
            Some(_) => Err(Denied::Unauthenticated),
        }
    }

    /// A user by name (a bearer token names one).
    pub fn user(&self, name: &str) -> Option<&ApiUser> {
        self.users.get(name)
    }

    /// Whether `user` may make a call needing `permission` in `namespace`.
    pub fn authorize(
        &self,
        user: &ApiUser,
        permission: Permission,
        namespace: Option<&str>,
    ) -> Result<(), Denied> {
        let granted = user
            .roles
            .iter()
            .filter_map(|r| self.roles.get(r))
            .any(|r| r.permissions.contains(&permission));
        if !granted {
            return Err(Denied::Forbidden {
                user: user.name.clone(),
                permission,
            });
        }
        if !user.in_namespace(namespace) {
            return Err(Denied::OutsideNamespace {
                user: user.name.clone(),
                namespace: namespace.unwrap_or_default().to_owned(),
            });
        }
        Ok(())
    }
}

/// Failed logins per (user, source): after [`LoginLimiter::MAX_FAILURES`] failures within
/// [`LoginLimiter::WINDOW`], logins of that user from that source are refused until the window
/// has passed since the last failure. A success clears the count.
#[derive(Debug, Default)]
pub struct LoginLimiter {
    failures: HashMap<(String, String), (u32, Timestamp)>,
}

impl LoginLimiter {
    /// Failures allowed in a window.
    pub const MAX_FAILURES: u32 = 5;
    /// The window.
    pub const WINDOW: Duration = Duration::from_secs(300);

    /// `Err` when `user` from `source` is locked out at `now`.
    pub fn check(&self, user: &str, source: &str, now: Timestamp) -> Result<(), Denied> {
        let Some((count, last)) = self.failures.get(&(user.to_owned(), source.to_owned())) else {
            return Ok(());
        };
        let since = now.as_second() - last.as_second();
        let window = i64::try_from(Self::WINDOW.as_secs()).unwrap_or(i64::MAX);
        if *count >= Self::MAX_FAILURES && since < window {
            return Err(Denied::RateLimited(
                u64::try_from(window - since).unwrap_or(0),
            ));
        }
        Ok(())
    }

    /// Records the outcome of a login.
    pub fn record(&mut self, user: &str, source: &str, ok: bool, now: Timestamp) {
        let key = (user.to_owned(), source.to_owned());
        if ok {
            self.failures.remove(&key);
            return;
        }
        let window = i64::try_from(Self::WINDOW.as_secs()).unwrap_or(i64::MAX);
        let entry = self.failures.entry(key).or_insert((0, now));
        if now.as_second() - entry.1.as_second() >= window {
            *entry = (0, now);
        }
        entry.0 += 1;
        entry.1 = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::permissions::parse_role;

    fn user(name: &str, password: &str, roles: &str, namespaces: Option<&str>) -> ApiUser {
        let mut data = BTreeMap::from([
            ("username".to_owned(), name.as_bytes().to_vec()),
            (
                "password-hash".to_owned(),
                hash_password(password).unwrap().into_bytes(),
            ),
            ("roles".to_owned(), roles.as_bytes().to_vec()),
        ]);
        if let Some(ns) = namespaces {
            data.insert("namespaces".to_owned(), ns.as_bytes().to_vec());
        }
        ApiUser::from_data(&data).unwrap()
    }

    #[test]
    fn users_log_in_with_their_password_only_and_act_within_their_roles_and_namespaces() {
        let table = AccessTable::new(
            vec![
                user("ann", "ann-pw", "admin", None),
                user("ops", "ops-pw", "operator", Some("team-a, team-b")),
                user("bob", "bob-pw", "readonly,backup", Some("team-a")),
            ],
            vec![parse_role("backup", "CreateBackup ShowBackup").unwrap()],
        );
        assert!(table.authenticate("ann", "ann-pw").is_ok());
        assert_eq!(
            table.authenticate("ann", "ops-pw").unwrap_err(),
            Denied::Unauthenticated
        );
        assert_eq!(
            table.authenticate("nobody", "x").unwrap_err(),
            Denied::Unauthenticated
        );
        let ann = table.user("ann").unwrap();
        let ops = table.user("ops").unwrap();
        let bob = table.user("bob").unwrap();
        assert!(
            table
                .authorize(ann, Permission::DeleteCluster, Some("x"))
                .is_ok()
        );
        assert!(matches!(
            table.authorize(ops, Permission::DeleteCluster, Some("team-a")),
            Err(Denied::Forbidden { .. })
        ));
        assert!(
            table
                .authorize(ops, Permission::Failover, Some("team-b"))
                .is_ok()
        );
        assert!(matches!(
            table.authorize(ops, Permission::Failover, Some("team-c")),
            Err(Denied::OutsideNamespace { .. })
        ));
        // A custom role adds to a built-in one.
        assert!(
            table
                .authorize(bob, Permission::CreateBackup, Some("team-a"))
                .is_ok()
        );
        assert!(
            table
                .authorize(bob, Permission::ShowCluster, Some("team-a"))
                .is_ok()
        );
        assert!(
            table
                .authorize(bob, Permission::ScaleCluster, Some("team-a"))
                .is_err()
        );
        // A call about no namespace (the version) is in every user's scope.
        assert!(table.authorize(bob, Permission::ShowVersion, None).is_ok());
        // Nothing about a user prints its hash.
        assert!(!format!("{bob:?}").contains("argon2"));
    }

    #[test]
    fn a_user_secret_without_a_hash_or_with_a_clear_password_is_refused_by_key() {
        let data = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(
            ApiUser::from_data(&data(&[("username", "x")])).unwrap_err(),
            "key password-hash is missing"
        );
        let e = ApiUser::from_data(&data(&[("username", "x"), ("password-hash", "hunter2")]))
            .unwrap_err();
        assert_eq!(e, "key password-hash is not an argon2 PHC string");
        assert!(!e.contains("hunter2"));
    }

    #[test]
    fn repeated_failed_logins_lock_out_that_user_from_that_source_for_a_while() {
        let mut limiter = LoginLimiter::default();
        let t0: Timestamp = "2026-11-26T10:00:00Z".parse().unwrap();
        for i in 0..LoginLimiter::MAX_FAILURES {
            assert!(limiter.check("ann", "10.0.0.1", t0).is_ok(), "failure {i}");
            limiter.record("ann", "10.0.0.1", false, t0);
        }
        assert_eq!(
            limiter.check("ann", "10.0.0.1", t0),
            Err(Denied::RateLimited(300))
        );
        // Another source, another user: not locked.
        assert!(limiter.check("ann", "10.0.0.2", t0).is_ok());
        assert!(limiter.check("bob", "10.0.0.1", t0).is_ok());
        let later = Timestamp::from_second(t0.as_second() + 301).unwrap();
        assert!(limiter.check("ann", "10.0.0.1", later).is_ok());
        limiter.record("ann", "10.0.0.1", true, later);
        assert!(limiter.check("ann", "10.0.0.1", later).is_ok());
    }
}
