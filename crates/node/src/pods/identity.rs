//! The container user's passwd and group entries. An image ships its own `/etc/passwd`: the
//! official `postgres` image has `postgres:x:999:999`, and `initdb`, `postgres` and libpq refuse
//! to run as a uid without an entry ("could not look up effective user ID 999"). There are no
//! images here, so when a container runs as a `runAsUser` the host's `/etc/passwd` does not
//! know, the agent writes a per-container copy of the host file with an entry for that uid (and
//! likewise `/etc/group` for an unknown gid), and the shim bind-mounts it read-only over
//! `/etc/passwd` (`/etc/group`) inside the container's mount namespace. Users the host knows are
//! left alone (no file, no mount).
//!
//! The entry is named after the image: `postgres` for repositories whose last path segment is
//! `postgres` or `postgresql` (home `/var/lib/postgresql`, as in the image), `user<uid>`
//! (`group<gid>`) otherwise (home `/`). A host entry with the same *name* but another id is left
//! out of the copy, so that name lookups inside the container find the emulated id, as they
//! would in the image.

use std::path::{Path, PathBuf};

use crate::images::repository;
use crate::shim::BindMount;

/// The GECOS field of emulated users.
pub const GECOS: &str = "steward container user";

/// What an emulated user looks like.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Emulated {
    /// User name (`postgres` or `user<uid>`).
    pub user: String,
    /// Group name (`postgres` or `group<gid>`).
    pub group: String,
    /// Home directory, also the container's `HOME` unless its env sets one.
    pub home: String,
}

fn is_postgres_image(image: &str) -> bool {
    matches!(
        repository(image).rsplit('/').next(),
        Some("postgres" | "postgresql")
    )
}

/// Names and home of an emulated user of `image`.
pub fn emulated(image: &str, uid: u32, gid: u32) -> Emulated {
    if is_postgres_image(image) {
        return Emulated {
            user: "postgres".into(),
            group: "postgres".into(),
            home: "/var/lib/postgresql".into(),
        };
    }
    Emulated {
        user: format!("user{uid}"),
        group: format!("group{gid}"),
        home: "/".into(),
    }
}

/// The id field (third) of a passwd or group line.
fn id_of(line: &str) -> Option<u32> {
    line.split(':').nth(2)?.trim().parse().ok()
}

fn name_of(line: &str) -> &str {
    line.split(':').next().unwrap_or_default()
}

/// `host` (a passwd or group file) with `entry` appended, or `None` when `host` already has
/// an entry with id `id`. Lines naming `name` are dropped.
fn with_entry(host: &str, id: u32, name: &str, entry: &str) -> Option<String> {
    if host
        .lines()
        .filter(|l| !l.starts_with('#'))
        .any(|l| id_of(l) == Some(id))
    {
        return None;
    }
    let mut out = String::with_capacity(host.len() + entry.len() + 1);
    for line in host.lines().filter(|l| name_of(l) != name) {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(entry);
    out.push('\n');
    Some(out)
}

/// The passwd file for a container running as `uid`/`gid`, or `None` when `host` knows `uid`.
pub fn passwd_with(host: &str, uid: u32, gid: u32, who: &Emulated) -> Option<String> {
    let entry = format!("{}:x:{uid}:{gid}:{GECOS}:{}:/bin/sh", who.user, who.home);
    with_entry(host, uid, &who.user, &entry)
}

/// The group file for a container running with `gid`, or `None` when `host` knows `gid`.
pub fn group_with(host: &str, gid: u32, who: &Emulated) -> Option<String> {
    let entry = format!("{}:x:{gid}:", who.group);
    with_entry(host, gid, &who.group, &entry)
}

/// The files to mount for one container, and the emulated user's home if there is one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub mounts: Vec<BindMount>,
    pub home: Option<String>,
}

/// Where the host's files are read and the copies are written.
pub struct Paths<'a> {
    /// The host's `/etc` (a test directory in unit tests).
    pub host_etc: &'a Path,
    /// The pod's directory for the copies.
    pub dir: &'a Path,
}

fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    std::fs::rename(&tmp, path)
}

/// Writes `<container>.passwd` / `<container>.group` under `paths.dir` when the host lacks
/// the uid / gid, and returns their bind mounts. A container without `runAsUser` gets nothing.
pub fn prepare(
    paths: &Paths<'_>,
    container: &str,
    image: &str,
    uid: Option<u32>,
    gid: Option<u32>,
) -> std::io::Result<Identity> {
    let Some(uid) = uid else {
        return Ok(Identity::default());
    };
    let gid = gid.unwrap_or(0);
    let who = emulated(image, uid, gid);
    let mut out = Identity::default();
    let files: [(&str, Option<String>); 2] = [
        (
            "passwd",
            passwd_with(&read(paths.host_etc, "passwd")?, uid, gid, &who),
        ),
        (
            "group",
            group_with(&read(paths.host_etc, "group")?, gid, &who),
        ),
    ];
    for (name, text) in files {
        let Some(text) = text else { continue };
        let source: PathBuf = paths.dir.join(format!("{container}.{name}"));
        write_file(&source, &text)?;
        out.mounts.push(BindMount {
            source,
            target: Path::new("/etc").join(name),
            read_only: true,
        });
        if name == "passwd" {
            out.home = Some(who.home.clone());
        }
    }
    Ok(out)
}

fn read(etc: &Path, name: &str) -> std::io::Result<String> {
    match std::fs::read_to_string(etc.join(name)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
        # a comment:x:999\n\
        nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n\
        postgres:x:101:104:PostgreSQL administrator,,,:/var/lib/postgresql:/bin/bash\n";
    const GROUP: &str = "root:x:0:\npostgres:x:104:\nnogroup:x:65534:\n";

    #[test]
    fn names_follow_the_image() {
        for image in [
            "postgres:15",
            "docker.io/library/postgres@sha256:ab",
            "bitnami/postgresql:16",
        ] {
            let e = emulated(image, 999, 999);
            assert_eq!(
                (e.user.as_str(), e.group.as_str()),
                ("postgres", "postgres")
            );
            assert_eq!(e.home, "/var/lib/postgresql");
        }
        let e = emulated("busybox:1.36", 1234, 55);
        assert_eq!((e.user.as_str(), e.group.as_str()), ("user1234", "group55"));
        assert_eq!(e.home, "/");
        assert_eq!(emulated("postgres-exporter:1", 5, 5).user, "user5");
    }

    #[test]
    fn unknown_uid_gets_an_entry_and_takes_over_the_name() {
        let who = emulated("postgres:15", 999, 999);
        let text = passwd_with(PASSWD, 999, 999, &who).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines.last(),
            Some(&"postgres:x:999:999:steward container user:/var/lib/postgresql:/bin/sh")
        );
        assert!(lines.contains(&"root:x:0:0:root:/root:/bin/bash"));
        assert!(lines.contains(&"# a comment:x:999"), "comments are kept");
        assert_eq!(
            lines.iter().filter(|l| l.starts_with("postgres:")).count(),
            1,
            "{text}"
        );
        let group = group_with(GROUP, 999, &who).unwrap();
        assert!(group.ends_with("\npostgres:x:999:\n"), "{group}");
        assert!(!group.contains("postgres:x:104:"));
    }

    #[test]
    fn known_ids_are_left_alone() {
        let who = emulated("postgres:15", 101, 104);
        assert_eq!(passwd_with(PASSWD, 101, 104, &who), None);
        assert_eq!(group_with(GROUP, 104, &who), None);
        let who = emulated("busybox", 65534, 0);
        assert_eq!(passwd_with(PASSWD, 65534, 0, &who), None);
        // A known uid with an unknown gid still gets a group entry.
        assert_eq!(
            group_with(GROUP, 4242, &emulated("busybox", 65534, 4242)).as_deref(),
            Some("root:x:0:\npostgres:x:104:\nnogroup:x:65534:\ngroup4242:x:4242:\n")
        );
        // An empty host file (missing) still gets the entry.
        assert_eq!(
            passwd_with("", 7, 7, &emulated("busybox", 7, 7)).as_deref(),
            Some("user7:x:7:7:steward container user:/:/bin/sh\n")
        );
    }

    #[test]
    fn prepare_writes_and_mounts_only_what_is_missing() {
        let etc = tempfile::tempdir().unwrap();
        std::fs::write(etc.path().join("passwd"), PASSWD).unwrap();
        std::fs::write(etc.path().join("group"), GROUP).unwrap();
        let pod = tempfile::tempdir().unwrap();
        let dir = pod.path().join("etc");
        let paths = Paths {
            host_etc: etc.path(),
            dir: &dir,
        };
        let id = prepare(&paths, "pg", "postgres:15", Some(999), Some(999)).unwrap();
        assert_eq!(id.home.as_deref(), Some("/var/lib/postgresql"));
        let targets: Vec<_> = id.mounts.iter().map(|m| m.target.clone()).collect();
        assert_eq!(
            targets,
            [PathBuf::from("/etc/passwd"), PathBuf::from("/etc/group")]
        );
        assert!(id.mounts.iter().all(|m| m.read_only));
        let written = std::fs::read_to_string(dir.join("pg.passwd")).unwrap();
        assert!(written.contains("postgres:x:999:999:"));
        assert!(
            std::fs::read_to_string(dir.join("pg.group"))
                .unwrap()
                .contains("postgres:x:999:")
        );
        // Known uid, unknown gid: only the group file.
        let id = prepare(&paths, "c", "busybox", Some(0), Some(4242)).unwrap();
        assert_eq!(id.home, None);
        assert_eq!(id.mounts.len(), 1);
        assert_eq!(id.mounts[0].target, PathBuf::from("/etc/group"));
        // No runAsUser, or everything known: nothing.
        assert_eq!(
            prepare(&paths, "c", "postgres", None, Some(999)).unwrap(),
            Identity::default()
        );
        assert_eq!(
            prepare(&paths, "c", "postgres", Some(101), Some(104)).unwrap(),
            Identity::default()
        );
    }
}
