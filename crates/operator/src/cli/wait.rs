//! `--wait`: follow a long action until it is finished, from `status.operation`.
//!
//! The finish rule is the API contract's: an action is finished when GET cluster shows
//! `status.observedGeneration >= generation` (the generation the action's answer named), no
//! operation with phase `Running`, and condition `Available=True`; a fail-over also needs
//! `status.lastSwitchover == switchoverId` (and `currentPrimary == target` when a target was
//! named); a delete is finished when GET answers 404. It failed when the operation the action
//! started (its `generation` at least the action's) reaches phase `Failed`.
//!
//! An answer that names no generation is finished once an operation was seen running since the
//! request and none runs any more, with `Available=True`. A restore and an upgrade are followed
//! through their own object first (`GET …/restores/{name}`, `…/upgrades/{name}`: a refusal or
//! a failure ends the wait with its reason), then the cluster as above on its generation.
//!
//! Every member the spec asks for must be ready too: `readyInstances` (PostgreSQL),
//! `readyMembers` (etcd), and for a CrateDB cluster each node set of `spec.nodes` (`master`,
//! then the data sets) with as many ready nodes as it asks for in `status.nodeSets`; a CrateDB
//! cluster also has to be bootstrapped and run the spec's image (`status.image`) with the
//! spec's restart annotation rolled out (`status.restartedAt`), which the engine records only
//! once a rolling restart or upgrade is over; a FoundationDB cluster has to have its generation
//! reconciled (`status.generations.reconciled`).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::CliError;
use super::client::ApiClient;
use super::output::describe_operation;

/// What the caller waits for, taken from the action's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expectation {
    /// The generation the action produced (`None`: a restore, which changes no spec).
    pub generation: Option<i64>,
    /// A fail-over's request id.
    pub switchover_id: Option<String>,
    /// A fail-over's named target.
    pub target: Option<String>,
    /// The cluster is to be gone.
    pub delete: bool,
}

impl Expectation {
    /// From an Accepted (202) answer, or a ClusterDetail (create: 201).
    pub fn from_answer(answer: &Value, target: Option<&str>) -> Self {
        Self {
            generation: answer.get("generation").and_then(Value::as_i64),
            switchover_id: answer
                .get("switchoverId")
                .and_then(Value::as_str)
                .map(str::to_string),
            target: target.map(str::to_string),
            delete: answer.get("action").and_then(Value::as_str) == Some("delete"),
        }
    }
}

/// Where an action stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitState {
    /// Not finished; what to show.
    Running(Progress),
    /// Finished.
    Done,
    /// Failed, with the operation's message.
    Failed(String),
}

/// What the progress display shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Units done, when an operation runs.
    pub done: u64,
    /// Units in total (0: unknown).
    pub total: u64,
    /// One line: the operation, or what is awaited.
    pub line: String,
}

impl Progress {
    fn waiting(line: impl Into<String>) -> Self {
        Self {
            done: 0,
            total: 0,
            line: line.into(),
        }
    }
}

/// Judges one GET answer (`None`: 404). `seen_running` says whether an operation was seen
/// running since the request (only a restore's rule uses it).
pub fn judge(exp: &Expectation, current: Option<&Value>, seen_running: bool) -> WaitState {
    let Some(cluster) = current else {
        return if exp.delete {
            WaitState::Done
        } else {
            WaitState::Failed("the cluster is gone (GET answers 404)".into())
        };
    };
    if exp.delete {
        return WaitState::Running(match running_operation(cluster) {
            Some(op) => progress(op),
            None => Progress::waiting("deleting"),
        });
    }
    let status = cluster.get("status").unwrap_or(&Value::Null);
    let observed = status.get("observedGeneration").and_then(Value::as_i64);
    let ours = |op: &Value| match exp.generation {
        Some(g) => op.get("generation").and_then(Value::as_i64) >= Some(g),
        None => seen_running,
    };
    for key in ["operation", "lastOperation"] {
        if let Some(op) = status.get(key).filter(|op| phase(op) == Some("Failed"))
            && ours(op)
        {
            let message = op
                .get("message")
                .and_then(Value::as_str)
                .filter(|m| !m.is_empty())
                .unwrap_or("the operation failed");
            return WaitState::Failed(format!(
                "{} failed: {message}",
                op.get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or("operation")
            ));
        }
    }
    if let Some(op) = running_operation(cluster) {
        return WaitState::Running(progress(op));
    }
    if let Some(g) = exp.generation
        && observed.is_none_or(|o| o < g)
    {
        return WaitState::Running(Progress::waiting(format!(
            "waiting for the operator to observe generation {g}"
        )));
    }
    if exp.generation.is_none() && !seen_running {
        return WaitState::Running(Progress::waiting("waiting for the operation to start"));
    }
    if let Some(id) = &exp.switchover_id
        && status.get("lastSwitchover").and_then(Value::as_str) != Some(id)
    {
        return WaitState::Running(Progress::waiting(format!(
            "waiting for the fail-over request {id}"
        )));
    }
    if let Some(target) = &exp.target
        && status.get("currentPrimary").and_then(Value::as_str) != Some(target)
    {
        return WaitState::Running(Progress::waiting(format!(
            "waiting for {target} to become the primary"
        )));
    }
    // Done means every member the spec asks for is ready, not only a quorum (`Available`):
    // a scale's new member, a restarted or demoted instance, back in service.
    if let Some(line) = unready_node_set(cluster)
        .or_else(|| crate_rollout_pending(cluster))
        .or_else(|| fdb_rollout_pending(cluster))
    {
        return WaitState::Running(Progress::waiting(line));
    }
    let wanted = cluster
        .pointer("/spec/instances")
        .or_else(|| cluster.pointer("/spec/replicas"))
        .and_then(Value::as_i64);
    let ready = status
        .get("readyInstances")
        .or_else(|| status.get("readyMembers"))
        .and_then(Value::as_i64);
    if let (Some(wanted), Some(ready)) = (wanted, ready)
        && ready < wanted
    {
        return WaitState::Running(Progress::waiting(format!(
            "waiting for every member to be ready ({ready}/{wanted})"
        )));
    }
    let available = status
        .get("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Available"));
    match available {
        Some(c) if c.get("status").and_then(Value::as_str) == Some("True") => WaitState::Done,
        Some(c) => WaitState::Running(Progress::waiting(format!(
            "waiting for Available=True ({})",
            c.get("message")
                .and_then(Value::as_str)
                .filter(|m| !m.is_empty())
                .or_else(|| c.get("reason").and_then(Value::as_str))
                .unwrap_or("not yet")
        ))),
        None => WaitState::Running(Progress::waiting("waiting for Available=True")),
    }
}

/// (FoundationDB) Whether the engine has not reconciled the cluster's generation yet
/// (`status.generations.reconciled`: process groups added or removed, processes bounced, Pods
/// recreated), as a progress line.
fn fdb_rollout_pending(cluster: &Value) -> Option<String> {
    if cluster.get("engine").and_then(Value::as_str) != Some("foundationdb") {
        return None;
    }
    let generation = cluster
        .get("generation")
        .or_else(|| cluster.pointer("/metadata/generation"))
        .and_then(Value::as_i64)?;
    let reconciled = cluster
        .pointer("/status/generations/reconciled")
        .and_then(Value::as_i64);
    (reconciled < Some(generation)).then(|| {
        format!(
            "waiting for generation {generation} to be reconciled (process groups, bounces, Pods)"
        )
    })
}

/// (CrateDB) The first node set of `spec.nodes` whose StatefulSet does not have the nodes it
/// asks for, all ready (`status.nodeSets`), as a progress line; `None` when every set does,
/// or the cluster has no node sets.
fn unready_node_set(cluster: &Value) -> Option<String> {
    let nodes = cluster.pointer("/spec/nodes")?;
    let mut wanted: Vec<(&str, i64)> = Vec::new();
    if let Some(n) = nodes.pointer("/master/replicas").and_then(Value::as_i64) {
        wanted.push(("master", n));
    }
    for d in nodes
        .get("data")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let (Some(name), Some(n)) = (
            d.get("name").and_then(Value::as_str),
            d.get("replicas").and_then(Value::as_i64),
        ) {
            wanted.push((name, n));
        }
    }
    let status = cluster
        .pointer("/status/nodeSets")
        .and_then(Value::as_array);
    for (name, n) in wanted {
        let set = status
            .into_iter()
            .flatten()
            .find(|s| s.get("name").and_then(Value::as_str) == Some(name));
        let count = |key: &str| set.and_then(|s| s.get(key)).and_then(Value::as_i64);
        let (replicas, ready) = (count("replicas").unwrap_or(0), count("ready").unwrap_or(0));
        if replicas != n || ready < n {
            return Some(format!(
                "waiting for every node of node set {name} to be ready ({ready}/{n})"
            ));
        }
    }
    None
}

/// (CrateDB) What the engine has not rolled out yet: bootstrap (no `status.image`), the spec's
/// image, or the spec's restart annotation; `None` when all is rolled out or the cluster is
/// not a CrateDB cluster.
fn crate_rollout_pending(cluster: &Value) -> Option<String> {
    let config = cluster.pointer("/spec/cluster")?;
    let field = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    let image = format!(
        "{}:{}",
        field(config, "imageRegistry").unwrap_or_else(|| "crate".into()),
        field(config, "version").unwrap_or_default()
    );
    let status = cluster.get("status").unwrap_or(&Value::Null);
    match field(status, "image") {
        None => return Some("waiting for bootstrap (license, system user, users)".into()),
        Some(running) if running != image => {
            return Some(format!(
                "waiting for the nodes to run {image} (running {running})"
            ));
        }
        Some(_) => {}
    }
    let wanted = cluster
        .pointer("/spec/podTemplate/annotations")
        .and_then(|a| field(a, "steward.dev/restarted-at"));
    if wanted.is_some() && wanted != field(status, "restartedAt") {
        return Some(format!(
            "waiting for the rolling restart requested at {}",
            wanted.unwrap_or_default()
        ));
    }
    None
}

/// The operation in status with phase Running, if any.
pub fn running_operation(cluster: &Value) -> Option<&Value> {
    cluster
        .pointer("/status/operation")
        .filter(|op| phase(op) == Some("Running"))
}

fn phase(op: &Value) -> Option<&str> {
    op.get("phase").and_then(Value::as_str)
}

fn progress(op: &Value) -> Progress {
    Progress {
        done: op.get("done").and_then(Value::as_u64).unwrap_or(0),
        total: op.get("total").and_then(Value::as_u64).unwrap_or(0),
        line: describe_operation(op),
    }
}

/// Shows progress: a bar on a terminal, one line per change otherwise. Both go to standard
/// error, so standard output holds only the answer (`-o json` stays parseable).
enum Reporter {
    Bar(indicatif::ProgressBar),
    Lines(Option<String>),
}

impl Reporter {
    fn new() -> Self {
        if std::io::stdout().is_terminal() && std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(0);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {wide_msg}",
            ) {
                bar.set_style(style);
            }
            bar.enable_steady_tick(Duration::from_millis(200));
            Self::Bar(bar)
        } else {
            Self::Lines(None)
        }
    }

    fn show(&mut self, p: &Progress) {
        match self {
            Self::Bar(bar) => {
                bar.set_length(p.total);
                bar.set_position(p.done);
                bar.set_message(p.line.clone());
            }
            Self::Lines(last) => {
                if last.as_deref() != Some(p.line.as_str()) {
                    eprintln!("{}", p.line);
                    *last = Some(p.line.clone());
                }
            }
        }
    }

    fn finish(&mut self) {
        if let Self::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

/// Fetches every second and judges each answer until done (the last answer), failed, or
/// `timeout` passed; progress shown by a [`Reporter`].
async fn poll<T, F, Fut>(
    timeout: Duration,
    mut fetch: F,
    mut judge: impl FnMut(&T) -> WaitState,
) -> Result<T, CliError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, CliError>>,
{
    let started = Instant::now();
    let mut reporter = Reporter::new();
    loop {
        let current = fetch().await?;
        match judge(&current) {
            WaitState::Done => {
                reporter.finish();
                return Ok(current);
            }
            WaitState::Failed(message) => {
                reporter.finish();
                return Err(CliError::Failed(message));
            }
            WaitState::Running(p) => {
                reporter.show(&p);
                if started.elapsed() >= timeout {
                    reporter.finish();
                    return Err(CliError::Failed(format!(
                        "not finished after {} s: {}",
                        timeout.as_secs(),
                        p.line
                    )));
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Polls `path` every second until the action is finished, failed or `timeout` passed; the
/// last GET answer on success (`None` after a delete).
pub async fn wait(
    client: &ApiClient,
    path: &str,
    exp: &Expectation,
    timeout: Duration,
) -> Result<Option<Value>, CliError> {
    let mut seen_running = false;
    poll(
        timeout,
        || client.get_opt(path),
        |current: &Option<Value>| {
            if let Some(c) = current {
                seen_running |= running_operation(c).is_some();
            }
            judge(exp, current.as_ref(), seen_running)
        },
    )
    .await
}

/// Judges a BackupInfo: Completed is done, Failed failed (with its `error`, else its
/// message), anything else still running.
pub fn judge_backup(backup: &Value) -> WaitState {
    let text = |key: &str| {
        backup
            .get(key)
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
    };
    let phase = text("phase");
    let message = text("message");
    match phase {
        Some("Completed") => WaitState::Done,
        Some("Failed") => WaitState::Failed(format!(
            "backup failed: {}",
            text("error").or(message).unwrap_or("no message")
        )),
        other => WaitState::Running(Progress::waiting(format!(
            "backup {}{}",
            other.unwrap_or("Pending"),
            message.map(|m| format!(": {m}")).unwrap_or_default()
        ))),
    }
}

/// Where an upgrade (`GET …/upgrades/{name}`) stands: a refusal is `Failed` with its reason.
pub fn judge_upgrade(upgrade: &Value) -> WaitState {
    judge_named("upgrade", upgrade)
}

/// Where a restore (`GET …/restores/{name}`) stands: a refusal is `Failed` with its reason.
pub fn judge_restore(restore: &Value) -> WaitState {
    judge_named("restore", restore)
}

/// An object with a name, a phase (`Completed`, `Failed`, else still going), a step, a message
/// and an error (why it was refused or failed).
fn judge_named(what: &str, object: &Value) -> WaitState {
    let text = |key: &str| {
        object
            .get(key)
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
    };
    match text("phase") {
        Some("Completed") => WaitState::Done,
        Some("Failed") => WaitState::Failed(format!(
            "{what} {} failed: {}",
            text("name").unwrap_or("?"),
            text("error")
                .or_else(|| text("message"))
                .unwrap_or("no message")
        )),
        phase => WaitState::Running(Progress::waiting(format!(
            "{what} {}{}{}",
            phase.unwrap_or("Pending"),
            text("step").map(|s| format!(" ({s})")).unwrap_or_default(),
            text("message")
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ))),
    }
}

/// Polls an object with a phase (`path`: a backup, a restore, an upgrade) every second until `judge`
/// says it is done or failed, or `timeout` passed; its last answer.
pub async fn wait_phase(
    client: &ApiClient,
    path: &str,
    timeout: Duration,
    judge: fn(&Value) -> WaitState,
) -> Result<Value, CliError> {
    poll(
        timeout,
        || client.call(reqwest::Method::GET, path, None),
        judge,
    )
    .await
}

#[cfg(test)]
#[path = "wait_tests.rs"]
mod tests;
