//! (pure) Snapshots: the claim they are kept on, the Job that takes one (`EtcdBackup`), the
//! containers that restore one into a new cluster's first member (`spec.dataSource`), and
//! the reading of `snapshot status`.
//!
//! Nothing here needs a shell in the etcd image (etcd's images since 3.5 are distroless):
//! `etcdctl snapshot save` writes `<file>.part` and renames it when the snapshot is whole;
//! `snapshot status` and `snapshot restore` are run by `etcdctl` up to 3.4 and by `etcdutl`
//! from 3.5 (etcd moved them there and removed them from `etcdctl` in 3.6). The two steps
//! that need a shell (removing pruned files, placing a restored data directory only when the
//! member has none) run in a `busybox` container.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use steward_api::etcd::{EtcdBackup, EtcdCluster, EtcdPeer, SnapshotFile};

use crate::etcd::build::member::{DATA_MOUNT, data_dir};
use crate::etcd::names::ClusterNames;
use crate::resources::{Labels, child_meta};

/// The component label of snapshot claims, Jobs and their Pods.
pub const SNAPSHOT_COMPONENT: &str = "snapshot";
/// The label naming the `EtcdBackup` a Job takes.
pub const BACKUP_LABEL: &str = "steward.dev/etcd-backup";
/// Where the snapshot claim is mounted.
pub const SNAPSHOT_MOUNT: &str = "/snapshots";
/// The image of the steps that need a shell.
pub const SHELL_IMAGE: &str = "busybox:1.36";
/// The Job's container whose log is the snapshot's status (one JSON line).
pub const CHECK_CONTAINER: &str = "check";
/// Where a member's restore writes before the data is placed.
const RESTORE_MOUNT: &str = "/restore";

/// The claim a backup writes to: `spec.destination.claim.name`, else `<cluster>-snapshots`.
pub fn claim_name(backup: &EtcdBackup) -> String {
    backup
        .spec
        .destination
        .claim
        .name
        .clone()
        .unwrap_or_else(|| format!("{}-snapshots", backup.spec.cluster))
}

/// The snapshot's file name on the claim.
pub fn file_name(backup: &str) -> String {
    format!("{backup}.db")
}

/// The Job taking backup `backup`.
pub fn job_name(backup: &str) -> String {
    format!("{backup}-snapshot")
}

/// The tool that reads and restores snapshot files for etcd `version`: `etcdctl` up to 3.4,
/// `etcdutl` from 3.5.
pub fn file_tool(version: &str) -> &'static str {
    let minor = version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or(0);
    if version.starts_with("3.") && minor <= 4 {
        "etcdctl"
    } else {
        "etcdutl"
    }
}

/// The snapshot claim, created when missing. It has no owner: snapshots outlive the backup
/// objects and the cluster (files are removed only by a backup's `retain`).
pub fn claim(backup: &EtcdBackup) -> PersistentVolumeClaim {
    let spec = &backup.spec.destination.claim;
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(backup)),
            namespace: backup.namespace(),
            labels: Some(Labels::new("etcd", &backup.spec.cluster, SNAPSHOT_COMPONENT).to_map()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: spec.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(spec.size.clone()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

fn snapshot_volume(name: &str, claim: &str, read_only: bool) -> Volume {
    Volume {
        name: name.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.to_owned(),
            read_only: read_only.then_some(true),
        }),
        ..Default::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

fn container(
    name: &str,
    image: String,
    command: Vec<String>,
    mounts: Vec<VolumeMount>,
) -> Container {
    Container {
        name: name.into(),
        image: Some(image),
        command: Some(command),
        env: Some(vec![EnvVar {
            name: "ETCDCTL_API".into(),
            value: Some("3".into()),
            ..Default::default()
        }]),
        volume_mounts: Some(mounts),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    }
}

/// The Job taking `backup` of `cluster` from member `endpoint` (its client URL):
/// `etcdctl snapshot save` (init container `save`), `rm -f` of the files `prune` (init
/// container `prune`, only when there are any), then `snapshot status --write-out=json`
/// (container [`CHECK_CONTAINER`]), whose log line the operator reads. Owned by the backup;
/// one attempt; the cluster's node selector and tolerations. `None` when the backup was never
/// stored.
pub fn job(
    backup: &EtcdBackup,
    cluster: &EtcdCluster,
    endpoint: &str,
    prune: &[String],
    timeout_seconds: u64,
) -> Option<Job> {
    let name = backup.metadata.name.clone()?;
    let mut labels = Labels::new("etcd", &backup.spec.cluster, SNAPSHOT_COMPONENT).to_map();
    labels.insert(BACKUP_LABEL.into(), name.clone());
    let mut metadata = child_meta(
        backup,
        job_name(&name),
        &Labels::new("etcd", &backup.spec.cluster, SNAPSHOT_COMPONENT),
        &BTreeMap::new(),
    )?;
    metadata.labels = Some(labels.clone());
    let image = format!("{}:v{}", cluster.spec.repository, cluster.spec.version);
    let path = format!("{SNAPSHOT_MOUNT}/{}", file_name(&name));
    let rw = || vec![mount("snapshots", SNAPSHOT_MOUNT, false)];
    let mut init = vec![container(
        "save",
        image.clone(),
        vec![
            "etcdctl".into(),
            format!("--endpoints={endpoint}"),
            "--dial-timeout=10s".into(),
            format!("--command-timeout={timeout_seconds}s"),
            "snapshot".into(),
            "save".into(),
            path.clone(),
        ],
        rw(),
    )];
    if !prune.is_empty() {
        let mut rm = vec!["rm".to_owned(), "-f".to_owned()];
        rm.extend(prune.iter().map(|f| format!("{SNAPSHOT_MOUNT}/{f}")));
        init.push(container("prune", SHELL_IMAGE.into(), rm, rw()));
    }
    let check = container(
        CHECK_CONTAINER,
        image,
        vec![
            file_tool(&cluster.spec.version).into(),
            "snapshot".into(),
            "status".into(),
            path,
            "--write-out=json".into(),
        ],
        vec![mount("snapshots", SNAPSHOT_MOUNT, true)],
    );
    let overrides = &cluster.spec.pod_template;
    Some(Job {
        metadata,
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            active_deadline_seconds: i64::try_from(timeout_seconds).ok(),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    init_containers: Some(init),
                    containers: vec![check],
                    volumes: Some(vec![snapshot_volume(
                        "snapshots",
                        &claim_name(backup),
                        false,
                    )]),
                    node_selector: (!overrides.node_selector.is_empty())
                        .then(|| overrides.node_selector.clone()),
                    tolerations: (!overrides.tolerations.is_empty())
                        .then(|| overrides.tolerations.clone()),
                    restart_policy: Some("Never".into()),
                    enable_service_links: Some(false),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    })
}

/// What `snapshot status --write-out=json` says about a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStatus {
    /// The file's hash.
    pub hash: i64,
    /// The revision it holds.
    pub revision: i64,
    /// Keys in it.
    pub total_keys: i64,
    /// Its size in bytes.
    pub total_size: i64,
}

/// (pure) The status line in the check container's log: the last line that is a JSON object
/// with `hash`, `revision`, `totalKey` and `totalSize`. A snapshot of a cluster nobody wrote
/// to yet has revision 0 (its key bucket is empty; `totalKey` counts etcd's own keys too); a
/// negative revision or a size of 0 is not a snapshot.
pub fn parse_status(log: &str) -> Result<FileStatus, String> {
    let line = log
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| format!("no status line in the check's output: {:?}", tail(log)))?;
    let v: serde_json::Value = serde_json::from_str(line)
        .map_err(|e| format!("the status line is not JSON ({e}): {line:?}"))?;
    let field = |k: &str| {
        v.get(k)
            .and_then(serde_json::Value::as_i64)
            .ok_or_else(|| format!("the status line has no number {k:?}: {line:?}"))
    };
    let status = FileStatus {
        hash: field("hash")?,
        revision: field("revision")?,
        total_keys: field("totalKey")?,
        total_size: field("totalSize")?,
    };
    if status.revision < 0 || status.total_size <= 0 {
        return Err(format!("the file is not a snapshot: {line:?}"));
    }
    Ok(status)
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().rev().take(3).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// The init containers and volumes that restore `from` into `peer`'s data directory on its
/// first start: `snapshot restore` into an emptyDir (container `restore`: a fresh directory on
/// every Pod, so it never finds one there), then `place` copies it to the member's data
/// directory unless the member has one already (a Pod recreated after the restore keeps the
/// member's data), under a temporary name first so a half copy is never taken for data.
pub fn restore_parts(
    peer: &EtcdPeer,
    from: &SnapshotFile,
    names: &ClusterNames,
) -> (Vec<Container>, Vec<Volume>) {
    let name = peer.name_any();
    let image = format!("{}:v{}", peer.spec.repository, peer.spec.version);
    let initial = peer
        .spec
        .bootstrap
        .initial_cluster
        .iter()
        .map(|m| format!("{}={}", m.name, m.peer_url))
        .collect::<Vec<_>>()
        .join(",");
    let staged = format!("{RESTORE_MOUNT}/data");
    let restore = container(
        "restore",
        image,
        vec![
            file_tool(&peer.spec.version).into(),
            "snapshot".into(),
            "restore".into(),
            format!("/snapshot/{}", from.file),
            format!("--name={name}"),
            format!("--initial-cluster={initial}"),
            format!(
                "--initial-cluster-token={}",
                peer.spec.bootstrap.initial_cluster_token
            ),
            format!("--initial-advertise-peer-urls={}", names.peer_url(&name)),
            format!("--data-dir={staged}"),
        ],
        vec![
            mount("snapshot", "/snapshot", true),
            mount("restore", RESTORE_MOUNT, false),
        ],
    );
    let dir = data_dir(peer.spec.member_id.as_deref());
    let script = format!(
        "set -e; if [ -d '{dir}' ]; then echo 'member data present: not restored again'; \
         exit 0; fi; rm -rf '{dir}.restoring'; cp -a '{staged}' '{dir}.restoring'; \
         mv '{dir}.restoring' '{dir}'; echo 'restored {file} into {dir}'",
        file = from.file
    );
    let place = container(
        "place",
        SHELL_IMAGE.into(),
        vec!["sh".into(), "-c".into(), script],
        vec![
            mount("restore", RESTORE_MOUNT, true),
            mount("data", DATA_MOUNT, false),
        ],
    );
    let volumes = vec![
        snapshot_volume("snapshot", &from.claim, true),
        Volume {
            name: "restore".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
    ];
    (vec![restore, place], volumes)
}

/// (pure) Why `backup` cannot seed a new cluster, or the file it holds.
pub fn restorable(backup: Option<&EtcdBackup>, name: &str) -> Result<SnapshotFile, String> {
    use steward_api::etcd::SnapshotPhase;
    let Some(b) = backup else {
        return Err(format!("EtcdBackup {name} does not exist"));
    };
    let status = b.status.as_ref();
    match status.and_then(|s| s.phase) {
        Some(SnapshotPhase::Completed) => status
            .and_then(|s| s.location.clone())
            .ok_or_else(|| format!("EtcdBackup {name} is Completed but names no file")),
        Some(SnapshotPhase::Failed) => Err(format!(
            "EtcdBackup {name} failed: {}",
            status
                .and_then(|s| s.error.as_deref())
                .unwrap_or("no reason given")
        )),
        _ => Err(format!("EtcdBackup {name} is not Completed yet")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_api::etcd::{
        EtcdBackupSpec, EtcdBackupStatus, EtcdClusterSpec, SnapshotDestination, SnapshotPhase,
    };

    fn backup(name: &str) -> EtcdBackup {
        let mut b = EtcdBackup::new(
            name,
            EtcdBackupSpec {
                cluster: "demo".into(),
                destination: SnapshotDestination::default(),
                retain: None,
            },
        );
        b.metadata.namespace = Some("db".into());
        b.metadata.uid = Some("b-uid".into());
        b
    }

    #[test]
    fn the_tool_follows_etcds_move_of_the_file_commands() {
        assert_eq!(file_tool("3.4.23"), "etcdctl");
        assert_eq!(file_tool("3.5.17"), "etcdutl");
        assert_eq!(file_tool("3.6.15"), "etcdutl");
    }

    #[test]
    fn the_job_saves_prunes_then_checks_on_the_default_claim() {
        let cluster = EtcdCluster::new("demo", EtcdClusterSpec::new(3, "3.4.23"));
        let job = job(
            &backup("nightly"),
            &cluster,
            "http://demo-1.demo.db.svc.cluster.local:2379",
            &["old.db".to_owned()],
            600,
        )
        .unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("nightly-snapshot"));
        let spec = job.spec.unwrap();
        assert_eq!(spec.backoff_limit, Some(0));
        let pod = spec.template.spec.unwrap();
        let init = pod.init_containers.unwrap();
        assert_eq!(
            init.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["save", "prune"]
        );
        let save = init[0].command.clone().unwrap();
        assert!(save.contains(&"--endpoints=http://demo-1.demo.db.svc.cluster.local:2379".into()));
        assert_eq!(save.last().unwrap(), "/snapshots/nightly.db");
        assert_eq!(
            init[1].command.clone().unwrap(),
            ["rm", "-f", "/snapshots/old.db"]
        );
        let check = pod.containers[0].command.clone().unwrap();
        assert_eq!(
            check[..4],
            ["etcdctl", "snapshot", "status", "/snapshots/nightly.db"]
        );
        let claim = pod.volumes.unwrap()[0]
            .persistent_volume_claim
            .clone()
            .unwrap();
        assert_eq!(claim.claim_name, "demo-snapshots");
        // Nothing to prune: no prune container.
        let job = super::job(&backup("b"), &cluster, "http://x:2379", &[], 60).unwrap();
        let init = job
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .init_containers
            .unwrap();
        assert_eq!(init.len(), 1);
    }

    #[test]
    fn the_status_line_is_read_and_checked() {
        let log = "Deprecated: Use `etcdutl snapshot status` instead.\n\n\
                   {\"hash\":3525713837,\"revision\":1042,\"totalKey\":1009,\"totalSize\":2183168}\n";
        assert_eq!(
            parse_status(log).unwrap(),
            FileStatus {
                hash: 3_525_713_837,
                revision: 1042,
                total_keys: 1009,
                total_size: 2_183_168
            }
        );
        assert!(parse_status("Error: snapshot file has wrong size\n").is_err());
        assert!(
            parse_status("{\"hash\":1}")
                .unwrap_err()
                .contains("revision")
        );
        assert!(
            parse_status("{\"hash\":1,\"revision\":3,\"totalKey\":0,\"totalSize\":0}")
                .unwrap_err()
                .contains("not a snapshot")
        );
        // A cluster nobody wrote to (seen on etcd 3.4.23 right after its bootstrap).
        let empty = "{\"hash\":3158100383,\"revision\":0,\"totalKey\":5,\"totalSize\":20480}";
        assert_eq!(parse_status(empty).unwrap().revision, 0);
    }

    #[test]
    fn only_a_completed_backup_with_a_file_seeds_a_cluster() {
        assert!(
            restorable(None, "x")
                .unwrap_err()
                .contains("does not exist")
        );
        let mut b = backup("x");
        assert!(
            restorable(Some(&b), "x")
                .unwrap_err()
                .contains("not Completed")
        );
        b.status = Some(EtcdBackupStatus {
            phase: Some(SnapshotPhase::Failed),
            error: Some("no healthy member".into()),
            ..EtcdBackupStatus::default()
        });
        assert!(
            restorable(Some(&b), "x")
                .unwrap_err()
                .contains("no healthy member")
        );
        let file = SnapshotFile {
            claim: "demo-snapshots".into(),
            file: "x.db".into(),
        };
        b.status = Some(EtcdBackupStatus {
            phase: Some(SnapshotPhase::Completed),
            location: Some(file.clone()),
            ..EtcdBackupStatus::default()
        });
        assert_eq!(restorable(Some(&b), "x").unwrap(), file);
    }
}
