//! The client commands' arguments (clap derive): `steward create cluster …`, `steward show …`,
//! the actions, and the connection and output flags each one takes.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use super::config::Overrides;
use super::output::Format;

/// Connection and output flags every client command takes.
#[derive(Args, Clone, Debug, Default)]
pub struct ClientOpts {
    /// Configuration file (default: $STEWARD_CONFIG, else .steward/dev/cli.yaml, else
    /// <user config dir>/steward/cli.yaml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// API URL, e.g. https://127.0.0.1:8443 (overrides $STEWARD_SERVER and the file).
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// PEM file of the CA to trust (overrides $STEWARD_CA_FILE and the file's `ca`).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Namespace (default: the file's `namespace`, else `default`).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

impl ClientOpts {
    pub(super) fn overrides(&self, username: Option<&str>) -> Overrides {
        Overrides {
            config: self.config.clone(),
            server: self.server.clone(),
            ca_file: self.ca_file.clone(),
            username: username.map(str::to_string),
            namespace: self.namespace.clone(),
        }
    }
}

/// `--username`: the API user (commands on database users call it `--api-username`, their
/// `--username` being the database user's).
#[derive(Args, Clone, Debug, Default)]
pub struct ApiUserOpt {
    /// API user (overrides $STEWARD_USERNAME and the file; the password comes from
    /// $STEWARD_PASSWORD or the file, never from a flag).
    #[arg(long = "username", value_name = "API_USER")]
    pub username: Option<String>,
}

/// `--wait` and `--timeout`.
#[derive(Args, Clone, Debug)]
pub struct WaitOpts {
    /// Wait until the action is finished, showing its progress.
    #[arg(long)]
    pub wait: bool,
    /// Seconds to wait at most (with --wait).
    #[arg(long, default_value_t = 600, value_name = "SECONDS")]
    pub timeout: u64,
}

/// A cluster's engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// PostgreSQL (`PostgresCluster`).
    Postgres,
    /// etcd (`EtcdCluster`).
    Etcd,
    /// CrateDB (`CrateCluster`: masters and named data node sets).
    Cratedb,
    /// FoundationDB (`FoundationDBCluster`: process classes `storage`, `log`, `stateless`).
    Foundationdb,
}

impl Engine {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::Etcd => "etcd",
            Self::Cratedb => "cratedb",
            Self::Foundationdb => "foundationdb",
        }
    }
}

/// The client commands (they talk to the REST API).
#[derive(Subcommand, Clone, Debug)]
pub enum ClientCommand {
    /// Create a cluster or a database user.
    #[command(subcommand)]
    Create(CreateCommand),
    /// Show clusters, one cluster, its backups or its users.
    #[command(subcommand)]
    Show(ShowCommand),
    /// Change a cluster's spec or rotate a user's password.
    #[command(subcommand)]
    Update(UpdateCommand),
    /// Delete a cluster or a database user.
    #[command(subcommand)]
    Delete(DeleteCommand),
    /// Change a cluster's number of instances (PostgreSQL), members (etcd) or the nodes of one
    /// node set (CrateDB: --node-set).
    Scale(ScaleArgs),
    /// Restart a cluster's instances one at a time.
    Restart(RestartArgs),
    /// List fail-over candidates (--query), or fail over (to --target, else the best replica).
    Failover(FailoverArgs),
    /// Take a backup of a cluster (PostgreSQL: pgBackRest; FoundationDB: its continuous backup;
    /// etcd: one snapshot).
    Backup(BackupArgs),
    /// Restore a cluster: PostgreSQL to a point in time, a backup, or the end of the archive;
    /// FoundationDB its backup; etcd a snapshot into a new cluster `<cluster>-restore-<stamp>`.
    Restore(RestoreArgs),
    /// Upgrade a PostgreSQL cluster to a new major version (pg_upgrade; the old claims are kept).
    #[command(subcommand)]
    Upgrade(UpgradeCommand),
    /// Log in: store a short-lived token in the configuration file, used until it expires.
    Login(LoginArgs),
    /// Print the client's version, and the server's when a configuration is found.
    Version(VersionArgs),
}

/// `steward create …`.
#[derive(Subcommand, Clone, Debug)]
pub enum CreateCommand {
    /// Create a cluster.
    Cluster(CreateClusterArgs),
    /// Create a database user (PostgreSQL or CrateDB).
    User(CreateUserArgs),
}

/// `steward show …`.
#[derive(Subcommand, Clone, Debug)]
pub enum ShowCommand {
    /// List clusters, or show one with its status and operation.
    Cluster(ShowClusterArgs),
    /// List a cluster's backups.
    Backup(ClusterArgs),
    /// List a cluster's database users.
    User(ClusterArgs),
}

/// `steward update …`.
#[derive(Subcommand, Clone, Debug)]
pub enum UpdateCommand {
    /// Change fields of a cluster's spec (a JSON merge patch).
    Cluster(UpdateClusterArgs),
    /// Rotate a database user's password.
    User(UpdateUserArgs),
}

/// `steward delete …`.
#[derive(Subcommand, Clone, Debug)]
pub enum DeleteCommand {
    /// Delete a cluster.
    Cluster(DeleteClusterArgs),
    /// Delete a database user.
    User(UserNameArgs),
}

/// `steward create cluster`.
#[derive(Args, Clone, Debug)]
pub struct CreateClusterArgs {
    /// Cluster name.
    pub name: String,
    /// Engine.
    #[arg(long, value_enum)]
    pub engine: Engine,
    /// Instances (PostgreSQL), members (etcd), or the data set's nodes (CrateDB, which also
    /// gets 3 masters).
    #[arg(long, visible_alias = "replicas", default_value_t = 1)]
    pub instances: u32,
    /// Database version (default: the server's, PostgreSQL 15, etcd 3.4.23 or CrateDB 4.8.4).
    #[arg(long)]
    pub version: Option<String>,
    /// Storage per instance, e.g. 1Gi (CrateDB: per data node).
    #[arg(long)]
    pub storage: Option<String>,
    /// CrateDB: the data set's name (default: data).
    #[arg(long, value_name = "NAME")]
    pub node_set: Option<String>,
    /// More spec fields, `path.to.field=value` (as `update cluster --set`), e.g.
    /// `cluster.license.secretKeyRef.name=crate-license`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// `path.to.field=value`, the value always a string.
    #[arg(long = "set-string", value_name = "KEY=VALUE")]
    pub set_string: Vec<String>,
    #[command(flatten)]
    pub wait: WaitOpts,
    #[command(flatten)]
    pub api_user: ApiUserOpt,
    #[command(flatten)]
    pub opts: ClientOpts,
}

/// A cluster name and, optionally, its engine.
#[derive(Args, Clone, Debug)]
pub struct ClusterArgs {
    /// Cluster name.
    pub name: String,
    /// Engine (default: found by listing the namespace's clusters).
    #[arg(long, value_enum)]
    pub engine: Option<Engine>,
    #[command(flatten)]
    pub api_user: ApiUserOpt,
    #[command(flatten)]
    pub opts: ClientOpts,
}

/// `steward show cluster`.
#[derive(Args, Clone, Debug)]
pub struct ShowClusterArgs {
    /// Cluster name (none: list the namespace's clusters).
    pub name: Option<String>,
    /// Engine (filters the list; picks the cluster when two engines have the name).
    #[arg(long, value_enum)]
    pub engine: Option<Engine>,
    /// List the clusters of every namespace the user may see.
    #[arg(short = 'A', long, conflicts_with = "name")]
    pub all_namespaces: bool,
    #[command(flatten)]
    pub api_user: ApiUserOpt,
    #[command(flatten)]
    pub opts: ClientOpts,
}

/// `steward update cluster`.
#[derive(Args, Clone, Debug)]
pub struct UpdateClusterArgs {
    /// Cluster name.
    pub name: String,
    /// Engine (default: found by listing).
    #[arg(long, value_enum)]
    pub engine: Option<Engine>,
    /// `path.to.field=value` in the spec; the value is read as JSON when it is JSON
    /// (`3`, `true`, `{"a":1}`), else as a string.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// `path.to.field=value`, the value always a string (e.g. `version=15`).
    #[arg(long = "set-string", value_name = "KEY=VALUE")]
    pub set_string: Vec<String>,
    #[command(flatten)]
    pub wait: WaitOpts,
    #[command(flatten)]
    pub api_user: ApiUserOpt,
    #[command(flatten)]
    pub opts: ClientOpts,
}

/// `steward delete cluster`.
#[derive(Args, Clone, Debug)]
pub struct DeleteClusterArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub wait: WaitOpts,
}

/// `steward scale`.
#[derive(Args, Clone, Debug)]
pub struct ScaleArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The new number of instances (members; CrateDB: nodes of the node set).
    #[arg(long, visible_alias = "replicas")]
    pub instances: u32,
    /// CrateDB (needed there): the node set, `master` or a data set's name.
    #[arg(long, value_name = "NAME")]
    pub node_set: Option<String>,
    #[command(flatten)]
    pub wait: WaitOpts,
}

/// `steward restart`.
#[derive(Args, Clone, Debug)]
pub struct RestartArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub wait: WaitOpts,
}

/// `steward failover`.
#[derive(Args, Clone, Debug)]
pub struct FailoverArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// List the candidates instead of failing over.
    #[arg(long, conflicts_with = "target")]
    pub query: bool,
    /// The replica to promote (default: the operator picks the best).
    #[arg(long)]
    pub target: Option<String>,
    #[command(flatten)]
    pub wait: WaitOpts,
}

/// A backup's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackupType {
    /// Full.
    Full,
    /// Differential.
    Diff,
    /// Incremental.
    Incr,
}

/// `steward backup`.
#[derive(Args, Clone, Debug)]
pub struct BackupArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Backup type (diff and incr: PostgreSQL only).
    #[arg(long = "type", value_enum, default_value = "full")]
    pub backup_type: BackupType,
    /// Wait until the backup is Completed or Failed.
    #[arg(long)]
    pub wait: bool,
    /// Seconds to wait at most (with --wait).
    #[arg(long, default_value_t = 600, value_name = "SECONDS")]
    pub timeout: u64,
}

/// `steward upgrade …`.
#[derive(Subcommand, Clone, Debug)]
pub enum UpgradeCommand {
    /// Upgrade a cluster to a new major version.
    Cluster(UpgradeArgs),
}

/// `steward upgrade cluster`.
#[derive(Args, Clone, Debug)]
pub struct UpgradeArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The major version to move to (e.g. 16).
    #[arg(long = "to", value_name = "VERSION")]
    pub to: String,
    /// The image to run afterwards (default: postgres:<VERSION>).
    #[arg(long)]
    pub image: Option<String>,
    /// Upgrade even though no backup was taken since the cluster's last operation.
    #[arg(long)]
    pub without_backup: bool,
    #[command(flatten)]
    pub wait: WaitOpts,
}

/// `steward restore`.
#[derive(Args, Clone, Debug)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Point in time to recover to (RFC 3339, e.g. 2026-11-26T10:00:00Z; PostgreSQL only).
    #[arg(long, conflicts_with = "backup")]
    pub target_time: Option<String>,
    /// The backup to restore: PostgreSQL's backup label (default, without --target-time: the
    /// end of the archive); FoundationDB's backup (default: the only one); etcd's snapshot, an
    /// `EtcdBackup` (default: the newest Completed one).
    #[arg(long)]
    pub backup: Option<String>,
    #[command(flatten)]
    pub wait: WaitOpts,
}

/// `steward create user`.
#[derive(Args, Clone, Debug)]
pub struct CreateUserArgs {
    #[command(flatten)]
    pub user: UserNameArgs,
    /// Databases the user owns (repeatable).
    #[arg(long = "database", value_name = "DATABASE")]
    pub databases: Vec<String>,
    /// Read the password from standard input (default: the operator generates one into the
    /// user's Secret).
    #[arg(long)]
    pub password_stdin: bool,
    /// Make the user a superuser.
    #[arg(long)]
    pub superuser: bool,
    /// Let the user create databases.
    #[arg(long)]
    pub createdb: bool,
}

/// `steward update user`: rotate a password.
#[derive(Args, Clone, Debug)]
pub struct UpdateUserArgs {
    #[command(flatten)]
    pub user: UserNameArgs,
    /// Read the new password from standard input (default: the operator generates one).
    #[arg(long)]
    pub password_stdin: bool,
}

/// A cluster and one of its database users.
#[derive(Args, Clone, Debug)]
pub struct UserNameArgs {
    /// Cluster name.
    #[arg(value_name = "CLUSTER")]
    pub cluster: String,
    /// Engine (default: found by listing the namespace's clusters).
    #[arg(long, value_enum)]
    pub engine: Option<Engine>,
    /// Database user.
    #[arg(long)]
    pub username: String,
    /// API user (overrides $STEWARD_USERNAME and the file).
    #[arg(long, value_name = "API_USER")]
    pub api_username: Option<String>,
    #[command(flatten)]
    pub opts: ClientOpts,
}

/// `steward login`.
#[derive(Args, Clone, Debug)]
pub struct LoginArgs {
    #[command(flatten)]
    pub api_user: ApiUserOpt,
    #[command(flatten)]
    pub opts: ClientOpts,
}

/// `steward version`.
#[derive(Args, Clone, Debug)]
pub struct VersionArgs {
    #[command(flatten)]
    pub api_user: ApiUserOpt,
    #[command(flatten)]
    pub opts: ClientOpts,
}
