//! `path.data`: each node keeps the latest published cluster state on disk, as CrateDB keeps
//! its cluster state (users and their hashes, tables, persistent settings, the license) in its
//! data path, so a full cluster restart finds it again.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::Cluster;

/// The file under `path.data`.
pub const STATE_FILE: &str = "standin-cluster-state.json";

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("writing the cluster state to {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("reading the cluster state from {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the cluster state in {path} is not valid: {source}")]
    Decode {
        path: PathBuf,
        source: serde_json::Error,
    },
}

#[derive(Serialize, Deserialize)]
struct OnDisk {
    cluster_name: String,
    version: u64,
    state: Value,
}

/// Writes `state` (a serialized [`Cluster`]) as `version`, atomically (a temporary file
/// renamed over the old one).
pub fn save(
    dir: &Path,
    cluster_name: &str,
    version: u64,
    state: &Value,
) -> Result<(), PersistError> {
    let path = dir.join(STATE_FILE);
    let write = |source| PersistError::Write {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(write)?;
    let body = serde_json::to_vec(&OnDisk {
        cluster_name: cluster_name.to_owned(),
        version,
        state: state.clone(),
    })
    .map_err(|e| write(std::io::Error::other(e)))?;
    let tmp = dir.join(format!("{STATE_FILE}.tmp"));
    std::fs::write(&tmp, body).map_err(write)?;
    std::fs::rename(&tmp, &path).map_err(write)
}

/// The state saved under `dir` for `cluster_name`, if any (a file of another cluster is
/// ignored, as CrateDB refuses to join a node whose data belongs to another cluster).
pub fn load(dir: &Path, cluster_name: &str) -> Result<Option<(u64, Cluster)>, PersistError> {
    let path = dir.join(STATE_FILE);
    let body = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(PersistError::Read { path, source }),
    };
    let disk: OnDisk = serde_json::from_slice(&body).map_err(|source| PersistError::Decode {
        path: path.clone(),
        source,
    })?;
    if disk.cluster_name != cluster_name {
        tracing::warn!(path = %path.display(), found = %disk.cluster_name, "ignoring the cluster state of another cluster");
        return Ok(None);
    }
    let state: Cluster = serde_json::from_value(disk.state)
        .map_err(|source| PersistError::Decode { path, source })?;
    Ok(Some((disk.version, state)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClusterConfig, NodeSpec, SUPERUSER};

    #[test]
    fn saves_and_loads_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Cluster::new(ClusterConfig::default());
        c.join(NodeSpec::new("a"));
        c.create_user(SUPERUSER, "system", Some("s3cret")).unwrap();
        let json = serde_json::to_value(&c).unwrap();
        save(dir.path(), "crate", 7, &json).unwrap();
        assert!(load(dir.path(), "other").unwrap().is_none());
        let (version, loaded) = load(dir.path(), "crate").unwrap().unwrap();
        assert_eq!(version, 7);
        assert!(loaded.authenticate("system", Some("s3cret")).is_ok());
        let text = std::fs::read_to_string(dir.path().join(STATE_FILE)).unwrap();
        assert!(!text.contains("s3cret"), "only the hash is written");
    }
}
