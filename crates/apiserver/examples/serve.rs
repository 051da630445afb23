//! Runs the local control plane until Ctrl-C and writes its kubeconfig to the path given as the
//! first argument (default `./steward-dev.kubeconfig`). Optional second argument: a state file.
//!
//! `cargo run -p steward-apiserver --example serve -- /tmp/kc && kubectl --kubeconfig /tmp/kc get ns`

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .unwrap_or_else(|| "steward-dev.kubeconfig".into());
    let config = steward_apiserver::ServerConfig {
        state_file: args.next().map(Into::into),
        // kubectl sends no credentials over plain HTTP (see ServerConfig).
        anonymous_cluster_admin: true,
        ..Default::default()
    };
    let server = steward_apiserver::start(config).await?;
    std::fs::write(&path, server.kubeconfig_yaml())?;
    println!("serving on {}; kubeconfig written to {path}", server.url());
    tokio::signal::ctrl_c().await?;
    server.shutdown().await;
    Ok(())
}
