use steward_api::etcd::{
    EtcdBackup, EtcdBackupSpec, EtcdBackupStatus, EtcdMemberStatus, SnapshotDestination,
    SnapshotFile, SnapshotPhase,
};

use super::*;

fn backup(name: &str, retain: Option<u32>, done: Option<&str>) -> EtcdBackup {
    let mut b = EtcdBackup::new(
        name,
        EtcdBackupSpec {
            cluster: "demo".into(),
            destination: SnapshotDestination::default(),
            retain,
        },
    );
    b.metadata.namespace = Some("db".into());
    b.metadata.uid = Some(format!("uid-{name}"));
    if let Some(t) = done {
        b.status = Some(EtcdBackupStatus {
            phase: Some(SnapshotPhase::Completed),
            completion_time: Some(t.into()),
            location: Some(SnapshotFile {
                claim: "demo-snapshots".into(),
                file: format!("{name}.db"),
            }),
            ..EtcdBackupStatus::default()
        });
    }
    b
}

#[test]
fn retention_keeps_the_newest_and_drops_only_older_ones_on_the_same_claim() {
    let others = vec![
        backup("a", None, Some("2026-12-01T00:00:00Z")),
        backup("b", None, Some("2026-12-02T00:00:00Z")),
        backup("c", None, Some("2026-12-03T00:00:00Z")),
        backup("running", None, None),
    ];
    // Running (no completion yet): everything completed is older.
    let this = backup("d", Some(2), None);
    assert_eq!(
        beyond_retention(&this, &others),
        vec![("b".into(), "b.db".into()), ("a".into(), "a.db".into())]
    );
    // Completed between b and c: c is newer and never dropped by d.
    let this = backup("d", Some(1), Some("2026-12-02T12:00:00Z"));
    let dropped: Vec<String> = beyond_retention(&this, &others)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(dropped, ["b", "a"]);
    // Without retain nothing goes; another claim's snapshots are not this claim's.
    assert!(beyond_retention(&backup("d", None, None), &others).is_empty());
    let mut elsewhere = backup("e", Some(1), None);
    elsewhere.spec.destination.claim.name = Some("other".into());
    assert!(beyond_retention(&elsewhere, &others).is_empty());
}

#[test]
fn a_snapshot_comes_from_a_healthy_follower_first() {
    let m = |name: &str, healthy: bool, leader: bool, learner: bool| EtcdMemberStatus {
        name: name.into(),
        id: "1".into(),
        healthy,
        leader,
        learner,
        ..EtcdMemberStatus::default()
    };
    let members = vec![
        m("demo-0", true, true, false),
        m("demo-1", false, false, false),
        m("demo-2", true, false, false),
        m("demo-3", true, false, true),
    ];
    assert_eq!(pick_member(&members).as_deref(), Some("demo-2"));
    assert_eq!(pick_member(&members[..2]).as_deref(), Some("demo-0"));
    assert_eq!(pick_member(&members[1..2]), None);
}

#[test]
fn one_snapshot_of_a_cluster_runs_at_a_time() {
    let mut r = backup("r", None, None);
    r.status = Some(EtcdBackupStatus {
        phase: Some(SnapshotPhase::Running),
        ..EtcdBackupStatus::default()
    });
    assert_eq!(
        running_sibling(&[backup("a", None, Some("t")), r]).as_deref(),
        Some("r")
    );
    assert_eq!(running_sibling(&[backup("a", None, Some("t"))]), None);
}
