//! (pure) Names, ports and labels of a CrateDB cluster's children. The names follow the CrateDB
//! Kubernetes Operator's (`crate-master-<cluster>`, `crate-data-<set>-<cluster>`,
//! `crate-discovery-<cluster>`, `crate-<cluster>`), so people who know it find their way.

/// `app.kubernetes.io/name` of every child.
pub const ENGINE: &str = "cratedb";
/// `app.kubernetes.io/component` of master Pods.
pub const MASTER_COMPONENT: &str = "master";
/// `app.kubernetes.io/component` of data Pods.
pub const DATA_COMPONENT: &str = "data";
/// The node set of a Pod: `master` or the data set's name.
pub const NODE_SET_LABEL: &str = "steward.dev/node-set";
/// The node set name of the masters.
pub const MASTER_SET: &str = "master";
/// The container that runs CrateDB.
pub const CONTAINER: &str = "crate";
/// CrateDB's HTTP port.
pub const HTTP_PORT: i32 = 4200;
/// CrateDB's PostgreSQL wire protocol port.
pub const PSQL_PORT: i32 = 5432;
/// CrateDB's transport (node-to-node) port.
pub const TRANSPORT_PORT: i32 = 4300;
/// The user Steward manages the cluster as (seed 000: "a CrateDB user named system").
pub const SYSTEM_USER: &str = "system";
/// CrateDB's built-in superuser.
pub const SUPERUSER: &str = "crate";
/// How many masters form the first voting configuration (`cluster.initial_master_nodes`):
/// ordinals 0..3, which scaling never removes (masters never go below 3).
pub const INITIAL_MASTERS: i32 = 3;

/// Names of one cluster's children.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNames {
    /// The `CrateCluster`'s name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// The cluster DNS domain (`cluster.local`).
    pub domain: String,
}

impl ClusterNames {
    /// Names of cluster `name` in `namespace`.
    pub fn new(
        name: impl Into<String>,
        namespace: impl Into<String>,
        domain: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.into(),
            domain: domain.into(),
        }
    }

    /// The StatefulSet of node set `set` (`master` or a data set's name).
    pub fn statefulset(&self, set: &str) -> String {
        if set == MASTER_SET {
            format!("crate-master-{}", self.name)
        } else {
            format!("crate-data-{set}-{}", self.name)
        }
    }

    /// Pod `ordinal` of node set `set`; also its CrateDB node name.
    pub fn pod(&self, set: &str, ordinal: i32) -> String {
        format!("{}-{ordinal}", self.statefulset(set))
    }

    /// The headless Service the nodes discover each other through.
    pub fn discovery_service(&self) -> String {
        format!("crate-discovery-{}", self.name)
    }

    /// The client Service (HTTP and PostgreSQL).
    pub fn client_service(&self) -> String {
        format!("crate-{}", self.name)
    }

    /// The PodDisruptionBudget of node set `set`.
    pub fn budget(&self, set: &str) -> String {
        self.statefulset(set)
    }

    /// The Secret holding the `system` user's password (generated).
    pub fn system_secret(&self) -> String {
        format!("user-system-{}", self.name)
    }

    /// Steward's record of the users' passwords in CrateDB (for rotations).
    pub fn applied_passwords(&self) -> String {
        format!("crate-passwords-{}", self.name)
    }

    /// A master Pod's stable DNS name with the transport port: a discovery seed.
    pub fn seed_host(&self, ordinal: i32) -> String {
        format!(
            "{}.{}.{}.svc.{}:{TRANSPORT_PORT}",
            self.pod(MASTER_SET, ordinal),
            self.discovery_service(),
            self.namespace,
            self.domain
        )
    }

    /// `discovery.seed_hosts`: the first masters, whose names never change.
    pub fn seed_hosts(&self) -> String {
        (0..INITIAL_MASTERS)
            .map(|i| self.seed_host(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `cluster.initial_master_nodes`.
    pub fn initial_master_nodes(&self) -> String {
        (0..INITIAL_MASTERS)
            .map(|i| self.pod(MASTER_SET, i))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_crate_operator() {
        let n = ClusterNames::new("c1", "db", "cluster.local");
        assert_eq!(n.statefulset("master"), "crate-master-c1");
        assert_eq!(n.statefulset("hot"), "crate-data-hot-c1");
        assert_eq!(n.pod("hot", 2), "crate-data-hot-c1-2");
        assert_eq!(n.discovery_service(), "crate-discovery-c1");
        assert_eq!(n.client_service(), "crate-c1");
        assert_eq!(
            n.seed_hosts(),
            "crate-master-c1-0.crate-discovery-c1.db.svc.cluster.local:4300,\
             crate-master-c1-1.crate-discovery-c1.db.svc.cluster.local:4300,\
             crate-master-c1-2.crate-discovery-c1.db.svc.cluster.local:4300"
        );
        assert_eq!(
            n.initial_master_nodes(),
            "crate-master-c1-0,crate-master-c1-1,crate-master-c1-2"
        );
    }
}
