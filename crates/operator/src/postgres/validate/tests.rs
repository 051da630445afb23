//! Tests of [`validate`](super::validate), and fixtures for the builders' tests.

use super::*;
use steward_api::common::RetentionPolicy;
use steward_api::postgres::{InstanceStorage, PostgresClusterSpec, SecretKeyRef, UserOptions};

/// A stored cluster `name` in namespace `db`.
pub(crate) fn cluster(name: &str, instances: i32, version: &str) -> PostgresCluster {
    let mut c = PostgresCluster::new(name, PostgresClusterSpec::new(instances, version));
    c.metadata.namespace = Some("db".into());
    c.metadata.uid = Some("uid-1".into());
    c.metadata.generation = Some(1);
    c
}

/// The validated form of `c`, for builder tests.
pub(crate) fn validated(c: &PostgresCluster) -> ValidatedPostgresCluster {
    validate(c).unwrap()
}

pub(crate) fn user(name: &str, secret: &str) -> PostgresUser {
    PostgresUser {
        name: name.into(),
        databases: vec![format!("{name}_db")],
        password_secret: SecretKeyRef {
            name: secret.into(),
            key: "password".into(),
        },
        options: UserOptions::default(),
    }
}

fn error_of(c: &PostgresCluster) -> String {
    validate(c).unwrap_err()
}

#[test]
fn a_good_spec_validates_with_defaults_merged() {
    let mut c = cluster("demo", 3, "16");
    c.spec
        .parameters
        .insert("Shared_Buffers".into(), "256MB".into());
    c.spec.users.push(user("app", "app-password"));
    let v = validate(&c).unwrap();
    assert_eq!((v.namespace.as_str(), v.name.as_str()), ("db", "demo"));
    assert_eq!((v.instances, v.version), (3, 16));
    assert_eq!(v.image, "postgres:16");
    assert_eq!(
        v.parameters["shared_buffers"], "256MB",
        "names are lowercased"
    );
    assert_eq!(v.instance_names(), ["demo-0", "demo-1", "demo-2"]);
    assert_eq!(v.storage_for(2).size, "1Gi");
    assert_eq!(v.users.len(), 1);
}

#[test]
fn per_instance_storage_overrides_the_cluster_storage() {
    let mut c = cluster("demo", 3, "16");
    c.spec.instance_storage.push(InstanceStorage {
        ordinal: 1,
        storage: StorageSpec {
            size: "20Gi".into(),
            storage_class_name: Some("fast".into()),
            retain_on_scale_down: RetentionPolicy::Delete,
            retain_on_delete: RetentionPolicy::Retain,
        },
    });
    let v = validate(&c).unwrap();
    assert_eq!(v.storage_for(0).size, "1Gi");
    assert_eq!(v.storage_for(1).size, "20Gi");
    assert_eq!(v.storage_for(1).storage_class_name.as_deref(), Some("fast"));
    assert_eq!(v.storage_for(2), &v.storage);
}

#[test]
fn names_are_checked_so_every_child_name_is_a_dns_label() {
    let longest = "a".repeat(MAX_NAME_LEN);
    let v = validate(&cluster(&longest, 9, "16")).unwrap();
    let n = v.names();
    let instance = n.instance(8);
    for child in [
        n.applied_passwords_secret(),
        n.claim(&instance),
        n.superuser_secret(),
        n.replication_secret(),
        n.config_map(),
        n.primary_service(),
        n.replicas_service(),
        n.budget(),
        instance.clone(),
    ] {
        assert!(dns_label(&child), "{child} ({} characters)", child.len());
    }
    let err = error_of(&cluster(&"a".repeat(MAX_NAME_LEN + 1), 3, "16"));
    assert!(err.contains("at most 45 characters"), "{err}");
    assert!(error_of(&cluster("Demo", 3, "16")).contains("DNS label"));
    assert!(error_of(&cluster("9demo", 3, "16")).contains("DNS label"));
}

#[test]
fn instances_and_version_are_bounded() {
    for instances in [0, 10, -1] {
        let err = error_of(&cluster("demo", instances, "16"));
        assert!(
            err.contains(&format!(
                "instances must be between 1 and 9, got {instances}"
            )),
            "{err}"
        );
    }
    assert!(error_of(&cluster("demo", 1, "11")).contains("PostgreSQL 12 to 99"));
    assert!(error_of(&cluster("demo", 1, "16.2")).contains("not a PostgreSQL major version"));
    assert!(validate(&cluster("demo", 1, "12")).is_ok());
    let mut c = cluster("demo", 1, "16");
    c.spec.image = Some("my registry/pg".into());
    assert!(error_of(&c).contains("image"));
}

#[test]
fn every_problem_is_reported_at_once() {
    let mut c = cluster("Demo", 0, "9");
    c.spec.storage.size = "lots".into();
    c.spec.parameters.insert("port".into(), "5433".into());
    let err = error_of(&c);
    for part in [
        "name",
        "instances",
        "version",
        "storage.size",
        "parameters.port",
    ] {
        assert!(err.contains(part), "{part} missing from {err}");
    }
    assert_eq!(err.matches("; ").count(), 4, "{err}");
}

#[test]
fn parameters_steward_owns_are_refused_by_name() {
    for name in [
        "listen_addresses",
        "port",
        "hba_file",
        "config_file",
        "data_directory",
        "primary_conninfo",
        "primary_slot_name",
        "cluster_name",
        "unix_socket_directories",
        "restore_command",
        "recovery_target_timeline",
        "recovery_target_lsn",
        "include_dir",
    ] {
        let mut c = cluster("demo", 3, "16");
        c.spec.parameters.insert(name.to_uppercase(), "x".into());
        let err = error_of(&c);
        assert!(
            err.starts_with(&format!("parameters.{name} is set by Steward")),
            "{err}"
        );
    }
}

#[test]
fn parameters_replication_depends_on_are_checked() {
    let refused = [
        (
            "wal_level",
            "minimal",
            "parameters.wal_level must be replica or logical",
        ),
        ("hot_standby", "off", "parameters.hot_standby must stay on"),
        ("hot_standby", "'f'", "parameters.hot_standby must stay on"),
        ("hot_standby", "maybe", "is not a boolean"),
        (
            "full_page_writes",
            "0",
            "parameters.full_page_writes must stay on",
        ),
        (
            "max_wal_senders",
            "0",
            "parameters.max_wal_senders must be at least 4",
        ),
        (
            "max_wal_senders",
            "3",
            "parameters.max_wal_senders must be at least 4",
        ),
        ("max_wal_senders", "ten", "is not an integer"),
        ("shared_buffers", "1GB\nport = 1", "must be on one line"),
        ("bad name", "1", "is not a parameter name"),
    ];
    for (name, value, message) in refused {
        let mut c = cluster("demo", 3, "16");
        c.spec.parameters.insert(name.into(), value.into());
        let err = error_of(&c);
        assert!(err.contains(message), "{name}={value}: {err}");
    }
    let accepted = [
        ("wal_level", "logical"),
        ("hot_standby", "on"),
        ("wal_log_hints", "off"),
        ("full_page_writes", "TRUE"),
        ("max_wal_senders", "'4'"),
        ("pg_stat_statements.max", "10000"),
    ];
    for (name, value) in accepted {
        let mut c = cluster("demo", 3, "16");
        c.spec.parameters.insert(name.into(), value.into());
        assert!(validate(&c).is_ok(), "{name}={value}");
    }
    let mut c = cluster("demo", 3, "16");
    c.spec.parameters.insert("work_mem".into(), "4MB".into());
    c.spec.parameters.insert("WORK_MEM".into(), "8MB".into());
    assert!(error_of(&c).contains("parameters.work_mem is given twice"));
}

#[test]
fn users_are_checked() {
    let mut c = cluster("demo", 3, "16");
    let mut listed_twice = user("app", "s");
    listed_twice.databases = vec!["orders".into(), "orders".into(), "template1".into()];
    let mut bad_db = user("shop", "s");
    bad_db.databases = vec!["1st".into()];
    let mut bad_secret = user("audit", "Not_A_Name");
    bad_secret.password_secret.key = "pass word".into();
    bad_secret.options.connection_limit = Some(u32::MAX);
    c.spec.users = vec![
        listed_twice.clone(),
        listed_twice,
        user("steward", "s"),
        user("replicator", "s"),
        user("postgres", "s"),
        user("pg_monitor", "s"),
        user("Bad-Name", "s"),
        user("own", "demo-superuser"),
        bad_db,
        bad_secret,
    ];
    let err = error_of(&c);
    for part in [
        "users[app]: the user is listed twice",
        "users[app].databases: \"orders\" is listed twice",
        "users[app].databases: \"template1\" is a template database",
        "users[steward]: the name is reserved",
        "users[replicator]: the name is reserved",
        "users[postgres]: the name is reserved",
        "users[pg_monitor]: the name is reserved",
        "users[Bad-Name]: the name must be",
        "users[own].passwordSecret.name \"demo-superuser\" is a Secret Steward generates",
        "users[shop].databases: \"1st\" must be",
        "users[audit].passwordSecret.name \"Not_A_Name\" is not a valid Secret name",
        "users[audit].passwordSecret.key \"pass word\" is not a valid Secret key",
        "users[audit].options.connectionLimit",
    ] {
        assert!(err.contains(part), "{part:?} missing from {err}");
    }
}

#[test]
fn storage_and_instance_storage_are_checked() {
    let mut c = cluster("demo", 2, "16");
    c.spec.storage.size = "0Gi".into();
    c.spec.storage.storage_class_name = Some("Fast!".into());
    let entry = |ordinal, size: &str| InstanceStorage {
        ordinal,
        storage: StorageSpec {
            size: size.into(),
            ..StorageSpec::default()
        },
    };
    c.spec.instance_storage = vec![
        entry(1, "1.5Gi"),
        entry(1, "2Gi"),
        entry(2, "1Gi"),
        entry(-1, "1Gi"),
        entry(0, "1Gb"),
    ];
    let err = error_of(&c);
    for part in [
        "storage.size \"0Gi\" is not a storage quantity",
        "storage.storageClassName \"Fast!\"",
        "instanceStorage[1]: the ordinal is listed twice",
        "instanceStorage[2]: the ordinal must be between 0 and instances − 1 (1)",
        "instanceStorage[-1]: the ordinal must be between",
        "instanceStorage[0].storage.size \"1Gb\"",
    ] {
        assert!(err.contains(part), "{part:?} missing from {err}");
    }
    assert!(storage_quantity("500M") && storage_quantity("0.5Gi") && storage_quantity("10"));
    assert!(!storage_quantity("") && !storage_quantity("Gi") && !storage_quantity("1.Gi"));
}

#[test]
fn metrics_and_timing_are_checked() {
    let mut c = cluster("demo", 1, "16");
    c.spec.metrics = Some(MetricsSpec {
        image: String::new(),
        port: 5432,
    });
    c.spec.failover.detection_delay_seconds = 0;
    c.spec.health_gate.checks = 0;
    c.spec.health_gate.interval_seconds = 601;
    c.spec.node_label = Some(NodeLabel {
        key: String::new(),
        value: "x".into(),
    });
    let err = error_of(&c);
    for part in [
        "metrics.port must be between 1024 and 65535 and not 5432, got 5432",
        "metrics.image",
        "failover.detectionDelaySeconds",
        "healthGate.checks",
        "healthGate.intervalSeconds",
        "nodeLabel.key",
    ] {
        assert!(err.contains(part), "{part:?} missing from {err}");
    }
    c.spec = PostgresClusterSpec::new(1, "16");
    c.spec.metrics = Some(MetricsSpec {
        image: "exporter:1".into(),
        port: 80,
    });
    assert!(error_of(&c).contains("got 80"));
}

#[test]
fn booleans_follow_postgresql() {
    for (text, want) in [
        ("on", Some(true)),
        ("ON", Some(true)),
        ("t", Some(true)),
        ("y", Some(true)),
        ("1", Some(true)),
        ("off", Some(false)),
        ("of", Some(false)),
        ("fal", Some(false)),
        ("n", Some(false)),
        ("'0'", Some(false)),
        ("o", None),
        ("", None),
        ("2", None),
    ] {
        assert_eq!(parse_bool(text), want, "{text:?}");
    }
}
