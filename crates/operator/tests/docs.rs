//! Documentation that must stay in step with the code.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::repo_file;

/// The numbered step list and one `### Step` section per step, in pipeline order.
fn assert_pipeline_documented(heading: &str, names: &[&str]) {
    let doc = repo_file("docs/technical_design.md");
    let section = doc.split(heading).nth(1).expect("engine section");
    for (i, name) in names.iter().enumerate() {
        let last = i + 1 == names.len();
        let item = if last {
            format!("{}. {name} (again)", i + 1)
        } else {
            format!("{}. {name}", i + 1)
        };
        assert!(
            section.contains(&item),
            "docs/technical_design.md {heading:?} lacks {item:?}"
        );
    }
    let mut at = 0;
    for name in &names[..names.len() - 1] {
        let heading = format!("### {name}\n");
        let found = section[at..]
            .find(&heading)
            .unwrap_or_else(|| panic!("no section {heading:?} after offset {at}"));
        at += found + heading.len();
    }
}

#[test]
fn technical_design_lists_the_etcd_pipeline_in_order() {
    let names = steward_operator::etcd::pipeline().step_names();
    assert_pipeline_documented("## etcd cluster reconciliation", &names);
}

#[test]
fn technical_design_lists_the_etcd_backup_pipeline_in_order() {
    let names = steward_operator::etcd::backup::pipeline().step_names();
    assert_pipeline_documented("## etcd backup reconciliation", &names);
}

#[test]
fn technical_design_lists_the_postgres_pipeline_in_order() {
    let names = steward_operator::postgres::pipeline().step_names();
    assert_pipeline_documented("## PostgreSQL cluster reconciliation", &names);
}

#[test]
fn technical_design_lists_the_cratedb_pipeline_in_order() {
    let names = steward_operator::cratedb::pipeline().step_names();
    assert_pipeline_documented("## CrateDB cluster reconciliation", &names);
}

#[test]
fn technical_design_lists_the_foundationdb_pipeline_in_order() {
    let names = steward_operator::foundationdb::pipeline().step_names();
    assert_pipeline_documented("## FoundationDB cluster reconciliation", &names);
}

#[test]
fn technical_design_lists_the_foundationdb_backup_and_restore_pipelines_in_order() {
    let names = steward_operator::foundationdb::backup::pipeline().step_names();
    assert_pipeline_documented("## FoundationDB backup reconciliation", &names);
    let names = steward_operator::foundationdb::backup::restore::pipeline().step_names();
    assert_pipeline_documented("## FoundationDB restore reconciliation", &names);
}

#[test]
fn configuration_reference_lists_every_environment_variable() {
    let doc = repo_file("docs/configuration.md");
    let mut sources = String::new();
    for file in [
        "crates/operator/src/config.rs",
        "crates/operator/src/main.rs",
    ] {
        sources.push_str(&repo_file(file));
    }
    let vars: Vec<&str> = sources
        .split("env = \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(vars.len() >= 17, "found only {vars:?}");
    for var in vars {
        assert!(
            doc.contains(&format!("`{var}`")),
            "docs/configuration.md lacks {var}"
        );
    }
}

#[test]
fn the_api_doc_lists_every_permission_with_the_builtin_roles_grants() {
    use steward_operator::api::permissions::{Permission, builtin_roles};
    let doc = repo_file("docs/api.md");
    let section = doc
        .split("## Permissions")
        .nth(1)
        .expect("a Permissions section");
    let rows: Vec<&str> = section.lines().filter(|l| l.starts_with("| `")).collect();
    assert_eq!(rows.len(), Permission::ALL.len(), "one row per permission");
    let roles = builtin_roles();
    for (row, p) in rows.iter().zip(Permission::ALL) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(cells[1], format!("`{p}`"), "{row}");
        for (i, role) in roles.iter().enumerate() {
            let want = if role.permissions.contains(&p) {
                "yes"
            } else {
                "no"
            };
            assert_eq!(cells[3 + i], want, "{p} for {}: {row}", role.name);
        }
    }
}
