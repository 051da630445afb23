//! The REST API client: HTTPS trusting only the configured CA, basic auth or the stored
//! bearer token, and the API's error shape turned into [`CliError::Api`].

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::CliError;
use super::config::{Credentials, Settings};

/// A client for one server.
pub struct ApiClient {
    http: reqwest::Client,
    base: String,
    credentials: Credentials,
    basic: Option<(String, String)>,
}

impl ApiClient {
    /// Builds the client. The built-in and system roots are not trusted: only the CA of the
    /// settings is.
    pub fn new(settings: &Settings) -> Result<Self, CliError> {
        let certs = reqwest::Certificate::from_pem_bundle(settings.ca_pem.as_bytes())
            .map_err(|e| CliError::Config(format!("the configured CA is not PEM: {e}")))?;
        if certs.is_empty() {
            return Err(CliError::Config(
                "the configured CA holds no certificate".into(),
            ));
        }
        let http = reqwest::Client::builder()
            .tls_certs_only(certs)
            .https_only(true)
            .connect_timeout(std::time::Duration::from_secs(10))
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .map_err(|e| CliError::Config(format!("building the HTTPS client: {}", chain(&e))))?;
        Ok(Self {
            http,
            base: settings.server.clone(),
            credentials: settings.credentials.clone(),
            basic: settings
                .basic
                .as_ref()
                .map(|(u, p)| (u.clone(), p.0.clone())),
        })
    }

    /// The server's URL.
    pub fn server(&self) -> &str {
        &self.base
    }

    /// Calls the API; a 2xx answer's JSON body (`null` when empty), else the API's error.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, CliError> {
        let (status, value) = self.send(method, path, body).await?;
        if status.is_success() {
            Ok(value)
        } else {
            Err(api_error(status, &value))
        }
    }

    /// `GET`; `None` on 404.
    pub async fn get_opt(&self, path: &str) -> Result<Option<Value>, CliError> {
        let (status, value) = self.send(Method::GET, path, None).await?;
        match status {
            s if s.is_success() => Ok(Some(value)),
            StatusCode::NOT_FOUND => Ok(None),
            s => Err(api_error(s, &value)),
        }
    }

    /// `POST /api/v1/login` with basic auth (never the stored token): `(token, expires, user)`.
    pub async fn login(&self) -> Result<(String, String, String), CliError> {
        let (username, password) = self.basic.clone().ok_or_else(|| {
            CliError::Config(
                "login needs a username and a password (config file, --username, STEWARD_USERNAME, STEWARD_PASSWORD)".into(),
            )
        })?;
        let request = self
            .http
            .post(format!("{}/api/v1/login", self.base))
            .basic_auth(username, Some(password));
        let (status, value) = self.execute(request).await?;
        if !status.is_success() {
            return Err(api_error(status, &value));
        }
        let field = |name: &str| {
            value
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| CliError::Protocol(format!("the login answer has no {name}")))
        };
        Ok((field("token")?, field("expires")?, field("user")?))
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value), CliError> {
        let answer = self
            .execute(self.request(method.clone(), path, body, &self.credentials))
            .await?;
        // A refused token (expired early, signing key changed, user re-created) falls back to
        // the password once, when there is one.
        if answer.0 == StatusCode::UNAUTHORIZED
            && matches!(self.credentials, Credentials::Token(_))
            && let Some((username, password)) = &self.basic
        {
            let basic = Credentials::Basic {
                username: username.clone(),
                password: password.clone(),
            };
            return self.execute(self.request(method, path, body, &basic)).await;
        }
        Ok(answer)
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        credentials: &Credentials,
    ) -> reqwest::RequestBuilder {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        request = match credentials {
            Credentials::Token(token) => request.bearer_auth(token),
            Credentials::Basic { username, password } => {
                request.basic_auth(username, Some(password))
            }
            Credentials::None => request,
        };
        if let Some(body) = body {
            request = request.json(body);
        }
        request
    }

    async fn execute(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<(StatusCode, Value), CliError> {
        let response = request.send().await.map_err(|e| CliError::Connect {
            server: self.base.clone(),
            message: chain(&e),
        })?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| CliError::Connect {
            server: self.base.clone(),
            message: chain(&e),
        })?;
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                Value::String(String::from_utf8_lossy(&bytes).chars().take(500).collect())
            })
        };
        Ok((status, value))
    }
}

/// The API's error shape (`{"code","reason","message","details"}`), or what came instead.
fn api_error(status: StatusCode, body: &Value) -> CliError {
    let message = match body {
        Value::Object(o) => o.get("message").and_then(Value::as_str).map(str::to_string),
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
        _ => None,
    }
    .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_string());
    CliError::Api {
        code: status.as_u16(),
        message,
    }
}

/// An error and its sources, one after the other (reqwest's own words say little).
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let message = s.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = s.source();
    }
    text
}
