//! The CrateDB stand-in's one binary, dispatched on the name it runs as (never CrateDB):
//!
//! - `cratedb-standin -Cnode.name=… …` or `crate -C…` (CrateDB's start command): one node;
//! - `crash --hosts … -c …` or `cratedb-standin crash …`: the stand-in's crash shell.

use std::path::Path;

use tracing_subscriber::EnvFilter;

/// The name this program runs as: the file name of argv[0].
fn program_name(argv0: Option<&str>) -> &str {
    argv0
        .and_then(|a| Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("cratedb-standin")
}

fn main() -> anyhow::Result<()> {
    let mut args: Vec<String> = std::env::args().collect();
    let name = program_name(args.first().map(String::as_str)).to_owned();
    let rest: Vec<String> = args.drain(..).skip(1).collect();
    let runtime = tokio::runtime::Runtime::new()?;
    if name == "crash" || rest.first().map(String::as_str) == Some("crash") {
        let crash_args = if name == "crash" {
            rest
        } else {
            rest.into_iter().skip(1).collect()
        };
        let password = std::env::var("CRATEPW").ok();
        let code = runtime.block_on(async {
            steward_cratedb_standin::crash::run(
                crash_args,
                password,
                &mut std::io::stdin(),
                &mut std::io::stdout(),
                &mut std::io::stderr(),
            )
            .await
        });
        std::process::exit(code);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let config = steward_cratedb_standin::NodeConfig::from_crate_args(rest)?;
    runtime.block_on(steward_cratedb_standin::run(config))?;
    Ok(())
}
