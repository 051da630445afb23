//! (pure) Names and URLs of an etcd cluster's children. Members are named `<cluster>-<ordinal>`;
//! a member's etcd name, its `EtcdPeer`, its Pod and its DNS host name are all that name.

use crate::etcd::build::service::{CLIENT_PORT, PEER_PORT};

/// Where a cluster lives, for building DNS names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNames {
    /// Cluster (and headless Service) name.
    pub cluster: String,
    /// Namespace.
    pub namespace: String,
    /// Cluster DNS domain, e.g. `cluster.local`.
    pub domain: String,
}

impl ClusterNames {
    /// Names for `cluster` in `namespace` under DNS `domain`.
    pub fn new(
        cluster: impl Into<String>,
        namespace: impl Into<String>,
        domain: impl Into<String>,
    ) -> Self {
        Self {
            cluster: cluster.into(),
            namespace: namespace.into(),
            domain: domain.into(),
        }
    }

    /// The member with this ordinal.
    pub fn peer(&self, ordinal: u32) -> String {
        format!("{}-{ordinal}", self.cluster)
    }

    /// The ordinal of a member name of this cluster.
    pub fn ordinal(&self, peer: &str) -> Option<u32> {
        peer.strip_prefix(&self.cluster)?
            .strip_prefix('-')?
            .parse()
            .ok()
    }

    /// The stable DNS name of a member (through the headless Service).
    pub fn fqdn(&self, peer: &str) -> String {
        format!(
            "{peer}.{}.{}.svc.{}",
            self.cluster, self.namespace, self.domain
        )
    }

    /// The member's advertised peer URL.
    pub fn peer_url(&self, peer: &str) -> String {
        format!("http://{}:{PEER_PORT}", self.fqdn(peer))
    }

    /// The member's advertised client URL.
    pub fn client_url(&self, peer: &str) -> String {
        format!("http://{}:{CLIENT_PORT}", self.fqdn(peer))
    }

    /// The member name a peer URL belongs to (members added through the API have no name
    /// until they start; their peer URL names them).
    pub fn peer_from_url(&self, url: &str) -> Option<String> {
        let host = url.split("://").nth(1)?.split([':', '/']).next()?;
        let peer = host.split('.').next()?;
        self.ordinal(peer).map(|_| peer.to_owned())
    }

    /// The lowest ordinal not in `taken`.
    pub fn next_free(&self, taken: &[String]) -> String {
        let used: std::collections::BTreeSet<u32> =
            taken.iter().filter_map(|p| self.ordinal(p)).collect();
        let ordinal = (0..).find(|n| !used.contains(n)).unwrap_or_default();
        self.peer(ordinal)
    }
}

/// The claim holding a member's data.
pub fn claim_name(peer: &str) -> String {
    format!("{peer}-data")
}

/// The peer a claim named by [`claim_name`] belongs to.
pub fn peer_of_claim(claim: &str) -> Option<&str> {
    claim.strip_suffix("-data")
}

/// The client URL of a member Pod, by IP (what the operator dials: it may run outside the
/// cluster's DNS).
pub fn pod_client_url(ip: &str) -> String {
    format!("http://{ip}:{CLIENT_PORT}")
}

/// The label naming a member on its Pod and claim.
pub const PEER_LABEL: &str = "steward.dev/etcd-peer";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_urls() {
        let n = ClusterNames::new("demo", "db", "cluster.local");
        assert_eq!(n.peer(2), "demo-2");
        assert_eq!(n.ordinal("demo-12"), Some(12));
        assert_eq!(n.ordinal("demox-1"), None);
        assert_eq!(n.ordinal("demo-a"), None);
        assert_eq!(
            n.peer_url("demo-0"),
            "http://demo-0.demo.db.svc.cluster.local:2380"
        );
        assert_eq!(
            n.client_url("demo-0"),
            "http://demo-0.demo.db.svc.cluster.local:2379"
        );
        assert_eq!(
            n.peer_from_url("http://demo-4.demo.db.svc.cluster.local:2380"),
            Some("demo-4".into())
        );
        assert_eq!(n.peer_from_url("http://10.0.0.1:2380"), None);
        assert_eq!(n.next_free(&["demo-0".into(), "demo-2".into()]), "demo-1");
        assert_eq!(claim_name("demo-1"), "demo-1-data");
        assert_eq!(peer_of_claim(&claim_name("demo-1")), Some("demo-1"));
        assert_eq!(peer_of_claim("demo-1-wal"), None);
    }
}
