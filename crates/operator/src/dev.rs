//! `steward dev`: the whole local control plane in one process — Steward's embedded API server
//! (state snapshotted under the state directory), the node agent running Pods as local
//! processes, and the operator — plus applying manifests the way `kubectl apply
//! --server-side` does. The end-to-end tests start the same [`DevPlane`].

use std::fs::File;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use kube::{Client, ResourceExt};
use nix::fcntl::{Flock, FlockArg};
use steward_apiserver::{ServerConfig, ServiceCidr};

use crate::config::operator_args_from;
use crate::dev_identity::{OperatorIdentity, client_for};
use crate::embedded::{Embedded, EmbeddedError};
use crate::runtime::OperatorHandle;

/// The node name `steward dev` registers.
pub const NODE_NAME: &str = "steward-dev";

/// Why the local control plane could not start or a manifest could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    /// API server, CRDs or namespaces.
    #[error(transparent)]
    Embedded(#[from] EmbeddedError),
    /// The node agent.
    #[error("starting the node agent failed: {0}")]
    Node(String),
    /// The operator.
    #[error("starting the operator failed: {0}")]
    Operator(String),
    /// Files under the state directory.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Which file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A manifest is not valid YAML or not a Kubernetes object.
    #[error("manifest {0}")]
    Manifest(String),
    /// The operator's REST API did not answer as it should.
    #[error("the operator's REST API: {0}")]
    Api(String),
    /// The API refused a manifest.
    #[error("applying {object} failed: {source}")]
    Apply {
        /// `Kind/name`.
        object: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// How to start a [`DevPlane`].
#[derive(Clone, Debug)]
pub struct DevOptions {
    /// Everything lives here: `state.json`, `kubeconfig`, `node/` (volumes, logs).
    pub state_dir: PathBuf,
    /// Program + leading arguments of the container shim (`[<steward>, "node-shim"]`).
    pub shim: Vec<String>,
    /// API server address; port 0 picks a free one.
    pub api_bind: std::net::SocketAddr,
    /// Extra `steward operator` flags.
    pub operator_flags: Vec<String>,
    /// First restart back-off of crashing containers.
    pub restart_backoff: Duration,
    /// Run the operator as this ServiceAccount (with only the permissions its manifests
    /// grant) instead of the admin.
    pub operator_identity: Option<OperatorIdentity>,
    /// How many node agents (Nodes) to run: `steward-dev`, then `steward-dev-2`, … Each has
    /// its own state directory and a zone label (`zone-a`, `zone-b`, …).
    pub nodes: usize,
}

impl DevOptions {
    /// Defaults for `state_dir`, with `shim` run as the container shim.
    pub fn new(state_dir: impl Into<PathBuf>, shim: Vec<String>) -> Self {
        Self {
            state_dir: state_dir.into(),
            shim,
            api_bind: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            operator_flags: Vec::new(),
            restart_backoff: Duration::from_secs(10),
            operator_identity: None,
            nodes: 1,
        }
    }
}

/// A running local control plane.
pub struct DevPlane {
    /// API server and client.
    pub embedded: Embedded,
    /// The first node agent (`steward-dev`).
    pub node: steward_node::NodeHandle,
    /// The other node agents, with `DevOptions::nodes` > 1.
    pub more_nodes: Vec<steward_node::NodeHandle>,
    /// What each agent was started with (the first, then the others).
    node_configs: Vec<steward_node::NodeConfig>,
    /// What [`DevPlane::node_action`] did to each agent.
    agents: Vec<AgentState>,
    /// The operator.
    pub operator: OperatorHandle,
    /// The client the operator uses: the admin's, or its ServiceAccount's
    /// (`DevOptions::operator_identity`).
    pub operator_client: Client,
    /// Where the kubeconfig was written.
    pub kubeconfig: PathBuf,
    /// Where the `steward` CLI's settings were written (`cli.yaml`: the API's URL and CA, the
    /// initial admin's credentials); `None` when the API is off or has no initial admin.
    pub cli_config: Option<PathBuf>,
    _services_lock: Flock<File>,
}

/// What `steward dev node` can do to a node agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeAction {
    /// The machine loses power: the agent stops without a word and its Pod processes are
    /// killed; the Node goes `Unknown` after the grace period.
    PowerOff,
    /// The agent and its Pods lose the API server (no heartbeat, no status, no Pod changes)
    /// but the Pods keep serving their clients.
    Partition,
    /// Power on (a new agent on the same state, as after a reboot) or heal the partition.
    Start,
}

impl std::str::FromStr for NodeAction {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "poweroff" => Ok(Self::PowerOff),
            "partition" => Ok(Self::Partition),
            "start" => Ok(Self::Start),
            other => Err(format!(
                "unknown node action {other:?}: poweroff, partition or start"
            )),
        }
    }
}

/// Where a node agent of the local control plane is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentState {
    Running,
    Partitioned,
    PoweredOff,
}

impl AgentState {
    /// As `steward dev status` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Partitioned => "partitioned",
            Self::PoweredOff => "powered off",
        }
    }
}

/// Claims a Service ClusterIP range `127.B.0.0/16` no other local control plane on this
/// machine uses (each node agent proxies its API server's ClusterIPs on loopback, so two planes
/// must not share one), held by an exclusive `flock` for the plane's lifetime. `127.96.0.0/16`
/// when free.
fn claim_service_range() -> Result<(ServiceCidr, Flock<File>), DevError> {
    let dir = std::env::temp_dir().join("steward-dev-service-ranges");
    std::fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
    for b in 96u8..=220 {
        let path = dir.join(format!("127.{b}.lock"));
        let file = File::create(&path).map_err(io("creating", &path))?;
        if let Ok(lock) = Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            let cidr = ServiceCidr::new(Ipv4Addr::new(127, b, 0, 0), 16)
                .map_err(|e| DevError::Manifest(format!("service range: {e}")))?;
            return Ok((cidr, lock));
        }
    }
    Err(DevError::Node(
        "every local Service range 127.96–220.0.0/16 is in use by another control plane".into(),
    ))
}

/// The Node name and state directory of node agent `index` (0: `steward-dev` in `node/`).
fn node_identity(dir: &Path, index: usize) -> (String, PathBuf) {
    match index {
        0 => (NODE_NAME.to_owned(), dir.join("node")),
        n => (
            format!("{NODE_NAME}-{}", n + 1),
            dir.join(format!("node-{}", n + 1)),
        ),
    }
}

/// The zone label of node agent `index`: `zone-a`, `zone-b`, …
fn zone(index: usize) -> String {
    let letter = char::from(b'a' + u8::try_from(index % 26).unwrap_or(0));
    format!("zone-{letter}")
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> DevError + 'a {
    move |source| DevError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `text` to `path` readable by the owner only (the kubeconfig holds the admin token;
/// the CLI's settings a password or token).
pub(crate) fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(text.as_bytes())
}

/// The CLI settings file under the state directory.
pub const CLI_CONFIG: &str = "cli.yaml";

/// (pure) The `steward` CLI's settings: `server` (an `https://host:port` URL), `ca` (a
/// literal block), `username`, `password`, `namespace` (`default`). A user name or password
/// that would not read as a plain YAML string is quoted.
pub fn cli_yaml(server: &str, ca_pem: &str, username: &str, password: &str) -> String {
    let plain = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphabetic())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !matches!(
                s.to_ascii_lowercase().as_str(),
                "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n"
            )
    };
    let scalar = |s: &str| {
        if plain(s) {
            s.to_owned()
        } else {
            serde_json::Value::String(s.to_owned()).to_string()
        }
    };
    let mut ca = String::new();
    for line in ca_pem.trim_end().lines() {
        ca.push_str("  ");
        ca.push_str(line);
        ca.push('\n');
    }
    format!(
        "server: {server}\nca: |\n{ca}username: {}\npassword: {}\nnamespace: default\n",
        scalar(username),
        scalar(password)
    )
}

/// Once the operator's API answers the initial admin (read from its Secret in `namespace`),
/// writes `dir/cli.yaml` (mode 0600). `None` when there is no initial admin Secret.
async fn write_cli_config(
    dir: &Path,
    admin: &Client,
    namespace: &str,
    addr: std::net::SocketAddr,
    ca_pem: &str,
) -> Result<Option<PathBuf>, DevError> {
    use crate::api::bootstrap::{ADMIN_USER, INITIAL_ADMIN_SECRET, initial_password};
    let Some(password) = initial_password(admin, namespace)
        .await
        .map_err(|e| DevError::Api(e.to_string()))?
    else {
        tracing::warn!(
            namespace,
            secret = INITIAL_ADMIN_SECRET,
            "no initial API admin Secret: cli.yaml not written"
        );
        return Ok(None);
    };
    let server = format!("https://127.0.0.1:{}", addr.port());
    let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes())
        .map_err(|e| DevError::Api(format!("the API's CA: {e}")))?;
    let http = reqwest::Client::builder()
        .tls_certs_only([ca])
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| DevError::Api(e.to_string()))?;
    let url = format!("{server}/api/v1/health");
    let status = http
        .get(&url)
        .basic_auth(ADMIN_USER, Some(&password))
        .send()
        .await
        .map_err(|e| DevError::Api(format!("GET {url}: {e}")))?
        .status();
    if !status.is_success() {
        return Err(DevError::Api(format!(
            "GET {url} as {ADMIN_USER} answered {status} (the password in Secret \
             {namespace}/{INITIAL_ADMIN_SECRET} may no longer be the admin's)"
        )));
    }
    let path = dir.join(CLI_CONFIG);
    write_private(&path, &cli_yaml(&server, ca_pem, ADMIN_USER, &password))
        .map_err(io("writing", &path))?;
    Ok(Some(path))
}

impl DevPlane {
    /// Starts the API server (from `state.json` when present), installs the CRDs, starts the
    /// node agent and the operator, and writes `kubeconfig`.
    pub async fn start(options: DevOptions) -> Result<Self, DevError> {
        let dir = &options.state_dir;
        std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
        let (service_cidr, services_lock) = claim_service_range()?;
        let config = ServerConfig {
            bind: options.api_bind,
            state_file: Some(dir.join("state.json")),
            service_cidr,
            // kubectl sends no credentials over plain HTTP: the kubeconfig must work anyway.
            anonymous_cluster_admin: true,
            ..ServerConfig::default()
        };
        let embedded = Embedded::start_with(config, &["steward-system"]).await?;
        let kubeconfig = dir.join("kubeconfig");
        write_private(&kubeconfig, &embedded.server.kubeconfig_yaml())
            .map_err(io("writing", &kubeconfig))?;
        let mut handles = Vec::new();
        let mut node_configs = Vec::new();
        for index in 0..options.nodes.max(1) {
            let (name, state) = node_identity(dir, index);
            let mut node_config = steward_node::NodeConfig::new(name, state, options.shim.clone());
            node_config.restart_backoff_base = options.restart_backoff;
            node_config
                .labels
                .insert("topology.kubernetes.io/zone".into(), zone(index));
            // One proxy for the machine's loopback network.
            node_config.service_proxy = index == 0;
            let node = steward_node::start(embedded.client.clone(), node_config.clone())
                .await
                .map_err(|e| DevError::Node(e.to_string()))?;
            handles.push(node);
            node_configs.push(node_config);
        }
        let mut handles = handles.into_iter();
        let node = handles
            .next()
            .ok_or_else(|| DevError::Node("no node agent started".into()))?;
        let more_nodes: Vec<_> = handles.collect();
        let mut flags = vec![
            "--http-addr".to_owned(),
            "127.0.0.1:0".to_owned(),
            "--identity".to_owned(),
            "steward-dev".to_owned(),
            "--leader-election".to_owned(),
            "false".to_owned(),
            "--api-addr".to_owned(),
            "127.0.0.1:0".to_owned(),
        ];
        flags.extend(options.operator_flags.iter().cloned());
        let args = operator_args_from(flags).map_err(|e| DevError::Operator(e.to_string()))?;
        let own_namespace = args.lease_namespace.clone();
        let operator_client = match &options.operator_identity {
            Some(identity) => {
                client_for(&embedded.client, &embedded.server.url(), identity).await?
            }
            None => embedded.client.clone(),
        };
        let operator = crate::runtime::start(operator_client.clone(), args)
            .await
            .map_err(|e| DevError::Operator(e.to_string()))?;
        let cli_config = match (operator.api_addr, operator.api_ca_pem.as_deref()) {
            (Some(addr), Some(ca)) => {
                write_cli_config(dir, &embedded.client, &own_namespace, addr, ca).await?
            }
            _ => None,
        };
        let agents = vec![AgentState::Running; node_configs.len()];
        Ok(Self {
            embedded,
            node,
            more_nodes,
            node_configs,
            agents,
            operator,
            operator_client,
            kubeconfig,
            cli_config,
            _services_lock: services_lock,
        })
    }

    /// Each node agent's name and state, the first first.
    pub fn agents(&self) -> Vec<(String, AgentState)> {
        self.node_configs
            .iter()
            .map(|c| c.name.clone())
            .zip(self.agents.iter().copied())
            .collect()
    }

    /// Powers a node agent off, partitions it, or starts it again (`steward dev node`); what
    /// happened, or why nothing did.
    pub async fn node_action(&mut self, name: &str, action: NodeAction) -> Result<String, String> {
        let Some(index) = self.node_configs.iter().position(|c| c.name == name) else {
            let known: Vec<&str> = self.node_configs.iter().map(|c| c.name.as_str()).collect();
            return Err(format!(
                "no node {name:?} on this control plane (nodes: {})",
                known.join(", ")
            ));
        };
        let state = self.agents[index];
        let handle = if index == 0 {
            &mut self.node
        } else {
            &mut self.more_nodes[index - 1]
        };
        let done = match (action, state) {
            (NodeAction::PowerOff, AgentState::PoweredOff) => {
                return Err(format!("node {name} is already powered off"));
            }
            (NodeAction::PowerOff, _) => {
                handle.power_off();
                self.agents[index] = AgentState::PoweredOff;
                format!(
                    "node {name} powered off: its agent stopped and its Pod processes were killed; the Node goes Unknown after the grace period"
                )
            }
            (NodeAction::Partition, AgentState::Running) => {
                handle.partition();
                self.agents[index] = AgentState::Partitioned;
                format!("node {name} partitioned from the API server; its Pods keep serving")
            }
            (NodeAction::Partition, other) => {
                return Err(format!("node {name} is {}", other.as_str()));
            }
            (NodeAction::Start, AgentState::Running) => {
                return Err(format!("node {name} is already running"));
            }
            (NodeAction::Start, AgentState::Partitioned) => {
                handle.heal();
                self.agents[index] = AgentState::Running;
                format!("node {name} reconnected to the API server")
            }
            (NodeAction::Start, AgentState::PoweredOff) => {
                // The powered-off agent's Service proxy still forwards on its last rules.
                handle.stop_proxy();
                let config = self.node_configs[index].clone();
                let fresh = steward_node::start(self.embedded.client.clone(), config)
                    .await
                    .map_err(|e| format!("starting node {name}: {e}"))?;
                // The old agent is stopped and its processes are gone: dropping it frees its
                // addresses.
                drop(std::mem::replace(handle, fresh));
                self.agents[index] = AgentState::Running;
                format!("node {name} started: a new agent on its state, as after a reboot")
            }
        };
        tracing::warn!(node = name, ?action, "{done}");
        Ok(done)
    }

    /// Stops the operator, then the node agent (every Pod process: SIGTERM, grace, SIGKILL),
    /// then the API server (which writes its final snapshot).
    pub async fn shutdown(self) {
        if let Err(err) = self.operator.shutdown().await {
            tracing::warn!(error = %err, "operator stopped with an error");
        }
        self.node.shutdown().await;
        for node in self.more_nodes {
            node.shutdown().await;
        }
        self.embedded.server.shutdown().await;
    }
}

/// Splits a multi-document YAML stream into JSON objects (empty documents skipped).
pub fn parse_manifests(text: &str) -> Result<Vec<serde_json::Value>, DevError> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut flush = |doc: &mut String| -> Result<(), DevError> {
        if doc.lines().any(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#')
        }) {
            let value: serde_json::Value = serde_saphyr::from_str(doc)
                .map_err(|e| DevError::Manifest(format!("is not valid YAML: {e}")))?;
            if !value.is_null() {
                docs.push(value);
            }
        }
        doc.clear();
        Ok(())
    };
    for line in text.lines() {
        if line.trim_end() == "---" || line.starts_with("--- ") {
            flush(&mut current)?;
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    flush(&mut current)?;
    Ok(docs)
}

/// Server-side applies every object in `text` (field manager `steward-dev`, forced), objects
/// without a namespace going to `default_namespace` when their kind is namespaced. Returns
/// `Kind/name` of each.
pub async fn apply_manifests(
    client: &Client,
    text: &str,
    default_namespace: &str,
) -> Result<Vec<String>, DevError> {
    let mut applied = Vec::new();
    for value in parse_manifests(text)? {
        let object: DynamicObject = serde_json::from_value(value)
            .map_err(|e| DevError::Manifest(format!("is not a Kubernetes object: {e}")))?;
        let types = object
            .types
            .clone()
            .ok_or_else(|| DevError::Manifest("has no apiVersion/kind".into()))?;
        let gvk = GroupVersionKind::try_from(&types)
            .map_err(|e| DevError::Manifest(format!("has a bad apiVersion: {e}")))?;
        let name = object.name_any();
        let label = format!("{}/{name}", gvk.kind);
        let (resource, caps) = discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|source| DevError::Apply {
                object: label.clone(),
                source,
            })?;
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => {
                let ns = object
                    .namespace()
                    .unwrap_or_else(|| default_namespace.to_owned());
                Api::namespaced_with(client.clone(), &ns, &resource)
            }
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        api.patch(
            &name,
            &PatchParams::apply("steward-dev").force(),
            &Patch::Apply(&object),
        )
        .await
        .map_err(|source| DevError::Apply {
            object: label.clone(),
            source,
        })?;
        applied.push(label);
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The local plane's operator, running as its ServiceAccount with only the manifests'
    /// RBAC, serves the API and writes a `cli.yaml` that works; after shutdown no listener
    /// is left.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_dev_plane_serves_the_api_and_writes_a_working_cli_yaml() {
        use std::os::unix::fs::PermissionsExt;
        #[derive(serde::Deserialize)]
        struct Cli {
            server: String,
            ca: String,
            username: String,
            password: String,
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let mut options = DevOptions::new(dir.path(), vec!["/bin/false".into()]);
        options.operator_identity = Some(OperatorIdentity {
            manifests: [
                include_str!("../../../deploy/serviceaccount.yaml"),
                include_str!("../../../deploy/rbac.yaml"),
            ]
            .join("\n---\n"),
            namespace: "steward-system".into(),
            service_account: "steward-operator".into(),
        });
        let plane = DevPlane::start(options).await.unwrap();
        let path = plane.cli_config.clone().unwrap();
        assert_eq!(path, dir.path().join(CLI_CONFIG));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let cli: Cli = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let addr = plane.operator.api_addr.unwrap();
        assert_eq!(cli.server, format!("https://127.0.0.1:{}", addr.port()));
        let http = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(cli.ca.as_bytes()).unwrap()])
            .build()
            .unwrap();
        let status = http
            .get(format!("{}/api/v1/clusters", cli.server))
            .basic_auth(&cli.username, Some(&cli.password))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200);
        plane.shutdown().await;
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }

    #[test]
    fn cli_yaml_has_the_documented_shape_and_reads_back() {
        #[derive(serde::Deserialize)]
        struct Cli {
            server: String,
            ca: String,
            username: String,
            password: String,
            namespace: String,
        }
        let ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let text = cli_yaml("https://127.0.0.1:8443", ca, "admin", "Abc123");
        assert_eq!(
            text,
            "server: https://127.0.0.1:8443\nca: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  \
             -----END CERTIFICATE-----\nusername: admin\npassword: Abc123\nnamespace: default\n"
        );
        for password in ["Abc123", "0x12", "true", "a: b # c", "'\"\\"] {
            let cli: Cli =
                serde_saphyr::from_str(&cli_yaml("https://h:1", ca, "admin", password)).unwrap();
            assert_eq!(cli.password, password);
            assert_eq!(
                (cli.server.as_str(), cli.ca.as_str(), cli.username.as_str()),
                ("https://h:1", ca, "admin")
            );
            assert_eq!(cli.namespace, "default");
        }
    }

    #[test]
    fn multi_document_yaml_is_split_and_comments_skipped() {
        let docs = parse_manifests(
            "# leading comment\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\n# only a comment\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: b\n",
        )
        .unwrap();
        let names: Vec<&str> = docs
            .iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert!(parse_manifests("kind: [unclosed").is_err());
    }
}
