//! Files of secret, configMap, downwardAPI and projected volumes: which files (pure) and
//! writing them into the volume directory (each file replaced atomically by rename, files no
//! longer projected removed, so updates show through a bind mount of the directory).

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path};

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, DownwardAPIVolumeFile, KeyToPath, Pod, ProjectedVolumeSource,
    SecretVolumeSource,
};

use super::envs::NodeFacts;
use super::fieldref;
use super::objects::{Data, Kind, Objects};

/// One projected file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct File {
    pub path: String,
    pub data: Vec<u8>,
    pub mode: u32,
}

const DEFAULT_MODE: i32 = 0o644;

fn keyed(
    kind: Kind,
    name: &str,
    data: Option<&Data>,
    items: Option<&Vec<KeyToPath>>,
    optional: bool,
    mode: i32,
) -> Result<Vec<File>, String> {
    let Some(data) = data else {
        return if optional {
            Ok(Vec::new())
        } else {
            Err(format!("{} \"{name}\" not found", kind.lower()))
        };
    };
    let mode = u32::try_from(mode).unwrap_or(0o644);
    match items {
        None => Ok(data
            .iter()
            .map(|(k, v)| File {
                path: k.clone(),
                data: v.clone(),
                mode,
            })
            .collect()),
        Some(items) => items
            .iter()
            .filter_map(|item| match data.get(&item.key) {
                Some(v) => Some(Ok(File {
                    path: item.path.clone(),
                    data: v.clone(),
                    mode: item
                        .mode
                        .and_then(|m| u32::try_from(m).ok())
                        .unwrap_or(mode),
                })),
                None if optional => None,
                None => Some(Err(format!(
                    "{} \"{name}\" references non-existent key: {}",
                    kind.lower(),
                    item.key
                ))),
            })
            .collect(),
    }
}

pub fn secret(src: &SecretVolumeSource, objects: &Objects) -> Result<Vec<File>, String> {
    let name = src.secret_name.clone().unwrap_or_default();
    keyed(
        Kind::Secret,
        &name,
        objects.get(Kind::Secret, &name),
        src.items.as_ref(),
        src.optional.unwrap_or(false),
        src.default_mode.unwrap_or(DEFAULT_MODE),
    )
}

pub fn config_map(src: &ConfigMapVolumeSource, objects: &Objects) -> Result<Vec<File>, String> {
    keyed(
        Kind::ConfigMap,
        &src.name,
        objects.get(Kind::ConfigMap, &src.name),
        src.items.as_ref(),
        src.optional.unwrap_or(false),
        src.default_mode.unwrap_or(DEFAULT_MODE),
    )
}

pub fn downward(
    items: &[DownwardAPIVolumeFile],
    default_mode: i32,
    pod: &Pod,
    pod_ip: &str,
    node: NodeFacts,
) -> Result<Vec<File>, String> {
    items
        .iter()
        .map(|item| {
            let value = if let Some(f) = &item.field_ref {
                fieldref::field(pod, &f.field_path, pod_ip)?
            } else if let Some(r) = &item.resource_field_ref {
                let name = r.container_name.clone().unwrap_or_default();
                let container = pod
                    .spec
                    .iter()
                    .flat_map(|s| &s.containers)
                    .find(|c| c.name == name)
                    .cloned()
                    .unwrap_or_else(Container::default);
                fieldref::resource(&container, r, node.cpus, node.memory_bytes)?
            } else {
                String::new()
            };
            Ok(File {
                path: item.path.clone(),
                data: value.into_bytes(),
                mode: u32::try_from(item.mode.unwrap_or(default_mode)).unwrap_or(0o644),
            })
        })
        .collect()
}

pub fn projected(
    src: &ProjectedVolumeSource,
    objects: &Objects,
    pod: &Pod,
    pod_ip: &str,
    node: NodeFacts,
) -> Result<Vec<File>, String> {
    let mode = src.default_mode.unwrap_or(DEFAULT_MODE);
    let mut out = Vec::new();
    for s in src.sources.iter().flatten() {
        if let Some(sec) = &s.secret {
            out.extend(keyed(
                Kind::Secret,
                &sec.name,
                objects.get(Kind::Secret, &sec.name),
                sec.items.as_ref(),
                sec.optional.unwrap_or(false),
                mode,
            )?);
        }
        if let Some(cm) = &s.config_map {
            out.extend(keyed(
                Kind::ConfigMap,
                &cm.name,
                objects.get(Kind::ConfigMap, &cm.name),
                cm.items.as_ref(),
                cm.optional.unwrap_or(false),
                mode,
            )?);
        }
        if let Some(d) = &s.downward_api {
            out.extend(downward(
                d.items.as_deref().unwrap_or_default(),
                mode,
                pod,
                pod_ip,
                node,
            )?);
        }
    }
    Ok(out)
}

fn safe_relative(path: &str) -> bool {
    let p = Path::new(path);
    !path.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)))
}

/// Writes `files` into `dir` (created if missing) and removes files that are no longer part
/// of the volume. With `fs_group`, files are group-owned by it and group-readable.
pub fn write(dir: &Path, files: &[File], fs_group: Option<u32>) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut keep = BTreeSet::new();
    for f in files.iter().filter(|f| safe_relative(&f.path)) {
        let target = dir.join(&f.path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mode = if fs_group.is_some() {
            f.mode | 0o040
        } else {
            f.mode
        };
        let unchanged = std::fs::read(&target).is_ok_and(|d| d == f.data)
            && std::fs::metadata(&target).is_ok_and(|m| m.permissions().mode() & 0o7777 == mode);
        if !unchanged {
            let tmp = target.with_file_name(format!(
                ".tmp-{}",
                target
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or("file")
            ));
            std::fs::write(&tmp, &f.data)?;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
            if let Some(gid) = fs_group {
                std::os::unix::fs::chown(&tmp, None, Some(gid))?;
            }
            std::fs::rename(&tmp, &target)?;
        }
        keep.insert(target);
    }
    remove_others(dir, &keep)
}

fn remove_others(dir: &Path, keep: &BTreeSet<std::path::PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)?.filter_map(Result::ok) {
        let path = entry.path();
        let ft = entry.file_type()?;
        if ft.is_dir() {
            remove_others(&path, keep)?;
        } else if !keep.contains(&path) {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn objects() -> Objects {
        let mut found = HashMap::new();
        found.insert(
            (Kind::Secret, "s".to_string()),
            Some(
                [
                    ("a".to_string(), b"1".to_vec()),
                    ("b".to_string(), b"2".to_vec()),
                ]
                .into(),
            ),
        );
        Objects {
            namespace: "ns".into(),
            found,
        }
    }

    #[test]
    fn items_and_modes() {
        let src = SecretVolumeSource {
            secret_name: Some("s".into()),
            items: Some(vec![KeyToPath {
                key: "b".into(),
                path: "dir/b.txt".into(),
                mode: Some(0o600),
            }]),
            default_mode: Some(0o640),
            optional: None,
        };
        assert_eq!(
            secret(&src, &objects()).unwrap(),
            vec![File {
                path: "dir/b.txt".into(),
                data: b"2".to_vec(),
                mode: 0o600
            }]
        );
        let all = SecretVolumeSource {
            secret_name: Some("s".into()),
            ..Default::default()
        };
        assert_eq!(secret(&all, &objects()).unwrap().len(), 2);
        let missing = SecretVolumeSource {
            secret_name: Some("x".into()),
            ..Default::default()
        };
        assert_eq!(
            secret(&missing, &objects()).unwrap_err(),
            "secret \"x\" not found"
        );
        let optional = SecretVolumeSource {
            secret_name: Some("x".into()),
            optional: Some(true),
            ..Default::default()
        };
        assert!(secret(&optional, &objects()).unwrap().is_empty());
    }

    #[test]
    fn write_replaces_and_prunes() {
        let dir = tempfile::tempdir().unwrap();
        let f = |p: &str, d: &str| File {
            path: p.into(),
            data: d.as_bytes().to_vec(),
            mode: 0o644,
        };
        write(dir.path(), &[f("a", "1"), f("sub/b", "2")], None).unwrap();
        write(dir.path(), &[f("a", "3"), f("../escape", "x")], None).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("a")).unwrap(), "3");
        assert!(!dir.path().join("sub/b").exists());
        assert!(!dir.path().parent().unwrap().join("escape").exists());
    }
}
