//! The FoundationDB stand-in's one binary (never FoundationDB), dispatched on the name it runs
//! as (argv[0]), or as `fdb-standin <name> args…`: `fdbserver`, `fdbcli`,
//! `fdb-kubernetes-monitor`, `fdbbackup`, `fdbrestore`, `backup_agent`, and `crash-loop` (what a
//! Pod buggified with `spec.buggify.crashLoop` runs instead of the monitor: no process, it waits
//! until it is stopped).

use std::path::Path;

use tracing_subscriber::EnvFilter;

const TOOLS: [&str; 7] = [
    "fdbserver",
    "fdbcli",
    "fdb-kubernetes-monitor",
    "fdbbackup",
    "fdbrestore",
    "backup_agent",
    "crash-loop",
];

/// The name this program runs as: the file name of argv[0].
fn program_name(argv0: Option<&str>) -> &str {
    argv0
        .and_then(|a| Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("fdb-standin")
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let name = program_name(args.first().map(String::as_str)).to_owned();
    // `fdb-standin <tool> args…`: argv as the tool would see it.
    let (tool, argv): (String, Vec<String>) = if TOOLS.contains(&name.as_str()) {
        (name, args)
    } else if let Some(t) = args.get(1).filter(|t| TOOLS.contains(&t.as_str())) {
        (t.clone(), args[1..].to_vec())
    } else {
        eprintln!(
            "fdb-standin: a FoundationDB stand-in (not FoundationDB); run as one of {}",
            TOOLS.join(", ")
        );
        std::process::exit(2);
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let rest: Vec<String> = argv[1..].to_vec();
    let code = match tool.as_str() {
        "fdbserver" => {
            let a = steward_fdb_standin::server::ServerArgs::parse(&argv)?;
            runtime.block_on(steward_fdb_standin::server::run(a))?;
            0
        }
        "fdbcli" => runtime.block_on(async {
            steward_fdb_standin::cli::run(rest, &mut std::io::stdout(), &mut std::io::stderr())
                .await
        }),
        "fdb-kubernetes-monitor" => runtime.block_on(steward_fdb_standin::monitor::main(rest)),
        "fdbbackup" => runtime.block_on(async {
            steward_fdb_standin::backup_tools::fdbbackup(
                rest,
                &mut std::io::stdout(),
                &mut std::io::stderr(),
            )
            .await
        }),
        "fdbrestore" => runtime.block_on(async {
            steward_fdb_standin::backup_tools::fdbrestore(
                rest,
                &mut std::io::stdout(),
                &mut std::io::stderr(),
            )
            .await
        }),
        "backup_agent" => runtime.block_on(async {
            steward_fdb_standin::backup_tools::backup_agent(rest, &mut std::io::stderr()).await
        }),
        "crash-loop" => {
            eprintln!(
                "crash-loop: this process group is buggified (spec.buggify.crashLoop); no process is started"
            );
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        other => {
            eprintln!("ERROR: unknown tool `{other}'");
            2
        }
    };
    std::process::exit(code);
}
