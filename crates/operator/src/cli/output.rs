//! What the client commands print: `-o table` (aligned columns or `Key: value` lines, for
//! people), `-o json` and `-o yaml` (the API's answer as it came, for programs).

use serde_json::Value;

use super::CliError;

/// `-o`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Columns for people.
    #[default]
    Table,
    /// The API's JSON answer.
    Json,
    /// The API's answer as YAML.
    Yaml,
}

/// What an answer is, for its table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `{"clusters":[ClusterSummary]}`.
    ClusterList,
    /// ClusterDetail.
    ClusterDetail,
    /// Accepted (202).
    Accepted,
    /// `{"primary","candidates":[…]}`.
    Candidates,
    /// `{"users":[UserInfo]}`.
    UserList,
    /// UserInfo.
    User,
    /// `{"backups":[BackupInfo]}`.
    BackupList,
    /// BackupInfo.
    Backup,
    /// RestoreInfo.
    Restore,
    /// UpgradeInfo.
    Upgrade,
    /// `{"message"}`.
    Message,
    /// `{"client","server"}`.
    Version,
}

/// Renders an answer in a format; the text ends with a new line.
pub fn render(value: &Value, shape: Shape, format: Format) -> Result<String, CliError> {
    match format {
        Format::Json => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(|e| CliError::Protocol(format!("rendering JSON: {e}"))),
        Format::Yaml => serde_saphyr::to_string(value)
            .map(|s| if s.ends_with('\n') { s } else { s + "\n" })
            .map_err(|e| CliError::Protocol(format!("rendering YAML: {e}"))),
        Format::Table => Ok(table(value, shape)),
    }
}

fn table(value: &Value, shape: Shape) -> String {
    match shape {
        Shape::ClusterList => columns(
            &["ENGINE", "NAMESPACE", "NAME", "AVAILABLE", "OPERATION"],
            items(value, "clusters")
                .iter()
                .map(|c| {
                    vec![
                        text(c, "/engine"),
                        text(c, "/namespace"),
                        text(c, "/name"),
                        text(c, "/available"),
                        text(c, "/operation"),
                    ]
                })
                .collect(),
            "No clusters.",
        ),
        Shape::ClusterDetail => cluster_detail(value),
        Shape::Accepted | Shape::Message => {
            let mut out = text(value, "/message");
            out.push('\n');
            out
        }
        Shape::Candidates => {
            let mut out = format!("Primary: {}\n", text(value, "/primary"));
            out.push_str(&columns(
                &["CANDIDATE", "READY", "STREAMING", "LAG (BYTES)"],
                items(value, "candidates")
                    .iter()
                    .map(|c| {
                        vec![
                            text(c, "/name"),
                            text(c, "/ready"),
                            text(c, "/streaming"),
                            text(c, "/lagBytes"),
                        ]
                    })
                    .collect(),
                "No candidates.",
            ));
            out
        }
        Shape::UserList => user_rows(&items(value, "users")),
        Shape::User => user_rows(std::slice::from_ref(value)),
        Shape::BackupList => backup_rows(&items(value, "backups")),
        Shape::Backup => backup_rows(std::slice::from_ref(value)),
        Shape::Restore => key_values(&[
            ("Restore", text(value, "/name")),
            ("Cluster", text(value, "/cluster")),
            ("Phase", text(value, "/phase")),
            ("Step", text(value, "/step")),
            ("Message", text(value, "/message")),
        ]),
        Shape::Upgrade => key_values(&[
            ("Upgrade", text(value, "/name")),
            ("Cluster", text(value, "/cluster")),
            ("To", text(value, "/toVersion")),
            ("Phase", text(value, "/phase")),
            ("Step", text(value, "/step")),
        ]),
        Shape::Version => {
            let mut out = format!("steward {}\n", text(value, "/client"));
            if let Some(server) = value.get("server").filter(|s| !s.is_null()) {
                out.push_str(&format!("server {}\n", scalar(server)));
            }
            out
        }
    }
}

fn user_rows(users: &[Value]) -> String {
    columns(
        &[
            "USER",
            "DATABASES",
            "SUPERUSER",
            "CREATEDB",
            "SECRET",
            "READY",
        ],
        users
            .iter()
            .map(|u| {
                vec![
                    text(u, "/name"),
                    list(u, "/databases"),
                    text(u, "/superuser"),
                    text(u, "/createdb"),
                    text(u, "/secret"),
                    text(u, "/ready"),
                ]
            })
            .collect(),
        "No users.",
    )
}

fn backup_rows(backups: &[Value]) -> String {
    columns(
        &["BACKUP", "TYPE", "METHOD", "PHASE", "LABEL", "MESSAGE"],
        backups
            .iter()
            .map(|b| {
                vec![
                    text(b, "/name"),
                    text(b, "/type"),
                    text(b, "/method"),
                    text(b, "/phase"),
                    text(b, "/label"),
                    text(b, "/message"),
                ]
            })
            .collect(),
        "No backups.",
    )
}

/// `Key: value` lines, then the members or instances as columns.
fn cluster_detail(c: &Value) -> String {
    let engine = text(c, "/engine");
    if engine == "cratedb" {
        return crate_detail(c);
    }
    if engine == "foundationdb" {
        return fdb_detail(c);
    }
    let instances = if engine == "etcd" {
        text(c, "/spec/replicas")
    } else {
        text(c, "/spec/instances")
    };
    let ready = if engine == "etcd" {
        text(c, "/status/readyMembers")
    } else {
        text(c, "/status/readyInstances")
    };
    let mut pairs = vec![
        ("Name", text(c, "/name")),
        ("Namespace", text(c, "/namespace")),
        ("Engine", engine.clone()),
        ("Version", text(c, "/spec/version")),
        ("Instances", format!("{ready}/{instances} ready")),
        ("Available", condition(c, "Available")),
        (
            "Generation",
            format!(
                "{} (observed {})",
                text(c, "/generation"),
                text(c, "/status/observedGeneration")
            ),
        ),
    ];
    if engine == "postgres" {
        pairs.push(("Primary", text(c, "/status/currentPrimary")));
    }
    let operation = match c.pointer("/status/operation").filter(|o| !o.is_null()) {
        Some(op) => describe_operation(op),
        None => "-".to_string(),
    };
    pairs.push(("Operation", operation));
    if let Some(last) = c.pointer("/status/lastOperation").filter(|o| !o.is_null()) {
        pairs.push(("Last operation", describe_operation(last)));
    }
    let mut out = key_values(&pairs);
    if engine == "etcd" {
        let members = items(c.get("status").unwrap_or(&Value::Null), "members");
        if !members.is_empty() {
            out.push('\n');
            out.push_str(&columns(
                &["MEMBER", "HEALTHY", "LEADER", "LEARNER", "VERSION"],
                members
                    .iter()
                    .map(|m| {
                        vec![
                            text(m, "/name"),
                            text(m, "/healthy"),
                            text(m, "/leader"),
                            text(m, "/learner"),
                            text(m, "/version"),
                        ]
                    })
                    .collect(),
                "",
            ));
        }
    } else {
        let instances = items(c.get("status").unwrap_or(&Value::Null), "instances");
        if !instances.is_empty() {
            out.push('\n');
            out.push_str(&columns(
                &["INSTANCE", "ROLE", "READY", "STREAMING", "LAG (BYTES)"],
                instances
                    .iter()
                    .map(|i| {
                        vec![
                            text(i, "/name"),
                            text(i, "/role"),
                            text(i, "/ready"),
                            text(i, "/streaming"),
                            text(i, "/lagBytes"),
                        ]
                    })
                    .collect(),
                "",
            ));
        }
    }
    out
}

/// The generation line and the operation lines every engine's detail shows.
fn progress_pairs(c: &Value) -> Vec<(&'static str, String)> {
    let mut pairs = vec![(
        "Generation",
        format!(
            "{} (observed {})",
            text(c, "/generation"),
            text(c, "/status/observedGeneration")
        ),
    )];
    let operation = match c.pointer("/status/operation").filter(|o| !o.is_null()) {
        Some(op) => describe_operation(op),
        None => "-".to_string(),
    };
    pairs.push(("Operation", operation));
    if let Some(last) = c.pointer("/status/lastOperation").filter(|o| !o.is_null()) {
        pairs.push(("Last operation", describe_operation(last)));
    }
    pairs
}

/// A FoundationDB cluster: its process groups (those without a condition out of all), the
/// database's health, the running version and the connection string, then the process groups
/// as columns.
fn fdb_detail(c: &Value) -> String {
    let groups = items(c.get("status").unwrap_or(&Value::Null), "processGroups");
    let clean = groups
        .iter()
        .filter(|g| {
            g.get("conditions")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
        })
        .count();
    let flag = |name: &str, pointer: &str| {
        let on = c.pointer(pointer).and_then(Value::as_bool) == Some(true);
        format!("{}{name}", if on { "" } else { "not " })
    };
    let health = if c.pointer("/status/health").is_some() {
        [
            flag("available", "/status/health/available"),
            flag("healthy", "/status/health/healthy"),
            flag("fully replicated", "/status/health/fullReplication"),
        ]
        .join(", ")
    } else {
        "-".to_owned()
    };
    let mut pairs = vec![
        ("Name", text(c, "/name")),
        ("Namespace", text(c, "/namespace")),
        ("Engine", text(c, "/engine")),
        (
            "Version",
            format!(
                "{} (running {})",
                text(c, "/spec/version"),
                text(c, "/status/runningVersion")
            ),
        ),
        (
            "Process groups",
            format!("{clean}/{} without conditions", groups.len()),
        ),
        ("Health", health),
        ("Connection", text(c, "/status/connectionString")),
        ("Available", condition(c, "Available")),
    ];
    pairs.extend(progress_pairs(c));
    let mut out = key_values(&pairs);
    if !groups.is_empty() {
        out.push('\n');
        out.push_str(&columns(
            &["PROCESS GROUP", "CLASS", "ZONE", "ADDRESS", "CONDITIONS"],
            groups
                .iter()
                .map(|g| {
                    let conditions: Vec<String> = items(g, "conditions")
                        .iter()
                        .map(|k| text(k, "/type"))
                        .collect();
                    let address = g
                        .pointer("/addresses/0")
                        .map(scalar)
                        .unwrap_or_else(|| "-".to_owned());
                    vec![
                        text(g, "/processGroupID"),
                        text(g, "/processClass"),
                        text(g, "/faultDomain"),
                        address,
                        if conditions.is_empty() {
                            "-".to_owned()
                        } else {
                            conditions.join(",")
                        },
                    ]
                })
                .collect(),
            "",
        ));
    }
    out
}

/// A CrateDB cluster: nodes, health and the elected master, then its node sets as columns
/// (wanted by the spec, the StatefulSet's replicas, ready).
fn crate_detail(c: &Value) -> String {
    let mut sets: Vec<(String, String)> = Vec::new();
    if let Some(n) = c.pointer("/spec/nodes/master/replicas") {
        sets.push(("master".into(), scalar(n)));
    }
    for d in items(c.pointer("/spec/nodes").unwrap_or(&Value::Null), "data") {
        sets.push((text(&d, "/name"), text(&d, "/replicas")));
    }
    let wanted: i64 = sets.iter().filter_map(|(_, n)| n.parse::<i64>().ok()).sum();
    let mut pairs = vec![
        ("Name", text(c, "/name")),
        ("Namespace", text(c, "/namespace")),
        ("Engine", text(c, "/engine")),
        ("Version", text(c, "/spec/cluster/version")),
        (
            "Nodes",
            format!("{}/{wanted} ready", text(c, "/status/readyNodes")),
        ),
        ("Health", text(c, "/status/health")),
        ("Master", text(c, "/status/masterNode")),
        ("Available", condition(c, "Available")),
    ];
    pairs.extend(progress_pairs(c));
    let mut out = key_values(&pairs);
    let observed = items(c.get("status").unwrap_or(&Value::Null), "nodeSets");
    let rows: Vec<Vec<String>> = sets
        .into_iter()
        .map(|(name, n)| {
            let seen = observed
                .iter()
                .find(|s| s.get("name").and_then(Value::as_str) == Some(name.as_str()));
            let field = |p: &str| seen.map(|s| text(s, p)).unwrap_or_else(|| "-".into());
            vec![name.clone(), n, field("/replicas"), field("/ready")]
        })
        .collect();
    if !rows.is_empty() {
        out.push('\n');
        out.push_str(&columns(
            &["NODE SET", "WANTED", "REPLICAS", "READY"],
            rows,
            "",
        ));
    }
    out
}

/// `Scale Running AddMember 1/2: added pg-3`.
pub fn describe_operation(op: &Value) -> String {
    let mut out = format!(
        "{} {} {} {}/{}",
        text(op, "/kind"),
        text(op, "/phase"),
        text(op, "/step"),
        text(op, "/done"),
        text(op, "/total")
    );
    let message = text(op, "/message");
    if message != "-" && !message.is_empty() {
        out.push_str(": ");
        out.push_str(&message);
    }
    out
}

/// The status of a condition of a cluster detail, `-` when absent.
fn condition(c: &Value, kind: &str) -> String {
    items(c.get("status").unwrap_or(&Value::Null), "conditions")
        .iter()
        .find(|cond| cond.get("type").and_then(Value::as_str) == Some(kind))
        .map(|cond| text(cond, "/status"))
        .unwrap_or_else(|| "-".to_string())
}

fn items(value: &Value, key: &str) -> Vec<Value> {
    value
        .get(key)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// A field as text: `-` when absent or null.
fn text(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .map(scalar)
        .unwrap_or_else(|| "-".to_string())
}

fn scalar(value: &Value) -> String {
    match value {
        Value::Null => "-".to_string(),
        Value::String(s) if s.is_empty() => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn list(value: &Value, pointer: &str) -> String {
    match value.pointer(pointer).and_then(Value::as_array) {
        Some(a) if !a.is_empty() => a.iter().map(scalar).collect::<Vec<_>>().join(","),
        _ => "-".to_string(),
    }
}

fn key_values(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    pairs
        .iter()
        .map(|(k, v)| format!("{:<width$} {v}\n", format!("{k}:")))
        .collect()
}

/// Aligned columns, three spaces apart; `empty` alone when there are no rows.
fn columns(headers: &[&str], rows: Vec<Vec<String>>, empty: &str) -> String {
    if rows.is_empty() {
        return if empty.is_empty() {
            String::new()
        } else {
            format!("{empty}\n")
        };
    }
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}   "));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(headers.to_vec());
    for row in &rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
#[path = "output_tests.rs"]
mod tests;
