//! What the engines read off a Pod's status.

use k8s_openapi::api::core::v1::Pod;

/// The Pod's `Ready` condition is `True`.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The Pod reached `Succeeded` or `Failed` and will not run again.
pub fn has_ended(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

    fn pod(phase: &str, ready: &str) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn readiness_and_end_come_from_status() {
        assert!(is_ready(&pod("Running", "True")));
        assert!(!is_ready(&pod("Running", "False")));
        assert!(!is_ready(&Pod::default()));
        assert!(has_ended(&pod("Failed", "False")));
        assert!(!has_ended(&pod("Running", "True")));
    }
}
