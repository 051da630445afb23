//! Exclusion and data movement, the data-loss latch, coordinator changes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Cluster, cli_with, holder, roles};

#[test]
fn exclusion_moves_data_before_the_process_loses_its_storage_role() {
    let c = Cluster::configured(4, 3, "double ssd");
    let x = c.others()[0].clone();
    c.ok(&format!("exclude no_wait {x}"));
    let s = c.status();
    assert_eq!(
        s["cluster"]["configuration"]["excluded_servers"][0]["address"],
        x.as_str()
    );
    assert!(
        s["cluster"]["data"]["moving_data"]["in_flight_bytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        roles(&s, &x).contains(&"storage".to_owned()),
        "{:?}",
        roles(&s, &x)
    );
    let p = s["cluster"]["processes"]
        .as_object()
        .unwrap()
        .values()
        .find(|p| p["address"] == x.as_str())
        .unwrap()
        .clone();
    assert_eq!(p["excluded"], true);
    // Waiting: bounded by --timeout…
    let (code, _, err) = c.cli(&format!("exclude {x}"), 1);
    if code != 0 {
        assert!(err.contains("timed out"), "{err}");
    }
    // …and done once the data has moved.
    let (code, out, err) = c.cli(&format!("exclude {x}"), 10);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("It is now safe to remove these machines or processes from the cluster."),
        "{out}"
    );
    let s = c.status();
    assert!(roles(&s, &x).is_empty(), "{:?}", roles(&s, &x));
    assert_eq!(s["cluster"]["data"]["moving_data"]["in_flight_bytes"], 0);
    assert_eq!(s["cluster"]["data"]["state"]["name"], "healthy");
    // Excluding by locality works the same way; include all brings them back.
    c.ok("exclude no_wait locality_instance_id:storage-zone-0");
    let s = c.status();
    assert_eq!(
        s["cluster"]["configuration"]["excluded_servers"][1]["locality"],
        "locality_instance_id:storage-zone-0"
    );
    c.ok("include all");
    let s = c.wait_for("no exclusions", 5, |s| {
        s["cluster"]["configuration"]["excluded_servers"]
            .as_array()
            .unwrap()
            .is_empty()
    });
    assert!(roles(&s, &x).contains(&"storage".to_owned()));
}

#[test]
fn an_excluded_transaction_process_loses_its_roles_at_once_in_a_recovery() {
    let c = Cluster::configured(4, 3, "single ssd logs=1");
    let s = c.status();
    let log = holder(&s, "log").unwrap();
    let cc = holder(&s, "cluster_controller").unwrap();
    let gen1 = s["cluster"]["generation"].as_u64().unwrap();
    c.ok(&format!("exclude no_wait {log}"));
    let s = c.wait_for("the log to move", 5, |s| {
        holder(s, "log").is_some_and(|l| l != log)
    });
    assert!(s["cluster"]["generation"].as_u64().unwrap() > gen1);
    if log != cc {
        // The storage role stays while the data moves.
        assert!(
            roles(&s, &log).iter().all(|r| r == "storage"),
            "{:?}",
            roles(&s, &log)
        );
    }
}

#[test]
fn losing_every_replica_latches_missing_data_but_a_drained_server_does_not_count() {
    let mut c = Cluster::configured(5, 3, "double ssd");
    c.ok("writemode on; set k v");
    let others = c.others();
    let (drained, lost) = (others[0].clone(), others[1].clone());
    let (code, out, err) = c.cli(&format!("exclude {drained}"), 10);
    assert_eq!(code, 0, "{out}{err}");
    // The drained one and one more: one zone holding data is missing, so healing.
    c.kill(&drained);
    c.kill(&lost);
    let s = c.wait_for("healing", 10, |s| {
        s["cluster"]["data"]["state"]["name"] == "healing"
    });
    assert_eq!(s["cluster"]["data"]["state"]["healthy"], false);
    assert_eq!(
        s["cluster"]["fault_tolerance"]["max_zone_failures_without_losing_data"],
        0
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(c.status()["cluster"]["data"]["state"]["name"], "healing");
    assert!(c.ok("get k").contains("`k' is `v'"));
    // A second zone holding data (a coordinator, so the quorum stays): missing data, latched.
    let third = c.coordinators[2].clone();
    c.kill(&third);
    let s = c.wait_for("missing_data", 15, |s| {
        s["cluster"]["data"]["state"]["name"] == "missing_data"
    });
    assert_eq!(s["cluster"]["data"]["state"]["healthy"], false);
    let (code, _, err) = c.cli("get k", 2);
    assert_eq!(code, 1);
    assert!(err.contains("missing_data"), "{err}");
    c.start(&lost);
    c.start(&third);
    c.wait_for("all back", 15, |s| {
        s["cluster"]["processes"].as_object().unwrap().len() == 4
    });
    assert_eq!(
        c.status()["cluster"]["data"]["state"]["name"],
        "missing_data"
    );
}

#[test]
fn a_coordinator_change_rewrites_cluster_files_and_survives_losing_an_old_coordinator() {
    let mut c = Cluster::configured(5, 3, "double ssd");
    c.ok("writemode on; set k v");
    let old_file = c.dir.path().join("old.cluster");
    std::fs::copy(&c.cluster_file, &old_file).unwrap();
    let old = std::fs::read_to_string(&c.cluster_file).unwrap();
    let all = c.addresses();
    let new: Vec<String> = all
        .iter()
        .filter(|a| **a != c.coordinators[0] && **a != c.coordinators[1])
        .cloned()
        .collect();
    assert_eq!(new.len(), 3);
    assert_eq!(
        c.ok(&format!("coordinators {}", new.join(" "))).trim(),
        "Coordination state changed"
    );
    let s = c.wait_for("the new connection string", 10, |s| {
        s["cluster"]["connection_string"]
            .as_str()
            .is_some_and(|cs| cs.ends_with(&new.join(",")))
    });
    let cs = s["cluster"]["connection_string"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(cs.starts_with("test:"), "{cs}");
    assert_ne!(cs, old.trim());
    assert_eq!(std::fs::read_to_string(&c.cluster_file).unwrap().trim(), cs);
    // Every server rewrites its cluster file.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    for srv in c.servers.values() {
        while std::fs::read_to_string(srv.dir.join("fdb.cluster"))
            .unwrap()
            .trim()
            != cs
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{} kept its cluster file",
                srv.address
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    // A client with the old file follows the old coordinators to the new string.
    let old0 = c.coordinators[0].clone();
    c.kill(&old0);
    let (code, out, err) = cli_with(&old_file, "get k", 10);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("`k' is `v'"));
    assert_eq!(std::fs::read_to_string(&old_file).unwrap().trim(), cs);
    let s = c.wait_available();
    assert_eq!(s["cluster"]["configuration"]["coordinators_count"], 3);
    assert!(c.ok("get k").contains("`k' is `v'"));
}
