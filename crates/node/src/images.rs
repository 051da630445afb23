//! Image → executable resolution. There are no images: an image repository maps to a host
//! executable or a host directory of executables, and everything else resolves on the PATH.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The environment variable with image map overrides (`repo=path,repo=path`).
pub const IMAGES_ENV: &str = "STEWARD_NODE_IMAGES";

/// The PATH every container starts with (before the image map prepends a directory).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Debian's PostgreSQL exporter (package prometheus-postgres-exporter), which runs the
/// PostgreSQL metrics sidecar's images.
pub const POSTGRES_EXPORTER: &str = "/usr/bin/prometheus-postgres-exporter";

/// The exporter images [`POSTGRES_EXPORTER`] stands in for: the upstream image on Quay and on
/// Docker Hub, and its former home.
const POSTGRES_EXPORTER_IMAGES: [&str; 3] = [
    "quay.io/prometheuscommunity/postgres-exporter",
    "prometheuscommunity/postgres-exporter",
    "wrouesnel/postgres_exporter",
];

/// The environment variable naming the CrateDB stand-in's binary (`cratedb-standin`, package
/// `steward-cratedb-standin`), which runs CrateDB's images.
pub const CRATEDB_STANDIN_ENV: &str = "STEWARD_CRATEDB_STANDIN";

/// The CrateDB stand-in's binary name.
pub const CRATEDB_STANDIN_BIN: &str = "cratedb-standin";

/// A stand-in: one binary that dispatches on argv[0]'s file name, run for some images through
/// a directory of symlinks named after the image's commands, made next to the binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standin {
    /// The environment variable naming the binary explicitly.
    pub env: &'static str,
    /// The binary's file name (next to the running executable or in its parent directory).
    pub bin: &'static str,
    /// The image repositories it runs (through the lookup rules also `docker.io/…` etc.).
    pub images: &'static [&'static str],
    /// The names it answers to: the symlinks made in its directory.
    pub commands: &'static [&'static str],
    /// The directory of symlinks, made next to the binary.
    pub dir: &'static str,
}

/// CrateDB's images (`crate`, `crate/crate`, and through the lookup rules `docker.io/crate`,
/// `docker.io/crate/crate`, `crate.io/crate`, …) map to a directory with the CrateDB stand-in as
/// `crate` (the server, CrateDB's start command) and `crash` (the shell).
pub const CRATEDB_STANDIN: Standin = Standin {
    env: CRATEDB_STANDIN_ENV,
    bin: CRATEDB_STANDIN_BIN,
    images: &["crate", "crate/crate"],
    commands: &["crate", "crash"],
    dir: "cratedb-standin-image",
};

/// The environment variable naming the FoundationDB stand-in's binary (`fdb-standin`,
/// package `steward-fdb-standin`), which runs FoundationDB's images.
pub const FDB_STANDIN_ENV: &str = "STEWARD_FDB_STANDIN";

/// FoundationDB's images (the unified image and the monitor's) map to a directory with the
/// FoundationDB stand-in as each of FoundationDB's tools (docs/foundationdb-standin.md).
pub const FDB_STANDIN: Standin = Standin {
    env: FDB_STANDIN_ENV,
    bin: "fdb-standin",
    images: &[
        "foundationdb/fdb-kubernetes-monitor",
        "foundationdb/foundationdb",
    ],
    commands: &[
        "fdb-kubernetes-monitor",
        "fdbserver",
        "fdbcli",
        "fdbbackup",
        "fdbrestore",
        "backup_agent",
        "crash-loop",
    ],
    dir: "fdb-standin-image",
};

/// Where etcd versions besides Debian's are installed, one directory per minor version with
/// `bin/etcd` (`scripts/prereqs.sh`: 3.5 and 3.6 from crates.io's `etcd-bin-vendored-*`).
pub const ETCD_ROOT: &str = "/usr/lib/etcd";

/// etcd's image repositories.
const ETCD_IMAGES: [&str; 3] = [
    "etcd",
    "quay.io/coreos/etcd",
    "gcr.io/etcd-development/etcd",
];

/// Every installed etcd: (`MAJOR.MINOR`, binary) — `debian` as the version its `--version`
/// prints, and each `<root>/<minor>/bin/etcd`.
fn etcd_bins(root: &Path, debian: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    if is_executable(debian)
        && let Ok(o) = std::process::Command::new(debian).arg("--version").output()
        && let Some(minor) = String::from_utf8_lossy(&o.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("etcd Version: "))
            .and_then(|v| major_of(&format!("etcd:{}", v.trim())))
    {
        out.push((minor, debian.to_path_buf()));
    }
    if let Ok(dir) = std::fs::read_dir(root) {
        for e in dir.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            let binary = e.path().join("bin/etcd");
            if major_of(&format!("etcd:{name}")).as_deref() == Some(name.as_str())
                && is_executable(&binary)
            {
                out.retain(|(m, _)| *m != name);
                out.push((name, binary));
            }
        }
    }
    out.sort();
    out
}

/// Maps image repositories (`quay.io/coreos/etcd`, `postgres`, ...) to a host executable or
/// a directory of executables.
///
/// Lookup tries the repository as written (tag and digest stripped), then without a
/// `docker.io/` / `library/` prefix, then its last path segment, so `bitnami/etcd:3.5` finds
/// the `etcd` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageMap {
    entries: BTreeMap<String, PathBuf>,
}

impl Default for ImageMap {
    fn default() -> Self {
        Self::with_defaults()
    }
}

/// Where a container's program comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// Absolute path of the program to execute.
    pub program: PathBuf,
    /// The full argument vector; `argv[0]` is the command as the manifest wrote it.
    pub argv: Vec<String>,
    /// A directory to prepend to the container's PATH (image maps to a directory).
    pub path_prefix: Option<PathBuf>,
    /// What the container status reports as `imageID`.
    pub image_id: String,
}

/// Why an image's command could not be resolved; the message names the image.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ResolveError(pub String);

impl ImageMap {
    /// The defaults: etcd → `/usr/bin/etcd` (Debian etcd-server), postgres → the newest
    /// `/usr/lib/postgresql/*/bin`, the PostgreSQL exporter images →
    /// [`POSTGRES_EXPORTER`] (Debian prometheus-postgres-exporter), CrateDB's images → a
    /// directory of `crate` and `crash` symlinks to the CrateDB stand-in
    /// ([`find_cratedb_standin`], [`cratedb_standin_dir`]; made here, once), FoundationDB's
    /// images → a directory of FoundationDB's tool names linked to the FoundationDB stand-in
    /// ([`FDB_STANDIN`]). The PostgreSQL and stand-in entries exist only when those are
    /// installed or built.
    pub fn with_defaults() -> Self {
        let dir = |s: &Standin| find_standin(s).and_then(|b| standin_dir(s, &b));
        let cratedb = dir(&CRATEDB_STANDIN);
        let fdb = dir(&FDB_STANDIN);
        Self::defaults_from(
            Path::new("/usr/lib/postgresql"),
            Path::new(POSTGRES_EXPORTER),
            cratedb.as_deref(),
            fdb.as_deref(),
        )
    }

    /// The defaults with PostgreSQL installations under `postgres_root`, the exporter at
    /// `exporter`, the CrateDB stand-in's directory `cratedb` (`crate` and `crash`) and the
    /// FoundationDB stand-in's directory `fdb`.
    fn defaults_from(
        postgres_root: &Path,
        exporter: &Path,
        cratedb: Option<&Path>,
        fdb: Option<&Path>,
    ) -> Self {
        let mut map = Self::empty()
            .with("etcd", "/usr/bin/etcd")
            .with("quay.io/coreos/etcd", "/usr/bin/etcd")
            .with("gcr.io/etcd-development/etcd", "/usr/bin/etcd");
        // Each installed etcd minor version under its tag (`quay.io/coreos/etcd:v3.5.34` runs
        // 3.5): Debian's /usr/bin/etcd as the version it says it is, and every
        // `<etcd_root>/<minor>/bin/etcd`.
        for (minor, binary) in etcd_bins(Path::new(ETCD_ROOT), Path::new("/usr/bin/etcd")) {
            for repo in ETCD_IMAGES {
                map = map.with(format!("{repo}:{minor}"), &binary);
            }
        }
        if let Some(dir) = newest_postgres_bin(postgres_root) {
            map = map.with("postgres", &dir).with("postgresql", dir);
        }
        // Each installed major version under its tag: `postgres:16` runs 16, never the newest.
        for (version, dir) in postgres_bins(postgres_root) {
            map = map
                .with(format!("postgres:{version}"), &dir)
                .with(format!("postgresql:{version}"), dir);
        }
        if is_executable(exporter) {
            for repo in POSTGRES_EXPORTER_IMAGES {
                map = map.with(repo, exporter);
            }
        }
        for (standin, dir) in [(&CRATEDB_STANDIN, cratedb), (&FDB_STANDIN, fdb)] {
            let Some(dir) =
                dir.filter(|d| standin.commands.iter().all(|c| is_executable(&d.join(c))))
            else {
                continue;
            };
            for repo in standin.images {
                map = map.with(*repo, dir);
            }
        }
        map
    }

    /// A map without entries: every command resolves on the host PATH.
    pub fn empty() -> Self {
        Self {
            entries: BTreeMap::new(),
        }
    }

    /// Adds or replaces the entry for `repo` (an executable or a directory of executables).
    pub fn with(mut self, repo: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        self.entries.insert(repo.into(), path.into());
        self
    }

    /// The defaults plus the overrides in `$STEWARD_NODE_IMAGES`, if set.
    pub fn from_env() -> Result<Self, ResolveError> {
        match std::env::var(IMAGES_ENV) {
            Ok(spec) => Self::with_defaults().with_overrides(&spec),
            Err(_) => Ok(Self::with_defaults()),
        }
    }

    /// Applies overrides in the `STEWARD_NODE_IMAGES` format: `repo=path,repo=path`.
    pub fn with_overrides(mut self, spec: &str) -> Result<Self, ResolveError> {
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((repo, path)) = item.split_once('=') else {
                return Err(ResolveError(format!(
                    "image override {item:?} is not of the form repo=path"
                )));
            };
            self = self.with(repo.trim(), path.trim());
        }
        Ok(self)
    }

    /// The map entry for `image`, if any (see [`ImageMap::find`]).
    pub fn lookup(&self, image: &str) -> Option<&Path> {
        self.find(image).ok().flatten()
    }

    /// The map entry for `image`. A repository with versioned entries (`postgres:15`,
    /// `postgres:16`: one per installed major version) maps a tagged image by its major version
    /// (`postgres:16.2-bookworm` → `postgres:16`), and a version it does not have is an error
    /// naming the versions it has — never another version's binaries. An untagged image, or a
    /// repository without versioned entries, uses the repository's entry.
    pub fn find(&self, image: &str) -> Result<Option<&Path>, ResolveError> {
        let major = major_of(image);
        for c in candidates(image) {
            let prefix = format!("{c}:");
            let versions: Vec<&str> = self
                .entries
                .range(prefix.clone()..)
                .map(|(k, _)| k)
                .take_while(|k| k.starts_with(&prefix))
                .map(|k| &k[prefix.len()..])
                .collect();
            if let Some(major) = major.as_deref()
                && !versions.is_empty()
            {
                return match self.entries.get(&format!("{c}:{major}")) {
                    Some(p) => Ok(Some(p.as_path())),
                    None => Err(ResolveError(format!(
                        "image {image:?}: version {major} of {c} is not installed on this node (it has {})",
                        versions.join(", ")
                    ))),
                };
            }
            if let Some(p) = self.entries.get(&c) {
                return Ok(Some(p.as_path()));
            }
        }
        Ok(None)
    }

    /// Resolves a container's `command`/`args` the way a runtime combines them with the
    /// image's entrypoint. `path` is the container's PATH, used for commands the map does not
    /// cover.
    pub fn resolve(
        &self,
        image: &str,
        command: &[String],
        args: &[String],
        path: &str,
    ) -> Result<Resolved, ResolveError> {
        let target = self.find(image)?;
        let is_dir = target.is_some_and(Path::is_dir);
        let path_prefix = target.filter(|_| is_dir).map(Path::to_path_buf);
        let image_id = match target {
            Some(t) => format!("steward-node://{}", t.display()),
            None => "steward-node://host".to_string(),
        };
        let mut argv: Vec<String> = command.to_vec();
        if argv.is_empty() {
            let Some(entry) = target.and_then(|t| default_entrypoint(image, t)) else {
                return Err(ResolveError(format!(
                    "image {image:?}: the container sets no command and the image map has no \
                     entrypoint for it"
                )));
            };
            argv.push(entry.to_string_lossy().into_owned());
        }
        argv.extend(args.iter().cloned());
        let cmd0 = argv.first().cloned().unwrap_or_default();
        let program = target
            .and_then(|t| mapped_program(t, &cmd0))
            .or_else(|| search(&cmd0, path))
            .or_else(|| etcdutl_stand_in(image, &cmd0, path))
            .ok_or_else(|| {
                ResolveError(format!(
                    "image {image:?}: command {cmd0:?} is not covered by the image map and not \
                     found on the host PATH"
                ))
            })?;
        Ok(Resolved {
            program,
            argv,
            path_prefix,
            image_id,
        })
    }
}

/// The CrateDB stand-in's binary ([`find_standin`] for [`CRATEDB_STANDIN`]).
pub fn find_cratedb_standin() -> Option<PathBuf> {
    find_standin(&CRATEDB_STANDIN)
}

/// The CrateDB stand-in's directory of `crate` and `crash` ([`standin_dir`]).
pub fn cratedb_standin_dir(standin: &Path) -> Option<PathBuf> {
    standin_dir(&CRATEDB_STANDIN, standin)
}

/// A stand-in's binary: `$<env>` when set (and nothing when that is not an executable), else
/// `<bin>` next to the running executable or in its parent directory (a test binary runs from
/// `target/<profile>/deps/`, `steward` from `target/<profile>/`).
pub fn find_standin(standin: &Standin) -> Option<PathBuf> {
    find_standin_from(
        standin.bin,
        std::env::var_os(standin.env).map(PathBuf::from),
        std::env::current_exe().ok().as_deref(),
    )
}

fn find_standin_from(bin: &str, env: Option<PathBuf>, exe: Option<&Path>) -> Option<PathBuf> {
    if let Some(explicit) = env.filter(|p| !p.as_os_str().is_empty()) {
        return is_executable(&explicit).then_some(explicit);
    }
    let dir = exe?.parent()?;
    std::iter::once(dir)
        .chain(dir.parent())
        .map(|d| d.join(bin))
        .find(|p| is_executable(p))
}

/// A directory with the stand-in's command symlinks to `binary` (which dispatches on its
/// argv[0]): `<dir>/` next to it, or, where that cannot be written, a directory under the temp
/// dir named after the binary's path. Made idempotently (also by several agents at once);
/// `None` when neither can be made.
pub fn standin_dir(standin: &Standin, binary: &Path) -> Option<PathBuf> {
    let target = std::fs::canonicalize(binary).ok()?;
    let tag = target
        .to_string_lossy()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    let candidates = [
        target.parent().map(|p| p.join(standin.dir)),
        Some(std::env::temp_dir().join(format!("steward-{}-{tag:016x}", standin.dir))),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|dir| link_commands(dir, &target, standin.commands).is_ok())
}

fn link_commands(dir: &Path, target: &Path, commands: &[&str]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for name in commands {
        let link = dir.join(name);
        if std::fs::read_link(&link).is_ok_and(|t| t == target) {
            continue;
        }
        match std::fs::remove_file(&link) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if let Err(e) = std::os::unix::fs::symlink(target, &link) {
            // Another agent made it meanwhile.
            if !std::fs::read_link(&link).is_ok_and(|t| t == target) {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Whether `image` is one a stand-in runs (its repository, or that without `docker.io/`
/// and `library/`, is in a stand-in's list). A stand-in is told its image
/// (`STEWARD_STANDIN_IMAGE`): a real image carries its version, the stand-in reads it from
/// the tag.
pub fn is_standin_image(image: &str) -> bool {
    let candidates = candidates(image);
    [&CRATEDB_STANDIN, &FDB_STANDIN]
        .iter()
        .flat_map(|s| s.images.iter())
        .any(|repo| candidates.iter().take(2).any(|c| c == repo))
}

/// The repository without tag or digest.
pub fn repository(image: &str) -> &str {
    let image = image.split('@').next().unwrap_or(image);
    let last_slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[last_slash..].find(':') {
        Some(i) => &image[..last_slash + i],
        None => image,
    }
}

fn candidates(image: &str) -> Vec<String> {
    let repo = repository(image);
    let mut out = vec![repo.to_string()];
    let mut short = repo;
    for prefix in ["docker.io/", "index.docker.io/", "library/"] {
        short = short.strip_prefix(prefix).unwrap_or(short);
    }
    out.push(short.to_string());
    if let Some(last) = repo.rsplit('/').next() {
        out.push(last.to_string());
    }
    out
}

fn default_entrypoint(image: &str, target: &Path) -> Option<PathBuf> {
    if !target.is_dir() {
        return Some(target.to_path_buf());
    }
    let name = repository(image).rsplit('/').next()?;
    let name = if name == "postgresql" {
        "postgres"
    } else {
        name
    };
    let candidate = target.join(name);
    is_executable(&candidate).then_some(candidate)
}

fn mapped_program(target: &Path, cmd0: &str) -> Option<PathBuf> {
    let base = Path::new(cmd0).file_name()?;
    if target.is_dir() {
        let candidate = target.join(base);
        return is_executable(&candidate).then_some(candidate);
    }
    (target.file_name() == Some(base) || Path::new(cmd0) == target).then(|| target.to_path_buf())
}

/// etcd's images from 3.5 carry `etcdutl` (the snapshot `status` and `restore` commands moved
/// there from `etcdctl`); the release binaries installed here (`ETCD_ROOT`) have only `etcd`.
/// For an etcd image without one, `etcdutl` runs the host's `etcdctl` 3.4 (Debian), whose
/// `snapshot status` and `snapshot restore` take the same arguments; `argv[0]` stays `etcdutl`.
fn etcdutl_stand_in(image: &str, cmd0: &str, path: &str) -> Option<PathBuf> {
    let is_etcd = candidates(image)
        .iter()
        .any(|c| ETCD_IMAGES.contains(&c.as_str()));
    (is_etcd && Path::new(cmd0).file_name() == Some(std::ffi::OsStr::new("etcdutl")))
        .then(|| search("etcdctl", path))
        .flatten()
}

/// Finds `cmd` like a shell would: as given when it contains a slash, else on `path`.
pub fn search(cmd: &str, path: &str) -> Option<PathBuf> {
    if cmd.is_empty() {
        return None;
    }
    if cmd.contains('/') {
        let p = PathBuf::from(cmd);
        return (p.is_absolute() && is_executable(&p)).then_some(p);
    }
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(cmd))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The `bin` directory of the newest PostgreSQL under `root` (Debian: `/usr/lib/postgresql`)
/// that has a `postgres` executable.
pub fn newest_postgres_bin(root: &Path) -> Option<PathBuf> {
    postgres_bins(root).pop().map(|(_, p)| p)
}

/// The `bin` directory of PostgreSQL `major` under `root`, if it has a `postgres` executable.
pub fn postgres_bin(root: &Path, major: &str) -> Option<PathBuf> {
    postgres_bins(root)
        .into_iter()
        .find(|(v, _)| v == major)
        .map(|(_, p)| p)
}

/// Every PostgreSQL under `root` (one directory per major version, Debian's layout) with a
/// `postgres` executable: (version as named, `bin` directory), oldest first.
fn postgres_bins(root: &Path) -> Vec<(String, PathBuf)> {
    let Ok(dir) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut versions: Vec<(Vec<u32>, String, PathBuf)> = dir
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let version: Vec<u32> = name
                .split('.')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres")
                .exists()
                .then_some((version, name, bin))
        })
        .collect();
    versions.sort();
    versions.into_iter().map(|(_, n, p)| (n, p)).collect()
}

/// The major version an image's tag names: `16` of `postgres:16.2-bookworm`, `9.6` of
/// `postgres:9.6.24` (before 10 a major version had two parts); `None` without a tag or when
/// the tag does not start with a number (`latest`, `alpine`).
fn major_of(image: &str) -> Option<String> {
    let repo = repository(image);
    let image = image.split('@').next().unwrap_or(image);
    let tag = image.get(repo.len()..)?.strip_prefix(':')?;
    let tag = tag.strip_prefix('v').unwrap_or(tag);
    let numeric: String = tag
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let mut parts = numeric.split('.').filter(|p| !p.is_empty());
    let first = parts.next()?;
    match (first.parse::<u32>().ok()?, parts.next()) {
        (major, Some(minor)) if major < 10 => Some(format!("{major}.{minor}")),
        (major, _) => Some(major.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn repository_strips_tag_and_digest() {
        assert_eq!(
            repository("quay.io/coreos/etcd:v3.5.0"),
            "quay.io/coreos/etcd"
        );
        assert_eq!(repository("postgres@sha256:abc"), "postgres");
        assert_eq!(repository("localhost:5000/pg:15"), "localhost:5000/pg");
        assert_eq!(repository("busybox"), "busybox");
    }

    #[test]
    fn lookup_normalises_docker_hub_names_and_falls_back_to_last_segment() {
        let map = ImageMap::empty()
            .with("postgres", "/pg/bin")
            .with("etcd", "/usr/bin/etcd");
        assert_eq!(
            map.lookup("docker.io/library/postgres:15"),
            Some(Path::new("/pg/bin"))
        );
        assert_eq!(
            map.lookup("bitnami/etcd:3.5"),
            Some(Path::new("/usr/bin/etcd"))
        );
        assert_eq!(map.lookup("busybox:1.36"), None);
    }

    #[test]
    fn executable_entry_resolves_default_and_matching_commands() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("etcd");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let map = ImageMap::empty().with("quay.io/coreos/etcd", &exe);
        let r = map
            .resolve(
                "quay.io/coreos/etcd:v3.5",
                &[],
                &s(&["--name", "a"]),
                DEFAULT_PATH,
            )
            .unwrap();
        assert_eq!(r.program, exe);
        assert_eq!(r.argv[1..], s(&["--name", "a"]));
        let r = map
            .resolve(
                "quay.io/coreos/etcd",
                &s(&["/usr/local/bin/etcd"]),
                &[],
                DEFAULT_PATH,
            )
            .unwrap();
        assert_eq!(r.program, exe);
        assert_eq!(r.argv, s(&["/usr/local/bin/etcd"]));
        let r = map
            .resolve(
                "quay.io/coreos/etcd",
                &s(&["sh", "-c", "true"]),
                &[],
                DEFAULT_PATH,
            )
            .unwrap();
        assert!(r.program.ends_with("sh"));
    }

    #[test]
    fn an_etcd_image_without_etcdutl_runs_the_hosts_etcdctl_for_it() {
        let dir = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let exe = dir.path().join("etcd");
        for p in [&exe, &bin.join("etcdctl")] {
            std::fs::write(p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = bin.display().to_string();
        let map = ImageMap::empty().with("quay.io/coreos/etcd", &exe);
        let args = s(&["snapshot", "status", "/snapshots/a.db"]);
        let r = map
            .resolve(
                "quay.io/coreos/etcd:v3.5.34",
                &s(&["etcdutl"]),
                &args,
                &path,
            )
            .unwrap();
        assert_eq!(r.program, bin.join("etcdctl"));
        assert_eq!(r.argv[0], "etcdutl");
        // Only for etcd's images, and only for etcdutl.
        let other = ImageMap::empty().with("busybox", &exe);
        assert!(
            other
                .resolve("busybox", &s(&["etcdutl"]), &[], &path)
                .is_err()
        );
        assert!(
            map.resolve("quay.io/coreos/etcd", &s(&["etcdctl2"]), &[], &path)
                .is_err()
        );
    }

    #[test]
    fn directory_entry_prepends_path_and_resolves_tools() {
        let dir = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        for tool in ["postgres", "initdb"] {
            let p = dir.path().join(tool);
            std::fs::write(&p, "").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let map = ImageMap::empty().with("postgres", dir.path());
        let r = map.resolve("postgres:15", &[], &[], DEFAULT_PATH).unwrap();
        assert_eq!(r.program, dir.path().join("postgres"));
        assert_eq!(r.path_prefix.as_deref(), Some(dir.path()));
        let r = map
            .resolve("postgres:15", &s(&["initdb"]), &[], DEFAULT_PATH)
            .unwrap();
        assert_eq!(r.program, dir.path().join("initdb"));
    }

    #[test]
    fn unmapped_images_use_the_path_or_fail_naming_the_image() {
        let map = ImageMap::empty();
        let r = map
            .resolve("busybox", &s(&["sleep", "1"]), &[], DEFAULT_PATH)
            .unwrap();
        assert!(r.program.ends_with("sleep"));
        let e = map
            .resolve("busybox:1.36", &[], &[], DEFAULT_PATH)
            .unwrap_err();
        assert!(e.0.contains("busybox:1.36"), "{e}");
        let e = map
            .resolve("acme/app", &s(&["no-such-binary-xyz"]), &[], DEFAULT_PATH)
            .unwrap_err();
        assert!(
            e.0.contains("acme/app") && e.0.contains("no-such-binary-xyz"),
            "{e}"
        );
    }

    fn touch_executable(path: &Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn defaults_map_the_exporter_images_to_the_installed_exporter() {
        let dir = tempfile::tempdir().unwrap();
        let exporter = dir.path().join("prometheus-postgres-exporter");
        touch_executable(&exporter);
        let pg_root = dir.path().join("postgresql");
        touch_executable(&pg_root.join("15/bin/postgres"));
        let map = ImageMap::defaults_from(&pg_root, &exporter, None, None);
        for image in [
            "quay.io/prometheuscommunity/postgres-exporter:v0.15.0",
            "prometheuscommunity/postgres-exporter:v0.15.0",
            "docker.io/prometheuscommunity/postgres-exporter",
            "wrouesnel/postgres_exporter:v0.8.0",
        ] {
            let r = map
                .resolve(
                    image,
                    &[],
                    &s(&["--web.listen-address=127.1.0.7:9187"]),
                    DEFAULT_PATH,
                )
                .unwrap();
            assert_eq!(r.program, exporter, "{image}");
            assert_eq!(
                r.argv,
                [
                    exporter.display().to_string(),
                    "--web.listen-address=127.1.0.7:9187".to_string()
                ],
                "{image}"
            );
            assert_eq!(r.path_prefix, None, "{image}");
            assert_eq!(
                r.image_id,
                format!("steward-node://{}", exporter.display()),
                "{image}"
            );
        }
        // The exporter entries do not disturb PostgreSQL's.
        assert_eq!(
            map.lookup("postgres:15"),
            Some(pg_root.join("15/bin").as_path())
        );
    }

    #[test]
    fn tagged_postgres_images_run_their_own_major_version() {
        let dir = tempfile::tempdir().unwrap();
        let pg_root = dir.path().join("postgresql");
        touch_executable(&pg_root.join("15/bin/postgres"));
        touch_executable(&pg_root.join("16/bin/postgres"));
        let map = ImageMap::defaults_from(&pg_root, &dir.path().join("missing"), None, None);
        let (v15, v16) = (pg_root.join("15/bin"), pg_root.join("16/bin"));
        assert_eq!(map.lookup("postgres:15"), Some(v15.as_path()));
        assert_eq!(
            map.lookup("docker.io/library/postgres:15.8-bookworm"),
            Some(v15.as_path())
        );
        assert_eq!(map.lookup("postgres:16"), Some(v16.as_path()));
        // Untagged, or a tag without a version: the newest.
        assert_eq!(map.lookup("postgres"), Some(v16.as_path()));
        assert_eq!(map.lookup("postgres:latest"), Some(v16.as_path()));
        // A version the node does not have is an error naming what it has, not another version.
        assert_eq!(map.lookup("postgres:17"), None);
        let e = map
            .resolve("postgres:17", &[], &[], DEFAULT_PATH)
            .unwrap_err();
        assert!(
            e.0.contains("version 17 of postgres is not installed on this node (it has 15, 16)"),
            "{e}"
        );
        let ok = map.resolve("postgres:15", &[], &[], DEFAULT_PATH).unwrap();
        assert_eq!(ok.program, v15.join("postgres"));
        assert_eq!(major_of("postgres:9.6.24"), Some("9.6".into()));
        assert_eq!(major_of("localhost:5000/postgres"), None);
        assert_eq!(major_of("postgres:16@sha256:abc"), Some("16".into()));
        assert_eq!(major_of("quay.io/coreos/etcd:v3.5.34"), Some("3.5".into()));
    }

    #[test]
    fn tagged_etcd_images_run_their_own_minor_version() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("etcd");
        touch_executable(&root.join("3.5/bin/etcd"));
        touch_executable(&root.join("3.6/bin/etcd"));
        touch_executable(&root.join("notes/bin/etcd"));
        let bins = etcd_bins(&root, &dir.path().join("missing"));
        assert_eq!(
            bins,
            [
                ("3.5".to_owned(), root.join("3.5/bin/etcd")),
                ("3.6".to_owned(), root.join("3.6/bin/etcd"))
            ]
        );
    }

    #[test]
    fn defaults_leave_the_exporter_images_unmapped_without_the_exporter() {
        let dir = tempfile::tempdir().unwrap();
        let pg_root = dir.path().join("postgresql");
        touch_executable(&pg_root.join("15/bin/postgres"));
        let not_executable = dir.path().join("prometheus-postgres-exporter");
        std::fs::write(&not_executable, "").unwrap();
        for exporter in [dir.path().join("missing"), not_executable] {
            let map = ImageMap::defaults_from(&pg_root, &exporter, None, None);
            let image = "quay.io/prometheuscommunity/postgres-exporter:v0.15.0";
            // Not even through the `postgres` entry: the last segment is `postgres-exporter`.
            assert_eq!(map.lookup(image), None);
            let e = map.resolve(image, &[], &[], DEFAULT_PATH).unwrap_err();
            assert!(e.0.contains(image), "{e}");
        }
    }

    #[test]
    fn defaults_pick_the_newest_postgres_with_a_server() {
        let dir = tempfile::tempdir().unwrap();
        let pg_root = dir.path().join("postgresql");
        touch_executable(&pg_root.join("13/bin/postgres"));
        touch_executable(&pg_root.join("15/bin/postgres"));
        touch_executable(&pg_root.join("9.6/bin/postgres"));
        std::fs::create_dir_all(pg_root.join("16/bin")).unwrap();
        std::fs::create_dir_all(pg_root.join("common/bin")).unwrap();
        let map = ImageMap::defaults_from(&pg_root, &dir.path().join("missing"), None, None);
        let bin = pg_root.join("15/bin");
        assert_eq!(map.lookup("postgres:15"), Some(bin.as_path()));
        assert_eq!(map.lookup("postgresql"), Some(bin.as_path()));
        assert_eq!(map.lookup("etcd"), Some(Path::new("/usr/bin/etcd")));
        let empty = ImageMap::defaults_from(
            &dir.path().join("none"),
            &dir.path().join("missing"),
            None,
            None,
        );
        assert_eq!(empty.lookup("postgres"), None);
    }

    #[test]
    fn cratedb_images_map_to_the_standin_as_crate_and_crash() {
        let dir = tempfile::tempdir().unwrap();
        let standin = dir.path().join("target/debug").join(CRATEDB_STANDIN_BIN);
        touch_executable(&standin);
        let image_dir = cratedb_standin_dir(&standin).unwrap();
        assert_eq!(
            image_dir,
            standin.parent().unwrap().join(CRATEDB_STANDIN.dir)
        );
        let canonical = std::fs::canonicalize(&standin).unwrap();
        for c in CRATEDB_STANDIN.commands {
            assert_eq!(std::fs::read_link(image_dir.join(c)).unwrap(), canonical);
        }
        // Idempotent: a second agent finds the links in place.
        assert_eq!(cratedb_standin_dir(&standin), Some(image_dir.clone()));

        let map = ImageMap::defaults_from(
            &dir.path().join("none"),
            &dir.path().join("missing"),
            Some(&image_dir),
            None,
        );
        for image in [
            "crate",
            "crate:5.10.1",
            "crate/crate:5.10",
            "docker.io/crate",
            "docker.io/crate:4.8.4",
            "docker.io/crate/crate:5.10",
            "docker.io/library/crate:5.10",
            "crate.io/crate:5.10",
        ] {
            let r = map
                .resolve(
                    image,
                    &s(&["crate"]),
                    &s(&["-Cnode.name=crate-0", "-Cnetwork.host=127.1.0.7"]),
                    DEFAULT_PATH,
                )
                .unwrap();
            assert_eq!(r.program, image_dir.join("crate"), "{image}");
            assert_eq!(
                r.argv,
                s(&["crate", "-Cnode.name=crate-0", "-Cnetwork.host=127.1.0.7"]),
                "{image}"
            );
            assert_eq!(
                r.path_prefix.as_deref(),
                Some(image_dir.as_path()),
                "{image}"
            );
            // Without a command the image's entrypoint is the server.
            let r = map.resolve(image, &[], &[], DEFAULT_PATH).unwrap();
            assert_eq!(r.program, image_dir.join("crate"), "{image}");
        }
        // `kubectl exec … crash` finds the shell on the container's PATH.
        let path = format!("{}:{DEFAULT_PATH}", image_dir.display());
        assert_eq!(search("crash", &path), Some(image_dir.join("crash")));
        assert_eq!(map.lookup("cratedb/other"), None);
    }

    #[test]
    fn without_the_standin_crate_images_do_not_resolve() {
        let dir = tempfile::tempdir().unwrap();
        let map = ImageMap::defaults_from(
            &dir.path().join("none"),
            &dir.path().join("missing"),
            None,
            None,
        );
        assert_eq!(map.lookup("crate:5.10"), None);
        let e = map
            .resolve("crate:5.10", &[], &[], DEFAULT_PATH)
            .unwrap_err();
        assert!(e.0.contains("crate:5.10"), "{e}");
        // A directory without both commands is not used.
        let half = dir.path().join("half");
        touch_executable(&half.join("crate"));
        let map = ImageMap::defaults_from(
            &dir.path().join("none"),
            &dir.path().join("missing"),
            Some(&half),
            None,
        );
        assert_eq!(map.lookup("crate"), None);
    }

    #[test]
    fn the_standin_is_found_by_env_or_next_to_the_executable() {
        let dir = tempfile::tempdir().unwrap();
        let debug = dir.path().join("target/debug");
        let standin = debug.join(CRATEDB_STANDIN_BIN);
        touch_executable(&standin);
        // `steward` in target/debug, an integration test in target/debug/deps.
        let steward = debug.join("steward");
        let test = debug.join("deps/e2e-0123abcd");
        assert_eq!(
            find_standin_from(CRATEDB_STANDIN_BIN, None, Some(&steward)),
            Some(standin.clone())
        );
        assert_eq!(
            find_standin_from(CRATEDB_STANDIN_BIN, None, Some(&test)),
            Some(standin.clone())
        );
        assert_eq!(
            find_standin_from(
                CRATEDB_STANDIN_BIN,
                None,
                Some(&dir.path().join("elsewhere/bin/x"))
            ),
            None
        );
        // The variable wins, and a wrong one finds nothing rather than something else.
        let other = dir.path().join("opt/standin");
        touch_executable(&other);
        assert_eq!(
            find_standin_from(CRATEDB_STANDIN_BIN, Some(other.clone()), Some(&steward)),
            Some(other)
        );
        assert_eq!(
            find_standin_from(
                CRATEDB_STANDIN_BIN,
                Some(dir.path().join("nope")),
                Some(&steward)
            ),
            None
        );
        assert_eq!(
            find_standin_from(CRATEDB_STANDIN_BIN, Some(PathBuf::new()), Some(&steward)),
            Some(standin)
        );
    }

    #[test]
    fn stand_in_images_are_known_by_repository() {
        assert!(is_standin_image(
            "foundationdb/fdb-kubernetes-monitor:7.3.43"
        ));
        assert!(is_standin_image(
            "docker.io/foundationdb/foundationdb:7.1.57"
        ));
        assert!(is_standin_image("crate:5.9"));
        assert!(!is_standin_image("postgres:15"));
        assert!(!is_standin_image(
            "example.com/other/fdb-kubernetes-monitor:7.1.57"
        ));
    }

    #[test]
    fn foundationdb_images_map_to_the_fdb_standin_as_its_tools() {
        let dir = tempfile::tempdir().unwrap();
        let standin = dir.path().join("target/debug").join(FDB_STANDIN.bin);
        touch_executable(&standin);
        let image_dir = standin_dir(&FDB_STANDIN, &standin).unwrap();
        assert_eq!(image_dir, standin.parent().unwrap().join(FDB_STANDIN.dir));
        let canonical = std::fs::canonicalize(&standin).unwrap();
        for c in FDB_STANDIN.commands {
            assert_eq!(std::fs::read_link(image_dir.join(c)).unwrap(), canonical);
        }
        assert_eq!(standin_dir(&FDB_STANDIN, &standin), Some(image_dir.clone()));
        let map = ImageMap::defaults_from(
            &dir.path().join("none"),
            &dir.path().join("missing"),
            None,
            Some(&image_dir),
        );
        for image in [
            "foundationdb/fdb-kubernetes-monitor:7.1.57",
            "docker.io/foundationdb/fdb-kubernetes-monitor:7.3.43",
            "foundationdb/foundationdb:7.1.57",
        ] {
            let r = map
                .resolve(
                    image,
                    &s(&["fdb-kubernetes-monitor"]),
                    &s(&["--input-dir", "/var/dynamic-conf"]),
                    DEFAULT_PATH,
                )
                .unwrap();
            assert_eq!(
                r.program,
                image_dir.join("fdb-kubernetes-monitor"),
                "{image}"
            );
            assert_eq!(r.path_prefix.as_deref(), Some(image_dir.as_path()));
        }
        let path = format!("{}:{DEFAULT_PATH}", image_dir.display());
        for tool in [
            "fdbcli",
            "fdbbackup",
            "fdbrestore",
            "backup_agent",
            "fdbserver",
        ] {
            assert_eq!(search(tool, &path), Some(image_dir.join(tool)));
        }
        // The CrateDB images stay unmapped without their stand-in, and a directory missing
        // a tool is not used.
        assert_eq!(map.lookup("crate"), None);
        let half = dir.path().join("half");
        touch_executable(&half.join("fdbserver"));
        let map = ImageMap::defaults_from(
            &dir.path().join("none"),
            &dir.path().join("missing"),
            None,
            Some(&half),
        );
        assert_eq!(map.lookup("foundationdb/foundationdb"), None);
    }

    #[test]
    fn the_fdb_standin_is_found_by_its_own_name() {
        let dir = tempfile::tempdir().unwrap();
        let debug = dir.path().join("target/debug");
        let fdb = debug.join(FDB_STANDIN.bin);
        touch_executable(&fdb);
        let test = debug.join("deps/e2e-0123abcd");
        assert_eq!(
            find_standin_from(FDB_STANDIN.bin, None, Some(&test)),
            Some(fdb)
        );
        assert_eq!(
            find_standin_from(CRATEDB_STANDIN_BIN, None, Some(&test)),
            None
        );
    }

    #[test]
    fn overrides_parse() {
        let map = ImageMap::empty().with_overrides("a=/x, b/c=/y").unwrap();
        assert_eq!(map.lookup("b/c:1"), Some(Path::new("/y")));
        assert!(ImageMap::empty().with_overrides("nonsense").is_err());
    }
}
