//! The stand-in's own protocol between servers and tools: one JSON request line, one JSON
//! response line, per TCP connection (not FoundationDB's wire protocol).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::util::Bytes;

/// What a process tells the coordinators about itself in every heartbeat.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ProcessInfo {
    pub address: String,
    pub class: String,
    /// `zoneid`, `machineid`, `instance_id`, `processid`, `dcid`, … (without `locality_`).
    pub locality: BTreeMap<String, String>,
    pub command_line: String,
    pub version: String,
    pub protocol: String,
    pub start_unix: f64,
}

impl ProcessInfo {
    /// The fault domain: `zoneid`, else `machineid`, else the IP.
    pub fn zone(&self) -> String {
        self.locality
            .get("zoneid")
            .or_else(|| self.locality.get("machineid"))
            .cloned()
            .unwrap_or_else(|| {
                self.address
                    .rsplit_once(':')
                    .map_or(self.address.clone(), |(ip, _)| ip.to_owned())
            })
    }

    /// Whether an exclusion (`IP:PORT`, `IP`, or `locality_<name>:<value>`) names this process.
    pub fn matches(&self, exclusion: &str) -> bool {
        if let Some(rest) = exclusion.strip_prefix("locality_") {
            return rest
                .split_once(':')
                .is_some_and(|(k, v)| self.locality.get(k).is_some_and(|x| x == v));
        }
        if exclusion == self.address {
            return true;
        }
        self.address
            .rsplit_once(':')
            .is_some_and(|(ip, _)| ip == exclusion)
    }
}

/// The database configuration (`configure`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DbConfig {
    pub redundancy_mode: String,
    pub storage_engine: String,
    pub logs: u32,
    pub commit_proxies: u32,
    pub grv_proxies: u32,
    pub resolvers: u32,
}

impl DbConfig {
    pub fn replication(&self) -> usize {
        match self.redundancy_mode.as_str() {
            "single" => 1,
            "triple" => 3,
            _ => 2,
        }
    }
}

/// A backup on one tag (`fdbbackup start`), durable in the database state. `state` is one of
/// FoundationDB's state names ([`crate::backup::states`]).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct BackupState {
    pub tag: String,
    pub url: String,
    pub uid: String,
    pub state: String,
    pub snapshot_interval_seconds: u64,
    /// The commit version of `fdbbackup start`.
    pub begin_version: u64,
    /// Mutations up to this version are in the container (agents' progress).
    pub log_end_version: u64,
    /// The newest snapshot the agents wrote, and when (unix seconds).
    pub last_snapshot_version: Option<u64>,
    pub last_snapshot_unix: f64,
    /// The latest version the container can be restored to (set once a snapshot exists).
    pub restorable_version: Option<u64>,
    /// `fdbbackup discontinue`'s commit version.
    pub stop_version: Option<u64>,
}

/// One mutation of the normal keyspace, as recorded for running backups.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Mutation {
    Set { key: Bytes, value: Bytes },
    Clear { key: Bytes },
}

/// The mutations of one commit (FoundationDB's backup mutation log, `\xff\x02/blog/`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LogEntry {
    pub version: u64,
    pub mutations: Vec<Mutation>,
}

/// The last `fdbrestore start` into this database.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RestoreState {
    pub tag: String,
    pub url: String,
    pub state: String,
    pub version: u64,
    pub keys: usize,
}

/// The database: made durable by writing it whole to a majority of coordinators (the
/// stand-in's simplification: the coordinators are its log).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct DbState {
    pub generation: u64,
    pub version: u64,
    /// The connection string this state belongs to (empty until the first recovery).
    pub connection_string: String,
    pub config: Option<DbConfig>,
    /// The `configure new` that created the database (its invocation's random ID): a retry of
    /// the same invocation after an ambiguous commit is answered "Database created" again, as
    /// FoundationDB's `changeConfig` recognises its own earlier attempt.
    #[serde(default)]
    pub created_by: Option<String>,
    /// `IP:PORT`, `IP` or `locality_instance_id:X`, as given to `exclude`.
    pub excluded: Vec<String>,
    /// Addresses of excluded storage servers whose data has been moved away.
    pub drained: BTreeSet<String>,
    pub kv: BTreeMap<Bytes, Bytes>,
    /// Latched when every replica of some data was unreachable at once.
    pub missing_data: bool,
    /// Backups by tag (every tag ever used; finished ones keep their last state).
    #[serde(default)]
    pub backups: BTreeMap<String, BackupState>,
    /// `fdbbackup pause`: every backup agent idles.
    #[serde(default)]
    pub backup_paused: bool,
    /// Mutations not yet saved by the agents of every running backup.
    #[serde(default)]
    pub backup_log: Vec<LogEntry>,
    #[serde(default)]
    pub restore: Option<RestoreState>,
}

impl DbState {
    pub fn stamp(&self) -> (u64, u64) {
        (self.generation, self.version)
    }
}

/// A coordinator's answer to a heartbeat or a client's hello.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CoordReply {
    /// Whom this coordinator nominates as cluster controller.
    pub nominee: Option<String>,
    /// The connection string of the coordinated state this coordinator holds ("" if none).
    pub connection_string: String,
    pub stamp: (u64, u64),
    /// Every process that heartbeated here, with the age of its last heartbeat.
    pub table: Vec<(ProcessInfo, u64)>,
}

/// A client: the version of its own library, and the versions of the other client libraries
/// it loaded (FoundationDB's multi-version client, `external_client_directory`). It can talk to
/// a cluster whose protocol one of them speaks.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClientInfo {
    pub version: String,
    pub protocol: String,
    #[serde(default)]
    pub libraries: Vec<String>,
}

impl ClientInfo {
    /// The version of the library that speaks `protocol`, if one does.
    pub fn speaking(&self, protocol: &str) -> Option<String> {
        std::iter::once(&self.version)
            .chain(&self.libraries)
            .find(|v| crate::util::protocol_version(v) == protocol)
            .cloned()
    }

    /// The newest protocol any of its libraries speaks.
    pub fn max_protocol(&self) -> String {
        std::iter::once(&self.version)
            .chain(&self.libraries)
            .map(|v| crate::util::protocol_version(v))
            .max()
            .unwrap_or_default()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// A process's heartbeat to a coordinator.
    Heartbeat {
        info: ProcessInfo,
        connection_string: String,
    },
    /// A client's question to a coordinator (who leads, which connection string), for the
    /// cluster of that description.
    Hello {
        #[serde(default)]
        cluster: String,
    },
    /// Read the coordinated state (recovery). With `promise` > 0 the coordinator also promises
    /// to refuse every later write of a generation below it: once a recovery of generation `n`
    /// has read a majority, no controller of an older generation can commit there any more (a
    /// commit acknowledged by the old generation could otherwise be overwritten by the new one,
    /// which did not see it — FoundationDB's recovery locks the old generation likewise).
    CoordRead {
        #[serde(default)]
        promise: u64,
        /// The reader's cluster (its connection string's description).
        #[serde(default)]
        cluster: String,
    },
    /// Persist the coordinated state if it is not older than the one held.
    CoordWrite { state: Box<DbState> },
    /// The controller's part of `status json`.
    Status { client: ClientInfo },
    /// An fdbcli command for the controller.
    Exec {
        client: ClientInfo,
        args: Vec<Bytes>,
    },
    /// Exit (fdbcli's `kill`).
    Kill,
    /// `fdbbackup`, `fdbrestore` and `backup_agent` at the controller.
    Backup {
        client: ClientInfo,
        backup: crate::backup::BackupOp,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "r", rename_all = "snake_case")]
pub enum Response {
    Coord(Box<CoordReply>),
    State {
        state: Option<Box<DbState>>,
    },
    Ack {
        ok: bool,
    },
    Json {
        value: serde_json::Value,
    },
    Text {
        text: String,
    },
    /// `retryable`: the controller is not ready (elsewhere, recovering, no quorum); ask again.
    Error {
        message: String,
        retryable: bool,
    },
}

/// One request, one response, within `timeout`.
/// Connects to `address` from this Pod's own address when the node agent names it
/// (`STEWARD_POD_IP`): Pods here share the host's network, and a connection to another Pod's
/// address would otherwise come from 127.0.0.1 — in a real Pod it comes from the Pod's IP, which
/// is how the cluster tells its clients and processes apart.
async fn connect(address: &str) -> anyhow::Result<TcpStream> {
    let target: std::net::SocketAddr = match address.parse() {
        Ok(a) => a,
        Err(_) => return Ok(TcpStream::connect(address).await?),
    };
    let own = std::env::var("STEWARD_POD_IP")
        .ok()
        .and_then(|ip| ip.parse::<std::net::Ipv4Addr>().ok());
    match (own, target) {
        (Some(ip), std::net::SocketAddr::V4(t))
            if on_this_machine(*t.ip()) && on_this_machine(ip) =>
        {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(std::net::SocketAddr::from((ip, 0)))?;
            Ok(socket.connect(target).await?)
        }
        _ => Ok(TcpStream::connect(target).await?),
    }
}

/// A Pod address the node agent hands out on this machine: loopback, or its routed range
/// `198.18.0.0/15` (`steward_node`'s `podnet::ROUTED`, made local on `lo`; this crate does not
/// depend on the agent); a connection between two of them comes from `127.0.0.1` unless the
/// client binds its own.
fn on_this_machine(ip: std::net::Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback() || (a == 198 && b & 0xfe == 18)
}

pub async fn call(address: &str, req: &Request, timeout: Duration) -> anyhow::Result<Response> {
    let fut = async {
        let mut stream = connect(address).await?;
        let mut line = serde_json::to_vec(req)?;
        line.push(b'\n');
        stream.write_all(&line).await?;
        let mut reader = BufReader::new(stream);
        let mut answer = String::new();
        reader.read_line(&mut answer).await?;
        if answer.is_empty() {
            anyhow::bail!("{address} closed the connection");
        }
        Ok(serde_json::from_str(&answer)?)
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| anyhow::anyhow!("{address} did not answer in time"))?
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn info(addr: &str, loc: &[(&str, &str)]) -> ProcessInfo {
        ProcessInfo {
            address: addr.into(),
            class: "storage".into(),
            locality: loc
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            command_line: String::new(),
            version: "7.1.57".into(),
            protocol: String::new(),
            start_unix: 0.0,
        }
    }

    #[test]
    fn exclusions_match_address_ip_and_locality() {
        let p = info(
            "10.0.0.1:4500",
            &[("instance_id", "storage-1"), ("zoneid", "z1")],
        );
        assert!(p.matches("10.0.0.1:4500"));
        assert!(p.matches("10.0.0.1"));
        assert!(!p.matches("10.0.0.1:4501"));
        assert!(!p.matches("10.0.0.11"));
        assert!(p.matches("locality_instance_id:storage-1"));
        assert!(!p.matches("locality_instance_id:storage-2"));
        assert_eq!(p.zone(), "z1");
        assert_eq!(info("10.0.0.1:4500", &[]).zone(), "10.0.0.1");
    }

    #[test]
    fn state_round_trips() {
        let mut s = DbState::default();
        s.kv.insert(Bytes(vec![0xff, 2]), Bytes(b"v".to_vec()));
        s.drained.insert("1.2.3.4:5".into());
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<DbState>(&j).unwrap(), s);
    }
}
