//! The REST API's router (issue 15, first part): the route table — every route with the one
//! permission it needs, the single source the router is built from —, authentication (basic
//! auth or a bearer token from `POST /api/v1/login`, failed logins limited per user and
//! source), authorization (the user's roles and namespaces), one JSON error shape, and the
//! read-only routes built so far. Not served by the operator yet (no HTTPS listener): tests
//! drive the router directly.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, MatchedPath, Path, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use base64::Engine;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;
use serde_json::{Value, json};
use steward_api::etcd::EtcdCluster;
use steward_api::postgres::PostgresCluster;

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
    route(
        "GET",
        "/api/v1/namespaces/{namespace}/clusters",
        Some(Permission::ShowCluster),
    ),
    route(
        "GET",
        "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}",
        Some(Permission::ShowCluster),
    ),
];

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
struct Caller(ApiUser);

/// The API's one error shape: `{"code", "reason", "message", "details"}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    details: Value,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            details: json!({}),
        }
    }

    fn kube(what: &str, e: &kube::Error) -> Self {
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
    request.extensions_mut().insert(Caller(user));
    Ok(next.run(request).await)
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
    Some(match (r.method, r.path) {
        ("GET", "/api/v1/version") => get(version),
        ("GET", "/api/v1/health") => get(health),
        ("GET", "/api/v1/openapi.json") => get(openapi),
        ("POST", "/api/v1/login") => post(login),
        ("GET", "/api/v1/clusters") => get(list_all),
        ("GET", "/api/v1/namespaces/{namespace}/clusters") => get(list_namespace),
        ("GET", "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}") => get(show),
        _ => return None,
    })
}

/// The API's router, built from [`ROUTES`].
pub fn router(state: Arc<ApiState>) -> Router {
    let mut router = Router::new();
    for r in ROUTES {
        if let Some(h) = handler(r) {
            router = router.route(r.path, h);
        }
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

/// One line of a cluster list.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct ClusterSummary {
    engine: &'static str,
    namespace: String,
    name: String,
    available: Option<String>,
    operation: Option<String>,
}

fn summary<K: ResourceExt>(
    engine: &'static str,
    o: &K,
    common: Option<&steward_api::common::CommonStatus>,
) -> ClusterSummary {
    let available = common.and_then(|c| {
        c.conditions
            .iter()
            .find(|c| c.type_ == "Available")
            .map(|c| c.status.clone())
    });
    ClusterSummary {
        engine,
        namespace: o.namespace().unwrap_or_default(),
        name: o.name_any(),
        available,
        operation: common
            .and_then(|c| c.operation.as_ref())
            .map(|op| op.kind.as_str().to_owned()),
    }
}

async fn clusters_in(
    client: &Client,
    namespace: Option<&str>,
) -> Result<Vec<ClusterSummary>, ApiError> {
    let lp = ListParams::default();
    let (etcd, postgres): (Api<EtcdCluster>, Api<PostgresCluster>) = match namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let mut out: Vec<ClusterSummary> = etcd
        .list(&lp)
        .await
        .map_err(|e| ApiError::kube("list EtcdClusters", &e))?
        .items
        .iter()
        .map(|c| summary("etcd", c, c.status.as_ref().map(|s| &s.common)))
        .collect();
    out.extend(
        postgres
            .list(&lp)
            .await
            .map_err(|e| ApiError::kube("list PostgresClusters", &e))?
            .items
            .iter()
            .map(|c| summary("postgres", c, c.status.as_ref().map(|s| &s.common))),
    );
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Ok(out)
}

/// Clusters of every engine in the caller's namespaces.
#[utoipa::path(get, path = "/api/v1/clusters", tag = "clusters",
    responses((status = 200, body = ClusterList), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody)))]
async fn list_all(
    State(state): State<Arc<ApiState>>,
    axum::Extension(Caller(user)): axum::Extension<Caller>,
) -> Result<axum::Json<Value>, ApiError> {
    let mut all = clusters_in(&state.client, None).await?;
    all.retain(|c| user.in_namespace(Some(&c.namespace)));
    Ok(axum::Json(json!({"clusters": all})))
}

/// Clusters of every engine in a namespace.
#[utoipa::path(get, path = "/api/v1/namespaces/{namespace}/clusters", tag = "clusters",
    params(("namespace" = String, Path, description = "The namespace")),
    responses((status = 200, body = ClusterList), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody)))]
async fn list_namespace(
    State(state): State<Arc<ApiState>>,
    Path(namespace): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let all = clusters_in(&state.client, Some(&namespace)).await?;
    Ok(axum::Json(json!({"clusters": all})))
}

/// One cluster: its spec and status (conditions, operation and progress).
#[utoipa::path(get, path = "/api/v1/namespaces/{namespace}/clusters/{engine}/{name}",
    tag = "clusters",
    params(("namespace" = String, Path, description = "The namespace"),
        ("engine" = String, Path, description = "`etcd` or `postgres`"),
        ("name" = String, Path, description = "The cluster")),
    responses((status = 200, body = ClusterDetail), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn show(
    State(state): State<Arc<ApiState>>,
    Path((namespace, engine, name)): Path<(String, String, String)>,
) -> Result<axum::Json<Value>, ApiError> {
    let not_found = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("{engine} cluster {namespace}/{name} does not exist"),
        )
    };
    let body = match engine.as_str() {
        "etcd" => {
            let api: Api<EtcdCluster> = Api::namespaced(state.client.clone(), &namespace);
            let c = api
                .get_opt(&name)
                .await
                .map_err(|e| ApiError::kube("get EtcdCluster", &e))?
                .ok_or_else(not_found)?;
            json!({"engine": "etcd", "namespace": namespace, "name": name, "spec": c.spec, "status": c.status})
        }
        "postgres" => {
            let api: Api<PostgresCluster> = Api::namespaced(state.client.clone(), &namespace);
            let c = api
                .get_opt(&name)
                .await
                .map_err(|e| ApiError::kube("get PostgresCluster", &e))?
                .ok_or_else(not_found)?;
            json!({"engine": "postgres", "namespace": namespace, "name": name, "spec": c.spec, "status": c.status})
        }
        other => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("unknown engine {other:?}: etcd or postgres"),
            ));
        }
    };
    Ok(axum::Json(body))
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

/// A list of clusters.
#[derive(Serialize, utoipa::ToSchema)]
struct ClusterList {
    /// The clusters, by namespace and name.
    clusters: Vec<ClusterSummary>,
}

/// One cluster.
#[derive(Serialize, utoipa::ToSchema)]
struct ClusterDetail {
    /// `etcd` or `postgres`.
    engine: String,
    /// Its namespace.
    namespace: String,
    /// Its name.
    name: String,
    /// Its spec (the engine's custom resource's).
    spec: Value,
    /// Its status: conditions, the operation in progress and its progress.
    status: Option<Value>,
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
    info(title = "Steward API", description = "Steward's REST API (issue 15: the first routes). Every call needs basic auth or a bearer token from /api/v1/login, and one permission (docs/api.md)."),
    paths(version, health, openapi, login, list_all, list_namespace, show),
    modifiers(&Security),
    security(("basic" = []), ("bearer" = []))
)]
struct ApiDoc;

struct Security;

impl utoipa::Modify for Security {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
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
    use std::collections::BTreeMap;
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
            .replace("{name}", "demo")
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
                    assert!(
                        status.is_success() || status == StatusCode::NOT_FOUND,
                        "{} on {r:?}: {status} {body}",
                        u.name
                    );
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
