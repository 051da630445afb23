//! The `steward` binary: `operator`, `crd`, `openapi`, `self-check`, `dev`, `node`, and the
//! client commands of the REST API (`create`, `show`, `scale`, …, `login`, `version`;
//! `steward_operator::cli`), with `completion` for shells.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use steward_operator::config::{LogFormat, OperatorArgs};
use tracing_subscriber::EnvFilter;

mod dev_cli;
mod self_check;

/// jemalloc, not glibc's malloc: at 1,000 clusters the operator's RSS was 161 MiB with glibc
/// (freed pages stay in per-thread arenas after a burst) and 115 MiB with jemalloc, whose
/// background thread returns them, at half the CPU (`docs/performance.md`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
    /// Print the REST API's OpenAPI 3 document (the content of docs/openapi.json).
    Openapi,
    /// Start an in-process API server, install the CRDs, run the operator against it, create an
    /// example EtcdCluster and check what the operator did. Needs no cluster.
    SelfCheck,
    /// The local control plane: an embedded API server, a node agent running Pods as local
    /// processes, and the operator, in the background (`up`, `down`, `status`).
    #[command(subcommand)]
    Dev(dev_cli::DevCommand),
    /// Run a Node agent against the cluster of the current kubeconfig (Pods as local processes).
    Node(NodeArgs),
    /// The node agent's container shim (internal).
    #[command(hide = true)]
    NodeShim {
        /// Shim arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Print a shell completion script (e.g. `steward completion bash > /etc/bash_completion.d/steward`).
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    // The client commands (boxed: their flags make them the largest variant).
    #[command(flatten)]
    Client(Box<steward_operator::cli::ClientCommand>),
}

/// `steward node` flags.
#[derive(clap::Args)]
struct NodeArgs {
    /// Node name.
    #[arg(long, default_value = "steward-node")]
    name: String,
    /// State directory (volumes, logs, pid files).
    #[arg(long, default_value = ".steward/node")]
    state_dir: std::path::PathBuf,
}

fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colours for a terminal only: a file (`steward dev`'s dev.log) gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Human => builder.init(),
    }
}

async fn run_operator(args: OperatorArgs) -> anyhow::Result<()> {
    // Freed pages go back to the system a few seconds after a burst, not on the next
    // allocation. Started here, not at start-up: `node-shim` must stay single-threaded.
    if let Err(err) = tikv_jemalloc_ctl::background_thread::write(true) {
        tracing::warn!(error = %err, "jemalloc background thread not started; freed memory is returned on later allocations");
    }
    let config = kube::Config::infer().await?;
    let client = steward_operator::runtime::in_flight::client(config, args.api_max_in_flight)?;
    let handle = steward_operator::runtime::start(client, args).await?;
    tracing::info!(http = %handle.http_addr, "operator started");
    tokio::spawn(sample_allocator(handle.metrics.clone()));
    let stop = handle.shutdown_token();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutdown signal received");
        stop.cancel();
    });
    handle.wait().await.map_err(anyhow::Error::msg)
}

/// Samples jemalloc's statistics into `steward_allocator_bytes` every 10 s: what the heap holds
/// (`allocated`) against what the process keeps resident for it.
async fn sample_allocator(metrics: steward_operator::metrics::Metrics) {
    use tikv_jemalloc_ctl::{epoch, stats};
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(10));
    loop {
        tick.tick().await;
        if epoch::advance().is_err() {
            continue;
        }
        let read = [
            ("allocated", stats::allocated::read()),
            ("active", stats::active::read()),
            ("resident", stats::resident::read()),
            ("mapped", stats::mapped::read()),
            ("retained", stats::retained::read()),
        ];
        for (state, bytes) in read {
            if let Ok(bytes) = bytes {
                metrics.set_allocator_bytes(state, bytes as u64);
            }
        }
    }
}

async fn run_client(command: steward_operator::cli::ClientCommand) -> anyhow::Result<()> {
    let env = steward_operator::cli::config::Env::from_process();
    let cwd = std::env::current_dir()?;
    let text = steward_operator::cli::run(command, &env, &cwd).await?;
    write_stdout(&text)
}

async fn run_node(args: NodeArgs) -> anyhow::Result<()> {
    let client = kube::Client::try_default().await?;
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    let config =
        steward_node::NodeConfig::new(args.name, args.state_dir, vec![exe, "node-shim".into()]);
    let node = steward_node::start(client, config).await?;
    tracing::info!(kubelet = %node.kubelet_addr(), "node agent started");
    shutdown_signal().await;
    node.shutdown().await;
    Ok(())
}

/// Waits for SIGTERM or Ctrl-C.
pub(crate) async fn shutdown_signal() {
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

fn main() -> ExitCode {
    // The shim execs the container: it must not start a runtime or threads first.
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("node-shim") {
        let code = steward_node::shim_main(argv[2..].to_vec());
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let cli = Cli::parse();
    // The operator's threads allocate without jemalloc's per-thread caches
    // (`runtime::thread_cache`): ~5 MiB less at 1,000 clusters.
    if matches!(cli.command, Command::Operator(_)) {
        steward_operator::runtime::thread_cache::turn_off();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_start(|| {
            steward_operator::runtime::thread_cache::on_thread_start();
        })
        .build();
    match runtime {
        Ok(rt) => rt.block_on(async_main(cli)),
        Err(err) => {
            eprintln!("error: starting the async runtime: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Writes `text` to standard output. A reader that stopped early (`steward crd | head`) is
/// not an error: the output was wanted only in part.
fn write_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::from(err).context("writing to standard output"))
        }
        _ => Ok(()),
    }
}

async fn async_main(cli: Cli) -> ExitCode {
    // kube's and reqwest's rustls need a process-wide crypto provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    init_tracing(cli.log_format);
    let result = match cli.command {
        Command::Operator(args) => run_operator(*args).await,
        Command::Crd => steward_operator::crd::crds_yaml()
            .map_err(anyhow::Error::from)
            .and_then(|yaml| write_stdout(&yaml)),
        Command::Openapi => write_stdout(&steward_operator::api::server::openapi_json()),
        Command::SelfCheck => self_check::run().await,
        Command::Dev(command) => dev_cli::run(command).await,
        Command::Node(args) => run_node(args).await,
        Command::NodeShim { .. } => Err(anyhow::anyhow!("node-shim must be the first argument")),
        Command::Completion { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "steward", &mut script);
            write_stdout(&String::from_utf8_lossy(&script))
        }
        Command::Client(command) => run_client(*command).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
