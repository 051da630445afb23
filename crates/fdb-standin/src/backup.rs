//! Backup and restore at the cluster controller: the backups' durable state (by tag), the
//! mutation log of running backups, the agents' lease, `fdbbackup status --json` and
//! `cluster.layers.backup`. The agents and tools are in [`crate::backup_tools`]; the files of
//! a backup in [`crate::container`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::controller::{commit, err, retry, text};
use crate::proto::{BackupState, ClientInfo, DbState, LogEntry, Mutation, Response, RestoreState};
use crate::server::Server;
use crate::util::{Bytes, unix_now};

/// FoundationDB's names of a backup's states (as `fdbbackup status` prints them).
pub mod states {
    pub const NEVER: &str = "has never been started";
    pub const SUBMITTED: &str = "has been submitted";
    pub const STARTED: &str = "has been started";
    pub const DIFFERENTIAL: &str = "is differential";
    pub const DISCONTINUED: &str = "has been discontinued";
    pub const COMPLETED: &str = "has been completed";
    pub const ABORTED: &str = "has been aborted";
}

/// Agents work on the backup and its mutations are logged.
pub fn is_active(state: &str) -> bool {
    matches!(
        state,
        states::SUBMITTED | states::STARTED | states::DIFFERENTIAL | states::DISCONTINUED
    )
}

/// `Status.Running`: the backup continues (a discontinued one only finishes).
pub fn is_running(state: &str) -> bool {
    matches!(
        state,
        states::SUBMITTED | states::STARTED | states::DIFFERENTIAL
    )
}

/// An agent's lease on the backup work lapses when it stops polling for this long.
pub const LEASE: Duration = Duration::from_secs(2);

/// The default snapshot interval (FoundationDB's: 10 days).
pub const DEFAULT_SNAPSHOT_INTERVAL: u64 = 864_000;

/// A backup URL: `file://<absolute dir>` is the only scheme the stand-in writes.
pub fn parse_url(url: &str) -> Result<PathBuf, String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!(
            "ERROR: `{url}' is not a backup URL (expected file://<absolute path>)"
        ));
    };
    if scheme != "file" {
        return Err(format!(
            "ERROR: the backup URL scheme `{scheme}' is not supported by the stand-in (only file:// is): {url}"
        ));
    }
    if !rest.starts_with('/') || rest.len() < 2 {
        return Err(format!(
            "ERROR: the backup URL `{url}' must name an absolute directory (file:///path)"
        ));
    }
    Ok(PathBuf::from(rest.trim_end_matches('/')))
}

/// `fdbbackup status --json` (the FoundationDB operator's `FoundationDBLiveBackupStatus`).
pub fn status_json(backup: Option<&BackupState>, paused: bool) -> Value {
    let Some(b) = backup else {
        return json!({
            "Status": {"Name": states::NEVER, "Running": false, "Completed": false},
            "BackupAgentsPaused": paused,
        });
    };
    let mut v = json!({
        "DestinationURL": b.url,
        "SnapshotIntervalSeconds": b.snapshot_interval_seconds,
        "Status": {
            "Name": b.state,
            "Running": is_running(&b.state),
            "Completed": b.state == states::COMPLETED,
        },
        "BackupAgentsPaused": paused,
        "Restorable": b.restorable_version.is_some(),
        "UID": b.uid,
    });
    if let (Some(r), Some(obj)) = (b.restorable_version, v.as_object_mut()) {
        obj.insert("LatestRestorablePoint".into(), json!({"Version": r}));
    }
    v
}

/// `fdbbackup status` without `--json`: one line.
pub fn status_text(tag: &str, backup: Option<&BackupState>, paused: bool) -> String {
    let Some(b) = backup else {
        return format!("No previous backups found on tag `{tag}'.");
    };
    let mut s = format!("The backup on tag `{tag}' {} to {}", b.state, b.url);
    if let Some(r) = b.restorable_version {
        s.push_str(&format!(" (restorable to version {r})"));
    } else {
        s.push_str(" (not restorable yet)");
    }
    s.push('.');
    if paused {
        s.push_str(" Backup agents are paused.");
    }
    s
}

/// `cluster.layers` of `status json`.
pub fn layers(state: &DbState, instances_running: usize) -> Value {
    let tags: serde_json::Map<String, Value> = state
        .backups
        .iter()
        .map(|(tag, b)| {
            let mut t = json!({
                "current_container": b.url,
                "running_backup": is_running(&b.state),
                "running_backup_is_restorable": is_running(&b.state) && b.restorable_version.is_some(),
                "mutation_stream_id": b.uid,
            });
            if let (Some(r), Some(obj)) = (b.restorable_version, t.as_object_mut()) {
                obj.insert("last_restorable_version".into(), json!(r));
            }
            (tag.clone(), t)
        })
        .collect();
    json!({
        "_valid": true,
        "backup": {
            "paused": state.backup_paused,
            "tags": tags,
            "instances_running": instances_running,
        },
    })
}

/// Whether commits are logged for backups (some backup is active).
pub fn logging(state: &DbState) -> bool {
    state.backups.values().any(|b| is_active(&b.state))
}

fn is_normal(key: &Bytes) -> bool {
    key.0.first() != Some(&0xff)
}

/// The normal keyspace's mutations from `before` to `after`.
pub fn diff(before: &BTreeMap<Bytes, Bytes>, after: &BTreeMap<Bytes, Bytes>) -> Vec<Mutation> {
    let mut out = Vec::new();
    for (k, v) in after.iter().filter(|(k, _)| is_normal(k)) {
        if before.get(k) != Some(v) {
            out.push(Mutation::Set {
                key: k.clone(),
                value: v.clone(),
            });
        }
    }
    for k in before.keys().filter(|k| is_normal(k)) {
        if !after.contains_key(k) {
            out.push(Mutation::Clear { key: k.clone() });
        }
    }
    out
}

/// After a commit's change (`before`: the key-values before it, when backups were logging):
/// appends its mutations to the backup log and drops what every active backup has saved.
pub fn record_mutations(next: &mut DbState, before: Option<&BTreeMap<Bytes, Bytes>>) {
    if !logging(next) {
        next.backup_log.clear();
        return;
    }
    if let Some(before) = before {
        let mutations = diff(before, &next.kv);
        if !mutations.is_empty() {
            next.backup_log.push(LogEntry {
                version: next.version,
                mutations,
            });
        }
    }
    let saved = next
        .backups
        .values()
        .filter(|b| is_active(&b.state))
        .map(|b| b.log_end_version)
        .min()
        .unwrap_or(u64::MAX);
    next.backup_log.retain(|e| e.version > saved);
}

/// Applies mutations to key-values.
pub fn apply(kv: &mut BTreeMap<Bytes, Bytes>, mutations: &[Mutation]) {
    for m in mutations {
        match m {
            Mutation::Set { key, value } => {
                kv.insert(key.clone(), value.clone());
            }
            Mutation::Clear { key } => {
                kv.remove(key);
            }
        }
    }
}

/// Whether an agent should write a snapshot of `b` now.
pub fn snapshot_due(b: &BackupState, now_unix: f64) -> bool {
    match b.last_snapshot_version {
        None => true,
        Some(_) if b.state == states::DISCONTINUED => false,
        Some(_) => now_unix - b.last_snapshot_unix >= b.snapshot_interval_seconds as f64,
    }
}

/// What the backup tools and agents ask of the cluster controller.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BackupOp {
    Start {
        tag: String,
        url: String,
        snapshot_interval: u64,
    },
    Status {
        tag: String,
    },
    Pause,
    Resume,
    Modify {
        tag: String,
        snapshot_interval: u64,
    },
    Discontinue {
        tag: String,
    },
    Abort {
        tag: String,
    },
    /// An agent's poll: the work to do ([`Work`]).
    Poll {
        agent: String,
    },
    /// An agent saved the backup up to `log_end` (and a snapshot at `snapshot`).
    Progress {
        tag: String,
        uid: String,
        snapshot: Option<u64>,
        log_end: u64,
    },
    /// `fdbrestore start`: the restored key-values, committed at once.
    Restore {
        tag: String,
        url: String,
        version: u64,
        kv: Vec<(Bytes, Bytes)>,
    },
    RestoreStatus,
}

/// The answer to an agent's poll.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Work {
    /// This agent holds the lease: it does the work.
    pub lease: bool,
    pub paused: bool,
    /// The commit version the data below is at.
    pub version: u64,
    /// The active backups.
    pub backups: Vec<BackupState>,
    /// The normal keyspace at `version`, when a snapshot is due (lease holder only).
    pub kv: Option<Vec<(Bytes, Bytes)>>,
    /// The mutations not yet saved by every active backup (lease holder only).
    pub log: Vec<LogEntry>,
}

fn json_response<T: Serialize>(v: &T) -> Response {
    match serde_json::to_value(v) {
        Ok(value) => Response::Json { value },
        Err(e) => err(format!("ERROR: {e}")),
    }
}

fn no_backup(tag: &str) -> String {
    format!("ERROR: No backup is running on tag `{tag}'")
}

fn done(r: Result<((), u64), Response>, message: String) -> Response {
    match r {
        Ok(_) => text(message),
        Err(e) => e,
    }
}

/// A backup request at the cluster controller.
pub async fn handle(server: &Arc<Server>, _client: ClientInfo, op: BackupOp) -> Response {
    match op {
        BackupOp::Start {
            tag,
            url,
            snapshot_interval,
        } => {
            if let Err(e) = parse_url(&url) {
                return err(e);
            }
            let uid = crate::util::random_id().to_lowercase();
            let t = tag.clone();
            let r = commit(server, move |s| {
                if s.backups.get(&t).is_some_and(|b| is_active(&b.state)) {
                    return Err(format!("ERROR: A backup is already running on tag `{t}'"));
                }
                let version = s.version + 1_000_000;
                s.backups.insert(
                    t.clone(),
                    BackupState {
                        tag: t,
                        url,
                        uid,
                        state: states::SUBMITTED.into(),
                        snapshot_interval_seconds: snapshot_interval,
                        begin_version: version,
                        log_end_version: version,
                        ..BackupState::default()
                    },
                );
                Ok(())
            })
            .await;
            done(
                r,
                format!("The backup on tag `{tag}' was successfully submitted."),
            )
        }
        BackupOp::Status { tag } => {
            let node = server.lock();
            let Some(ctrl) = &node.ctrl else {
                return retry("not the cluster controller");
            };
            let st = &ctrl.state;
            json_response(&json!({
                "json": status_json(st.backups.get(&tag), st.backup_paused),
                "text": status_text(&tag, st.backups.get(&tag), st.backup_paused),
            }))
        }
        BackupOp::Pause | BackupOp::Resume => {
            let pause = matches!(op, BackupOp::Pause);
            let r = commit(server, move |s| {
                s.backup_paused = pause;
                Ok(())
            })
            .await;
            done(
                r,
                if pause {
                    "All backup agents have been paused.".into()
                } else {
                    "All backup agents have been resumed.".into()
                },
            )
        }
        BackupOp::Modify {
            tag,
            snapshot_interval,
        } => {
            let t = tag.clone();
            let r = commit(server, move |s| match s.backups.get_mut(&t) {
                Some(b) if is_running(&b.state) => {
                    b.snapshot_interval_seconds = snapshot_interval;
                    Ok(())
                }
                _ => Err(no_backup(&t)),
            })
            .await;
            done(
                r,
                format!("The backup on tag `{tag}' was successfully modified."),
            )
        }
        BackupOp::Discontinue { tag } => {
            let t = tag.clone();
            let r = commit(server, move |s| {
                let version = s.version + 1_000_000;
                match s.backups.get_mut(&t) {
                    Some(b) if b.state == states::DISCONTINUED => Err(format!(
                        "ERROR: The backup on tag `{t}' is already discontinued"
                    )),
                    Some(b) if is_running(&b.state) => {
                        b.state = states::DISCONTINUED.into();
                        b.stop_version = Some(version);
                        Ok(())
                    }
                    _ => Err(no_backup(&t)),
                }
            })
            .await;
            done(
                r,
                format!("The backup on tag `{tag}' was successfully discontinued."),
            )
        }
        BackupOp::Abort { tag } => {
            let t = tag.clone();
            let r = commit(server, move |s| match s.backups.get_mut(&t) {
                Some(b) if is_active(&b.state) => {
                    b.state = states::ABORTED.into();
                    Ok(())
                }
                _ => Err(no_backup(&t)),
            })
            .await;
            done(
                r,
                format!("The backup on tag `{tag}' was successfully aborted."),
            )
        }
        BackupOp::Poll { agent } => poll(server, agent),
        BackupOp::Progress {
            tag,
            uid,
            snapshot,
            log_end,
        } => {
            let now = unix_now();
            let r = commit(server, move |s| {
                let Some(b) = s
                    .backups
                    .get_mut(&tag)
                    .filter(|b| b.uid == uid && is_active(&b.state))
                else {
                    return Ok(());
                };
                if let Some(v) = snapshot
                    && b.last_snapshot_version.is_none_or(|old| v > old)
                {
                    b.last_snapshot_version = Some(v);
                    b.last_snapshot_unix = now;
                }
                b.log_end_version = b.log_end_version.max(log_end);
                if b.last_snapshot_version.is_some() {
                    b.restorable_version =
                        Some(b.restorable_version.unwrap_or(0).max(b.log_end_version));
                }
                let restorable = b.restorable_version;
                if b.state == states::SUBMITTED {
                    b.state = states::STARTED.into();
                }
                if b.state == states::STARTED && restorable.is_some() {
                    b.state = states::DIFFERENTIAL.into();
                }
                if b.state == states::DISCONTINUED
                    && let (Some(r), Some(stop)) = (restorable, b.stop_version)
                    && r >= stop
                {
                    b.state = states::COMPLETED.into();
                }
                Ok(())
            })
            .await;
            done(r, String::new())
        }
        BackupOp::Restore {
            tag,
            url,
            version,
            kv,
        } => {
            let keys = kv.len();
            let r = commit(server, move |s| {
                if s.kv.keys().any(is_normal) {
                    return Err(
                        "ERROR: Attempted to restore into a non-empty destination database".into(),
                    );
                }
                for (k, v) in kv.into_iter().filter(|(k, _)| is_normal(k)) {
                    s.kv.insert(k, v);
                }
                s.restore = Some(RestoreState {
                    tag,
                    url,
                    state: "completed".into(),
                    version,
                    keys,
                });
                Ok(())
            })
            .await;
            done(r, String::new())
        }
        BackupOp::RestoreStatus => {
            let node = server.lock();
            let Some(ctrl) = &node.ctrl else {
                return retry("not the cluster controller");
            };
            json_response(&ctrl.state.restore)
        }
    }
}

/// An agent's poll: records the agent, gives or renews the lease, and hands the lease holder
/// what it needs to save (a snapshot when one is due, the mutation log).
fn poll(server: &Arc<Server>, agent: String) -> Response {
    let mut node = server.lock();
    let Some(ctrl) = node.ctrl.as_mut() else {
        return retry("not the cluster controller");
    };
    ctrl.agents.insert(agent.clone(), Instant::now());
    let lease = match &ctrl.backup_lease {
        Some((holder, at)) if *holder != agent && at.elapsed() < LEASE => false,
        _ => {
            ctrl.backup_lease = Some((agent, Instant::now()));
            true
        }
    };
    let st = &ctrl.state;
    let backups: Vec<BackupState> = st
        .backups
        .values()
        .filter(|b| is_active(&b.state))
        .cloned()
        .collect();
    let mut work = Work {
        lease,
        paused: st.backup_paused,
        version: st.version,
        ..Work::default()
    };
    if lease && !st.backup_paused && !backups.is_empty() {
        let now = unix_now();
        if backups.iter().any(|b| snapshot_due(b, now)) {
            work.kv = Some(
                st.kv
                    .iter()
                    .filter(|(k, _)| is_normal(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            );
        }
        work.log = st.backup_log.clone();
    }
    work.backups = backups;
    json_response(&work)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn b(k: &str) -> Bytes {
        Bytes(k.as_bytes().to_vec())
    }

    #[test]
    fn urls_parse() {
        assert_eq!(
            parse_url("file:///var/backups/x").unwrap(),
            PathBuf::from("/var/backups/x")
        );
        assert_eq!(parse_url("file:///b/").unwrap(), PathBuf::from("/b"));
        let e = parse_url("blobstore://key@host:80/b?bucket=x").unwrap_err();
        assert!(e.contains("`blobstore'"), "{e}");
        assert!(parse_url("file://relative/dir").is_err());
        assert!(parse_url("file:///").is_err());
        assert!(parse_url("/no/scheme").is_err());
    }

    #[test]
    fn status_json_shapes() {
        let never = status_json(None, true);
        assert_eq!(never["Status"]["Name"], "has never been started");
        assert_eq!(never["Status"]["Running"], false);
        assert_eq!(never["BackupAgentsPaused"], true);
        assert!(never.get("DestinationURL").is_none());
        let mut bs = BackupState {
            tag: "default".into(),
            url: "file:///b".into(),
            uid: "u1".into(),
            state: states::STARTED.into(),
            snapshot_interval_seconds: 864_000,
            ..BackupState::default()
        };
        let v = status_json(Some(&bs), false);
        assert_eq!(v["DestinationURL"], "file:///b");
        assert_eq!(v["SnapshotIntervalSeconds"], 864_000);
        assert_eq!(v["Status"]["Name"], "has been started");
        assert_eq!(v["Status"]["Running"], true);
        assert_eq!(v["Status"]["Completed"], false);
        assert_eq!(v["Restorable"], false);
        assert_eq!(v["UID"], "u1");
        assert!(v.get("LatestRestorablePoint").is_none());
        bs.state = states::COMPLETED.into();
        bs.restorable_version = Some(42);
        let v = status_json(Some(&bs), false);
        assert_eq!(v["Status"]["Running"], false);
        assert_eq!(v["Status"]["Completed"], true);
        assert_eq!(v["Restorable"], true);
        assert_eq!(v["LatestRestorablePoint"]["Version"], 42);

        let mut st = DbState::default();
        st.backups.insert("default".into(), bs);
        let l = layers(&st, 2);
        assert_eq!(l["_valid"], true);
        assert_eq!(l["backup"]["instances_running"], 2);
        let t = &l["backup"]["tags"]["default"];
        assert_eq!(t["running_backup"], false);
        assert_eq!(t["last_restorable_version"], 42);
        assert_eq!(t["mutation_stream_id"], "u1");
    }

    #[test]
    fn mutations_are_logged_while_a_backup_is_active_and_trimmed_once_saved() {
        let mut st = DbState::default();
        st.kv.insert(b("a"), b("1"));
        st.kv.insert(Bytes(vec![0xff, 1]), b("sys"));
        let before = st.kv.clone();
        st.kv.insert(b("b"), b("2"));
        st.kv.remove(&b("a"));
        st.kv.insert(Bytes(vec![0xff, 2]), b("sys"));
        st.version = 5;
        // No backup: nothing is logged.
        record_mutations(&mut st, Some(&before));
        assert!(st.backup_log.is_empty());
        st.backups.insert(
            "t".into(),
            BackupState {
                state: states::DIFFERENTIAL.into(),
                log_end_version: 4,
                ..BackupState::default()
            },
        );
        record_mutations(&mut st, Some(&before));
        assert_eq!(st.backup_log.len(), 1);
        let mut kv = before.clone();
        apply(&mut kv, &st.backup_log[0].mutations);
        assert_eq!(kv.get(&b("b")), Some(&b("2")));
        assert!(!kv.contains_key(&b("a")));
        assert!(
            !kv.contains_key(&Bytes(vec![0xff, 2])),
            "system keys not logged"
        );
        st.backups.get_mut("t").unwrap().log_end_version = 5;
        record_mutations(&mut st, None);
        assert!(st.backup_log.is_empty());
    }
}
