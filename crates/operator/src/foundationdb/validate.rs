//! (pure) What the schema cannot check: the fault domain key, the custom parameters, the seed
//! connection string, the log processes a redundancy mode needs, and what Steward does not
//! implement yet (other fault domain keys), the process group IDs buggification names, and
//! downgrades across protocols. An invalid spec stops the pass
//! before anything is created or deleted; the message names the field.

use steward_api::foundationdb::FoundationDBCluster;

/// The only fault domain key Steward supports: the zone is the Pod's Node (from the downward
/// API's `spec.nodeName`).
pub const HOSTNAME_KEY: &str = "kubernetes.io/hostname";

/// Parameters the operator sets itself; `customParameters` may not set them.
const RESERVED: [&str; 7] = [
    "cluster_file",
    "public_address",
    "listen_address",
    "class",
    "datadir",
    "locality_instance_id",
    "locality_zoneid",
];

/// `major.minor` of a version.
pub fn minor_of(version: &str) -> Option<&str> {
    let mut dots = version.match_indices('.');
    dots.next()?;
    let (second, _) = dots.next()?;
    Some(&version[..second])
}

/// (major, minor, patch) of a release version; unreadable parts are 0.
fn release(version: &str) -> (u32, u32, u32) {
    let mut parts = version.split('.').map(|p| p.parse().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

/// Whether a connection string reads as `description:id@address,address…`.
pub fn valid_connection_string(text: &str) -> bool {
    let Some((head, list)) = text.trim().split_once('@') else {
        return false;
    };
    let Some((description, id)) = head.split_once(':') else {
        return false;
    };
    let word = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    word(description)
        && word(id)
        && list.split(',').all(|a| {
            a.rsplit_once(':')
                .is_some_and(|(ip, port)| !ip.is_empty() && port.parse::<u16>().is_ok())
        })
}

/// Checks `cluster`'s spec against what it runs (`running_version`); the message names the
/// field.
pub fn validate(
    cluster: &FoundationDBCluster,
    running_version: Option<&str>,
) -> Result<(), String> {
    let spec = &cluster.spec;
    if spec.fault_domain.key != HOSTNAME_KEY {
        return Err(format!(
            "spec.faultDomain.key {:?} is not supported yet: Steward takes a process group's zone from its Node's name ({HOSTNAME_KEY})",
            spec.fault_domain.key
        ));
    }
    let prefix = crate::foundationdb::build::prefix(cluster);
    for (field, ids) in [
        ("crashLoop", &spec.buggify.crash_loop),
        ("noSchedule", &spec.buggify.no_schedule),
    ] {
        if let Some(id) = ids.iter().find(|id| {
            *id != "*" && crate::foundationdb::build::parse_group_id(&prefix, id).is_none()
        }) {
            return Err(format!(
                "spec.buggify.{field} {id:?} is not a process group ID of this cluster ({prefix}-<class>-<n>) nor *"
            ));
        }
    }
    let replication =
        u32::try_from(spec.database_configuration.redundancy_mode.replication()).unwrap_or(3);
    if spec.process_counts.storage < replication {
        return Err(format!(
            "spec.processCounts.storage {} is fewer than redundancyMode {} keeps copies ({replication})",
            spec.process_counts.storage,
            spec.database_configuration.redundancy_mode.as_str()
        ));
    }
    if spec.process_counts.log < replication {
        return Err(format!(
            "spec.processCounts.log {} is fewer than redundancyMode {} needs transaction logs ({replication})",
            spec.process_counts.log,
            spec.database_configuration.redundancy_mode.as_str()
        ));
    }
    if let Some(logs) = spec.database_configuration.logs
        && logs > spec.process_counts.log
    {
        return Err(format!(
            "spec.databaseConfiguration.logs {logs} is more than spec.processCounts.log {}",
            spec.process_counts.log
        ));
    }
    for p in &spec.custom_parameters {
        let p = p.trim_start_matches('-');
        let Some((name, value)) = p.split_once('=') else {
            return Err(format!("spec.customParameters {p:?} is not name=value"));
        };
        if name.is_empty()
            || value.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(format!(
                "spec.customParameters {p:?}: the name is lower case letters, digits and '_', the value not empty"
            ));
        }
        if RESERVED.contains(&name) {
            return Err(format!(
                "spec.customParameters {p:?}: --{name} is set by the operator"
            ));
        }
    }
    if let Some(cs) = &spec.seed_connection_string
        && !valid_connection_string(cs)
    {
        return Err(format!(
            "spec.seedConnectionString {cs:?} is not description:id@IP:PORT,IP:PORT…"
        ));
    }
    if let Some(e) = spec
        .lock_options
        .deny_list
        .iter()
        .find(|e| e.id.trim().is_empty())
    {
        return Err(format!(
            "spec.lockOptions.denyList has an entry without an id: {e:?}"
        ));
    }
    if let Some(running) = running_version
        && minor_of(running) != minor_of(&spec.version)
        && release(&spec.version) < release(running)
    {
        return Err(format!(
            "spec.version {} is older than the running {running} and speaks another protocol: FoundationDB cannot be downgraded across minor versions",
            spec.version
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(extra: serde_json::Value) -> FoundationDBCluster {
        let mut spec =
            json!({"version": "7.1.57", "processCounts": {"storage": 3, "log": 2, "stateless": 1}});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        FoundationDBCluster::new("demo", serde_json::from_value(spec).unwrap())
    }

    #[test]
    fn buggify_names_this_clusters_process_groups_or_every_one() {
        let ok = json!({"buggify": {"crashLoop": ["demo-storage-1", "*"], "noSchedule": ["demo-log-2"]}});
        assert_eq!(validate(&cluster(ok), None), Ok(()));
        let e = validate(
            &cluster(json!({"buggify": {"crashLoop": ["demo-storage"]}})),
            None,
        )
        .unwrap_err();
        assert!(e.contains("spec.buggify.crashLoop \"demo-storage\""), "{e}");
    }

    #[test]
    fn upgrades_are_allowed_and_downgrades_across_protocols_refused() {
        assert_eq!(validate(&cluster(json!({})), None), Ok(()));
        assert_eq!(validate(&cluster(json!({})), Some("7.1.50")), Ok(()));
        assert_eq!(validate(&cluster(json!({})), Some("7.1.61")), Ok(()));
        assert_eq!(
            validate(&cluster(json!({"version": "7.3.43"})), Some("7.1.57")),
            Ok(())
        );
        let e = validate(&cluster(json!({})), Some("7.3.1")).unwrap_err();
        assert!(e.contains("spec.version 7.1.57 is older"), "{e}");
    }

    #[test]
    fn each_problem_names_its_field() {
        for (extra, field) in [
            (
                json!({"faultDomain": {"key": "topology.kubernetes.io/zone"}}),
                "spec.faultDomain.key",
            ),
            (
                json!({"buggify": {"noSchedule": ["other-storage-1"]}}),
                "spec.buggify.noSchedule",
            ),
            (
                json!({"processCounts": {"storage": 3, "log": 1, "stateless": 1}}),
                "spec.processCounts.log",
            ),
            (
                json!({"databaseConfiguration": {"redundancyMode": "triple"}, "processCounts": {"storage": 2, "log": 3, "stateless": 1}}),
                "spec.processCounts.storage",
            ),
            (
                json!({"databaseConfiguration": {"logs": 5}}),
                "spec.databaseConfiguration.logs",
            ),
            (
                json!({"customParameters": ["knob_x"]}),
                "spec.customParameters",
            ),
            (
                json!({"customParameters": ["class=log"]}),
                "spec.customParameters",
            ),
            (
                json!({"seedConnectionString": "nonsense"}),
                "spec.seedConnectionString",
            ),
            (
                json!({"lockOptions": {"denyList": [{"id": " "}]}}),
                "spec.lockOptions.denyList",
            ),
        ] {
            let e = validate(&cluster(extra.clone()), None).unwrap_err();
            assert!(e.contains(field), "{extra}: {e}");
        }
        assert!(valid_connection_string(
            "demo:abc123@10.0.0.1:4501,10.0.0.2:4501"
        ));
        assert_eq!(minor_of("7.1.57"), Some("7.1"));
    }
}
