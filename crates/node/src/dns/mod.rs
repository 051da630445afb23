//! Name resolution without a DNS server: every pod gets its own hosts file (bind-mounted on
//! `/etc/hosts` by the shim and rewritten in place so the mount keeps seeing it), and
//! `state_dir/hosts` holds the cluster-wide records for host-side clients.

pub mod hosts;

use std::collections::HashMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub use hosts::PodIdentity;
use hosts::Record;

#[derive(Debug)]
struct Local {
    path: PathBuf,
    identity: PodIdentity,
    written: String,
}

#[derive(Debug)]
pub struct Dns {
    cluster_file: PathBuf,
    records: Mutex<Vec<Record>>,
    local: Mutex<HashMap<String, Local>>,
}

/// Rewrites `path` in place (same inode) when its content differs.
fn write_in_place(path: &Path, content: &str) -> std::io::Result<()> {
    if std::fs::read_to_string(path).is_ok_and(|c| c == content) {
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(path)?;
    f.write_all(content.as_bytes())?;
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(0o644))
}

impl Dns {
    pub fn new(state_dir: &Path) -> Self {
        Self {
            cluster_file: state_dir.join("hosts"),
            records: Mutex::new(Vec::new()),
            local: Mutex::new(HashMap::new()),
        }
    }

    fn current(&self) -> Vec<Record> {
        self.records.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Writes a pod's hosts file now and keeps it up to date until [`Dns::unregister`].
    pub fn register(&self, uid: &str, path: PathBuf, identity: PodIdentity) -> std::io::Result<()> {
        // Under the lock of the pods' files: an update that publishes records after this read
        // waits for the lock and then rewrites this file too.
        let mut local = self.local.lock().ok();
        let content = hosts::pod_file(&identity, &self.current());
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        write_in_place(&path, &content)?;
        if let Some(l) = local.as_mut() {
            l.insert(
                uid.to_string(),
                Local {
                    path,
                    identity,
                    written: content,
                },
            );
        }
        Ok(())
    }

    pub fn unregister(&self, uid: &str) {
        if let Ok(mut l) = self.local.lock() {
            l.remove(uid);
        }
    }

    /// Replaces the cluster records and rewrites every file whose content changes.
    pub fn update(&self, records: Vec<Record>) {
        // The records first: whoever reads a rewritten file and then asks `resolve` gets the
        // same answer.
        if let Ok(mut r) = self.records.lock() {
            r.clone_from(&records);
        }
        let cluster = hosts::cluster_file(&records);
        if let Err(e) = write_in_place(&self.cluster_file, &cluster) {
            tracing::warn!(path = %self.cluster_file.display(), error = %e, "writing hosts file failed");
        }
        if let Ok(mut l) = self.local.lock() {
            for local in l.values_mut() {
                let content = hosts::pod_file(&local.identity, &records);
                if content != local.written {
                    match write_in_place(&local.path, &content) {
                        Ok(()) => local.written = content,
                        Err(e) => {
                            tracing::warn!(path = %local.path.display(), error = %e, "writing hosts file failed")
                        }
                    }
                }
            }
        }
    }

    /// Resolves a Service or headless-pod name (`svc.ns`, `svc.ns.svc.cluster.local`, ...).
    pub fn resolve(&self, name: &str) -> Option<Ipv4Addr> {
        let records = self.current();
        hosts::resolve(&records, name)?.parse().ok()
    }
}
