//! `fdbcli -C <cluster file> [--timeout N] --exec "<cmd>; <cmd>…"`: the stand-in's fdbcli.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::proto::{ClientInfo, CoordReply, Request, Response, call};
use crate::server::ask_all;
use crate::util::{Bytes, ConnectionString, own_version, parse_command_line, protocol_version};

const TIMED_OUT: &str = "ERROR: Operation aborted because the transaction timed out (1031)";

/// fdbcli's options.
#[derive(Debug, PartialEq)]
pub struct CliArgs {
    pub cluster_file: PathBuf,
    pub timeout: Duration,
    pub exec: Option<String>,
}

impl CliArgs {
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let mut cluster_file = None;
        let mut timeout = Duration::from_secs(5);
        let mut exec = None;
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let (name, inline) = match a.split_once('=') {
                Some((n, v)) if n.starts_with("--") => (n, Some(v.to_owned())),
                _ => (a.as_str(), None),
            };
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| it.next().cloned())
                    .ok_or_else(|| format!("ERROR: option `{name}' needs a value"))
            };
            match name {
                "-C" | "--cluster-file" | "--cluster_file" => {
                    cluster_file = Some(PathBuf::from(value()?))
                }
                "--timeout" => {
                    let v = value()?;
                    let secs: f64 = v
                        .parse()
                        .ok()
                        .filter(|s: &f64| s.is_finite() && *s > 0.0)
                        .ok_or_else(|| format!("ERROR: invalid timeout `{v}'"))?;
                    timeout = Duration::from_secs_f64(secs);
                }
                "--exec" => exec = Some(value()?),
                "--log-dir"
                | "--trace_format"
                | "--tls_certificate_file"
                | "--tls_key_file"
                | "--tls_ca_file"
                | "--knob" => {
                    value()?;
                }
                "--log" | "--no-status" | "--no-hints" => {}
                other => return Err(format!("ERROR: unknown option `{other}'")),
            }
        }
        let cluster_file = cluster_file
            .or_else(|| std::env::var_os("FDB_CLUSTER_FILE").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("fdb.cluster"));
        Ok(Self {
            cluster_file,
            timeout,
            exec,
        })
    }
}

struct Conn {
    reachable: Vec<(String, bool)>,
    quorum: bool,
    leader: Option<String>,
}

/// A client of the cluster (fdbcli, and the backup tools and agents): finds the cluster
/// controller through the coordinators and follows a newer connection string.
pub struct Client {
    cluster_file: PathBuf,
    cs: ConnectionString,
    timeout: Duration,
    writemode: bool,
    pub info: ClientInfo,
}

/// The versions of the client libraries in `dir` (one subdirectory per version), other than
/// `own`, sorted.
fn external_versions(dir: &std::path::Path, own: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut versions: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|v| v != own && crate::util::image_version(&format!("x:{v}")).is_some())
        .collect();
    versions.sort();
    versions
}

pub enum Failure {
    Error(String),
    TimedOut,
}

impl Client {
    /// A client of the cluster named by `cluster_file`: this program's version, and the
    /// versions found in `$FDB_NETWORK_OPTION_EXTERNAL_CLIENT_DIRECTORY` (FoundationDB's
    /// multi-version client: here a directory per version, as the upgrade sidecar fills
    /// `/var/fdb/shared-binaries`).
    pub fn new(cluster_file: PathBuf, timeout: Duration) -> anyhow::Result<Self> {
        let cs = ConnectionString::read(&cluster_file)?;
        let version = own_version();
        let libraries = std::env::var_os("FDB_NETWORK_OPTION_EXTERNAL_CLIENT_DIRECTORY")
            .map(|dir| external_versions(std::path::Path::new(&dir), &version))
            .unwrap_or_default();
        Ok(Self {
            cluster_file,
            cs,
            timeout,
            writemode: false,
            info: ClientInfo {
                protocol: protocol_version(&version),
                version,
                libraries,
            },
        })
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Asks the coordinators who leads; follows a newer connection string (rewriting the
    /// cluster file it was given; a file that cannot be rewritten, e.g. a read-only ConfigMap
    /// mount, is logged and the new string used anyway).
    async fn connect(&mut self) -> Conn {
        for _ in 0..3 {
            let hello = Request::Hello {
                cluster: self.cs.description.clone(),
            };
            let answers = ask_all(&self.cs.coordinators, &hello).await;
            let replies: Vec<(String, CoordReply)> = answers
                .iter()
                .filter_map(|(a, r)| match r {
                    Some(Response::Coord(c)) => Some((a.clone(), (**c).clone())),
                    _ => None,
                })
                .collect();
            if let Some((_, best)) = replies.iter().max_by_key(|(_, r)| r.stamp)
                && !best.connection_string.is_empty()
                && best.connection_string != self.cs.to_string()
                && let Ok(cs) = ConnectionString::parse(&best.connection_string)
            {
                if let Err(e) = cs.write(&self.cluster_file) {
                    tracing::warn!(
                        "cannot rewrite the cluster file {}: {e}; using {cs}",
                        self.cluster_file.display()
                    );
                }
                self.cs = cs;
                continue;
            }
            let n = self.cs.coordinators.len();
            let reachable = self
                .cs
                .coordinators
                .iter()
                .map(|c| (c.clone(), replies.iter().any(|(a, _)| a == c)))
                .collect();
            let mut leader = None;
            for (_, r) in &replies {
                if let Some(nom) = &r.nominee {
                    let votes = replies
                        .iter()
                        .filter(|(_, x)| x.nominee.as_ref() == Some(nom))
                        .count();
                    if votes * 2 > n {
                        leader = Some(nom.clone());
                    }
                }
            }
            return Conn {
                reachable,
                quorum: replies.len() * 2 > n,
                leader,
            };
        }
        Conn {
            reachable: Vec::new(),
            quorum: false,
            leader: None,
        }
    }

    /// Sends `req` to the cluster controller, retrying until the deadline.
    pub async fn ask_leader(
        &mut self,
        req: &Request,
        deadline: Instant,
    ) -> Result<Response, Failure> {
        loop {
            let conn = self.connect().await;
            if let Some(leader) = conn.leader {
                let left = deadline.saturating_duration_since(Instant::now());
                match call(&leader, req, left.max(Duration::from_millis(100))).await {
                    Ok(Response::Error {
                        retryable: true, ..
                    })
                    | Err(_) => {}
                    Ok(Response::Error { message, .. }) => {
                        let message = if message.starts_with("ERROR:") {
                            message
                        } else {
                            format!("ERROR: {message}")
                        };
                        return Err(Failure::Error(message));
                    }
                    Ok(r) => return Ok(r),
                }
            }
            if Instant::now() >= deadline {
                return Err(Failure::TimedOut);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn exec(&mut self, args: &[Vec<u8>], deadline: Instant) -> Result<String, Failure> {
        let mut args: Vec<Bytes> = args.iter().cloned().map(Bytes).collect();
        // `configure new` carries this invocation's ID, kept across its retries.
        if args.first().is_some_and(|a| a.0 == b"configure")
            && args.get(1).is_some_and(|a| a.0 == b"new")
        {
            args.push(Bytes(
                format!("creation_id={}", crate::util::random_id()).into_bytes(),
            ));
        }
        let req = Request::Exec {
            client: self.info.clone(),
            args,
        };
        match self.ask_leader(&req, deadline).await? {
            Response::Text { text } => Ok(text),
            other => Err(Failure::Error(format!(
                "ERROR: unexpected answer {other:?}"
            ))),
        }
    }

    async fn cluster_status(&mut self, deadline: Instant) -> Result<Value, Failure> {
        let req = Request::Status {
            client: self.info.clone(),
        };
        match self.ask_leader(&req, deadline).await? {
            Response::Json { value } => Ok(value),
            other => Err(Failure::Error(format!(
                "ERROR: unexpected answer {other:?}"
            ))),
        }
    }

    /// `status json`: always printed; without a quorum or controller the cluster part is
    /// incomplete and the client part says why.
    async fn status_json(&mut self, deadline: Instant) -> Value {
        let cluster = self.cluster_status(deadline).await.ok();
        let conn = self.connect().await;
        let mut messages = Vec::new();
        if !conn.quorum {
            messages.push(json!({"name": "quorum_not_reachable", "description": "Unable to reach a quorum of coordinators."}));
        } else if cluster.is_none() {
            messages.push(json!({"name": "no_cluster_controller", "description": "Unable to locate a cluster controller within 2 seconds.  Check that there are server processes running."}));
        }
        let available = cluster
            .as_ref()
            .and_then(|c| c["database_available"].as_bool())
            .unwrap_or(false);
        let healthy = available
            && cluster
                .as_ref()
                .and_then(|c| c["data"]["state"]["healthy"].as_bool())
                .unwrap_or(false);
        let cluster = cluster.unwrap_or_else(|| {
            json!({
                "connection_string": self.cs.to_string(),
                "database_available": false,
                "messages": [{"name": "status_incomplete", "description": "Unable to retrieve all status information."}],
                "layers": {"_valid": false},
            })
        });
        json!({
            "client": {
                "cluster_file": {"path": self.cluster_file.display().to_string(), "up_to_date": true},
                "coordinators": {
                    "coordinators": conn.reachable.iter().map(|(a, r)| json!({"address": a, "reachable": r})).collect::<Vec<_>>(),
                    "quorum_reachable": conn.quorum,
                },
                "database_status": {"available": available, "healthy": healthy},
                "messages": messages,
                "timestamp": crate::util::unix_now() as u64,
            },
            "cluster": cluster,
        })
    }

    async fn command(&mut self, tokens: &[Vec<u8>], out: &mut dyn Write) -> Result<(), Failure> {
        let deadline = Instant::now() + self.timeout;
        let words: Vec<String> = tokens
            .iter()
            .map(|t| String::from_utf8_lossy(t).into_owned())
            .collect();
        let w = |i: usize| words.get(i).map(String::as_str);
        match w(0).unwrap_or("") {
            "status" => match w(1) {
                Some("json") => {
                    let v = self.status_json(deadline).await;
                    let text = serde_json::to_string_pretty(&v).unwrap_or_default();
                    let _ = writeln!(out, "{text}");
                    Ok(())
                }
                _ => {
                    let v = self.status_json(deadline).await;
                    let _ = writeln!(out, "{}", status_text(&v, &self.cluster_file));
                    Ok(())
                }
            },
            "writemode" => match w(1) {
                Some("on") => {
                    self.writemode = true;
                    Ok(())
                }
                Some("off") => {
                    self.writemode = false;
                    Ok(())
                }
                _ => Err(Failure::Error("ERROR: Usage: writemode <on|off>".into())),
            },
            "set" | "clear" | "clearrange" if !self.writemode => Err(Failure::Error(
                "ERROR: writemode must be enabled to set or clear keys in the database.".into(),
            )),
            "kill" => self.kill(&words[1..], deadline, out).await,
            "exclude" => {
                let no_wait = words.iter().any(|x| x == "no_wait");
                let text = self.exec(tokens, deadline).await?;
                if !text.is_empty() {
                    let _ = writeln!(out, "{text}");
                }
                let targets: Vec<String> = words[1..]
                    .iter()
                    .filter(|x| *x != "no_wait" && *x != "failed")
                    .cloned()
                    .collect();
                if targets.is_empty() || no_wait {
                    return Ok(());
                }
                let _ = writeln!(
                    out,
                    "Waiting for state to be removed from all excluded servers. This may take a while.\n(Interrupting this wait with CTRL+C will not cancel the data movement.)"
                );
                let mut check = vec![b"exclude_status".to_vec()];
                check.extend(targets.iter().map(|t| t.as_bytes().to_vec()));
                loop {
                    if self.exec(&check, deadline).await? == "safe" {
                        let _ = writeln!(
                            out,
                            "It is now safe to remove these machines or processes from the cluster."
                        );
                        return Ok(());
                    }
                    if Instant::now() >= deadline {
                        return Err(Failure::TimedOut);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            "" => Ok(()),
            _ => {
                let text = self.exec(tokens, deadline).await?;
                if !text.is_empty() {
                    let _ = writeln!(out, "{text}");
                }
                Ok(())
            }
        }
    }

    async fn kill(
        &mut self,
        targets: &[String],
        deadline: Instant,
        out: &mut dyn Write,
    ) -> Result<(), Failure> {
        let status = self.cluster_status(deadline).await?;
        let known: Vec<String> = status["processes"]
            .as_object()
            .map(|m| {
                m.values()
                    .filter_map(|p| p["address"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if targets.is_empty() {
            let _ = writeln!(
                out,
                "\nThe following {} processes can be killed:",
                known.len()
            );
            for a in &known {
                let _ = writeln!(out, "  {a}");
            }
            return Ok(());
        }
        let chosen: Vec<String> = if targets.len() == 1 && targets[0] == "all" {
            known.clone()
        } else {
            if let Some(bad) = targets.iter().find(|t| !known.contains(t)) {
                return Err(Failure::Error(format!(
                    "ERROR: process `{bad}' not recognized."
                )));
            }
            targets.to_vec()
        };
        ask_all(&chosen, &Request::Kill).await;
        let _ = writeln!(out, "Attempted to kill {} processes", chosen.len());
        Ok(())
    }
}

fn status_text(v: &Value, file: &std::path::Path) -> String {
    let c = &v["cluster"];
    let cfg = &c["configuration"];
    let mut s = format!("Using cluster file `{}'.\n\n", file.display());
    if !v["client"]["coordinators"]["quorum_reachable"]
        .as_bool()
        .unwrap_or(false)
    {
        s.push_str("Could not communicate with a quorum of coordination servers.\n(stand-in)");
        return s;
    }
    s.push_str(&format!(
        "Configuration:\n  Redundancy mode        - {}\n  Storage engine         - {}\n  Coordinators           - {}\n  Exclusions             - {}\n\n",
        cfg["redundancy_mode"].as_str().unwrap_or("unknown"),
        cfg["storage_engine"].as_str().unwrap_or("unknown"),
        cfg["coordinators_count"],
        cfg["excluded_servers"].as_array().map_or(0, Vec::len),
    ));
    s.push_str(&format!(
        "Cluster:\n  Stand-in processes     - {}\n  Generation             - {}\n  Recovery state         - {}\n\n",
        c["processes"].as_object().map_or(0, |m| m.len()),
        c["generation"],
        c["recovery_state"]["name"].as_str().unwrap_or("unknown"),
    ));
    s.push_str(&format!(
        "Data:\n  Replication health     - {}\n  Sum of key-value sizes - {} bytes",
        c["data"]["state"]["name"].as_str().unwrap_or("unknown"),
        c["data"]["total_kv_size_bytes"],
    ));
    s
}

/// Runs fdbcli; the exit code.
pub async fn run(args: Vec<String>, out: &mut dyn Write, errout: &mut dyn Write) -> i32 {
    let opts = match CliArgs::parse(&args) {
        Ok(o) => o,
        Err(e) => {
            let _ = writeln!(errout, "{e}");
            return 1;
        }
    };
    let Some(exec) = opts.exec else {
        let _ = writeln!(
            errout,
            "ERROR: the stand-in fdbcli has no interactive mode; use --exec"
        );
        return 1;
    };
    let commands = match parse_command_line(&exec) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(errout, "ERROR: {e}");
            return 1;
        }
    };
    let mut client = match Client::new(opts.cluster_file, opts.timeout) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(errout, "ERROR: {e:#}");
            return 1;
        }
    };
    for tokens in commands {
        match client.command(&tokens, out).await {
            Ok(()) => {}
            Err(Failure::Error(e)) => {
                let _ = writeln!(errout, "{e}");
                return 1;
            }
            Err(Failure::TimedOut) => {
                let _ = writeln!(errout, "{TIMED_OUT}");
                return 1;
            }
        }
    }
    let _ = out.flush();
    0
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn options_parse() {
        let a =
            CliArgs::parse(&s(&["-C", "/f", "--timeout", "2", "--exec", "status json"])).unwrap();
        assert_eq!(a.cluster_file, PathBuf::from("/f"));
        assert_eq!(a.timeout, Duration::from_secs(2));
        assert_eq!(a.exec.as_deref(), Some("status json"));
        let b = CliArgs::parse(&s(&["--cluster-file=/g", "--exec=get k"])).unwrap();
        assert_eq!(b.cluster_file, PathBuf::from("/g"));
        assert_eq!(b.timeout, Duration::from_secs(5));
        assert!(CliArgs::parse(&s(&["--timeout", "x"])).is_err());
        assert!(CliArgs::parse(&s(&["--bogus"])).is_err());
    }
}
