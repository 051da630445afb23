//! `fdbserver`: one stand-in process. Every process heartbeats to every coordinator; every
//! process can be a coordinator (it answers heartbeats, nominates a cluster controller and
//! persists the coordinated state in `<datadir>/coordination.json`); the process a majority of
//! coordinators nominates is the cluster controller ([`crate::controller`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::controller::{self, Controller};
use crate::proto::{CoordReply, DbState, ProcessInfo, Request, Response, call};
use crate::util::{
    ConnectionString, Timings, address_key, own_version, protocol_version, unix_now, write_durably,
};

/// `fdbserver`'s arguments (both `--name value` and `--name=value`; `-C` for the cluster file).
#[derive(Clone, Debug, PartialEq)]
pub struct ServerArgs {
    pub cluster_file: PathBuf,
    pub public_address: String,
    pub listen_address: Option<String>,
    pub datadir: PathBuf,
    pub class: String,
    pub locality: BTreeMap<String, String>,
    pub command_line: String,
}

impl ServerArgs {
    /// `argv` with argv[0].
    pub fn parse(argv: &[String]) -> anyhow::Result<Self> {
        let mut cluster_file = None;
        let mut public_address = None;
        let mut listen_address = None;
        let mut datadir = None;
        let mut class = "unset".to_owned();
        let mut locality = BTreeMap::new();
        let mut it = argv.iter().skip(1);
        while let Some(arg) = it.next() {
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) if n.starts_with('-') => (n.to_owned(), Some(v.to_owned())),
                _ => (arg.clone(), None),
            };
            let name = name.trim_start_matches('-').replace('-', "_");
            if name.starts_with("knob_") || name == "trace_format" || name == "logdir" {
                if inline.is_none() && !name.starts_with("knob_") {
                    it.next();
                }
                continue;
            }
            let mut value = || -> anyhow::Result<String> {
                match &inline {
                    Some(v) => Ok(v.clone()),
                    None => it
                        .next()
                        .cloned()
                        .with_context(|| format!("--{name} needs a value")),
                }
            };
            match name.as_str() {
                "C" | "cluster_file" => cluster_file = Some(PathBuf::from(value()?)),
                "p" | "public_address" => {
                    public_address = Some(value()?.trim_end_matches(":tls").to_owned())
                }
                "l" | "listen_address" => listen_address = Some(value()?),
                "d" | "datadir" => datadir = Some(PathBuf::from(value()?)),
                "c" | "class" => class = value()?,
                n if n.starts_with("locality_") => {
                    let v = value()?;
                    locality.insert(n.trim_start_matches("locality_").to_owned(), v);
                }
                _ => {
                    // Unknown options with a value are skipped like knobs.
                    if inline.is_none() {
                        it.next();
                    }
                }
            }
        }
        let public_address = public_address.context("--public_address is required")?;
        anyhow::ensure!(
            crate::util::is_address(&public_address),
            "--public_address must be IP:PORT, not `{public_address}'"
        );
        Ok(Self {
            cluster_file: cluster_file.unwrap_or_else(|| PathBuf::from("fdb.cluster")),
            public_address,
            listen_address: listen_address.filter(|l| l != "public"),
            datadir: datadir.unwrap_or_else(|| PathBuf::from(".")),
            class,
            locality,
            command_line: argv.join(" "),
        })
    }
}

/// What a coordinator keeps on disk.
#[derive(serde::Serialize, serde::Deserialize)]
struct Coordination {
    state: DbState,
}

pub struct Node {
    pub info: ProcessInfo,
    pub cs: ConnectionString,
    pub cluster_file: PathBuf,
    coord_path: PathBuf,
    /// The coordinated state this process holds as a coordinator.
    pub coord_state: Option<DbState>,
    /// The lowest generation this coordinator still accepts writes of (see `CoordRead`).
    pub promised: u64,
    /// Heartbeats received as a coordinator.
    heartbeats: BTreeMap<String, (ProcessInfo, Instant)>,
    /// Set while this process is the cluster controller.
    pub ctrl: Option<Controller>,
}

pub struct Server {
    pub node: Mutex<Node>,
    /// Serialises the controller's commits and recoveries.
    pub commit_lock: tokio::sync::Mutex<()>,
    /// Serialises this coordinator's writes of the coordinated state: the stamp check, the
    /// durable write and the in-memory update are one step, so an older state can never land on
    /// disk after a newer one (and be what a restarted coordinator reads).
    pub coord_write_lock: tokio::sync::Mutex<()>,
    pub timings: Timings,
}

/// How long one call to a peer may take.
pub const RPC_TIMEOUT: Duration = Duration::from_millis(800);

impl Server {
    pub fn lock(&self) -> MutexGuard<'_, Node> {
        self.node.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The class rank for cluster controller nominations: `cluster_controller`, then
    /// stateless/unset, then the rest.
    fn cc_rank(class: &str) -> u8 {
        match class {
            "cluster_controller" => 0,
            "stateless" | "unset" => 1,
            _ => 2,
        }
    }

    /// This coordinator's nominee: the best live, compatible candidate (not excluded if any
    /// is not), then by class, then the lowest address.
    fn nominee(&self, node: &Node) -> Option<String> {
        let excluded: &[String] = node
            .coord_state
            .as_ref()
            .map_or(&[], |s| s.excluded.as_slice());
        node.heartbeats
            .values()
            .filter(|(p, at)| {
                p.protocol == node.info.protocol && at.elapsed() < self.timings.liveness
            })
            .min_by_key(|(p, _)| {
                (
                    excluded.iter().any(|e| p.matches(e)),
                    Self::cc_rank(&p.class),
                    address_key(&p.address),
                )
            })
            .map(|(p, _)| p.address.clone())
    }

    fn coord_reply(&self, node: &Node, with_table: bool) -> CoordReply {
        CoordReply {
            nominee: self.nominee(node),
            connection_string: node
                .coord_state
                .as_ref()
                .map(|s| s.connection_string.clone())
                .unwrap_or_default(),
            stamp: node.coord_state.as_ref().map_or((0, 0), DbState::stamp),
            table: if with_table {
                node.heartbeats
                    .values()
                    .map(|(p, at)| {
                        (
                            p.clone(),
                            u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX),
                        )
                    })
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    async fn handle(self: &Arc<Self>, req: Request, peer: String) -> Response {
        // A coordinator serves its own cluster only (FoundationDB's coordinators answer by the
        // cluster file's key): a request for another description — a process or client whose
        // cluster file names an address this process now has — is refused.
        let foreign = |cluster: &str| {
            let own = self.lock().cs.description.clone();
            !cluster.is_empty() && cluster != own
        };
        let description = |cs: &str| {
            cs.split_once(':')
                .map_or(String::new(), |(d, _)| d.to_owned())
        };
        match &req {
            Request::Heartbeat {
                connection_string, ..
            } if foreign(&description(connection_string)) => {
                return crate::controller::retry("not a coordinator of this cluster");
            }
            Request::Hello { cluster } | Request::CoordRead { cluster, .. } if foreign(cluster) => {
                return crate::controller::retry("not a coordinator of this cluster");
            }
            Request::CoordWrite { state } if foreign(&description(&state.connection_string)) => {
                return Response::Ack { ok: false };
            }
            _ => {}
        }
        match req {
            Request::Heartbeat { info, .. } => {
                let mut node = self.lock();
                node.heartbeats
                    .insert(info.address.clone(), (info, Instant::now()));
                Response::Coord(Box::new(self.coord_reply(&node, true)))
            }
            Request::Hello { .. } => {
                let node = self.lock();
                Response::Coord(Box::new(self.coord_reply(&node, false)))
            }
            Request::CoordRead { promise, .. } => {
                let _serial = self.coord_write_lock.lock().await;
                let mut node = self.lock();
                node.promised = node.promised.max(promise);
                Response::State {
                    state: node.coord_state.clone().map(Box::new),
                }
            }
            Request::CoordWrite { state } => {
                let _serial = self.coord_write_lock.lock().await;
                let (ok, path) = {
                    let node = self.lock();
                    let ok = state.generation >= node.promised
                        && node
                            .coord_state
                            .as_ref()
                            .is_none_or(|s| state.stamp() >= s.stamp());
                    (ok, node.coord_path.clone())
                };
                if !ok {
                    return Response::Ack { ok: false };
                }
                let data = match serde_json::to_vec(&Coordination {
                    state: (*state).clone(),
                }) {
                    Ok(d) => d,
                    Err(_) => return Response::Ack { ok: false },
                };
                let written =
                    tokio::task::spawn_blocking(move || write_durably(&path, &data)).await;
                if !matches!(written, Ok(Ok(()))) {
                    return Response::Ack { ok: false };
                }
                let mut node = self.lock();
                if node
                    .coord_state
                    .as_ref()
                    .is_none_or(|s| state.stamp() >= s.stamp())
                {
                    node.coord_state = Some(*state);
                }
                Response::Ack { ok: true }
            }
            Request::Status { client } => controller::status(self, client, peer),
            Request::Exec { client, args } => controller::exec(self, client, peer, args).await,
            Request::Backup { client, backup } => crate::backup::handle(self, client, backup).await,
            Request::Kill => {
                tracing::info!("killed by fdbcli");
                tokio::spawn(async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    std::process::exit(0);
                });
                Response::Ack { ok: true }
            }
        }
    }

    async fn serve(self: Arc<Self>, stream: TcpStream) {
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let (read, mut write) = stream.into_split();
        let mut reader = BufReader::new(read);
        let mut line = String::new();
        if reader.read_line(&mut line).await.is_err() || line.is_empty() {
            return;
        }
        let response = match serde_json::from_str::<Request>(&line) {
            Ok(req) => self.handle(req, peer).await,
            Err(e) => Response::Error {
                message: format!("bad request: {e}"),
                retryable: false,
            },
        };
        if let Ok(mut out) = serde_json::to_vec(&response) {
            out.push(b'\n');
            let _ = write.write_all(&out).await;
        }
    }

    /// One heartbeat round: to every coordinator; follows a newer connection string; becomes
    /// or stops being the cluster controller.
    async fn tick(self: &Arc<Self>) {
        let (req, coords, me, my_cs) = {
            let node = self.lock();
            (
                Request::Heartbeat {
                    info: node.info.clone(),
                    connection_string: node.cs.to_string(),
                },
                node.cs.coordinators.clone(),
                node.info.address.clone(),
                node.cs.to_string(),
            )
        };
        let replies = ask_all(&coords, &req).await;
        let replies: Vec<CoordReply> = replies
            .into_iter()
            .filter_map(|(_, r)| match r {
                Some(Response::Coord(c)) => Some(*c),
                _ => None,
            })
            .collect();
        // A newer coordinated state under another connection string: follow it.
        if let Some(best) = replies.iter().max_by_key(|r| r.stamp)
            && !best.connection_string.is_empty()
            && best.connection_string != my_cs
            && let Ok(new) = ConnectionString::parse(&best.connection_string)
        {
            let mut node = self.lock();
            tracing::info!("connection string changed to {new}");
            if let Err(e) = new.write(&node.cluster_file) {
                tracing::warn!("cannot rewrite the cluster file: {e}");
            }
            node.cs = new;
            node.ctrl = None;
            return;
        }
        let votes = replies
            .iter()
            .filter(|r| r.nominee.as_deref() == Some(me.as_str()))
            .count();
        let leader = votes * 2 > coords.len();
        let table = merge_tables(&replies);
        if !leader {
            let mut node = self.lock();
            if node.ctrl.take().is_some() {
                tracing::info!("no longer cluster controller");
            }
            return;
        }
        let has_ctrl = self.lock().ctrl.is_some();
        if has_ctrl {
            controller::tick(self, table).await;
        } else if let Err(e) = controller::recover(self, table).await {
            tracing::warn!("recovery failed: {e:#}");
        }
    }
}

/// Sends `req` to every address at once; each answer or `None`.
pub async fn ask_all(addrs: &[String], req: &Request) -> Vec<(String, Option<Response>)> {
    let mut set = JoinSet::new();
    for a in addrs {
        let a = a.clone();
        let req = req.clone();
        set.spawn(async move {
            let r = call(&a, &req, RPC_TIMEOUT).await.ok();
            (a, r)
        });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        if let Ok(r) = r {
            out.push(r);
        }
    }
    out
}

/// The union of the coordinators' heartbeat tables, each process with its freshest age. A
/// process is its data: one that comes back on another address with the same `instance_id`
/// locality (the same data directory, as a Pod recreated on its claim) supersedes the entry of
/// its old address, as a FoundationDB storage server rejoins under its own ID wherever it runs.
fn merge_tables(replies: &[CoordReply]) -> Vec<(ProcessInfo, u64)> {
    let mut merged: BTreeMap<String, (ProcessInfo, u64)> = BTreeMap::new();
    for r in replies {
        for (p, age) in &r.table {
            match merged.get(&p.address) {
                Some((_, a)) if *a <= *age => {}
                _ => {
                    merged.insert(p.address.clone(), (p.clone(), *age));
                }
            }
        }
    }
    let mut freshest: BTreeMap<String, u64> = BTreeMap::new();
    for (p, age) in merged.values() {
        if let Some(id) = p.locality.get("instance_id") {
            let e = freshest.entry(id.clone()).or_insert(*age);
            *e = (*e).min(*age);
        }
    }
    merged
        .into_values()
        .filter(|(p, age)| {
            p.locality
                .get("instance_id")
                .is_none_or(|id| freshest.get(id).is_none_or(|f| *f >= *age))
        })
        .collect()
}

/// Runs one `fdbserver` until killed.
pub async fn run(args: ServerArgs) -> anyhow::Result<()> {
    let cs = ConnectionString::read(&args.cluster_file)?;
    let version = own_version();
    let bind = args
        .listen_address
        .clone()
        .unwrap_or_else(|| args.public_address.clone());
    let listener = TcpListener::bind(&bind)
        .await
        .with_context(|| format!("cannot listen on {bind}"))?;
    std::fs::create_dir_all(&args.datadir)?;
    let coord_path = args.datadir.join("coordination.json");
    let coord_state = match std::fs::read(&coord_path) {
        Ok(bytes) => Some(
            serde_json::from_slice::<Coordination>(&bytes)
                .with_context(|| format!("corrupt {}", coord_path.display()))?
                .state,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    let info = ProcessInfo {
        address: args.public_address.clone(),
        class: args.class.clone(),
        locality: args.locality.clone(),
        command_line: args.command_line.clone(),
        protocol: protocol_version(&version),
        version,
        start_unix: unix_now(),
    };
    tracing::info!(
        "stand-in fdbserver {} ({}) on {} in {}",
        info.version,
        info.class,
        info.address,
        cs
    );
    let server = Arc::new(Server {
        node: Mutex::new(Node {
            info,
            cs,
            cluster_file: args.cluster_file.clone(),
            coord_path,
            promised: coord_state.as_ref().map_or(0, |s| s.generation),
            coord_state,
            heartbeats: BTreeMap::new(),
            ctrl: None,
        }),
        commit_lock: tokio::sync::Mutex::new(()),
        coord_write_lock: tokio::sync::Mutex::new(()),
        timings: Timings::from_env(),
    });
    let monitor_pid: Option<u32> = std::env::var("FDB_STANDIN_MONITOR_PID")
        .ok()
        .and_then(|p| p.parse().ok());
    let ticker = {
        let server = server.clone();
        async move {
            let mut interval = tokio::time::interval(server.timings.heartbeat);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                // Die with the monitor.
                if monitor_pid.is_some_and(|p| std::os::unix::process::parent_id() != p) {
                    tracing::info!("the monitor is gone; exiting");
                    std::process::exit(0);
                }
                server.tick().await;
            }
        }
    };
    tokio::spawn(ticker);
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(server.clone().serve(stream));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn coordinator(dir: &std::path::Path) -> Arc<Server> {
        Arc::new(Server {
            node: Mutex::new(Node {
                info: ProcessInfo {
                    address: "127.0.0.1:4501".into(),
                    class: "storage".into(),
                    locality: BTreeMap::new(),
                    command_line: String::new(),
                    version: "7.1.57".into(),
                    protocol: protocol_version("7.1.57"),
                    start_unix: 0.0,
                },
                cs: ConnectionString::parse("t:abc@127.0.0.1:4501").unwrap(),
                cluster_file: dir.join("fdb.cluster"),
                coord_path: dir.join("coordination.json"),
                promised: 0,
                coord_state: None,
                heartbeats: BTreeMap::new(),
                ctrl: None,
            }),
            commit_lock: tokio::sync::Mutex::new(()),
            coord_write_lock: tokio::sync::Mutex::new(()),
            timings: Timings::from_env(),
        })
    }

    fn state(generation: u64, version: u64) -> Box<DbState> {
        Box::new(DbState {
            generation,
            version,
            ..DbState::default()
        })
    }

    async fn write(server: &Arc<Server>, generation: u64, version: u64) -> bool {
        let req = Request::CoordWrite {
            state: state(generation, version),
        };
        matches!(
            server.handle(req, String::new()).await,
            Response::Ack { ok: true }
        )
    }

    /// The lost acknowledged commit found by the FoundationDB upgrade e2e: a recovery of
    /// generation 2 read this coordinator, then the old generation's controller committed
    /// version 6 here (and on another coordinator: a majority, so it was acknowledged), then the
    /// recovery wrote generation 2 at version 5 over it. With the read's promise the old
    /// generation's write is refused, so it is never acknowledged.
    #[tokio::test]
    async fn a_recovery_read_refuses_the_older_generations_later_writes() {
        let dir = tempfile::tempdir().unwrap();
        let server = coordinator(dir.path());
        assert!(write(&server, 1, 5).await);
        let read = Request::CoordRead {
            promise: 2,
            cluster: "t".into(),
        };
        assert!(matches!(
            server.handle(read, String::new()).await,
            Response::State { state: Some(s) } if s.stamp() == (1, 5)
        ));
        assert!(
            !write(&server, 1, 6).await,
            "the old generation's commit is refused"
        );
        assert!(
            write(&server, 2, 5).await,
            "the new generation's state is taken"
        );
        // What a restarted coordinator reads is the newest state it accepted.
        let text = std::fs::read_to_string(dir.path().join("coordination.json")).unwrap();
        let on_disk: Coordination = serde_json::from_str(&text).unwrap();
        assert_eq!(on_disk.state.stamp(), (2, 5));
    }

    /// Found when two test planes reused each other's Pod addresses: a process of cluster `lk`
    /// wrote its coordinated state to an address that now belonged to a coordinator of cluster
    /// `rp`, whose processes then followed `lk`'s connection string. A coordinator serves its
    /// own cluster only.
    #[tokio::test]
    async fn a_coordinator_refuses_another_clusters_requests() {
        let dir = tempfile::tempdir().unwrap();
        let server = coordinator(dir.path());
        let mut foreign = state(5, 5);
        foreign.connection_string = "lk:xyz@127.0.0.9:4501".into();
        let write = Request::CoordWrite { state: foreign };
        assert!(matches!(
            server.handle(write, String::new()).await,
            Response::Ack { ok: false }
        ));
        assert!(server.lock().coord_state.is_none());
        for req in [
            Request::Hello {
                cluster: "lk".into(),
            },
            Request::CoordRead {
                promise: 9,
                cluster: "lk".into(),
            },
        ] {
            assert!(matches!(
                server.handle(req, String::new()).await,
                Response::Error {
                    retryable: true,
                    ..
                }
            ));
        }
        assert_eq!(server.lock().promised, 0, "a foreign read promises nothing");
        let own = Request::Hello {
            cluster: "t".into(),
        };
        assert!(matches!(
            server.handle(own, String::new()).await,
            Response::Coord(_)
        ));
    }

    #[test]
    fn server_arguments_parse_both_forms() {
        let argv: Vec<String> = [
            "/usr/bin/fdbserver",
            "--cluster_file",
            "/var/fdb/data/fdb.cluster",
            "--public_address=10.1.2.3:4501",
            "--class",
            "storage",
            "--datadir",
            "/var/fdb/data",
            "--locality_instance_id",
            "storage-1",
            "--locality_zoneid=node-a",
            "--knob_max_trace_lines=1000",
            "--trace_format",
            "json",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let a = ServerArgs::parse(&argv).unwrap();
        assert_eq!(a.cluster_file, PathBuf::from("/var/fdb/data/fdb.cluster"));
        assert_eq!(a.public_address, "10.1.2.3:4501");
        assert_eq!(a.class, "storage");
        assert_eq!(a.locality["instance_id"], "storage-1");
        assert_eq!(a.locality["zoneid"], "node-a");
        assert_eq!(a.command_line, argv.join(" "));
        assert!(ServerArgs::parse(&argv[..3]).is_err());
    }
}
