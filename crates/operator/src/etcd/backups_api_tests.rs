use steward_api::common::{Operation, OperationChange, OperationKind, TimeoutOverrides};
use steward_api::etcd::{
    EtcdBackupStatus, EtcdClusterStatus, EtcdMemberStatus, SnapshotDestination, SnapshotFile,
};

use super::*;

const STAMP: &str = "2026-11-26T10:11:12Z";

fn backup(name: &str, phase: Option<SnapshotPhase>, completed: Option<&str>) -> EtcdBackup {
    let mut b = EtcdBackup::new(
        name,
        EtcdBackupSpec {
            cluster: "kv".into(),
            destination: SnapshotDestination::default(),
            retain: None,
        },
    );
    b.status = Some(EtcdBackupStatus {
        phase,
        completion_time: completed.map(str::to_owned),
        error: (phase == Some(SnapshotPhase::Failed)).then(|| "no healthy member".to_owned()),
        ..Default::default()
    });
    b
}

fn message(e: ApiError) -> String {
    format!("{e:?}")
}

#[test]
fn names_fit_the_limits_of_what_the_engine_adds_to_them() {
    assert_eq!(backup_name("kv", STAMP), "kv-20261126101112");
    assert_eq!(restore_name("kv", STAMP), "kv-restore-20261126101112");
    let long = format!("a{}", "b".repeat(MAX_NAME_LEN - 1));
    let b = backup_name(&long, STAMP);
    assert!(
        job_name(&b).len() <= 63 && b.ends_with("-20261126101112"),
        "{b}"
    );
    let r = restore_name(&long, STAMP);
    assert!(
        r.len() <= MAX_NAME_LEN && r.ends_with("-restore-20261126101112"),
        "{r}"
    );
    assert!(r.starts_with("abbb"), "{r}");
}

#[test]
fn a_backup_is_a_full_snapshot_and_a_restore_takes_no_time_or_version() {
    for ok in [
        NewBackup::default(),
        NewBackup {
            type_: Some("full"),
            method: Some("snapshot"),
        },
    ] {
        assert!(check_backup_request(&ok).is_ok(), "{ok:?}");
    }
    for bad in [
        NewBackup {
            type_: Some("diff"),
            method: None,
        },
        NewBackup {
            type_: None,
            method: Some("pgbackrest"),
        },
    ] {
        let said = message(check_backup_request(&bad).unwrap_err());
        assert!(said.contains("400") && said.contains("snapshot"), "{said}");
    }
    assert!(
        check_restore_request(&NewRestore {
            backup: Some("kv-1"),
            ..Default::default()
        })
        .is_ok()
    );
    for bad in [
        NewRestore {
            target_time: Some(STAMP),
            ..Default::default()
        },
        NewRestore {
            version: Some(7),
            ..Default::default()
        },
    ] {
        let said = message(check_restore_request(&bad).unwrap_err());
        assert!(said.contains("as it was taken"), "{said}");
    }
}

#[test]
fn a_backup_answers_its_revision_times_size_and_why_it_failed() {
    let mut b = backup("kv-1", Some(SnapshotPhase::Completed), Some(STAMP));
    if let Some(s) = b.status.as_mut() {
        s.revision = Some(112);
        s.size_bytes = Some(20480);
        s.start_time = Some("2026-11-26T10:11:09Z".into());
        s.location = Some(SnapshotFile {
            claim: "kv-snapshots".into(),
            file: "kv-1.db".into(),
        });
    }
    let info = to_json(&backup_info(&b)).unwrap();
    assert_eq!(
        info,
        serde_json::json!({"name": "kv-1", "cluster": "kv", "type": "full", "method": "snapshot",
            "phase": "Completed", "label": "revision 112", "message": null,
            "startTime": "2026-11-26T10:11:09Z", "completionTime": STAMP, "sizeBytes": 20480})
    );
    let failed = backup_info(&backup("kv-2", Some(SnapshotPhase::Failed), None));
    assert_eq!(
        (failed.phase.as_deref(), failed.error.as_deref()),
        (Some("Failed"), Some("no healthy member"))
    );
}

#[test]
fn a_restore_takes_the_named_completed_snapshot_else_the_newest() {
    let backups = [
        backup(
            "kv-old",
            Some(SnapshotPhase::Completed),
            Some("2026-11-26T08:00:00Z"),
        ),
        backup(
            "kv-new",
            Some(SnapshotPhase::Completed),
            Some("2026-11-26T09:00:00Z"),
        ),
        backup("kv-failed", Some(SnapshotPhase::Failed), None),
        backup("kv-running", Some(SnapshotPhase::Running), None),
        backup("kv-fresh", None, None),
    ];
    assert_eq!(
        choose_backup("kv", &backups, None).unwrap().name_any(),
        "kv-new"
    );
    assert_eq!(
        choose_backup("kv", &backups, Some("kv-old"))
            .unwrap()
            .name_any(),
        "kv-old"
    );
    for (named, says) in [
        ("kv-failed", "backup kv-failed failed (no healthy member)"),
        ("kv-running", "backup kv-running is Running, not Completed"),
        ("kv-fresh", "backup kv-fresh is Pending, not Completed"),
        ("other", "kv has no backup \\\"other\\\""),
    ] {
        let said = message(choose_backup("kv", &backups, Some(named)).unwrap_err());
        assert!(said.contains("400") && said.contains(says), "{said}");
    }
    let said = message(choose_backup("kv", &backups[2..], None).unwrap_err());
    assert!(said.contains("kv has no Completed backup"), "{said}");
}

fn source() -> EtcdCluster {
    let mut spec = EtcdClusterSpec::new(3, "3.4.23");
    spec.repository = "registry.example/etcd".into();
    spec.storage.size = "2Gi".into();
    spec.storage.storage_class_name = Some("fast".into());
    spec.pod_template
        .node_selector
        .insert("disk".into(), "ssd".into());
    spec.timeouts = Some(TimeoutOverrides::default());
    let mut c = EtcdCluster::new("kv", spec);
    c.metadata.namespace = Some("team".into());
    c.metadata.labels = Some(BTreeMap::from([("team".into(), "a".into())]));
    c
}

#[test]
fn the_new_cluster_has_the_sources_shape_and_the_snapshot_as_its_data_source() {
    let new = restored_cluster(&source(), "kv-restore-20261126101112", "kv-new");
    let (from, to) = (source().spec, new.spec.clone());
    assert_eq!(
        (to.replicas, &to.version, &to.repository),
        (3, &from.version, &from.repository)
    );
    assert_eq!(
        (&to.storage, &to.pod_template),
        (&from.storage, &from.pod_template)
    );
    assert_eq!(
        to.data_source,
        Some(EtcdDataSource {
            backup: "kv-new".into()
        })
    );
    assert_eq!(to.timeouts, None, "only the cluster's shape is copied");
    assert_eq!(new.namespace().as_deref(), Some("team"));
    assert_eq!(
        new.labels(),
        &BTreeMap::from([(RESTORED_FROM.to_owned(), "kv".to_owned())])
    );
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        ..Default::default()
    }
}

fn member(name: &str, healthy: bool) -> EtcdMemberStatus {
    EtcdMemberStatus {
        name: name.into(),
        id: "1".into(),
        healthy,
        ..Default::default()
    }
}

fn operation(kind: OperationKind, phase: OperationPhase) -> Operation {
    Operation {
        kind,
        phase,
        generation: 1,
        step: "AddMember".into(),
        done: 1,
        total: 2,
        progress: "1/2".into(),
        started_at: STAMP.into(),
        deadline: STAMP.into(),
        finished_at: None,
        message: "adding member kv-restore-1".into(),
        change: OperationChange::default(),
    }
}

fn restored(status: Option<EtcdClusterStatus>) -> EtcdCluster {
    let mut c = restored_cluster(&source(), "kv-restore-1", "kv-new");
    c.status = status;
    c
}

#[test]
fn a_restore_is_read_from_the_cluster_it_made() {
    let phase = |c: &EtcdCluster, lost: bool| restore_info(c, lost);
    // Not seen by the operator yet.
    let info = phase(&restored(None), false);
    assert_eq!(
        (info.phase.as_deref(), info.cluster.as_str()),
        (Some("Pending"), "kv-restore-1")
    );
    // Waiting for a snapshot that may still come; lost for good once it failed or is gone.
    let mut waiting = EtcdClusterStatus::default();
    waiting.common.conditions = vec![condition(
        DEGRADED,
        "True",
        SNAPSHOT_NOT_READY,
        "EtcdBackup kv-new failed: no healthy member",
    )];
    let info = phase(&restored(Some(waiting.clone())), false);
    assert_eq!(info.phase.as_deref(), Some("Pending"));
    let info = phase(&restored(Some(waiting.clone())), true);
    assert_eq!(
        (info.phase.as_deref(), info.error.as_deref()),
        (
            Some("Failed"),
            Some("EtcdBackup kv-new failed: no healthy member")
        )
    );
    assert!(
        info.message
            .as_deref()
            .is_some_and(|m| m.contains("restore another snapshot of kv")),
        "{:?}",
        info.message
    );
    // Bootstrapping, then scaling: Running with the operation's step.
    let mut scaling = EtcdClusterStatus::default();
    scaling.common.operation = Some(operation(OperationKind::Scale, OperationPhase::Running));
    let info = phase(&restored(Some(scaling.clone())), false);
    assert_eq!(
        (info.phase.as_deref(), info.step.as_deref()),
        (Some("Running"), Some("Scale AddMember"))
    );
    scaling.common.operation = Some(operation(OperationKind::Scale, OperationPhase::Failed));
    let info = phase(&restored(Some(scaling)), false);
    assert_eq!(
        (info.phase.as_deref(), info.error.as_deref()),
        (Some("Failed"), Some("adding member kv-restore-1"))
    );
    // Done: Available, every member healthy, no operation.
    let mut up = EtcdClusterStatus {
        ready_members: 3,
        members: vec![
            member("kv-restore-1-0", true),
            member("kv-restore-1-1", true),
            member("kv-restore-1-2", true),
        ],
        ..Default::default()
    };
    up.common.conditions = vec![
        condition(AVAILABLE, "True", "Quorate", ""),
        condition(DEGRADED, "False", "AsExpected", ""),
    ];
    let info = phase(&restored(Some(up.clone())), true);
    assert_eq!(
        info.phase.as_deref(),
        Some("Completed"),
        "{:?}",
        info.message
    );
    // One member short or unhealthy: still Running.
    up.members[2].healthy = false;
    up.ready_members = 2;
    let info = phase(&restored(Some(up)), false);
    assert_eq!(
        (info.phase.as_deref(), info.message.as_deref()),
        (
            Some("Running"),
            Some("kv-restore-1 comes up from EtcdBackup kv-new: 2/3 members ready")
        )
    );
}
