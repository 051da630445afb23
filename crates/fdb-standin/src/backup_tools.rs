//! `fdbbackup`, `fdbrestore` and `backup_agent`: clients of the cluster controller
//! ([`crate::backup`]); the agent writes the backups' files ([`crate::container`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::backup::{BackupOp, DEFAULT_SNAPSHOT_INTERVAL, Work, parse_url, snapshot_due};
use crate::cli::{Client, Failure};
use crate::container::{self, Description};
use crate::proto::{Request, Response};
use crate::util::{knob, unix_now};

/// Parsed options: values by canonical name, flags, and positional arguments.
#[derive(Debug, Default, PartialEq)]
pub struct Opts {
    pub values: BTreeMap<&'static str, String>,
    pub flags: BTreeSet<&'static str>,
    pub positional: Vec<String>,
}

/// Options taking a value: spellings → canonical name (`ignored` ones are accepted and
/// dropped).
const VALUE_OPTS: &[(&[&str], &str)] = &[
    (
        &[
            "-C",
            "--cluster-file",
            "--cluster_file",
            "--dest-cluster-file",
            "--dest_cluster_file",
        ],
        "cluster",
    ),
    (&["-d", "--destcontainer", "-r", "--source"], "url"),
    (&["-t", "--tagname"], "tag"),
    (
        &[
            "-s",
            "--snapshot-interval",
            "--snapshot_interval",
            "--active-snapshot-interval",
            "--active_snapshot_interval",
        ],
        "interval",
    ),
    (&["-v", "--restore-version", "--restore_version"], "version"),
    (&["--timeout"], "timeout"),
    (
        &[
            "--log-dir",
            "--logdir",
            "--trace_format",
            "--trace-format",
            "--blob-credentials",
            "--blob_credentials",
            "-k",
            "--keys",
            "--loggroup",
            "--log-group",
        ],
        "ignored",
    ),
];

const FLAG_OPTS: &[(&[&str], &str)] = &[
    (&["-w", "--wait", "--waitfordone"], "wait"),
    (&["--json"], "json"),
    (
        &[
            "-z",
            "--no-stop-when-done",
            "--log",
            "-q",
            "--quiet",
            "--partitioned-log-experimental",
        ],
        "ignored",
    ),
];

pub fn parse_opts(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_owned())),
            _ => (a.as_str(), None),
        };
        if !name.starts_with('-') || name == "-" {
            o.positional.push(a.clone());
            continue;
        }
        if name.starts_with("--knob_") || name.starts_with("--knob-") {
            if inline.is_none() {
                it.next();
            }
            continue;
        }
        if let Some((_, canon)) = VALUE_OPTS.iter().find(|(n, _)| n.contains(&name)) {
            let v = match inline {
                Some(v) => v,
                None => it
                    .next()
                    .cloned()
                    .ok_or_else(|| format!("ERROR: option `{name}' needs a value"))?,
            };
            if *canon != "ignored" {
                o.values.insert(canon, v);
            }
        } else if let Some((_, canon)) = FLAG_OPTS.iter().find(|(n, _)| n.contains(&name)) {
            if *canon != "ignored" {
                o.flags.insert(canon);
            }
        } else {
            return Err(format!("ERROR: unknown option `{name}'"));
        }
    }
    Ok(o)
}

impl Opts {
    fn cluster_file(&self) -> PathBuf {
        self.values
            .get("cluster")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("FDB_CLUSTER_FILE").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("fdb.cluster"))
    }

    fn tag(&self) -> String {
        self.values
            .get("tag")
            .cloned()
            .unwrap_or_else(|| "default".into())
    }

    fn number(&self, name: &str) -> Result<Option<u64>, String> {
        self.values
            .get(name)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| format!("ERROR: `{v}' is not a valid number"))
            })
            .transpose()
    }

    fn timeout(&self) -> Result<Duration, String> {
        Ok(Duration::from_secs(self.number("timeout")?.unwrap_or(10)))
    }
}

/// Sends `op` to the cluster controller (retrying until the client's timeout).
async fn ask(client: &mut Client, op: BackupOp) -> Result<Response, String> {
    let req = Request::Backup {
        client: client.info.clone(),
        backup: op,
    };
    let deadline = Instant::now() + client.timeout();
    match client.ask_leader(&req, deadline).await {
        Ok(r) => Ok(r),
        Err(Failure::Error(e)) => Err(e),
        Err(Failure::TimedOut) => {
            Err("ERROR: Operation aborted because the transaction timed out (1031)".into())
        }
    }
}

async fn ask_text(client: &mut Client, op: BackupOp) -> Result<String, String> {
    match ask(client, op).await? {
        Response::Text { text } => Ok(text),
        other => Err(format!("ERROR: unexpected answer {other:?}")),
    }
}

async fn ask_json(client: &mut Client, op: BackupOp) -> Result<Value, String> {
    match ask(client, op).await? {
        Response::Json { value } => Ok(value),
        other => Err(format!("ERROR: unexpected answer {other:?}")),
    }
}

fn finish(r: Result<String, String>, out: &mut dyn Write, errout: &mut dyn Write) -> i32 {
    match r {
        Ok(text) => {
            if !text.is_empty() {
                let _ = writeln!(out, "{text}");
            }
            let _ = out.flush();
            0
        }
        Err(e) => {
            let _ = writeln!(errout, "{e}");
            1
        }
    }
}

/// `fdbbackup <start|status|pause|resume|modify|discontinue|abort> …`; the exit code.
pub async fn fdbbackup(args: Vec<String>, out: &mut dyn Write, errout: &mut dyn Write) -> i32 {
    let r = async {
        let Some(sub) = args.first().cloned() else {
            return Err("ERROR: No backup subcommand given (start, status, pause, resume, modify, discontinue, abort)".to_owned());
        };
        let o = parse_opts(&args[1..])?;
        let mut client =
            Client::new(o.cluster_file(), o.timeout()?).map_err(|e| format!("ERROR: {e:#}"))?;
        let tag = o.tag();
        match sub.as_str() {
            "start" => {
                let url = o
                    .values
                    .get("url")
                    .cloned()
                    .ok_or("ERROR: A backup URL is required (-d)")?;
                parse_url(&url)?;
                let snapshot_interval = o
                    .number("interval")?
                    .unwrap_or(DEFAULT_SNAPSHOT_INTERVAL);
                ask_text(
                    &mut client,
                    BackupOp::Start {
                        tag,
                        url,
                        snapshot_interval,
                    },
                )
                .await
            }
            "status" => {
                let v = ask_json(&mut client, BackupOp::Status { tag }).await?;
                if o.flags.contains("json") {
                    Ok(serde_json::to_string_pretty(&v["json"]).unwrap_or_default())
                } else {
                    Ok(v["text"].as_str().unwrap_or_default().to_owned())
                }
            }
            "pause" => ask_text(&mut client, BackupOp::Pause).await,
            "resume" => ask_text(&mut client, BackupOp::Resume).await,
            "modify" => {
                let snapshot_interval = o
                    .number("interval")?
                    .ok_or("ERROR: modify needs a snapshot interval (-s)")?;
                ask_text(
                    &mut client,
                    BackupOp::Modify {
                        tag,
                        snapshot_interval,
                    },
                )
                .await
            }
            "discontinue" => ask_text(&mut client, BackupOp::Discontinue { tag }).await,
            "abort" => ask_text(&mut client, BackupOp::Abort { tag }).await,
            other => Err(format!(
                "ERROR: Unknown or unmodelled backup subcommand `{other}'"
            )),
        }
    }
    .await;
    finish(r, out, errout)
}

/// `fdbrestore start -r <url> --dest-cluster-file F [-w] [-v V] [-t TAG]` and
/// `fdbrestore status --dest-cluster-file F`; the exit code. The tool restores by itself
/// (FoundationDB's agents do): one commit of every key, into an empty normal keyspace.
pub async fn fdbrestore(args: Vec<String>, out: &mut dyn Write, errout: &mut dyn Write) -> i32 {
    let r = async {
        let Some(sub) = args.first().cloned() else {
            return Err("ERROR: No restore subcommand given (start, status)".to_owned());
        };
        let o = parse_opts(&args[1..])?;
        let mut client =
            Client::new(o.cluster_file(), o.timeout()?).map_err(|e| format!("ERROR: {e:#}"))?;
        match sub.as_str() {
            "start" => {
                let url = o
                    .values
                    .get("url")
                    .cloned()
                    .ok_or("ERROR: A backup URL is required (-r)")?;
                let dir = parse_url(&url)?;
                let (version, kv) = container::image_at(&dir, &url, o.number("version")?)?;
                ask_text(
                    &mut client,
                    BackupOp::Restore {
                        tag: o.tag(),
                        url,
                        version,
                        kv: kv.into_iter().collect(),
                    },
                )
                .await?;
                let mut text = format!("Restoring backup to version: {version}");
                if o.flags.contains("wait") {
                    text.push_str(&format!("\nRestored to version {version}"));
                }
                Ok(text)
            }
            "status" => {
                let v = ask_json(&mut client, BackupOp::RestoreStatus).await?;
                if v.is_null() {
                    return Ok("No restore has been run on this database.".into());
                }
                Ok(format!(
                    "Tag: {}  State: {}  Version: {}  Keys: {}  URL: {}",
                    v["tag"].as_str().unwrap_or_default(),
                    v["state"].as_str().unwrap_or_default(),
                    v["version"],
                    v["keys"],
                    v["url"].as_str().unwrap_or_default(),
                ))
            }
            other => Err(format!(
                "ERROR: Unknown or unmodelled restore subcommand `{other}'"
            )),
        }
    }
    .await;
    finish(r, out, errout)
}

/// One round of an agent: poll; if it holds the lease and agents are not paused, save every
/// active backup (a snapshot when due, the logged mutations, the restorable point) and report
/// the progress. `last_progress`: when progress was last reported, by backup UID.
async fn agent_round(
    client: &mut Client,
    id: &str,
    last_progress: &mut BTreeMap<String, Instant>,
) -> Result<(), String> {
    let v = ask_json(
        client,
        BackupOp::Poll {
            agent: id.to_owned(),
        },
    )
    .await?;
    let work: Work = serde_json::from_value(v).map_err(|e| format!("bad work: {e}"))?;
    if !work.lease || work.paused {
        return Ok(());
    }
    let now = unix_now();
    for b in &work.backups {
        let dir = match parse_url(&b.url) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!("backup on tag {}: {e}", b.tag);
                continue;
            }
        };
        let v = work.version;
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut snapshot = None;
        if snapshot_due(b, now)
            && let Some(kv) = &work.kv
        {
            container::write_snapshot(&dir, &b.uid, v, kv)?;
            snapshot = Some(v);
            tracing::info!("backup {}: snapshot at version {v}", b.tag);
        }
        let entries: Vec<_> = work
            .log
            .iter()
            .filter(|e| e.version > b.log_end_version && e.version <= v)
            .cloned()
            .collect();
        if !entries.is_empty() {
            container::write_log(&dir, &b.uid, b.log_end_version, v, &entries)?;
        }
        let has_snapshot = snapshot.is_some() || b.last_snapshot_version.is_some();
        container::write_description(
            &dir,
            &Description {
                uid: b.uid.clone(),
                tag: b.tag.clone(),
                url: b.url.clone(),
                begin_version: b.begin_version,
                restorable_version: has_snapshot.then_some(v),
            },
        )?;
        let stale = last_progress
            .get(&b.uid)
            .is_none_or(|at| at.elapsed() >= Duration::from_millis(900));
        let finishing = b.stop_version.is_some_and(|s| v >= s);
        if snapshot.is_some()
            || !entries.is_empty()
            || finishing
            || (v > b.log_end_version && stale)
        {
            ask_text(
                client,
                BackupOp::Progress {
                    tag: b.tag.clone(),
                    uid: b.uid.clone(),
                    snapshot,
                    log_end: v,
                },
            )
            .await?;
            last_progress.insert(b.uid.clone(), Instant::now());
        }
    }
    Ok(())
}

/// `backup_agent -C F`: runs until killed, polling the cluster every
/// `FDB_STANDIN_BACKUP_POLL_MS` (500 ms).
pub async fn backup_agent(args: Vec<String>, errout: &mut dyn Write) -> i32 {
    let o = match parse_opts(&args) {
        Ok(o) => o,
        Err(e) => {
            let _ = writeln!(errout, "{e}");
            return 1;
        }
    };
    let poll = knob("FDB_STANDIN_BACKUP_POLL_MS", Duration::from_millis(500));
    let id = crate::util::random_id();
    let file = o.cluster_file();
    tracing::info!(
        "stand-in backup_agent {id} for the cluster in {}",
        file.display()
    );
    let mut client = None;
    let mut last_progress = BTreeMap::new();
    loop {
        if client.is_none() {
            match Client::new(file.clone(), Duration::from_secs(2)) {
                Ok(c) => client = Some(c),
                Err(e) => tracing::warn!("{e:#}"),
            }
        }
        if let Some(c) = client.as_mut()
            && let Err(e) = agent_round(c, &id, &mut last_progress).await
        {
            tracing::warn!("backup agent: {e}");
        }
        tokio::time::sleep(poll).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn options_parse() {
        let o = parse_opts(&s(&[
            "-C",
            "/f",
            "-d",
            "file:///b",
            "-t",
            "t1",
            "--snapshot-interval=30",
            "-z",
            "--knob_x=1",
            "--log",
            "--logdir",
            "/l",
            "--json",
        ]))
        .unwrap();
        assert_eq!(o.cluster_file(), PathBuf::from("/f"));
        assert_eq!(o.values["url"], "file:///b");
        assert_eq!(o.tag(), "t1");
        assert_eq!(o.number("interval").unwrap(), Some(30));
        assert!(o.flags.contains("json"));
        let r = parse_opts(&s(&[
            "-r",
            "file:///b",
            "--dest-cluster-file",
            "/g",
            "-w",
            "-v",
            "7",
        ]))
        .unwrap();
        assert_eq!(r.cluster_file(), PathBuf::from("/g"));
        assert_eq!(r.number("version").unwrap(), Some(7));
        assert!(r.flags.contains("wait"));
        assert_eq!(r.tag(), "default");
        assert!(parse_opts(&s(&["--bogus"])).is_err());
        assert!(parse_opts(&s(&["-t"])).is_err());
        let m = parse_opts(&s(&["--active-snapshot-interval", "5"])).unwrap();
        assert_eq!(m.number("interval").unwrap(), Some(5));
        assert!(
            parse_opts(&s(&["-s", "x"]))
                .unwrap()
                .number("interval")
                .is_err()
        );
    }
}
