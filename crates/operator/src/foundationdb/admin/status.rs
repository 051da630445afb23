//! (pure) The machine-readable status (`status json`), the fields the operator reads. Every
//! field has a default: a status of an unavailable database has most of them missing.
//! Reference: FoundationDB's "Machine-readable status" documentation.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::FdbError;

/// `status json`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct DbStatus {
    /// What the client saw.
    pub client: ClientStatus,
    /// What the cluster reported.
    pub cluster: ClusterStatus,
}

/// `client`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ClientStatus {
    /// `client.coordinators`.
    pub coordinators: ClientCoordinators,
    /// `client.database_status`.
    pub database_status: DatabaseStatus,
    /// `client.messages`.
    pub messages: Vec<Message>,
}

/// `client.coordinators`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ClientCoordinators {
    /// Each coordinator and whether it answered.
    pub coordinators: Vec<Coordinator>,
    /// A majority answered.
    pub quorum_reachable: bool,
}

/// One coordinator.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Coordinator {
    /// `IP:PORT`.
    pub address: String,
    /// It answered.
    pub reachable: bool,
}

/// `client.database_status`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct DatabaseStatus {
    /// Clients can read and write.
    pub available: bool,
    /// The database reports itself healthy.
    pub healthy: bool,
}

/// A status message.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Message {
    /// Its name, e.g. `unreachable_processes`.
    pub name: String,
    /// Its description.
    pub description: String,
}

/// `cluster`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ClusterStatus {
    /// The connection string (the cluster file's content).
    pub connection_string: String,
    /// The recovery generation.
    pub generation: i64,
    /// The cluster's protocol version.
    pub protocol_version: String,
    /// Clients can read and write.
    pub database_available: bool,
    /// `cluster.messages`.
    pub messages: Vec<Message>,
    /// `cluster.recovery_state`.
    pub recovery_state: RecoveryState,
    /// `cluster.configuration`; absent before `configure new`.
    pub configuration: Option<Configuration>,
    /// `cluster.processes` by process ID.
    pub processes: BTreeMap<String, Process>,
    /// `cluster.data`.
    pub data: Data,
    /// `cluster.clients`.
    pub clients: Clients,
    /// `cluster.incompatible_connections`: addresses speaking another protocol.
    pub incompatible_connections: Vec<String>,
}

/// `cluster.recovery_state`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct RecoveryState {
    /// e.g. `fully_recovered`, `configuration_never_created`.
    pub name: String,
    /// Transaction system generations alive.
    pub active_generations: u32,
    /// Seconds since the last recovery ended.
    pub seconds_since_last_recovered: f64,
}

/// `cluster.configuration`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Configuration {
    /// `single`, `double`, `triple`.
    pub redundancy_mode: String,
    /// e.g. `ssd-2`.
    pub storage_engine: String,
    /// `logs=`.
    pub logs: Option<u32>,
    /// `commit_proxies=`.
    pub commit_proxies: Option<u32>,
    /// `grv_proxies=`.
    pub grv_proxies: Option<u32>,
    /// `resolvers=`.
    pub resolvers: Option<u32>,
    /// Excluded addresses and localities.
    pub excluded_servers: Vec<ExcludedServer>,
}

/// One exclusion.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ExcludedServer {
    /// `IP` or `IP:PORT`.
    pub address: Option<String>,
    /// `locality_instance_id:<id>`.
    pub locality: Option<String>,
}

/// One process.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Process {
    /// `IP:PORT`.
    pub address: String,
    /// Its class.
    pub class_type: String,
    /// Its localities.
    pub locality: BTreeMap<String, String>,
    /// Its roles.
    pub roles: Vec<Role>,
    /// It is excluded.
    pub excluded: bool,
    /// Its command line.
    pub command_line: String,
    /// Seconds since it started.
    pub uptime_seconds: f64,
    /// Its version.
    pub version: String,
}

impl Process {
    /// Its process group (`locality.instance_id`).
    pub fn instance_id(&self) -> Option<&str> {
        self.locality.get("instance_id").map(String::as_str)
    }

    /// Its IP (the address without the port).
    pub fn ip(&self) -> &str {
        address_ip(&self.address)
    }
}

/// `IP` of an `IP:PORT` (or `IP:PORT:tls`).
pub fn address_ip(address: &str) -> &str {
    address.split(':').next().unwrap_or(address)
}

/// A role.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Role {
    /// e.g. `storage`, `log`, `coordinator`.
    pub role: String,
}

/// `cluster.data`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Data {
    /// `cluster.data.state`.
    pub state: DataState,
    /// `cluster.data.moving_data`.
    pub moving_data: MovingData,
}

/// `cluster.data.state`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct DataState {
    /// e.g. `healthy`, `healing`, `missing_data`.
    pub name: String,
    /// Every piece of data has all its replicas.
    pub healthy: bool,
}

/// `cluster.data.moving_data`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct MovingData {
    /// Bytes being moved.
    pub in_flight_bytes: u64,
    /// Bytes queued to move.
    pub in_queue_bytes: u64,
}

/// `cluster.clients`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Clients {
    /// Client versions seen.
    pub supported_versions: Vec<SupportedVersion>,
}

/// One client version.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct SupportedVersion {
    /// The client library's version.
    pub client_version: String,
    /// Its protocol version.
    pub protocol_version: String,
    /// Clients whose newest protocol is this one.
    pub max_protocol_clients: Vec<ConnectedClient>,
}

/// A connected client.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ConnectedClient {
    /// `IP:PORT`.
    pub address: String,
    /// The client's `log_group`.
    pub log_group: String,
}

impl DbStatus {
    /// Parses `status json` output.
    pub fn parse(text: &str) -> Result<Self, FdbError> {
        let start = text
            .find('{')
            .ok_or_else(|| FdbError::Unreadable("status json printed no JSON object".to_owned()))?;
        serde_json::from_str(&text[start..])
            .map_err(|e| FdbError::Unreadable(format!("status json: {e}")))
    }

    /// Clients can read and write.
    pub fn available(&self) -> bool {
        self.client.database_status.available && self.cluster.database_available
    }

    /// The database has a configuration (`configure new` was run).
    pub fn configured(&self) -> bool {
        self.cluster.configuration.is_some()
            && self.cluster.recovery_state.name != "configuration_never_created"
    }

    /// The processes of process group `id`.
    pub fn processes_of<'a>(&'a self, id: &'a str) -> impl Iterator<Item = &'a Process> + 'a {
        self.cluster
            .processes
            .values()
            .filter(move |p| p.instance_id() == Some(id))
    }

    /// The coordinators' addresses of the connection string.
    pub fn coordinator_addresses(&self) -> Vec<String> {
        coordinators_of(&self.cluster.connection_string)
    }

    fn excluded_servers(&self) -> impl Iterator<Item = &ExcludedServer> {
        self.cluster
            .configuration
            .iter()
            .flat_map(|c| &c.excluded_servers)
    }

    /// Whether `ip` is excluded (by `IP` or `IP:PORT`).
    pub fn is_address_excluded(&self, ip: &str) -> bool {
        self.excluded_servers()
            .any(|e| e.address.as_deref().is_some_and(|a| address_ip(a) == ip))
    }

    /// Whether process group `id` is excluded by locality (`locality_instance_id:<id>`).
    pub fn is_locality_excluded(&self, id: &str) -> bool {
        let locality = format!("locality_instance_id:{id}");
        self.excluded_servers()
            .any(|e| e.locality.as_deref() == Some(locality.as_str()))
    }

    /// Whether `ip` is excluded, or process group `id` by locality.
    pub fn is_excluded(&self, ip: &str, id: &str) -> bool {
        self.is_address_excluded(ip) || self.is_locality_excluded(id)
    }
}

/// The coordinators' addresses of a connection string `desc:id@a,b,c`.
pub fn coordinators_of(connection_string: &str) -> Vec<String> {
    connection_string
        .split_once('@')
        .map(|(_, list)| {
            list.split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_of_a_configured_cluster_is_read() {
        let text = r#"{"client":{"coordinators":{"coordinators":[{"address":"10.0.0.1:4501","reachable":true}],"quorum_reachable":true},
          "database_status":{"available":true,"healthy":true}},
          "cluster":{"connection_string":"demo:abc@10.0.0.1:4501","generation":3,"database_available":true,
          "recovery_state":{"name":"fully_recovered","active_generations":1,"seconds_since_last_recovered":130.5},
          "configuration":{"redundancy_mode":"double","storage_engine":"ssd-2","excluded_servers":[{"address":"10.0.0.2"},{"locality":"locality_instance_id:demo-storage-3"}]},
          "processes":{"p1":{"address":"10.0.0.1:4501","class_type":"storage","locality":{"instance_id":"demo-storage-1","zoneid":"n1"},
            "roles":[{"role":"storage"},{"role":"coordinator"}],"excluded":false,"command_line":"fdbserver --class storage","uptime_seconds":12.5,"version":"7.1.57"}},
          "data":{"state":{"name":"healthy","healthy":true},"moving_data":{"in_flight_bytes":0}}}}"#;
        let status = DbStatus::parse(&format!("some banner\n{text}")).unwrap();
        assert!(status.available());
        assert!(status.configured());
        assert_eq!(status.coordinator_addresses(), ["10.0.0.1:4501"]);
        assert_eq!(status.processes_of("demo-storage-1").count(), 1);
        assert!(status.is_excluded("10.0.0.2", "x"));
        assert!(status.is_excluded("10.0.0.9", "demo-storage-3"));
        assert!(!status.is_excluded("10.0.0.1", "demo-storage-1"));
        assert_eq!(
            status.cluster.recovery_state.seconds_since_last_recovered,
            130.5
        );
    }

    #[test]
    fn a_new_cluster_is_not_configured_and_garbage_is_an_error() {
        let text = r#"{"client":{"database_status":{"available":false}},"cluster":{"recovery_state":{"name":"configuration_never_created"}}}"#;
        let status = DbStatus::parse(text).unwrap();
        assert!(!status.configured());
        assert!(!status.available());
        assert!(matches!(
            DbStatus::parse("ERROR: timed out"),
            Err(FdbError::Unreadable(_))
        ));
    }
}
