//! (pure) `EtcdClusterSpec` → [`ValidatedEtcdCluster`]: defaults merged, names checked so that
//! every `<cluster>-<suffix>` stays a DNS label, versions parsed.

use kube::ResourceExt;
use steward_api::etcd::EtcdCluster;

/// Largest member count Steward manages (etcd recommends at most 7 voting members).
pub const MAX_REPLICAS: i32 = 9;
/// Oldest etcd minor version supported (learners appeared in 3.4).
pub const MIN_MINOR: u32 = 4;

/// An etcd version `3.MINOR.PATCH`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "3.{}.{}", self.minor, self.patch)
    }
}

/// Parses `3.MINOR.PATCH`.
pub fn parse_version(text: &str) -> Result<Version, String> {
    let parts: Vec<&str> = text.split('.').collect();
    let [major, minor, patch] = parts.as_slice() else {
        return Err(format!("version {text:?} is not MAJOR.MINOR.PATCH"));
    };
    if *major != "3" {
        return Err(format!("version {text:?}: only etcd 3.x is supported"));
    }
    let minor: u32 = minor
        .parse()
        .map_err(|_| format!("version {text:?}: bad minor"))?;
    let patch: u32 = patch
        .parse()
        .map_err(|_| format!("version {text:?}: bad patch"))?;
    if minor < MIN_MINOR {
        return Err(format!(
            "version {text:?}: etcd older than 3.{MIN_MINOR} is not supported"
        ));
    }
    Ok(Version { minor, patch })
}

/// A spec that passed validation.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidatedEtcdCluster {
    /// Namespace.
    pub namespace: String,
    /// Cluster name.
    pub name: String,
    /// Voting members wanted.
    pub replicas: i32,
    /// Version wanted.
    pub version: Version,
    /// Image repository.
    pub repository: String,
}

impl ValidatedEtcdCluster {
    /// The name of the headless Service (the cluster's name, as the seed says).
    pub fn headless_service_name(&self) -> String {
        self.name.clone()
    }

    /// The image of a member.
    pub fn image(&self) -> String {
        format!("{}:v{}", self.repository, self.version)
    }
}

/// Longest cluster name: member names are `<cluster>-<n>` with n < 100, and must be DNS labels.
pub const MAX_NAME_LEN: usize = 63 - 3;

fn dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Validates a cluster. Every problem is listed in the message, for users.
pub fn validate(cluster: &EtcdCluster) -> Result<ValidatedEtcdCluster, String> {
    let mut problems = Vec::new();
    let name = cluster.name_any();
    if !dns_label(&name) || name.len() > MAX_NAME_LEN {
        problems.push(format!(
            "name {name:?} must be a DNS label of at most {MAX_NAME_LEN} characters starting with a letter"
        ));
    }
    let spec = &cluster.spec;
    if !(1..=MAX_REPLICAS).contains(&spec.replicas) {
        problems.push(format!(
            "replicas must be between 1 and {MAX_REPLICAS}, got {}",
            spec.replicas
        ));
    }
    let version = parse_version(&spec.version)
        .map_err(|e| problems.push(e))
        .ok();
    if spec.repository.is_empty() {
        problems.push("repository must not be empty".to_owned());
    }
    match (problems.is_empty(), version) {
        (true, Some(version)) => Ok(ValidatedEtcdCluster {
            namespace: cluster.namespace().unwrap_or_default(),
            name,
            replicas: spec.replicas,
            version,
            repository: spec.repository.clone(),
        }),
        _ => Err(problems.join("; ")),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use steward_api::etcd::EtcdClusterSpec;

    pub(crate) fn cluster(name: &str, replicas: i32, version: &str) -> EtcdCluster {
        let mut c = EtcdCluster::new(name, EtcdClusterSpec::new(replicas, version));
        c.metadata.namespace = Some("db".into());
        c.metadata.uid = Some("uid-1".into());
        c.metadata.generation = Some(1);
        c
    }

    #[test]
    fn a_good_spec_validates() {
        let v = validate(&cluster("demo", 3, "3.5.17")).unwrap();
        assert_eq!(
            (v.replicas, v.version.to_string()),
            (3, "3.5.17".to_owned())
        );
        assert_eq!(v.image(), "quay.io/coreos/etcd:v3.5.17");
    }

    #[test]
    fn every_problem_is_reported() {
        let err = validate(&cluster("Demo", 0, "2.3.1")).unwrap_err();
        assert!(err.contains("DNS label"), "{err}");
        assert!(
            err.contains("replicas must be between 1 and 9, got 0"),
            "{err}"
        );
        assert!(err.contains("only etcd 3.x"), "{err}");
        assert!(
            validate(&cluster("demo", 3, "3.3.0"))
                .unwrap_err()
                .contains("older than 3.4")
        );
        assert!(
            validate(&cluster("demo", 3, "3.x.0"))
                .unwrap_err()
                .contains("bad minor")
        );
        assert!(validate(&cluster(&"a".repeat(61), 3, "3.5.0")).is_err());
    }
}
