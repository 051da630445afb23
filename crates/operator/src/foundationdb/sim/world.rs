//! The world: the fake API server's Pods mirrored into the model (an address, a zone of three
//! by process number, a process with the command line its monitor configuration gives, a
//! monitor report), the clock, the operator (its context; its status is the cluster's), and
//! the random events.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, PodStatus};
use kube::core::PartialObjectMeta;
use kube::runtime::{reflector, watcher};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use steward_api::foundationdb::{FoundationDBCluster, ProcessClass};

use super::api::{self, GroupView, Objects, Shared};
use super::{NS, PASS};
use crate::clock::{Clock, ManualClock};
use crate::config::{TimeoutArgs, WebhookArgs};
use crate::foundationdb::admin::FdbAdmin;
use crate::foundationdb::admin::cli::{LOCK_KEY, LockValue};
use crate::foundationdb::admin::model::{ModelFdb, Process};
use crate::foundationdb::build::{self, CLASS_LABEL};
use crate::foundationdb::controller::new_pass;
use crate::foundationdb::steps::update_status::UpdateStatus;
use crate::foundationdb::{CONTROLLER, FdbPass, FdbStores, Settings, steps};
use crate::metrics::Metrics;
use crate::pipeline::{Outcome, PassResult, Pipeline, SubReconciler};
use crate::resources::packed::CachedMeta;
use crate::resources::pods::{CachedPod, CachedPodSpec};
use crate::runtime::context::Context;
use crate::webhook::WebhookSender;

/// Each class's monitor configuration and its text.
type Configs = BTreeMap<&'static str, (serde_json::Value, String)>;

/// What a seed did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub passes: u32,
    pub spec_edits: u32,
    pub kills: u32,
    pub operator_restarts: u32,
    pub dropped_passes: u32,
    pub update_deletes: u32,
    pub remove_deletes: u32,
    pub exclusions: u32,
    pub coordinator_changes: u32,
    pub bounces: u32,
    /// A digest of the final state and log, for the replay check.
    pub digest: String,
}

/// Wraps a step: tells the API which step runs and what the pass's process groups are.
struct Traced {
    inner: Box<dyn SubReconciler<FdbPass>>,
    api: Shared,
}

#[async_trait]
impl SubReconciler<FdbPass> for Traced {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn destructive(&self) -> bool {
        self.inner.destructive()
    }
    async fn reconcile(&self, pass: &mut FdbPass) -> Result<Outcome, crate::error::Error> {
        {
            let mut o = api::lock(&self.api);
            o.step = self.inner.name();
            o.groups = pass
                .status
                .process_groups
                .iter()
                .map(|g| GroupView {
                    id: g.process_group_id.clone(),
                    class: g
                        .process_class
                        .or_else(|| {
                            build::parse_group_id(&pass.prefix, &g.process_group_id).map(|(c, _)| c)
                        })
                        .map_or("", ProcessClass::as_str)
                        .to_owned(),
                    removing: g.removal_timestamp.is_some(),
                    exclusion_skipped: g.exclusion_skipped,
                })
                .collect();
        }
        self.inner.reconcile(pass).await
    }
}

pub(super) struct World {
    pub seed: u64,
    pub rng: StdRng,
    pub cluster: FoundationDBCluster,
    pub model: ModelFdb,
    pub clock: ManualClock,
    pub api: Shared,
    client: kube::Client,
    ctx: Arc<Context>,
    metrics: Metrics,
    pub pass_no: u32,
    /// The last pass converged (and was not cut short).
    pub converged_last: bool,
    /// Processes gone (a kill) until this pass, by Pod.
    down: BTreeMap<String, u32>,
    /// Each class's monitor configuration (and its text) at a generation.
    configs: Option<(i64, Configs)>,
    /// The configuration each monitor report carries, by Pod.
    report_configs: BTreeMap<String, String>,
    /// When each process (by address) started.
    started: BTreeMap<String, i64>,
    last_recovery: i64,
    /// Data moves only sometimes until this pass.
    slow_moves_until: u32,
    /// Operator deletions leave Pods terminating until this pass.
    linger_until: u32,
    /// The next pass runs only this many steps (an operator crash midway).
    crash_after: Option<usize>,
    log_seen: usize,
    pub log: VecDeque<String>,
    pub stats: Stats,
    settings: Settings,
}

fn context(
    client: &kube::Client,
    clock: &ManualClock,
    model: &ModelFdb,
    settings: Settings,
) -> (Arc<Context>, Metrics) {
    let metrics = Metrics::new();
    let webhooks = WebhookSender::new(&WebhookArgs::default(), metrics.clone()).expect("webhooks");
    let mut ctx = Context::new(
        client.clone(),
        metrics.clone(),
        webhooks,
        Arc::new(clock.clone()),
        TimeoutArgs::default(),
        None,
        "sim".into(),
    );
    ctx.seams
        .insert::<Arc<dyn FdbAdmin>>(Arc::new(model.clone()));
    ctx.seams.insert::<Settings>(settings);
    (Arc::new(ctx), metrics)
}

impl World {
    pub fn new(seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let storage = rng.random_range(3..=5);
        let log = rng.random_range(2..=3);
        let cluster: FoundationDBCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "steward.dev/v1alpha1", "kind": "FoundationDBCluster",
            "metadata": {"name": "demo", "namespace": NS, "uid": "uid-demo", "generation": 1},
            "spec": {"version": "7.1.57",
                "processCounts": {"storage": storage, "log": log, "stateless": 1},
                "minimumUptimeSecondsForBounce": 30,
                "automationOptions": {"replacements": {"failureDetectionTimeSeconds": 120}}}
        }))
        .expect("cluster");
        let model = ModelFdb::default();
        let clock = ManualClock::new(jiff::Timestamp::from_second(1_800_000_000).expect("time"));
        let now = clock.now().as_second();
        {
            let mut s = model.state();
            s.available = true;
        }
        // A recreated Pod gets a new IP in half the seeds; half the seeds exclude by locality,
        // the others by address.
        let fresh_ips = rng.random_bool(0.5);
        let localities = rng.random_bool(0.5);
        let mut cluster = cluster;
        cluster.spec.use_localities_for_exclusion = localities;
        let api: Shared = Arc::new(std::sync::Mutex::new(Objects::new(
            model.clone(),
            clock.now(),
            fresh_ips,
        )));
        let client = api::client(api.clone());
        let settings = Settings {
            min_recovery_seconds_for_exclusion: 60.0,
            min_recovery_seconds_for_inclusion: 120.0,
            ..Settings::default()
        };
        let (ctx, metrics) = context(&client, &clock, &model, settings);
        let mut w = Self {
            seed,
            rng,
            cluster,
            model,
            clock,
            api,
            client,
            ctx,
            metrics,
            pass_no: 0,
            converged_last: false,
            down: BTreeMap::new(),
            started: BTreeMap::new(),
            report_configs: BTreeMap::new(),
            configs: None,
            last_recovery: now - 1000,
            slow_moves_until: 0,
            linger_until: 0,
            crash_after: None,
            log_seen: 0,
            log: VecDeque::new(),
            stats: Stats::default(),
            settings,
        };
        w.note(format!(
            "start: storage {storage}, log {log}, stateless 1, fresh IPs {fresh_ips}, localities {localities}"
        ));
        w
    }

    pub fn note(&mut self, line: String) {
        if self.log.len() >= 60 {
            self.log.pop_front();
        }
        self.log.push_back(line);
    }

    pub fn fail(&self, why: String) -> ! {
        let mut text = format!(
            "FDB_SIM_SEED={} failed at pass {}: {why}\nlast actions:\n",
            self.seed, self.pass_no
        );
        for l in &self.log {
            text.push_str("  ");
            text.push_str(l);
            text.push('\n');
        }
        panic!("{text}");
    }

    /// Mirrors the store's Pods into the model and returns the caches the pass reads.
    fn mirror(&mut self) -> FdbStores {
        let now = self.clock.now();
        let now_s = now.as_second();
        let mut o = api::lock(&self.api);
        o.now = now;
        o.pass = self.pass_no;
        o.linger = if self.pass_no < self.linger_until {
            1 + (self.pass_no % 3)
        } else {
            0
        };
        o.expire();
        let (pod_store, mut pod_writer) = reflector::store::<CachedPod>();
        let (claim_store, mut claim_writer) =
            reflector::store::<CachedMeta<PersistentVolumeClaim>>();
        let mut state = self.model.state();
        if let Some(cs) = self
            .cluster
            .status
            .as_ref()
            .and_then(|s| s.connection_string.clone())
            && state.connection_string.is_empty()
        {
            state.connection_string = cs;
        }
        let mut alive = Vec::new();
        let mut recovered = false;
        let generation = self.cluster.metadata.generation.unwrap_or_default();
        if self.configs.as_ref().is_none_or(|(g, _)| *g != generation) {
            let configs = ProcessClass::ALL
                .into_iter()
                .map(|c| {
                    let config = build::monitor_config(&self.cluster, c);
                    let text = config.to_string();
                    (c.as_str(), (config, text))
                })
                .collect();
            self.configs = Some((generation, configs));
        }
        let configs = &self.configs.as_ref().expect("computed").1;
        for (id, pod) in &o.pods {
            let ip = o.ips.get(id).cloned().unwrap_or_default();
            let zone = o.zone(id);
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            let Some(class) = labels
                .get(CLASS_LABEL)
                .and_then(|c| ProcessClass::ALL.into_iter().find(|k| k.as_str() == c))
            else {
                continue;
            };
            let terminating = o.terminating.contains_key(id);
            let killed = self.down.get(id).is_some_and(|until| self.pass_no < *until);
            if !terminating && !killed {
                let env = || {
                    BTreeMap::from([
                        ("FDB_PUBLIC_IP".to_owned(), ip.clone()),
                        ("FDB_INSTANCE_ID".to_owned(), id.clone()),
                        ("FDB_MACHINE_ID".to_owned(), id.clone()),
                        ("FDB_ZONE_ID".to_owned(), zone.clone()),
                    ])
                };
                let (config, config_text) = &configs[class.as_str()];
                let address = format!("{ip}:{}", build::PORT);
                let line = || {
                    format!(
                        "fdbserver {}",
                        build::command_line(config, &env()).unwrap_or_default()
                    )
                };
                match state.processes.get_mut(&address) {
                    Some(p) if p.uptime == 0.0 => {
                        // Killed (a bounce): its monitor started it again with the active
                        // configuration; the cluster recovered.
                        p.command_line = line();
                        self.started.insert(address.clone(), now_s);
                        recovered = true;
                    }
                    Some(_) => {}
                    None => {
                        self.started.insert(address.clone(), now_s);
                        state.processes.insert(
                            address.clone(),
                            Process {
                                class: class.as_str().to_owned(),
                                zone: zone.clone(),
                                instance_id: id.clone(),
                                command_line: line(),
                                uptime: 1.0,
                                version: self.cluster.spec.version.clone(),
                            },
                        );
                    }
                }
                if let Some(p) = state.processes.get_mut(&address) {
                    p.uptime = (now_s - self.started[&address]) as f64 + 1.0;
                }
                let current = state.reports.get(id).is_some_and(|r| {
                    self.report_configs
                        .get(id)
                        .is_some_and(|c| c == config_text)
                        && !r.is_empty()
                });
                if !current {
                    state.reports.insert(
                        id.clone(),
                        serde_json::json!({"currentConfiguration": config_text, "environment": env()})
                            .to_string(),
                    );
                    self.report_configs.insert(id.clone(), config_text.clone());
                }
                alive.push(address);
            } else {
                state.reports.remove(id);
                self.report_configs.remove(id);
            }
            let cached = CachedPod::new(
                pod.metadata.clone(),
                Some(CachedPodSpec {
                    node_name: Some(zone),
                }),
                Some(PodStatus {
                    phase: Some("Running".into()),
                    pod_ip: Some(ip),
                    ..PodStatus::default()
                }),
            );
            pod_writer.apply_watcher_event(&watcher::Event::Apply(cached));
        }
        let lost_transaction_system = state
            .processes
            .iter()
            .any(|(a, p)| !alive.contains(a) && p.class != "storage");
        state.processes.retain(|a, _| alive.contains(a));
        let pods: Vec<String> = o.pods.keys().cloned().collect();
        state.reports.retain(|id, _| pods.contains(id));
        // A transaction-system process lost, or a bounce: a recovery.
        if recovered || lost_transaction_system {
            self.last_recovery = now_s;
        }
        state.seconds_since_recovery = (now_s - self.last_recovery) as f64;
        for claim in o.claims.values() {
            claim_writer.apply_watcher_event(&watcher::Event::Apply(CachedMeta::new(
                claim.metadata.clone(),
            )));
        }
        let config_map = o.config_map.as_ref().and_then(|v| {
            let meta = serde_json::from_value(v["metadata"].clone()).ok()?;
            Some(PartialObjectMeta::<ConfigMap> {
                types: None,
                metadata: meta,
                _phantom: std::marker::PhantomData,
            })
        });
        drop(state);
        drop(o);
        let moves = if self.pass_no < self.slow_moves_until {
            0.2
        } else {
            1.0
        };
        if self.rng.random_bool(moves) {
            self.model.finish_moves();
        }
        let (config_maps, mut cm_writer) = reflector::store::<PartialObjectMeta<ConfigMap>>();
        if let Some(cm) = config_map {
            cm_writer.apply_watcher_event(&watcher::Event::Apply(cm));
        }
        FdbStores {
            pods: pod_store.into(),
            claims: claim_store.into(),
            config_maps,
            services: reflector::store().0.into(),
        }
    }

    /// One operator pass (the whole pipeline, or a prefix of it when the operator crashes
    /// midway: then its status is not written); then the clock moves on.
    pub async fn pass(&mut self) {
        self.pass_no += 1;
        self.stats.passes += 1;
        let stores = self.mirror();
        let crash = self.crash_after.take();
        let steps: Vec<Box<dyn SubReconciler<FdbPass>>> = steps()
            .into_iter()
            .take(crash.unwrap_or(usize::MAX))
            .map(|inner| {
                Box::new(Traced {
                    inner,
                    api: self.api.clone(),
                }) as Box<dyn SubReconciler<FdbPass>>
            })
            .collect();
        let pipeline = Pipeline::new(
            CONTROLLER,
            Box::new(Traced {
                inner: Box::new(UpdateStatus),
                api: self.api.clone(),
            }),
            steps,
        );
        let mut pass = new_pass(&self.ctx, stores, Arc::new(self.cluster.clone()));
        let report = pipeline.run(&mut pass, &self.metrics).await;
        let result = match &report.result {
            PassResult::Converged => "converged".to_owned(),
            PassResult::Requeue { step, reason, .. } => format!("requeue at {step}: {reason}"),
            PassResult::Stopped { step, reason, .. } => format!("stopped at {step}: {reason}"),
            PassResult::Failed { step, message, .. } => format!("failed at {step}: {message}"),
        };
        self.converged_last = crash.is_none() && report.result == PassResult::Converged;
        if let Some(n) = crash {
            self.note(format!("pass {}: crashed after {n} steps", self.pass_no));
            self.crash_after = None;
        } else {
            let mut status = pass.status;
            status.common = pass.core.status;
            self.cluster.status = Some(status);
            self.note(format!("pass {}: {result}", self.pass_no));
        }
        let new: Vec<(u32, &'static str, String)> = {
            let o = api::lock(&self.api);
            self.stats.update_deletes = o.update_deletes;
            self.stats.remove_deletes = o.remove_deletes;
            o.log[self.log_seen..].to_vec()
        };
        self.log_seen += new.len();
        for (p, step, what) in new {
            self.note(format!("  pass {p} {step}: {what}"));
        }
        let changes = self.model.state().changes.clone();
        self.stats.exclusions = changes.iter().filter(|c| c.starts_with("exclude")).count() as u32;
        self.stats.coordinator_changes = changes
            .iter()
            .filter(|c| c.starts_with("coordinators"))
            .count() as u32;
        self.stats.bounces = changes.iter().filter(|c| c.starts_with("kill")).count() as u32;
        self.clock.advance(PASS);
    }

    fn bump(&mut self) {
        let g = self.cluster.metadata.generation.unwrap_or(1) + 1;
        self.cluster.metadata.generation = Some(g);
        self.stats.spec_edits += 1;
    }

    /// One random event.
    pub fn event(&mut self) {
        let now = self.clock.now().as_second();
        let pods: Vec<String> = {
            let o = api::lock(&self.api);
            o.pods
                .keys()
                .filter(|p| !o.terminating.contains_key(*p))
                .cloned()
                .collect()
        };
        match self.rng.random_range(0..12) {
            0 | 1 => {
                let c = &mut self.cluster.spec.process_counts;
                c.storage = self.rng.random_range(3..=6);
                c.log = self.rng.random_range(2..=4);
                c.stateless = self.rng.random_range(1..=2);
                let line = format!(
                    "event: counts storage {} log {} stateless {}",
                    c.storage, c.log, c.stateless
                );
                self.bump();
                self.note(line);
            }
            2 => {
                let n = self.rng.random_range(0..4);
                self.cluster.spec.custom_parameters = if n == 0 {
                    Vec::new()
                } else {
                    vec![format!("knob_max_trace_lines={}", n * 1000)]
                };
                self.bump();
                self.note(format!(
                    "event: custom parameters {:?}",
                    self.cluster.spec.custom_parameters
                ));
            }
            3 if self.rng.random_bool(0.5) => {
                let team = format!("t{}", self.rng.random_range(0..3));
                self.cluster.spec.pod_template.labels =
                    BTreeMap::from([("team".to_owned(), team.clone())]);
                self.bump();
                self.note(format!("event: Pod template label team={team}"));
            }
            3 => {
                let at = format!("restart-{}", self.rng.random_range(0..3));
                self.cluster
                    .spec
                    .pod_template
                    .annotations
                    .insert(build::RESTARTED_AT.to_owned(), at.clone());
                self.bump();
                self.note(format!("event: restart requested ({at})"));
            }
            4 | 5 if !pods.is_empty() => {
                let pod = pods[self.rng.random_range(0..pods.len())].clone();
                self.stats.kills += 1;
                if self.rng.random_bool(0.5) {
                    api::lock(&self.api).kill_pod(&pod);
                    self.note(format!("event: Pod {pod} deleted"));
                } else {
                    let passes = if self.rng.random_bool(0.2) {
                        self.rng.random_range(12..=20)
                    } else {
                        self.rng.random_range(1..=4)
                    };
                    self.down.insert(pod.clone(), self.pass_no + 1 + passes);
                    self.note(format!("event: process of {pod} gone for {passes} passes"));
                }
            }
            6 => {
                let (ctx, metrics) = context(&self.client, &self.clock, &self.model, self.settings);
                self.ctx = ctx;
                self.metrics = metrics;
                self.stats.operator_restarts += 1;
                if self.rng.random_bool(0.5) {
                    let n = self.rng.random_range(0..steps().len());
                    self.crash_after = Some(n);
                    self.stats.dropped_passes += 1;
                    self.note(format!(
                        "event: operator restart; the next pass crashes after {n} steps"
                    ));
                } else {
                    self.note("event: operator restart".into());
                }
            }
            7 => {
                let passes = self.rng.random_range(5..=20);
                self.slow_moves_until = self.pass_no + passes;
                self.note(format!("event: slow data movement for {passes} passes"));
            }
            8 => {
                self.last_recovery = now;
                self.note("event: recovery".into());
            }
            9 => {
                let seconds = self.rng.random_range(1..=6) * PASS.as_secs() as i64;
                let other = LockValue {
                    id: "other".into(),
                    start: now,
                    end: now + seconds,
                };
                self.model
                    .state()
                    .kv
                    .insert(LOCK_KEY.to_vec(), other.pack());
                self.note(format!(
                    "event: another instance holds the lock for {seconds}s"
                ));
            }
            _ => {
                let passes = self.rng.random_range(3..=10);
                self.linger_until = self.pass_no + passes;
                self.note(format!(
                    "event: deleted Pods terminate slowly for {passes} passes"
                ));
            }
        }
    }
}
