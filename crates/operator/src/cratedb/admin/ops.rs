//! The statements the engine sends and the reading of their answers. Every operation takes the
//! nodes to try, in order, and moves to the next only when one is unreachable.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{CrateChannels, CrateError, Endpoint, Login, Rows};
use crate::cratedb::plan::scale::CopyView;
use crate::resources::secrets::Password;

/// A CrateDB string literal: `'` doubled.
pub fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A CrateDB identifier: `"` doubled.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The allocation exclusion setting scaling uses (seed 000, step 3).
pub const EXCLUDE_NAME: &str = "cluster.routing.allocation.exclude._name";

/// The node check acknowledged after scaling (seed 000, step 4): `gateway.expected_data_nodes`.
pub const EXPECTED_NODES_CHECK: i64 = 1;

/// Runs `call` on each node in turn until one answers (anything but
/// [`CrateError::Unavailable`]); `none` is the error when there is no node at all.
async fn first_answer<'a, T, F, Fut>(
    nodes: &'a [Endpoint],
    none: &str,
    call: F,
) -> Result<T, CrateError>
where
    F: Fn(&'a Endpoint) -> Fut,
    Fut: std::future::Future<Output = Result<T, CrateError>>,
{
    let mut last = CrateError::Unavailable(none.to_owned());
    for node in nodes {
        match call(node).await {
            Err(CrateError::Unavailable(why)) => {
                last = CrateError::Unavailable(format!("{}: {why}", node.pod));
            }
            other => return other,
        }
    }
    Err(last)
}

async fn http_any(
    ch: &dyn CrateChannels,
    nodes: &[Endpoint],
    login: &Login,
    stmt: &str,
    args: &[Value],
) -> Result<Rows, CrateError> {
    first_answer(nodes, "no node has an address yet", |n| {
        ch.http(n, login, stmt, args)
    })
    .await
}

async fn pg_any(
    ch: &dyn CrateChannels,
    nodes: &[Endpoint],
    login: &Login,
    statements: &str,
) -> Result<(), CrateError> {
    first_answer(nodes, "no node has an address yet", |n| {
        ch.pg(n, login, statements)
    })
    .await
}

async fn crash_any(
    ch: &dyn CrateChannels,
    masters: &[Endpoint],
    statements: &str,
) -> Result<(), CrateError> {
    first_answer(masters, "no master Pod is ready", |n| {
        ch.crash(n, statements)
    })
    .await
}

/// Seed 000: the license is set first, with `crash` in a master.
pub async fn set_license(
    ch: &dyn CrateChannels,
    masters: &[Endpoint],
    license: &Password,
) -> Result<(), CrateError> {
    crash_any(
        ch,
        masters,
        &format!("SET LICENSE {};", literal(license.expose())),
    )
    .await
}

/// Seed 000: the `system` user, created with `crash` in a master — "already exists" is fine —
/// and granted `ALL`.
pub async fn create_system_user(
    ch: &dyn CrateChannels,
    masters: &[Endpoint],
    password: &Password,
) -> Result<(), CrateError> {
    let create = format!(
        "CREATE USER {} WITH (password = {});",
        ident(super::super::names::SYSTEM_USER),
        literal(password.expose())
    );
    match crash_any(ch, masters, &create).await {
        Ok(()) | Err(CrateError::AlreadyExists(_)) => {}
        Err(e) => return Err(e),
    }
    crash_any(
        ch,
        masters,
        &format!(
            "GRANT ALL PRIVILEGES TO {};",
            ident(super::super::names::SYSTEM_USER)
        ),
    )
    .await
}

/// Seed 000: a user of the spec, created over the PostgreSQL protocol as `system` with `ALL`
/// privileges. Returns whether it was created (false: it existed, and was granted `ALL`).
pub async fn create_user(
    ch: &dyn CrateChannels,
    nodes: &[Endpoint],
    system: &Login,
    name: &str,
    password: &Password,
) -> Result<bool, CrateError> {
    let create = format!(
        "CREATE USER {} WITH (password = {})",
        ident(name),
        literal(password.expose())
    );
    let created = match pg_any(ch, nodes, system, &create).await {
        Ok(()) => true,
        Err(CrateError::AlreadyExists(_)) => false,
        Err(e) => return Err(e),
    };
    pg_any(
        ch,
        nodes,
        system,
        &format!("GRANT ALL PRIVILEGES TO {}", ident(name)),
    )
    .await?;
    Ok(created)
}

/// Seed 000: a password change logs in as the user with its **old** password and runs
/// `ALTER USER`. A refused login means the password was changed inside CrateDB.
pub async fn change_password(
    ch: &dyn CrateChannels,
    nodes: &[Endpoint],
    user: &Login,
    new: &Password,
) -> Result<(), CrateError> {
    pg_any(
        ch,
        nodes,
        user,
        &format!(
            "ALTER USER {} SET (password = {})",
            ident(&user.user),
            literal(new.expose())
        ),
    )
    .await
}

/// Whether `login` can log in (over HTTP, with a trivial query).
pub async fn can_log_in(
    ch: &dyn CrateChannels,
    nodes: &[Endpoint],
    login: &Login,
) -> Result<bool, CrateError> {
    match http_any(ch, nodes, login, "SELECT 1 FROM sys.cluster", &[]).await {
        Ok(_) => Ok(true),
        Err(CrateError::AuthFailed(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// What the engine reads from the cluster on every pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// Node names in the cluster.
    pub nodes: Vec<String>,
    /// The elected master's name.
    pub master: Option<String>,
    /// `GREEN`, `YELLOW` or `RED`.
    pub health: String,
    /// Shard copies by node name.
    pub shards_by_node: BTreeMap<String, u32>,
    /// Every assigned shard copy.
    pub copies: Vec<CopyView>,
    /// The most replicas any table wants.
    pub max_table_replicas: u32,
    /// Nodes excluded from allocation.
    pub excluded: Vec<String>,
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The upper bound of `number_of_replicas`: `1`, `0-1` → 1, `2-4` → 4, `0-all` → 0 (it follows
/// the nodes, so it never blocks a shrink).
pub fn replicas_upper_bound(value: &str) -> u32 {
    let upper = value.rsplit('-').next().unwrap_or(value);
    upper.trim().parse().unwrap_or(0)
}

/// Health from `max(severity)` of `sys.health`: none or 1 GREEN, 2 YELLOW, 3 RED.
pub fn health_of(severity: Option<i64>) -> &'static str {
    match severity {
        Some(3) => "RED",
        Some(2) => "YELLOW",
        _ => "GREEN",
    }
}

/// Reads [`Observed`] as `system`.
pub async fn observe(
    ch: &dyn CrateChannels,
    nodes: &[Endpoint],
    system: &Login,
) -> Result<Observed, CrateError> {
    let q = |stmt: &'static str| http_any(ch, nodes, system, stmt, &[]);
    let names = q("SELECT id, name FROM sys.nodes ORDER BY name").await?;
    let ids: BTreeMap<String, String> = names
        .iter()
        .filter_map(|r| Some((text(r.first()?)?, text(r.get(1)?)?)))
        .collect();
    let cluster = q(
        "SELECT master_node, settings['cluster']['routing']['allocation']['exclude']['_name'] FROM sys.cluster",
    )
    .await?;
    let row = cluster.first();
    let master = row
        .and_then(|r| r.first())
        .and_then(text)
        .and_then(|id| ids.get(&id).cloned());
    let excluded = row
        .and_then(|r| r.get(1))
        .and_then(text)
        .map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let severity = q("SELECT max(severity) FROM sys.health").await?;
    let severity = severity
        .first()
        .and_then(|r| r.first())
        .and_then(Value::as_i64);
    let tables = q(
        "SELECT table_schema, table_name, number_of_replicas FROM information_schema.tables WHERE table_schema NOT IN ('sys', 'information_schema', 'pg_catalog', 'blob')",
    )
    .await?;
    let mut max_table_replicas = 0;
    let mut expanding = std::collections::BTreeSet::new();
    for r in &tables {
        let (Some(schema), Some(name), Some(replicas)) = (
            r.first().and_then(text),
            r.get(1).and_then(text),
            r.get(2).and_then(text),
        ) else {
            continue;
        };
        max_table_replicas = max_table_replicas.max(replicas_upper_bound(&replicas));
        if replicas.trim().to_lowercase().ends_with("-all") {
            expanding.insert(format!("{schema}.{name}"));
        }
    }
    let shards =
        q("SELECT schema_name, table_name, id, node['name'], routing_state FROM sys.shards")
            .await?;
    let copies: Vec<CopyView> = shards
        .iter()
        .filter_map(|r| {
            let table = format!("{}.{}", text(r.first()?)?, text(r.get(1)?)?);
            let state = text(r.get(4)?)?;
            Some(CopyView {
                shard: u32::try_from(r.get(2)?.as_i64()?).ok()?,
                node: text(r.get(3)?)?,
                active: state == "STARTED" || state == "RELOCATING",
                expanding: expanding.contains(&table),
                table,
            })
        })
        .collect();
    let mut shards_by_node = BTreeMap::new();
    for c in &copies {
        *shards_by_node.entry(c.node.clone()).or_insert(0) += 1;
    }
    Ok(Observed {
        nodes: ids.into_values().collect(),
        master,
        health: health_of(severity).to_owned(),
        shards_by_node,
        copies,
        max_table_replicas,
        excluded,
    })
}

/// Seed 000, step 3: move every shard off `nodes`.
pub async fn exclude(
    ch: &dyn CrateChannels,
    nodes: &[Endpoint],
    system: &Login,
    names: &[String],
) -> Result<(), CrateError> {
    http_any(
        ch,
        nodes,
        system,
        &format!(
            "SET GLOBAL TRANSIENT {} = {}",
            ident(EXCLUDE_NAME),
            literal(&names.join(","))
        ),
        &[],
    )
    .await
    .map(drop)
}

/// Seed 000, step 4: reset the allocation settings and acknowledge node check 1.
pub async fn reset_after_scaling(
    ch: &dyn CrateChannels,
    nodes: &[Endpoint],
    system: &Login,
) -> Result<(), CrateError> {
    http_any(
        ch,
        nodes,
        system,
        &format!("RESET GLOBAL {}", ident(EXCLUDE_NAME)),
        &[],
    )
    .await?;
    http_any(
        ch,
        nodes,
        system,
        &format!(
            "UPDATE sys.node_checks SET acknowledged = true WHERE id = {EXPECTED_NODES_CHECK}"
        ),
        &[],
    )
    .await
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_identifiers_are_quoted() {
        assert_eq!(literal("it's"), "'it''s'");
        assert_eq!(ident("a\"b"), "\"a\"\"b\"");
    }

    #[test]
    fn replica_bounds_and_health() {
        assert_eq!(replicas_upper_bound("1"), 1);
        assert_eq!(replicas_upper_bound("0-1"), 1);
        assert_eq!(replicas_upper_bound("2-4"), 4);
        assert_eq!(replicas_upper_bound("0-all"), 0);
        assert_eq!(health_of(None), "GREEN");
        assert_eq!(health_of(Some(2)), "YELLOW");
        assert_eq!(health_of(Some(3)), "RED");
    }
}
