//! Seed-compatible schedules: ConfigMaps labelled `steward.dev/scheduler=true` in the
//! operator's own namespace (seed 004: "PGO Scheduler watches Kubernetes for configmaps with
//! the label crunchy-scheduler=true in the same namespace the Operator is deployed") are
//! schedules too. Key `schedule` holds JSON with the fields of a `Schedule`'s spec plus
//! `namespace` (the cluster's; default: the operator's):
//!
//! ```json
//! {"namespace": "prod", "cluster": "orders", "schedule": "0 0 1 * * *",
//!  "type": "pgbackrest", "pgbackrest": {"type": "full"}}
//! ```
//!
//! Each becomes a `Schedule` of the ConfigMap's name in that namespace, labelled
//! [`SOURCE_LABEL`] (and so run by the one scheduler, with its status, Events and runs); a
//! change of the ConfigMap changes it, and deleting the ConfigMap (or its label) deletes it. A
//! ConfigMap that cannot be read as a schedule gets a Warning Event naming the problem, and its
//! `Schedule` (if any) is left as it was. A `Schedule` of the same name that a person made
//! (without the label) is never touched: the ConfigMap gets a Warning Event instead.
//!
//! Every ConfigMap event (created, changed, deleted, or the watch's initial list) syncs the
//! whole set: ConfigMaps are few and rarely change.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::Deserialize;
use steward_api::schedule::{Schedule, ScheduleSpec};
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::pipeline::{Effect, EventType};
use crate::runtime::context::Context;

/// The label that makes a ConfigMap a schedule.
pub const SCHEDULER_LABEL: &str = "steward.dev/scheduler";
/// The key holding the schedule's JSON.
pub const SCHEDULE_KEY: &str = "schedule";
/// On a `Schedule` made from a ConfigMap: `<namespace>.<name>` of the ConfigMap.
pub const SOURCE_LABEL: &str = "steward.dev/scheduler-configmap";
/// The field manager of those `Schedule`s.
const MANAGER: &str = "steward/scheduler-configmaps";

/// A ConfigMap's schedule: a `Schedule` spec and the namespace it goes to.
#[derive(Clone, Debug, Deserialize)]
struct Entry {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(flatten)]
    spec: ScheduleSpec,
}

/// (pure) The `Schedule` a ConfigMap describes (in `default_ns` unless it names a namespace),
/// or why it does not describe one.
pub fn schedule_of(map: &ConfigMap, default_ns: &str) -> Result<Schedule, String> {
    let name = map.name_any();
    let text = map
        .data
        .as_ref()
        .and_then(|d| d.get(SCHEDULE_KEY))
        .ok_or_else(|| format!("ConfigMap {name} has no key {SCHEDULE_KEY:?}"))?;
    let entry: Entry = serde_json::from_str(text)
        .map_err(|e| format!("ConfigMap {name}: key {SCHEDULE_KEY:?} is not a schedule: {e}"))?;
    let ns = entry.namespace.unwrap_or_else(|| default_ns.to_owned());
    let mut schedule = Schedule::new(&name, entry.spec);
    schedule.metadata.namespace = Some(ns);
    schedule.metadata.labels = Some(BTreeMap::from([(
        SOURCE_LABEL.to_owned(),
        source_value(default_ns, &name),
    )]));
    Ok(schedule)
}

/// The [`SOURCE_LABEL`] value of ConfigMap `name` in `ns` (a label value: no `/`).
fn source_value(ns: &str, name: &str) -> String {
    format!("{ns}.{name}")
}

/// Syncs the `Schedule`s made from ConfigMaps with the ConfigMaps now in `store`.
async fn sync(ctx: &Context, store: &Store<ConfigMap>, own_ns: &str) -> Result<(), Error> {
    let schedules: Api<Schedule> = ctx.watched_api();
    let existing = schedules
        .list_metadata(&ListParams::default().labels(SOURCE_LABEL))
        .await
        .map_err(|s| Error::kube("list Schedules", SOURCE_LABEL, s))?
        .items;
    let mut wanted: Vec<(String, String)> = Vec::new();
    for map in store.state() {
        let mut effects = Vec::new();
        match schedule_of(&map, own_ns) {
            Err(why) => effects.push(warning("InvalidSchedule", why)),
            Ok(schedule) => {
                let ns = schedule.namespace().unwrap_or_default();
                let name = schedule.name_any();
                wanted.push((ns.clone(), name.clone()));
                // Listed with this ConfigMap's label: known to be Steward's, no need to look.
                let mine = existing.iter().any(|s| {
                    s.namespace().as_deref() == Some(ns.as_str())
                        && s.name_any() == name
                        && s.labels().get(SOURCE_LABEL) == schedule.labels().get(SOURCE_LABEL)
                });
                if let Err(why) = apply(ctx, &schedule, &map, mine).await? {
                    effects.push(warning("ScheduleNotApplied", why));
                }
            }
        }
        if !effects.is_empty() {
            ctx.execute(map.as_ref(), effects).await;
        }
    }
    for s in existing {
        let ns = s.namespace().unwrap_or_default();
        let name = s.name_any();
        if !wanted.contains(&(ns.clone(), name.clone())) {
            let api: Api<Schedule> = ctx.api(&ns);
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    tracing::info!(namespace = %ns, schedule = %name, "its ConfigMap is gone: Schedule deleted")
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(s) => return Err(Error::kube("delete Schedule", format!("{ns}/{name}"), s)),
            }
        }
    }
    Ok(())
}

fn warning(reason: &str, note: String) -> Effect {
    Effect::Event {
        type_: EventType::Warning,
        reason: reason.into(),
        action: "Schedule".into(),
        note,
    }
}

/// Applies one `Schedule` (server-side apply); `Ok(Err(why))` when the name is taken by a
/// `Schedule` Steward did not make from this ConfigMap, or the API server refuses it. `mine`:
/// the sync's list already showed it as made from this ConfigMap (no read needed).
async fn apply(
    ctx: &Context,
    schedule: &Schedule,
    map: &ConfigMap,
    mine: bool,
) -> Result<Result<(), String>, Error> {
    let ns = schedule.namespace().unwrap_or_default();
    let name = schedule.name_any();
    let api: Api<Schedule> = ctx.api(&ns);
    let current = if mine {
        None
    } else {
        match api.get_metadata_opt(&name).await {
            Ok(c) => c,
            Err(kube::Error::Api(e)) if e.code == 403 => {
                return Ok(Err(format!("Schedule {ns}/{name}: {}", e.message)));
            }
            Err(s) => return Err(Error::kube("get Schedule", format!("{ns}/{name}"), s)),
        }
    };
    let mine = schedule.labels().get(SOURCE_LABEL);
    if let Some(current) = current
        && current.labels().get(SOURCE_LABEL) != mine
    {
        return Ok(Err(format!(
            "Schedule {ns}/{name} exists and was not made from ConfigMap {}; it is left alone",
            map.name_any()
        )));
    }
    let mut body = serde_json::to_value(schedule).map_err(|e| Error::Internal {
        message: format!("Schedule {ns}/{name}: {e}"),
    })?;
    if let Some(meta) = body.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("creationTimestamp");
    }
    match api
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
    {
        Ok(_) => Ok(Ok(())),
        // Invalid (admission, CEL), a namespace that does not exist or that this operator may
        // not write (it watches another one): the API server's words.
        Err(kube::Error::Api(e)) if matches!(e.code, 400 | 403 | 404 | 422) => {
            Ok(Err(format!("Schedule {ns}/{name}: {}", e.message)))
        }
        Err(s) => Err(Error::kube("apply Schedule", format!("{ns}/{name}"), s)),
    }
}

/// Watches the schedule ConfigMaps of namespace `own_ns` and syncs on every change, until
/// `stop` is cancelled.
pub async fn run(ctx: Arc<Context>, own_ns: String, stop: CancellationToken) {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &own_ns);
    let (store, writer) = reflector::store();
    let events = watcher(
        api,
        watcher::Config::default().labels(&format!("{SCHEDULER_LABEL}=true")),
    )
    .default_backoff()
    .reflect(writer)
    .take_until(async move { stop.cancelled().await });
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
            Ok(_) => {
                if let Err(err) = sync(&ctx, &store, &own_ns).await {
                    tracing::warn!(error = %err, "syncing the schedule ConfigMaps failed");
                }
            }
            Err(err) => tracing::warn!(error = %err, "watching the schedule ConfigMaps"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(json: &str) -> ConfigMap {
        let mut m = ConfigMap::default();
        m.metadata.name = Some("nightly".into());
        m.data = Some(BTreeMap::from([(SCHEDULE_KEY.to_owned(), json.to_owned())]));
        m
    }

    #[test]
    fn a_configmap_is_a_schedule_in_the_namespace_it_names() {
        let s = schedule_of(
            &map(r#"{"namespace":"prod","cluster":"orders","schedule":"0 0 1 * * *","type":"pgbackrest","pgbackrest":{"type":"incr"}}"#),
            "steward-system",
        )
        .unwrap();
        assert_eq!(s.namespace().as_deref(), Some("prod"));
        assert_eq!(s.name_any(), "nightly");
        assert_eq!(s.spec.cluster, "orders");
        assert_eq!(s.spec.schedule, "0 0 1 * * *");
        assert_eq!(
            s.labels().get(SOURCE_LABEL).map(String::as_str),
            Some("steward-system.nightly")
        );
        let here = schedule_of(
            &map(r#"{"cluster":"orders","schedule":"0 0 1 * * *","type":"policy","policy":{"name":"vacuum"}}"#),
            "steward-system",
        )
        .unwrap();
        assert_eq!(here.namespace().as_deref(), Some("steward-system"));
        assert_eq!(here.spec.policy.unwrap().database, "postgres");
    }

    #[test]
    fn a_configmap_that_is_not_a_schedule_says_why() {
        let e = schedule_of(&map("{not json"), "ns").unwrap_err();
        assert!(e.contains("key \"schedule\" is not a schedule"), "{e}");
        let e = schedule_of(&map(r#"{"cluster":"x","type":"pgbackrest"}"#), "ns").unwrap_err();
        assert!(e.contains("missing field `schedule`"), "{e}");
        let mut empty = map("{}");
        empty.data = None;
        assert!(
            schedule_of(&empty, "ns")
                .unwrap_err()
                .contains("has no key")
        );
    }
}
