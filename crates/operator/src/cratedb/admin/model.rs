//! (tests) The channels on the CrateDB stand-in's model: the statements [`super::ops`] sends run
//! through the stand-in's SQL front on one shared cluster state, as the user who logged in
//! (checked against the stored password hashes), so privileges, "already exists", license
//! limits and the no-master block apply as they do over the wire. A node is reachable when it
//! is in the model's cluster and not marked down. A login already verified against the same
//! stored user (hash included) is not hashed again: Argon2 on every statement would make the
//! simulation's thousand seeds too slow, and a changed password changes the stored user.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;
use steward_cratedb_standin::model::{Cluster, User};
use steward_cratedb_standin::sql;

use super::{CrateChannels, CrateError, Endpoint, Login, Rows};

/// The model and what the test changed about reachability.
#[derive(Clone)]
pub struct ModelChannels {
    /// The cluster state.
    pub cluster: Arc<Mutex<Cluster>>,
    /// Nodes that do not answer.
    pub down: Arc<Mutex<BTreeSet<String>>>,
    /// Every statement kind run through `crash`, in order (`SET`, `CREATE`, `GRANT`…).
    pub crash_log: Arc<Mutex<Vec<String>>>,
    /// Logins verified so far: (user, password) → the stored user they were verified against.
    verified: Arc<Mutex<BTreeMap<(String, String), User>>>,
}

impl ModelChannels {
    /// Channels on `cluster`.
    pub fn new(cluster: Cluster) -> Self {
        Self {
            cluster: Arc::new(Mutex::new(cluster)),
            down: Arc::default(),
            crash_log: Arc::default(),
            verified: Arc::default(),
        }
    }

    /// The stored user a login of `user` with `password` was last verified against.
    pub fn verified_record(&self, user: &str, password: &str) -> Option<User> {
        let verified = self.verified.lock().ok()?;
        verified
            .get(&(user.to_owned(), password.to_owned()))
            .cloned()
    }

    fn run(
        &self,
        node: &Endpoint,
        user: &str,
        password: Option<&str>,
        stmt: &str,
        args: &[Value],
    ) -> Result<Rows, CrateError> {
        if self.down.lock().map_err(poisoned)?.contains(&node.pod) {
            return Err(CrateError::Unavailable("connection refused".into()));
        }
        let mut cluster = self.cluster.lock().map_err(poisoned)?;
        if cluster.node(&node.pod).is_none() {
            return Err(CrateError::Unavailable("connection refused".into()));
        }
        let key = password.map(|pw| (user.to_owned(), pw.to_owned()));
        let mut verified = self.verified.lock().map_err(poisoned)?;
        let known = key
            .as_ref()
            .is_some_and(|k| verified.get(k).is_some() && verified.get(k) == cluster.user(user));
        if !known {
            let u = cluster
                .authenticate(user, password)
                .map_err(|e| CrateError::AuthFailed(e.to_string()))?;
            if let Some(k) = key {
                verified.insert(k, u.clone());
            }
        }
        drop(verified);
        let stmt = stmt.trim().trim_end_matches(';');
        sql::execute(&mut cluster, user, stmt, args)
            .map(|r| r.rows)
            .map_err(|e| CrateError::from_code(i64::from(e.code_number()), e.message))
    }
}

fn poisoned<T>(_: T) -> CrateError {
    CrateError::Other("model lock poisoned".into())
}

#[async_trait]
impl CrateChannels for ModelChannels {
    async fn http(
        &self,
        node: &Endpoint,
        login: &Login,
        stmt: &str,
        args: &[Value],
    ) -> Result<Rows, CrateError> {
        self.run(node, &login.user, Some(login.password.expose()), stmt, args)
    }

    async fn pg(&self, node: &Endpoint, login: &Login, statements: &str) -> Result<(), CrateError> {
        self.run(
            node,
            &login.user,
            Some(login.password.expose()),
            statements,
            &[],
        )
        .map(drop)
    }

    async fn crash(&self, node: &Endpoint, statements: &str) -> Result<(), CrateError> {
        let kind = statements
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_uppercase();
        self.crash_log.lock().map_err(poisoned)?.push(kind);
        self.run(
            node,
            crate::cratedb::names::SUPERUSER,
            None,
            statements,
            &[],
        )
        .map(drop)
    }
}
