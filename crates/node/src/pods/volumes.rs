//! Volume directories on the host. `persistentVolumeClaim`: a claim bound to a
//! PersistentVolume (`spec.volumeName`, as a real cluster's PV controller binds them) is that
//! volume's `hostPath` or `local` path, as kubelet mounts it — so its data follows the claim to
//! any Node that may use the volume; a claim without a volume (the embedded control plane has no
//! PV controller) is node-local storage, `state_dir/volumes/<ns>/<claim>-<claim uid>` (outlives
//! the Pod; keyed by the claim's UID, so a deleted and re-created claim is a new, empty volume as
//! on a real cluster), marked Bound on first use. Either way the claim must exist and not be
//! being deleted (kubelet does not start a Pod on a claim being deleted). `emptyDir` → a per-pod
//! directory, `secret`/`configMap`/`downwardAPI`/`projected`
//! → per-pod directories of rendered files, `hostPath` → the path itself. With `fsGroup`,
//! writable volumes are group-owned by it with `g+rwx` and the setgid bit, recursively when the
//! volume's root does not match yet (kubelet's OnRootMismatch).

use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Volume};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use super::Waiting;
use super::envs::NodeFacts;
use super::objects::Objects;
use super::projection::{self, File};

pub const FIELD_MANAGER: &str = "steward-node";

/// A prepared volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeDir {
    pub path: PathBuf,
    pub read_only: bool,
}

/// The pod's volumes by name.
#[derive(Clone, Debug, Default)]
pub struct Volumes(pub HashMap<String, VolumeDir>);

/// Inputs shared by every volume of a pod.
pub struct VolumeCtx<'a> {
    pub client: &'a Client,
    pub state_dir: &'a Path,
    pub pod_dir: &'a Path,
    pub pod: &'a Pod,
    pub pod_ip: &'a str,
    pub objects: &'a Objects,
    pub node: NodeFacts,
}

impl VolumeCtx<'_> {
    fn fs_group(&self) -> Option<u32> {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref())
            .and_then(|s| s.fs_group)
            .and_then(|g| u32::try_from(g).ok())
    }

    fn namespace(&self) -> String {
        self.pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into())
    }
}

fn waiting(message: String) -> Waiting {
    Waiting {
        reason: "ContainerCreating",
        message,
    }
}

fn io_waiting(what: &Path) -> impl FnOnce(std::io::Error) -> Waiting + '_ {
    move |e| waiting(format!("preparing {}: {e}", what.display()))
}

/// Prepares every volume of the pod.
pub async fn prepare(ctx: &VolumeCtx<'_>) -> Result<Volumes, Waiting> {
    let mut out = Volumes::default();
    for v in ctx.pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let dir = prepare_one(ctx, v).await?;
        out.0.insert(v.name.clone(), dir);
    }
    Ok(out)
}

/// The rendered files of a projected-kind volume, `None` for other kinds.
fn projected_files(ctx: &VolumeCtx<'_>, v: &Volume) -> Option<Result<Vec<File>, String>> {
    if let Some(s) = &v.secret {
        return Some(projection::secret(s, ctx.objects));
    }
    if let Some(c) = &v.config_map {
        return Some(projection::config_map(c, ctx.objects));
    }
    if let Some(d) = &v.downward_api {
        return Some(projection::downward(
            d.items.as_deref().unwrap_or_default(),
            d.default_mode.unwrap_or(0o644),
            ctx.pod,
            ctx.pod_ip,
            ctx.node,
        ));
    }
    if let Some(p) = &v.projected {
        return Some(projection::projected(
            p,
            ctx.objects,
            ctx.pod,
            ctx.pod_ip,
            ctx.node,
        ));
    }
    None
}

fn projected_dir(pod_dir: &Path, name: &str) -> PathBuf {
    pod_dir.join("volumes").join("projected").join(name)
}

async fn prepare_one(ctx: &VolumeCtx<'_>, v: &Volume) -> Result<VolumeDir, Waiting> {
    if let Some(files) = projected_files(ctx, v) {
        let files = files.map_err(|e| {
            waiting(format!(
                "MountVolume.SetUp failed for volume {:?}: {e}",
                v.name
            ))
        })?;
        let path = projected_dir(ctx.pod_dir, &v.name);
        projection::write(&path, &files, ctx.fs_group()).map_err(io_waiting(&path))?;
        return Ok(VolumeDir {
            path,
            read_only: true,
        });
    }
    if v.empty_dir.is_some() {
        let path = ctx.pod_dir.join("volumes").join("empty-dir").join(&v.name);
        std::fs::create_dir_all(&path).map_err(io_waiting(&path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))
            .map_err(io_waiting(&path))?;
        apply_fs_group(&path, ctx.fs_group()).map_err(io_waiting(&path))?;
        return Ok(VolumeDir {
            path,
            read_only: false,
        });
    }
    if let Some(claim) = &v.persistent_volume_claim {
        let ns = ctx.namespace();
        let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
        let pvc = api
            .get_opt(&claim.claim_name)
            .await
            .map_err(|e| {
                waiting(format!(
                    "reading persistentvolumeclaim {:?}: {e}",
                    claim.claim_name
                ))
            })?
            .ok_or_else(|| {
                waiting(format!(
                    "persistentvolumeclaim \"{}\" not found",
                    claim.claim_name
                ))
            })?;
        if pvc.metadata.deletion_timestamp.is_some() {
            // kubelet's volume manager refuses the same way.
            return Err(waiting(format!(
                "error processing PVC {ns}/{}: PVC is being deleted",
                claim.claim_name
            )));
        }
        if let Some(volume) = pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()) {
            let (path, ownership) = bound_volume_path(ctx.client, volume).await?;
            if ownership {
                apply_fs_group(&path, ctx.fs_group()).map_err(io_waiting(&path))?;
            }
            return Ok(VolumeDir {
                path,
                read_only: claim.read_only.unwrap_or(false),
            });
        }
        let path = claim_dir(ctx.state_dir, &ns, &pvc);
        std::fs::create_dir_all(&path).map_err(io_waiting(&path))?;
        apply_fs_group(&path, ctx.fs_group()).map_err(io_waiting(&path))?;
        mark_bound(&api, &pvc).await;
        return Ok(VolumeDir {
            path,
            read_only: claim.read_only.unwrap_or(false),
        });
    }
    if let Some(hp) = &v.host_path {
        return Ok(VolumeDir {
            path: host_path(&hp.path, hp.type_.as_deref())?,
            read_only: false,
        });
    }
    Err(waiting(format!(
        "volume {:?}: unsupported volume type on steward-node",
        v.name
    )))
}

/// The host directory of a claim: `state_dir/volumes/<ns>/<claim>-<uid>` (just `<claim>` for
/// a claim without a UID, which a stored object always has).
/// The host path of a `hostPath` volume, made as its `type` says.
fn host_path(path: &str, type_: Option<&str>) -> Result<PathBuf, Waiting> {
    let path = PathBuf::from(path);
    match type_.unwrap_or("") {
        "DirectoryOrCreate" => std::fs::create_dir_all(&path).map_err(io_waiting(&path))?,
        "FileOrCreate" => {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io_waiting(&path))?;
            }
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(io_waiting(&path))?;
        }
        "" => {}
        _ if !path.exists() => {
            return Err(waiting(format!(
                "hostPath {} does not exist",
                path.display()
            )));
        }
        _ => {}
    }
    Ok(path)
}

/// The directory of PersistentVolume `name` a claim is bound to, and whether the Pod's
/// `fsGroup` applies to it: its `hostPath` (made as its type says; kubelet manages no ownership
/// there) or its `local` path (which must exist, as kubelet requires; ownership managed). Other
/// volume sources cannot be mounted on this machine, and the Pod waits saying so.
async fn bound_volume_path(client: &Client, name: &str) -> Result<(PathBuf, bool), Waiting> {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    let pv = api
        .get_opt(name)
        .await
        .map_err(|e| waiting(format!("reading persistentvolume {name:?}: {e}")))?
        .ok_or_else(|| waiting(format!("persistentvolume \"{name}\" not found")))?;
    let spec = pv.spec.unwrap_or_default();
    if let Some(hp) = &spec.host_path {
        return Ok((host_path(&hp.path, hp.type_.as_deref())?, false));
    }
    if let Some(local) = &spec.local {
        let path = PathBuf::from(&local.path);
        if !path.exists() {
            return Err(waiting(format!(
                "persistentvolume {name:?}: local path {} does not exist",
                local.path
            )));
        }
        return Ok((path, true));
    }
    Err(waiting(format!(
        "persistentvolume {name:?}: only hostPath and local volumes can be mounted by steward-node"
    )))
}

pub fn claim_dir(state_dir: &Path, namespace: &str, pvc: &PersistentVolumeClaim) -> PathBuf {
    let name = pvc.metadata.name.as_deref().unwrap_or_default();
    let dir = match pvc.metadata.uid.as_deref().filter(|u| !u.is_empty()) {
        Some(uid) => format!("{name}-{uid}"),
        None => name.to_owned(),
    };
    state_dir.join("volumes").join(namespace).join(dir)
}

/// Re-renders secret/configMap/downwardAPI/projected volumes (errors keep the old files).
pub fn refresh(ctx: &VolumeCtx<'_>) {
    for v in ctx.pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        if let Some(Ok(files)) = projected_files(ctx, v) {
            let path = projected_dir(ctx.pod_dir, &v.name);
            if let Err(e) = projection::write(&path, &files, ctx.fs_group()) {
                tracing::warn!(volume = %v.name, error = %e, "refreshing volume failed");
            }
        }
    }
}

async fn mark_bound(api: &Api<PersistentVolumeClaim>, pvc: &PersistentVolumeClaim) {
    if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound") {
        return;
    }
    let spec = pvc.spec.clone().unwrap_or_default();
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_else(|| "1Gi".into());
    let patch = json!({"status": {
        "phase": "Bound",
        "accessModes": spec.access_modes.unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
        "capacity": {"storage": storage},
    }});
    let name = pvc.metadata.name.clone().unwrap_or_default();
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    if let Err(e) = api
        .patch_status(&name, &params, &Patch::Merge(&patch))
        .await
    {
        tracing::warn!(claim = %name, error = %e, "marking the claim Bound failed");
    }
}

/// Gives `fs_group` ownership of a volume (kubelet's OnRootMismatch: recursive only when the
/// root does not have the group and `g+rwx`+setgid yet).
pub fn apply_fs_group(root: &Path, fs_group: Option<u32>) -> std::io::Result<()> {
    let Some(gid) = fs_group else {
        return Ok(());
    };
    let meta = std::fs::metadata(root)?;
    if meta.gid() == gid && meta.mode() & 0o2070 == 0o2070 {
        return Ok(());
    }
    chgrp_tree(root, gid)
}

fn chgrp_tree(path: &Path, gid: u32) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return std::os::unix::fs::lchown(path, None, Some(gid));
    }
    std::os::unix::fs::chown(path, None, Some(gid))?;
    let mode = meta.mode() & 0o7777;
    let new_mode = if meta.is_dir() {
        mode | 0o2070
    } else {
        mode | 0o060
    };
    if new_mode != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(new_mode))?;
    }
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)?.filter_map(Result::ok) {
            chgrp_tree(&entry.path(), gid)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_directory_is_keyed_by_the_claim_uid() {
        let mut pvc = PersistentVolumeClaim::default();
        pvc.metadata.name = Some("data".into());
        pvc.metadata.uid = Some("u-1".into());
        let state = Path::new("/state");
        assert_eq!(
            claim_dir(state, "ns", &pvc),
            Path::new("/state/volumes/ns/data-u-1")
        );
        pvc.metadata.uid = Some("u-2".into());
        assert_eq!(
            claim_dir(state, "ns", &pvc),
            Path::new("/state/volumes/ns/data-u-2"),
            "a re-created claim is a new volume"
        );
    }

    #[test]
    fn fs_group_is_applied_once_on_root_mismatch() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("vol");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/f"), "x").unwrap();
        apply_fs_group(&root, Some(4242)).unwrap();
        let m = std::fs::metadata(root.join("sub/f")).unwrap();
        assert_eq!(m.gid(), 4242);
        assert_eq!(m.mode() & 0o060, 0o060);
        assert_eq!(std::fs::metadata(&root).unwrap().mode() & 0o2070, 0o2070);
        // A later private subdirectory (postgres' data dir) is left alone.
        std::fs::create_dir(root.join("pgdata")).unwrap();
        std::fs::set_permissions(root.join("pgdata"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        apply_fs_group(&root, Some(4242)).unwrap();
        assert_eq!(
            std::fs::metadata(root.join("pgdata")).unwrap().mode() & 0o777,
            0o700
        );
    }
}
