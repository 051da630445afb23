//! The end-to-end harness. Each test gets a fresh control plane — Steward's embedded API
//! server, the node agent running Pods as local processes and the operator — on free ports in
//! a temporary directory, and a fresh namespace. The test's client is admin; the operator runs
//! as the `steward-operator` ServiceAccount with exactly the RBAC of `deploy/rbac.yaml`, so a
//! missing permission fails the test with a 403. With `STEWARD_E2E_KUBECONFIG` set, it starts
//! only the node agent (joined to that cluster as a Node) and the operator (scoped to the
//! test's namespace) against the real cluster, so the same scenarios run on both.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, Resource};
use serde::de::DeserializeOwned;
use steward_operator::dev::{DevOptions, DevPlane, apply_manifests};
use steward_operator::dev_identity::OperatorIdentity;
use steward_operator::runtime::OperatorHandle;

/// One test's control plane.
pub struct Plane {
    /// A client for it.
    pub client: Client,
    /// The test's namespace.
    pub namespace: String,
    /// The temporary state directory.
    pub dir: tempfile::TempDir,
    embedded: Option<DevPlane>,
    real: Option<(Vec<steward_node::NodeHandle>, OperatorHandle)>,
    /// On a real cluster, the Nodes this test's agents registered (deleted at shutdown); each
    /// carries the label [`PIN_LABEL`] = the test's namespace.
    node_names: Vec<String>,
    /// On a real cluster: the operator's client (its requests counted, see `counting`).
    operator_client: Option<(Client, super::counting::Requests)>,
    /// Operator flags of this test on top of the e2e ones, kept for `restart_operator`.
    extra_operator_flags: Vec<String>,
}

fn shim() -> Vec<String> {
    vec![env!("CARGO_BIN_EXE_steward").to_owned(), "node-shim".into()]
}

/// In embedded mode the operator runs as the ServiceAccount of `deploy/serviceaccount.yaml`
/// with exactly the permissions `deploy/rbac.yaml` (and the Helm chart) grant.
fn operator_identity() -> OperatorIdentity {
    OperatorIdentity {
        manifests: [
            include_str!("../../../../deploy/serviceaccount.yaml"),
            include_str!("../../../../deploy/rbac.yaml"),
        ]
        .join("\n---\n"),
        namespace: "steward-system".into(),
        service_account: "steward-operator".into(),
    }
}

/// The operator flags every e2e test uses (short database timeouts), then the test's own.
fn operator_flags(namespace: Option<&str>, extra: &[String]) -> Vec<String> {
    let mut flags = vec!["--database-timeout-seconds".to_owned(), "2".to_owned()];
    if let Some(ns) = namespace {
        // On a real cluster the test's namespace is the operator's own too (schedule
        // ConfigMaps live there).
        flags.extend(["--namespace".to_owned(), ns.to_owned()]);
        flags.extend(["--lease-namespace".to_owned(), ns.to_owned()]);
    }
    flags.extend(extra.iter().cloned());
    flags
}

/// A started operator outside a `DevPlane`: the e2e flags plus what `DevPlane` sets itself.
async fn start_operator(
    client: &Client,
    namespace: Option<&str>,
    extra: &[String],
) -> OperatorHandle {
    let mut flags = vec![
        "--http-addr".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--api-addr".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--leader-election".to_owned(),
        "false".to_owned(),
    ];
    flags.extend(operator_flags(namespace, extra));
    let args = steward_operator::config::operator_args_from(flags).unwrap();
    steward_operator::runtime::start(client.clone(), args)
        .await
        .unwrap()
}

impl Plane {
    /// Starts a fresh plane and namespace.
    pub async fn start() -> Self {
        Self::start_with_flags(Vec::new()).await
    }

    /// Starts a fresh plane and namespace whose operator also gets `extra_operator_flags`
    /// (e.g. `--webhook-url …`), in both modes and after `restart_operator`.
    /// Starts a fresh plane with `nodes` node agents (on a real cluster: `nodes` agents join it,
    /// and the test's Pods are pinned to them, see [`Plane::pin`]).
    pub async fn start_with_nodes(nodes: usize) -> Self {
        Self::start_inner(Vec::new(), nodes).await
    }

    /// The Nodes this test's Pods may run on.
    pub fn nodes(&self) -> Vec<String> {
        match &self.embedded {
            Some(p) => {
                let mut names = vec![p.node.name().to_owned()];
                names.extend(p.more_nodes.iter().map(|n| n.name().to_owned()));
                names
            }
            None => self.node_names.clone(),
        }
    }

    /// The node agent of Node `name` (the test's own, in both modes).
    fn node_handle(&self, name: &str) -> &steward_node::NodeHandle {
        let agents: Vec<&steward_node::NodeHandle> = match (&self.embedded, &self.real) {
            (Some(plane), _) => std::iter::once(&plane.node)
                .chain(&plane.more_nodes)
                .collect(),
            (None, Some((nodes, _))) => nodes.iter().collect(),
            _ => Vec::new(),
        };
        agents
            .into_iter()
            .find(|n| n.name() == name)
            .unwrap_or_else(|| panic!("no node agent {name}"))
    }

    /// Cuts Node `name`'s agent off from the API server; its Pod processes go on running, as
    /// on a machine whose network or agent failed (embedded mode).
    pub fn partition_node(&self, name: &str) {
        self.node_handle(name).partition();
    }

    /// Node `name`'s machine loses power: its agent stops (cut off, so its Node goes `Unknown`
    /// only after the grace period) and its Pod processes are killed.
    pub fn power_off_node(&self, name: &str) {
        self.node_handle(name).power_off();
    }

    /// Runs `kubectl` (`$KUBECTL`, else from `PATH`) against this plane; panics with its output
    /// when it fails. Blocks the calling worker thread (multi-threaded runtimes only).
    pub fn kubectl(&self, args: &[&str]) -> String {
        let (ok, text) = self.run_kubectl(args);
        assert!(ok, "kubectl {args:?}: {text}");
        text
    }

    /// Runs `kubectl` as [`Plane::kubectl`] does, expecting it to fail; returns its output.
    pub fn kubectl_refused(&self, args: &[&str]) -> String {
        let (ok, text) = self.run_kubectl(args);
        assert!(!ok, "kubectl {args:?} should have failed: {text}");
        text
    }

    fn run_kubectl(&self, args: &[&str]) -> (bool, String) {
        let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
        let kubeconfig = self.kubeconfig();
        tokio::task::block_in_place(|| {
            let out = std::process::Command::new(&kubectl)
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(args)
                .output()
                .unwrap_or_else(|e| panic!("running {kubectl} (set KUBECTL): {e}"));
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            (out.status.success(), text)
        })
    }

    /// The kubeconfig of this plane (embedded mode: the dev plane's; real mode: the one given).
    pub fn kubeconfig(&self) -> std::path::PathBuf {
        match &self.embedded {
            Some(p) => p.kubeconfig.clone(),
            None => std::env::var("STEWARD_E2E_KUBECONFIG")
                .unwrap_or_default()
                .into(),
        }
    }

    /// Starts a fresh plane with `nodes` node agents whose operator also gets
    /// `extra_operator_flags`.
    pub async fn start_with(extra_operator_flags: Vec<String>, nodes: usize) -> Self {
        Self::start_inner(extra_operator_flags, nodes).await
    }

    pub async fn start_with_flags(extra_operator_flags: Vec<String>) -> Self {
        Self::start_inner(extra_operator_flags, 1).await
    }

    async fn start_inner(extra_operator_flags: Vec<String>, nodes: usize) -> Self {
        super::install_crypto();
        // `STEWARD_TEST_LOG=steward_operator=debug` shows the operator's and agent's logs.
        if let Ok(filter) = std::env::var("STEWARD_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
        let dir = tempfile::tempdir().unwrap();
        let namespace =
            format!("e2e-{}", std::process::id() % 100_000) + &format!("-{}", rand_suffix());
        if let Ok(path) = std::env::var("STEWARD_E2E_KUBECONFIG") {
            let kubeconfig = Kubeconfig::read_from(&path).unwrap();
            let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .unwrap();
            let client = Client::try_from(config.clone()).unwrap();
            let requests = super::counting::Requests::default();
            let operator_client = kube::client::ClientBuilder::try_from(config)
                .unwrap()
                .with_layer(&super::counting::CountLayer(requests.clone()))
                .build();
            steward_operator::embedded::install_crds(&client)
                .await
                .unwrap();
            create_namespace(&client, &namespace).await;
            // This test's own agents, labelled with its namespace: its Pods are pinned to them.
            let suffix = rand_suffix();
            let mut agents = Vec::new();
            let mut node_names = Vec::new();
            for i in 0..nodes.max(1) {
                let name = match nodes {
                    0 | 1 => format!("steward-e2e-{suffix}"),
                    _ => format!("steward-e2e-{suffix}-{i}"),
                };
                let mut node = steward_node::NodeConfig::new(
                    name.clone(),
                    dir.path().join(format!("node-{i}")),
                    shim(),
                );
                node.restart_backoff_base = Duration::from_secs(1);
                node.labels.insert(PIN_LABEL.to_owned(), namespace.clone());
                // Addresses a real API server accepts as endpoints (not loopback).
                node.pod_ip_base = std::net::Ipv4Addr::new(198, 18, 0, 1);
                agents.push(steward_node::start(client.clone(), node).await.unwrap());
                node_names.push(name);
            }
            let op =
                start_operator(&operator_client, Some(&namespace), &extra_operator_flags).await;
            return Self {
                operator_client: Some((operator_client, requests)),
                client,
                namespace,
                dir,
                embedded: None,
                real: Some((agents, op)),
                node_names,
                extra_operator_flags,
            };
        }
        let mut options = DevOptions::new(dir.path(), shim());
        options.restart_backoff = Duration::from_secs(1);
        options.operator_flags = operator_flags(None, &extra_operator_flags);
        options.operator_identity = Some(operator_identity());
        options.nodes = nodes;
        let plane = DevPlane::start(options).await.unwrap();
        let client = plane.embedded.client.clone();
        create_namespace(&client, &namespace).await;
        Self {
            client,
            namespace,
            dir,
            embedded: Some(plane),
            real: None,
            node_names: Vec::new(),
            operator_client: None,
            extra_operator_flags,
        }
    }

    /// The operator's own namespace: `steward-system` on the embedded plane, the test's
    /// namespace on a real cluster.
    pub fn own_namespace(&self) -> String {
        if self.embedded.is_some() {
            "steward-system".into()
        } else {
            self.namespace.clone()
        }
    }

    /// An `Api` in the test namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Server-side applies YAML manifests into the test namespace. On a real cluster, every
    /// database cluster applied is pinned to this test's Nodes (see [`Plane::pin`]).
    pub async fn apply(&self, yaml: &str) {
        let text = if self.real.is_some() {
            pin_clusters(yaml, &self.namespace)
        } else {
            yaml.to_owned()
        };
        apply_manifests(&self.client, &text, &self.namespace)
            .await
            .unwrap_or_else(|e| panic!("apply failed: {e}"));
    }

    /// On a real cluster the scheduler may put a Pod on any Ready Node — another test's, whose
    /// agent stops when that test ends, included. This test's Pods are pinned to its own Nodes
    /// (a [`PIN_LABEL`] node selector); in embedded mode, where each test has its own control
    /// plane, nothing changes.
    pub fn pin(&self, pod: &mut Pod) {
        if let (Some(_), Some(spec)) = (&self.real, pod.spec.as_mut()) {
            spec.node_selector
                .get_or_insert_with(Default::default)
                .insert(PIN_LABEL.to_owned(), self.namespace.clone());
        }
    }

    /// Merges `spec` into the `spec` of the named object, as `kubectl patch --type merge`.
    pub async fn patch_spec<K>(&self, name: &str, spec: serde_json::Value)
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + Debug
            + DeserializeOwned,
    {
        let body = serde_json::json!({ "spec": spec });
        self.api::<K>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .unwrap_or_else(|e| panic!("patching {name}: {e}"));
    }

    /// On a real cluster, the requests the operator made so far (its own client's count); `None`
    /// on the embedded plane, whose API server's counter has only this test's clients.
    pub fn operator_requests(&self) -> Option<std::collections::BTreeMap<String, u64>> {
        self.operator_client.as_ref().map(|(_, r)| r.snapshot())
    }

    /// The operator's handle (to restart it, read metrics).
    pub fn operator(&self) -> &OperatorHandle {
        match (&self.embedded, &self.real) {
            (Some(p), _) => &p.operator,
            (None, Some((_, op))) => op,
            _ => unreachable!("a plane has an operator"),
        }
    }

    /// Stops the operator and starts a new one (same flags and identity), as a restart would.
    /// The old one is stopped first, so two operators never run passes at once.
    pub async fn restart_operator(&mut self) {
        let _ = self.restart_operator_after(Duration::ZERO).await;
    }

    /// Stops the operator, waits `pause` (nothing reconciles meanwhile), and starts a new one.
    /// Returns when the old one had stopped and when the new one started.
    pub async fn restart_operator_after(
        &mut self,
        pause: Duration,
    ) -> (jiff::Timestamp, jiff::Timestamp) {
        self.restart_operator_when(|_| pause).await
    }

    /// As [`Self::restart_operator_after`], starting the new operator at wall-clock time `at`
    /// (at once if the old one stopped after it).
    pub async fn restart_operator_at(
        &mut self,
        at: jiff::Timestamp,
    ) -> (jiff::Timestamp, jiff::Timestamp) {
        self.restart_operator_when(|stopped| {
            let wait = at.as_millisecond() - stopped.as_millisecond();
            Duration::from_millis(u64::try_from(wait).unwrap_or(0))
        })
        .await
    }

    async fn restart_operator_when(
        &mut self,
        pause: impl FnOnce(jiff::Timestamp) -> Duration,
    ) -> (jiff::Timestamp, jiff::Timestamp) {
        let scoped = self.real.is_some().then(|| self.namespace.clone());
        let (slot, client) = match (&mut self.embedded, &mut self.real) {
            (Some(p), _) => (&mut p.operator, p.operator_client.clone()),
            (None, Some((_, op))) => (
                op,
                self.operator_client
                    .as_ref()
                    .map_or_else(|| self.client.clone(), |(c, _)| c.clone()),
            ),
            _ => unreachable!(),
        };
        slot.stop().await.unwrap();
        let stopped = jiff::Timestamp::now();
        tokio::time::sleep(pause(stopped)).await;
        let started = jiff::Timestamp::now();
        let fresh = start_operator(&client, scoped.as_deref(), &self.extra_operator_flags).await;
        let old = std::mem::replace(slot, fresh);
        old.shutdown().await.unwrap();
        (stopped, started)
    }

    /// Polls `get` every 250 ms until `ready` holds, or fails after `timeout` with the last
    /// value and every Pod's log.
    pub async fn wait_for<K, P>(&self, what: &str, name: &str, timeout: Duration, ready: P) -> K
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + Debug
            + DeserializeOwned,
        P: Fn(&K) -> bool,
    {
        let api: Api<K> = self.api();
        let deadline = Instant::now() + timeout;
        let mut last = None;
        loop {
            if let Ok(Some(obj)) = api.get_opt(name).await {
                if ready(&obj) {
                    return obj;
                }
                last = Some(obj);
            }
            if Instant::now() > deadline {
                self.dump().await;
                panic!("timed out after {timeout:?} waiting for {what}; last seen: {last:#?}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until the disruption controller (the embedded one, or a real cluster's) reports
    /// that the PodDisruptionBudget `name` allows exactly `allowed` disruptions, and returns
    /// its status. A budget the controller cannot evaluate stays at 0 (its fail-safe).
    pub async fn disruptions_allowed(
        &self,
        name: &str,
        allowed: i32,
    ) -> k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus {
        let api: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> = self.api();
        let what = format!("PodDisruptionBudget {name} allowing {allowed} disruption(s)");
        self.eventually(&what, Duration::from_secs(30), || {
            let api = api.clone();
            async move {
                let status = api.get_opt(name).await.ok()??.status?;
                (status.disruptions_allowed == Some(allowed)).then_some(status)
            }
        })
        .await
    }

    /// Polls `probe` until it returns `Some`, or fails after `timeout` (dumping Pod logs).
    pub async fn eventually<T, F, Fut>(&self, what: &str, timeout: Duration, probe: F) -> T
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = probe().await {
                return v;
            }
            if Instant::now() > deadline {
                self.dump().await;
                panic!("timed out after {timeout:?} waiting for {what}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Prints every `K` of the namespace with its status (for [`Plane::dump`]).
    async fn print_statuses<K>(&self)
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + Debug
            + DeserializeOwned
            + serde::Serialize,
    {
        let Ok(list) = self.api::<K>().list(&ListParams::default()).await else {
            return;
        };
        for o in list.items {
            let status = serde_json::to_value(&o).unwrap_or_default()["status"].clone();
            eprintln!(
                "--- {} {}: {status}",
                K::kind(&()),
                o.meta().name.clone().unwrap_or_default()
            );
        }
    }

    /// Prints the status of every Steward object that records runs (schedules, backups), then
    /// every Pod of the namespace with its status and the tail of its logs.
    pub async fn dump(&self) {
        self.print_statuses::<steward_api::schedule::Schedule>()
            .await;
        self.print_statuses::<steward_api::pgbackrest::PostgresBackup>()
            .await;
        let pods: Api<Pod> = self.api();
        let Ok(list) = pods.list(&ListParams::default()).await else {
            return;
        };
        for pod in list.items {
            let name = pod.metadata.name.clone().unwrap_or_default();
            eprintln!(
                "--- pod {name}: {:?}",
                pod.status
                    .as_ref()
                    .map(|s| (&s.phase, &s.pod_ip, &s.container_statuses))
            );
            // Every container's tail: a Pod with sidecars has no default container to read.
            let containers = pod
                .spec
                .as_ref()
                .map(|s| {
                    s.containers
                        .iter()
                        .map(|c| c.name.clone())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            for container in containers {
                let params = LogParams {
                    container: Some(container.clone()),
                    tail_lines: Some(40),
                    ..LogParams::default()
                };
                if let Ok(log) = pods.logs(&name, &params).await {
                    eprintln!("--- {name}/{container}:\n{log}");
                }
            }
        }
    }

    /// Stops everything (Pod processes included).
    pub async fn shutdown(self) {
        if let Some(plane) = self.embedded {
            plane.shutdown().await;
        }
        if let Some((agents, op)) = self.real {
            let _ = op.shutdown().await;
            let ns: Api<Namespace> = Api::all(self.client.clone());
            let _ = ns.delete(&self.namespace, &DeleteParams::default()).await;
            // The agent stops this test's Pods while it still runs, so the namespace can finish
            // deleting; what is left after a minute would stay Terminating on a Node that is
            // about to go away, so it goes with grace 0.
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                match pods.list(&ListParams::default()).await {
                    Ok(list) if !list.items.is_empty() => {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    _ => break,
                }
            }
            let now = DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            };
            let _ = pods.delete_collection(&now, &ListParams::default()).await;
            for agent in agents {
                agent.shutdown().await;
            }
            // A NotReady Node left behind would collect the next tests' Pods.
            let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
            for name in &self.node_names {
                let _ = nodes.delete(name, &DeleteParams::default()).await;
            }
        }
    }
}

/// The label a real-mode test's Nodes carry, its value the test's namespace.
pub const PIN_LABEL: &str = "steward.dev/e2e-plane";

/// Why the lost-Node tests are embedded only: they power a Node's agent off, which works on a
/// real cluster too, but there kube-controller-manager decides when the Node is lost (its
/// node-monitor grace period) and evicts its Pods only after their default 300 s
/// `unreachable` toleration; the tests' deadlines are the embedded control plane's, and no run
/// against a real cluster has checked them yet.
pub const LOST_NODE_REAL: &str = "a lost Node's timings on a real cluster (node-monitor grace \
     period, 300 s unreachable toleration) are not the embedded control plane's; not run there yet";

/// A test that cannot run on a real cluster (`STEWARD_E2E_KUBECONFIG`) calls this first with
/// the reason. The `real-cluster` nextest profile leaves such tests out, so its report counts
/// them as skipped; run on a real cluster any other way, the test fails with the reason rather
/// than pass without testing anything.
pub fn embedded_only(reason: &str) {
    if std::env::var_os("STEWARD_E2E_KUBECONFIG").is_some() {
        panic!(
            "not run on a real cluster: {reason}. `cargo nextest run --profile real-cluster` \
             reports this test as skipped"
        );
    }
}

/// `yaml` with every database cluster (all four kinds) given a node selector for this test's
/// Nodes (label [`PIN_LABEL`] = `plane`).
fn pin_clusters(yaml: &str, plane: &str) -> String {
    let docs = steward_operator::dev::parse_manifests(yaml)
        .unwrap_or_else(|e| panic!("manifests do not parse: {e}"));
    docs.into_iter()
        .map(|mut doc| {
            if matches!(
                doc["kind"].as_str(),
                Some("EtcdCluster" | "PostgresCluster" | "CrateCluster" | "FoundationDBCluster")
            ) {
                doc["spec"]["podTemplate"]["nodeSelector"][PIN_LABEL] = serde_json::json!(plane);
            }
            doc.to_string()
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

async fn create_namespace(client: &Client, name: &str) {
    let ns: Api<Namespace> = Api::all(client.clone());
    let mut object = Namespace::default();
    object.metadata.name = Some(name.to_owned());
    match ns.create(&PostParams::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

fn rand_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{:05x}", nanos % 0xfffff)
}

/// The condition of this type in `common`, when its status is `True`.
pub fn true_condition<'a>(
    common: &'a steward_api::common::CommonStatus,
    type_: &str,
) -> Option<&'a steward_api::common::Condition> {
    common
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// The value of `key` in Secret `name` of the test namespace.
pub async fn secret_value(plane: &Plane, name: &str, key: &str) -> String {
    let s = plane.api::<Secret>().get(name).await.unwrap();
    String::from_utf8(s.data.unwrap()[key].0.clone()).unwrap()
}

/// Pod `name`'s IP.
pub async fn pod_ip(plane: &Plane, name: &str) -> String {
    let pod = plane.api::<Pod>().get(name).await.unwrap();
    pod.status.unwrap().pod_ip.unwrap()
}

/// A PostgreSQL-protocol session to `host:5432` (PostgreSQL, or a CrateDB node).
pub async fn connect(
    host: &str,
    user: &str,
    password: &str,
    db: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut config = tokio_postgres::Config::new();
    config
        .host(host)
        .port(5432)
        .user(user)
        .password(password)
        .dbname(db)
        .connect_timeout(Duration::from_secs(2));
    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// A plane whose operator POSTs webhooks to `url` as `steward` / `hook-pass`.
pub async fn with_webhooks(url: &str) -> Plane {
    Plane::start_with_flags(
        [
            "--webhook-url",
            url,
            "--webhook-username",
            "steward",
            "--webhook-password",
            "hook-pass",
        ]
        .map(str::to_owned)
        .to_vec(),
    )
    .await
}

/// An etcd client through the cluster's `-client` Service (the node agent's ClusterIP proxy),
/// once the Service routes: its endpoints follow Pod readiness a moment later, as kube-proxy's
/// rules do on a real cluster.
pub async fn etcd_client(plane: &Plane, name: &str) -> etcd_client::Client {
    let svc = plane
        .api::<k8s_openapi::api::core::v1::Service>()
        .get(&format!("{name}-client"))
        .await
        .unwrap();
    let ip = svc.spec.unwrap().cluster_ip.unwrap();
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5));
    let client = etcd_client::Client::connect([format!("http://{ip}:2379")], Some(options))
        .await
        .unwrap();
    plane
        .eventually(
            "the client Service routes to etcd",
            Duration::from_secs(20),
            || {
                let mut c = client.clone();
                async move { c.status().await.ok().map(|_| ()) }
            },
        )
        .await;
    client
}
