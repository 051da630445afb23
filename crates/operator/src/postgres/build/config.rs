//! (pure) The ConfigMap `<cluster>-config` every instance mounts at
//! [`CONFIG_MOUNT`](crate::postgres::names::CONFIG_MOUNT): `postgresql.conf` (the user's
//! parameters plus Steward's own), `pg_hba.conf` and `entrypoint.sh`, all written by
//! [`script`](super::script). Its [`config_hash`] goes into each instance Pod's spec hash, so a
//! change of parameters or of the entrypoint rolls the instances.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use steward_api::postgres::PostgresCluster;

use crate::postgres::build::script;
use crate::postgres::names::ENGINE;
use crate::postgres::validate::ValidatedPostgresCluster;
use crate::resources::{Labels, child_meta};

/// Key of the server configuration.
pub const POSTGRESQL_CONF: &str = "postgresql.conf";
/// Key of the client authentication rules.
pub const PG_HBA_CONF: &str = "pg_hba.conf";
/// Key of the instance entrypoint script.
pub const ENTRYPOINT: &str = "entrypoint.sh";

/// The ConfigMap `<cluster>-config`. `None` when the owner was never stored.
pub fn config_map(
    owner: &PostgresCluster,
    cluster: &ValidatedPostgresCluster,
) -> Option<ConfigMap> {
    let labels = Labels::new(ENGINE, &cluster.name, "config");
    let metadata = child_meta(
        owner,
        cluster.names().config_map(),
        &labels,
        &BTreeMap::new(),
    )?;
    let data = BTreeMap::from([
        (
            POSTGRESQL_CONF.to_owned(),
            script::postgresql_conf(&cluster.parameters),
        ),
        (PG_HBA_CONF.to_owned(), script::pg_hba_conf()),
        (ENTRYPOINT.to_owned(), script::entrypoint()),
    ]);
    Some(ConfigMap {
        metadata,
        data: Some(data),
        ..ConfigMap::default()
    })
}

/// A stable hash of the ConfigMap's `data` (and `binaryData`), ignoring its metadata: equal
/// contents give equal hashes across runs and builds.
pub fn config_hash(config: &ConfigMap) -> String {
    let text = serde_json::to_string(&(&config.data, &config.binary_data)).unwrap_or_default();
    stable_hash(&text)
}

/// FNV-1a (64 bits) as 16 hex digits, the hash etcd's member Pods use for their spec hash:
/// stable across Rust versions and processes, unlike `std`'s `DefaultHasher`. Not a security
/// hash; it only tells that something changed.
pub fn stable_hash(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::validate::tests::{cluster, validated};

    #[test]
    fn the_config_map_holds_the_three_files() {
        let mut owner = cluster("demo", 3, "16");
        owner
            .spec
            .parameters
            .insert("shared_buffers".into(), "256MB".into());
        let v = validated(&owner);
        let cm = config_map(&owner, &v).unwrap();
        assert_eq!(cm.metadata.name.as_deref(), Some("demo-config"));
        assert_eq!(
            cm.metadata.labels.as_ref().unwrap()["app.kubernetes.io/component"],
            "config"
        );
        assert_eq!(
            cm.metadata.owner_references.as_ref().unwrap()[0].name,
            "demo"
        );
        let data = cm.data.unwrap();
        let keys: Vec<&str> = data.keys().map(String::as_str).collect();
        assert_eq!(keys, [ENTRYPOINT, PG_HBA_CONF, POSTGRESQL_CONF]);
        assert_eq!(
            data[POSTGRESQL_CONF],
            script::postgresql_conf(&v.parameters)
        );
        assert_eq!(data[PG_HBA_CONF], script::pg_hba_conf());
        assert_eq!(data[ENTRYPOINT], script::entrypoint());
    }

    #[test]
    fn the_hash_follows_the_data_only() {
        let owner = cluster("demo", 3, "16");
        let a = config_map(&owner, &validated(&owner)).unwrap();
        let mut b = a.clone();
        b.metadata.labels = None;
        b.metadata.resource_version = Some("7".into());
        assert_eq!(config_hash(&a), config_hash(&b), "metadata is not hashed");
        assert_eq!(config_hash(&a).len(), 16);
        if let Some(data) = b.data.as_mut() {
            data.insert(POSTGRESQL_CONF.into(), "work_mem = '8MB'\n".into());
        }
        assert_ne!(config_hash(&a), config_hash(&b));
        assert_eq!(stable_hash(""), "cbf29ce484222325", "FNV-1a offset basis");
        assert_eq!(stable_hash("a"), "af63dc4c8601ec8c", "FNV-1a of \"a\"");
    }

    #[test]
    fn unsaved_owners_have_no_config() {
        let mut owner = cluster("demo", 1, "16");
        let v = validated(&owner);
        owner.metadata.uid = None;
        assert!(config_map(&owner, &v).is_none());
    }
}
