//! A backup's files in its `file://` directory (the stand-in's own JSON format, not
//! FoundationDB's): `snapshot-<version>.json` (the normal keyspace at a commit version),
//! `log-<from>-<to>.json` (the mutations of the commits in (from, to]) and `backup.json` (which
//! backup the directory holds and its latest restorable version). Every file is written
//! atomically (temporary file, fsync, rename) and is named by version, so agents writing the
//! same thing twice write the same file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::proto::{LogEntry, Mutation};
use crate::util::{Bytes, write_durably};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Description {
    pub uid: String,
    pub tag: String,
    pub url: String,
    pub begin_version: u64,
    pub restorable_version: Option<u64>,
}

#[derive(Serialize, Deserialize)]
struct Snapshot {
    uid: String,
    version: u64,
    kv: Vec<(Bytes, Bytes)>,
}

#[derive(Serialize, Deserialize)]
struct Log {
    uid: String,
    from: u64,
    to: u64,
    entries: Vec<LogEntry>,
}

fn io(path: &Path, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", path.display())
}

fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<(), String> {
    let data = serde_json::to_vec(v).map_err(|e| io(path, e))?;
    write_durably(path, &data).map_err(|e| io(path, e))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, String> {
    let data = std::fs::read(path).map_err(|e| io(path, e))?;
    serde_json::from_slice(&data).map_err(|e| io(path, e))
}

/// The backup in `dir`, if any.
pub fn describe(dir: &Path) -> Result<Option<Description>, String> {
    let path = dir.join("backup.json");
    if !path.exists() {
        return Ok(None);
    }
    read_json(&path).map(Some)
}

/// Records `d`; the restorable version never goes back for the same backup (two agents).
pub fn write_description(dir: &Path, d: &Description) -> Result<(), String> {
    let mut d = d.clone();
    if let Ok(Some(old)) = describe(dir)
        && old.uid == d.uid
    {
        d.restorable_version = match (old.restorable_version, d.restorable_version) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
    write_json(&dir.join("backup.json"), &d)
}

pub fn write_snapshot(
    dir: &Path,
    uid: &str,
    version: u64,
    kv: &[(Bytes, Bytes)],
) -> Result<(), String> {
    write_json(
        &dir.join(format!("snapshot-{version:020}.json")),
        &Snapshot {
            uid: uid.to_owned(),
            version,
            kv: kv.to_vec(),
        },
    )
}

pub fn write_log(
    dir: &Path,
    uid: &str,
    from: u64,
    to: u64,
    entries: &[LogEntry],
) -> Result<(), String> {
    write_json(
        &dir.join(format!("log-{from:020}-{to:020}.json")),
        &Log {
            uid: uid.to_owned(),
            from,
            to,
            entries: entries.to_vec(),
        },
    )
}

fn files(dir: &Path, prefix: &str) -> Result<Vec<PathBuf>, String> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| io(dir, e))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(".json"))
        })
        .collect();
    out.sort();
    Ok(out)
}

fn snapshot_version(p: &Path) -> Option<u64> {
    p.file_name()?
        .to_str()?
        .strip_prefix("snapshot-")?
        .strip_suffix(".json")?
        .parse()
        .ok()
}

/// The normal keyspace of the backup at `url` (in `dir`) at `version` (default: its latest
/// restorable version): the newest snapshot at or before it, then the logged mutations after
/// the snapshot up to it. The version restored to and the key-values.
pub fn image_at(
    dir: &Path,
    url: &str,
    version: Option<u64>,
) -> Result<(u64, BTreeMap<Bytes, Bytes>), String> {
    let d = describe(dir)?.ok_or_else(|| format!("ERROR: No backup was found at `{url}'"))?;
    let Some(restorable) = d.restorable_version else {
        return Err(format!("ERROR: The backup at `{url}' is not restorable"));
    };
    let target = version.unwrap_or(restorable);
    let mut snapshot = None;
    for p in files(dir, "snapshot-")? {
        if snapshot_version(&p).is_some_and(|v| v <= target) {
            let s: Snapshot = read_json(&p)?;
            if s.uid == d.uid {
                snapshot = Some(s);
            }
        }
    }
    let snapshot = match snapshot {
        Some(s) if target <= restorable => s,
        _ => {
            return Err(format!(
                "ERROR: The backup at `{url}' cannot be restored to version {target} (its latest restorable version is {restorable})"
            ));
        }
    };
    let mut mutations: BTreeMap<u64, Vec<Mutation>> = BTreeMap::new();
    for p in files(dir, "log-")? {
        let log: Log = read_json(&p)?;
        if log.uid != d.uid || log.to <= snapshot.version {
            continue;
        }
        for e in log.entries {
            if e.version > snapshot.version && e.version <= target {
                mutations.insert(e.version, e.mutations);
            }
        }
    }
    let mut kv: BTreeMap<Bytes, Bytes> = snapshot.kv.into_iter().collect();
    for m in mutations.values() {
        crate::backup::apply(&mut kv, m);
    }
    Ok((target, kv))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn b(k: &str) -> Bytes {
        Bytes(k.as_bytes().to_vec())
    }

    #[test]
    fn a_container_restores_to_any_version_between_its_snapshot_and_its_restorable_point() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        let mut d = Description {
            uid: "u".into(),
            tag: "default".into(),
            url: url.clone(),
            begin_version: 1,
            restorable_version: None,
        };
        write_description(dir.path(), &d).unwrap();
        assert!(
            image_at(dir.path(), &url, None)
                .unwrap_err()
                .contains("not restorable")
        );
        write_snapshot(dir.path(), "u", 10, &[(b("a"), b("1"))]).unwrap();
        let set = |k: &str, v: &str| Mutation::Set {
            key: b(k),
            value: b(v),
        };
        write_log(
            dir.path(),
            "u",
            1,
            30,
            &[
                LogEntry {
                    version: 5,
                    mutations: vec![set("old", "x")],
                },
                LogEntry {
                    version: 20,
                    mutations: vec![set("b", "2"), Mutation::Clear { key: b("a") }],
                },
                LogEntry {
                    version: 30,
                    mutations: vec![set("c", "3")],
                },
            ],
        )
        .unwrap();
        // Another backup's file in the same directory is ignored.
        write_snapshot(dir.path(), "other", 15, &[(b("z"), b("z"))]).unwrap();
        d.restorable_version = Some(30);
        write_description(dir.path(), &d).unwrap();
        // The restorable point never goes back for the same backup.
        d.restorable_version = Some(25);
        write_description(dir.path(), &d).unwrap();
        assert_eq!(
            describe(dir.path()).unwrap().unwrap().restorable_version,
            Some(30)
        );
        let (v, kv) = image_at(dir.path(), &url, None).unwrap();
        assert_eq!(v, 30);
        assert_eq!(
            kv.into_iter().collect::<Vec<_>>(),
            vec![(b("b"), b("2")), (b("c"), b("3"))]
        );
        let (_, kv) = image_at(dir.path(), &url, Some(19)).unwrap();
        assert_eq!(kv.into_iter().collect::<Vec<_>>(), vec![(b("a"), b("1"))]);
        assert!(image_at(dir.path(), &url, Some(9)).is_err());
        assert!(image_at(dir.path(), &url, Some(31)).is_err());
    }
}
