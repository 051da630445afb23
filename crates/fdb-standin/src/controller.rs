//! The cluster controller: recovery, role recruitment, commits (to a majority of
//! coordinators), data movement after exclusion, the data-loss latch, fdbcli's commands and
//! the cluster half of `status json`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use crate::proto::{ClientInfo, DbConfig, DbState, ProcessInfo, Request, Response};
use crate::server::{Server, ask_all};
use crate::util::{Bytes, ConnectionString, address_key, printable, protocol_version, random_id};

/// Roles recruited by a recovery, in status order.
const TX_ROLES: [&str; 5] = ["master", "commit_proxy", "grv_proxy", "resolver", "log"];

pub struct Controller {
    pub state: DbState,
    /// When the last recovery began.
    pub recovered_at: Instant,
    /// The coordinators' merged heartbeat table and when it was taken.
    pub table: Vec<(ProcessInfo, u64)>,
    pub table_at: Instant,
    /// Transaction roles → addresses.
    pub tx: BTreeMap<String, Vec<String>>,
    /// Data movement away from excluded storage servers, by address: when it began.
    pub moves: BTreeMap<String, Instant>,
    /// fdbcli invocations seen: peer address → (client, when).
    /// Clients by address: the library each talks through, its newest protocol, when last seen.
    pub clients: BTreeMap<String, (ClientInfo, String, Instant)>,
    /// Backup agents seen (by agent id) and when.
    pub agents: BTreeMap<String, Instant>,
    /// The agent that does the backup work (lease), and when it last polled.
    pub backup_lease: Option<(String, Instant)>,
}

pub(crate) fn err(message: impl Into<String>) -> Response {
    Response::Error {
        message: message.into(),
        retryable: false,
    }
}

pub(crate) fn retry(message: impl Into<String>) -> Response {
    Response::Error {
        message: message.into(),
        retryable: true,
    }
}

fn is_storage_class(class: &str) -> bool {
    matches!(class, "storage" | "unset")
}

/// A snapshot of what the controller knows about one process.
struct View<'a> {
    info: &'a ProcessInfo,
    age_ms: u64,
}

impl Controller {
    /// Backup agents that polled in the last 5 s.
    pub fn agents_running(&self) -> usize {
        self.agents
            .values()
            .filter(|at| at.elapsed() < std::time::Duration::from_secs(5))
            .count()
    }

    fn views(&self, protocol: &str) -> Vec<View<'_>> {
        let extra = u64::try_from(self.table_at.elapsed().as_millis()).unwrap_or(0);
        self.table
            .iter()
            .filter(|(p, _)| p.protocol == protocol)
            .map(|(p, age)| View {
                info: p,
                age_ms: age.saturating_add(extra),
            })
            .collect()
    }

    fn is_excluded(&self, p: &ProcessInfo) -> bool {
        self.state.excluded.iter().any(|e| p.matches(e))
    }

    /// Whether `p` holds data: a storage-class process (in a configured database) whose data
    /// was not moved away after its exclusion.
    fn holds_data(&self, p: &ProcessInfo) -> bool {
        self.state.config.is_some()
            && is_storage_class(&p.class)
            && !self.state.drained.contains(&p.address)
    }
}

/// The recruitment: transaction roles on live, compatible, non-excluded processes;
/// master/proxies/resolvers preferring stateless processes, logs preferring log processes.
fn assign(
    ctrl_state: &DbState,
    views: &[View<'_>],
    failure_ms: u64,
) -> BTreeMap<String, Vec<String>> {
    let excluded = |p: &ProcessInfo| ctrl_state.excluded.iter().any(|e| p.matches(e));
    let mut live: Vec<&ProcessInfo> = views
        .iter()
        .filter(|v| v.age_ms < failure_ms && !excluded(v.info))
        .map(|v| v.info)
        .collect();
    let rank = |c: &str| match c {
        "stateless" => 0,
        "unset" => 1,
        "cluster_controller" => 2,
        "log" | "transaction" => 4,
        "storage" => 5,
        _ => 3,
    };
    live.sort_by_key(|p| (rank(&p.class), address_key(&p.address)));
    let mut out = BTreeMap::new();
    if live.is_empty() {
        return out;
    }
    let take = |n: u32, pool: &[&ProcessInfo]| -> Vec<String> {
        (0..n as usize)
            .map(|i| pool[i % pool.len()].address.clone())
            .collect()
    };
    out.insert("master".to_owned(), take(1, &live));
    let Some(cfg) = &ctrl_state.config else {
        return out;
    };
    out.insert("commit_proxy".to_owned(), take(cfg.commit_proxies, &live));
    out.insert("grv_proxy".to_owned(), take(cfg.grv_proxies, &live));
    out.insert("resolver".to_owned(), take(cfg.resolvers, &live));
    let mut logs: Vec<&ProcessInfo> = live
        .iter()
        .copied()
        .filter(|p| matches!(p.class.as_str(), "log" | "transaction"))
        .collect();
    if logs.is_empty() {
        logs = live.clone();
        logs.sort_by_key(|p| (p.class == "stateless", address_key(&p.address)));
    } else {
        logs.sort_by_key(|p| address_key(&p.address));
    }
    let n = (cfg.logs as usize).min(logs.len());
    out.insert(
        "log".to_owned(),
        logs[..n].iter().map(|p| p.address.clone()).collect(),
    );
    out
}

/// Writes `state` to the coordinators of its connection string (a majority must persist it)
/// and, best effort, to `also` (the previous coordinators after a change).
async fn write_majority(state: &DbState, also: &[String]) -> anyhow::Result<()> {
    let cs = ConnectionString::parse(&state.connection_string)?;
    let req = Request::CoordWrite {
        state: Box::new(state.clone()),
    };
    let mut targets = cs.coordinators.clone();
    targets.extend(
        also.iter()
            .filter(|a| !cs.coordinators.contains(a))
            .cloned(),
    );
    let answers = ask_all(&targets, &req).await;
    let acks = answers
        .iter()
        .filter(|(a, r)| {
            cs.coordinators.contains(a) && matches!(r, Some(Response::Ack { ok: true }))
        })
        .count();
    anyhow::ensure!(
        acks * 2 > cs.coordinators.len(),
        "only {acks} of {} coordinators accepted the commit",
        cs.coordinators.len()
    );
    Ok(())
}

/// A new cluster controller's recovery: read a majority of coordinators, take the newest
/// state, start a new generation and make it durable on a majority.
pub async fn recover(server: &Arc<Server>, table: Vec<(ProcessInfo, u64)>) -> anyhow::Result<()> {
    let _guard = server.commit_lock.lock().await;
    let cs = server.lock().cs.clone();
    // Two rounds: the first finds the newest generation, the second makes a majority promise to
    // refuse the older generations' writes from now on and reads again — a commit of the old
    // generation is then either in what this read returns or refused.
    let read = |promise: u64| {
        let coordinators = cs.coordinators.clone();
        let cluster = cs.description.clone();
        async move {
            let answers = ask_all(&coordinators, &Request::CoordRead { promise, cluster }).await;
            let states: Vec<Option<DbState>> = answers
                .into_iter()
                .filter_map(|(_, r)| match r {
                    Some(Response::State { state }) => Some(state.map(|s| *s)),
                    _ => None,
                })
                .collect();
            anyhow::ensure!(
                states.len() * 2 > coordinators.len(),
                "no quorum of coordinators"
            );
            Ok(states.into_iter().flatten().max_by_key(DbState::stamp))
        }
    };
    let seen = read(0).await?;
    let next = seen.as_ref().map_or(1, |s| s.generation + 1);
    let mut state = read(next).await?.unwrap_or_default();
    anyhow::ensure!(
        state.generation < next,
        "another recovery reached generation {} meanwhile",
        state.generation
    );
    if state.connection_string.is_empty() {
        state.connection_string = cs.to_string();
    }
    anyhow::ensure!(
        state.connection_string == cs.to_string(),
        "the coordinated state belongs to {}",
        state.connection_string
    );
    state.generation = next;
    write_majority(&state, &[]).await?;
    let protocol = server.lock().info.protocol.clone();
    let views: Vec<View<'_>> = table
        .iter()
        .filter(|(p, _)| p.protocol == protocol)
        .map(|(p, age)| View {
            info: p,
            age_ms: *age,
        })
        .collect();
    let tx = assign(&state, &views, millis(server.timings.failure));
    tracing::info!(
        "recovered as cluster controller: generation {}, version {}",
        state.generation,
        state.version
    );
    let mut node = server.lock();
    node.ctrl = Some(Controller {
        state,
        recovered_at: Instant::now(),
        table,
        table_at: Instant::now(),
        tx,
        moves: BTreeMap::new(),
        clients: BTreeMap::new(),
        agents: BTreeMap::new(),
        backup_lease: None,
    });
    Ok(())
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Commits a change: `f` edits a copy of the state; the copy is written to a majority of
/// coordinators before it replaces the controller's state. The new commit version.
pub async fn commit<R>(
    server: &Arc<Server>,
    f: impl FnOnce(&mut DbState) -> Result<R, String>,
) -> Result<(R, u64), Response> {
    let _guard = server.commit_lock.lock().await;
    let (mut next, old_coords) = {
        let node = server.lock();
        let Some(ctrl) = &node.ctrl else {
            return Err(retry("not the cluster controller"));
        };
        (ctrl.state.clone(), node.cs.coordinators.clone())
    };
    let generation = next.generation;
    // Running backups record the normal keyspace's mutations (FoundationDB's mutation log).
    let before = crate::backup::logging(&next).then(|| next.kv.clone());
    let r = f(&mut next).map_err(err)?;
    next.version += 1_000_000;
    crate::backup::record_mutations(&mut next, before.as_ref());
    if let Err(e) = write_majority(&next, &old_coords).await {
        return Err(retry(format!("{e:#}")));
    }
    let version = next.version;
    let mut node = server.lock();
    let changed_cs = next.connection_string != node.cs.to_string();
    match &mut node.ctrl {
        Some(ctrl) if ctrl.state.generation == generation || next.generation > generation => {
            if next.generation > ctrl.state.generation {
                ctrl.recovered_at = Instant::now();
            }
            ctrl.state = next.clone();
        }
        _ => return Err(retry("the controller changed during the commit")),
    }
    if changed_cs && let Ok(cs) = ConnectionString::parse(&next.connection_string) {
        if let Err(e) = cs.write(&node.cluster_file) {
            tracing::warn!("cannot rewrite the cluster file: {e}");
        }
        node.cs = cs;
    }
    Ok((r, version))
}

enum Action {
    Recruit(BTreeMap<String, Vec<String>>),
    Drained(String),
    MissingData,
    /// A drained address runs a storage server again and is not excluded: a new server at a
    /// recycled address, which holds data from now on.
    Undrain(String),
}

/// The controller's periodic work: new table, re-recruitment when a transaction role's
/// process failed or was excluded, data movement, the data-loss latch.
pub async fn tick(server: &Arc<Server>, table: Vec<(ProcessInfo, u64)>) {
    let failure = millis(server.timings.failure);
    let actions = {
        let mut node = server.lock();
        let protocol = node.info.protocol.clone();
        let Some(ctrl) = node.ctrl.as_mut() else {
            return;
        };
        ctrl.table = table;
        ctrl.table_at = Instant::now();
        ctrl.clients
            .retain(|_, (_, _, at)| at.elapsed() < std::time::Duration::from_secs(60));
        ctrl.agents
            .retain(|_, at| at.elapsed() < std::time::Duration::from_secs(60));
        let mut actions = Vec::new();
        let views = ctrl.views(&protocol);
        let desired = assign(&ctrl.state, &views, failure);
        let usable: BTreeSet<&str> = views
            .iter()
            .filter(|v| v.age_ms < failure && !ctrl.is_excluded(v.info))
            .map(|v| v.info.address.as_str())
            .collect();
        let broken = ctrl
            .tx
            .values()
            .flatten()
            .any(|a| !usable.contains(a.as_str()));
        let shape = |m: &BTreeMap<String, Vec<String>>| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.len()))
                .collect::<Vec<_>>()
        };
        if broken || shape(&ctrl.tx) != shape(&desired) {
            actions.push(Action::Recruit(desired));
        }
        // Data movement off excluded storage servers.
        let moving: BTreeSet<String> = views
            .iter()
            .filter(|v| ctrl.holds_data(v.info) && ctrl.is_excluded(v.info))
            .map(|v| v.info.address.clone())
            .collect();
        // Data loss: every replica of some data unreachable at once.
        let lost_zones: BTreeSet<String> = views
            .iter()
            .filter(|v| v.age_ms >= failure && ctrl.holds_data(v.info))
            .map(|v| v.info.zone())
            .collect();
        for v in &views {
            if v.age_ms < failure
                && ctrl.state.drained.contains(&v.info.address)
                && !ctrl.is_excluded(v.info)
            {
                actions.push(Action::Undrain(v.info.address.clone()));
            }
        }
        drop(views);
        if let Some(cfg) = &ctrl.state.config
            && !ctrl.state.missing_data
            && lost_zones.len() >= cfg.replication()
        {
            tracing::warn!("storage servers in {lost_zones:?} are all unreachable: missing data");
            actions.push(Action::MissingData);
        }
        ctrl.moves.retain(|a, _| moving.contains(a));
        for a in moving {
            let started = *ctrl.moves.entry(a.clone()).or_insert_with(Instant::now);
            if started.elapsed() >= server.timings.data_move {
                actions.push(Action::Drained(a));
            }
        }
        actions
    };
    for action in actions {
        let result = match action {
            Action::Recruit(tx) => {
                let r = commit(server, |s| {
                    s.generation += 1;
                    Ok(())
                })
                .await;
                if r.is_ok()
                    && let Some(ctrl) = server.lock().ctrl.as_mut()
                {
                    tracing::info!("recruited transaction roles: {tx:?}");
                    ctrl.tx = tx;
                    ctrl.recovered_at = Instant::now();
                }
                r.map(|_| ())
            }
            Action::Drained(a) => commit(server, |s| {
                s.drained.insert(a);
                Ok(())
            })
            .await
            .map(|_| ()),
            Action::Undrain(a) => commit(server, |s| {
                s.drained.remove(&a);
                Ok(())
            })
            .await
            .map(|_| ()),
            Action::MissingData => commit(server, |s| {
                s.missing_data = true;
                Ok(())
            })
            .await
            .map(|_| ()),
        };
        if let Err(e) = result {
            tracing::warn!("controller commit failed: {e:?}");
            return;
        }
    }
}

/// Records a client's request at the cluster controller: `Err` with the answer to give when
/// this process is not the controller, or when none of the client's libraries speaks the
/// cluster's protocol (a real client then cannot connect and times out: the answer is
/// retryable, so the tool retries until its timeout). A client is recorded with the library
/// it talks through.
fn record_client(server: &Server, client: ClientInfo, peer: String) -> Result<(), Response> {
    let mut node = server.lock();
    let protocol = node.info.protocol.clone();
    let Some(ctrl) = node.ctrl.as_mut() else {
        return Err(retry("not the cluster controller"));
    };
    let Some(version) = client.speaking(&protocol) else {
        return Err(retry(format!(
            "incompatible protocol: the cluster speaks {protocol}, the client's libraries {} and {:?}",
            client.version, client.libraries
        )));
    };
    let recorded = ClientInfo {
        version,
        protocol,
        libraries: client.libraries.clone(),
    };
    let max = client.max_protocol();
    ctrl.clients.insert(peer, (recorded, max, Instant::now()));
    Ok(())
}

pub(crate) fn text(s: impl Into<String>) -> Response {
    Response::Text { text: s.into() }
}

fn parse_configure(tokens: &[String], base: Option<&DbConfig>) -> Result<DbConfig, String> {
    let mut cfg = base.cloned().unwrap_or(DbConfig {
        redundancy_mode: "single".into(),
        storage_engine: "ssd-2".into(),
        logs: 3,
        commit_proxies: 3,
        grv_proxies: 1,
        resolvers: 1,
    });
    for t in tokens {
        match t.as_str() {
            "single" | "double" | "triple" => cfg.redundancy_mode = t.clone(),
            "ssd" | "ssd-2" => cfg.storage_engine = "ssd-2".into(),
            "memory" | "ssd-redwood-1" | "ssd-rocksdb-v1" => cfg.storage_engine = t.clone(),
            other => {
                let Some((k, v)) = other.split_once('=') else {
                    return Err(format!("Unknown option `{other}'"));
                };
                let n: u32 = v
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("Invalid value `{v}' for `{k}'"))?;
                match k {
                    "logs" => cfg.logs = n,
                    "commit_proxies" | "proxies" => cfg.commit_proxies = n,
                    "grv_proxies" => cfg.grv_proxies = n,
                    "resolvers" => cfg.resolvers = n,
                    _ => return Err(format!("Unknown option `{k}'")),
                }
            }
        }
    }
    Ok(cfg)
}

fn key_end(begin: &[u8]) -> Vec<u8> {
    let _ = begin;
    vec![0xff]
}

/// One fdbcli command at the controller.
pub async fn exec(
    server: &Arc<Server>,
    client: ClientInfo,
    peer: String,
    args: Vec<Bytes>,
) -> Response {
    if let Err(answer) = record_client(server, client, peer) {
        return answer;
    }
    let args: Vec<Vec<u8>> = args.into_iter().map(|b| b.0).collect();
    let words: Vec<String> = args
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let Some(cmd) = words.first().map(String::as_str) else {
        return err("empty command");
    };
    match cmd {
        "configure" => {
            let new = words.get(1).is_some_and(|w| w == "new");
            let (ids, tokens): (Vec<String>, Vec<String>) = words[if new { 2 } else { 1 }..]
                .iter()
                .cloned()
                .partition(|t| t.starts_with("creation_id="));
            let creation = ids.first().map(|t| t["creation_id=".len()..].to_owned());
            let r = commit(server, |s| {
                if new && s.config.is_some() && creation.is_some() && s.created_by == creation {
                    return Ok(());
                }
                if new && s.config.is_some() {
                    return Err(
                        "Database already exists! To change configuration, don't say `new'"
                            .to_owned(),
                    );
                }
                if !new && s.config.is_none() {
                    return Err(
                        "Database does not exist. Use `configure new' to create it.".to_owned()
                    );
                }
                s.config = Some(parse_configure(&tokens, s.config.as_ref())?);
                if new {
                    s.created_by = creation.clone();
                }
                Ok(())
            })
            .await;
            match r {
                Ok(_) if new => text("Database created"),
                Ok(_) => text("Configuration changed"),
                Err(e) => e,
            }
        }
        "get" => {
            let Some(key) = args.get(1) else {
                return err("Usage: get <KEY>");
            };
            let node = server.lock();
            let Some(ctrl) = &node.ctrl else {
                return retry("not the cluster controller");
            };
            if ctrl.state.missing_data {
                return err(
                    "The stand-in lost data: every replica of some data is unavailable (missing_data); reads fail",
                );
            }
            match ctrl.state.kv.get(&Bytes(key.clone())) {
                Some(v) => text(format!("`{}' is `{}'", printable(key), printable(&v.0))),
                None => text(format!("`{}': not found", printable(key))),
            }
        }
        "getrange" => {
            let Some(begin) = args.get(1) else {
                return err("Usage: getrange <BEGINKEY> [ENDKEY] [LIMIT]");
            };
            let (end, limit) = match (args.get(2), args.get(3)) {
                (Some(e), Some(l)) => (e.clone(), String::from_utf8_lossy(l).parse().ok()),
                (Some(e), None) => match String::from_utf8_lossy(e).parse::<usize>() {
                    Ok(n) => (key_end(begin), Some(n)),
                    Err(_) => (e.clone(), Some(25)),
                },
                _ => (key_end(begin), Some(25)),
            };
            let Some(limit) = limit else {
                return err("ERROR: invalid limit");
            };
            let node = server.lock();
            let Some(ctrl) = &node.ctrl else {
                return retry("not the cluster controller");
            };
            if ctrl.state.missing_data {
                return err(
                    "The stand-in lost data: every replica of some data is unavailable (missing_data); reads fail",
                );
            }
            let mut out = format!("\nRange limited to {limit} keys\n");
            if begin < &end {
                for (k, v) in ctrl
                    .state
                    .kv
                    .range(Bytes(begin.clone())..Bytes(end))
                    .take(limit)
                {
                    out.push_str(&format!("`{}' is `{}'\n", printable(&k.0), printable(&v.0)));
                }
            }
            text(out.trim_end().to_owned())
        }
        "set" | "clear" | "clearrange" => {
            let n = if cmd == "set" || cmd == "clearrange" {
                3
            } else {
                2
            };
            if args.len() != n {
                return err(match cmd {
                    "set" => "Usage: set <KEY> <VALUE>",
                    "clear" => "Usage: clear <KEY>",
                    _ => "Usage: clearrange <BEGINKEY> <ENDKEY>",
                });
            }
            let a = args.clone();
            let c = cmd.to_owned();
            match commit(server, move |s| {
                match c.as_str() {
                    "set" => {
                        s.kv.insert(Bytes(a[1].clone()), Bytes(a[2].clone()));
                    }
                    "clear" => {
                        s.kv.remove(&Bytes(a[1].clone()));
                    }
                    _ => {
                        let (b, e) = (Bytes(a[1].clone()), Bytes(a[2].clone()));
                        if b < e {
                            let doomed: Vec<Bytes> =
                                s.kv.range(b..e).map(|(k, _)| k.clone()).collect();
                            for k in doomed {
                                s.kv.remove(&k);
                            }
                        }
                    }
                }
                Ok(())
            })
            .await
            {
                Ok((_, v)) => text(format!("Committed ({v})")),
                Err(e) => e,
            }
        }
        "exclude" => {
            let targets: Vec<String> = words[1..]
                .iter()
                .filter(|w| *w != "no_wait" && *w != "failed")
                .cloned()
                .collect();
            if targets.is_empty() {
                return exclusions_text(server);
            }
            if let Some(bad) = targets.iter().find(|t| !valid_target(t)) {
                return err(format!("ERROR: `{bad}' is not a valid address or locality"));
            }
            match commit(server, |s| {
                for t in targets {
                    if !s.excluded.contains(&t) {
                        s.excluded.push(t);
                    }
                }
                Ok(())
            })
            .await
            {
                Ok(_) => text(""),
                Err(e) => e,
            }
        }
        "exclude_status" => {
            // Internal: whether anything (data or a role) is left on the named processes.
            let node = server.lock();
            let Some(ctrl) = &node.ctrl else {
                return retry("not the cluster controller");
            };
            let me = node.info.address.clone();
            let busy = ctrl.views(&node.info.protocol).iter().any(|v| {
                words[1..].iter().any(|t| v.info.matches(t))
                    && (ctrl.holds_data(v.info)
                        || v.info.address == me
                        || ctrl.tx.values().flatten().any(|a| *a == v.info.address))
            });
            text(if busy { "busy" } else { "safe" })
        }
        "include" => {
            let all = words.get(1).is_some_and(|w| w == "all");
            let targets: Vec<String> = words[1..]
                .iter()
                .filter(|w| *w != "failed")
                .cloned()
                .collect();
            // The storage servers that run now: only they can hold data again. A drained
            // server that is gone (its process group removed) stays without data when its
            // address is included again — as in FoundationDB, where a removed storage server's
            // data is gone from it for good; a new process at that address is a new server.
            let live: BTreeSet<String> = {
                let node = server.lock();
                let failure = millis(server.timings.failure);
                node.ctrl
                    .as_ref()
                    .map(|c| {
                        c.views(&node.info.protocol)
                            .iter()
                            .filter(|v| v.age_ms < failure)
                            .map(|v| v.info.address.clone())
                            .collect()
                    })
                    .unwrap_or_default()
            };
            match commit(server, |s| {
                if all {
                    s.excluded.clear();
                } else {
                    s.excluded.retain(|e| !targets.contains(e));
                }
                let excluded = s.excluded.clone();
                // A re-included server that runs holds data again (the stand-in does not model
                // moving it back).
                s.drained.retain(|a| {
                    !live.contains(a)
                        || excluded
                            .iter()
                            .any(|e| e == a || a.starts_with(&format!("{e}:")))
                });
                Ok(())
            })
            .await
            {
                Ok(_) => text(""),
                Err(e) => e,
            }
        }
        "coordinators" => coordinators(server, &words[1..]).await,
        _ => err(format!("ERROR: Unknown command `{cmd}'. Try `help'?")),
    }
}

fn valid_target(t: &str) -> bool {
    crate::util::is_address(t)
        || t.parse::<std::net::IpAddr>().is_ok()
        || t.strip_prefix("locality_").is_some_and(|r| {
            r.split_once(':')
                .is_some_and(|(k, v)| !k.is_empty() && !v.is_empty())
        })
}

fn exclusions_text(server: &Server) -> Response {
    let node = server.lock();
    let Some(ctrl) = &node.ctrl else {
        return retry("not the cluster controller");
    };
    if ctrl.state.excluded.is_empty() {
        return text(
            "There are currently no servers or localities excluded from the database.\nTo learn how to exclude a server, type `help exclude'.",
        );
    }
    let mut out = String::from("There are currently ");
    out.push_str(&format!(
        "{} servers or localities being excluded from the database:\n",
        ctrl.state.excluded.len()
    ));
    for e in &ctrl.state.excluded {
        out.push_str(&format!("  {e}\n"));
    }
    text(out.trim_end().to_owned())
}

async fn coordinators(server: &Arc<Server>, words: &[String]) -> Response {
    let (cs, candidates, replication) = {
        let node = server.lock();
        let Some(ctrl) = &node.ctrl else {
            return retry("not the cluster controller");
        };
        let failure = millis(server.timings.failure);
        let live: Vec<ProcessInfo> = ctrl
            .views(&node.info.protocol)
            .iter()
            .filter(|v| v.age_ms < failure && !ctrl.is_excluded(v.info))
            .map(|v| v.info.clone())
            .collect();
        (
            node.cs.clone(),
            live,
            ctrl.state.config.as_ref().map_or(1, DbConfig::replication),
        )
    };
    if words.is_empty() {
        let mut out = format!(
            "Cluster description: {}\nCluster coordinators ({}): {}",
            cs.description,
            cs.coordinators.len(),
            cs.coordinators.join(",")
        );
        out.push_str("\nType `help coordinators' to learn how to change this information.");
        return text(out);
    }
    let new: Vec<String> = if words.len() == 1 && words[0] == "auto" {
        // One coordinator per zone, as many as the redundancy asks (1, 3 or 5).
        let want = match replication {
            1 => 1,
            2 => 3,
            _ => 5,
        };
        let mut sorted = candidates.clone();
        sorted.sort_by_key(|p| address_key(&p.address));
        let mut zones = BTreeSet::new();
        let mut chosen = Vec::new();
        // Keep current coordinators that are still good first.
        let (current, others): (Vec<_>, Vec<_>) = sorted
            .iter()
            .partition(|p| cs.coordinators.contains(&p.address));
        for p in current.into_iter().chain(others) {
            if chosen.len() < want && zones.insert(p.zone()) {
                chosen.push(p.address.clone());
            }
        }
        if chosen.len() < want {
            return err(format!(
                "ERROR: Not enough processes in distinct zones to choose {want} coordinators"
            ));
        }
        let mut a = chosen.clone();
        let mut b = cs.coordinators.clone();
        a.sort();
        b.sort();
        if a == b {
            return text("No change (existing configuration satisfies request)");
        }
        chosen
    } else {
        let addrs: Vec<String> = words
            .iter()
            .filter(|w| !w.starts_with("description="))
            .cloned()
            .collect();
        if let Some(bad) = addrs.iter().find(|a| !crate::util::is_address(a)) {
            return err(format!("ERROR: `{bad}' is not a valid network address"));
        }
        if let Some(gone) = addrs
            .iter()
            .find(|a| !candidates.iter().any(|p| &p.address == *a))
        {
            return err(format!(
                "ERROR: Some coordinators are not reachable ({gone}); coordination state not changed"
            ));
        }
        let mut dedup = addrs.clone();
        dedup.sort();
        dedup.dedup();
        if dedup.len() != addrs.len() {
            return err("ERROR: Duplicate coordinators were specified");
        }
        addrs
    };
    let description = words
        .iter()
        .find_map(|w| w.strip_prefix("description="))
        .map_or(cs.description.clone(), str::to_owned);
    let next = ConnectionString {
        description,
        id: random_id(),
        coordinators: new,
    };
    match commit(server, |s| {
        s.connection_string = next.to_string();
        Ok(())
    })
    .await
    {
        Ok(_) => text("Coordination state changed"),
        Err(e) => e,
    }
}

/// The cluster half of `status json` (fdbcli adds `client`).
pub fn status(server: &Arc<Server>, client: ClientInfo, peer: String) -> Response {
    if let Err(answer) = record_client(server, client, peer) {
        return answer;
    }
    let node = server.lock();
    let Some(ctrl) = &node.ctrl else {
        return retry("not the cluster controller");
    };
    let t = &server.timings;
    let failure = millis(t.failure);
    let st = &ctrl.state;
    let views = ctrl.views(&node.info.protocol);
    let since = ctrl.recovered_at.elapsed();
    let recovering = since < t.recovery;
    let (rec_name, rec_desc) = if st.config.is_none() {
        (
            "configuration_never_created",
            "The coordinator(s) have no record of this database. Either the coordinator addresses are incorrect, the coordination state on those machines is missing, or no database has been created.",
        )
    } else if recovering {
        (
            "recruiting_transaction_servers",
            "Recruiting new transaction servers.",
        )
    } else {
        ("fully_recovered", "Recovery complete.")
    };
    let me = node.info.address.clone();
    let mut processes = serde_json::Map::new();
    for v in views.iter().filter(|v| v.age_ms < failure) {
        let p = v.info;
        let mut roles = Vec::new();
        if p.address == me {
            roles.push(json!({"role": "cluster_controller"}));
        }
        for role in TX_ROLES {
            for a in ctrl.tx.get(role).into_iter().flatten() {
                if *a == p.address {
                    roles.push(json!({"role": role}));
                }
            }
        }
        if ctrl.holds_data(p) {
            roles.push(json!({"role": "storage"}));
        }
        let id = p
            .locality
            .get("processid")
            .cloned()
            .unwrap_or_else(|| crate::util::process_id(&p.address));
        let mut locality = serde_json::Map::new();
        for (k, val) in &p.locality {
            locality.insert(k.clone(), json!(val));
        }
        locality.entry("processid").or_insert(json!(id));
        processes.insert(
            id.clone(),
            json!({
                "address": p.address,
                "class_type": p.class,
                "class_source": "command_line",
                "locality": locality,
                "roles": roles,
                "excluded": ctrl.is_excluded(p),
                "command_line": p.command_line,
                "uptime_seconds": (crate::util::unix_now() - p.start_unix).max(0.0),
                "version": p.version,
                "degraded": false,
            }),
        );
    }
    let incompatible: Vec<String> = ctrl
        .table
        .iter()
        .filter(|(p, age)| p.protocol != node.info.protocol && *age < failure)
        .map(|(p, _)| p.address.clone())
        .collect();
    let replication = st.config.as_ref().map_or(1, DbConfig::replication);
    let missing_zones: BTreeSet<String> = views
        .iter()
        .filter(|v| v.age_ms >= failure && ctrl.holds_data(v.info))
        .map(|v| v.info.zone())
        .collect();
    let kv_size: usize = st.kv.iter().map(|(k, v)| k.0.len() + v.0.len()).sum();
    // Data still to move off excluded storage servers (a move not yet begun counts whole).
    let in_flight: u64 = views
        .iter()
        .filter(|v| ctrl.holds_data(v.info) && ctrl.is_excluded(v.info))
        .map(|v| {
            let total = t.data_move.as_secs_f64().max(0.001);
            let left = ctrl.moves.get(&v.info.address).map_or(1.0, |started| {
                (1.0 - started.elapsed().as_secs_f64() / total).clamp(0.0, 1.0)
            });
            ((kv_size as f64 + 1_048_576.0) * left) as u64 + 1
        })
        .sum();
    let (data_state, healthy, desc) = if st.missing_data {
        ("missing_data", false, "No replicas remain of some data")
    } else if !missing_zones.is_empty() {
        ("healing", false, "Restoring replication factor")
    } else if in_flight > 0 {
        ("healthy_removing_server", true, "Removing storage server")
    } else {
        ("healthy", true, "")
    };
    let data_tolerance = if st.missing_data {
        -1
    } else {
        replication as i64 - 1 - missing_zones.len() as i64
    };
    let coord_tolerance = (node.cs.coordinators.len() as i64 - 1) / 2;
    let available = st.config.is_some() && !recovering;
    // `supported_versions`: one entry per client library version in use, with the clients
    // connected through it, and those for which it is the newest protocol they speak
    // (`max_protocol_clients`, what the operator checks before an upgrade).
    let mut by_version: BTreeMap<(String, String), (Vec<String>, Vec<String>)> = BTreeMap::new();
    for (addr, (c, max, _)) in &ctrl.clients {
        by_version
            .entry((c.version.clone(), c.protocol.clone()))
            .or_default()
            .0
            .push(addr.clone());
        let newest = std::iter::once(&c.version)
            .chain(&c.libraries)
            .filter(|v| &protocol_version(v) == max)
            .max()
            .cloned()
            .unwrap_or_else(|| c.version.clone());
        by_version
            .entry((newest, max.clone()))
            .or_default()
            .1
            .push(addr.clone());
    }
    let described = |addrs: &[String]| {
        addrs
            .iter()
            .map(|a| json!({"address": a, "log_group": "default"}))
            .collect::<Vec<_>>()
    };
    let supported: Vec<Value> = by_version
        .into_iter()
        .map(|((version, protocol), (connected, max))| {
            json!({
                "client_version": version,
                "protocol_version": protocol,
                "source_version": "stand-in",
                "count": connected.len(),
                "connected_clients": described(&connected),
                "max_protocol_count": max.len(),
                "max_protocol_clients": described(&max),
            })
        })
        .collect();
    let excluded_servers: Vec<Value> = st
        .excluded
        .iter()
        .map(|e| {
            if e.starts_with("locality_") {
                json!({"locality": e})
            } else {
                json!({"address": e})
            }
        })
        .collect();
    let mut configuration = json!({
        "excluded_servers": excluded_servers,
        "coordinators_count": node.cs.coordinators.len(),
    });
    if let (Some(cfg), Some(obj)) = (&st.config, configuration.as_object_mut()) {
        obj.insert("redundancy_mode".into(), json!(cfg.redundancy_mode));
        obj.insert("storage_engine".into(), json!(cfg.storage_engine));
        obj.insert("logs".into(), json!(cfg.logs));
        obj.insert("commit_proxies".into(), json!(cfg.commit_proxies));
        obj.insert("grv_proxies".into(), json!(cfg.grv_proxies));
        obj.insert("resolvers".into(), json!(cfg.resolvers));
        obj.insert("usable_regions".into(), json!(1));
    }
    let mut messages = Vec::new();
    if st.config.is_none() {
        messages.push(json!({"name": "unreadable_configuration", "description": "Unable to read database configuration."}));
    }
    let cluster = json!({
        "connection_string": node.cs.to_string(),
        "generation": st.generation,
        "protocol_version": node.info.protocol,
        "database_available": available,
        "messages": messages,
        "recovery_state": {
            "name": rec_name,
            "description": rec_desc,
            "active_generations": if recovering { 2 } else { 1 },
            "seconds_since_last_recovered": since.as_secs_f64(),
        },
        "configuration": configuration,
        "processes": processes,
        "data": {
            "state": {
                "name": data_state,
                "healthy": healthy,
                "description": desc,
                "min_replicas_remaining": if st.missing_data { 0 } else { (replication as i64 - missing_zones.len() as i64).max(0) },
            },
            "moving_data": {"in_flight_bytes": in_flight, "in_queue_bytes": 0, "total_written_bytes": 0},
            "total_kv_size_bytes": kv_size,
        },
        "fault_tolerance": {
            "max_zone_failures_without_losing_data": data_tolerance,
            "max_zone_failures_without_losing_availability": data_tolerance.min(coord_tolerance).max(-1),
        },
        "clients": {"count": supported.len(), "supported_versions": supported},
        "incompatible_connections": incompatible,
        "layers": crate::backup::layers(st, ctrl.agents_running()),
        "cluster_controller_timestamp": crate::util::unix_now(),
        "full_replication": missing_zones.is_empty() && !st.missing_data,
    });
    Response::Json { value: cluster }
}
