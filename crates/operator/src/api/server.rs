//! The REST API's router: the route table — every route with the one permission it needs, the
//! single source the router is built from —, authentication (basic auth or a bearer token from
//! `POST /api/v1/login`, failed logins limited per user and source), authorization (the user's
//! roles and namespaces), the audit log line of every mutating call, and one JSON error shape.
//! The handlers live in `clusters.rs` and `resources.rs`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, FromRequest, MatchedPath, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, patch, post, put};
use base64::Engine;
use kube::Client;
use serde::Serialize;
use serde_json::{Value, json};

use super::access::{AccessTable, ApiUser, Denied, LoginLimiter};
use super::permissions::Permission;
use super::tokens::TokenKey;
use crate::clock::{Clock, format_time};

/// One route: its method, its path template (axum's syntax) and the permission it needs
/// (`None`: any authenticated user — only `login`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The HTTP method.
    pub method: &'static str,
    /// The path template.
    pub path: &'static str,
    /// What the caller needs.
    pub permission: Option<Permission>,
}

const fn route(method: &'static str, path: &'static str, p: Option<Permission>) -> Route {
    Route {
        method,
        path,
        permission: p,
    }
}

/// Every route of the API. The router is built from this table, so a route cannot exist
/// without a permission.
pub const ROUTES: &[Route] = &[
    route("GET", "/api/v1/version", Some(Permission::ShowVersion)),
    route("GET", "/api/v1/health", Some(Permission::ShowVersion)),
    route("GET", "/api/v1/openapi.json", Some(Permission::ShowVersion)),
    route("POST", "/api/v1/login", None),
    route("GET", "/api/v1/clusters", Some(Permission::ShowCluster)),
    route("GET", NS_CLUSTERS, Some(Permission::ShowCluster)),
    route("POST", NS_CLUSTERS, Some(Permission::CreateCluster)),
    route("GET", CLUSTER, Some(Permission::ShowCluster)),
    route("PATCH", CLUSTER, Some(Permission::UpdateCluster)),
    route("DELETE", CLUSTER, Some(Permission::DeleteCluster)),
    route("POST", SCALE, Some(Permission::ScaleCluster)),
    route("POST", RESTART, Some(Permission::RestartCluster)),
    route("GET", FAILOVER, Some(Permission::Failover)),
    route("POST", FAILOVER, Some(Permission::Failover)),
    route("GET", USERS, Some(Permission::ShowUser)),
    route("POST", USERS, Some(Permission::CreateUser)),
    route("PUT", USER_PASSWORD, Some(Permission::UpdateUser)),
    route("DELETE", USER, Some(Permission::DeleteUser)),
    route("GET", BACKUPS, Some(Permission::ShowBackup)),
    route("POST", BACKUPS, Some(Permission::CreateBackup)),
    route("GET", BACKUP, Some(Permission::ShowBackup)),
    route("POST", RESTORE, Some(Permission::Restore)),
    route("GET", RESTORE_ONE, Some(Permission::ShowBackup)),
    route("POST", UPGRADE, Some(Permission::UpdateCluster)),
    route("GET", UPGRADE_ONE, Some(Permission::ShowCluster)),
    route("GET", SCHEDULES, Some(Permission::ShowSchedule)),
    route("POST", SCHEDULES, Some(Permission::CreateSchedule)),
    route("DELETE", SCHEDULE, Some(Permission::CreateSchedule)),
    route("GET", POLICIES, Some(Permission::ShowPolicy)),
    route("POST", POLICIES, Some(Permission::CreatePolicy)),
    route("DELETE", POLICY, Some(Permission::CreatePolicy)),
];

const NS_CLUSTERS: &str = "/api/v1/namespaces/{namespace}/clusters";
const CLUSTER: &str = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}";
const SCALE: &str = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/scale";
const RESTART: &str = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/restart";
const FAILOVER: &str = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/failover";
const USERS: &str = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/users";
const USER: &str = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/users/{user}";
const USER_PASSWORD: &str =
    "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/users/{user}/password";
const BACKUPS: &str = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/backups";
const BACKUP: &str = "/api/v1/namespaces/{namespace}/backups/{backup}";
const RESTORE: &str = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/restore";
const RESTORE_ONE: &str =
    "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/restores/{restore}";
const UPGRADE: &str = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/upgrade";
const UPGRADE_ONE: &str =
    "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}/upgrades/{upgrade}";
const SCHEDULES: &str = "/api/v1/namespaces/{namespace}/schedules";
const SCHEDULE: &str = "/api/v1/namespaces/{namespace}/schedules/{schedule}";
const POLICIES: &str = "/api/v1/namespaces/{namespace}/policies";
const POLICY: &str = "/api/v1/namespaces/{namespace}/policies/{policy}";

/// What the API shares between requests.
pub struct ApiState {
    /// The Kubernetes client (the operator's).
    pub client: Client,
    /// Users and roles (rebuilt when their Secrets and ConfigMaps change).
    pub access: RwLock<AccessTable>,
    /// Failed logins.
    pub limiter: Mutex<LoginLimiter>,
    /// Signs tokens.
    pub tokens: TokenKey,
    /// The clock.
    pub clock: Arc<dyn Clock>,
}

/// The caller, once authenticated.
#[derive(Clone, Debug)]
pub struct Caller(pub ApiUser);

/// The API's one error shape: `{"code", "reason", "message", "details"}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    details: Value,
}

impl ApiError {
    /// An error with this status and message.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            details: json!({}),
        }
    }

    /// A `400` saying what is wrong with the request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// Whether it is a `404`.
    pub fn is_not_found(&self) -> bool {
        self.status == StatusCode::NOT_FOUND
    }

    /// A Kubernetes API error while doing `what`.
    pub fn kube(what: &str, e: &kube::Error) -> Self {
        match e {
            // The API server's words (validation, not found, conflict), with its code.
            kube::Error::Api(s) => Self {
                status: StatusCode::from_u16(s.code).unwrap_or(StatusCode::BAD_GATEWAY),
                message: format!("{what}: {}", s.message),
                details: json!({"kubernetesReason": s.reason}),
            },
            other => Self::new(
                StatusCode::BAD_GATEWAY,
                format!("{what}: the Kubernetes API did not answer: {other}"),
            ),
        }
    }
}

impl From<Denied> for ApiError {
    fn from(d: Denied) -> Self {
        let status = match d {
            Denied::Unauthenticated => StatusCode::UNAUTHORIZED,
            Denied::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
            Denied::Forbidden { .. } | Denied::OutsideNamespace { .. } => StatusCode::FORBIDDEN,
        };
        Self::new(status, d.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({
            "code": self.status.as_u16(),
            "reason": self.status.canonical_reason().unwrap_or(""),
            "message": self.message,
            "details": self.details,
        });
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"steward\""),
            );
        }
        response
    }
}

/// A JSON request body whose rejection (no or wrong content type, bad JSON, a missing or
/// unknown field) is a `400` in the API's error shape.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: serde::de::DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("request body: {}", rejection.body_text()),
            )),
        }
    }
}

/// The credentials of a request.
enum Credentials {
    Basic(String, String),
    Bearer(String),
}

fn credentials(headers: &HeaderMap) -> Option<Credentials> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    if let Some(token) = value.strip_prefix("Bearer ") {
        return Some(Credentials::Bearer(token.trim().to_owned()));
    }
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let (user, password) = String::from_utf8(decoded)
        .ok()?
        .split_once(':')
        .map(|(u, p)| (u.to_owned(), p.to_owned()))?;
    Some(Credentials::Basic(user, password))
}

/// The namespace a path is about (`/api/v1/namespaces/<ns>/…`).
fn namespace_of(path: &str) -> Option<&str> {
    path.strip_prefix("/api/v1/namespaces/")?.split('/').next()
}

/// (pure) Whether a path segment can be a Kubernetes name (or a database user's name).
fn valid_segment(segment: &str) -> bool {
    !segment.is_empty()
        && segment.len() <= 253
        && !segment.starts_with('.')
        && segment.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.' | b'_')
        })
}

/// Authenticates and authorizes every request against its route's permission.
async fn guard(
    State(state): State<Arc<ApiState>>,
    matched: Option<MatchedPath>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let method = request.method().clone();
    let template = matched
        .as_ref()
        .map(MatchedPath::as_str)
        .unwrap_or_default();
    let Some(route) = ROUTES
        .iter()
        .find(|r| r.path == template && r.method == method.as_str())
    else {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "no such route"));
    };
    let source = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .unwrap_or_else(|| "local".into());
    let now = state.clock.now();
    let user = match credentials(request.headers()) {
        None => return Err(Denied::Unauthenticated.into()),
        Some(Credentials::Bearer(token)) => {
            let name = state.tokens.check(&token, now)?;
            let access = state.access.read().map_err(|_| poisoned())?;
            access.user(&name).cloned().ok_or(Denied::Unauthenticated)?
        }
        Some(Credentials::Basic(name, password)) => {
            state
                .limiter
                .lock()
                .map_err(|_| poisoned())?
                .check(&name, &source, now)?;
            let found = {
                let access = state.access.read().map_err(|_| poisoned())?;
                access.authenticate(&name, &password).cloned()
            };
            state.limiter.lock().map_err(|_| poisoned())?.record(
                &name,
                &source,
                found.is_ok(),
                now,
            );
            found?
        }
    };
    if let Some(permission) = route.permission {
        let namespace = namespace_of(request.uri().path()).map(str::to_owned);
        let access = state.access.read().map_err(|_| poisoned())?;
        access.authorize(&user, permission, namespace.as_deref())?;
    }
    if let Some(segment) = request
        .uri()
        .path()
        .split('/')
        .skip(3)
        .find(|s| !valid_segment(s))
    {
        // Names go into Kubernetes API paths: only what a Kubernetes name may hold, so no
        // encoded `/` or `..` can reach another object than the one the path names.
        let shown: String = segment.chars().take(64).collect();
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("{shown:?} is not a valid name: lower case letters, digits, '-', '.', '_'"),
        ));
    }
    let path = request.uri().path().to_owned();
    let name = user.name.clone();
    request.extensions_mut().insert(Caller(user));
    let response = next.run(request).await;
    if method != Method::GET {
        // The audit line of every call that is not a read (and of logins): who, what, on
        // which object, the outcome. Never a body: bodies carry passwords.
        let permission = route.permission.map_or("Login", Permission::as_str);
        tracing::info!(
            target: "steward::audit",
            user = %name,
            permission = %permission,
            method = %method,
            object = %path,
            source = %source,
            status = response.status().as_u16(),
            "API call"
        );
    }
    Ok(response)
}

fn poisoned() -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "the access table is unavailable",
    )
}

/// The handler of a route of [`ROUTES`]; `None` for a route without one (a test checks there
/// is none).
fn handler(r: &Route) -> Option<MethodRouter<Arc<ApiState>>> {
    use super::{clusters as c, resources as x};
    Some(match (r.method, r.path) {
        ("GET", "/api/v1/version") => get(version),
        ("GET", "/api/v1/health") => get(health),
        ("GET", "/api/v1/openapi.json") => get(openapi),
        ("POST", "/api/v1/login") => post(login),
        ("GET", "/api/v1/clusters") => get(c::list_all),
        ("GET", NS_CLUSTERS) => get(c::list_namespace),
        ("POST", NS_CLUSTERS) => post(c::create),
        ("GET", CLUSTER) => get(c::show),
        ("PATCH", CLUSTER) => patch(c::update),
        ("DELETE", CLUSTER) => delete(c::delete),
        ("POST", SCALE) => post(c::scale),
        ("POST", RESTART) => post(c::restart),
        ("GET", FAILOVER) => get(c::candidates),
        ("POST", FAILOVER) => post(c::failover),
        ("GET", USERS) => get(x::list_users),
        ("POST", USERS) => post(x::create_user),
        ("PUT", USER_PASSWORD) => put(x::rotate_password),
        ("DELETE", USER) => delete(x::delete_user),
        ("GET", BACKUPS) => get(x::list_backups),
        ("POST", BACKUPS) => post(x::create_backup),
        ("GET", BACKUP) => get(x::show_backup),
        ("POST", RESTORE) => post(x::restore),
        ("GET", RESTORE_ONE) => get(x::show_restore),
        ("POST", UPGRADE) => post(x::upgrade),
        ("GET", UPGRADE_ONE) => get(x::show_upgrade),
        ("GET", SCHEDULES) => get(x::list_schedules),
        ("POST", SCHEDULES) => post(x::create_schedule),
        ("DELETE", SCHEDULE) => delete(x::delete_schedule),
        ("GET", POLICIES) => get(x::list_policies),
        ("POST", POLICIES) => post(x::create_policy),
        ("DELETE", POLICY) => delete(x::delete_policy),
        _ => return None,
    })
}

/// The API's router, built from [`ROUTES`].
pub fn router(state: Arc<ApiState>) -> Router {
    let mut by_path: Vec<(&str, MethodRouter<Arc<ApiState>>)> = Vec::new();
    for r in ROUTES {
        let Some(h) = handler(r) else { continue };
        match by_path.iter_mut().find(|(p, _)| *p == r.path) {
            Some((_, existing)) => *existing = std::mem::take(existing).merge(h),
            None => by_path.push((r.path, h)),
        }
    }
    let mut router = Router::new();
    for (path, h) in by_path {
        router = router.route(path, h);
    }
    router
        .route_layer(middleware::from_fn_with_state(state.clone(), guard))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .with_state(state)
}

/// The operator's version.
#[utoipa::path(get, path = "/api/v1/version", tag = "operator",
    responses((status = 200, body = VersionInfo), (status = 401, body = ErrorBody)))]
async fn version() -> axum::Json<Value> {
    axum::Json(json!({"version": env!("CARGO_PKG_VERSION")}))
}

/// Whether the API answers.
#[utoipa::path(get, path = "/api/v1/health", tag = "operator",
    responses((status = 200, body = Health), (status = 401, body = ErrorBody)))]
async fn health() -> axum::Json<Value> {
    axum::Json(json!({"status": "ok"}))
}

/// A bearer token for the caller (logged in with basic auth), valid for an hour.
#[utoipa::path(post, path = "/api/v1/login", tag = "access",
    responses((status = 200, body = LoginAnswer), (status = 401, body = ErrorBody),
        (status = 429, body = ErrorBody)))]
async fn login(
    State(state): State<Arc<ApiState>>,
    axum::Extension(Caller(user)): axum::Extension<Caller>,
) -> axum::Json<Value> {
    let (token, expiry) = state.tokens.issue(&user.name, state.clock.now());
    axum::Json(json!({"token": token, "expires": format_time(expiry), "user": user.name}))
}

/// The OpenAPI document.
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "operator",
    responses((status = 200, description = "The OpenAPI 3 document of this API"),
        (status = 401, body = ErrorBody)))]
async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], openapi_json()).into_response()
}

/// `GET /api/v1/version`.
#[derive(Serialize, utoipa::ToSchema)]
struct VersionInfo {
    /// The operator's version.
    version: String,
}

/// `GET /api/v1/health`.
#[derive(Serialize, utoipa::ToSchema)]
struct Health {
    /// `ok`.
    status: String,
}

/// `POST /api/v1/login`.
#[derive(Serialize, utoipa::ToSchema)]
struct LoginAnswer {
    /// The bearer token (`Authorization: Bearer <token>`).
    token: String,
    /// When it expires (RFC 3339).
    expires: String,
    /// The user it acts as.
    user: String,
}

/// Every error's shape.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// The HTTP status code.
    code: u16,
    /// Its reason phrase.
    reason: String,
    /// What went wrong (never a password or a token).
    message: String,
    /// More, when there is more (e.g. the Kubernetes reason).
    details: Value,
}

/// The API's OpenAPI 3 document (generated from the handlers by `utoipa`).
#[derive(utoipa::OpenApi)]
#[openapi(
    info(title = "Steward API", description = "Steward's REST API. Every call needs basic auth or a bearer token from /api/v1/login, and one permission (docs/api.md)."),
    paths(version, health, openapi, login,
        super::clusters::list_all, super::clusters::list_namespace, super::clusters::create,
        super::clusters::show, super::clusters::update, super::clusters::delete,
        super::clusters::scale, super::clusters::restart, super::clusters::candidates,
        super::clusters::failover,
        super::resources::list_users, super::resources::create_user,
        super::resources::rotate_password, super::resources::delete_user,
        super::resources::list_backups, super::resources::create_backup,
        super::resources::show_backup, super::resources::restore, super::resources::upgrade,
        super::resources::show_upgrade,
        super::resources::show_restore,
        super::resources::list_schedules, super::resources::create_schedule,
        super::resources::delete_schedule, super::resources::list_policies,
        super::resources::create_policy, super::resources::delete_policy),
    modifiers(&Security),
    security(("basic" = []), ("bearer" = []))
)]
struct ApiDoc;

struct Security;

/// A path parameter's schema: a name of 1 to 253 characters (`valid_segment` says which), with an example (the names the
/// fuzz test creates, so generated calls reach real objects) and the engines as an enum.
fn path_parameter(name: &str) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let builder = ObjectBuilder::new().schema_type(Type::String);
    let builder = match name {
        "engine" => builder.enum_values(Some(["etcd", "postgres", "cratedb"])),
        _ => {
            let example = match name {
                "namespace" => "team",
                "user" => "app",
                "backup" => "demo-full",
                "schedule" => "nightly",
                "policy" => "grants",
                _ => "demo",
            };
            builder
                .min_length(Some(1))
                .max_length(Some(253))
                .examples([example])
        }
    };
    utoipa::openapi::RefOr::T(builder.build().into())
}

impl utoipa::Modify for Security {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::path::ParameterIn;
        for item in doc.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in operations.into_iter().flatten() {
                for p in op.parameters.iter_mut().flatten() {
                    if matches!(p.parameter_in, ParameterIn::Path) {
                        p.schema = Some(path_parameter(&p.name));
                    }
                }
            }
        }
        use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "basic",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Basic)),
        );
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// The OpenAPI document as pretty JSON (committed as `docs/openapi.json`).
pub fn openapi_json() -> String {
    use utoipa::OpenApi;
    ApiDoc::openapi().to_pretty_json().unwrap_or_default() + "\n"
}

/// A request to the router, for tests and the benchmark.
pub fn request(method: Method, path: &str, auth: Option<&str>) -> Request<Body> {
    let mut builder = Request::builder().method(method).uri(path);
    if let Some(auth) = auth {
        builder = builder.header(header::AUTHORIZATION, auth);
    }
    builder.body(Body::empty()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::access::hash_password;
    use crate::api::permissions::builtin_roles;
    use crate::clock::ManualClock;
    use kube::api::Api;
    use std::collections::BTreeMap;
    use steward_api::postgres::PostgresCluster;
    use tower::ServiceExt;

    fn user(name: &str, roles: &str, namespaces: Option<&str>) -> ApiUser {
        let mut data = BTreeMap::from([
            ("username".to_owned(), name.as_bytes().to_vec()),
            (
                "password-hash".to_owned(),
                hash_password(&format!("{name}-pw")).unwrap().into_bytes(),
            ),
            ("roles".to_owned(), roles.as_bytes().to_vec()),
        ]);
        if let Some(ns) = namespaces {
            data.insert("namespaces".to_owned(), ns.as_bytes().to_vec());
        }
        ApiUser::from_data(&data).unwrap()
    }

    fn basic(name: &str, password: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{name}:{password}"))
        )
    }

    async fn call(
        app: &Router,
        method: &str,
        path: &str,
        auth: Option<&str>,
    ) -> (StatusCode, Value) {
        let response = app
            .clone()
            .oneshot(request(method.parse().unwrap(), path, auth))
            .await
            .unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// The concrete path of a template: the namespace `team-b`, the engine `postgres`.
    fn concrete(template: &str) -> String {
        template
            .replace("{namespace}", "team-b")
            .replace("{engine}", "postgres")
            .split('/')
            .map(|s| if s.starts_with('{') { "demo" } else { s })
            .collect::<Vec<_>>()
            .join("/")
    }

    #[tokio::test]
    async fn every_route_is_allowed_or_denied_exactly_as_the_permission_table_says() {
        let plane = crate::embedded::Embedded::start(&["team-a", "team-b"])
            .await
            .unwrap();
        let users = vec![
            user("ann", "admin", None),
            user("ops", "operator", None),
            user("ro", "readonly", None),
            user("scoped", "operator", Some("team-a")),
        ];
        let state = Arc::new(ApiState {
            client: plane.client.clone(),
            access: RwLock::new(AccessTable::new(users.clone(), Vec::new())),
            limiter: Mutex::default(),
            tokens: TokenKey::new(&[9; 32]).unwrap(),
            clock: Arc::new(ManualClock::new("2026-11-26T10:00:00Z".parse().unwrap())),
        });
        let app = router(state);
        // Every route of the table has a handler: the router is built from the table.
        for r in ROUTES {
            assert!(handler(r).is_some(), "{r:?} has no handler");
        }
        let roles = builtin_roles();
        for r in ROUTES {
            let path = concrete(r.path);
            let (status, body) = call(&app, r.method, &path, None).await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{r:?} without credentials"
            );
            assert_eq!(body["code"], 401, "{body}");
            let (status, _) = call(&app, r.method, &path, Some(&basic("ann", "wrong"))).await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{r:?} with a wrong password"
            );
            for u in &users {
                let (status, body) = call(
                    &app,
                    r.method,
                    &path,
                    Some(&basic(&u.name, &format!("{}-pw", u.name))),
                )
                .await;
                let granted = r.permission.is_none_or(|p| {
                    u.roles.iter().any(|name| {
                        roles
                            .iter()
                            .any(|role| &role.name == name && role.permissions.contains(&p))
                    })
                });
                let in_scope = u.in_namespace(namespace_of(&path));
                if granted && in_scope {
                    // Allowed: the handler ran (no body and no cluster `demo`: a success, a
                    // 400 or a 404, always in the API's shapes).
                    assert!(
                        status.is_success()
                            || status == StatusCode::NOT_FOUND
                            || status == StatusCode::BAD_REQUEST,
                        "{} on {r:?}: {status} {body}",
                        u.name
                    );
                    if !status.is_success() {
                        assert_eq!(body["code"], status.as_u16(), "{r:?}: {body}");
                    }
                } else {
                    assert_eq!(status, StatusCode::FORBIDDEN, "{} on {r:?}: {body}", u.name);
                    assert_eq!(body["code"], 403);
                }
            }
        }
        // An unknown route is a 404 in the same shape.
        let (status, body) = call(
            &app,
            "GET",
            "/api/v1/nothing",
            Some(&basic("ann", "ann-pw")),
        )
        .await;
        assert_eq!(
            (status, body["code"].clone()),
            (StatusCode::NOT_FOUND, json!(404))
        );
    }

    #[test]
    fn the_openapi_document_lists_every_route_and_docs_has_the_current_one() {
        let doc: Value = serde_json::from_str(&openapi_json()).unwrap();
        for r in ROUTES {
            let op = &doc["paths"][r.path][r.method.to_lowercase()];
            assert!(op.is_object(), "{r:?} is not in the OpenAPI document");
        }
        let paths = doc["paths"].as_object().unwrap();
        let operations: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
        assert_eq!(operations, ROUTES.len(), "no operation without a route");
        let committed = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/openapi.json"
        ))
        .unwrap_or_default();
        assert!(
            committed == openapi_json(),
            "docs/openapi.json is stale: cargo run -p steward-operator -- openapi > docs/openapi.json"
        );
    }

    #[tokio::test]
    async fn a_token_acts_as_its_user_within_its_namespaces_and_clusters_are_listed_in_scope() {
        let plane = crate::embedded::Embedded::start(&["team-a", "team-b"])
            .await
            .unwrap();
        for ns in ["team-a", "team-b"] {
            let api: Api<PostgresCluster> = Api::namespaced(plane.client.clone(), ns);
            let c = PostgresCluster::new(
                &format!("pg-{ns}"),
                steward_api::postgres::PostgresClusterSpec::new(1, "15"),
            );
            api.create(&Default::default(), &c).await.unwrap();
        }
        let state = Arc::new(ApiState {
            client: plane.client.clone(),
            access: RwLock::new(AccessTable::new(
                vec![user("scoped", "operator", Some("team-a"))],
                Vec::new(),
            )),
            limiter: Mutex::default(),
            tokens: TokenKey::new(&[9; 32]).unwrap(),
            clock: Arc::new(ManualClock::new("2026-11-26T10:00:00Z".parse().unwrap())),
        });
        let app = router(state);
        let (status, body) = call(
            &app,
            "POST",
            "/api/v1/login",
            Some(&basic("scoped", "scoped-pw")),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let bearer = format!("Bearer {}", body["token"].as_str().unwrap());
        let (status, body) = call(&app, "GET", "/api/v1/clusters", Some(&bearer)).await;
        assert_eq!(status, StatusCode::OK);
        let names: Vec<&str> = body["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["pg-team-a"],
            "only the user's namespaces are listed"
        );
        let (status, body) = call(
            &app,
            "GET",
            "/api/v1/namespaces/team-a/clusters/postgres/pg-team-a",
            Some(&bearer),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["spec"]["instances"], 1);
        let (status, _) = call(
            &app,
            "GET",
            "/api/v1/namespaces/team-b/clusters/postgres/pg-team-b",
            Some(&bearer),
        )
        .await;
        assert_eq!(
            status,
            StatusCode::FORBIDDEN,
            "a token for one namespace cannot read another"
        );
        let (status, body) = call(
            &app,
            "GET",
            "/api/v1/namespaces/team-a/clusters/mysql/x",
            Some(&bearer),
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(body["message"].as_str().unwrap().contains("unknown engine"));
        // Five wrong passwords from one source lock the user out there, with 429.
        for _ in 0..LoginLimiter::MAX_FAILURES {
            call(
                &app,
                "GET",
                "/api/v1/version",
                Some(&basic("scoped", "nope")),
            )
            .await;
        }
        let (status, body) = call(
            &app,
            "GET",
            "/api/v1/version",
            Some(&basic("scoped", "scoped-pw")),
        )
        .await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        // The bearer token still works: the limiter guards password logins.
        let (status, _) = call(&app, "GET", "/api/v1/version", Some(&bearer)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(!body.to_string().contains("scoped-pw"));
    }
}
