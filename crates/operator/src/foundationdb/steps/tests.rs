//! Step tests: the FoundationDB pipeline runs pass after pass against the admin model, with its
//! Pods and claims in the embedded API server. A small "world" stands in for the kubelet and the
//! monitors: every Pod that exists gets an address, a Node (zones n1, n2, n3 by process number),
//! a process in the model with the command line its monitor configuration gives, and a monitor
//! report.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ContainerStatus, PersistentVolumeClaim, Pod, PodStatus, Service, ServicePort, ServiceSpec,
};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{reflector, watcher};
use steward_api::foundationdb::{FoundationDBCluster, FoundationDBClusterStatus, ProcessClass};

use crate::clock::{Clock, ManualClock};
use crate::config::{TimeoutArgs, WebhookArgs};
use crate::embedded::Embedded;
use crate::foundationdb::admin::FdbAdmin;
use crate::foundationdb::admin::cli::{LOCK_KEY, LockValue, deny_key};
use crate::foundationdb::admin::model::{ModelFdb, Process};
use crate::foundationdb::build::{self, CLASS_LABEL, GROUP_LABEL};
use crate::foundationdb::controller::new_pass;
use crate::foundationdb::{FdbStores, Settings, pipeline};
use crate::metrics::Metrics;
use crate::pipeline::{Effect, PassReport};
use crate::resources::labels::{MANAGED_BY, MANAGER};
use crate::resources::packed::CachedMeta;
use crate::resources::pods::{CachedPod, CachedPodSpec};
use crate::runtime::context::Context;
use crate::webhook::WebhookSender;

const NS: &str = "db";

struct Harness {
    plane: Embedded,
    cluster: FoundationDBCluster,
    model: ModelFdb,
    clock: ManualClock,
    events: Vec<(String, String)>,
    ips: BTreeMap<String, String>,
    settings: Settings,
}

fn zone_of(id: &str) -> String {
    let n: u32 = id
        .rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    format!("n{}", (n - 1) % 3 + 1)
}

impl Harness {
    async fn start(spec: serde_json::Value) -> Self {
        let plane = Embedded::start(&[NS]).await.unwrap();
        let cluster: FoundationDBCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "steward.dev/v1alpha1", "kind": "FoundationDBCluster",
            "metadata": {"name": "demo", "namespace": NS},
            "spec": spec
        }))
        .unwrap();
        let api: Api<FoundationDBCluster> = Api::namespaced(plane.client.clone(), NS);
        let cluster = api.create(&PostParams::default(), &cluster).await.unwrap();
        let model = ModelFdb::default();
        model.state().available = true;
        model.state().seconds_since_recovery = 1000.0;
        Self {
            plane,
            cluster,
            model,
            clock: ManualClock::new(jiff::Timestamp::from_second(1_800_000_000).unwrap()),
            events: Vec::new(),
            ips: BTreeMap::new(),
            settings: Settings::default(),
        }
    }

    /// Mirrors the API server's Pods into the model and the caches.
    async fn world(&mut self) -> FdbStores {
        let pods: Api<Pod> = Api::namespaced(self.plane.client.clone(), NS);
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.plane.client.clone(), NS);
        let (pod_store, mut pod_writer) = reflector::store::<CachedPod>();
        let (claim_store, mut claim_writer) =
            reflector::store::<CachedMeta<PersistentVolumeClaim>>();
        let mut alive = Vec::new();
        // The processes start from the cluster file the ConfigMap carries.
        if let Some(cs) = self
            .cluster
            .status
            .as_ref()
            .and_then(|s| s.connection_string.clone())
        {
            let mut state = self.model.state();
            if state.connection_string.is_empty() {
                state.connection_string = cs;
            }
        }
        for pod in pods.list(&ListParams::default()).await.unwrap() {
            let id = pod.name_any();
            // Buggified Pods: a no-schedule Pod stays Pending, a crash-looping one runs no
            // process.
            let pod_spec = pod.spec.as_ref().unwrap();
            if pod_spec
                .node_selector
                .as_ref()
                .is_some_and(|s| s.contains_key(build::NO_SCHEDULE_LABEL))
            {
                let cached = CachedPod::new(
                    pod.metadata.clone(),
                    Some(CachedPodSpec { node_name: None }),
                    Some(PodStatus {
                        phase: Some("Pending".into()),
                        ..PodStatus::default()
                    }),
                );
                pod_writer.apply_watcher_event(&watcher::Event::Apply(cached));
                continue;
            }
            let crash_loop = pod_spec.containers[0].command.as_deref()
                == Some(&[build::CRASH_LOOP.to_owned()][..]);
            let next = self.ips.len() + 1;
            let ip = self
                .ips
                .entry(id.clone())
                .or_insert_with(|| format!("10.1.0.{next}"))
                .clone();
            let zone = zone_of(&id);
            let class = pod.labels()[CLASS_LABEL].clone();
            let env = BTreeMap::from([
                ("FDB_PUBLIC_IP".to_owned(), ip.clone()),
                ("FDB_INSTANCE_ID".to_owned(), id.clone()),
                ("FDB_MACHINE_ID".to_owned(), id.clone()),
                ("FDB_ZONE_ID".to_owned(), zone.clone()),
            ]);
            let pclass = ProcessClass::ALL
                .into_iter()
                .find(|c| c.as_str() == class)
                .unwrap();
            let mut config = build::monitor_config(&self.cluster, pclass);
            // The kubelet runs the images the Pod names; the monitor runs a configuration's
            // version only when its binary is there: the main container's own, or the one the
            // sidecar provides. Otherwise it keeps its active configuration (the main one's).
            let tag = |i: usize| {
                pod.spec.as_ref().unwrap().containers[i]
                    .image
                    .clone()
                    .unwrap()
                    .rsplit_once(':')
                    .unwrap()
                    .1
                    .to_owned()
            };
            let (main, sidecar) = (tag(0), tag(1));
            if config["version"] != main && config["version"] != sidecar {
                config["version"] = serde_json::json!(main);
            }
            let active_version = config["version"].as_str().unwrap().to_owned();
            let address = format!("{ip}:{}", build::PORT);
            if !crash_loop {
                let mut state = self.model.state();
                let line = format!("fdbserver {}", build::command_line(&config, &env).unwrap());
                // A killed process was started again by its monitor, with the active configuration.
                if let Some(p) = state.processes.get_mut(&address)
                    && p.uptime == 0.0
                {
                    p.command_line = line.clone();
                    p.uptime = 1000.0;
                    p.version = active_version.clone();
                }
                state.processes.entry(address.clone()).or_insert(Process {
                    class: class.clone(),
                    zone: zone.clone(),
                    instance_id: id.clone(),
                    command_line: line,
                    uptime: 1000.0,
                    version: active_version,
                });
                state.reports.insert(
                    id.clone(),
                    serde_json::json!({"currentConfiguration": config.to_string(), "environment": env})
                        .to_string(),
                );
                alive.push(address);
            } else {
                self.model.state().reports.remove(&id);
            }
            let cached = CachedPod::new(
                pod.metadata.clone(),
                Some(CachedPodSpec {
                    node_name: Some(zone),
                }),
                Some(PodStatus {
                    phase: Some("Running".into()),
                    pod_ip: Some(ip),
                    container_statuses: Some(
                        pod.spec
                            .as_ref()
                            .unwrap()
                            .containers
                            .iter()
                            .map(|c| ContainerStatus {
                                name: c.name.clone(),
                                image: c.image.clone().unwrap_or_default(),
                                ready: true,
                                ..ContainerStatus::default()
                            })
                            .collect(),
                    ),
                    ..PodStatus::default()
                }),
            );
            pod_writer.apply_watcher_event(&watcher::Event::Apply(cached));
        }
        self.model
            .state()
            .processes
            .retain(|a, _| alive.contains(a));
        for claim in claims.list(&ListParams::default()).await.unwrap() {
            claim_writer.apply_watcher_event(&watcher::Event::Apply(CachedMeta::new(
                claim.metadata.clone(),
            )));
        }
        // As the operator's cache: Steward's Services only.
        let services: Api<Service> = Api::namespaced(self.plane.client.clone(), NS);
        let (service_store, mut service_writer) = reflector::store::<CachedMeta<Service>>();
        let steward = ListParams::default().labels(&format!("{MANAGED_BY}={MANAGER}"));
        for svc in services.list(&steward).await.unwrap() {
            service_writer.apply_watcher_event(&watcher::Event::Apply(CachedMeta::new(
                svc.metadata.clone(),
            )));
        }
        FdbStores {
            pods: pod_store.into(),
            claims: claim_store.into(),
            config_maps: reflector::store().0,
            services: service_store.into(),
        }
    }

    /// One pass of the pipeline; status and Events carried over.
    async fn pass(&mut self) -> PassReport {
        let stores = self.world().await;
        let metrics = Metrics::new();
        let webhooks = WebhookSender::new(&WebhookArgs::default(), metrics.clone()).unwrap();
        let mut ctx = Context::new(
            self.plane.client.clone(),
            metrics.clone(),
            webhooks,
            Arc::new(self.clock.clone()),
            TimeoutArgs::default(),
            None,
            "test".into(),
        );
        ctx.seams
            .insert::<Arc<dyn FdbAdmin>>(Arc::new(self.model.clone()));
        ctx.seams.insert::<Settings>(self.settings);
        let ctx = Arc::new(ctx);
        let mut pass = new_pass(&ctx, stores, Arc::new(self.cluster.clone()));
        let report = pipeline().run(&mut pass, &metrics).await;
        for e in &pass.core.effects {
            if let Effect::Event { reason, note, .. } = e {
                self.events.push((reason.clone(), note.clone()));
            }
        }
        let mut status = pass.status;
        status.common = pass.core.status;
        self.cluster.status = Some(status);
        report
    }

    fn status(&self) -> &FoundationDBClusterStatus {
        self.cluster.status.as_ref().unwrap()
    }

    fn changes(&self) -> Vec<String> {
        self.model.state().changes.clone()
    }

    async fn passes(&mut self, n: usize) {
        for _ in 0..n {
            self.pass().await;
            self.clock.advance(std::time::Duration::from_secs(5));
        }
    }

    async fn pod_names(&self) -> Vec<String> {
        let pods: Api<Pod> = Api::namespaced(self.plane.client.clone(), NS);
        let mut names: Vec<String> = pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .into_iter()
            .map(|p| p.name_any())
            .collect();
        names.sort();
        names
    }
}

fn spec() -> serde_json::Value {
    serde_json::json!({"version": "7.1.57",
        "processCounts": {"storage": 3, "log": 2, "stateless": 1}})
}

#[tokio::test]
async fn a_new_cluster_gets_its_groups_pods_coordinators_and_configure_new_once() {
    let mut h = Harness::start(spec()).await;
    h.passes(8).await;
    let status = h.status().clone();
    let ids: Vec<&str> = status
        .process_groups
        .iter()
        .map(|g| g.process_group_id.as_str())
        .collect();
    assert_eq!(
        ids,
        [
            "demo-storage-1",
            "demo-storage-2",
            "demo-storage-3",
            "demo-log-1",
            "demo-log-2",
            "demo-stateless-1"
        ]
    );
    assert_eq!(h.pod_names().await.len(), 6);
    // Coordinators: 2R-1 = 3, storage processes in three zones.
    let cs = status.connection_string.clone().unwrap();
    assert!(cs.starts_with("demo:"), "{cs}");
    let coordinators = crate::foundationdb::admin::status::coordinators_of(&cs);
    assert_eq!(coordinators.len(), 3);
    assert!(status.configured);
    let configures: Vec<String> = h
        .changes()
        .into_iter()
        .filter(|c| c.starts_with("configure"))
        .collect();
    assert_eq!(configures, ["configure new double ssd-2"]);
    // Converged: reconciled at generation 1, and configure never runs again.
    h.passes(3).await;
    assert_eq!(
        h.status().common.generations.reconciled,
        Some(1),
        "{:?}",
        h.status().common
    );
    assert_eq!(
        h.changes()
            .iter()
            .filter(|c| c.starts_with("configure"))
            .count(),
        1
    );
    // A configuration changed behind its back is changed back with `configure`, never `new`.
    h.model.state().configuration = Some("single memory".into());
    h.passes(3).await;
    assert_eq!(
        h.changes()
            .iter()
            .filter(|c| c.starts_with("configure new"))
            .count(),
        1
    );
    assert!(
        h.changes().contains(&"configure double ssd-2".to_owned()),
        "{:?}",
        h.changes()
    );
}

#[tokio::test]
async fn a_shrink_excludes_first_waits_for_the_data_and_never_removes_a_coordinator() {
    let mut h = Harness::start(serde_json::json!({"version": "7.1.57",
        "processCounts": {"storage": 4, "log": 2, "stateless": 1}}))
    .await;
    h.passes(10).await;
    assert!(h.status().configured);
    h.cluster.spec.process_counts.storage = 3;
    h.cluster.metadata.generation = Some(2);
    // A recent recovery holds the exclusion back.
    h.model.state().seconds_since_recovery = 10.0;
    h.passes(2).await;
    let removing: Vec<String> = h
        .status()
        .process_groups
        .iter()
        .filter(|g| g.removal_timestamp.is_some())
        .map(|g| g.process_group_id.clone())
        .collect();
    assert_eq!(removing.len(), 1, "one storage group marked");
    assert!(
        !h.changes().iter().any(|c| c.starts_with("exclude")),
        "{:?}",
        h.changes()
    );
    h.model.state().seconds_since_recovery = 1000.0;
    h.passes(2).await;
    assert!(
        h.changes().iter().any(|c| c.starts_with("exclude no_wait")),
        "{:?}",
        h.changes()
    );
    // Data still moving: its Pod stays.
    h.passes(2).await;
    assert!(h.pod_names().await.contains(&removing[0]));
    h.model.finish_moves();
    h.passes(8).await;
    // The removed group's Pod and claim are gone, the group is included again and forgotten.
    assert!(
        !h.pod_names().await.contains(&removing[0]),
        "{:?}",
        h.events
    );
    assert!(
        h.changes().iter().any(|c| c.starts_with("include")),
        "{:?}",
        h.changes()
    );
    assert!(
        !h.status()
            .process_groups
            .iter()
            .any(|g| g.process_group_id == removing[0])
    );
    // Coordinators were moved off it first if it was one; the lock was taken for the exclusion.
    let coordinators = crate::foundationdb::admin::status::coordinators_of(
        h.status().connection_string.as_deref().unwrap(),
    );
    assert_eq!(coordinators.len(), 3);
    let lock = LockValue::unpack(&h.model.state().kv[LOCK_KEY]).unwrap();
    assert_eq!(lock.id, "demo");
}

#[tokio::test]
async fn another_instances_live_lock_or_the_deny_list_holds_locked_steps_back() {
    let mut h = Harness::start(spec()).await;
    h.passes(10).await;
    let now = h.clock.now().as_second();
    let other = LockValue {
        id: "dc2".into(),
        start: now,
        end: now + 600,
    };
    h.model.state().kv.insert(LOCK_KEY.to_vec(), other.pack());
    h.cluster.spec.process_counts.storage = 2;
    h.passes(3).await;
    assert!(
        !h.changes().iter().any(|c| c.starts_with("exclude")),
        "{:?}",
        h.changes()
    );
    assert_eq!(h.status().lock_holder.as_deref(), Some("dc2"));
    // Once dc2 is on the deny list, its lock no longer counts.
    h.cluster.spec.lock_options.deny_list =
        vec![serde_json::from_value(serde_json::json!({"id": "dc2"})).unwrap()];
    h.passes(3).await;
    assert!(h.model.state().kv.contains_key(&deny_key("dc2")));
    assert!(
        h.changes().iter().any(|c| c.starts_with("exclude")),
        "{:?}",
        h.changes()
    );
    // And an instance that is itself denied takes no lock.
    h.cluster.spec.lock_options.deny_list =
        vec![serde_json::from_value(serde_json::json!({"id": "demo"})).unwrap()];
    h.model.state().kv.remove(LOCK_KEY);
    h.cluster.spec.process_counts.storage = 3;
    h.cluster.spec.database_configuration.storage_engine =
        steward_api::foundationdb::StorageEngine::Memory;
    h.passes(3).await;
    assert!(
        !h.changes().iter().any(|c| c == "configure double memory"),
        "{:?}",
        h.changes()
    );
    let c = crate::conditions::get(&h.status().common.conditions, "LockAvailable").unwrap();
    assert_eq!(c.reason, "LockDenied");
}

#[tokio::test]
async fn an_invalid_spec_creates_nothing() {
    let mut h = Harness::start(serde_json::json!({"version": "7.1.57",
        "processCounts": {"storage": 3, "log": 1, "stateless": 1}}))
    .await;
    h.passes(2).await;
    assert!(h.pod_names().await.is_empty());
    let c = crate::conditions::get(&h.status().common.conditions, "Degraded").unwrap();
    assert_eq!(c.reason, "InvalidSpec");
    assert!(
        c.message.contains("spec.processCounts.log"),
        "{}",
        c.message
    );
}

#[tokio::test]
async fn a_knob_is_bounced_after_the_uptime_rule_and_a_pod_spec_change_goes_zone_by_zone() {
    let mut h = Harness::start(spec()).await;
    h.passes(10).await;
    // A knob: the monitors take the new configuration, the processes are killed once all have
    // been up minimumUptimeSecondsForBounce.
    h.cluster.spec.custom_parameters = vec!["knob_max_trace_lines=1000".into()];
    for p in h.model.state().processes.values_mut() {
        p.uptime = 100.0;
    }
    h.passes(2).await;
    assert!(
        !h.changes().iter().any(|c| c.starts_with("kill")),
        "{:?}",
        h.changes()
    );
    for p in h.model.state().processes.values_mut() {
        p.uptime = 1000.0;
    }
    h.passes(2).await;
    let kills: Vec<String> = h
        .changes()
        .into_iter()
        .filter(|c| c.starts_with("kill"))
        .collect();
    assert_eq!(kills.len(), 1, "{:?}", h.changes());
    assert_eq!(
        kills[0].split_whitespace().count(),
        7,
        "every process in one kill: {kills:?}"
    );
    // A Pod spec change (a restart request): the Pods of one zone are deleted at a time.
    let before = h.pod_names().await;
    h.cluster.spec.pod_template.annotations =
        BTreeMap::from([(build::RESTARTED_AT.into(), "a".into())]);
    let pods: Api<Pod> = Api::namespaced(h.plane.client.clone(), NS);
    let mut seen_zones = Vec::new();
    for _ in 0..12 {
        let old: Vec<String> = pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .into_iter()
            .filter(|p| !p.annotations().contains_key(build::RESTARTED_AT))
            .map(|p| p.name_any())
            .collect();
        h.pass().await;
        let after: Vec<String> = h.pod_names().await;
        let deleted: Vec<&String> = old.iter().filter(|n| !after.contains(n)).collect();
        let zones: std::collections::BTreeSet<String> =
            deleted.iter().map(|n| zone_of(n)).collect();
        assert!(zones.len() <= 1, "one zone at a time: {deleted:?}");
        seen_zones.extend(zones);
        h.clock.advance(std::time::Duration::from_secs(5));
    }
    assert_eq!(seen_zones, ["n1", "n2", "n3"], "{:?}", h.events);
    assert_eq!(h.pod_names().await, before);
    let restarted = pods.list(&ListParams::default()).await.unwrap();
    assert!(
        restarted
            .iter()
            .all(|p| p.annotations().get(build::RESTARTED_AT).map(String::as_str) == Some("a"))
    );
}

/// A protocol-changing upgrade (7.1 → 7.3): held while a client has no 7.3 library; then the
/// sidecars first (in place), one kill of every process once every monitor runs the new
/// version, the running version moves, and only then the Pods' main containers, zone by zone.
#[tokio::test]
async fn an_upgrade_waits_for_clients_bounces_everything_at_once_then_rolls_the_pods() {
    let mut h = Harness::start(spec()).await;
    h.passes(10).await;
    assert_eq!(h.status().running_version.as_deref(), Some("7.1.57"));
    let client = |max: &str| {
        serde_json::json!({"supported_versions": [
            {"client_version": "7.1.57", "protocol_version": "fdb00b071010000",
             "connected_clients": [{"address": "10.9.9.9:1", "log_group": "app"}],
             "max_protocol_clients": if max == "7.1" { serde_json::json!([{"address": "10.9.9.9:1", "log_group": "app"}]) } else { serde_json::json!([]) }},
            {"client_version": "7.3.43", "protocol_version": "fdb00b073000000",
             "connected_clients": [],
             "max_protocol_clients": if max == "7.3" { serde_json::json!([{"address": "10.9.9.9:1", "log_group": "app"}]) } else { serde_json::json!([]) }}
        ]})
    };
    h.model.state().clients = client("7.1");
    h.cluster.spec.version = "7.3.43".into();
    let pods: Api<Pod> = Api::namespaced(h.plane.client.clone(), NS);
    let images = |list: &[Pod], i: usize| -> Vec<String> {
        list.iter()
            .map(|p| {
                p.spec.as_ref().unwrap().containers[i]
                    .image
                    .clone()
                    .unwrap()
            })
            .collect()
    };
    for _ in 0..3 {
        let report = h.pass().await;
        assert!(
            format!("{report:?}").contains("IncompatibleClients"),
            "{report:?}"
        );
        h.clock.advance(std::time::Duration::from_secs(5));
    }
    let list = pods.list(&ListParams::default()).await.unwrap().items;
    assert!(
        images(&list, 1).iter().all(|i| i.ends_with(":7.1.57")),
        "nothing moves while a client cannot follow"
    );
    assert!(!h.changes().iter().any(|c| c.starts_with("kill")));
    // The client loads the 7.3 library now.
    h.model.state().clients = client("7.3");
    let mut kill_at = None;
    for n in 0..30 {
        let list = pods.list(&ListParams::default()).await.unwrap().items;
        let before_kills = h.changes().iter().filter(|c| c.starts_with("kill")).count();
        h.pass().await;
        let kills: Vec<String> = h
            .changes()
            .into_iter()
            .filter(|c| c.starts_with("kill"))
            .collect();
        if kills.len() > before_kills && kill_at.is_none() {
            kill_at = Some(n);
            // Every sidecar ran 7.3 and every main container still 7.1 when the kill came.
            assert!(
                images(&list, 1).iter().all(|i| i.ends_with(":7.3.43")),
                "{list:?}"
            );
            assert!(images(&list, 0).iter().all(|i| i.ends_with(":7.1.57")));
            assert_eq!(
                kills.last().unwrap().split_whitespace().count(),
                7,
                "every process in one kill: {kills:?}"
            );
        }
        h.clock.advance(std::time::Duration::from_secs(5));
    }
    assert!(kill_at.is_some(), "{:?} {:?}", h.changes(), h.events);
    let kills = h.changes().iter().filter(|c| c.starts_with("kill")).count();
    assert_eq!(kills, 1, "{:?}", h.changes());
    // Before the kill every group was recorded as prepared (the list operator instances share);
    // after it the list is cleared.
    let changes = h.changes();
    let kill = changes.iter().position(|c| c.starts_with("kill")).unwrap();
    for id in ["demo-storage-1", "demo-log-2", "demo-stateless-1"] {
        assert!(
            changes[..kill]
                .iter()
                .any(|c| c.starts_with("set") && c.ends_with(&format!("upgrades/7.3.43/{id}"))),
            "{id}: {changes:?}"
        );
    }
    assert!(
        changes[kill..].iter().any(|c| c.starts_with("clearrange")),
        "{changes:?}"
    );
    let prefix = crate::foundationdb::admin::cli::upgrades_prefix("7.3.43");
    assert!(!h.model.state().kv.keys().any(|k| k.starts_with(&prefix)));
    assert_eq!(h.status().running_version.as_deref(), Some("7.3.43"));
    let list = pods.list(&ListParams::default()).await.unwrap().items;
    assert!(
        images(&list, 0).iter().all(|i| i.ends_with(":7.3.43")),
        "{list:?}"
    );
    assert!(
        h.model
            .state()
            .processes
            .values()
            .all(|p| p.version == "7.3.43"),
        "{:?}",
        h.model.state().processes
    );
    assert!(
        h.events.iter().any(|(r, _)| r == "UpgradeBounced"),
        "{:?}",
        h.events
    );
}

#[tokio::test]
async fn a_lock_wait_whose_need_went_away_does_not_hold_reconciled_back() {
    // Found by the simulation (FDB_SIM_SEED=37): `needsLock` was only cleared when the lock
    // was taken, so once nothing needed the lock any more the cluster never reconciled.
    let mut h = Harness::start(spec()).await;
    h.passes(10).await;
    let now = h.clock.now().as_second();
    let other = LockValue {
        id: "dc2".into(),
        start: now,
        end: now + 600,
    };
    h.model.state().kv.insert(LOCK_KEY.to_vec(), other.pack());
    // A Pod spec change: UpdatePods waits for the lock.
    h.cluster.spec.pod_template.annotations =
        BTreeMap::from([(build::RESTARTED_AT.into(), "a".into())]);
    h.cluster.metadata.generation = Some(2);
    h.passes(2).await;
    assert_eq!(h.status().common.generations.needs_lock, Some(2));
    // Reverted: nothing needs the lock any more.
    h.cluster.spec.pod_template.annotations = BTreeMap::new();
    h.cluster.metadata.generation = Some(3);
    h.passes(3).await;
    assert_eq!(h.status().common.generations.needs_lock, None);
    assert_eq!(
        h.status().common.generations.reconciled,
        Some(3),
        "{:?}",
        h.status().common.generations
    );
}

#[tokio::test]
async fn a_group_being_removed_whose_pod_comes_back_with_a_new_ip_is_excluded_at_both() {
    // Found by the simulation (changing Pod IPs, exclusions by address): log-3's old address
    // was excluded, its Pod was lost and created again by AddPods with a new IP; on that same
    // pass the missing-process rule confirmed the old address and the group's claim was
    // deleted while the new process, not excluded, was coming up.
    let mut h = Harness::start(serde_json::json!({"version": "7.1.57",
        "processCounts": {"storage": 3, "log": 3, "stateless": 1}}))
    .await;
    h.passes(10).await;
    h.cluster.spec.process_counts.log = 2;
    h.cluster.metadata.generation = Some(2);
    h.pass().await;
    let old_ip = h.ips["demo-log-3"].clone();
    let old = format!("{old_ip}:4501");
    assert!(
        h.changes()
            .iter()
            .any(|c| c.starts_with("exclude") && c.contains(&old)),
        "{:?}",
        h.changes()
    );
    // The Pod is lost; it comes back with another IP.
    let pods: Api<Pod> = Api::namespaced(h.plane.client.clone(), NS);
    pods.delete("demo-log-3", &Default::default())
        .await
        .unwrap();
    h.ips.insert("demo-log-3".into(), "10.1.0.99".into());
    h.clock.advance(std::time::Duration::from_secs(5));
    h.pass().await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(h.plane.client.clone(), NS);
    assert!(
        claims.get_opt("demo-log-3-data").await.unwrap().is_some(),
        "the claim is kept while its Pod comes back: {:?}",
        h.events
    );
    h.clock.advance(std::time::Duration::from_secs(5));
    h.pass().await;
    let g = h
        .status()
        .process_groups
        .iter()
        .find(|g| g.process_group_id == "demo-log-3")
        .unwrap()
        .clone();
    assert_eq!(g.addresses, [old_ip.clone(), "10.1.0.99".to_owned()]);
    h.passes(10).await;
    assert!(
        h.changes()
            .iter()
            .any(|c| c.starts_with("exclude") && c.contains("10.1.0.99:4501")),
        "{:?}",
        h.changes()
    );
    let include = h
        .changes()
        .into_iter()
        .find(|c| c.starts_with("include"))
        .unwrap_or_default();
    assert!(
        include.contains(&old) && include.contains("10.1.0.99:4501"),
        "{include}: {:?}",
        h.changes()
    );
    assert!(!h.pod_names().await.contains(&"demo-log-3".to_owned()));
}

#[tokio::test]
async fn buggified_pods_are_recreated_at_once_and_back_when_the_spec_lets_them_go() {
    let mut h = Harness::start(spec()).await;
    h.passes(10).await;
    assert_eq!(h.status().common.generations.reconciled, Some(1));
    let pods: Api<Pod> = Api::namespaced(h.plane.client.clone(), NS);
    let uid = |p: &Pod| p.metadata.uid.clone().unwrap();
    let before: BTreeMap<String, String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .iter()
        .map(|p| (p.name_any(), uid(p)))
        .collect();
    h.cluster.spec.buggify.crash_loop = vec!["demo-storage-2".into()];
    h.cluster.spec.buggify.no_schedule = vec!["demo-stateless-1".into()];
    h.cluster.metadata.generation = Some(2);
    h.passes(3).await;
    let after: BTreeMap<String, Pod> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.name_any(), p))
        .collect();
    // Both buggified Pods were recreated, in the same pass, and no other.
    for (name, old) in &before {
        let recreated = uid(&after[name]) != *old;
        assert_eq!(
            recreated,
            name == "demo-storage-2" || name == "demo-stateless-1",
            "{name}"
        );
    }
    let crash = &after["demo-storage-2"];
    assert_eq!(
        crash.spec.as_ref().unwrap().containers[0].command,
        Some(vec![build::CRASH_LOOP.to_owned()])
    );
    assert_eq!(
        crash.annotations().get(build::BUGGIFY).map(String::as_str),
        Some("crash-loop")
    );
    // The spec hash leaves buggification out: UpdatePods does not act on it.
    assert_eq!(
        crash.annotations()[build::SPEC_HASH],
        build::pod(&h.cluster, "demo-storage-2", ProcessClass::Storage, None)
            .unwrap()
            .annotations()[build::SPEC_HASH]
    );
    let pending = &after["demo-stateless-1"];
    assert_eq!(
        pending
            .spec
            .as_ref()
            .unwrap()
            .node_selector
            .as_ref()
            .unwrap()[build::NO_SCHEDULE_LABEL],
        "true"
    );
    assert!(
        h.events
            .iter()
            .any(|(r, n)| r == "PodsDeletedForBuggification" && n.contains("demo-storage-2")),
        "{:?}",
        h.events
    );
    // Its process is missing, its Pod is Pending: not reconciled.
    let group = |h: &Harness, id: &str| {
        h.status()
            .process_groups
            .iter()
            .find(|g| g.process_group_id == id)
            .unwrap()
            .clone()
    };
    assert!(
        super::condition(
            &group(&h, "demo-storage-2"),
            super::conditions::MISSING_PROCESSES
        )
        .is_some()
    );
    assert!(
        super::condition(
            &group(&h, "demo-stateless-1"),
            super::conditions::POD_PENDING
        )
        .is_some()
    );
    assert_ne!(h.status().common.generations.reconciled, Some(2));
    // Let go: the Pods are recreated without buggification and the cluster converges.
    h.cluster.spec.buggify = Default::default();
    h.cluster.metadata.generation = Some(3);
    h.passes(10).await;
    let last: BTreeMap<String, Pod> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.name_any(), p))
        .collect();
    assert_ne!(uid(&last["demo-storage-2"]), uid(crash));
    assert_eq!(
        last["demo-storage-2"].spec.as_ref().unwrap().containers[0].command,
        Some(vec!["fdb-kubernetes-monitor".to_owned()])
    );
    assert!(
        !last["demo-storage-2"]
            .annotations()
            .contains_key(build::BUGGIFY)
    );
    assert_eq!(
        h.status().common.generations.reconciled,
        Some(3),
        "{:?}",
        h.status().common
    );
}

#[tokio::test]
async fn a_new_claim_size_replaces_the_stateful_groups_one_at_a_time_excluding_first() {
    // The harness puts a group in zone n1..n3 by its number, not as a scheduler spreads them: a
    // replacement may land in a zone that already has one, so three zones for `double`'s
    // coordinators could run out; `single` needs one.
    let mut h = Harness::start(serde_json::json!({"version": "7.1.57",
        "databaseConfiguration": {"redundancyMode": "single"},
        "processCounts": {"storage": 3, "log": 2, "stateless": 1}}))
    .await;
    h.passes(10).await;
    assert_eq!(h.status().common.generations.reconciled, Some(1));
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(h.plane.client.clone(), NS);
    let annotation = |c: &PersistentVolumeClaim| c.annotations()[build::CLAIM_SPEC].clone();
    for c in claims.list(&ListParams::default()).await.unwrap() {
        assert_eq!(annotation(&c), "1Gi|");
    }
    h.cluster.spec.storage.size = "2Gi".into();
    h.cluster.metadata.generation = Some(2);
    h.passes(2).await;
    // One group at a time (maxConcurrentReplacements 1), with a replacement added.
    let marked: Vec<String> = h
        .status()
        .process_groups
        .iter()
        .filter(|g| g.removal_timestamp.is_some())
        .map(|g| g.process_group_id.clone())
        .collect();
    assert_eq!(marked.len(), 1, "{marked:?}");
    assert!(
        h.events
            .iter()
            .any(|(r, n)| r == "ReplacingMisconfiguredProcessGroups" && n.contains("2Gi")),
        "{:?}",
        h.events
    );
    // Run until every stateful group sits on a 2Gi claim; data moves finish as they start.
    // (A coordinator change is a recovery: the next exclusion waits 120 s, 24 passes.)
    for _ in 0..400 {
        h.model.finish_moves();
        h.passes(1).await;
        let all = claims.list(&ListParams::default()).await.unwrap();
        // Never reconciled while a group still sits on a claim of the old size (a removed
        // group's Pod and claim may still be going: `hasPendingRemoval`).
        if h.status().common.generations.reconciled == Some(2) {
            assert!(
                all.iter().all(|c| annotation(c) == "2Gi|"
                    || h.status().process_groups.iter().any(|g| {
                        c.name_any() == build::claim_name(&g.process_group_id)
                            && g.removal_timestamp.is_some()
                    })),
                "{:?} {:?}",
                all.iter()
                    .map(|c| (c.name_any(), annotation(c)))
                    .collect::<Vec<_>>(),
                h.status()
            );
            if all.iter().all(|c| annotation(c) == "2Gi|") {
                break;
            }
        }
    }
    let all = claims.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        all.items.len(),
        5,
        "3 storage + 2 log claims: {:?} {:?} {:?}",
        all.iter()
            .map(|c| (c.name_any(), annotation(c)))
            .collect::<Vec<_>>(),
        h.status().process_groups,
        h.events
    );
    assert!(
        all.iter().all(|c| annotation(c) == "2Gi|"),
        "{:?}",
        all.iter().map(annotation).collect::<Vec<_>>()
    );
    assert_eq!(
        h.status().common.generations.reconciled,
        Some(2),
        "{:?}",
        h.status().common
    );
    // Each of the five old groups was excluded before its claim went (IDs are reused once
    // free, as FoundationDB's operator does).
    let changes = h.changes();
    assert!(
        changes.iter().filter(|c| c.starts_with("exclude")).count() >= 5,
        "{changes:?}"
    );
}

/// The Pods' names with their UIDs and spec hashes.
async fn pod_identities(h: &Harness) -> BTreeMap<String, (String, String)> {
    let pods: Api<Pod> = Api::namespaced(h.plane.client.clone(), NS);
    pods.list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .map(|p| {
            let hash = p.annotations()[build::SPEC_HASH].clone();
            (p.name_any(), (p.uid().unwrap(), hash))
        })
        .collect()
}

#[tokio::test]
async fn the_headless_service_is_made_when_asked_for_and_deleted_when_not() {
    let mut h = Harness::start(spec()).await;
    h.passes(8).await;
    let services: Api<Service> = Api::namespaced(h.plane.client.clone(), NS);
    assert!(
        services.get_opt("demo").await.unwrap().is_none(),
        "none by default"
    );
    let pods_before = pod_identities(&h).await;
    h.cluster.spec.routing.headless_service = true;
    h.cluster.metadata.generation = Some(2);
    h.passes(2).await;
    let svc = services.get("demo").await.unwrap();
    let spec = svc.spec.clone().unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
    assert_eq!(spec.publish_not_ready_addresses, Some(true));
    let selector = spec.selector.unwrap();
    let pods: Api<Pod> = Api::namespaced(h.plane.client.clone(), NS);
    for p in pods.list(&ListParams::default()).await.unwrap() {
        for (k, v) in &selector {
            assert_eq!(p.labels().get(k), Some(v), "{} {k}", p.name_any());
        }
    }
    let owner = &svc.owner_references()[0];
    assert_eq!(Some(owner.uid.clone()), h.cluster.uid());
    assert_eq!(svc.labels()[MANAGED_BY], MANAGER);
    // No Pod was touched.
    h.passes(2).await;
    assert!(services.get_opt("demo").await.unwrap().is_some());
    assert_eq!(pod_identities(&h).await, pods_before);
    // Off: deleted; and a pass with nothing to delete is fine.
    h.cluster.spec.routing.headless_service = false;
    h.cluster.metadata.generation = Some(3);
    h.passes(3).await;
    assert!(services.get_opt("demo").await.unwrap().is_none());
    assert_eq!(h.status().common.generations.reconciled, Some(3));
}

#[tokio::test]
async fn a_users_service_of_the_clusters_name_is_never_taken_over_or_deleted() {
    let mut h = Harness::start(spec()).await;
    h.passes(8).await;
    let services: Api<Service> = Api::namespaced(h.plane.client.clone(), NS);
    // The user's own, unlabelled (outside the operator's cache).
    let mine = Service {
        metadata: kube::api::ObjectMeta {
            name: Some("demo".into()),
            labels: Some(BTreeMap::from([("app".into(), "mine".into())])),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                port: 80,
                ..Default::default()
            }]),
            selector: Some(BTreeMap::from([("app".into(), "mine".into())])),
            ..Default::default()
        }),
        status: None,
    };
    services
        .create(&PostParams::default(), &mine)
        .await
        .unwrap();
    let untouched = |svc: &Service| {
        svc.owner_references().is_empty()
            && svc.labels().get("app").map(String::as_str) == Some("mine")
            && svc.spec.as_ref().unwrap().cluster_ip.as_deref() != Some("None")
    };
    h.cluster.spec.routing.headless_service = true;
    h.cluster.metadata.generation = Some(2);
    h.passes(2).await;
    assert!(untouched(&services.get("demo").await.unwrap()));
    let degraded = crate::conditions::get(
        &h.status().common.conditions,
        steward_api::common::condition_types::DEGRADED,
    )
    .unwrap()
    .clone();
    assert_eq!(degraded.reason, "ServiceNameTaken");
    assert!(
        degraded.message.contains("spec.routing.headlessService"),
        "{}",
        degraded.message
    );
    assert!(
        h.events.iter().any(|(r, _)| r == "ServiceNameTaken"),
        "{:?}",
        h.events
    );
    h.cluster.spec.routing.headless_service = false;
    h.cluster.metadata.generation = Some(3);
    h.passes(2).await;
    assert!(untouched(&services.get("demo").await.unwrap()));
    // Even carrying Steward's labels (so in the operator's cache), without the cluster as its
    // owner it is not Steward's: neither deleted nor taken over.
    let patch = serde_json::json!({"metadata": {"labels": {
        MANAGED_BY: MANAGER, "app.kubernetes.io/instance": "demo",
        "app.kubernetes.io/name": "foundationdb", "app.kubernetes.io/component": "headless"}}});
    services
        .patch("demo", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    h.passes(2).await;
    assert!(untouched(&services.get("demo").await.unwrap()));
    h.cluster.spec.routing.headless_service = true;
    h.cluster.metadata.generation = Some(4);
    h.passes(2).await;
    assert!(untouched(&services.get("demo").await.unwrap()));
}

#[tokio::test]
async fn template_labels_and_annotations_are_patched_in_place_and_a_removed_key_stays() {
    let mut h = Harness::start(spec()).await;
    h.passes(8).await;
    let before = pod_identities(&h).await;
    assert_eq!(before.len(), 6);
    h.cluster.spec.pod_template.labels = BTreeMap::from([("team".into(), "a".into())]);
    h.cluster.spec.pod_template.annotations = BTreeMap::from([("note".into(), "x".into())]);
    h.cluster.metadata.generation = Some(2);
    h.passes(2).await;
    let pods: Api<Pod> = Api::namespaced(h.plane.client.clone(), NS);
    for p in pods.list(&ListParams::default()).await.unwrap() {
        assert_eq!(p.labels().get("team").map(String::as_str), Some("a"));
        assert_eq!(p.annotations().get("note").map(String::as_str), Some("x"));
    }
    // No Pod recreated, no spec hash changed.
    assert_eq!(pod_identities(&h).await, before);
    // The key removed from the spec stays; the new one is added.
    h.cluster.spec.pod_template.labels = BTreeMap::from([("owner".into(), "b".into())]);
    h.cluster.metadata.generation = Some(3);
    h.passes(2).await;
    for p in pods.list(&ListParams::default()).await.unwrap() {
        assert_eq!(p.labels().get("team").map(String::as_str), Some("a"));
        assert_eq!(p.labels().get("owner").map(String::as_str), Some("b"));
    }
    // Steward's own label wins over the template's, and a claim's lost core label comes back.
    h.cluster.spec.pod_template.labels = BTreeMap::from([(GROUP_LABEL.into(), "x".into())]);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(h.plane.client.clone(), NS);
    let drop = serde_json::json!({"metadata": {"labels": {GROUP_LABEL: null}}});
    claims
        .patch(
            "demo-storage-1-data",
            &PatchParams::default(),
            &Patch::Merge(&drop),
        )
        .await
        .unwrap();
    h.passes(2).await;
    let claim = claims.get("demo-storage-1-data").await.unwrap();
    assert_eq!(claim.labels()[GROUP_LABEL], "demo-storage-1");
    let p = pods.get("demo-log-1").await.unwrap();
    assert_eq!(p.labels()[GROUP_LABEL], "demo-log-1");
    assert_eq!(pod_identities(&h).await, before);
    assert_eq!(h.status().common.generations.reconciled, Some(3));
}

#[tokio::test]
async fn a_pod_update_never_recreates_the_pod_of_a_sitting_coordinator_it_moves_first() {
    // `single`: one coordinator. Found trying the example after an operator upgrade: on one
    // Node (one zone) UpdatePods recreated every Pod at once, the coordinator's among them; its
    // Pod came back at another address and the database was lost.
    let mut h = Harness::start(serde_json::json!({"version": "7.1.57",
        "databaseConfiguration": {"redundancyMode": "single"},
        "processCounts": {"storage": 2, "log": 1, "stateless": 1}}))
    .await;
    h.passes(10).await;
    assert_eq!(h.status().common.generations.reconciled, Some(1));
    let pods: Api<Pod> = Api::namespaced(h.plane.client.clone(), NS);
    h.cluster.spec.pod_template.annotations =
        BTreeMap::from([(build::RESTARTED_AT.into(), "a".into())]);
    h.cluster.metadata.generation = Some(2);
    let uids = |list: &[Pod]| -> BTreeMap<String, String> {
        list.iter()
            .map(|p| (p.name_any(), p.metadata.uid.clone().unwrap()))
            .collect()
    };
    let mut moved = false;
    for _ in 0..40 {
        let before = uids(&pods.list(&ListParams::default()).await.unwrap().items);
        let coordinators = crate::foundationdb::admin::status::coordinators_of(
            &h.model.state().connection_string.clone(),
        );
        let sitting: Vec<String> = h
            .ips
            .iter()
            .filter(|(_, ip)| {
                coordinators
                    .iter()
                    .any(|c| c.starts_with(&format!("{ip}:")))
            })
            .map(|(id, _)| id.clone())
            .collect();
        h.pass().await;
        h.clock.advance(std::time::Duration::from_secs(5));
        let after = uids(&pods.list(&ListParams::default()).await.unwrap().items);
        for (id, uid) in &before {
            if after.get(id) != Some(uid) {
                assert!(
                    !sitting.contains(id),
                    "{id}'s Pod was deleted while it held a coordinator ({coordinators:?})"
                );
            }
        }
        moved |= h.events.iter().any(|(r, _)| r == "CoordinatorsChanged");
        if h.status().common.generations.reconciled == Some(2) {
            break;
        }
    }
    assert_eq!(
        h.status().common.generations.reconciled,
        Some(2),
        "{:?} {:?}",
        h.status().common,
        h.events
    );
    assert!(
        moved,
        "the coordinator moved to a recreated Pod: {:?}",
        h.events
    );
    let list = pods.list(&ListParams::default()).await.unwrap().items;
    assert!(
        list.iter()
            .all(|p| p.annotations().get(build::RESTARTED_AT).map(String::as_str) == Some("a"))
    );
}
