//! The commands the engine runs and the reading of their answers. Every operation takes the
//! Pods to try, in order, and moves to the next only when one cannot run the tool.

use super::cli::{self, LockValue};
use super::status::DbStatus;
use super::{FdbAdmin, FdbError, Target};

/// Runs `commands` with fdbcli in the first Pod that can.
pub async fn cli_any(
    admin: &dyn FdbAdmin,
    targets: &[Target],
    commands: &str,
) -> Result<String, FdbError> {
    let mut last = FdbError::Unavailable("no Pod of the cluster is running".to_owned());
    for t in targets {
        match admin.cli(t, commands).await {
            Err(FdbError::Unavailable(why)) => {
                last = FdbError::Unavailable(format!("{}: {why}", t.pod));
            }
            other => return other,
        }
    }
    Err(last)
}

/// The machine-readable status.
pub async fn status(admin: &dyn FdbAdmin, targets: &[Target]) -> Result<DbStatus, FdbError> {
    DbStatus::parse(&cli_any(admin, targets, "status json").await?)
}

/// `configure new …` (once) or `configure …`.
pub async fn configure(
    admin: &dyn FdbAdmin,
    targets: &[Target],
    new: bool,
    arguments: &str,
) -> Result<(), FdbError> {
    let command = if new {
        format!("configure new {arguments}")
    } else {
        format!("configure {arguments}")
    };
    cli_any(admin, targets, &command).await.map(drop)
}

/// `<command> <items…>`; nothing to do for no items.
async fn with_list(
    admin: &dyn FdbAdmin,
    targets: &[Target],
    command: &str,
    items: &[String],
) -> Result<(), FdbError> {
    if items.is_empty() {
        return Ok(());
    }
    cli_any(admin, targets, &format!("{command} {}", items.join(" ")))
        .await
        .map(drop)
}

/// `exclude no_wait …` (all at once: one command, at most one recovery).
pub async fn exclude(
    admin: &dyn FdbAdmin,
    targets: &[Target],
    what: &[String],
) -> Result<(), FdbError> {
    with_list(admin, targets, "exclude no_wait", what).await
}

/// `include …` (batched).
pub async fn include(
    admin: &dyn FdbAdmin,
    targets: &[Target],
    what: &[String],
) -> Result<(), FdbError> {
    with_list(admin, targets, "include", what).await
}

/// `coordinators …` (never empty: the caller chose `2R - 1`).
pub async fn coordinators(
    admin: &dyn FdbAdmin,
    targets: &[Target],
    addresses: &[String],
) -> Result<(), FdbError> {
    with_list(admin, targets, "coordinators", addresses).await
}

/// `kill; kill …`: the processes exit and their monitors start them again.
pub async fn kill(
    admin: &dyn FdbAdmin,
    targets: &[Target],
    addresses: &[String],
) -> Result<(), FdbError> {
    with_list(admin, targets, "kill; kill", addresses).await
}

/// `get <key>`.
pub async fn get(
    admin: &dyn FdbAdmin,
    targets: &[Target],
    key: &[u8],
) -> Result<Option<Vec<u8>>, FdbError> {
    cli::parse_get(&cli_any(admin, targets, &format!("get {}", cli::escape(key))).await?)
}

/// `writemode on; set <key> <value>`.
pub async fn set(
    admin: &dyn FdbAdmin,
    targets: &[Target],
    key: &[u8],
    value: &[u8],
) -> Result<(), FdbError> {
    cli_any(
        admin,
        targets,
        &format!(
            "writemode on; set {} {}",
            cli::escape(key),
            cli::escape(value)
        ),
    )
    .await
    .map(drop)
}

/// `writemode on; clear <key>`.
pub async fn clear(admin: &dyn FdbAdmin, targets: &[Target], key: &[u8]) -> Result<(), FdbError> {
    cli_any(
        admin,
        targets,
        &format!("writemode on; clear {}", cli::escape(key)),
    )
    .await
    .map(drop)
}

/// `getrange <begin> <end> <limit>`: the pairs, in key order.
pub async fn get_range(
    admin: &dyn FdbAdmin,
    targets: &[Target],
    begin: &[u8],
    end: &[u8],
    limit: usize,
) -> Result<cli::Pairs, FdbError> {
    cli::parse_range(
        &cli_any(
            admin,
            targets,
            &format!(
                "getrange {} {} {limit}",
                cli::escape(begin),
                cli::escape(end)
            ),
        )
        .await?,
    )
}

/// `writemode on; set …` of several pairs in one fdbcli run.
pub async fn set_all(
    admin: &dyn FdbAdmin,
    targets: &[Target],
    pairs: &[(Vec<u8>, Vec<u8>)],
) -> Result<(), FdbError> {
    if pairs.is_empty() {
        return Ok(());
    }
    let sets: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("set {} {}", cli::escape(k), cli::escape(v)))
        .collect();
    cli_any(
        admin,
        targets,
        &format!("writemode on; {}", sets.join("; ")),
    )
    .await
    .map(drop)
}

/// `writemode on; clearrange <begin> <end>`.
pub async fn clear_range(
    admin: &dyn FdbAdmin,
    targets: &[Target],
    begin: &[u8],
    end: &[u8],
) -> Result<(), FdbError> {
    cli_any(
        admin,
        targets,
        &format!(
            "writemode on; clearrange {} {}",
            cli::escape(begin),
            cli::escape(end)
        ),
    )
    .await
    .map(drop)
}

/// The global lock as it is in the database.
pub async fn read_lock(
    admin: &dyn FdbAdmin,
    targets: &[Target],
) -> Result<Option<LockValue>, FdbError> {
    get(admin, targets, cli::LOCK_KEY)
        .await?
        .map(|v| LockValue::unpack(&v))
        .transpose()
}

/// Whether `id` is on the database's deny list.
pub async fn denied(admin: &dyn FdbAdmin, targets: &[Target], id: &str) -> Result<bool, FdbError> {
    Ok(get(admin, targets, &cli::deny_key(id)).await?.is_some())
}
