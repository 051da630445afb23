//! Optional persistence to a JSON snapshot file (`ServerConfig::state_file`): loaded at start,
//! written at most once a second after changes and at shutdown (write to a temporary file, then
//! rename). Watch history is not persisted: a watch resuming from an RV older than the loaded
//! snapshot gets `410 Expired` and relists, as after an etcd compaction.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::Error;
use crate::registry::GroupResource;
use crate::server::Server;
use crate::store::State;
use crate::write::{after_write, is_crd};

pub fn load(path: &Path, state: &mut State) -> Result<(), Error> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(Error::StateFile {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let bad = |message: &str| Error::Snapshot {
        path: path.to_path_buf(),
        message: message.to_string(),
    };
    let doc: Value = serde_json::from_str(&text).map_err(|e| bad(&e.to_string()))?;
    let rv = doc
        .get("resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| bad("missing resourceVersion"))?;
    let mut objects = Vec::new();
    for entry in doc
        .get("objects")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("missing objects"))?
    {
        let group = entry
            .get("group")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let resource = entry
            .get("resource")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("object without resource"))?;
        let obj = entry
            .get("object")
            .cloned()
            .ok_or_else(|| bad("entry without object"))?;
        objects.push((GroupResource::new(group, resource), obj));
    }
    state.load(rv, objects.clone());
    if let Some(ip) = doc.get("nextClusterIP").and_then(Value::as_u64) {
        state.next_cluster_ip = u32::try_from(ip).unwrap_or(10);
    }
    let crd_def = state
        .registry
        .lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    if let Some(def) = crd_def.filter(|d| is_crd(d)) {
        for (gr, obj) in &objects {
            if gr.resource == "customresourcedefinitions" {
                let name = crate::meta::name(obj).unwrap_or_default().to_string();
                after_write(state, &def, Some(obj), &name);
            }
        }
    }
    Ok(())
}

/// The snapshot file.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Doc<'a> {
    resource_version: String,
    #[serde(rename = "nextClusterIP")]
    next_cluster_ip: u32,
    objects: Vec<Entry<'a>>,
}

/// One stored object in the snapshot file.
#[derive(serde::Serialize)]
struct Entry<'a> {
    group: &'a str,
    resource: &'a str,
    object: &'a Value,
}

/// Writes the snapshot. Under the lock only the shared handles of the stored objects are
/// taken (no copy); serialising and writing happen after it is released, so a large store
/// does not stall requests.
pub fn save(server: &Server, path: &Path) -> std::io::Result<()> {
    let (rv, next_ip, objects) = {
        let mut state = server.lock();
        state.dirty = false;
        let objects: Vec<(GroupResource, Arc<Value>)> = state
            .resources()
            .flat_map(|(gr, objs)| objs.values().map(move |o| (gr.clone(), o.clone())))
            .collect();
        (state.rv, state.next_cluster_ip, objects)
    };
    let entries: Vec<Entry<'_>> = objects
        .iter()
        .map(|(gr, obj)| Entry {
            group: &gr.group,
            resource: &gr.resource,
            object: obj,
        })
        .collect();
    let doc = Doc {
        resource_version: rv.to_string(),
        next_cluster_ip: next_ip,
        objects: entries,
    };
    let tmp = path.with_extension("tmp");
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(
        &tmp,
        serde_json::to_vec(&doc).map_err(std::io::Error::other)?,
    )?;
    std::fs::rename(&tmp, path)
}

pub async fn run(server: Arc<Server>, path: std::path::PathBuf) {
    loop {
        tokio::select! {
            _ = server.cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        let dirty = server.lock().dirty;
        if dirty {
            let (server, path) = (server.clone(), path.clone());
            let saved =
                tokio::task::spawn_blocking(move || save(&server, &path).map_err(|e| (e, path)))
                    .await;
            if let Ok(Err((e, path))) = saved {
                tracing::warn!(error = %e, path = %path.display(), "cannot write snapshot");
            }
        }
    }
}
