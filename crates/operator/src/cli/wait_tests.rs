#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::json;

use super::*;

fn accepted(action: &str, generation: i64, switchover: Option<&str>) -> Value {
    json!({"engine": "postgres", "namespace": "default", "name": "pg", "action": action,
           "generation": generation, "switchoverId": switchover, "message": "accepted"})
}

fn cluster(observed: i64, available: &str, operation: Value, last: Value) -> Value {
    json!({"engine": "postgres", "namespace": "default", "name": "pg", "generation": 5,
           "spec": {"instances": 3},
           "status": {"observedGeneration": observed,
                      "conditions": [{"type": "Available", "status": available}],
                      "operation": operation, "lastOperation": last,
                      "currentPrimary": "pg-0", "lastSwitchover": null}})
}

fn op(phase: &str, generation: i64, message: &str) -> Value {
    json!({"kind": "Scale", "phase": phase, "generation": generation, "step": "AddReplica",
           "done": 1, "total": 2, "progress": "1/2", "startedAt": "", "deadline": "",
           "message": message})
}

fn running(state: &WaitState) -> &Progress {
    match state {
        WaitState::Running(p) => p,
        other => panic!("expected Running, got {other:?}"),
    }
}

#[test]
fn a_scale_runs_until_observed_no_operation_and_available() {
    let exp = Expectation::from_answer(&accepted("scale", 5, None), None);
    assert_eq!(exp.generation, Some(5));
    // The operator has not seen the change yet (an older Available=True does not count).
    let s = judge(
        &exp,
        Some(&cluster(4, "True", Value::Null, Value::Null)),
        false,
    );
    assert!(running(&s).line.contains("observe generation 5"));
    // The operation runs: its progress is shown.
    let s = judge(
        &exp,
        Some(&cluster(
            5,
            "False",
            op("Running", 5, "cloning pg-2"),
            Value::Null,
        )),
        true,
    );
    let p = running(&s);
    assert_eq!((p.done, p.total), (1, 2));
    assert_eq!(p.line, "Scale Running AddReplica 1/2: cloning pg-2");
    // Finished, but not available yet.
    let s = judge(
        &exp,
        Some(&cluster(5, "False", Value::Null, op("Succeeded", 5, ""))),
        true,
    );
    assert!(running(&s).line.contains("Available=True"));
    // Available with the operation over, but the new member is not ready yet.
    let mut short = cluster(5, "True", Value::Null, op("Succeeded", 5, ""));
    short["status"]["readyInstances"] = json!(2);
    let s = judge(&exp, Some(&short), true);
    assert!(running(&s).line.contains("ready (2/3)"), "{s:?}");
    // Done.
    short["status"]["readyInstances"] = json!(3);
    assert_eq!(judge(&exp, Some(&short), true), WaitState::Done);
    let s = judge(
        &exp,
        Some(&cluster(5, "True", Value::Null, op("Succeeded", 5, ""))),
        true,
    );
    assert_eq!(s, WaitState::Done);
}

#[test]
fn a_failed_operation_of_this_action_fails_the_wait_with_its_message() {
    let exp = Expectation::from_answer(&accepted("restart", 5, None), None);
    let failed = op("Failed", 5, "deadline passed at AddReplica");
    for state in [
        cluster(5, "False", failed.clone(), Value::Null),
        cluster(5, "False", Value::Null, failed.clone()),
    ] {
        assert_eq!(
            judge(&exp, Some(&state), true),
            WaitState::Failed("Scale failed: deadline passed at AddReplica".into())
        );
    }
    // An older failure (an earlier generation's) is not this action's.
    let old = cluster(4, "True", Value::Null, op("Failed", 3, "old"));
    assert!(matches!(
        judge(&exp, Some(&old), false),
        WaitState::Running(_)
    ));
    // The cluster disappearing fails a non-delete wait.
    assert!(matches!(judge(&exp, None, false), WaitState::Failed(_)));
}

#[test]
fn a_failover_also_waits_for_its_request_and_the_target() {
    let exp = Expectation::from_answer(&accepted("failover", 5, Some("api-1")), Some("pg-2"));
    let mut c = cluster(5, "True", Value::Null, Value::Null);
    assert!(
        running(&judge(&exp, Some(&c), false))
            .line
            .contains("api-1")
    );
    c["status"]["lastSwitchover"] = json!("api-1");
    assert!(running(&judge(&exp, Some(&c), false)).line.contains("pg-2"));
    c["status"]["currentPrimary"] = json!("pg-2");
    assert_eq!(judge(&exp, Some(&c), false), WaitState::Done);
    // Without a target, the request being handled is enough.
    let exp = Expectation::from_answer(&accepted("failover", 5, Some("api-1")), None);
    c["status"]["currentPrimary"] = json!("pg-1");
    assert_eq!(judge(&exp, Some(&c), false), WaitState::Done);
}

#[test]
fn a_delete_is_finished_at_404_and_a_create_from_its_detail() {
    let exp = Expectation::from_answer(&accepted("delete", 6, None), None);
    assert!(exp.delete);
    let c = cluster(5, "True", Value::Null, Value::Null);
    assert!(matches!(
        judge(&exp, Some(&c), false),
        WaitState::Running(_)
    ));
    assert_eq!(judge(&exp, None, false), WaitState::Done);

    // create answers 201 with a ClusterDetail: its generation, status null at first.
    let detail = json!({"engine": "postgres", "namespace": "default", "name": "pg",
                        "generation": 1, "spec": {}, "status": null});
    let exp = Expectation::from_answer(&detail, None);
    assert_eq!((exp.generation, exp.delete), (Some(1), false));
    assert!(matches!(
        judge(&exp, Some(&detail), false),
        WaitState::Running(_)
    ));
    let mut boot = cluster(1, "False", op("Running", 1, "initdb"), Value::Null);
    boot["status"]["operation"]["kind"] = json!("Bootstrap");
    assert!(
        running(&judge(&exp, Some(&boot), true))
            .line
            .starts_with("Bootstrap Running")
    );
    let c = cluster(1, "True", Value::Null, Value::Null);
    assert_eq!(judge(&exp, Some(&c), true), WaitState::Done);
}

#[test]
fn an_answer_without_a_generation_needs_an_operation_seen_running_first() {
    let exp = Expectation::default();
    let idle = cluster(5, "True", Value::Null, Value::Null);
    assert!(
        running(&judge(&exp, Some(&idle), false))
            .line
            .contains("start")
    );
    assert_eq!(judge(&exp, Some(&idle), true), WaitState::Done);
    let failed = cluster(5, "False", Value::Null, op("Failed", 5, "no backup"));
    assert!(matches!(
        judge(&exp, Some(&failed), true),
        WaitState::Failed(_)
    ));
}

#[test]
fn a_backup_is_followed_by_its_phase() {
    let b = |phase: &str| json!({"name": "b", "cluster": "pg", "type": "full", "method": "pgbackrest", "phase": phase, "label": null, "message": "m"});
    assert!(matches!(judge_backup(&b("Running")), WaitState::Running(_)));
    assert_eq!(judge_backup(&b("Completed")), WaitState::Done);
    assert_eq!(
        judge_backup(&b("Failed")),
        WaitState::Failed("backup failed: m".into())
    );
    // Why it failed, when the engine says it apart from its message (etcd, PostgreSQL).
    let failed = json!({"name": "kv-20261126100000", "cluster": "kv", "type": "full", "method": "snapshot", "phase": "Failed", "message": "the snapshot Job failed", "error": "no healthy member to take it from"});
    assert_eq!(
        judge_backup(&failed),
        WaitState::Failed("backup failed: no healthy member to take it from".into())
    );
}

#[test]
fn an_upgrade_is_followed_by_its_phase_and_a_refusal_ends_the_wait_with_its_reason() {
    let u = |phase: &str, error: Option<&str>| json!({"name": "pg-upgrade-16", "cluster": "pg", "toVersion": "16", "phase": phase, "step": "UpgradeJob", "message": "pg_upgrade runs", "error": error});
    match judge_upgrade(&u("Running", None)) {
        WaitState::Running(p) => {
            assert_eq!(p.line, "upgrade Running (UpgradeJob): pg_upgrade runs")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(judge_upgrade(&u("Completed", None)), WaitState::Done);
    assert_eq!(
        judge_upgrade(&u("Failed", Some("16 is not newer than 16"))),
        WaitState::Failed("upgrade pg-upgrade-16 failed: 16 is not newer than 16".into())
    );
}

#[test]
fn a_restore_is_followed_by_its_phase_and_a_refusal_ends_the_wait_with_its_reason() {
    let r = |phase: &str, error: Option<&str>| json!({"name": "pg-restore-1", "cluster": "pg", "phase": phase, "step": "RestoreJob", "message": "pgbackrest restore runs", "error": error});
    match judge_restore(&r("Running", None)) {
        WaitState::Running(p) => {
            assert_eq!(
                p.line,
                "restore Running (RestoreJob): pgbackrest restore runs"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(judge_restore(&r("Completed", None)), WaitState::Done);
    assert_eq!(
        judge_restore(&r(
            "Failed",
            Some("cluster pg has no spec.backups.pgbackrest")
        )),
        WaitState::Failed(
            "restore pg-restore-1 failed: cluster pg has no spec.backups.pgbackrest".into()
        )
    );
    // A FoundationDB restore has no step and says why it failed in its message.
    let fdb = json!({"name": "db-restore-1", "cluster": "db", "phase": "Failed", "message": "the backup is not restorable"});
    assert_eq!(
        judge_restore(&fdb),
        WaitState::Failed("restore db-restore-1 failed: the backup is not restorable".into())
    );
}

#[test]
fn a_cratedb_scale_is_done_when_every_node_set_has_its_ready_nodes() {
    let exp = Expectation::from_answer(&accepted("scale", 4, None), None);
    let crate_cluster = |sets: Value, available: &str| {
        json!({"engine": "cratedb", "namespace": "default", "name": "cc", "generation": 4,
               "spec": {"cluster": {"name": "cc", "version": "4.8.4"},
                        "nodes": {"master": {"replicas": 3}, "data": [{"name": "hot", "replicas": 2}]}},
               "status": {"observedGeneration": 4, "readyNodes": 4, "image": "crate:4.8.4",
                          "conditions": [{"type": "Available", "status": available}],
                          "nodeSets": sets}})
    };
    // The StatefulSet has grown but the new node is not ready.
    let s = judge(
        &exp,
        Some(&crate_cluster(
            json!([{"name": "master", "replicas": 3, "ready": 3},
                   {"name": "hot", "replicas": 2, "ready": 1}]),
            "True",
        )),
        true,
    );
    assert!(running(&s).line.contains("node set hot"), "{s:?}");
    // Not grown yet (a shrink's StatefulSet still larger is the same: replicas must match).
    let s = judge(
        &exp,
        Some(&crate_cluster(
            json!([{"name": "master", "replicas": 3, "ready": 3},
                   {"name": "hot", "replicas": 1, "ready": 1}]),
            "True",
        )),
        true,
    );
    assert!(running(&s).line.contains("(1/2)"), "{s:?}");
    // A node set missing from status is not ready.
    let s = judge(
        &exp,
        Some(&crate_cluster(
            json!([{"name": "master", "replicas": 3, "ready": 3}]),
            "True",
        )),
        true,
    );
    assert!(running(&s).line.contains("node set hot"), "{s:?}");
    let all = json!([{"name": "master", "replicas": 3, "ready": 3},
                     {"name": "hot", "replicas": 2, "ready": 2}]);
    let s = judge(&exp, Some(&crate_cluster(all.clone(), "False")), true);
    assert!(running(&s).line.contains("Available=True"), "{s:?}");
    let mut done = crate_cluster(all, "True");
    assert_eq!(judge(&exp, Some(&done), true), WaitState::Done);
    // A restart is done once the engine has rolled out the annotation.
    done["spec"]["podTemplate"] =
        json!({"annotations": {"steward.dev/restarted-at": "2026-11-26T10:00:00Z"}});
    let s = judge(&exp, Some(&done), true);
    assert!(running(&s).line.contains("rolling restart"), "{s:?}");
    done["status"]["restartedAt"] = json!("2026-11-26T10:00:00Z");
    assert_eq!(judge(&exp, Some(&done), true), WaitState::Done);
    // Bootstrap and an upgrade: the image the nodes run.
    done["spec"]["cluster"]["version"] = json!("4.8.5");
    let s = judge(&exp, Some(&done), true);
    assert!(running(&s).line.contains("crate:4.8.5"), "{s:?}");
    done["status"]["image"] = Value::Null;
    let s = judge(&exp, Some(&done), true);
    assert!(running(&s).line.contains("bootstrap"), "{s:?}");
}
