//! Where the `steward` client commands find their connection settings, and how flags and the
//! environment override them.
//!
//! The file (`cli.yaml`, written by `steward dev up` or by hand) is looked for at `--config`,
//! else `$STEWARD_CONFIG`, else `.steward/dev/cli.yaml` under the current directory, else
//! `<user config dir>/steward/cli.yaml` (`$XDG_CONFIG_HOME`, else `$HOME/.config`). Flags win
//! over the environment, which wins over the file. The environment is a parameter, never read
//! here from the process, so resolution is a pure function of its inputs.
//!
//! Passwords and tokens never appear in `Debug` output of these types.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The state directory `steward dev up` uses by default, relative to the current directory.
pub const DEV_CONFIG: &str = ".steward/dev/cli.yaml";

/// A stored token is not used in its last seconds: a call must not race its expiry.
const TOKEN_SKEW_SECONDS: i64 = 30;

/// The configuration file, as written.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigFile {
    /// `https://host:port` of the REST API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The PEM of the CA that signed the API's serving certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<String>,
    /// API user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// API user's password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// Default namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Bearer token from `steward login`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// When the token expires (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_expires: Option<String>,
}

impl fmt::Debug for ConfigFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfigFile")
            .field("server", &self.server)
            .field("ca", &self.ca.as_ref().map(|_| "<pem>"))
            .field("username", &self.username)
            .field("password", &redacted(self.password.as_deref()))
            .field("namespace", &self.namespace)
            .field("token", &redacted(self.token.as_deref()))
            .field("token_expires", &self.token_expires)
            .finish()
    }
}

fn redacted(secret: Option<&str>) -> Option<&'static str> {
    secret.map(|_| "<redacted>")
}

/// The environment variables resolution reads, passed in (tests build their own).
#[derive(Clone, Debug, Default)]
pub struct Env(BTreeMap<String, String>);

impl Env {
    /// The variables the CLI reads, from this process.
    pub fn from_process() -> Self {
        let names = [
            "STEWARD_CONFIG",
            "STEWARD_SERVER",
            "STEWARD_CA_FILE",
            "STEWARD_USERNAME",
            "STEWARD_PASSWORD",
            "XDG_CONFIG_HOME",
            "HOME",
        ];
        Self(
            names
                .iter()
                .filter_map(|n| std::env::var(n).ok().map(|v| (n.to_string(), v)))
                .collect(),
        )
    }

    /// An environment made of these pairs.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self(
            pairs
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// A variable, if set and not empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

impl fmt::Debug for Overrides {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Overrides")
            .field("config", &self.config)
            .field("server", &self.server)
            .field("ca_file", &self.ca_file)
            .field("username", &self.username)
            .field("namespace", &self.namespace)
            .finish()
    }
}

/// What flags say (`--config`, `--server`, `--ca-file`, `--username`, `-n`).
#[derive(Clone, Default)]
pub struct Overrides {
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--server`.
    pub server: Option<String>,
    /// `--ca-file`.
    pub ca_file: Option<PathBuf>,
    /// `--username`.
    pub username: Option<String>,
    /// `-n/--namespace`.
    pub namespace: Option<String>,
}

/// How the configuration file was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `--config`.
    Flag,
    /// `$STEWARD_CONFIG`.
    EnvVar,
    /// `.steward/dev/cli.yaml` under the current directory.
    DevStateDir,
    /// `<user config dir>/steward/cli.yaml`.
    UserConfigDir,
}

/// Where the file is, or where it was looked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The file found and how, if any.
    pub found: Option<(PathBuf, Origin)>,
    /// Every place looked at, in order.
    pub looked: Vec<PathBuf>,
    /// The user's config file path (where `steward login` stores a token when no file is
    /// found), if `$XDG_CONFIG_HOME` or `$HOME` is set.
    pub user_path: Option<PathBuf>,
}

/// The user's config file: `$XDG_CONFIG_HOME/steward/cli.yaml`, else
/// `$HOME/.config/steward/cli.yaml`.
pub fn user_config_path(env: &Env) -> Option<PathBuf> {
    let base = match env.get("XDG_CONFIG_HOME") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env.get("HOME")?).join(".config"),
    };
    Some(base.join("steward").join("cli.yaml"))
}

/// Finds the configuration file. An explicit path (`--config`, `$STEWARD_CONFIG`) is taken
/// as it is, existing or not (reading it then says it is missing); the two default places
/// only when the file exists.
pub fn locate(flag: Option<&Path>, env: &Env, cwd: &Path) -> Located {
    let user_path = user_config_path(env);
    if let Some(path) = flag {
        return Located {
            found: Some((path.to_path_buf(), Origin::Flag)),
            looked: vec![path.to_path_buf()],
            user_path,
        };
    }
    if let Some(path) = env.get("STEWARD_CONFIG") {
        return Located {
            found: Some((PathBuf::from(path), Origin::EnvVar)),
            looked: vec![PathBuf::from(path)],
            user_path,
        };
    }
    let mut looked = Vec::new();
    let dev = cwd.join(DEV_CONFIG);
    looked.push(dev.clone());
    if dev.is_file() {
        return Located {
            found: Some((dev, Origin::DevStateDir)),
            looked,
            user_path,
        };
    }
    if let Some(user) = &user_path {
        looked.push(user.clone());
        if user.is_file() {
            return Located {
                found: Some((user.clone(), Origin::UserConfigDir)),
                looked,
                user_path,
            };
        }
    }
    Located {
        found: None,
        looked,
        user_path,
    }
}

/// Why no usable settings came out.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No file, and flags and environment do not make up for it.
    #[error(
        "no Steward CLI configuration: looked at {}; run `steward dev up` (it writes .steward/dev/cli.yaml) or write one (docs/api.md, \"The CLI\"), or pass --config",
        .looked.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    Missing {
        /// Places looked at.
        looked: Vec<PathBuf>,
    },
    /// The file or a file it names could not be read.
    #[error("reading {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The file is not valid YAML of the expected shape.
    #[error("parsing {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's words.
        message: String,
    },
    /// A required setting is absent.
    #[error("{0}")]
    Incomplete(String),
}

/// How a call authenticates.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// A bearer token (from `steward login`, not yet expired).
    Token(String),
    /// Basic auth.
    Basic {
        /// User.
        username: String,
        /// Password.
        password: String,
    },
    /// Nothing to authenticate with: calls will be refused.
    None,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Token(_) => f.write_str("Token(<redacted>)"),
            Self::Basic { username, .. } => write!(f, "Basic({username}, <redacted>)"),
            Self::None => f.write_str("None"),
        }
    }
}

/// The settings a client command uses.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `https://host:port`, without a trailing slash.
    pub server: String,
    /// The CA's PEM.
    pub ca_pem: String,
    /// The stored token when it is usable, else basic auth when a user and a password are
    /// known.
    pub credentials: Credentials,
    /// Basic auth, kept also when a token is used (to log in again when the server refuses
    /// the token).
    pub basic: Option<(String, Redacted)>,
    /// Namespace of namespaced calls.
    pub namespace: String,
    /// The file in use (where `steward login` stores its token), if any.
    pub file: Option<PathBuf>,
    /// Where `steward login` stores a token when no file is in use.
    pub user_path: Option<PathBuf>,
}

/// A secret string whose `Debug` shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct Redacted(pub String);

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Reads and parses a configuration file.
pub fn read_file(path: &Path) -> Result<ConfigFile, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    if text.trim().is_empty() {
        return Ok(ConfigFile::default());
    }
    serde_saphyr::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Resolves the settings: flags, then the environment, then the file. `now` decides whether
/// a stored token is still usable.
pub fn resolve(
    flags: &Overrides,
    env: &Env,
    cwd: &Path,
    now: Timestamp,
) -> Result<Settings, ConfigError> {
    let located = locate(flags.config.as_deref(), env, cwd);
    let (file, path) = match &located.found {
        Some((path, _)) => (read_file(path)?, Some(path.clone())),
        None => (ConfigFile::default(), None),
    };
    let server = flags
        .server
        .clone()
        .or_else(|| env.get("STEWARD_SERVER").map(str::to_string))
        .or(file.server.clone());
    let ca_file = flags
        .ca_file
        .clone()
        .or_else(|| env.get("STEWARD_CA_FILE").map(PathBuf::from));
    let ca_pem = match ca_file {
        Some(ca_path) => {
            Some(
                std::fs::read_to_string(&ca_path).map_err(|error| ConfigError::Read {
                    path: ca_path,
                    error,
                })?,
            )
        }
        None => file.ca.clone(),
    };
    let (server, ca_pem) = match (server, ca_pem) {
        (Some(server), Some(ca)) => (server, ca),
        (None, _) if path.is_none() => {
            return Err(ConfigError::Missing {
                looked: located.looked,
            });
        }
        (None, _) => {
            return Err(ConfigError::Incomplete(
                "no server: set `server:` in the config file, --server or STEWARD_SERVER".into(),
            ));
        }
        (Some(_), None) => {
            return Err(ConfigError::Incomplete(
                "no CA to trust: set `ca:` in the config file, --ca-file or STEWARD_CA_FILE (there is no insecure mode)".into(),
            ));
        }
    };
    if !server.starts_with("https://") {
        return Err(ConfigError::Incomplete(format!(
            "server {server} is not an https:// URL (the API is served over TLS only)"
        )));
    }
    let user_override = flags.username.is_some()
        || env.get("STEWARD_USERNAME").is_some()
        || env.get("STEWARD_PASSWORD").is_some();
    let username = flags
        .username
        .clone()
        .or_else(|| env.get("STEWARD_USERNAME").map(str::to_string))
        .or(file.username.clone());
    let password = env
        .get("STEWARD_PASSWORD")
        .map(str::to_string)
        .or(file.password.clone());
    let basic = username.zip(password).map(|(u, p)| (u, Redacted(p)));
    // A stored token belongs to the file's user: another user named by a flag or the
    // environment logs in with its own password.
    let token = (!user_override).then(|| usable_token(&file, now)).flatten();
    let credentials = match (token, &basic) {
        (Some(token), _) => Credentials::Token(token),
        (None, Some((username, password))) => Credentials::Basic {
            username: username.clone(),
            password: password.0.clone(),
        },
        (None, None) => Credentials::None,
    };
    Ok(Settings {
        server: server.trim_end_matches('/').to_string(),
        ca_pem,
        credentials,
        basic,
        namespace: flags
            .namespace
            .clone()
            .or(file.namespace)
            .unwrap_or_else(|| "default".to_string()),
        file: path,
        user_path: located.user_path,
    })
}

/// The file's token, if it has one that does not expire within the next half minute.
fn usable_token(file: &ConfigFile, now: Timestamp) -> Option<String> {
    let token = file.token.as_ref()?;
    let expires: Timestamp = file.token_expires.as_ref()?.parse().ok()?;
    (expires.as_second() - TOKEN_SKEW_SECONDS > now.as_second()).then(|| token.clone())
}

/// Stores a token and its expiry in the configuration file at `path`, keeping every other line
/// (comments and the CA's block included); creates the file (mode 0600) when absent.
pub fn store_token(path: &Path, token: &str, expires: &str) -> std::io::Result<()> {
    let old = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let mut text: String = old
        .lines()
        .filter(|line| !line.starts_with("token:") && !line.starts_with("tokenExpires:"))
        .flat_map(|line| [line, "\n"])
        .collect();
    text.push_str(&format!("token: {token}\ntokenExpires: {expires}\n"));
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    crate::dev::write_private(path, &text)
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
