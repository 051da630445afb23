//! What the engines read off a Pod's status.

use k8s_openapi::api::core::v1::{Pod, PodSpec};

/// Drops what no step reads before a Pod enters the shared cache: besides managed fields, the
/// whole spec but `nodeName`. Steps read a Pod's metadata (labels, the spec-hash annotation
/// they compare their desired Pod with, UID, deletion), its Node and its status; the spec's
/// containers, volumes and affinity are most of a Pod's size (at 1,000 clusters, 3,000 Pods).
pub fn slim(pod: &mut Pod) {
    crate::runtime::stores::slim(pod);
    if let Some(spec) = pod.spec.as_mut() {
        *spec = PodSpec {
            node_name: spec.node_name.take(),
            ..PodSpec::default()
        };
    }
}

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

/// The last `FATAL:` or `PANIC:` line `container` left when it ended with an error: its
/// termination message, which kubelet fills from the end of the container's log under
/// `terminationMessagePolicy: FallbackToLogsOnError` (the current state when it has ended, else
/// the previous one). Lines are trimmed to 300 characters.
pub fn last_fatal(pod: &Pod, container: &str) -> Option<String> {
    let status = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == container)?;
    let message = |s: Option<&k8s_openapi::api::core::v1::ContainerState>| {
        s.and_then(|s| s.terminated.as_ref())
            .filter(|t| t.exit_code != 0)
            .and_then(|t| t.message.clone())
    };
    let text = message(status.state.as_ref()).or_else(|| message(status.last_state.as_ref()))?;
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains("FATAL:") || l.contains("PANIC:"))?
        .trim();
    Some(line.chars().take(300).collect())
}

/// The scheduler's message for a Pod it could not place (`PodScheduled=False`, reason
/// `Unschedulable`), e.g. "0/3 nodes are available: 3 node(s) didn't match Pod's node
/// affinity/selector."
pub fn unschedulable(pod: &Pod) -> Option<String> {
    if pod.spec.as_ref().is_some_and(|s| s.node_name.is_some()) {
        return None; // bound since: the condition is stale
    }
    let status = pod.status.as_ref()?;
    let condition = status.conditions.as_ref()?.iter().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    })?;
    Some(
        condition
            .message
            .clone()
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| "the scheduler found no node for it".into()),
    )
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
    fn a_slim_pod_answers_every_question_the_steps_ask_as_before() {
        use k8s_openapi::api::core::v1::Container;
        let mut full = pod("Running", "True");
        full.metadata.name = Some("demo-0".into());
        full.metadata.annotations = Some([("steward.dev/spec-hash".into(), "h".into())].into());
        full.metadata.managed_fields = Some(vec![Default::default()]);
        full.spec = Some(PodSpec {
            node_name: Some("n1".into()),
            containers: vec![Container {
                name: "etcd".into(),
                args: Some(vec!["--name=demo-0".into(); 20]),
                ..Default::default()
            }],
            ..Default::default()
        });
        let mut slimmed = full.clone();
        slim(&mut slimmed);
        assert_eq!(slimmed.metadata.managed_fields, None);
        assert_eq!(slimmed.spec.as_ref().unwrap().containers, vec![]);
        assert_eq!(slimmed.metadata.annotations, full.metadata.annotations);
        assert_eq!(slimmed.status, full.status);
        assert_eq!(is_ready(&slimmed), is_ready(&full));
        assert_eq!(unschedulable(&slimmed), unschedulable(&full));
        assert_eq!(
            slimmed.spec.unwrap().node_name,
            full.spec.unwrap().node_name
        );
    }

    #[test]
    fn readiness_and_end_come_from_status() {
        assert!(is_ready(&pod("Running", "True")));
        assert!(!is_ready(&pod("Running", "False")));
        assert!(!is_ready(&Pod::default()));
        assert!(has_ended(&pod("Failed", "False")));
        assert!(!has_ended(&pod("Running", "True")));
    }

    #[test]
    fn the_scheduler_says_why_a_pod_has_no_node() {
        let mut pending = pod("Pending", "False");
        assert_eq!(unschedulable(&pending), None);
        let condition = PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            message: Some("0/1 nodes are available: 1 node(s) were unschedulable.".into()),
            ..Default::default()
        };
        if let Some(cs) = pending.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            cs.push(condition);
        }
        assert_eq!(
            unschedulable(&pending).as_deref(),
            Some("0/1 nodes are available: 1 node(s) were unschedulable.")
        );
    }
}
