//! (pure) Names, labels and paths of a PostgreSQL cluster's children. Instances are named
//! `<cluster>-<ordinal>`; an instance's Pod has that name and its claim is `<instance>-pgdata`.

use std::collections::BTreeMap;

use steward_api::postgres::InstanceRole;

use crate::resources::Labels;

/// The engine name in `app.kubernetes.io/name`.
pub const ENGINE: &str = "postgres";
/// Component label value of instance Pods and claims.
pub const INSTANCE_COMPONENT: &str = "instance";
/// Label with the instance name (on its Pod and claim).
pub const INSTANCE_LABEL: &str = "steward.dev/instance";
/// Label with the instance's role (`primary` or `replica`) on its Pod. The `-primary` Service
/// selects `primary`; only the operator changes it (the fencing rule, docs/technical_design.md).
pub const ROLE_LABEL: &str = "steward.dev/role";
pub use crate::resources::passwords::USER_PASSWORD_LABEL;
/// PostgreSQL's port.
pub const PORT: i32 = 5432;
/// The operator's own superuser.
pub const SUPERUSER: &str = "steward";
/// The streaming replication user.
pub const REPLICATION_USER: &str = "replicator";

/// Where the instance's volume is mounted.
pub const DATA_MOUNT: &str = "/var/lib/postgresql/data";
/// `PGDATA` inside the volume.
pub const PGDATA: &str = "/var/lib/postgresql/data/pgdata";
/// Where the ConfigMap (postgresql.conf, pg_hba.conf, entrypoint.sh) is mounted.
pub const CONFIG_MOUNT: &str = "/etc/steward/config";
/// Where the superuser Secret (`username`, `password`) is mounted.
pub const SUPERUSER_MOUNT: &str = "/etc/steward/superuser";
/// Where the replication Secret (`username`, `password`) is mounted.
pub const REPLICATION_MOUNT: &str = "/etc/steward/replication";

/// The label value of a role.
pub fn role_value(role: InstanceRole) -> &'static str {
    match role {
        InstanceRole::Primary => "primary",
        InstanceRole::Replica => "replica",
    }
}

/// Names of one cluster's children.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNames {
    /// Cluster name.
    pub cluster: String,
    /// Namespace.
    pub namespace: String,
    /// The generation of data claims the instances run on (`status.dataEpoch`).
    pub epoch: u32,
}

impl ClusterNames {
    /// Names for `cluster` in `namespace`, on the first generation of data claims.
    pub fn new(cluster: impl Into<String>, namespace: impl Into<String>) -> Self {
        Self {
            cluster: cluster.into(),
            namespace: namespace.into(),
            epoch: 0,
        }
    }

    /// The same names on generation `epoch` of data claims.
    #[must_use]
    pub fn with_epoch(mut self, epoch: u32) -> Self {
        self.epoch = epoch;
        self
    }

    /// The instance with this ordinal.
    pub fn instance(&self, ordinal: u32) -> String {
        format!("{}-{ordinal}", self.cluster)
    }

    /// The ordinal of an instance name of this cluster.
    pub fn ordinal(&self, instance: &str) -> Option<u32> {
        instance
            .strip_prefix(&self.cluster)?
            .strip_prefix('-')?
            .parse()
            .ok()
    }

    /// The instance's data claim: `<instance>-pgdata`, `<instance>-pgdata-r<n>` after the
    /// `n`th restore.
    pub fn claim(&self, instance: &str) -> String {
        Self::claim_at(instance, self.epoch)
    }

    /// The instance's data claim of generation `epoch`.
    pub fn claim_at(instance: &str, epoch: u32) -> String {
        if epoch == 0 {
            format!("{instance}-pgdata")
        } else {
            format!("{instance}-pgdata-r{epoch}")
        }
    }

    /// The read-write Service, always selecting the current primary.
    pub fn primary_service(&self) -> String {
        format!("{}-primary", self.cluster)
    }

    /// The read-only Service selecting ready replicas.
    pub fn replicas_service(&self) -> String {
        format!("{}-replicas", self.cluster)
    }

    /// The ConfigMap with postgresql.conf, pg_hba.conf and the entrypoint.
    pub fn config_map(&self) -> String {
        format!("{}-config", self.cluster)
    }

    /// The Secret of the operator's superuser (generated).
    pub fn superuser_secret(&self) -> String {
        format!("{}-superuser", self.cluster)
    }

    /// The Secret of the replication user (generated).
    pub fn replication_secret(&self) -> String {
        format!("{}-replication", self.cluster)
    }

    /// The operator's record of each user's password as it is in the database (the "old"
    /// password a rotation logs in with). Owned by the cluster.
    pub fn applied_passwords_secret(&self) -> String {
        format!("{}-applied-passwords", self.cluster)
    }

    /// The PodDisruptionBudget of the replicas.
    pub fn budget(&self) -> String {
        format!("{}-replicas", self.cluster)
    }

    /// The PodDisruptionBudget of the primary.
    pub fn primary_budget(&self) -> String {
        format!("{}-primary", self.cluster)
    }

    /// The pgBackRest repository host: its Pod, claim and Service.
    pub fn repo(&self) -> String {
        format!("{}-repo", self.cluster)
    }

    /// DNS name of the repository's Service.
    pub fn repo_host(&self) -> String {
        format!("{}.{}.svc", self.repo(), self.namespace)
    }

    /// The ConfigMap with the configuration that reads a `dataSource` cluster's repository.
    pub fn pgbackrest_source_config(&self) -> String {
        format!("{}-pgbackrest-source", self.cluster)
    }

    /// The claim holding the cluster's `pg_basebackup`s (seed: the backup PVC), kept after the
    /// cluster.
    pub fn backup_claim(&self) -> String {
        format!("{}-backup", self.cluster)
    }

    /// The Job that gives a new cluster its data from a `dataSource`.
    pub fn clone_job(&self) -> String {
        format!("{}-clone", self.cluster)
    }

    /// The Secret with pgBackRest's TLS certificates (generated once).
    pub fn pgbackrest_tls_secret(&self) -> String {
        format!("{}-pgbackrest-tls", self.cluster)
    }

    /// The ConfigMap with pgBackRest's configuration files.
    pub fn pgbackrest_config(&self) -> String {
        format!("{}-pgbackrest", self.cluster)
    }

    /// The Job that creates the stanza.
    pub fn stanza_job(&self) -> String {
        format!("{}-stanza-create", self.cluster)
    }

    /// DNS name of the `-primary` Service, as instances reach it.
    pub fn primary_host(&self) -> String {
        format!("{}.{}.svc", self.primary_service(), self.namespace)
    }

    /// Labels of an instance Pod (without the role).
    pub fn instance_labels(&self, instance: &str) -> BTreeMap<String, String> {
        let mut labels = Labels::new(ENGINE, &self.cluster, INSTANCE_COMPONENT).to_map();
        labels.insert(INSTANCE_LABEL.to_owned(), instance.to_owned());
        labels
    }

    /// The selector of all instance Pods.
    pub fn instances_selector(&self) -> BTreeMap<String, String> {
        Labels::new(ENGINE, &self.cluster, INSTANCE_COMPONENT).to_map()
    }

    /// The selector of the Pods with `role`.
    pub fn role_selector(&self, role: InstanceRole) -> BTreeMap<String, String> {
        let mut labels = self.instances_selector();
        labels.insert(ROLE_LABEL.to_owned(), role_value(role).to_owned());
        labels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_cluster() {
        let n = ClusterNames::new("demo", "db");
        assert_eq!(n.instance(2), "demo-2");
        assert_eq!(n.ordinal("demo-2"), Some(2));
        assert_eq!(n.ordinal("demo-x"), None);
        assert_eq!(n.ordinal("other-2"), None);
        assert_eq!(n.claim("demo-2"), "demo-2-pgdata");
        assert_eq!(n.clone().with_epoch(2).claim("demo-2"), "demo-2-pgdata-r2");
        assert_eq!(n.primary_service(), "demo-primary");
        assert_eq!(n.primary_host(), "demo-primary.db.svc");
        let sel = n.role_selector(InstanceRole::Primary);
        assert_eq!(sel[ROLE_LABEL], "primary");
        assert_eq!(sel["app.kubernetes.io/component"], "instance");
        assert_eq!(n.instance_labels("demo-1")[INSTANCE_LABEL], "demo-1");
    }
}
