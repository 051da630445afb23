//! `fdb-kubernetes-monitor`: runs `serverCount` stand-in `fdbserver`s from FoundationDB's
//! monitor configuration JSON, reloads it when it changes, rejects a bad one, restarts exited
//! servers, records its state for `report`; `--mode sidecar` provides a version's binary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::util::write_durably;

/// One argument of the monitor configuration.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Argument {
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub values: Option<Vec<Argument>>,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub offset: Option<i64>,
    #[serde(default)]
    pub multiplier: Option<i64>,
}

impl Argument {
    /// The argument's text for process number `n` (from 1).
    pub fn render(&self, n: u32, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
        match self.kind.as_deref().unwrap_or("Value") {
            "Value" => self
                .value
                .clone()
                .ok_or_else(|| "a Value argument without `value'".to_owned()),
            "Concatenate" => self
                .values
                .as_deref()
                .unwrap_or_default()
                .iter()
                .map(|a| a.render(n, env))
                .collect(),
            "Environment" => {
                let source = self
                    .source
                    .as_deref()
                    .ok_or("an Environment argument without `source'")?;
                env(source).ok_or_else(|| format!("missing environment variable {source}"))
            }
            "ProcessNumber" => Ok((self.offset.unwrap_or(0)
                + self.multiplier.unwrap_or(1) * i64::from(n))
            .to_string()),
            other => Err(format!("unknown argument type {other}")),
        }
    }
}

/// FoundationDB's `fdb-kubernetes-monitor` configuration.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct MonitorConfig {
    pub version: String,
    #[serde(rename = "serverCount", default = "one")]
    pub server_count: u32,
    #[serde(default)]
    pub arguments: Vec<Argument>,
}

fn one() -> u32 {
    1
}

impl MonitorConfig {
    pub fn parse(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("cannot parse the configuration: {e}"))
    }

    /// The arguments of process `n`.
    pub fn arguments_for(
        &self,
        n: u32,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<String>, String> {
        self.arguments.iter().map(|a| a.render(n, env)).collect()
    }
}

#[derive(Debug, Default, PartialEq)]
pub struct MonitorArgs {
    pub input_dir: PathBuf,
    pub input_monitor_conf: String,
    pub data_dir: PathBuf,
    pub shared_binary_dir: PathBuf,
    pub main_container_version: String,
    pub mode: String,
    pub output_dir: PathBuf,
    pub sidecar_version: Option<String>,
}

impl MonitorArgs {
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let mut a = MonitorArgs {
            input_dir: PathBuf::from("/var/dynamic-conf"),
            input_monitor_conf: "config.json".into(),
            data_dir: PathBuf::from("/var/fdb/data"),
            shared_binary_dir: PathBuf::from("/var/fdb/shared-binaries"),
            main_container_version: crate::util::own_version(),
            mode: "launcher".into(),
            output_dir: PathBuf::from("/var/fdb/shared-binaries"),
            sidecar_version: None,
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (arg.as_str(), None),
            };
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| it.next().cloned())
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match name.trim_start_matches('-') {
                "input-dir" => a.input_dir = value()?.into(),
                "input-monitor-conf" => a.input_monitor_conf = value()?,
                "data-dir" => a.data_dir = value()?.into(),
                "shared-binary-dir" => a.shared_binary_dir = value()?.into(),
                "main-container-version" => a.main_container_version = value()?,
                "mode" => a.mode = value()?,
                "output-dir" => a.output_dir = value()?.into(),
                "sidecar-version" => a.sidecar_version = Some(value()?),
                "log-path"
                | "copy-file"
                | "copy-binary"
                | "copy-library"
                | "require-not-empty"
                | "input-file"
                | "additional-env-file"
                | "process-count" => {
                    value()?;
                }
                other => return Err(format!("unknown option --{other}")),
            }
        }
        Ok(a)
    }
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The environment recorded in the state: FoundationDB's `FDB_*` variables.
fn recorded_environment() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with("FDB_") && !k.starts_with("FDB_STANDIN_"))
        .collect()
}

/// Checks a configuration: it parses, every process's arguments render, its version's binary
/// exists. The binary to run.
fn validate(args: &MonitorArgs, text: &str) -> Result<(MonitorConfig, PathBuf), String> {
    let cfg = MonitorConfig::parse(text)?;
    for n in 1..=cfg.server_count {
        cfg.arguments_for(n, &env_var)?;
    }
    let binary = if cfg.version == args.main_container_version {
        std::env::current_exe().map_err(|e| format!("cannot find the running binary: {e}"))?
    } else {
        let p = args.shared_binary_dir.join(&cfg.version).join("fdbserver");
        if !p.is_file() {
            return Err(format!(
                "version {} is not the main container's ({}) and {} does not exist",
                cfg.version,
                args.main_container_version,
                p.display()
            ));
        }
        p
    };
    Ok((cfg, binary))
}

struct Active {
    text: String,
    cfg: MonitorConfig,
    binary: PathBuf,
}

fn write_state(args: &MonitorArgs, active: Option<&Active>, rejected: Option<&str>) {
    let current = active
        .and_then(|a| serde_json::from_str::<Value>(&a.text).ok())
        .map(|v| v.to_string());
    let state = json!({
        "currentConfiguration": current,
        "environment": recorded_environment(),
        "rejected": rejected,
    });
    if let Err(e) = write_durably(
        &args.data_dir.join("monitor-state.json"),
        state.to_string().as_bytes(),
    ) {
        tracing::warn!("cannot write the monitor state: {e}");
    }
}

fn spawn(active: &Active, n: u32, main_version: &str) -> Result<Child, String> {
    let argv = active.cfg.arguments_for(n, &env_var)?;
    let mut cmd = Command::new(&active.binary);
    if active.cfg.version == main_version {
        cmd.arg0("fdbserver");
    }
    cmd.args(&argv)
        .env("FDB_STANDIN_VERSION", &active.cfg.version)
        .env("FDB_STANDIN_MONITOR_PID", std::process::id().to_string())
        .kill_on_drop(true);
    tracing::info!("starting fdbserver {n}: {}", argv.join(" "));
    cmd.spawn()
        .map_err(|e| format!("cannot start fdbserver: {e}"))
}

/// Copies the input directory's cluster file into the data directory when none is there yet;
/// whether the data directory has one now. (The operator writes the cluster file into the
/// ConfigMap once it chose the coordinators, after the Pods started; from then on the servers
/// keep their copy up to date.)
fn ensure_cluster_file(args: &MonitorArgs, target: &Path) -> bool {
    if target.exists() {
        return true;
    }
    match std::fs::read(args.input_dir.join("fdb.cluster")) {
        Ok(bytes) => match write_durably(target, &bytes) {
            Ok(()) => {
                tracing::info!("cluster file copied from the input directory");
                true
            }
            Err(e) => {
                tracing::error!("cannot copy the cluster file: {e}");
                false
            }
        },
        Err(_) => false,
    }
}

async fn launcher(args: MonitorArgs) -> i32 {
    let target = args.data_dir.join("fdb.cluster");
    if !ensure_cluster_file(&args, &target) {
        tracing::warn!(
            "no cluster file in the input directory yet: no server starts until there is one"
        );
    }
    let conf_path = args.input_dir.join(&args.input_monitor_conf);
    let mut seen: Option<String> = None;
    let mut active: Option<Active> = None;
    let mut rejected: Option<String> = None;
    let mut children: BTreeMap<u32, Child> = BTreeMap::new();
    let mut exited: BTreeMap<u32, Instant> = BTreeMap::new();
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    else {
        return 1;
    };
    let mut interval = tokio::time::interval(Duration::from_millis(250));
    let mut last_poll: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = interval.tick() => {}
        }
        // The configuration, polled every second; a rejected one is tried again on every poll
        // (its version's binary may arrive later from the sidecar: FoundationDB's monitor
        // loads its configuration again when the operator marks the Pod as having seen an
        // outdated ConfigMap).
        if last_poll.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            last_poll = Some(Instant::now());
            let text = std::fs::read_to_string(&conf_path).ok();
            if let Some(text) = text
                && (seen.as_ref() != Some(&text) || rejected.is_some())
            {
                let again = seen.as_ref() == Some(&text);
                seen = Some(text.clone());
                match validate(&args, &text) {
                    Ok((cfg, binary)) => {
                        tracing::info!("configuration loaded: version {}", cfg.version);
                        active = Some(Active { text, cfg, binary });
                        rejected = None;
                        write_state(&args, active.as_ref(), None);
                    }
                    Err(e) if again && rejected.as_deref() == Some(e.as_str()) => {}
                    Err(e) => {
                        tracing::warn!("configuration rejected: {e}");
                        rejected = Some(e);
                        write_state(&args, active.as_ref(), rejected.as_deref());
                    }
                }
            }
        }
        let Some(act) = &active else {
            continue;
        };
        if !ensure_cluster_file(&args, &target) {
            continue;
        }
        // Exited servers restart after 1 s with the then active configuration.
        for (n, child) in children.iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                tracing::info!("fdbserver {n} exited ({status})");
                exited.insert(*n, Instant::now());
            }
        }
        children.retain(|n, _| !exited.contains_key(n));
        let count = act.cfg.server_count;
        children.retain(|n, _| *n <= count);
        for n in 1..=count {
            if children.contains_key(&n) {
                continue;
            }
            if exited
                .get(&n)
                .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
            {
                continue;
            }
            match spawn(act, n, &args.main_container_version) {
                Ok(c) => {
                    children.insert(n, c);
                    exited.remove(&n);
                }
                Err(e) => {
                    tracing::warn!("{e}");
                    exited.insert(n, Instant::now());
                }
            }
        }
    }
    for (_, mut c) in children {
        let _ = c.kill().await;
    }
    0
}

async fn sidecar(args: MonitorArgs) -> i32 {
    let version = args
        .sidecar_version
        .clone()
        .unwrap_or_else(crate::util::own_version);
    if version != args.main_container_version {
        let dir = args.output_dir.join(&version);
        let link = dir.join("fdbserver");
        let made = std::env::current_exe().and_then(|exe| {
            std::fs::create_dir_all(&dir)?;
            if std::fs::symlink_metadata(&link).is_ok() {
                std::fs::remove_file(&link)?;
            }
            std::os::unix::fs::symlink(std::fs::canonicalize(exe)?, &link)
        });
        if let Err(e) = made {
            tracing::error!("cannot provide {}: {e}", link.display());
            return 1;
        }
        tracing::info!("provided {}", link.display());
    }
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    else {
        return 1;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    0
}

/// `report --data-dir D`: the recorded state, one JSON object.
fn report(data_dir: &Path) -> i32 {
    match std::fs::read_to_string(data_dir.join("monitor-state.json")) {
        Ok(text) => {
            println!("{}", text.trim());
            0
        }
        Err(e) => {
            eprintln!("no monitor state in {}: {e}", data_dir.display());
            1
        }
    }
}

pub async fn main(args: Vec<String>) -> i32 {
    if args.first().map(String::as_str) == Some("report") {
        return match MonitorArgs::parse(&args[1..]) {
            Ok(a) => report(&a.data_dir),
            Err(e) => {
                eprintln!("{e}");
                2
            }
        };
    }
    let args = match MonitorArgs::parse(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    match args.mode.as_str() {
        "launcher" => launcher(args).await,
        "sidecar" | "init" => sidecar(args).await,
        other => {
            eprintln!("unknown mode {other}");
            2
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"{"version": "7.1.57", "serverCount": 2, "arguments": [
      {"value": "--cluster_file"}, {"value": "/var/fdb/data/fdb.cluster"},
      {"value": "--public_address"},
      {"type": "Concatenate", "values": [{"type": "Environment", "source": "FDB_PUBLIC_IP"},
         {"value": ":"}, {"type": "ProcessNumber", "offset": 4499, "multiplier": 2}]},
      {"value": "--locality_instance_id"}, {"type": "Environment", "source": "FDB_INSTANCE_ID"},
      {"value": "--knob_max_trace_lines=1000"}
    ]}"#;

    fn env(name: &str) -> Option<String> {
        match name {
            "FDB_PUBLIC_IP" => Some("10.0.0.7".into()),
            "FDB_INSTANCE_ID" => Some("storage-3".into()),
            _ => None,
        }
    }

    #[test]
    fn configurations_render_per_process_number() {
        let cfg = MonitorConfig::parse(CONFIG).unwrap();
        assert_eq!(cfg.server_count, 2);
        assert_eq!(
            cfg.arguments_for(1, &env).unwrap(),
            [
                "--cluster_file",
                "/var/fdb/data/fdb.cluster",
                "--public_address",
                "10.0.0.7:4501",
                "--locality_instance_id",
                "storage-3",
                "--knob_max_trace_lines=1000"
            ]
        );
        assert_eq!(cfg.arguments_for(2, &env).unwrap()[3], "10.0.0.7:4503");
        let no_count = MonitorConfig::parse(r#"{"version": "7.1.57", "arguments": []}"#).unwrap();
        assert_eq!(no_count.server_count, 1);
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert!(MonitorConfig::parse("{").is_err());
        assert!(MonitorConfig::parse(r#"{"serverCount": 1}"#).is_err());
        let missing = MonitorConfig::parse(
            r#"{"version": "7.1.57", "arguments": [{"type": "Environment", "source": "FDB_NOPE"}]}"#,
        )
        .unwrap();
        assert_eq!(
            missing.arguments_for(1, &env).unwrap_err(),
            "missing environment variable FDB_NOPE"
        );
        let unknown =
            MonitorConfig::parse(r#"{"version": "7.1.57", "arguments": [{"type": "Bogus"}]}"#)
                .unwrap();
        assert!(unknown.arguments_for(1, &env).is_err());
    }

    #[test]
    fn arguments_parse() {
        let a = MonitorArgs::parse(
            &[
                "--input-dir",
                "/in",
                "--input-monitor-conf=config.json",
                "--data-dir",
                "/d",
                "--main-container-version",
                "7.1.57",
                "--mode",
                "sidecar",
                "--sidecar-version",
                "7.3.43",
            ]
            .map(String::from),
        )
        .unwrap();
        assert_eq!(a.input_dir, PathBuf::from("/in"));
        assert_eq!(a.data_dir, PathBuf::from("/d"));
        assert_eq!(a.mode, "sidecar");
        assert_eq!(a.sidecar_version.as_deref(), Some("7.3.43"));
        assert!(MonitorArgs::parse(&["--bogus".to_owned()]).is_err());
    }
}
