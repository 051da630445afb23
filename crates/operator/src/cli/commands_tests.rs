#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use clap::{CommandFactory, Parser};

use super::*;

#[derive(Parser)]
struct Top {
    #[command(subcommand)]
    command: ClientCommand,
}

#[test]
fn the_arguments_are_consistent_and_parse_the_pgo_way() {
    Top::command().debug_assert();
    let parse =
        |args: &[&str]| Top::try_parse_from(std::iter::once("steward").chain(args.iter().copied()));
    let top = parse(&[
        "create",
        "cluster",
        "pg",
        "--engine",
        "postgres",
        "--instances",
        "3",
        "--wait",
        "-n",
        "team-a",
        "-o",
        "json",
    ])
    .unwrap();
    let ClientCommand::Create(CreateCommand::Cluster(a)) = top.command else {
        panic!("not create cluster");
    };
    assert_eq!(
        (
            a.name.as_str(),
            a.engine,
            a.instances,
            a.wait.wait,
            a.wait.timeout
        ),
        ("pg", Engine::Postgres, 3, true, 600)
    );
    assert_eq!(
        (a.opts.namespace.as_deref(), a.opts.output),
        (Some("team-a"), Format::Json)
    );

    // `--username` of a database-user command is the database user's.
    let top = parse(&[
        "create",
        "user",
        "pg",
        "--username",
        "app",
        "--database",
        "app",
        "--database",
        "b",
        "--api-username",
        "ops",
    ])
    .unwrap();
    let ClientCommand::Create(CreateCommand::User(a)) = top.command else {
        panic!("not create user");
    };
    assert_eq!(
        (a.user.username.as_str(), a.user.api_username.as_deref()),
        ("app", Some("ops"))
    );
    assert_eq!(a.databases, ["app", "b"]);

    assert!(parse(&["failover", "pg", "--query", "--target", "pg-2"]).is_err());
    assert!(
        parse(&[
            "restore",
            "pg",
            "--target-time",
            "2026-11-26T10:00:00Z",
            "--backup",
            "x"
        ])
        .is_err()
    );
    assert!(parse(&["show", "cluster", "-A"]).is_ok());
    let top = parse(&[
        "upgrade",
        "cluster",
        "pg",
        "--to",
        "16",
        "--without-backup",
        "--wait",
    ])
    .unwrap();
    let ClientCommand::Upgrade(UpgradeCommand::Cluster(a)) = top.command else {
        panic!("not upgrade cluster");
    };
    assert_eq!(
        (
            a.cluster.name.as_str(),
            a.to.as_str(),
            a.without_backup,
            a.wait.wait
        ),
        ("pg", "16", true, true)
    );
    assert!(
        parse(&["upgrade", "cluster", "pg"]).is_err(),
        "--to is needed"
    );
    assert!(parse(&["backup", "pg", "--type", "incr"]).is_ok());
    // No password flag exists.
    assert!(parse(&["show", "cluster", "--password", "x"]).is_err());
}

#[test]
fn set_builds_a_merge_patch() {
    let mut patch = Value::Object(Map::new());
    set_path(&mut patch, "instances=5", true).unwrap();
    set_path(&mut patch, "backups.retention.full=2", true).unwrap();
    set_path(&mut patch, "backups.enabled=true", true).unwrap();
    set_path(&mut patch, "image=postgres:15-alpine", true).unwrap();
    set_path(&mut patch, "version=15", false).unwrap();
    assert_eq!(
        patch,
        json!({"instances": 5, "backups": {"retention": {"full": 2}, "enabled": true},
               "image": "postgres:15-alpine", "version": "15"})
    );
    assert!(set_path(&mut patch, "novalue", true).is_err());
    assert!(set_path(&mut patch, "=1", true).is_err());
}

#[test]
fn cratedb_commands_name_the_node_set_and_take_extra_spec_fields() {
    let parse =
        |args: &[&str]| Top::try_parse_from(std::iter::once("steward").chain(args.iter().copied()));
    let top = parse(&[
        "scale",
        "cc",
        "--replicas",
        "2",
        "--node-set",
        "hot",
        "--wait",
    ])
    .unwrap();
    let ClientCommand::Scale(a) = top.command else {
        panic!("not scale");
    };
    assert_eq!(
        (a.instances, a.node_set.as_deref(), a.wait.wait),
        (2, Some("hot"), true)
    );
    let top = parse(&[
        "create",
        "cluster",
        "cc",
        "--engine",
        "cratedb",
        "--replicas",
        "1",
        "--node-set",
        "hot",
        "--set-string",
        "cluster.license.secretKeyRef.name=lic",
        "--set",
        "restart.greenReadings=1",
    ])
    .unwrap();
    let ClientCommand::Create(CreateCommand::Cluster(a)) = top.command else {
        panic!("not create cluster");
    };
    assert_eq!(
        (a.engine, a.instances, a.node_set.as_deref()),
        (Engine::Cratedb, 1, Some("hot"))
    );
    assert_eq!(
        (a.set.as_slice(), a.set_string.as_slice()),
        (
            ["restart.greenReadings=1".to_owned()].as_slice(),
            ["cluster.license.secretKeyRef.name=lic".to_owned()].as_slice()
        )
    );
    assert!(parse(&["show", "cluster", "cc", "--engine", "cratedb"]).is_ok());
}

#[test]
fn a_restore_into_a_new_cluster_is_followed_to_that_cluster() {
    let path = "/api/v1/namespaces/team/clusters/etcd/kv";
    // An etcd restore names the new cluster it seeds.
    assert_eq!(
        result_path(
            path,
            &json!({"name": "kv-restore-20261126101112", "cluster": "kv-restore-20261126101112", "phase": "Completed"})
        ),
        "/api/v1/namespaces/team/clusters/etcd/kv-restore-20261126101112"
    );
    // A restore in place, an upgrade, or an answer naming no cluster: the cluster asked for.
    for same in [
        json!({"name": "kv-restore-1", "cluster": "kv"}),
        json!({"name": "kv-restore-1"}),
        json!({"name": "kv-restore-1", "cluster": ""}),
    ] {
        assert_eq!(result_path(path, &same), path, "{same}");
    }
}
