//! `cratedb-standin -Cnode.name=… -Chttp.port=…`: one stand-in CrateDB node. Never CrateDB.

use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let config = steward_cratedb_standin::NodeConfig::from_crate_args(std::env::args().skip(1))?;
    steward_cratedb_standin::run(config).await?;
    Ok(())
}
