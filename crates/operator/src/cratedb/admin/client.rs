//! The real channels: HTTP `/_sql` with reqwest (basic auth), the PostgreSQL wire protocol with
//! tokio-postgres (CrateDB asks for the password in clear text, so it goes over the Pod
//! network only, as with CrateDB's own clients without TLS), and `crash` through `pods/exec`
//! with the statements on its standard input. Every call is bounded by a timeout.

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{CrateChannels, CrateError, Endpoint, Login, Rows};
use crate::cratedb::names::{CONTAINER, HTTP_PORT, PSQL_PORT, SUPERUSER};

/// The most output read from `crash`.
const MAX_OUTPUT: u64 = 1 << 20;

/// Talks to real CrateDB nodes (and to the stand-in, which speaks the same protocols).
#[derive(Clone)]
pub struct RealChannels {
    client: kube::Client,
    http: std::sync::Arc<std::sync::OnceLock<reqwest::Client>>,
    timeout: Duration,
}

impl RealChannels {
    /// Channels through `client` (exec) and plain HTTP/PG to Pod IPs, each call bounded by
    /// `timeout`.
    pub fn new(client: kube::Client, timeout: Duration) -> Self {
        Self {
            client,
            http: std::sync::Arc::default(),
            timeout,
        }
    }

    /// The HTTP client, built on first use.
    fn http_client(&self) -> Result<&reqwest::Client, CrateError> {
        if let Some(c) = self.http.get() {
            return Ok(c);
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        let built = reqwest::Client::builder()
            .timeout(self.timeout)
            .connect_timeout(self.timeout)
            .build()
            .map_err(|e| CrateError::Other(format!("HTTP client: {e}")))?;
        Ok(self.http.get_or_init(|| built))
    }
}

/// `{"error": {"message", "code"}}`, CrateDB's error body.
fn http_error(status: reqwest::StatusCode, body: &Value) -> CrateError {
    let code = body["error"]["code"].as_i64();
    let message = body["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("HTTP {status}"));
    match code {
        Some(code) => CrateError::from_code(code, message),
        None if status == reqwest::StatusCode::UNAUTHORIZED => CrateError::AuthFailed(message),
        None if status.is_server_error() => CrateError::Unavailable(message),
        None => CrateError::Other(message),
    }
}

fn pg_error(e: &tokio_postgres::Error) -> CrateError {
    match e.as_db_error() {
        Some(db) => {
            let message = db.message().to_owned();
            match db.code().code() {
                "28P01" | "28000" => CrateError::AuthFailed(message),
                "42710" | "42P07" => CrateError::AlreadyExists(message),
                c if c.starts_with("08") || c.starts_with("57P") => {
                    CrateError::Unavailable(message)
                }
                c => CrateError::Refused {
                    code: 0,
                    message: format!("{message} (SQLSTATE {c})"),
                },
            }
        }
        None => CrateError::Unavailable(e.to_string()),
    }
}

/// The error line `crash` printed, without anything that looks like a statement.
fn crash_error(stderr: &str, stdout: &str) -> String {
    stderr
        .lines()
        .chain(stdout.lines())
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("crash failed without output")
        .to_owned()
}

#[async_trait]
impl CrateChannels for RealChannels {
    async fn http(
        &self,
        node: &Endpoint,
        login: &Login,
        stmt: &str,
        args: &[Value],
    ) -> Result<Rows, CrateError> {
        let url = format!("http://{}:{HTTP_PORT}/_sql", node.ip);
        let response = self
            .http_client()?
            .post(&url)
            .basic_auth(&login.user, Some(login.password.expose()))
            .json(&json!({"stmt": stmt, "args": args}))
            .send()
            .await
            .map_err(|e| CrateError::Unavailable(e.without_url().to_string()))?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .map_err(|e| CrateError::Other(format!("unreadable answer: {}", e.without_url())))?;
        if !status.is_success() {
            return Err(http_error(status, &body));
        }
        let rows = body["rows"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .map(|r| r.as_array().cloned().unwrap_or_default())
                    .collect()
            })
            .unwrap_or_default();
        Ok(rows)
    }

    async fn pg(&self, node: &Endpoint, login: &Login, statements: &str) -> Result<(), CrateError> {
        let mut config = tokio_postgres::Config::new();
        config
            .host(&node.ip)
            .port(u16::try_from(PSQL_PORT).unwrap_or(5432))
            .user(&login.user)
            .password(login.password.expose().as_bytes())
            .dbname("doc")
            .application_name("steward")
            .connect_timeout(self.timeout);
        let run = async {
            let (client, connection) = config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(|e| pg_error(&e))?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            client
                .batch_execute(statements)
                .await
                .map_err(|e| pg_error(&e))
        };
        tokio::time::timeout(self.timeout, run)
            .await
            .map_err(|_| CrateError::Unavailable(format!("no answer within {:?}", self.timeout)))?
    }

    async fn crash(&self, node: &Endpoint, statements: &str) -> Result<(), CrateError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &node.namespace);
        let command = vec![
            "crash".to_owned(),
            "--hosts".to_owned(),
            format!("http://{}:{HTTP_PORT}", node.ip),
            "--username".to_owned(),
            SUPERUSER.to_owned(),
            "--verify-ssl".to_owned(),
            "false".to_owned(),
        ];
        let params = AttachParams::default()
            .container(CONTAINER)
            .stdin(true)
            .stdout(true)
            .stderr(true);
        let run = async {
            let mut process = pods
                .exec(&node.pod, command, &params)
                .await
                .map_err(|e| CrateError::Unavailable(format!("exec: {e}")))?;
            if let Some(mut stdin) = process.stdin() {
                stdin
                    .write_all(statements.as_bytes())
                    .await
                    .map_err(|e| CrateError::Unavailable(format!("exec stdin: {e}")))?;
                stdin
                    .shutdown()
                    .await
                    .map_err(|e| CrateError::Unavailable(format!("exec stdin: {e}")))?;
            }
            let status = process.take_status();
            let read = |s: Option<Box<dyn tokio::io::AsyncRead + Unpin + Send>>| async move {
                let mut out = Vec::new();
                if let Some(s) = s {
                    let _ = s.take(MAX_OUTPUT).read_to_end(&mut out).await;
                }
                String::from_utf8_lossy(&out).into_owned()
            };
            let (stdout, stderr) = tokio::join!(
                read(process.stdout().map(|s| Box::new(s) as _)),
                read(process.stderr().map(|s| Box::new(s) as _))
            );
            let status = match status {
                Some(s) => s.await,
                None => None,
            };
            let _ = process.join().await;
            match status {
                Some(s) if s.status.as_deref() == Some("Success") => Ok(()),
                Some(_) => {
                    let line = crash_error(&stderr, &stdout);
                    if line.contains("already exists") || line.contains("4099") {
                        Err(CrateError::AlreadyExists(line))
                    } else if line.contains("no master") || line.contains("5000") {
                        Err(CrateError::Unavailable(line))
                    } else {
                        Err(CrateError::Other(format!("crash: {line}")))
                    }
                }
                None => Err(CrateError::Unavailable(
                    "the exec session ended without a status".into(),
                )),
            }
        };
        tokio::time::timeout(self.timeout * 4, run)
            .await
            .map_err(|_| {
                CrateError::Unavailable(format!(
                    "crash in {} did not finish within {:?}",
                    node.pod,
                    self.timeout * 4
                ))
            })?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_errors_keep_crates_code_and_message() {
        let body = json!({"error": {"message": "RoleAlreadyExistsException[Role 'a' already exists]", "code": 4099}});
        assert!(matches!(
            http_error(reqwest::StatusCode::CONFLICT, &body),
            CrateError::AlreadyExists(_)
        ));
        let body = json!({"error": {"message": "no master", "code": 5000}});
        assert!(matches!(
            http_error(reqwest::StatusCode::SERVICE_UNAVAILABLE, &body),
            CrateError::Unavailable(_)
        ));
        assert!(matches!(
            http_error(reqwest::StatusCode::UNAUTHORIZED, &json!({})),
            CrateError::AuthFailed(_)
        ));
        assert_eq!(
            crash_error("\nSQLActionException[x]\n", ""),
            "SQLActionException[x]"
        );
    }
}
