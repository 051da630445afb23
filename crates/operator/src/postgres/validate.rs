//! (pure) `PostgresClusterSpec` → [`ValidatedPostgresCluster`]: names checked so that every
//! `<cluster>-<suffix>` stays a DNS label, the version parsed, per-instance storage resolved,
//! users and `postgresql.conf` parameters checked against what Steward owns and against
//! PostgreSQL's own settings catalogue (`validate/settings.rs`).
//!
//! Every problem is reported at once, joined by `; `, each naming the field it is about, so a
//! user fixes the spec in one go (the `InvalidSpec` condition carries the message).

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use steward_api::common::{PodOverrides, StorageSpec};
use steward_api::postgres::{
    AntiAffinity, FailoverSpec, HealthGate, MetricsSpec, NodeLabel, PgBackRestSpec,
    PostgresCluster, PostgresUser,
};

use crate::postgres::names::{ClusterNames, PORT, REPLICATION_USER, SUPERUSER};

mod settings;

/// Largest instance count: one primary and up to eight replicas. It also keeps ordinals to one
/// digit, which [`MAX_NAME_LEN`] relies on.
pub const MAX_INSTANCES: i32 = 9;
/// Oldest PostgreSQL major version supported: 12, the first with `standby.signal` and
/// `primary_conninfo` in `postgresql.conf` (no `recovery.conf`) and with `pg_promote()`, which
/// the engine's fail-over uses.
pub const MIN_MAJOR: u32 = 12;
/// Newest major version accepted (the CRD's pattern allows two digits).
pub const MAX_MAJOR: u32 = 99;
/// The longest suffix Steward appends to the cluster name (the applied-passwords Secret; an
/// instance claim `<cluster>-<n>-pgdata` is shorter).
pub const LONGEST_SUFFIX: &str = "-applied-passwords";
/// Longest cluster name, so that every child name is a DNS label (at most 63 characters).
pub const MAX_NAME_LEN: usize = 63 - LONGEST_SUFFIX.len();
/// Names Steward keeps for itself: its superuser, the replication user, and the image's own
/// superuser.
pub const RESERVED_USERS: [&str; 3] = [SUPERUSER, REPLICATION_USER, "postgres"];

/// Parameters Steward writes itself, each with the reason a user may not set it.
const OWNED_PARAMETERS: &[(&str, &str)] = &[
    (
        "listen_addresses",
        "Steward makes PostgreSQL listen on the Pod's address",
    ),
    ("port", "the Services, probes and replicas use port 5432"),
    ("hba_file", "Steward writes pg_hba.conf"),
    ("ident_file", "Steward writes the authentication files"),
    ("config_file", "Steward writes postgresql.conf"),
    (
        "data_directory",
        "the data directory is PGDATA on the instance's volume",
    ),
    (
        "primary_conninfo",
        "Steward points replicas at the -primary Service",
    ),
    ("primary_slot_name", "Steward manages replication slots"),
    ("cluster_name", "Steward names each instance"),
    (
        "unix_socket_directories",
        "the entrypoint and the probes use Steward's socket directory",
    ),
    (
        "restore_command",
        "Steward sets it (archive-get from the cluster's pgBackRest repository) when backups are on",
    ),
    (
        "archive_cleanup_command",
        "Steward replicates by streaming only and manages no WAL archive",
    ),
    (
        "recovery_end_command",
        "Steward replicates by streaming only and manages no WAL archive",
    ),
    ("promote_trigger_file", "only Steward promotes an instance"),
    (
        "include",
        "the configuration comes from spec.parameters only",
    ),
    (
        "include_dir",
        "the configuration comes from spec.parameters only",
    ),
    (
        "include_if_exists",
        "the configuration comes from spec.parameters only",
    ),
];

/// A spec that passed validation, with defaults merged.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidatedPostgresCluster {
    /// Namespace.
    pub namespace: String,
    /// Cluster name.
    pub name: String,
    /// Instances wanted: one primary and `instances − 1` replicas (1..=9).
    pub instances: u32,
    /// PostgreSQL major version.
    pub version: u32,
    /// Image of the `postgres` container.
    pub image: String,
    /// Storage of every instance without an override.
    pub storage: StorageSpec,
    /// Per-instance storage overrides, by ordinal (every ordinal below `instances`).
    pub instance_storage: BTreeMap<u32, StorageSpec>,
    /// Pod overrides.
    pub pod_template: PodOverrides,
    /// Preferred node label.
    pub node_label: Option<NodeLabel>,
    /// Spreading of instances over nodes.
    pub anti_affinity: AntiAffinity,
    /// `postgresql.conf` parameters, names lowercased (PostgreSQL's names are case-insensitive).
    pub parameters: BTreeMap<String, String>,
    /// Database users.
    pub users: Vec<PostgresUser>,
    /// Fail-over settings.
    pub failover: FailoverSpec,
    /// When a restarted instance counts as back.
    pub health_gate: HealthGate,
    /// Stop changing the cluster.
    pub paused: bool,
    /// The metrics sidecar.
    pub metrics: Option<MetricsSpec>,
    /// The pgBackRest repository and WAL archiving, when backups are on.
    pub pgbackrest: Option<PgBackRestSpec>,
    /// The generation of data claims the instances run on (`status.dataEpoch`).
    pub data_epoch: u32,
    /// Another cluster's repository the first primary is restored from, instead of `initdb`.
    pub data_source: Option<steward_api::postgres::PgBackRestSource>,
    /// Another cluster's `pg_basebackup` the first primary's data is copied from.
    pub base_backup_source: Option<steward_api::postgres::PgBaseBackupSource>,
}

impl ValidatedPostgresCluster {
    /// The cluster a `dataSource` (either kind) names: its data, roles and passwords are the
    /// first primary's.
    pub fn source_cluster(&self) -> Option<&str> {
        self.data_source
            .as_ref()
            .map(|s| s.cluster.as_str())
            .or(self.base_backup_source.as_ref().map(|s| s.cluster.as_str()))
    }
}

impl ValidatedPostgresCluster {
    /// Names of the cluster's children.
    pub fn names(&self) -> ClusterNames {
        ClusterNames::new(&self.name, &self.namespace).with_epoch(self.data_epoch)
    }

    /// The storage of the instance with this ordinal: its override, or the cluster's storage.
    pub fn storage_for(&self, ordinal: u32) -> &StorageSpec {
        self.instance_storage.get(&ordinal).unwrap_or(&self.storage)
    }

    /// The names of the wanted instances, by ordinal.
    pub fn instance_names(&self) -> Vec<String> {
        let names = self.names();
        (0..self.instances).map(|o| names.instance(o)).collect()
    }
}

/// A DNS-1123 label starting with a letter (a DNS-1035 label, as Service names must be).
fn dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// A DNS-1123 subdomain (Secret, StorageClass names).
fn dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && part.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
}

/// A Kubernetes quantity as the CRD accepts it (`1Gi`, `500M`, `1.5Gi`), and not zero.
fn storage_quantity(size: &str) -> bool {
    const SUFFIXES: [&str; 12] = [
        "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E",
    ];
    let number = SUFFIXES
        .iter()
        .find_map(|s| size.strip_suffix(s))
        .unwrap_or(size);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, "0"));
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    digits(whole) && digits(fraction) && number.chars().any(|c| c.is_ascii_digit() && c != '0')
}

fn check_storage(field: &str, storage: &StorageSpec, problems: &mut Vec<String>) {
    if !storage_quantity(&storage.size) {
        problems.push(format!(
            "{field}.size {:?} is not a storage quantity above zero such as 1Gi",
            storage.size
        ));
    }
    if let Some(class) = &storage.storage_class_name
        && !dns_subdomain(class)
    {
        problems.push(format!(
            "{field}.storageClassName {class:?} is not a valid StorageClass name"
        ));
    }
}

/// Parses the major version.
pub fn parse_major(text: &str) -> Result<u32, String> {
    let major: u32 = text
        .parse()
        .map_err(|_| format!("version {text:?} is not a PostgreSQL major version such as 16"))?;
    if !(MIN_MAJOR..=MAX_MAJOR).contains(&major) {
        return Err(format!(
            "version {text:?} is not supported: Steward runs PostgreSQL {MIN_MAJOR} to {MAX_MAJOR}"
        ));
    }
    Ok(major)
}

/// A value with the surrounding single quotes of `postgresql.conf` removed.
fn unquoted(value: &str) -> &str {
    let value = value.trim();
    value
        .strip_prefix('\'')
        .and_then(|v| v.strip_suffix('\''))
        .unwrap_or(value)
}

/// PostgreSQL's boolean spelling (`parse_bool`): `on`, `true`, `yes`, `1` and unique prefixes.
fn parse_bool(value: &str) -> Option<bool> {
    let v = unquoted(value).to_ascii_lowercase();
    let prefix_of = |word: &str| !v.is_empty() && word.starts_with(v.as_str());
    match v.as_str() {
        "1" | "on" => Some(true),
        "0" | "of" | "off" => Some(false),
        _ if prefix_of("true") || prefix_of("yes") => Some(true),
        _ if prefix_of("false") || prefix_of("no") => Some(false),
        _ => None,
    }
}

/// A parameter name: letters, digits and `_`, with dots separating a custom class
/// (`pg_stat_statements.max`); what `script::postgresql_conf` writes (it leaves others out).
fn parameter_name(name: &str) -> bool {
    name.split('.').all(|part| {
        part.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Checks one parameter whose value Steward depends on; `None` when it is acceptable.
fn check_parameter(name: &str, value: &str, instances: i32) -> Option<String> {
    if let Some((_, why)) = OWNED_PARAMETERS.iter().find(|(owned, _)| *owned == name) {
        return Some(format!(
            "parameters.{name} is set by Steward and cannot be changed ({why})"
        ));
    }
    if name.starts_with("recovery_target") {
        return Some(format!(
            "parameters.{name} is set by Steward and cannot be changed (replicas follow the \
             primary onto its latest timeline; a recovery target would stop or promote one on \
             its own)"
        ));
    }
    let must_be_on = |why: &str| match parse_bool(value) {
        Some(true) => None,
        Some(false) => Some(format!("parameters.{name} must stay on ({why})")),
        None => Some(format!(
            "parameters.{name} value {value:?} is not a boolean"
        )),
    };
    match name {
        "wal_level" => match unquoted(value).to_ascii_lowercase().as_str() {
            "replica" | "logical" => None,
            _ => Some(format!(
                "parameters.wal_level must be replica or logical, got {value:?} (replicas stream \
                 the WAL)"
            )),
        },
        "hot_standby" => must_be_on("Steward queries replicas to follow their replication"),
        "full_page_writes" => must_be_on("pg_rewind needs it to bring a former primary back"),
        "max_wal_senders" => {
            let needed = instances.saturating_add(1);
            match unquoted(value).parse::<i32>() {
                Ok(n) if n >= needed => None,
                Ok(n) => Some(format!(
                    "parameters.max_wal_senders must be at least {needed} for {instances} \
                     instances (one per replica and two while a new replica is cloned), got {n}"
                )),
                Err(_) => Some(format!(
                    "parameters.max_wal_senders value {value:?} is not an integer"
                )),
            }
        }
        _ => None,
    }
}

fn check_parameters(
    parameters: &BTreeMap<String, String>,
    instances: i32,
    major: Option<u32>,
    problems: &mut Vec<String>,
) -> BTreeMap<String, String> {
    let mut checked = BTreeMap::new();
    for (raw, value) in parameters {
        let name = raw.to_ascii_lowercase();
        if !parameter_name(&name) {
            problems.push(format!("parameters: {raw:?} is not a parameter name"));
            continue;
        }
        if value.contains(['\n', '\r', '\0']) {
            problems.push(format!(
                "parameters.{name} must be on one line (no line breaks or NUL bytes)"
            ));
            continue;
        }
        if let Some(problem) = check_parameter(&name, value, instances)
            .or_else(|| major.and_then(|major| settings::check(major, &name, value, parse_bool)))
        {
            problems.push(problem);
        }
        if checked.insert(name.clone(), value.clone()).is_some() {
            problems.push(format!(
                "parameters.{name} is given twice (names are case-insensitive)"
            ));
        }
    }
    checked
}

/// A role name as the CRD accepts it: `^[a-z_][a-z0-9_]{0,62}$`.
fn role_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// A database name Steward creates: a letter or `_`, then letters, digits, `_` or `-`; at most
/// 63 bytes (PostgreSQL would truncate longer names).
fn database_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A Secret data key.
fn secret_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn check_users(users: &[PostgresUser], names: &ClusterNames, problems: &mut Vec<String>) {
    let own_secrets = [
        names.superuser_secret(),
        names.replication_secret(),
        names.applied_passwords_secret(),
    ];
    let mut seen = BTreeSet::new();
    for user in users {
        let name = &user.name;
        let field = format!("users[{name}]");
        if !role_name(name) {
            problems.push(format!(
                "{field}: the name must be 1 to 63 lowercase letters, digits or _, not starting \
                 with a digit"
            ));
        }
        if RESERVED_USERS.contains(&name.as_str()) || name.starts_with("pg_") {
            problems.push(format!(
                "{field}: the name is reserved (steward, replicator, postgres and pg_* are \
                 PostgreSQL's or Steward's own)"
            ));
        }
        if !seen.insert(name.as_str()) {
            problems.push(format!("{field}: the user is listed twice"));
        }
        let mut databases = BTreeSet::new();
        for db in &user.databases {
            if !database_name(db) {
                problems.push(format!(
                    "{field}.databases: {db:?} must be 1 to 63 letters, digits, _ or -, starting \
                     with a letter or _"
                ));
            } else if db == "template0" || db == "template1" {
                problems.push(format!("{field}.databases: {db:?} is a template database"));
            }
            if !databases.insert(db.as_str()) {
                problems.push(format!("{field}.databases: {db:?} is listed twice"));
            }
        }
        let secret = &user.password_secret;
        if !dns_subdomain(&secret.name) {
            problems.push(format!(
                "{field}.passwordSecret.name {:?} is not a valid Secret name",
                secret.name
            ));
        } else if own_secrets.contains(&secret.name) {
            problems.push(format!(
                "{field}.passwordSecret.name {:?} is a Secret Steward generates for the cluster",
                secret.name
            ));
        }
        if !secret_key(&secret.key) {
            problems.push(format!(
                "{field}.passwordSecret.key {:?} is not a valid Secret key",
                secret.key
            ));
        }
        if user
            .options
            .connection_limit
            .is_some_and(|n| n == 0 || i32::try_from(n).is_err())
        {
            problems.push(format!(
                "{field}.options.connectionLimit must be between 1 and {}",
                i32::MAX
            ));
        }
    }
}

/// Validates a cluster. Every problem is listed in the message, for users.
pub fn validate(cluster: &PostgresCluster) -> Result<ValidatedPostgresCluster, String> {
    let mut problems = Vec::new();
    let name = cluster.name_any();
    if !dns_label(&name) || name.len() > MAX_NAME_LEN {
        problems.push(format!(
            "name {name:?} must be a DNS label of at most {MAX_NAME_LEN} characters starting \
             with a letter (children are named <name>{LONGEST_SUFFIX})"
        ));
    }
    let namespace = cluster.namespace().unwrap_or_default();
    let names = ClusterNames::new(&name, &namespace);
    let spec = &cluster.spec;

    let instances = u32::try_from(spec.instances)
        .ok()
        .filter(|n| (1..=MAX_INSTANCES.unsigned_abs()).contains(n));
    if instances.is_none() {
        problems.push(format!(
            "instances must be between 1 and {MAX_INSTANCES}, got {}",
            spec.instances
        ));
    }
    let version = parse_major(&spec.version)
        .map_err(|e| problems.push(e))
        .ok();
    let image = spec.image();
    if image.is_empty() || image.contains(char::is_whitespace) {
        problems.push(format!("image {image:?} is not an image reference"));
    }

    check_storage("storage", &spec.storage, &mut problems);
    let mut instance_storage = BTreeMap::new();
    for entry in &spec.instance_storage {
        let field = format!("instanceStorage[{}]", entry.ordinal);
        match u32::try_from(entry.ordinal) {
            Ok(ordinal) if i64::from(ordinal) < i64::from(spec.instances) => {
                if instance_storage
                    .insert(ordinal, entry.storage.clone())
                    .is_some()
                {
                    problems.push(format!("{field}: the ordinal is listed twice"));
                }
            }
            _ => problems.push(format!(
                "{field}: the ordinal must be between 0 and instances − 1 ({})",
                spec.instances.saturating_sub(1)
            )),
        }
        check_storage(&format!("{field}.storage"), &entry.storage, &mut problems);
    }

    let mut parameters = check_parameters(&spec.parameters, spec.instances, version, &mut problems);
    let data_source = spec.data_source.as_ref().and_then(|d| d.pgbackrest.clone());
    let base_backup_source = spec
        .data_source
        .as_ref()
        .and_then(|d| d.pgbasebackup.clone());
    if base_backup_source
        .as_ref()
        .is_some_and(|s| s.cluster == name)
    {
        problems.push("dataSource.pgbasebackup.cluster names this cluster itself".to_owned());
    }
    if let Some(source) = &data_source {
        if source.cluster == name {
            problems.push("dataSource.pgbackrest.cluster names this cluster itself".to_owned());
        }
        if let Err(why) = crate::postgres::build::pgbackrest::restore_target_args(
            source.target.as_ref(),
            source.backup_set.as_deref(),
        ) {
            problems.push(format!("dataSource.pgbackrest: {why}"));
        }
    }
    let pgbackrest = spec.backups.as_ref().and_then(|b| b.pgbackrest.clone());
    if let Some(pgbackrest) = &pgbackrest {
        check_storage(
            "backups.pgbackrest.storage",
            &pgbackrest.storage,
            &mut problems,
        );
        if pgbackrest.image.is_empty() || pgbackrest.image.contains(char::is_whitespace) {
            problems.push(format!(
                "backups.pgbackrest.image {:?} is not an image reference",
                pgbackrest.image
            ));
        }
        for (name, value) in crate::postgres::build::pgbackrest::archive_parameters() {
            if spec.parameters.keys().any(|k| k.eq_ignore_ascii_case(name)) {
                problems.push(format!(
                    "parameters.{name} is set by Steward while backups.pgbackrest is on \
                     (WAL goes to the cluster's pgBackRest repository)"
                ));
            }
            parameters.insert(name.to_owned(), value);
        }
    }
    check_users(&spec.users, &names, &mut problems);

    if let Some(label) = &spec.node_label
        && label.key.is_empty()
    {
        problems.push("nodeLabel.key must not be empty".to_owned());
    }
    if let Some(metrics) = &spec.metrics {
        if !(1024..=65535).contains(&metrics.port) || metrics.port == PORT {
            problems.push(format!(
                "metrics.port must be between 1024 and 65535 and not {PORT}, got {}",
                metrics.port
            ));
        }
        if metrics.image.is_empty() || metrics.image.contains(char::is_whitespace) {
            problems.push(format!(
                "metrics.image {:?} is not an image reference",
                metrics.image
            ));
        }
    }
    if !(1..=3600).contains(&spec.failover.detection_delay_seconds) {
        problems.push(format!(
            "failover.detectionDelaySeconds must be between 1 and 3600, got {}",
            spec.failover.detection_delay_seconds
        ));
    }
    if !(1..=20).contains(&spec.health_gate.checks) {
        problems.push(format!(
            "healthGate.checks must be between 1 and 20, got {}",
            spec.health_gate.checks
        ));
    }
    if !(1..=600).contains(&spec.health_gate.interval_seconds) {
        problems.push(format!(
            "healthGate.intervalSeconds must be between 1 and 600, got {}",
            spec.health_gate.interval_seconds
        ));
    }

    match (problems.is_empty(), instances, version) {
        (true, Some(instances), Some(version)) => Ok(ValidatedPostgresCluster {
            namespace,
            name,
            instances,
            version,
            image,
            storage: spec.storage.clone(),
            instance_storage,
            pod_template: spec.pod_template.clone(),
            node_label: spec.node_label.clone(),
            anti_affinity: spec.anti_affinity,
            parameters,
            users: spec.users.clone(),
            failover: spec.failover.clone(),
            health_gate: spec.health_gate.clone(),
            paused: spec.paused,
            metrics: spec.metrics.clone(),
            pgbackrest,
            data_source,
            base_backup_source,
            data_epoch: cluster
                .status
                .as_ref()
                .and_then(|s| s.data_epoch)
                .unwrap_or(0),
        }),
        _ => Err(problems.join("; ")),
    }
}

/// Fixtures shared with the builders' tests, and the tests of [`validate`].
#[cfg(test)]
pub(crate) mod tests;
