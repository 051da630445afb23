//! What the engines read off a Pod: the cached form of a Pod, and its readiness, end, last
//! fatal line and scheduling.

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::ObjectMeta;
use serde::Deserialize;

use super::packed::{PackedMap, pack_meta};

/// A Pod as the shared cache holds it: its metadata (UID, deletion, owners), its labels and
/// annotations (the spec-hash annotation steps compare their desired Pod with) packed, the
/// Node it is bound to and its status — everything a step reads. The watch decodes Pods
/// straight into this type, so the spec's containers, volumes and affinity are never
/// allocated: a `Pod` is 2,176 bytes before any of its strings, a `CachedPod` under 900 (at
/// 1,000 clusters the cache holds 2,000 Pods). Read labels through [`CachedPod::labels`]:
/// `metadata.labels` is always empty.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(from = "DecodedPod")]
pub struct CachedPod {
    /// The Pod's metadata, without labels, annotations and managed fields.
    pub metadata: ObjectMeta,
    labels: PackedMap,
    annotations: PackedMap,
    /// Of the spec, the Node it is bound to.
    pub spec: Option<CachedPodSpec>,
    /// The Pod's status.
    pub status: Option<PodStatus>,
}

impl CachedPod {
    /// A Pod with `metadata`, bound as `spec` says, in `status`, as the cache keeps it.
    pub fn new(
        mut metadata: ObjectMeta,
        spec: Option<CachedPodSpec>,
        status: Option<PodStatus>,
    ) -> Self {
        let (labels, annotations) = pack_meta(&mut metadata);
        Self {
            metadata,
            labels,
            annotations,
            spec,
            status,
        }
    }

    /// The Pod's labels.
    pub fn labels(&self) -> &PackedMap {
        &self.labels
    }

    /// The Pod's annotations (without kubectl's last-applied copy).
    pub fn annotations(&self) -> &PackedMap {
        &self.annotations
    }
}

/// What the watch decodes of a Pod, before its maps are packed.
#[derive(Deserialize)]
struct DecodedPod {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<CachedPodSpec>,
    #[serde(default)]
    status: Option<PodStatus>,
}

impl From<DecodedPod> for CachedPod {
    fn from(pod: DecodedPod) -> Self {
        Self::new(pod.metadata, pod.spec, pod.status)
    }
}

/// What the cache keeps of a Pod's spec.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CachedPodSpec {
    /// The Node the scheduler bound the Pod to.
    #[serde(default, rename = "nodeName")]
    pub node_name: Option<String>,
}

impl k8s_openapi::Resource for CachedPod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for CachedPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A Pod read from the API server, kept as the cache would keep it (tests fill caches with
/// these).
impl From<Pod> for CachedPod {
    fn from(pod: Pod) -> Self {
        Self::new(
            pod.metadata,
            pod.spec.map(|s| CachedPodSpec {
                node_name: s.node_name,
            }),
            pod.status,
        )
    }
}

/// What the helpers below read of a Pod, from the API server (`Pod`) or the cache
/// (`CachedPod`).
pub trait PodParts {
    /// The Pod's status.
    fn pod_status(&self) -> Option<&PodStatus>;
    /// The Node it is bound to.
    fn node_name(&self) -> Option<&str>;
}

impl PodParts for Pod {
    fn pod_status(&self) -> Option<&PodStatus> {
        self.status.as_ref()
    }

    fn node_name(&self) -> Option<&str> {
        self.spec.as_ref()?.node_name.as_deref()
    }
}

impl<T: PodParts + ?Sized> PodParts for &T {
    fn pod_status(&self) -> Option<&PodStatus> {
        (**self).pod_status()
    }

    fn node_name(&self) -> Option<&str> {
        (**self).node_name()
    }
}

impl<T: PodParts + ?Sized> PodParts for std::sync::Arc<T> {
    fn pod_status(&self) -> Option<&PodStatus> {
        (**self).pod_status()
    }

    fn node_name(&self) -> Option<&str> {
        (**self).node_name()
    }
}

impl PodParts for CachedPod {
    fn pod_status(&self) -> Option<&PodStatus> {
        self.status.as_ref()
    }

    fn node_name(&self) -> Option<&str> {
        self.spec.as_ref()?.node_name.as_deref()
    }
}

/// The Pod's `Ready` condition is `True`.
pub fn is_ready(pod: &impl PodParts) -> bool {
    pod.pod_status()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The Pod reached `Succeeded` or `Failed` and will not run again.
pub fn has_ended(pod: &impl PodParts) -> bool {
    pod.pod_status()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed")
}

/// The last `FATAL:` or `PANIC:` line `container` left when it ended with an error: its
/// termination message, which kubelet fills from the end of the container's log under
/// `terminationMessagePolicy: FallbackToLogsOnError` (the current state when it has ended, else
/// the previous one). Lines are trimmed to 300 characters.
pub fn last_fatal(pod: &impl PodParts, container: &str) -> Option<String> {
    let status = pod
        .pod_status()?
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
pub fn unschedulable(pod: &impl PodParts) -> Option<String> {
    if pod.node_name().is_some() {
        return None; // bound since: the condition is stale
    }
    let status = pod.pod_status()?;
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
    fn a_cached_pod_answers_every_question_the_steps_ask_as_before() {
        use k8s_openapi::api::core::v1::{Container, PodSpec};
        let mut full = pod("Running", "True");
        full.metadata.name = Some("demo-0".into());
        full.metadata.annotations = Some([("steward.dev/spec-hash".into(), "h".into())].into());
        full.spec = Some(PodSpec {
            node_name: Some("n1".into()),
            containers: vec![Container {
                name: "etcd".into(),
                args: Some(vec!["--name=demo-0".into(); 20]),
                ..Default::default()
            }],
            ..Default::default()
        });
        // As the watch decodes it, and as a test converts it.
        let decoded: CachedPod =
            serde_json::from_value(serde_json::to_value(&full).unwrap()).unwrap();
        assert_eq!(decoded, CachedPod::from(full.clone()));
        assert_eq!(decoded.metadata.name, full.metadata.name);
        assert_eq!(
            decoded.annotations().get("steward.dev/spec-hash"),
            Some("h")
        );
        assert_eq!(decoded.metadata.annotations, None);
        assert_eq!(decoded.status, full.status);
        assert_eq!(decoded.node_name(), Some("n1"));
        assert_eq!(is_ready(&decoded), is_ready(&full));
        assert_eq!(unschedulable(&decoded), unschedulable(&full));
        assert!(size_of::<CachedPod>() * 2 < size_of::<Pod>());
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
