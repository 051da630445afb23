//! Cluster formation, configuration, commits and recovery with real stand-in processes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Cluster, holder};

#[test]
fn three_servers_form_a_cluster_that_survives_losing_its_controller() {
    let mut c = Cluster::new(3, 3, "storage");
    // Before `configure new`: a controller, but no database.
    let s = c.wait_for("a controller", 15, |s| {
        s["cluster"]["recovery_state"]["name"] == "configuration_never_created"
    });
    assert_eq!(s["cluster"]["database_available"], false);
    assert_eq!(s["client"]["coordinators"]["quorum_reachable"], true);
    assert_eq!(c.ok("configure new double ssd").trim(), "Database created");
    let (code, _, err) = c.cli("configure new double ssd", 5);
    assert_eq!(code, 1);
    assert!(
        err.contains("Database already exists! To change configuration, don't say `new'"),
        "{err}"
    );
    let s = c.wait_available();
    assert_eq!(s["cluster"]["configuration"]["redundancy_mode"], "double");
    assert_eq!(s["cluster"]["configuration"]["storage_engine"], "ssd-2");
    assert_eq!(s["cluster"]["processes"].as_object().unwrap().len(), 3);
    assert_eq!(s["client"]["database_status"]["available"], true);
    assert_eq!(s["cluster"]["data"]["state"]["name"], "healthy");
    for p in s["cluster"]["processes"].as_object().unwrap().values() {
        assert_eq!(p["version"], "7.1.57");
        assert!(
            p["command_line"]
                .as_str()
                .unwrap()
                .contains("--public_address")
        );
        let roles: Vec<&str> = p["roles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["role"].as_str().unwrap())
            .collect();
        assert!(roles.contains(&"storage"), "{roles:?}");
    }
    assert_eq!(s["cluster"]["protocol_version"], "fdb00b071010000");

    // Writes need writemode; keys are escaped as fdbcli escapes them.
    let (code, _, err) = c.cli("set a b", 5);
    assert_eq!(code, 1);
    assert!(err.contains("writemode must be enabled"), "{err}");
    let out = c.ok(
        r"writemode on; set \xff\x02/org.foundationdb.kubernetes-operator/global v1; set k1 hello",
    );
    assert!(out.lines().all(|l| l.starts_with("Committed (")), "{out}");
    assert_eq!(
        c.ok(r"get \xff\x02/org.foundationdb.kubernetes-operator/global")
            .trim(),
        r"`\xff\x02/org.foundationdb.kubernetes-operator/global' is `v1'"
    );
    assert_eq!(c.ok("get nope").trim(), "`nope': not found");
    let out = c.ok("writemode on; set k2 \"two words\"; getrange k k9");
    assert!(
        out.contains("`k1' is `hello'\n`k2' is `two words'"),
        "{out}"
    );

    // Kill the controller: another process recovers the database, generation increases.
    let gen1 = s["cluster"]["generation"].as_u64().unwrap();
    let cc = holder(&s, "cluster_controller").unwrap();
    c.kill(&cc);
    let s = c.wait_for("a new controller", 15, |s| {
        s["cluster"]["database_available"] == true
            && holder(s, "cluster_controller").is_some_and(|h| h != cc)
    });
    assert!(s["cluster"]["generation"].as_u64().unwrap() > gen1);
    assert_eq!(c.ok("get k1").trim(), "`k1' is `hello'");
    assert!(
        c.ok("writemode on; clear k1; get k1")
            .contains("`k1': not found")
    );
    // The old controller comes back and rejoins without taking the data back in time.
    c.start(&cc);
    c.wait_for("three processes", 15, |s| {
        s["cluster"]["processes"]
            .as_object()
            .is_some_and(|p| p.len() == 3)
    });
    assert!(c.ok("get k2").contains("`k2' is `two words'"));
}

#[test]
fn without_a_quorum_status_json_still_prints_and_commands_time_out() {
    let mut c = Cluster::new(3, 3, "storage");
    c.wait_for("a controller", 15, |s| {
        s["cluster"]["recovery_state"]["name"].is_string()
    });
    c.ok("configure new single memory");
    c.wait_available();
    let addrs = c.addresses();
    c.kill(&addrs[0]);
    c.kill(&addrs[1]);
    let (code, out, _) = c.cli("status json", 1);
    assert_eq!(code, 0);
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["client"]["coordinators"]["quorum_reachable"], false);
    assert_eq!(s["client"]["database_status"]["available"], false);
    assert_eq!(s["client"]["messages"][0]["name"], "quorum_not_reachable");
    let (code, _, err) = c.cli("get k", 1);
    assert_eq!(code, 1);
    assert!(err.contains("timed out"), "{err}");
}

#[test]
fn versions_are_reported_and_an_incompatible_process_is_not_part_of_the_cluster() {
    let mut c = Cluster::configured(3, 3, "double ssd");
    let patch = c.add("stateless", "7.1.61");
    let other = c.add("storage", "7.3.43");
    let s = c.wait_for("both new processes", 15, |s| {
        s["cluster"]["incompatible_connections"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
            && s["cluster"]["processes"].as_object().unwrap().len() == 4
    });
    assert_eq!(
        s["cluster"]["incompatible_connections"],
        serde_json::json!([other])
    );
    let procs = s["cluster"]["processes"].as_object().unwrap();
    assert!(procs.values().all(|p| p["address"] != other.as_str()));
    let p = procs
        .values()
        .find(|p| p["address"] == patch.as_str())
        .unwrap();
    assert_eq!(p["version"], "7.1.61");
    assert_eq!(s["cluster"]["protocol_version"], "fdb00b071010000");
    // This fdbcli (7.1.57) is among the clients seen.
    let v = &s["cluster"]["clients"]["supported_versions"];
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .any(|x| x["client_version"] == "7.1.57"
                && x["protocol_version"] == "fdb00b071010000"
                && !x["connected_clients"].as_array().unwrap().is_empty()),
        "{v}"
    );
}
