//! The simulation's SQL channels: the stand-in's SQL front on the shared model.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;
use steward_cratedb_standin::model::{Cluster, User};
use steward_cratedb_standin::sql;

use crate::cratedb::admin::{CrateChannels, CrateError, Endpoint, Login, Rows};
use crate::cratedb::names::SUPERUSER;

/// The stand-in's SQL front on the shared model, as
/// [`crate::cratedb::admin::model::ModelChannels`], but a login already verified against the
/// same stored hash is not hashed again (Argon2 on every statement would make a thousand seeds
/// too slow).
pub(super) struct SimChannels {
    pub(super) cluster: Arc<Mutex<Cluster>>,
    pub(super) verified: Mutex<BTreeMap<(String, String), User>>,
}

impl SimChannels {
    fn run(
        &self,
        node: &Endpoint,
        user: &str,
        password: Option<&str>,
        stmt: &str,
        args: &[Value],
    ) -> Result<Rows, CrateError> {
        let mut cluster = self
            .cluster
            .lock()
            .map_err(|_| CrateError::Other("poisoned".into()))?;
        if cluster.node(&node.pod).is_none() {
            return Err(CrateError::Unavailable("connection refused".into()));
        }
        if let Some(pw) = password {
            let key = (user.to_owned(), pw.to_owned());
            let mut verified = self
                .verified
                .lock()
                .map_err(|_| CrateError::Other("poisoned".into()))?;
            if verified.get(&key) != cluster.user(user) {
                let u = cluster
                    .authenticate(user, Some(pw))
                    .map_err(|e| CrateError::AuthFailed(e.to_string()))?;
                verified.insert(key, u.clone());
            }
        } else {
            cluster
                .authenticate(user, None)
                .map_err(|e| CrateError::AuthFailed(e.to_string()))?;
        }
        let stmt = stmt.trim().trim_end_matches(';');
        sql::execute(&mut cluster, user, stmt, args)
            .map(|r| r.rows)
            .map_err(|e| CrateError::from_code(i64::from(e.code_number()), e.message))
    }
}

#[async_trait]
impl CrateChannels for SimChannels {
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
        self.run(node, SUPERUSER, None, statements, &[]).map(drop)
    }
}
