//! CheckClientCompatibility — before a protocol-changing upgrade (the spec's version speaks
//! another protocol than the running version) every client must be able to follow (seed 002).
//! From the status read once per pass, `cluster.clients.supported_versions`: the clients whose
//! newest protocol (`max_protocol_clients`) is not the new version's would lose the database at
//! the bounce, so the pass stops here and names them until they are gone or carry the new
//! client library. `spec.ignoreUpgradabilityChecks` skips the check. A patch release speaks the
//! same protocol: nothing to check. Clients in the cluster's own Pods are not counted: they are
//! the tools Steward runs there (FoundationDB's operator runs them in its own Pod with every
//! client library), and they get the new library from the sidecar before the bounce.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::Error;
use crate::foundationdb::FdbPass;
use crate::foundationdb::admin::status::{DbStatus, address_ip};
use crate::foundationdb::build::protocol_compatible;
use crate::pipeline::{EventType, Outcome, SubReconciler};

/// How soon to look again while clients hold an upgrade back.
const RECHECK: Duration = Duration::from_secs(15);

/// See the module documentation.
pub struct CheckClientCompatibility;

/// (pure) The major and minor version a protocol version names (`fdb00b073000000` → 7.3: the
/// three hex digits after `fdb` and four more, as FoundationDB's operator reads them).
pub fn protocol_major_minor(protocol: &str) -> Option<(u32, u32)> {
    let digits = protocol.strip_prefix("fdb")?;
    let hex: Vec<u32> = digits
        .chars()
        .map(|c| c.to_digit(16))
        .collect::<Option<_>>()?;
    Some((*hex.get(4)?, *hex.get(5)?))
}

/// (pure) The major and minor of a release version (`7.3.43` → 7.3).
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// (pure) The clients (address and log group) whose newest protocol is not `version`'s, but
/// those at the IPs in `own` (the cluster's Pods).
pub fn unsupported_clients(db: &DbStatus, version: &str, own: &[String]) -> Vec<String> {
    let want = major_minor(version);
    let mut out: Vec<String> = db
        .cluster
        .clients
        .supported_versions
        .iter()
        .filter(|v| v.protocol_version != "Unknown")
        .filter(|v| protocol_major_minor(&v.protocol_version) != want)
        .flat_map(|v| {
            v.max_protocol_clients
                .iter()
                .filter(|c| !own.iter().any(|ip| ip == address_ip(&c.address)))
                .map(|c| {
                    format!(
                        "{} ({}, newest client {})",
                        c.address, c.log_group, v.client_version
                    )
                })
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[async_trait]
impl SubReconciler<FdbPass> for CheckClientCompatibility {
    fn name(&self) -> &'static str {
        "CheckClientCompatibility"
    }

    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, Error> {
        let spec = &pass.cluster.spec;
        if spec.ignore_upgradability_checks {
            return Ok(Outcome::Continue);
        }
        let Some(running) = pass.status.running_version.clone() else {
            return Ok(Outcome::Continue);
        };
        if protocol_compatible(&running, &spec.version) {
            return Ok(Outcome::Continue);
        }
        let version = spec.version.clone();
        let Some(db) = &pass.db else {
            return Ok(Outcome::stop(
                RECHECK,
                format!(
                    "the upgrade from {running} to {version} waits: the clients cannot be checked without the database status ({})",
                    pass.db_error.as_deref().unwrap_or("not read")
                ),
            ));
        };
        let own: Vec<String> = pass
            .status
            .process_groups
            .iter()
            .flat_map(|g| g.addresses.iter().cloned())
            .collect();
        let unsupported = unsupported_clients(db, &version, &own);
        if unsupported.is_empty() {
            return Ok(Outcome::Continue);
        }
        let message = format!(
            "IncompatibleClients: the upgrade from {running} to {version} waits for clients without a {version} client library: {} (or set spec.ignoreUpgradabilityChecks)",
            unsupported.join(", ")
        );
        pass.core.event(
            EventType::Warning,
            "IncompatibleClients",
            "CheckClientCompatibility",
            message.clone(),
        );
        Ok(Outcome::stop(RECHECK, message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_versions_name_their_release() {
        assert_eq!(protocol_major_minor("fdb00b071010000"), Some((7, 1)));
        assert_eq!(protocol_major_minor("fdb00b073000000"), Some((7, 3)));
        assert_eq!(protocol_major_minor("Unknown"), None);
    }

    #[test]
    fn clients_whose_newest_protocol_is_old_hold_the_upgrade() {
        let db: DbStatus = serde_json::from_value(serde_json::json!({"cluster": {"clients": {
        "supported_versions": [
            {"client_version": "7.1.57", "protocol_version": "fdb00b071010000",
             "connected_clients": [{"address": "10.0.0.1:1", "log_group": "default"},
                                   {"address": "10.0.0.2:1", "log_group": "app"}],
             "max_protocol_clients": [{"address": "10.0.0.2:1", "log_group": "app"}]},
            {"client_version": "7.3.43", "protocol_version": "fdb00b073000000",
             "connected_clients": [],
             "max_protocol_clients": [{"address": "10.0.0.1:1", "log_group": "default"}]}
        ]}}}))
        .unwrap();
        // 10.0.0.1 also loads 7.3 (its newest): it can follow; 10.0.0.2 cannot.
        assert_eq!(
            unsupported_clients(&db, "7.3.43", &[]),
            vec!["10.0.0.2:1 (app, newest client 7.1.57)".to_owned()]
        );
        // A tool in one of the cluster's own Pods is not an application client.
        assert!(unsupported_clients(&db, "7.3.43", &["10.0.0.2".to_owned()]).is_empty());
    }
}
