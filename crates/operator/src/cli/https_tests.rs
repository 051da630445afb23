//! The client against the real API router served over HTTPS (`serve_https`) with a generated
//! certificate: it trusts that CA only, logs in with basic auth, then sends the stored token.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use reqwest::Method;
use tokio_util::sync::CancellationToken;

use super::CliError;
use super::args::{ApiUserOpt, ClientCommand, ClientOpts, LoginArgs, VersionArgs};
use super::client::ApiClient;
use super::config::{Credentials, Env, Overrides, resolve};
use crate::api::access::{AccessTable, ApiUser, hash_password};
use crate::api::listen::serve_https;
use crate::api::server::ApiState;
use crate::api::tls::ServingCert;
use crate::api::tokens::TokenKey;
use crate::clock::SystemClock;

fn user(name: &str, password: &str) -> ApiUser {
    let data = BTreeMap::from([
        ("username".to_owned(), name.as_bytes().to_vec()),
        (
            "password-hash".to_owned(),
            hash_password(password).unwrap().into_bytes(),
        ),
        ("roles".to_owned(), b"admin".to_vec()),
    ]);
    ApiUser::from_data(&data).unwrap()
}

fn config_text(port: u16, ca: &str, password: &str, token: Option<&str>) -> String {
    let mut text = format!("server: https://127.0.0.1:{port}\nca: |\n");
    for line in ca.lines() {
        text.push_str(&format!("  {line}\n"));
    }
    text.push_str(&format!(
        "username: ann\npassword: {password}\nnamespace: default\n"
    ));
    if let Some(t) = token {
        text.push_str(&format!("token: {t}\ntokenExpires: 2099-01-01T00:00:00Z\n"));
    }
    text
}

fn client_for(path: &Path) -> (ApiClient, Credentials) {
    let flags = Overrides {
        config: Some(path.to_path_buf()),
        ..Overrides::default()
    };
    let settings = resolve(
        &flags,
        &Env::default(),
        Path::new("/"),
        jiff::Timestamp::now(),
    )
    .unwrap();
    (ApiClient::new(&settings).unwrap(), settings.credentials)
}

fn opts(path: &Path) -> ClientOpts {
    ClientOpts {
        config: Some(path.to_path_buf()),
        ..ClientOpts::default()
    }
}

#[tokio::test]
async fn the_client_trusts_only_its_ca_and_logs_in_then_uses_the_token() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cert = ServingCert::generate(&["127.0.0.1".into(), "localhost".into()]).unwrap();
    // The routes used here never reach Kubernetes: a client for a closed port will do.
    let kube =
        kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
    let state = Arc::new(ApiState {
        client: kube,
        access: RwLock::new(AccessTable::new(vec![user("ann", "ann-pw")], Vec::new())),
        limiter: Mutex::default(),
        tokens: TokenKey::new(&[7; 32]).unwrap(),
        clock: Arc::new(SystemClock),
    });
    let stop = CancellationToken::new();
    let (addr, task) = serve_https("127.0.0.1:0".parse().unwrap(), &cert, state, stop.clone())
        .await
        .unwrap();
    let port = addr.port();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("cli.yaml");

    // Basic auth, the server's CA trusted.
    std::fs::write(&path, config_text(port, &cert.ca_pem, "ann-pw", None)).unwrap();
    let (client, credentials) = client_for(&path);
    assert!(matches!(credentials, Credentials::Basic { .. }));
    let answer = client
        .call(Method::GET, "/api/v1/version", None)
        .await
        .unwrap();
    assert_eq!(answer["version"], env!("CARGO_PKG_VERSION"));

    // Another CA's certificate is refused: the built-in roots are not trusted either.
    let other = ServingCert::generate(&["127.0.0.1".into()]).unwrap();
    let other_path = tmp.path().join("other.yaml");
    std::fs::write(
        &other_path,
        config_text(port, &other.ca_pem, "ann-pw", None),
    )
    .unwrap();
    let (other_client, _) = client_for(&other_path);
    let err = other_client
        .call(Method::GET, "/api/v1/version", None)
        .await
        .unwrap_err();
    assert!(matches!(err, CliError::Connect { .. }), "{err}");

    // A wrong password: the API's error, as the user reads it.
    let wrong = tmp.path().join("wrong.yaml");
    std::fs::write(&wrong, config_text(port, &cert.ca_pem, "nope", None)).unwrap();
    let err = client_for(&wrong)
        .0
        .call(Method::GET, "/api/v1/version", None)
        .await
        .unwrap_err();
    assert!(matches!(err, CliError::Api { code: 401, .. }), "{err}");
    assert!(err.to_string().ends_with("(HTTP 401)"), "{err}");

    // `steward login` stores the token in the file in use; the output shows no token.
    let out = super::run(
        ClientCommand::Login(LoginArgs {
            api_user: ApiUserOpt::default(),
            opts: opts(&path),
        }),
        &Env::default(),
        tmp.path(),
    )
    .await
    .unwrap();
    assert!(out.contains("logged in as ann"), "{out}");
    let text = std::fs::read_to_string(&path).unwrap();
    let token = text
        .lines()
        .find_map(|l| l.strip_prefix("token: "))
        .unwrap()
        .to_string();
    assert!(!out.contains(&token));
    assert!(text.contains("tokenExpires: "), "{text}");

    // Later calls send the token: with a wrong password beside it, they still pass.
    std::fs::write(&path, config_text(port, &cert.ca_pem, "nope", Some(&token))).unwrap();
    let (client, credentials) = client_for(&path);
    assert_eq!(credentials, Credentials::Token(token.clone()));
    client
        .call(Method::GET, "/api/v1/health", None)
        .await
        .unwrap();
    let out = super::run(
        ClientCommand::Version(VersionArgs {
            api_user: ApiUserOpt::default(),
            opts: opts(&path),
        }),
        &Env::default(),
        tmp.path(),
    )
    .await
    .unwrap();
    let v = env!("CARGO_PKG_VERSION");
    assert_eq!(out, format!("steward {v}\nserver {v}\n"));

    // A token the server refuses falls back to the password once.
    std::fs::write(
        &path,
        config_text(port, &cert.ca_pem, "ann-pw", Some("forged.token")),
    )
    .unwrap();
    let (client, credentials) = client_for(&path);
    assert_eq!(credentials, Credentials::Token("forged.token".into()));
    client
        .call(Method::GET, "/api/v1/health", None)
        .await
        .unwrap();

    stop.cancel();
    task.await.unwrap();
}
