//! The shim spec for a container (pure apart from `/etc/passwd` and PATH lookups, subPath
//! directories and the emulated passwd/group files of [`super::identity`]): environment,
//! resolved program, `$(VAR)`-expanded arguments, bind mounts, credentials and hostname.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};

use super::Waiting;
use super::envs::{self, Env, NodeFacts};
use super::identity;
use super::objects::Objects;
use super::volumes::Volumes;
use crate::expand::expand;
use crate::images::{DEFAULT_PATH, ImageMap};
use crate::shim::{BindMount, ShimSpec};

/// Everything a container start needs besides the pod.
pub struct SpecInputs<'a> {
    pub pod_ip: &'a str,
    pub objects: &'a Objects,
    pub volumes: &'a Volumes,
    pub images: &'a ImageMap,
    pub node: NodeFacts,
    pub hosts_file: &'a Path,
    /// Where emulated `/etc/passwd` and `/etc/group` copies are written ([`identity`]).
    pub identity_dir: &'a Path,
    /// Services for the Service environment variables.
    pub services: &'a [crate::endpoints::ServiceView],
}

/// A container ready to start.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub spec: ShimSpec,
    pub image_id: String,
}

fn config_error(message: String) -> Waiting {
    Waiting {
        reason: "CreateContainerConfigError",
        message,
    }
}

/// The pod's hostname: `spec.hostname`, else the pod name (at most 63 characters).
pub fn hostname(pod: &Pod) -> String {
    let name = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    name.chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches(['-', '.'])
        .to_string()
}

/// uid, gid and supplementary groups from the pod and container security contexts.
fn credentials(pod: &Pod, c: &Container) -> (Option<u32>, Option<u32>, Vec<u32>, bool) {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let csc = c.security_context.as_ref();
    let to_u32 = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
    let uid = to_u32(
        csc.and_then(|s| s.run_as_user)
            .or(psc.and_then(|s| s.run_as_user)),
    );
    let mut gid = to_u32(
        csc.and_then(|s| s.run_as_group)
            .or(psc.and_then(|s| s.run_as_group)),
    );
    if gid.is_none()
        && let Some(uid) = uid
    {
        gid = passwd(uid).map(|u| u.gid.as_raw()).or(Some(0));
    }
    let mut groups: Vec<u32> = psc
        .and_then(|s| s.supplemental_groups.clone())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|g| u32::try_from(g).ok())
        .collect();
    if let Some(fs) = to_u32(psc.and_then(|s| s.fs_group)) {
        groups.push(fs);
    }
    groups.sort_unstable();
    groups.dedup();
    let non_root = csc
        .and_then(|s| s.run_as_non_root)
        .or(psc.and_then(|s| s.run_as_non_root))
        .unwrap_or(false);
    (uid, gid, groups, non_root)
}

fn passwd(uid: u32) -> Option<nix::unistd::User> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
}

/// Builds the shim spec of `container`, or the reason it cannot start yet.
pub fn build(
    pod: &Pod,
    c: &Container,
    inputs: &SpecInputs<'_>,
    error_file: PathBuf,
) -> Result<Prepared, Waiting> {
    let image = c.image.clone().unwrap_or_default();
    let host = hostname(pod);
    let prefix = inputs
        .images
        .lookup(&image)
        .filter(|p| p.is_dir())
        .map(Path::to_path_buf);
    let mut base = Env::default();
    base.set(
        "PATH",
        match &prefix {
            Some(p) => format!("{}:{DEFAULT_PATH}", p.display()),
            None => DEFAULT_PATH.to_string(),
        },
    );
    base.set("HOSTNAME", host.clone());
    let links = pod
        .spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true);
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    for (k, v) in super::service_env::service_env(inputs.services, namespace, links) {
        base.set(&k, v);
    }
    let mut env = envs::build(pod, c, inputs.pod_ip, inputs.objects, inputs.node, base)
        .map_err(config_error)?;
    let (uid, gid, groups, non_root) = credentials(pod, c);
    if non_root && uid.unwrap_or(0) == 0 {
        return Err(config_error(format!(
            "container has runAsNonRoot and image will run as root (pod: \"{}_{}\", container: {})",
            pod.metadata.name.as_deref().unwrap_or_default(),
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            c.name
        )));
    }
    let image_identity = identity::prepare(
        &identity::Paths {
            host_etc: Path::new("/etc"),
            dir: inputs.identity_dir,
        },
        &c.name,
        &image,
        uid,
        gid,
    )
    .map_err(|e| config_error(format!("writing the container's /etc/passwd: {e}")))?;
    if !env.contains("HOME") {
        let home = image_identity
            .home
            .clone()
            .or_else(|| {
                uid.and_then(passwd)
                    .map(|u| u.dir.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| {
                if uid.unwrap_or(0) == 0 {
                    "/root".into()
                } else {
                    "/".into()
                }
            });
        env.set("HOME", home);
    }
    // A stand-in is told its image (a real image carries its version) and its Pod's address
    // (a real Pod's connections come from it; here Pods share the host's network).
    if crate::images::is_standin_image(&image) {
        if !env.contains("STEWARD_STANDIN_IMAGE") {
            env.set("STEWARD_STANDIN_IMAGE", image.clone());
        }
        if !env.contains("STEWARD_POD_IP") {
            env.set("STEWARD_POD_IP", inputs.pod_ip.to_string());
        }
    }
    let lookup = |n: &str| env.get(n).map(str::to_string);
    let command: Vec<String> = c
        .command
        .iter()
        .flatten()
        .map(|s| expand(s, lookup))
        .collect();
    let args: Vec<String> = c.args.iter().flatten().map(|s| expand(s, lookup)).collect();
    let path = env.get("PATH").unwrap_or(DEFAULT_PATH).to_string();
    let resolved = inputs
        .images
        .resolve(&image, &command, &args, &path)
        .map_err(|e| Waiting {
            reason: "ErrImageNeverPull",
            message: e.0,
        })?;
    let mut mounts = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let Some(vol) = inputs.volumes.0.get(&m.name) else {
            return Err(config_error(format!(
                "cannot find volume {:?} to mount into container {:?}",
                m.name, c.name
            )));
        };
        let sub = match (&m.sub_path, &m.sub_path_expr) {
            (Some(s), _) if !s.is_empty() => Some(s.clone()),
            (_, Some(e)) if !e.is_empty() => Some(expand(e, lookup)),
            _ => None,
        };
        let mut source = vol.path.clone();
        if let Some(sub) = sub {
            if Path::new(&sub)
                .components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return Err(config_error(format!(
                    "subPath {sub:?} must be a relative path without '..'"
                )));
            }
            source = source.join(&sub);
            if !source.exists() {
                std::fs::create_dir_all(&source).map_err(|e| {
                    config_error(format!("creating subPath {}: {e}", source.display()))
                })?;
            }
        }
        mounts.push(BindMount {
            source,
            target: PathBuf::from(&m.mount_path),
            read_only: m.read_only.unwrap_or(false) || vol.read_only,
        });
    }
    mounts.extend(image_identity.mounts);
    let spec = ShimSpec {
        join_pid: None,
        hostname: host,
        mounts,
        hosts_file: Some(inputs.hosts_file.to_path_buf()),
        uid,
        gid,
        groups,
        working_dir: c
            .working_dir
            .clone()
            .filter(|w| !w.is_empty())
            .map(PathBuf::from),
        program: resolved.program.to_string_lossy().into_owned(),
        argv: resolved.argv,
        env: env.0,
        error_file: Some(error_file),
        cgroup: None,
    };
    Ok(Prepared {
        spec,
        image_id: resolved.image_id,
    })
}

/// The spec of a command run inside a running container (exec probes, `pods/exec`).
pub fn exec_spec(template: &ShimSpec, pid: i32, command: &[String]) -> ShimSpec {
    ShimSpec {
        join_pid: Some(pid),
        hostname: String::new(),
        mounts: Vec::new(),
        hosts_file: None,
        program: command.first().cloned().unwrap_or_default(),
        argv: command.to_vec(),
        error_file: None,
        cgroup: None,
        ..template.clone()
    }
}
