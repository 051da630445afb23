//! Serving the REST API over HTTPS on every replica: [`start`] loads (or creates) the serving
//! certificate and token key, makes the initial admin when there is no API user, keeps the
//! access table current and serves [`super::server::router`] with [`serve_https`] — TLS
//! (rustls), HTTP/1.1 and HTTP/2, the peer address handed to the login limiter, graceful
//! shutdown. Plain HTTP to the port fails the TLS handshake and is never served.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::extract::ConnectInfo;
use kube::Client;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::access::AccessTable;
use super::bootstrap::{self, BootstrapError};
use super::server::{ApiState, router};
use super::tls::{self, ServingCert, TlsError};
use super::tokens::TokenKey;
use crate::clock::Clock;

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections may finish their requests at shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`start`] waits for the first list of users and roles before serving.
const LOAD_PATIENCE: Duration = Duration::from_secs(30);
/// How long [`start`] keeps trying when the Kubernetes API does not answer.
const START_PATIENCE: Duration = Duration::from_secs(60);

/// Binds `addr` and serves the API over HTTPS with `cert` until `shutdown` is cancelled, then
/// lets open connections finish (at most [`DRAIN_TIMEOUT`]). Returns the bound address.
pub async fn serve_https(
    addr: SocketAddr,
    cert: &ServingCert,
    state: Arc<ApiState>,
    shutdown: CancellationToken,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    let config = cert
        .server_config()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = router(state);
    let task = tokio::spawn(async move {
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        loop {
            let (tcp, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(pair) => pair,
                    Err(err) => {
                        tracing::warn!(error = %err, "API: accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = shutdown.cancelled() => break,
            };
            let acceptor = acceptor.clone();
            let app = app.clone();
            let watcher = graceful.watcher();
            tokio::spawn(async move {
                let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp))
                    .await
                {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(err)) => {
                        tracing::debug!(peer = %peer, error = %err, "API: TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(peer = %peer, "API: TLS handshake timed out");
                        return;
                    }
                };
                // The router's login limiter reads the peer address from the request.
                let service = tower::ServiceExt::map_request(
                    app,
                    move |mut request: axum::http::Request<_>| {
                        request.extensions_mut().insert(ConnectInfo(peer));
                        request
                    },
                );
                let service = hyper_util::service::TowerToHyperService::new(service);
                let builder = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                let conn = builder
                    .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(stream), service);
                if let Err(err) = watcher.watch(conn).await {
                    tracing::debug!(peer = %peer, error = %err, "API: connection ended");
                }
            });
        }
        drop(listener);
        if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("API: connections still open after the drain timeout; closed");
        }
    });
    Ok((bound, task))
}

/// Why the API could not start.
#[derive(Debug, thiserror::Error)]
pub enum ApiStartError {
    /// The serving certificate or token key.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The token key is unusable.
    #[error("the API's token key is unusable: {0}")]
    TokenKey(String),
    /// The initial admin user.
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// The listener could not be bound.
    #[error("binding the API's HTTPS listener {addr} failed: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl ApiStartError {
    /// A stable label for metrics and events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Tls(e) => e.category(),
            Self::TokenKey(_) => "token-key",
            Self::Bootstrap(_) => "initial-admin",
            Self::Bind { .. } => "bind",
        }
    }
}

/// What [`start`] needs.
#[derive(Clone, Debug)]
pub struct ApiSettings {
    /// Where to listen.
    pub addr: SocketAddr,
    /// The operator's own namespace: the TLS Secret, users, roles and the initial admin.
    pub namespace: String,
    /// The TLS Secret's name.
    pub tls_secret: String,
    /// Host names besides the defaults ([`tls::default_hostnames`]).
    pub hostnames: Vec<String>,
}

/// A running API.
#[derive(Debug)]
pub struct RunningApi {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The CA clients trust (PEM; empty for a provided certificate without `ca.crt`).
    pub ca_pem: String,
    /// Ends after `shutdown` is cancelled, once the listener and the watch have stopped.
    pub task: JoinHandle<()>,
}

/// Retries `attempt` while it fails transiently, for at most [`START_PATIENCE`] or until
/// `shutdown`; a lasting failure is returned at once.
async fn patiently<T, E: std::fmt::Display, F: Future<Output = Result<T, E>>>(
    what: &str,
    transient: impl Fn(&E) -> bool,
    shutdown: &CancellationToken,
    mut attempt: impl FnMut() -> F,
) -> Result<T, E> {
    let deadline = tokio::time::Instant::now() + START_PATIENCE;
    let mut pause = Duration::from_millis(200);
    loop {
        match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) if transient(&e) && tokio::time::Instant::now() < deadline => {
                tracing::warn!(error = %e, retry_in = ?pause, "API: {what} failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = shutdown.cancelled() => return Err(e),
                }
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Starts the API: the certificate and token key ([`tls::load_or_create`]), the initial admin
/// ([`bootstrap::ensure_initial_admin`]), the watch of users and roles
/// ([`super::watch::run`]) and the listener. Transient Kubernetes API failures are retried
/// for up to a minute; a refusal (RBAC, a missing namespace), an unusable Secret or a port in
/// use is returned at once. Everything stops when `shutdown` is cancelled.
pub async fn start(
    client: Client,
    settings: &ApiSettings,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
) -> Result<RunningApi, ApiStartError> {
    let ns = settings.namespace.as_str();
    let hostnames = tls::default_hostnames(ns, &settings.hostnames);
    let (cert, key) = patiently(
        "loading the serving certificate",
        TlsError::is_transient,
        &shutdown,
        || tls::load_or_create(&client, ns, &settings.tls_secret, &hostnames),
    )
    .await?;
    let tokens = TokenKey::new(&key).map_err(ApiStartError::TokenKey)?;
    patiently(
        "creating the initial admin",
        BootstrapError::is_transient,
        &shutdown,
        || bootstrap::ensure_initial_admin(&client, ns),
    )
    .await?;
    let state = Arc::new(ApiState {
        client: client.clone(),
        access: RwLock::new(AccessTable::default()),
        limiter: Mutex::default(),
        tokens,
        clock,
    });
    let (loaded_tx, loaded) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(super::watch::run(
        client,
        ns.to_owned(),
        state.clone(),
        shutdown.clone(),
        loaded_tx,
    ));
    // Serve once users and roles are known, so a valid login is not refused (and counted as a
    // failure by the limiter) in the first moments; without them after a while (say the
    // watch is refused), logging why.
    tokio::select! {
        _ = loaded => {}
        () = tokio::time::sleep(LOAD_PATIENCE) => tracing::warn!(
            namespace = ns,
            "API: users and roles not loaded yet; serving anyway (logins fail until they are)"
        ),
        () = shutdown.cancelled() => {}
    }
    let (addr, serve) = match serve_https(settings.addr, &cert, state, shutdown.clone()).await {
        Ok(v) => v,
        Err(source) => {
            watch.abort();
            return Err(ApiStartError::Bind {
                addr: settings.addr,
                source,
            });
        }
    };
    tracing::info!(addr = %addr, namespace = ns, secret = %settings.tls_secret, "API: serving HTTPS");
    let task = tokio::spawn(async move {
        if let Err(err) = serve.await {
            tracing::warn!(error = %err, "API: the listener task ended abnormally");
        }
        if let Err(err) = watch.await {
            tracing::warn!(error = %err, "API: the users and roles watch ended abnormally");
        }
    });
    Ok(RunningApi {
        addr,
        ca_pem: cert.ca_pem,
        task,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};

    use super::*;
    use crate::api::access::{USER_LABEL, hash_password};
    use crate::api::permissions::Permission;
    use crate::api::watch::ROLE_LABEL;
    use crate::clock::SystemClock;
    use crate::embedded::Embedded;

    const NS: &str = "steward-system";

    async fn plane() -> Embedded {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Embedded::start(&[NS, "team-a"]).await.unwrap()
    }

    /// An HTTPS client trusting only `ca_pem`.
    fn https(ca_pem: &str) -> reqwest::Client {
        reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap()])
            .build()
            .unwrap()
    }

    async fn health(http: &reqwest::Client, addr: SocketAddr, user: &str, pw: &str) -> u16 {
        http.get(format!("https://127.0.0.1:{}/api/v1/health", addr.port()))
            .basic_auth(user, Some(pw))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    fn user_secret(namespace: &str, name: &str, user: &str, password: &str, roles: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                labels: Some(BTreeMap::from([(USER_LABEL.to_owned(), "true".to_owned())])),
                ..Default::default()
            },
            // Written as people write it; the API server folds `stringData` into `data`,
            // which is all the watch reads.
            string_data: Some(
                [
                    ("username", user.to_owned()),
                    ("password-hash", hash_password(password).unwrap()),
                    ("roles", roles.to_owned()),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            ),
            ..Default::default()
        }
    }

    /// Polls `check` until it holds (the deadline only guards against a hang).
    async fn until(what: &str, mut check: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !check() {
            assert!(tokio::time::Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn the_api_is_served_over_https_to_the_initial_admin_and_never_over_plain_http() {
        let plane = plane().await;
        let logs = crate::api::test_logs::CapturedLogs::install();
        let shutdown = CancellationToken::new();
        let settings = ApiSettings {
            addr: "127.0.0.1:0".parse().unwrap(),
            namespace: NS.into(),
            tls_secret: tls::DEFAULT_SECRET.into(),
            hostnames: Vec::new(),
        };
        let api = start(
            plane.client.clone(),
            &settings,
            Arc::new(SystemClock),
            shutdown.clone(),
        )
        .await
        .unwrap();
        let password = bootstrap::initial_password(&plane.client, NS)
            .await
            .unwrap()
            .unwrap();
        let http = https(&api.ca_pem);
        assert_eq!(health(&http, api.addr, "admin", &password).await, 200);
        assert_eq!(health(&http, api.addr, "admin", "wrong").await, 401);
        // A client that does not trust the CA does not get through.
        let other = ServingCert::generate(&["localhost".into()]).unwrap();
        let untrusting = https(&other.ca_pem);
        assert!(
            untrusting
                .get(format!(
                    "https://127.0.0.1:{}/api/v1/health",
                    api.addr.port()
                ))
                .send()
                .await
                .is_err()
        );
        // Plain HTTP to the port: the TLS handshake fails, nothing is served.
        let plain = reqwest::get(format!(
            "http://127.0.0.1:{}/api/v1/health",
            api.addr.port()
        ))
        .await;
        assert!(plain.is_err(), "plain HTTP answered: {plain:?}");
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(api.addr).await.unwrap();
        tcp.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        let _ = tcp.read_to_end(&mut answer).await;
        assert!(!answer.starts_with(b"HTTP/"), "{answer:?}");
        // A second start (another replica, a restart) serves the same certificate.
        let again = start(
            plane.client.clone(),
            &settings,
            Arc::new(SystemClock),
            shutdown.clone(),
        )
        .await
        .unwrap();
        assert_eq!(again.ca_pem, api.ca_pem);
        assert_eq!(health(&http, again.addr, "admin", &password).await, 200);
        shutdown.cancel();
        api.task.await.unwrap();
        again.task.await.unwrap();
        // The port is closed after shutdown.
        assert!(tokio::net::TcpStream::connect(api.addr).await.is_err());
        assert!(!logs.text().contains(&password));
    }

    #[tokio::test]
    async fn users_and_roles_come_and_go_with_their_secrets_and_configmaps_in_the_operator_namespace_only()
     {
        let plane = plane().await;
        let shutdown = CancellationToken::new();
        let cert = ServingCert::generate(&tls::default_hostnames(NS, &[])).unwrap();
        let state = Arc::new(ApiState {
            client: plane.client.clone(),
            access: RwLock::new(AccessTable::default()),
            limiter: Mutex::default(),
            tokens: TokenKey::new(&[5; 32]).unwrap(),
            clock: Arc::new(SystemClock),
        });
        let (loaded_tx, loaded) = tokio::sync::oneshot::channel();
        let watch = tokio::spawn(crate::api::watch::run(
            plane.client.clone(),
            NS.into(),
            state.clone(),
            shutdown.clone(),
            loaded_tx,
        ));
        loaded.await.unwrap();
        let (addr, serve) = serve_https(
            "127.0.0.1:0".parse().unwrap(),
            &cert,
            state.clone(),
            shutdown.clone(),
        )
        .await
        .unwrap();
        let http = https(&cert.ca_pem);
        let secrets_ns: Api<Secret> = Api::namespaced(plane.client.clone(), NS);
        let secrets_team: Api<Secret> = Api::namespaced(plane.client.clone(), "team-a");
        let maps: Api<ConfigMap> = Api::namespaced(plane.client.clone(), NS);
        let pp = PostParams::default();
        // A would-be admin in an application namespace, then a user in the operator's.
        secrets_team
            .create(
                &pp,
                &user_secret("team-a", "mallory", "mallory", "m-pw", "admin"),
            )
            .await
            .unwrap();
        secrets_ns
            .create(&pp, &user_secret(NS, "carl", "carl", "c-pw", "viewer"))
            .await
            .unwrap();
        let has = |name: &str| state.access.read().unwrap().user(name).is_some();
        until("carl is a user", || has("carl")).await;
        assert!(
            !has("mallory"),
            "a user Secret outside the operator's namespace counted"
        );
        assert_eq!(health(&http, addr, "mallory", "m-pw").await, 401);
        // carl's role does not exist yet: authenticated, not authorized.
        assert_eq!(health(&http, addr, "carl", "c-pw").await, 403);
        let role = ConfigMap {
            metadata: ObjectMeta {
                name: Some("viewer-role".into()),
                labels: Some(BTreeMap::from([(ROLE_LABEL.to_owned(), "true".to_owned())])),
                ..Default::default()
            },
            data: Some(BTreeMap::from([
                ("name".to_owned(), "viewer".to_owned()),
                (
                    "permissions".to_owned(),
                    "ShowVersion ShowCluster".to_owned(),
                ),
            ])),
            ..Default::default()
        };
        maps.create(&pp, &role).await.unwrap();
        let granted = || {
            let access = state.access.read().unwrap();
            access
                .user("carl")
                .is_some_and(|u| access.authorize(u, Permission::ShowVersion, None).is_ok())
        };
        until("the viewer role grants ShowVersion", granted).await;
        assert_eq!(health(&http, addr, "carl", "c-pw").await, 200);
        // Removing the Secret removes the user.
        secrets_ns
            .delete("carl", &DeleteParams::default())
            .await
            .unwrap();
        until("carl is gone", || !has("carl")).await;
        assert_eq!(health(&http, addr, "carl", "c-pw").await, 401);
        shutdown.cancel();
        serve.await.unwrap();
        watch.await.unwrap();
    }
}
