//! The REST API's access control (seed 004, "REST API": every call has a permission; roles
//! grant permissions; users act within their namespaces). This is the first part of issue 15:
//! the permission table, the built-in roles, users (argon2 password hashes), bearer tokens and
//! the failed-login limiter — pure and tested. The HTTPS server, the routes and the `steward`
//! client commands are not built yet: the operator serves no API (docs/api.md says so).

pub mod access;
pub mod permissions;
pub mod server;
pub mod tokens;
