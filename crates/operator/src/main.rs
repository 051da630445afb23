//! The `steward` binary: `operator`, `crd`, `self-check`, `version`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use steward_operator::config::{LogFormat, OperatorArgs};
use tracing_subscriber::EnvFilter;

mod self_check;

/// Steward runs etcd, PostgreSQL, CrateDB and FoundationDB clusters on Kubernetes.
#[derive(Parser)]
#[command(name = "steward", version, about)]
struct Cli {
    /// Log format.
    #[arg(
        long,
        global = true,
        env = "STEWARD_LOG_FORMAT",
        value_enum,
        default_value = "human"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run all controllers (leader-elected) against the cluster of the current kubeconfig or the
    /// in-cluster service account.
    Operator(Box<OperatorArgs>),
    /// Print every CRD as YAML (the content of deploy/crds/steward.dev.yaml).
    Crd,
    /// Start an in-process API server, install the CRDs, run the operator against it, create an
    /// example EtcdCluster and check what the operator did. Needs no cluster.
    SelfCheck,
    /// Print the version.
    Version,
}

fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Human => builder.init(),
    }
}

async fn run_operator(args: OperatorArgs) -> anyhow::Result<()> {
    let client = kube::Client::try_default().await?;
    let handle = steward_operator::runtime::start(client, args).await?;
    tracing::info!(http = %handle.http_addr, "operator started");
    let stop = handle.shutdown_token();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutdown signal received");
        stop.cancel();
    });
    handle.wait().await.map_err(anyhow::Error::msg)
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    // kube's and reqwest's rustls need a process-wide crypto provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    let result = match cli.command {
        Command::Operator(args) => run_operator(*args).await,
        Command::Crd => steward_operator::crd::crds_yaml()
            .map(|yaml| print!("{yaml}"))
            .map_err(anyhow::Error::from),
        Command::SelfCheck => self_check::run().await,
        Command::Version => {
            println!("steward {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
