//! `steward dev up|down|status|node` (and the hidden `serve` they manage): the local control
//! plane as a background process whose state, kubeconfig, pid file and log live under one
//! directory. `steward dev node` reaches the running plane through its control socket
//! (`control.sock` in the state directory, one JSON request and answer per connection).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use steward_api::etcd::EtcdCluster;
use steward_api::postgres::PostgresCluster;
use steward_operator::dev::{DevOptions, DevPlane, NodeAction, apply_manifests};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

/// `steward dev` subcommands.
#[derive(Subcommand)]
pub enum DevCommand {
    /// Start the API server, node agent and operator in the background, apply manifests, and
    /// return once the control plane is ready.
    Up(UpArgs),
    /// Stop everything `up` started (Pod processes included).
    Down(StateArgs),
    /// Say what is running.
    Status(StateArgs),
    /// Power a node off, cut it off from the API server, or start it again: try fail-over
    /// and member replacement after a lost Node.
    Node(NodeArgs),
    /// Run the control plane in the foreground (what `up` starts in the background).
    #[command(hide = true)]
    Serve(ServeArgs),
}

/// `serve` flags.
#[derive(Args, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    state: StateArgs,
    /// Node agents to run.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
}

/// Where the state lives.
#[derive(Args, Clone)]
pub struct StateArgs {
    /// State directory: API snapshot, kubeconfig, volumes, logs, pid file.
    #[arg(long, env = "STEWARD_DEV_STATE_DIR", default_value = ".steward/dev")]
    pub state_dir: PathBuf,
}

/// `node` arguments.
#[derive(Args)]
pub struct NodeArgs {
    #[command(flatten)]
    state: StateArgs,
    /// `poweroff`: the agent stops without a word and its Pod processes are killed (the Node
    /// goes `Unknown` after its 40 s grace period); `partition`: the agent and its Pods lose the
    /// API server but keep serving clients; `start`: power on (a new agent on the node's state,
    /// as after a reboot) or end the partition.
    #[arg(value_parser = ["poweroff", "partition", "start"])]
    action: String,
    /// The Node (`steward dev status` lists them: `steward-dev`, `steward-dev-2`, …).
    node: String,
}

/// `up` flags.
#[derive(Args)]
pub struct UpArgs {
    #[command(flatten)]
    state: StateArgs,
    /// Manifests to apply once ready (server-side apply, namespace `default` when unset).
    #[arg(short = 'f', long = "filename")]
    files: Vec<PathBuf>,
    /// Seconds to wait for the control plane.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Node agents (Nodes) to run, 1 to 9: `steward-dev`, `steward-dev-2`, … each in its own
    /// zone (`topology.kubernetes.io/zone=zone-a`, `zone-b`, …).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=9))]
    nodes: u8,
}

fn pid_file(dir: &Path) -> PathBuf {
    dir.join("dev.pid")
}

fn ready_file(dir: &Path) -> PathBuf {
    dir.join("ready")
}

fn control_socket(dir: &Path) -> PathBuf {
    dir.join("control.sock")
}

/// Sends one request to the running plane's control socket; its answer.
async fn control(dir: &Path, request: &Value) -> anyhow::Result<Value> {
    if running_pid(dir).is_none() {
        bail!(
            "steward dev is not running (state dir {}): start it with `steward dev up`",
            dir.display()
        );
    }
    let path = control_socket(dir);
    let stream = tokio::net::UnixStream::connect(&path)
        .await
        .with_context(|| format!("connecting to {}", path.display()))?;
    let (read, mut write) = stream.into_split();
    write.write_all(format!("{request}\n").as_bytes()).await?;
    write.shutdown().await?;
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await?;
    let answer: Value = serde_json::from_str(&line)
        .with_context(|| format!("the control socket answered {line:?}"))?;
    if answer["ok"] != true {
        bail!(
            "{}",
            answer["message"]
                .as_str()
                .unwrap_or("the control plane refused")
        );
    }
    Ok(answer)
}

/// Serves the control socket: one JSON request per connection, answered in order.
async fn serve_control(
    listener: tokio::net::UnixListener,
    plane: std::sync::Arc<tokio::sync::Mutex<DevPlane>>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (read, mut write) = stream.into_split();
        let mut line = String::new();
        if BufReader::new(read).read_line(&mut line).await.is_err() {
            continue;
        }
        let answer = match serde_json::from_str::<Value>(&line) {
            Err(e) => json!({"ok": false, "message": format!("bad request: {e}")}),
            Ok(request) => {
                let mut plane = plane.lock().await;
                match request["action"].as_str() {
                    Some("agents") => json!({"ok": true, "agents": plane
                        .agents()
                        .into_iter()
                        .map(|(name, state)| json!([name, state.as_str()]))
                        .collect::<Vec<_>>()}),
                    Some(action) => match action.parse::<NodeAction>() {
                        Err(e) => json!({"ok": false, "message": e}),
                        Ok(action) => {
                            let node = request["node"].as_str().unwrap_or_default();
                            match plane.node_action(node, action).await {
                                Ok(m) => json!({"ok": true, "message": m}),
                                Err(m) => json!({"ok": false, "message": m}),
                            }
                        }
                    },
                    None => json!({"ok": false, "message": "bad request: no action"}),
                }
            }
        };
        let _ = write.write_all(format!("{answer}\n").as_bytes()).await;
    }
}

async fn node(args: NodeArgs) -> anyhow::Result<()> {
    let answer = control(
        &args.state.state_dir,
        &json!({"action": args.action, "node": args.node}),
    )
    .await?;
    println!("{}", answer["message"].as_str().unwrap_or_default());
    Ok(())
}

fn running_pid(dir: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(pid_file(dir))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    kill(Pid::from_raw(pid), None).ok().map(|()| pid)
}

async fn client_for(dir: &Path) -> anyhow::Result<Client> {
    let path = dir.join("kubeconfig");
    let kubeconfig =
        Kubeconfig::read_from(&path).with_context(|| format!("reading {}", path.display()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// Runs a `steward dev` command.
pub async fn run(command: DevCommand) -> anyhow::Result<()> {
    match command {
        DevCommand::Up(args) => up(args).await,
        DevCommand::Down(args) => down(&args.state_dir).await,
        DevCommand::Status(args) => status(&args.state_dir).await,
        DevCommand::Node(args) => node(args).await,
        DevCommand::Serve(args) => serve(&args.state.state_dir, args.nodes).await,
    }
}

async fn up(args: UpArgs) -> anyhow::Result<()> {
    let dir = args.state.state_dir.clone();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    if let Some(pid) = running_pid(&dir) {
        println!("steward dev is already running (pid {pid})");
    } else {
        let _ = std::fs::remove_file(ready_file(&dir));
        let log_path = dir.join("dev.log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let exe = std::env::current_exe()?;
        let mut child = std::process::Command::new(exe);
        child
            .args([
                "dev",
                "serve",
                "--nodes",
                &args.nodes.to_string(),
                "--state-dir",
            ])
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        std::os::unix::process::CommandExt::process_group(&mut child, 0);
        let mut child = child.spawn().context("starting the control plane")?;
        let deadline = Instant::now() + Duration::from_secs(args.timeout);
        loop {
            if ready_file(&dir).exists() {
                break;
            }
            if let Some(code) = child.try_wait()? {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                bail!(
                    "the control plane exited ({code}); last log lines:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            if Instant::now() > deadline {
                let _ = kill(Pid::from_raw(i32::try_from(child.id())?), Signal::SIGTERM);
                bail!(
                    "the control plane was not ready within {} s; see {}",
                    args.timeout,
                    log_path.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        println!("steward dev started (pid {})", child.id());
    }
    let client = client_for(&dir).await?;
    for file in &args.files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        for object in apply_manifests(&client, &text, "default").await? {
            println!("applied {object} from {}", file.display());
        }
    }
    println!("state:      {}", dir.display());
    println!("log:        {}", dir.join("dev.log").display());
    println!("export KUBECONFIG={}", dir.join("kubeconfig").display());
    let cli = dir.join(steward_operator::dev::CLI_CONFIG);
    if cli.exists() {
        println!(
            "steward CLI: {} (admin) — try `steward show cluster`",
            cli.display()
        );
    }
    Ok(())
}

async fn serve(dir: &Path, nodes: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let dir = dir.canonicalize()?;
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    let mut options = DevOptions::new(&dir, vec![exe, "node-shim".into()]);
    options.nodes = nodes;
    let plane = DevPlane::start(options).await?;
    std::fs::write(pid_file(&dir), std::process::id().to_string())?;
    let mut ready = format!(
        "api {}\noperator http://{}\nkubelet {}\n",
        plane.embedded.server.url(),
        plane.operator.http_addr,
        plane.node.kubelet_addr()
    );
    for node in &plane.more_nodes {
        ready.push_str(&format!("kubelet {}\n", node.kubelet_addr()));
    }
    if let Some(addr) = plane.operator.api_addr {
        ready.push_str(&format!("steward-api https://{addr}\n"));
    }
    let socket = control_socket(&dir);
    let _ = std::fs::remove_file(&socket);
    let listener = tokio::net::UnixListener::bind(&socket)
        .with_context(|| format!("binding {}", socket.display()))?;
    std::fs::set_permissions(&socket, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    std::fs::write(ready_file(&dir), ready)?;
    tracing::info!(api = %plane.embedded.server.url(), "steward dev ready");
    let plane = std::sync::Arc::new(tokio::sync::Mutex::new(plane));
    let control = tokio::spawn(serve_control(listener, plane.clone()));
    crate::shutdown_signal().await;
    tracing::info!("stopping steward dev");
    control.abort();
    let _ = control.await;
    let _ = std::fs::remove_file(&socket);
    let plane = std::sync::Arc::try_unwrap(plane)
        .map_err(|_| anyhow::anyhow!("the control socket still holds the control plane"))?
        .into_inner();
    plane.shutdown().await;
    let _ = std::fs::remove_file(ready_file(&dir));
    let _ = std::fs::remove_file(pid_file(&dir));
    Ok(())
}

async fn down(dir: &Path) -> anyhow::Result<()> {
    let Some(pid) = running_pid(dir) else {
        let _ = std::fs::remove_file(pid_file(dir));
        println!("steward dev is not running");
        return Ok(());
    };
    let pid = Pid::from_raw(pid);
    kill(pid, Signal::SIGTERM).context("signalling the control plane")?;
    let deadline = Instant::now() + Duration::from_secs(90);
    while kill(pid, None).is_ok() {
        if Instant::now() > deadline {
            let _ = kill(pid, Signal::SIGKILL);
            bail!("the control plane did not stop within 90 s; killed it");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = std::fs::remove_file(pid_file(dir));
    let _ = std::fs::remove_file(ready_file(dir));
    println!("steward dev stopped");
    Ok(())
}

async fn status(dir: &Path) -> anyhow::Result<()> {
    let Some(pid) = running_pid(dir) else {
        println!("steward dev is not running (state dir {})", dir.display());
        return Ok(());
    };
    println!("steward dev is running (pid {pid})");
    if let Ok(text) = std::fs::read_to_string(ready_file(dir)) {
        print!("{text}");
    }
    if let Ok(answer) = control(dir, &json!({"action": "agents"})).await {
        for agent in answer["agents"].as_array().into_iter().flatten() {
            println!(
                "agent {}: {}",
                agent[0].as_str().unwrap_or("?"),
                agent[1].as_str().unwrap_or("?")
            );
        }
    }
    let client = client_for(dir).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    for node in nodes.list(&ListParams::default()).await?.items {
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map_or("Unknown", |c| c.status.as_str())
            .to_owned();
        println!(
            "node {} Ready={ready}",
            node.metadata.name.unwrap_or_default()
        );
    }
    let pods: Api<Pod> = Api::all(client.clone());
    let list = pods.list(&ListParams::default()).await?;
    let running = list
        .items
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count();
    println!("pods: {} ({running} running)", list.items.len());
    let clusters: Api<EtcdCluster> = Api::all(client.clone());
    for c in clusters.list(&ListParams::default()).await?.items {
        let s = c.status.unwrap_or_default();
        println!(
            "EtcdCluster {}/{}: {}/{} ready members, {}",
            c.metadata.namespace.unwrap_or_default(),
            c.metadata.name.unwrap_or_default(),
            s.ready_members,
            c.spec.replicas,
            match s.quorate {
                Some(true) => "quorum held",
                Some(false) => "quorum LOST",
                None => "quorum not known yet",
            }
        );
    }
    let clusters: Api<PostgresCluster> = Api::all(client.clone());
    for c in clusters.list(&ListParams::default()).await?.items {
        let s = c.status.unwrap_or_default();
        println!(
            "PostgresCluster {}/{}: {}/{} ready instances, primary={}",
            c.metadata.namespace.unwrap_or_default(),
            c.metadata.name.unwrap_or_default(),
            s.ready_instances,
            c.spec.instances,
            s.current_primary.as_deref().unwrap_or("none")
        );
    }
    let clusters: Api<steward_api::foundationdb::FoundationDBCluster> = Api::all(client.clone());
    for c in clusters.list(&ListParams::default()).await?.items {
        let s = c.status.unwrap_or_default();
        let counts = &c.spec.process_counts;
        let wanted = counts.storage + counts.log + counts.stateless;
        println!(
            "FoundationDBCluster {}/{}: {}/{wanted} process groups, configured={}, available={}, reconciled={}",
            c.metadata.namespace.unwrap_or_default(),
            c.metadata.name.unwrap_or_default(),
            s.process_groups
                .iter()
                .filter(|g| g.conditions.is_empty())
                .count(),
            s.configured,
            s.health.available,
            s.common.generations.reconciled == c.metadata.generation
        );
    }
    let clusters: Api<steward_api::cratedb::CrateCluster> = Api::all(client);
    for c in clusters.list(&ListParams::default()).await?.items {
        let s = c.status.unwrap_or_default();
        let wanted = c.spec.nodes.master.replicas
            + c.spec.nodes.data.iter().map(|d| d.replicas).sum::<i32>();
        println!(
            "CrateCluster {}/{}: {}/{wanted} nodes in the cluster, health={}, bootstrapped={}",
            c.metadata.namespace.unwrap_or_default(),
            c.metadata.name.unwrap_or_default(),
            s.ready_nodes,
            s.health.as_deref().unwrap_or("unknown"),
            s.bootstrap.done
        );
    }
    Ok(())
}
