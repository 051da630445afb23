//! The REST API (seed 004, "REST API": every call has a permission; roles grant permissions;
//! users act within their namespaces), served over HTTPS by every operator replica.
//!
//! - `permissions`, `access`, `tokens` (pure): the permission table and built-in roles, users
//!   (argon2 password hashes), namespace scoping, the failed-login limiter, bearer tokens.
//! - `server`: the route table and the router built from it; `clusters` and `resources`: the
//!   routes' handlers, which name no engine; `engine`: what they need of one (`ClusterApi`,
//!   `UsersApi`, `FailoverApi`), which each engine implements in its own folder (`api.rs`).
//! - `tls`: the serving certificate and token key, from a Secret in the operator's namespace
//!   (generated once when absent).
//! - `bootstrap`: the initial admin user, when no user exists.
//! - `watch`: users (labelled Secrets) and roles (labelled ConfigMaps), read from the
//!   operator's own namespace only, kept current in the access table.
//! - `listen`: the HTTPS listener and [`listen::start`], which the runtime calls on every
//!   replica.
//!
//! The `steward` client commands live in `crate::cli`; `docs/api.md` describes it all.

pub mod access;
pub mod bootstrap;
pub mod clusters;
pub mod engine;
pub mod listen;
pub mod permissions;
pub mod resources;
#[cfg(test)]
mod routes_tests;
pub mod server;
#[cfg(test)]
pub(crate) mod test_logs;
pub mod tls;
pub mod tokens;
pub mod watch;
