//! The Event recorder the controllers share: kube's [`Recorder`] (Event series: a repeated
//! Event within six minutes is one Event whose `series.count` grows), started afresh once it
//! has published nothing for longer than that.
//!
//! The recorder keeps every Event it published for six minutes to continue its series, but
//! drops expired ones only when it publishes again. After a burst — 1,000 clusters created at
//! once post a few thousand Events, ~8 MiB of cache — a converged operator publishes nothing
//! and would hold them for good. A recorder idle for the series window holds only expired
//! Events, so replacing it changes no series.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, Recorder, Reporter};
use tokio_util::sync::CancellationToken;

/// kube's series window (`kube_runtime::events`' cache TTL, six minutes), and a margin.
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60 + 30);

/// How often an idle recorder is looked for.
const LOOK_EVERY: Duration = Duration::from_secs(60);

/// See the module documentation.
pub struct EventRecorder {
    client: Client,
    reporter: Reporter,
    slot: Mutex<Slot>,
}

struct Slot {
    recorder: Recorder,
    last_publish: Instant,
}

impl EventRecorder {
    /// A recorder reporting as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            slot: Mutex::new(Slot {
                recorder: Recorder::new(client.clone(), reporter.clone()),
                last_publish: Instant::now(),
            }),
            client,
            reporter,
        }
    }

    /// Publishes `event` about `reference` (creates it, or continues its series).
    pub async fn publish(
        &self,
        event: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let recorder = {
            let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
            slot.last_publish = Instant::now();
            slot.recorder.clone()
        };
        recorder.publish(event, reference).await
    }

    /// Starts afresh if nothing was published for [`SERIES_WINDOW`] before `now`; `true` if
    /// it did.
    pub fn forget_if_idle(&self, now: Instant) -> bool {
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        if now.saturating_duration_since(slot.last_publish) < SERIES_WINDOW {
            return false;
        }
        slot.recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        slot.last_publish = now;
        true
    }

    /// Looks for idleness every minute until `stop`.
    pub async fn forget_while_idle(&self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(LOOK_EVERY);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if self.forget_if_idle(Instant::now()) {
                        tracing::debug!("Event recorder idle for the series window: started afresh");
                    }
                }
                () = stop.cancelled() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    use kube::api::{Api, ListParams};
    use kube::runtime::events::EventType;

    fn event(note: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: "Tested".into(),
            note: Some(note.into()),
            action: "Test".into(),
            secondary: None,
        }
    }

    /// A repeated Event is one series while the recorder is in use; after an idle window the
    /// recorder starts afresh (a new Event), and a recorder in use is never replaced.
    #[tokio::test]
    async fn an_idle_recorder_starts_afresh_and_a_busy_one_keeps_its_series() {
        let plane = crate::embedded::Embedded::start(&["ev"]).await.unwrap();
        let client = plane.client.clone();
        let recorder = EventRecorder::new(
            client.clone(),
            Reporter {
                controller: "steward".into(),
                instance: Some("test".into()),
            },
        );
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            name: Some("c".into()),
            namespace: Some("ev".into()),
            ..ObjectReference::default()
        };
        let events: Api<K8sEvent> = Api::namespaced(client, "ev");
        let listed = || async {
            let mut counts: Vec<i32> = events
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .map(|e| e.series.as_ref().map_or(1, |s| s.count))
                .collect();
            counts.sort();
            counts
        };
        recorder.publish(&event("n"), &reference).await.unwrap();
        recorder.publish(&event("n"), &reference).await.unwrap();
        assert_eq!(listed().await, [2], "one Event, its series at 2");

        let now = Instant::now();
        assert!(!recorder.forget_if_idle(now), "just used: kept");
        assert!(!recorder.forget_if_idle(now + SERIES_WINDOW / 2));
        assert!(recorder.forget_if_idle(now + SERIES_WINDOW + Duration::from_secs(1)));
        recorder.publish(&event("n"), &reference).await.unwrap();
        assert_eq!(listed().await, [1, 2], "afresh: a new Event");
        plane.server.shutdown().await;
    }
}
