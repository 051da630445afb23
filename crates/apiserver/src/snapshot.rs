//! Optional persistence to a JSON snapshot file (`ServerConfig::state_file`): loaded at start,
//! written at most once a second after changes and at shutdown (write to a temporary file, then
//! rename). Watch history is not persisted: a watch resuming from an RV older than the loaded
//! snapshot gets `410 Expired` and relists, as after an etcd compaction.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

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

pub fn save(server: &Server, path: &Path) -> std::io::Result<()> {
    let doc = {
        let mut state = server.lock();
        state.dirty = false;
        let mut objects = Vec::new();
        for (gr, objs) in state.resources() {
            for obj in objs.values() {
                objects.push(json!({"group": gr.group, "resource": gr.resource, "object": obj}));
            }
        }
        json!({"resourceVersion": state.rv.to_string(), "nextClusterIP": state.next_cluster_ip, "objects": objects})
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
        if dirty && let Err(e) = save(&server, &path) {
            tracing::warn!(error = %e, path = %path.display(), "cannot write snapshot");
        }
    }
}
