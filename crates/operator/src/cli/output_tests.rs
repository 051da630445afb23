#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::json;

use super::*;

fn list() -> Value {
    json!({"clusters": [
        {"engine": "postgres", "namespace": "default", "name": "pg", "available": "True", "operation": null},
        {"engine": "etcd", "namespace": "team-a", "name": "etcd-main", "available": "False", "operation": "Scale"},
    ]})
}

fn detail() -> Value {
    json!({
        "engine": "postgres", "namespace": "default", "name": "pg", "generation": 4,
        "spec": {"instances": 3, "version": "15"},
        "status": {
            "observedGeneration": 3,
            "conditions": [{"type": "Available", "status": "True", "reason": "Ready"}],
            "operation": {"kind": "Scale", "phase": "Running", "generation": 4, "step": "AddReplica",
                          "done": 1, "total": 2, "progress": "1/2", "startedAt": "2026-11-26T12:00:00Z",
                          "deadline": "2026-11-26T13:00:00Z", "message": "cloning pg-2"},
            "currentPrimary": "pg-0",
            "readyInstances": 2,
            "instances": [
                {"name": "pg-0", "role": "primary", "ready": true, "lagBytes": null, "streaming": null},
                {"name": "pg-1", "role": "replica", "ready": true, "lagBytes": 0, "streaming": true},
            ],
        },
    })
}

#[test]
fn a_cluster_list_as_a_table() {
    let text = render(&list(), Shape::ClusterList, Format::Table).unwrap();
    assert_eq!(
        text,
        "ENGINE     NAMESPACE   NAME        AVAILABLE   OPERATION\n\
         postgres   default     pg          True        -\n\
         etcd       team-a      etcd-main   False       Scale\n"
    );
    let empty = render(&json!({"clusters": []}), Shape::ClusterList, Format::Table).unwrap();
    assert_eq!(empty, "No clusters.\n");
}

#[test]
fn a_cluster_detail_as_a_table() {
    let text = render(&detail(), Shape::ClusterDetail, Format::Table).unwrap();
    for line in [
        "Name:       pg\n",
        "Engine:     postgres\n",
        "Instances:  2/3 ready\n",
        "Available:  True\n",
        "Generation: 4 (observed 3)\n",
        "Primary:    pg-0\n",
        "Operation:  Scale Running AddReplica 1/2: cloning pg-2\n",
        "INSTANCE   ROLE      READY   STREAMING   LAG (BYTES)\n",
        "pg-1       replica   true    true        0\n",
    ] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
    // A new cluster has no status yet.
    let new = json!({"engine": "etcd", "namespace": "d", "name": "e", "generation": 1,
                     "spec": {"replicas": 3}, "status": null});
    let text = render(&new, Shape::ClusterDetail, Format::Table).unwrap();
    assert!(text.contains("Instances:  -/3 ready\n"), "{text}");
    assert!(text.contains("Operation:  -\n"), "{text}");
}

#[test]
fn a_foundationdb_cluster_detail_shows_its_process_groups() {
    let c = json!({"engine": "foundationdb", "namespace": "d", "name": "f", "generation": 2,
        "spec": {"version": "7.3.43"},
        "status": {"observedGeneration": 2, "runningVersion": "7.1.57",
            "connectionString": "f:abc@127.1.0.4:4501",
            "health": {"available": true, "healthy": false, "fullReplication": true},
            "conditions": [{"type": "Available", "status": "True"}],
            "processGroups": [
                {"processGroupID": "storage-1", "processClass": "storage",
                 "faultDomain": "node-a", "addresses": ["127.1.0.4"], "conditions": []},
                {"processGroupID": "log-1", "processClass": "log", "faultDomain": "node-b",
                 "addresses": [], "conditions": [{"type": "MissingProcesses", "timestamp": 1},
                                                 {"type": "PodPending", "timestamp": 2}]}]}});
    let text = render(&c, Shape::ClusterDetail, Format::Table).unwrap();
    for line in [
        "Engine:         foundationdb\n",
        "Version:        7.3.43 (running 7.1.57)\n",
        "Process groups: 1/2 without conditions\n",
        "Health:         available, not healthy, fully replicated\n",
        "Connection:     f:abc@127.1.0.4:4501\n",
        "Available:      True\n",
        "storage-1       storage   node-a   127.1.0.4   -\n",
        "log-1           log       node-b   -           MissingProcesses,PodPending\n",
    ] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
    assert!(!text.contains("Instances"), "{text}");
}

#[test]
fn json_and_yaml_are_the_answer_as_it_came() {
    for value in [list(), detail()] {
        let text = render(&value, Shape::ClusterList, Format::Json).unwrap();
        assert!(text.ends_with('\n'));
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), value);
        let text = render(&value, Shape::ClusterDetail, Format::Yaml).unwrap();
        assert!(text.ends_with('\n'));
        assert_eq!(serde_saphyr::from_str::<Value>(&text).unwrap(), value);
    }
    let yaml = render(&list(), Shape::ClusterList, Format::Yaml).unwrap();
    assert!(yaml.contains("name: etcd-main"), "{yaml}");
    let yaml = render(&detail(), Shape::ClusterDetail, Format::Yaml).unwrap();
    assert!(yaml.contains("currentPrimary: pg-0"), "{yaml}");
}

#[test]
fn candidates_users_backups_and_version() {
    let c = json!({"primary": "pg-0", "candidates": [{"name": "pg-1", "ready": true, "streaming": true, "lagBytes": 0}]});
    assert_eq!(
        render(&c, Shape::Candidates, Format::Table).unwrap(),
        "Primary: pg-0\nCANDIDATE   READY   STREAMING   LAG (BYTES)\npg-1        true    true        0\n"
    );
    let u = json!({"users": [{"name": "app", "databases": ["app", "b"], "superuser": false,
                   "createdb": false, "secret": "pg-user-app", "secretKey": "password", "ready": null}]});
    let text = render(&u, Shape::UserList, Format::Table).unwrap();
    assert!(
        text.contains("app    app,b       false       false      pg-user-app   -"),
        "{text}"
    );
    let b = json!({"backups": [{"name": "pg-b1", "cluster": "pg", "type": "full", "method": "pgbackrest",
                   "phase": "Completed", "label": "20261126-120000F", "message": null}]});
    let text = render(&b, Shape::BackupList, Format::Table).unwrap();
    assert!(
        text.contains("pg-b1    full   pgbackrest   Completed   20261126-120000F   -"),
        "{text}"
    );
    let v = json!({"client": "0.1.0", "server": "0.1.0"});
    assert_eq!(
        render(&v, Shape::Version, Format::Table).unwrap(),
        "steward 0.1.0\nserver 0.1.0\n"
    );
    let v = json!({"client": "0.1.0", "server": null});
    assert_eq!(
        render(&v, Shape::Version, Format::Table).unwrap(),
        "steward 0.1.0\n"
    );
}

#[test]
fn a_cratedb_cluster_detail_shows_its_node_sets() {
    let c = json!({
        "engine": "cratedb", "namespace": "default", "name": "cc", "generation": 3,
        "spec": {"cluster": {"name": "cc", "version": "4.8.4"},
                 "nodes": {"master": {"replicas": 3}, "data": [{"name": "hot", "replicas": 2}]}},
        "status": {
            "observedGeneration": 3, "health": "GREEN", "masterNode": "crate-master-cc-0",
            "readyNodes": 4,
            "conditions": [{"type": "Available", "status": "True"}],
            "nodeSets": [{"name": "master", "replicas": 3, "ready": 3},
                         {"name": "hot", "replicas": 2, "ready": 1}],
        },
    });
    let text = render(&c, Shape::ClusterDetail, Format::Table).unwrap();
    for line in [
        "Engine:     cratedb\n",
        "Version:    4.8.4\n",
        "Nodes:      4/5 ready\n",
        "Health:     GREEN\n",
        "Master:     crate-master-cc-0\n",
        "Available:  True\n",
        "Generation: 3 (observed 3)\n",
        "Operation:  -\n",
        "NODE SET   WANTED   REPLICAS   READY\n",
        "master     3        3          3\n",
        "hot        2        2          1\n",
    ] {
        assert!(text.contains(line), "{line:?} missing in:\n{text}");
    }
}
