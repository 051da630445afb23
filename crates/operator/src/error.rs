//! The operator's error type. Every variant says what failed and on what, and maps to a stable
//! category used for metric labels and Event reasons (never `Debug` output).

use std::time::Duration;

/// Stable error categories. Metric label values and Event reasons come from here only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    /// The Kubernetes API refused or failed a request.
    KubeApi,
    /// A write lost a resourceVersion race; retried on the next pass.
    Conflict,
    /// The spec cannot be acted upon.
    InvalidSpec,
    /// A referenced object (Secret, ConfigMap...) does not exist.
    MissingDependency,
    /// The database could not be reached or answered with an error.
    Database,
    /// A long operation passed its deadline.
    Timeout,
    /// The requested behaviour is not implemented yet.
    NotImplemented,
    /// A bug: an invariant did not hold.
    Internal,
}

impl Category {
    /// Every category, for pre-registering metric label sets.
    pub const ALL: [Category; 8] = [
        Self::KubeApi,
        Self::Conflict,
        Self::InvalidSpec,
        Self::MissingDependency,
        Self::Database,
        Self::Timeout,
        Self::NotImplemented,
        Self::Internal,
    ];

    /// Label value and Event reason suffix.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::KubeApi => "KubeApi",
            Self::Conflict => "Conflict",
            Self::InvalidSpec => "InvalidSpec",
            Self::MissingDependency => "MissingDependency",
            Self::Database => "DatabaseError",
            Self::Timeout => "Timeout",
            Self::NotImplemented => "NotImplemented",
            Self::Internal => "Internal",
        }
    }

    /// How long to wait before retrying after an error of this category.
    pub fn retry_after(self) -> Duration {
        match self {
            Self::Conflict => Duration::from_secs(1),
            Self::KubeApi | Self::Database => Duration::from_secs(10),
            Self::MissingDependency => Duration::from_secs(30),
            Self::InvalidSpec | Self::NotImplemented | Self::Timeout | Self::Internal => {
                Duration::from_secs(300)
            }
        }
    }
}

/// An operator error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("Kubernetes API call {action} on {object} failed: {source}")]
    Kube {
        /// What was attempted, e.g. `apply Service`.
        action: &'static str,
        /// Which object, `namespace/name`.
        object: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The spec is invalid.
    #[error("invalid spec: {message}")]
    InvalidSpec {
        /// What is wrong, for users.
        message: String,
    },
    /// A referenced object is missing.
    #[error("{kind} {name} does not exist")]
    MissingDependency {
        /// Kind of the missing object.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// The database failed.
    #[error("database {cluster}: {message}")]
    Database {
        /// Cluster `namespace/name`.
        cluster: String,
        /// What failed (never contains credentials).
        message: String,
    },
    /// Not implemented.
    #[error("not implemented: {what}")]
    NotImplemented {
        /// What is missing.
        what: &'static str,
    },
    /// An invariant did not hold.
    #[error("internal error: {message}")]
    Internal {
        /// What went wrong.
        message: String,
    },
    /// Adding or removing Steward's finalizer failed.
    #[error("finalizer handling on {object} failed: {message}")]
    Finalizer {
        /// Which object, `namespace/name`.
        object: String,
        /// What failed.
        message: String,
        /// The category of the underlying failure.
        category: Category,
    },
    /// (De)serialisation of an object failed.
    #[error("serialising {what} failed: {source}")]
    Serde {
        /// What was serialised.
        what: &'static str,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// The stable category of this error.
    pub fn category(&self) -> Category {
        match self {
            Self::Kube { source, .. } => match source {
                kube::Error::Api(resp) if resp.code == 409 => Category::Conflict,
                _ => Category::KubeApi,
            },
            Self::InvalidSpec { .. } => Category::InvalidSpec,
            Self::MissingDependency { .. } => Category::MissingDependency,
            Self::Database { .. } => Category::Database,
            Self::NotImplemented { .. } => Category::NotImplemented,
            Self::Finalizer { category, .. } => *category,
            Self::Internal { .. } | Self::Serde { .. } => Category::Internal,
        }
    }

    /// Flattens kube-runtime's finalizer error, keeping the inner error's category.
    pub fn from_finalizer(object: String, err: kube::runtime::finalizer::Error<Error>) -> Self {
        use kube::runtime::finalizer::Error as F;
        match err {
            F::ApplyFailed(inner) | F::CleanupFailed(inner) => inner,
            other => Self::Finalizer {
                object,
                message: other.to_string(),
                category: Category::KubeApi,
            },
        }
    }

    /// Shorthand for a Kubernetes API error.
    pub fn kube(action: &'static str, object: impl Into<String>, source: kube::Error) -> Self {
        Self::Kube {
            action,
            object: object.into(),
            source,
        }
    }
}

/// Result with the operator's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("boom", "Conflict")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn conflicts_have_their_own_category() {
        assert_eq!(
            Error::kube("apply", "ns/a", api_error(409)).category(),
            Category::Conflict
        );
        assert_eq!(
            Error::kube("apply", "ns/a", api_error(500)).category(),
            Category::KubeApi
        );
    }

    #[test]
    fn category_labels_are_unique() {
        let mut labels: Vec<_> = Category::ALL.iter().map(|c| c.as_str()).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), Category::ALL.len());
    }
}
