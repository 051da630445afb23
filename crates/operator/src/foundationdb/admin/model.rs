//! (tests only) An in-memory FoundationDB for step tests, behind the same seam as the real
//! tools, reading the same fdbcli commands. It keeps what the steps depend on and enforces it:
//! `configure new` only once, an unavailable database refuses what needs it, an excluded
//! storage process keeps its role until its data has moved ([`ModelFdb::finish_moves`]), a
//! waiting `exclude` only succeeds once nothing is left on the processes, roles, exclusions and
//! coordinators in the status, keys, and a log of the commands that changed something.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::cli::{escape, unescape};
use super::{FdbAdmin, FdbError, Target};

/// One process.
#[derive(Clone, Debug, PartialEq)]
pub struct Process {
    /// `storage`, `log`, `stateless`.
    pub class: String,
    /// `locality_zoneid`.
    pub zone: String,
    /// `locality_instance_id` (the process group).
    pub instance_id: String,
    /// Its command line.
    pub command_line: String,
    /// Seconds up.
    pub uptime: f64,
    /// Its version.
    pub version: String,
}

/// The model's state, open to tests.
#[derive(Debug, Default)]
pub struct State {
    /// Processes by address.
    pub processes: BTreeMap<String, Process>,
    /// `configure` arguments, once configured.
    pub configuration: Option<String>,
    /// Exclusions (addresses or localities).
    pub excluded: Vec<String>,
    /// Excluded storage addresses whose data has not moved yet.
    pub draining: BTreeSet<String>,
    /// The instance ID (process group) of each address ever seen draining.
    pub draining_ids: BTreeMap<String, String>,
    /// The connection string.
    pub connection_string: String,
    /// Keys.
    pub kv: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Clients can read and write.
    pub available: bool,
    /// Seconds since the last recovery.
    pub seconds_since_recovery: f64,
    /// Commands that changed something, in order (`configure new …`, `exclude …`, …).
    pub changes: Vec<String>,
    /// Monitor reports by Pod.
    pub reports: BTreeMap<String, String>,
    /// `cluster.clients` as the status reports it (`supported_versions`), set by tests.
    pub clients: Value,
}

/// See the module documentation.
#[derive(Clone, Default)]
pub struct ModelFdb {
    state: Arc<Mutex<State>>,
}

fn unavailable() -> FdbError {
    FdbError::Unavailable("ERROR: timed out (the database is unavailable)".into())
}

impl ModelFdb {
    /// The state.
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Data movement finished: excluded storage processes give up their role.
    pub fn finish_moves(&self) {
        self.state().draining.clear();
    }
}

impl State {
    fn is_excluded(&self, address: &str, p: &Process) -> bool {
        let ip = address.split(':').next().unwrap_or(address);
        self.excluded.iter().any(|e| {
            e == address || e == ip || *e == format!("locality_instance_id:{}", p.instance_id)
        })
    }

    fn roles(&self, address: &str, p: &Process) -> Vec<&'static str> {
        let mut roles = Vec::new();
        let excluded = self.is_excluded(address, p);
        if self.configuration.is_some() {
            match p.class.as_str() {
                "storage" if !excluded || self.draining.contains(address) => roles.push("storage"),
                "log" if !excluded => roles.push("log"),
                _ => {}
            }
        }
        if self.coordinators().iter().any(|c| c == address) {
            roles.push("coordinator");
        }
        roles
    }

    fn coordinators(&self) -> Vec<String> {
        super::status::coordinators_of(&self.connection_string)
    }

    fn status_json(&self) -> Value {
        let processes: serde_json::Map<String, Value> = self
            .processes
            .iter()
            .map(|(address, p)| {
                let roles: Vec<Value> = self
                    .roles(address, p)
                    .into_iter()
                    .map(|r| json!({"role": r}))
                    .collect();
                (
                    format!("id-{address}"),
                    json!({
                        "address": address, "class_type": p.class,
                        "locality": {"zoneid": p.zone, "instance_id": p.instance_id},
                        "roles": roles, "excluded": self.is_excluded(address, p),
                        "command_line": p.command_line, "uptime_seconds": p.uptime,
                        "version": p.version,
                    }),
                )
            })
            .collect();
        let available = self.available && self.configuration.is_some();
        let configuration = self.configuration.as_ref().map(|args| {
            let mut words = args.split_whitespace();
            let excluded: Vec<Value> = self
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
            json!({"redundancy_mode": words.next(), "storage_engine": words.next(),
                   "excluded_servers": excluded})
        });
        let moving = if self.draining.is_empty() { 0 } else { 1 << 20 };
        json!({
            "client": {
                "coordinators": {"quorum_reachable": self.available,
                    "coordinators": self.coordinators().iter().map(|c| json!({"address": c, "reachable": true})).collect::<Vec<_>>()},
                "database_status": {"available": available, "healthy": available && self.draining.is_empty()},
            },
            "cluster": {
                "connection_string": self.connection_string,
                "database_available": available,
                "recovery_state": {
                    "name": if self.configuration.is_some() { "fully_recovered" } else { "configuration_never_created" },
                    "active_generations": 1,
                    "seconds_since_last_recovered": self.seconds_since_recovery,
                },
                "configuration": configuration,
                "processes": processes,
                "clients": if self.clients.is_null() { json!({}) } else { self.clients.clone() },
                "data": {"state": {"name": "healthy", "healthy": self.draining.is_empty()},
                         "moving_data": {"in_flight_bytes": moving}},
            }
        })
    }

    fn run(&mut self, command: &str) -> Result<String, FdbError> {
        let words: Vec<&str> = command.split_whitespace().collect();
        let needs_db = |s: &Self| {
            if s.available && s.configuration.is_some() {
                Ok(())
            } else {
                Err(unavailable())
            }
        };
        match words.as_slice() {
            ["status", "json"] => Ok(self.status_json().to_string()),
            ["writemode", "on"] => Ok(String::new()),
            ["configure", "new", args @ ..] => {
                if !self.available {
                    return Err(unavailable());
                }
                if self.configuration.is_some() {
                    return Err(FdbError::Command(
                        "ERROR: Database already exists! To change configuration, don't say `new'"
                            .into(),
                    ));
                }
                self.configuration = Some(args.join(" "));
                self.changes.push(command.to_owned());
                Ok("Database created".into())
            }
            ["configure", args @ ..] => {
                needs_db(self)?;
                self.configuration = Some(args.join(" "));
                self.changes.push(command.to_owned());
                Ok("Configuration changed".into())
            }
            ["exclude", "no_wait", what @ ..] => {
                needs_db(self)?;
                for w in what {
                    if !self.excluded.iter().any(|e| e == w) {
                        self.excluded.push((*w).to_owned());
                    }
                    let storage: Vec<(String, String)> = self
                        .processes
                        .iter()
                        .filter(|(a, p)| {
                            p.class == "storage"
                                && (*a == w
                                    || a.starts_with(&format!("{w}:"))
                                    || format!("locality_instance_id:{}", p.instance_id) == *w)
                        })
                        .map(|(a, p)| (a.clone(), p.instance_id.clone()))
                        .collect();
                    self.draining.extend(storage.iter().map(|(a, _)| a.clone()));
                    self.draining_ids.extend(storage);
                }
                self.changes.push(command.to_owned());
                Ok(String::new())
            }
            ["exclude", what @ ..] => {
                needs_db(self)?;
                let on = |a: &str, id: Option<&str>| {
                    what.iter().any(|w| {
                        a == *w
                            || a.starts_with(&format!("{w}:"))
                            || id.is_some_and(|id| *w == format!("locality_instance_id:{id}"))
                    })
                };
                // A storage server whose process is gone still holds its data until data
                // distribution has moved it: the waiting exclude waits for it too.
                let busy = self.processes.iter().any(|(a, p)| {
                    on(a, Some(&p.instance_id))
                        && !self.roles(a, p).iter().all(|r| *r == "coordinator")
                }) || self
                    .draining
                    .iter()
                    .any(|a| on(a, self.draining_ids.get(a).map(String::as_str)));
                if busy {
                    return Err(unavailable());
                }
                Ok("It is now safe to remove these machines or processes from the cluster.".into())
            }
            ["include", what @ ..] => {
                needs_db(self)?;
                if what == ["all"] {
                    self.excluded.clear();
                } else {
                    self.excluded.retain(|e| !what.contains(&e.as_str()));
                }
                self.changes.push(command.to_owned());
                Ok(String::new())
            }
            ["coordinators", addresses @ ..] => {
                needs_db(self)?;
                let description = self
                    .connection_string
                    .split(':')
                    .next()
                    .unwrap_or("model")
                    .to_owned();
                self.connection_string = format!(
                    "{description}:changed{}@{}",
                    self.changes.len(),
                    addresses.join(",")
                );
                self.changes.push(command.to_owned());
                Ok("Coordination state changed".into())
            }
            ["kill"] => Ok(String::new()),
            ["kill", addresses @ ..] => {
                for a in addresses {
                    if let Some(p) = self.processes.get_mut(*a) {
                        p.uptime = 0.0;
                    }
                }
                self.changes.push(command.to_owned());
                Ok(String::new())
            }
            ["get", key] => {
                needs_db(self)?;
                let k = unescape(key)?;
                Ok(match self.kv.get(&k) {
                    Some(v) => format!("`{key}' is `{}'", escape(v)),
                    None => format!("`{key}': not found"),
                })
            }
            ["set", key, value] => {
                needs_db(self)?;
                self.kv.insert(unescape(key)?, unescape(value)?);
                self.changes.push(format!("set {key}"));
                Ok("Committed (1)".into())
            }
            ["clear", key] => {
                needs_db(self)?;
                self.kv.remove(&unescape(key)?);
                self.changes.push(format!("clear {key}"));
                Ok("Committed (1)".into())
            }
            ["getrange", begin, end, limit] => {
                needs_db(self)?;
                let (b, e) = (unescape(begin)?, unescape(end)?);
                let limit: usize = limit
                    .parse()
                    .map_err(|_| FdbError::Command("ERROR: invalid limit".into()))?;
                let mut out = format!("\nRange limited to {limit} keys\n");
                if b < e {
                    for (k, v) in self.kv.range(b..e).take(limit) {
                        out.push_str(&format!("`{}' is `{}'\n", escape(k), escape(v)));
                    }
                }
                Ok(out)
            }
            ["clearrange", begin, end] => {
                needs_db(self)?;
                let (b, e) = (unescape(begin)?, unescape(end)?);
                self.kv.retain(|k, _| *k < b || *k >= e);
                self.changes.push(format!("clearrange {begin} {end}"));
                Ok("Committed (1)".into())
            }
            _ => Err(FdbError::Command(format!(
                "ERROR: unknown command `{command}'"
            ))),
        }
    }
}

#[async_trait]
impl FdbAdmin for ModelFdb {
    async fn cli(&self, _target: &Target, commands: &str) -> Result<String, FdbError> {
        let mut state = self.state();
        let mut out = Vec::new();
        for command in commands.split(';').map(str::trim).filter(|c| !c.is_empty()) {
            out.push(state.run(command)?);
        }
        Ok(out.join("\n"))
    }

    async fn tool(&self, _target: &Target, argv: Vec<String>) -> Result<String, FdbError> {
        Err(FdbError::Command(format!(
            "ERROR: the model does not run {}",
            argv.first().map(String::as_str).unwrap_or("a tool")
        )))
    }

    async fn monitor_report(&self, target: &Target) -> Result<String, FdbError> {
        self.state()
            .reports
            .get(&target.pod)
            .cloned()
            .ok_or_else(|| FdbError::Unavailable(format!("{}: no monitor", target.pod)))
    }
}
