//! `steward-node`: the node agent as a standalone binary, and the `node-shim` subcommand the
//! agent runs for every container start and exec.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use steward_node::{ImageMap, NodeConfig};

#[derive(Parser, Debug)]
#[command(
    name = "steward-node",
    about = "Runs the Pods bound to a Node as local processes."
)]
struct Cli {
    /// Kubeconfig to use; without it the in-cluster config or $KUBECONFIG / ~/.kube/config.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The Node name.
    #[arg(long, default_value = "steward-dev")]
    name: String,
    /// All on-disk state: pod directories, volumes, logs.
    #[arg(long, default_value = "/var/lib/steward-node")]
    state_dir: PathBuf,
    /// The first pod IP: in 127.0.0.0/8 (loopback; the embedded API server accepts it) or in
    /// 198.18.0.0/15 (the agent routes the range on lo; use it with a real API server, whose
    /// endpoint controllers refuse loopback addresses).
    #[arg(long, default_value = "127.1.0.1")]
    pod_ip_base: Ipv4Addr,
    /// Address of the kubelet API (logs, exec).
    #[arg(long, default_value = "127.0.0.1:0")]
    kubelet_bind: SocketAddr,
    /// Extra Node labels, `key=value` (repeatable).
    #[arg(long = "label")]
    labels: Vec<String>,
    /// Image map overrides: `repo=path,repo=path`.
    #[arg(long, env = "STEWARD_NODE_IMAGES")]
    images: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The container shim (run by the agent itself).
    #[command(hide = true)]
    NodeShim { args: Vec<String> },
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    // The shim must run before any thread exists; do not even parse with clap.
    if args.get(1).map(String::as_str) == Some("node-shim") {
        let code = steward_node::shim_main(args[2..].to_vec());
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("steward-node: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("steward-node: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match &cli.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    };
    let client = kube::Client::try_from(config)?;
    let exe = std::env::current_exe().context("locating this executable for the shim")?;
    let mut cfg = NodeConfig::new(
        cli.name,
        cli.state_dir,
        vec![exe.to_string_lossy().into_owned(), "node-shim".into()],
    );
    cfg.pod_ip_base = cli.pod_ip_base;
    cfg.kubelet_bind = cli.kubelet_bind;
    let mut labels = BTreeMap::new();
    for l in &cli.labels {
        let (k, v) = l
            .split_once('=')
            .with_context(|| format!("label {l:?} is not key=value"))?;
        labels.insert(k.to_string(), v.to_string());
    }
    cfg.labels = labels;
    if let Some(spec) = &cli.images {
        cfg.images = ImageMap::default().with_overrides(spec)?;
    }
    if let Some(Command::NodeShim { .. }) = cli.command {
        anyhow::bail!("node-shim must be the first argument");
    }
    let handle = steward_node::start(client, cfg).await?;
    println!(
        "steward-node running; kubelet API on {}",
        handle.kubelet_addr()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    handle.shutdown().await;
    Ok(())
}
