//! Authentication and authorization, as a real API server does them for every request.
//!
//! * Authentication (`tokens`): a bearer token is either the admin token the server writes into
//!   its kubeconfig (user `steward-admin`, group `system:masters`) or a ServiceAccount token
//!   issued through `TokenRequest`. No token means `system:anonymous` (group
//!   `system:unauthenticated`), which RBAC denies almost everything. An unknown, expired or
//!   orphaned token is `401 Unauthorized`.
//! * Authorization (`index`, `rules`): `system:masters` bypasses it; everyone else needs an RBAC
//!   grant. Request attributes are derived from the URL as upstream does (`attributes`).
//! * Impersonation (`impersonation`): `Impersonate-*` headers, each authorized with the
//!   `impersonate` verb, make the request run as another user.
//! * Escalation prevention on RBAC writes (`escalation`), the bootstrap ClusterRoles
//!   (`bootstrap`), and the review and TokenRequest endpoints (`reviews`).
//!
//! Tokens are never logged.

pub mod attributes;
pub mod bootstrap;
pub mod escalation;
pub mod impersonation;
pub mod index;
pub mod reviews;
pub mod rules;
pub mod tokens;

use std::cell::RefCell;
use std::sync::Arc;

use axum::http::HeaderMap;

use crate::status::ApiError;
use crate::store::State;

pub use self::attributes::Attributes;
pub use self::tokens::Tokens;

/// The group that bypasses authorization.
pub const MASTERS: &str = "system:masters";
/// The admin user of the kubeconfig the server writes.
pub const ADMIN_USER: &str = "steward-admin";

/// An authenticated (or anonymous) user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

impl User {
    pub fn admin() -> Self {
        Self {
            name: ADMIN_USER.into(),
            uid: String::new(),
            groups: vec![MASTERS.into(), "system:authenticated".into()],
        }
    }

    pub fn anonymous() -> Self {
        Self {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec!["system:unauthenticated".into()],
        }
    }

    pub fn service_account(namespace: &str, name: &str, uid: &str) -> Self {
        Self {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            uid: uid.into(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }

    pub fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS)
    }
}

/// `401 Unauthorized`, worded as upstream.
pub fn unauthorized() -> ApiError {
    ApiError::new(401, "Unauthorized", "Unauthorized")
}

/// The user a request's `Authorization` header names.
pub fn authenticate(state: &State, headers: &HeaderMap) -> Result<User, ApiError> {
    let header = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let token = header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))
        .map(str::trim)
        .unwrap_or_default();
    if token.is_empty() {
        return Ok(User::anonymous());
    }
    state
        .auth
        .tokens
        .user(state, token)
        .ok_or_else(unauthorized)
}

/// Authorizes `attrs` for `user` against the current RBAC objects.
pub fn authorize(state: &mut State, user: &User, attrs: &Attributes) -> index::Decision {
    if user.is_master() {
        return index::Decision::Allow(String::new());
    }
    state.rbac_index().authorize(user, attrs)
}

/// The 403 a denied request gets.
pub fn forbidden(user: &User, attrs: &Attributes) -> ApiError {
    attrs.forbidden(&user.name, "")
}

/// Authentication and authorization state kept with the store (not snapshotted: tokens do not
/// survive a restart).
#[derive(Default)]
pub struct AuthState {
    pub tokens: Tokens,
    /// The RBAC index and the `State::rbac_rev` it was built at.
    pub index: Option<(u64, Arc<index::Index>)>,
}

impl State {
    /// The RBAC index, rebuilt only when an RBAC object changed since the last build.
    pub fn rbac_index(&mut self) -> Arc<index::Index> {
        if let Some((rev, idx)) = &self.auth.index
            && *rev == self.rbac_rev
        {
            return idx.clone();
        }
        let idx = Arc::new(index::Index::build(self));
        self.auth.index = Some((self.rbac_rev, idx.clone()));
        idx
    }
}

thread_local! {
    static REQUESTER: RefCell<Option<User>> = const { RefCell::new(None) };
}

/// Runs `f` (a synchronous request handler) with `user` as the requester that escalation
/// checks see. Writes outside it (built-in controllers, the garbage collector) are the
/// server's own and are not checked.
pub fn as_requester<T>(user: &User, f: impl FnOnce() -> T) -> T {
    REQUESTER.with(|r| *r.borrow_mut() = Some(user.clone()));
    let out = f();
    REQUESTER.with(|r| *r.borrow_mut() = None);
    out
}

/// The user of the request being handled on this thread, if any.
pub fn requester() -> Option<User> {
    REQUESTER.with(|r| r.borrow().clone())
}
