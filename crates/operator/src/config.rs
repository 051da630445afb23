//! Operator configuration: flags, each also read from an environment variable. The full list
//! is documented in `docs/configuration.md`; a test keeps the two in step.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, ValueEnum};
use steward_api::common::{OperationKind, TimeoutOverrides};

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One line per record, for people.
    #[default]
    Human,
    /// One JSON object per record, for log pipelines.
    Json,
}

/// Deadlines of long-running operations, in seconds. Defaults are the seeds'.
#[derive(Clone, Debug, Args, PartialEq, Eq)]
pub struct TimeoutArgs {
    /// Bootstrap deadline.
    #[arg(long, env = "BOOTSTRAP_TIMEOUT", default_value_t = 1800)]
    pub bootstrap_timeout: u64,
    /// Scale deadline, also for replacing a member that lost its data (`Recover`).
    #[arg(long, env = "SCALING_TIMEOUT", default_value_t = 3600)]
    pub scaling_timeout: u64,
    /// Rolling restart deadline.
    #[arg(long, env = "RESTART_TIMEOUT", default_value_t = 3600)]
    pub restart_timeout: u64,
    /// Upgrade deadline.
    #[arg(long, env = "UPGRADE_TIMEOUT", default_value_t = 3600)]
    pub upgrade_timeout: u64,
    /// Fail-over deadline.
    #[arg(long, env = "FAILOVER_TIMEOUT", default_value_t = 600)]
    pub failover_timeout: u64,
    /// Backup and restore deadline.
    #[arg(long, env = "BACKUP_TIMEOUT", default_value_t = 3600)]
    pub backup_timeout: u64,
}

impl Default for TimeoutArgs {
    fn default() -> Self {
        Self {
            bootstrap_timeout: 1800,
            scaling_timeout: 3600,
            restart_timeout: 3600,
            upgrade_timeout: 3600,
            failover_timeout: 600,
            backup_timeout: 3600,
        }
    }
}

impl TimeoutArgs {
    /// The deadline for an operation of `kind`, honouring a cluster's overrides.
    pub fn for_kind(&self, kind: OperationKind, overrides: Option<&TimeoutOverrides>) -> Duration {
        let o = overrides.cloned().unwrap_or_default();
        let secs = match kind {
            OperationKind::Bootstrap => o.bootstrap_seconds.unwrap_or(self.bootstrap_timeout),
            // Replacing a member is a removal and an addition: a scale's deadline.
            OperationKind::Scale | OperationKind::Recover => {
                o.scaling_seconds.unwrap_or(self.scaling_timeout)
            }
            OperationKind::Restart => o.restart_seconds.unwrap_or(self.restart_timeout),
            OperationKind::Upgrade => o.upgrade_seconds.unwrap_or(self.upgrade_timeout),
            OperationKind::Failover => o.failover_seconds.unwrap_or(self.failover_timeout),
            OperationKind::Backup | OperationKind::Restore => {
                o.backup_seconds.unwrap_or(self.backup_timeout)
            }
        };
        Duration::from_secs(secs)
    }
}

/// Webhook settings (seed 000): enabled only when all three are non-empty.
#[derive(Clone, Default, Args, PartialEq, Eq)]
pub struct WebhookArgs {
    /// URL that receives a POST for every finished scale or upgrade operation.
    #[arg(long, env = "WEBHOOK_URL", default_value = "")]
    pub webhook_url: String,
    /// HTTP basic auth user.
    #[arg(long, env = "WEBHOOK_USERNAME", default_value = "")]
    pub webhook_username: String,
    /// HTTP basic auth password. Prefer the environment variable (from a Secret).
    #[arg(
        long,
        env = "WEBHOOK_PASSWORD",
        default_value = "",
        hide_env_values = true
    )]
    pub webhook_password: String,
}

impl std::fmt::Debug for WebhookArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookArgs")
            .field("webhook_url", &self.webhook_url)
            .field("webhook_username", &self.webhook_username)
            .field("webhook_password", &"<redacted>")
            .finish()
    }
}

/// `steward operator` flags.
#[derive(Clone, Debug, Args)]
pub struct OperatorArgs {
    /// Watch only this namespace; all namespaces when empty.
    #[arg(long, env = "STEWARD_NAMESPACE", default_value = "")]
    pub namespace: String,
    /// Address of the HTTP server for `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, env = "STEWARD_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    pub http_addr: SocketAddr,
    /// Elect a leader through a Lease; only the leader reconciles.
    #[arg(long, env = "STEWARD_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,
    /// Name of the leader-election Lease.
    #[arg(long, env = "STEWARD_LEASE_NAME", default_value = "steward-operator")]
    pub lease_name: String,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "steward-system")]
    pub lease_namespace: String,
    /// This instance's identity in the Lease; the host name when empty.
    #[arg(long, env = "POD_NAME", default_value = "")]
    pub identity: String,
    /// Seconds a Lease stays valid without renewal.
    #[arg(long, env = "STEWARD_LEASE_DURATION_SECONDS", default_value_t = 15)]
    pub lease_duration_seconds: u64,
    /// Seconds to wait for Steward's CRDs to be established before giving up.
    #[arg(long, env = "STEWARD_CRD_WAIT_SECONDS", default_value_t = 60)]
    pub crd_wait_seconds: u64,
    /// The cluster's DNS domain, used in members' stable names
    /// (`<member>.<cluster>.<namespace>.svc.<domain>`).
    #[arg(long, env = "STEWARD_CLUSTER_DOMAIN", default_value = "cluster.local")]
    pub cluster_domain: String,
    /// Seconds to wait for a database to answer before treating it as unreachable.
    #[arg(long, env = "STEWARD_DATABASE_TIMEOUT_SECONDS", default_value_t = 3)]
    pub database_timeout_seconds: u64,
    /// Serve the REST API over HTTPS (on every replica); `false` disables it.
    #[arg(long, env = "STEWARD_API", default_value_t = true, action = clap::ArgAction::Set)]
    pub api: bool,
    /// Address of the REST API's HTTPS listener.
    #[arg(long, env = "STEWARD_API_ADDR", default_value = "0.0.0.0:8443")]
    pub api_addr: SocketAddr,
    /// Secret (in the operator's namespace) holding the API's serving certificate and token
    /// key; created with a generated CA and certificate when absent.
    #[arg(
        long,
        env = "STEWARD_API_TLS_SECRET",
        default_value = "steward-api-tls"
    )]
    pub api_tls_secret: String,
    /// Host names (comma separated) a generated API certificate is valid for, besides
    /// localhost, 127.0.0.1 and the `steward-api` Service's names.
    #[arg(
        long,
        env = "STEWARD_API_HOSTNAMES",
        value_delimiter = ',',
        default_value = ""
    )]
    pub api_hostnames: Vec<String>,
    /// Most Kubernetes API requests the operator has in flight at once (watches apart); more
    /// wait in the operator. Bounds its connections to the API server (HTTP/1.1: one per
    /// request in flight).
    #[arg(long, env = "STEWARD_API_MAX_IN_FLIGHT", default_value_t = crate::runtime::in_flight::DEFAULT_MAX_IN_FLIGHT)]
    pub api_max_in_flight: usize,
    /// Passes each controller runs at once; more wait in its queue (0: no bound). Bounds the
    /// memory a burst of passes holds; below the number of clusters created at once, the last
    /// ones wait for whole passes of the first (docs/performance.md measures the trade).
    #[arg(
        long,
        env = "STEWARD_MAX_CONCURRENT_RECONCILES",
        default_value_t = 1024
    )]
    pub max_concurrent_reconciles: u16,
    /// Operation deadlines.
    #[command(flatten)]
    pub timeouts: TimeoutArgs,
    /// Webhook notifications.
    #[command(flatten)]
    pub webhook: WebhookArgs,
    /// An engine's own operator-wide setting, `<engine>.<name>=<value>` (repeatable; the
    /// environment variable takes a comma-separated list), e.g.
    /// `foundationdb.minimumRecoveryTimeForExclusion=120`. docs/configuration.md lists them.
    #[arg(
        long = "engine-setting",
        env = "STEWARD_ENGINE_SETTINGS",
        value_delimiter = ',',
        value_parser = parse_engine_setting
    )]
    pub engine_settings: Vec<(String, String)>,
}

/// Every `--engine-setting`, by key: engines read theirs from the context's seams.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineSettings(pub std::collections::BTreeMap<String, String>);

impl EngineSettings {
    /// The value of `key` (`<engine>.<name>`).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
}

fn parse_engine_setting(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not <engine>.<name>=<value>"))?;
    if !key.contains('.') || key.starts_with('.') || key.ends_with('.') {
        return Err(format!("{key:?} is not <engine>.<name>"));
    }
    Ok((key.trim().to_owned(), value.trim().to_owned()))
}

/// Parses `steward operator` flags from an argument list (environment variables apply too),
/// for embedding the operator in tests and the self-check.
pub fn operator_args_from<I, T>(args: I) -> Result<OperatorArgs, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    #[derive(clap::Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: OperatorArgs,
    }
    let all = std::iter::once(std::ffi::OsString::from("operator"))
        .chain(args.into_iter().map(Into::into));
    <Wrapper as clap::Parser>::try_parse_from(all).map(|w| w.args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_overrides_win_over_operator_defaults() {
        let t = TimeoutArgs::default();
        assert_eq!(
            t.for_kind(OperationKind::Bootstrap, None),
            Duration::from_secs(1800)
        );
        assert_eq!(
            t.for_kind(OperationKind::Scale, None),
            Duration::from_secs(3600)
        );
        let o = TimeoutOverrides {
            scaling_seconds: Some(60),
            ..Default::default()
        };
        assert_eq!(
            t.for_kind(OperationKind::Scale, Some(&o)),
            Duration::from_secs(60)
        );
        assert_eq!(
            t.for_kind(OperationKind::Upgrade, Some(&o)),
            Duration::from_secs(3600)
        );
    }

    #[test]
    fn webhook_password_is_redacted_in_debug_output() {
        let w = WebhookArgs {
            webhook_url: "http://x".into(),
            webhook_username: "u".into(),
            webhook_password: "hunter2".into(),
        };
        assert!(!format!("{w:?}").contains("hunter2"));
    }
}
