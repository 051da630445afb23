//! The committed CRDs (and the Helm chart's copy) must equal what `steward crd` prints.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::repo_file;

#[test]
fn committed_crds_are_current() {
    let generated = steward_operator::crd::crds_yaml().unwrap();
    let regenerate = "regenerate with: cargo run -p steward-operator -- crd > deploy/crds/steward.dev.yaml \
                      && cp deploy/crds/steward.dev.yaml deploy/helm/steward/crds/";
    assert!(
        generated == repo_file("deploy/crds/steward.dev.yaml"),
        "deploy/crds is stale; {regenerate}"
    );
    assert!(
        generated == repo_file("deploy/helm/steward/crds/steward.dev.yaml"),
        "the Helm chart's CRD copy is stale; {regenerate}"
    );
}

/// Every `format` in the CRDs is one a Kubernetes API server recognises (apiextensions'
/// supported formats); any other is warned about (`unrecognized format "uint64"`) on every
/// apply of the CRDs to a real server.
#[test]
fn every_schema_format_is_one_kubernetes_knows() {
    const KNOWN: &[&str] = &[
        "int32",
        "int64",
        "float",
        "double",
        "byte",
        "date",
        "date-time",
        "datetime",
        "duration",
        "password",
        "uri",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "cidr",
        "mac",
        "uuid",
        "uuid3",
        "uuid4",
        "uuid5",
        "bsonobjectid",
        "isbn",
        "isbn10",
        "isbn13",
        "creditcard",
        "ssn",
        "hexcolor",
        "rgbcolor",
    ];
    fn formats(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(serde_json::Value::String(f)) = m.get("format") {
                    out.push(f.clone());
                }
                // `format` is also the name of a property: look inside `properties` too.
                m.values().for_each(|c| formats(c, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|c| formats(c, out)),
            _ => {}
        }
    }
    let mut seen = Vec::new();
    for crd in steward_api::crds() {
        for version in &crd.spec.versions {
            let schema = serde_json::to_value(&version.schema).unwrap();
            formats(&schema["openAPIV3Schema"], &mut seen);
        }
    }
    assert!(
        seen.iter().any(|f| f == "int64"),
        "formats are kept: {seen:?}"
    );
    let unknown: Vec<&String> = seen
        .iter()
        .filter(|f| !KNOWN.contains(&f.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "formats Kubernetes does not know: {unknown:?}"
    );
}

#[test]
fn every_kind_has_short_names_printer_columns_and_a_status_subresource() {
    for crd in steward_api::crds() {
        let name = crd.metadata.name.clone().unwrap();
        assert!(
            crd.spec
                .names
                .short_names
                .as_ref()
                .is_some_and(|s| !s.is_empty()),
            "{name}: short names"
        );
        for version in &crd.spec.versions {
            assert!(
                version
                    .additional_printer_columns
                    .as_ref()
                    .is_some_and(|c| c.len() >= 3),
                "{name}: printer columns"
            );
            assert!(
                version
                    .subresources
                    .as_ref()
                    .and_then(|s| s.status.as_ref())
                    .is_some(),
                "{name}: status subresource"
            );
        }
    }
}

#[test]
fn the_example_manifest_parses_as_an_etcd_cluster() {
    let text = repo_file("examples/etcd-cluster.yaml");
    let cluster: steward_api::etcd::EtcdCluster = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(cluster.spec.replicas, 3);
}

#[test]
fn the_etcd_backup_and_restore_examples_snapshot_and_seed_from_the_example_cluster() {
    let docs =
        steward_operator::dev::parse_manifests(&repo_file("examples/etcd-backup.yaml")).unwrap();
    let backup: steward_api::etcd::EtcdBackup = serde_json::from_value(docs[0].clone()).unwrap();
    assert_eq!(backup.spec.cluster, "example");
    let schedule: steward_api::schedule::Schedule =
        serde_json::from_value(docs[1].clone()).unwrap();
    assert_eq!(
        schedule.spec.type_,
        steward_api::schedule::ScheduleType::EtcdSnapshot
    );
    assert_eq!(schedule.spec.cluster, "example");
    steward_operator::schedule::cron::parse(&schedule.spec.schedule).unwrap();
    let restored: steward_api::etcd::EtcdCluster =
        serde_saphyr::from_str(&repo_file("examples/etcd-restore.yaml")).unwrap();
    assert_eq!(
        restored.spec.data_source.map(|d| d.backup),
        Some(backup.metadata.name.unwrap())
    );
}

#[test]
fn the_example_manifest_holds_a_valid_cratedb_cluster() {
    let docs = steward_operator::dev::parse_manifests(&repo_file("examples/cratedb-cluster.yaml"))
        .unwrap();
    let cluster = docs
        .iter()
        .find(|d| d["kind"] == "CrateCluster")
        .expect("a CrateCluster document");
    let mut cluster: steward_api::cratedb::CrateCluster =
        serde_json::from_value(cluster.clone()).unwrap();
    cluster.metadata.uid = Some("uid".into());
    let valid = steward_operator::cratedb::validate::validate(&cluster).unwrap();
    assert_eq!(valid.masters().replicas, 3);
    assert_eq!(valid.data_nodes(), 4);
    // Its two Secrets: the user's password and the license (7 nodes need one on CrateDB 4.x).
    let secrets: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "Secret")
        .filter_map(|d| d["metadata"]["name"].as_str())
        .collect();
    assert_eq!(secrets, ["crate-app-password", "crate-license"]);
}

#[test]
fn the_example_manifest_holds_a_valid_postgres_cluster() {
    let text = repo_file("examples/postgres-cluster.yaml");
    let docs = steward_operator::dev::parse_manifests(&text).unwrap();
    let cluster = docs
        .iter()
        .find(|d| d["kind"] == "PostgresCluster")
        .expect("a PostgresCluster document");
    let mut cluster: steward_api::postgres::PostgresCluster =
        serde_json::from_value(cluster.clone()).unwrap();
    assert_eq!(cluster.spec.instances, 3);
    assert_eq!(cluster.spec.users[0].password_secret.name, "app-password");
    assert!(docs.iter().any(|d| d["kind"] == "Secret"));
    cluster.metadata.uid = Some("uid".into());
    steward_operator::postgres::validate::validate(&cluster).unwrap();
}

#[test]
fn the_backups_example_holds_a_valid_postgres_cluster_with_a_repository() {
    let text = repo_file("examples/postgres-backups.yaml");
    let docs = steward_operator::dev::parse_manifests(&text).unwrap();
    let mut cluster: steward_api::postgres::PostgresCluster =
        serde_json::from_value(docs[0].clone()).unwrap();
    cluster.metadata.uid = Some("uid".into());
    let valid = steward_operator::postgres::validate::validate(&cluster).unwrap();
    let repo = valid.pgbackrest.expect("backups.pgbackrest is set");
    assert_eq!(repo.retention_full, 2);
    assert_eq!(repo.storage.size, "2Gi");
    assert_eq!(valid.parameters["archive_mode"], "on");
}

#[test]
fn the_backup_example_backs_up_the_backups_example() {
    let text = repo_file("examples/postgres-backup.yaml");
    let docs = steward_operator::dev::parse_manifests(&text).unwrap();
    let backup: steward_api::pgbackrest::PostgresBackup =
        serde_json::from_value(docs[0].clone()).unwrap();
    let cluster =
        steward_operator::dev::parse_manifests(&repo_file("examples/postgres-backups.yaml"))
            .unwrap()[0]["metadata"]["name"]
            .clone();
    assert_eq!(serde_json::json!(backup.spec.cluster), cluster);
    assert_eq!(backup.spec.type_, steward_api::pgbackrest::BackupType::Full);
}

#[test]
fn the_restore_example_restores_the_backups_example() {
    let docs = steward_operator::dev::parse_manifests(&repo_file("examples/postgres-restore.yaml"))
        .unwrap();
    let restore: steward_api::pgbackrest::PostgresRestore =
        serde_json::from_value(docs[0].clone()).unwrap();
    let cluster =
        steward_operator::dev::parse_manifests(&repo_file("examples/postgres-backups.yaml"))
            .unwrap()[0]["metadata"]["name"]
            .clone();
    assert_eq!(serde_json::json!(restore.spec.cluster), cluster);
    assert!(restore.spec.target.is_none(), "to the end of the archive");
}

#[test]
fn the_upgrade_example_upgrades_the_backups_example_to_16() {
    let docs = steward_operator::dev::parse_manifests(&repo_file("examples/postgres-upgrade.yaml"))
        .unwrap();
    let upgrade: steward_api::pgupgrade::PostgresUpgrade =
        serde_json::from_value(docs[0].clone()).unwrap();
    let cluster =
        steward_operator::dev::parse_manifests(&repo_file("examples/postgres-backups.yaml"))
            .unwrap()[0]["metadata"]["name"]
            .clone();
    assert_eq!(serde_json::json!(upgrade.spec.cluster), cluster);
    assert_eq!(upgrade.spec.to_version, "16");
}

#[test]
fn the_schedule_example_parses_and_its_expressions_are_valid() {
    let docs =
        steward_operator::dev::parse_manifests(&repo_file("examples/postgres-schedule.yaml"))
            .unwrap();
    assert_eq!(docs.len(), 2);
    for doc in docs {
        let schedule: steward_api::schedule::Schedule = serde_json::from_value(doc).unwrap();
        assert_eq!(schedule.spec.cluster, "demo-backups");
        steward_operator::schedule::cron::parse(&schedule.spec.schedule).unwrap();
    }
}

#[test]
fn the_policy_verify_and_configmap_examples_parse_and_name_the_backups_example() {
    use steward_api::schedule::{Schedule, ScheduleType};
    let parse = |f: &str| steward_operator::dev::parse_manifests(&repo_file(f)).unwrap();
    let docs = parse("examples/postgres-policy.yaml");
    assert_eq!(docs.len(), 3);
    for doc in &docs[..2] {
        let p: steward_api::policy::PostgresPolicy = serde_json::from_value(doc.clone()).unwrap();
        assert!(p.spec.sql.is_some_and(|s| !s.trim().is_empty()));
    }
    let s: Schedule = serde_json::from_value(docs[2].clone()).unwrap();
    assert_eq!(s.spec.type_, ScheduleType::Policy);
    assert_eq!(s.spec.policy.unwrap().name, "audit-tick");
    steward_operator::schedule::cron::parse(&s.spec.schedule).unwrap();

    let s: Schedule =
        serde_json::from_value(parse("examples/postgres-verify.yaml")[0].clone()).unwrap();
    assert_eq!(s.spec.type_, ScheduleType::Verify);
    assert_eq!(s.spec.cluster, "demo-backups");
    steward_operator::schedule::cron::parse(&s.spec.schedule).unwrap();

    let map: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(parse("examples/scheduler-configmap.yaml")[0].clone()).unwrap();
    let s = steward_operator::schedule::configmaps::schedule_of(&map, "steward-system").unwrap();
    assert_eq!(s.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(s.spec.cluster, "demo-backups");
    steward_operator::schedule::cron::parse(&s.spec.schedule).unwrap();
}

#[test]
fn the_foundationdb_examples_hold_a_valid_cluster_its_backup_and_a_restore() {
    let docs =
        steward_operator::dev::parse_manifests(&repo_file("examples/foundationdb-cluster.yaml"))
            .unwrap();
    let cluster: steward_api::foundationdb::FoundationDBCluster =
        serde_json::from_value(docs[0].clone()).unwrap();
    steward_operator::foundationdb::validate::validate(&cluster, None).unwrap();
    let backup: steward_api::foundationdb::FoundationDBBackup = serde_json::from_value(
        steward_operator::dev::parse_manifests(&repo_file("examples/foundationdb-backup.yaml"))
            .unwrap()[0]
            .clone(),
    )
    .unwrap();
    assert_eq!(
        backup.spec.cluster_name,
        cluster.metadata.name.clone().unwrap()
    );
    let restore: steward_api::foundationdb::FoundationDBRestore = serde_json::from_value(
        steward_operator::dev::parse_manifests(&repo_file("examples/foundationdb-restore.yaml"))
            .unwrap()[0]
            .clone(),
    )
    .unwrap();
    assert_eq!(restore.spec.backup_name, backup.metadata.name.unwrap());
    assert_eq!(
        restore.spec.destination_cluster_name,
        backup.spec.cluster_name
    );
}
