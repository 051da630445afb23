//! Tables, shard copies, allocation, relocation and health.
//!
//! - Shards and replicas: "Sharding" and "Replication"
//!   (<https://cratedb.com/docs/crate/reference/en/latest/general/ddl/replication.html>):
//!   `number_of_replicas` is a number or a range such as `0-1` / `2-4` / `0-all` that follows
//!   the number of data nodes; a replica is never allocated to the node holding its primary,
//!   and a lost primary is replaced by promoting a started replica.
//! - Allocation filtering: `cluster.routing.allocation.exclude.*`
//!   (<https://cratedb.com/docs/crate/reference/en/latest/config/cluster.html#routing-allocation>):
//!   no copy is allocated to an excluded node, and started copies move off it when another
//!   node can take them (they stay when none can).
//! - Shard states as `sys.shards.routing_state` shows them: UNASSIGNED, INITIALIZING,
//!   STARTED, RELOCATING (<https://cratedb.com/docs/crate/reference/en/latest/admin/system-information.html#shards>).
//! - Health: `sys.health` ("Health definition",
//!   <https://cratedb.com/docs/crate/reference/en/latest/admin/system-information.html#health>):
//!   RED when a primary is not started, YELLOW when a shard is under-replicated, else GREEN.
//!
//! Not modelled: rebalancing of balanced clusters, partitions, awareness, disk watermarks.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Cluster, ModelError};

/// `schema.name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TableName {
    pub schema: String,
    pub name: String,
}

impl TableName {
    pub fn new(schema: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            schema: schema.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}

/// `number_of_replicas`: a fixed count or an auto-expanding range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Replicas {
    Fixed(u32),
    /// `min-max`; `max: None` is `all`.
    Range {
        min: u32,
        max: Option<u32>,
    },
}

impl Replicas {
    /// Parses `2`, `"2"`, `"0-1"` or `"1-all"`.
    pub fn parse(text: &str) -> Result<Self, ModelError> {
        let bad = || ModelError::InvalidArgument(format!("Invalid number_of_replicas '{text}'"));
        match text.trim().split_once('-') {
            None => text.trim().parse().map(Replicas::Fixed).map_err(|_| bad()),
            Some((min, max)) => {
                let min = min.trim().parse().map_err(|_| bad())?;
                let max = match max.trim() {
                    "all" => None,
                    m => Some(m.parse().map_err(|_| bad())?),
                };
                if max.is_some_and(|m| m < min) {
                    return Err(bad());
                }
                Ok(Replicas::Range { min, max })
            }
        }
    }

    /// The replica count for a cluster with `data_nodes` data nodes.
    pub fn effective(self, data_nodes: usize) -> u32 {
        match self {
            Replicas::Fixed(n) => n,
            Replicas::Range { min, max } => {
                let fit = u32::try_from(data_nodes.saturating_sub(1)).unwrap_or(u32::MAX);
                fit.clamp(min, max.unwrap_or(u32::MAX).max(min))
            }
        }
    }
}

impl fmt::Display for Replicas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Replicas::Fixed(n) => write!(f, "{n}"),
            Replicas::Range {
                min,
                max: Some(max),
            } => write!(f, "{min}-{max}"),
            Replicas::Range { min, max: None } => write!(f, "{min}-all"),
        }
    }
}

/// A user table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Table {
    pub name: TableName,
    pub number_of_shards: u32,
    pub number_of_replicas: Replicas,
    /// Column names in declaration order.
    pub columns: Vec<String>,
    /// Declared column types; a column missing here (or a state written before types were
    /// kept) is `undefined`.
    #[serde(default)]
    pub types: std::collections::BTreeMap<String, super::DataType>,
    /// Inserted rows, one JSON object each.
    pub rows: Vec<serde_json::Map<String, serde_json::Value>>,
}

/// `sys.shards.routing_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShardState {
    Unassigned,
    Initializing,
    Started,
    Relocating,
}

impl ShardState {
    pub fn as_str(self) -> &'static str {
        match self {
            ShardState::Unassigned => "UNASSIGNED",
            ShardState::Initializing => "INITIALIZING",
            ShardState::Started => "STARTED",
            ShardState::Relocating => "RELOCATING",
        }
    }

    /// Started or relocating: the copy serves reads and writes.
    pub fn is_active(self) -> bool {
        matches!(self, ShardState::Started | ShardState::Relocating)
    }
}

/// One copy (primary or replica) of one shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardCopy {
    pub table: TableName,
    pub shard: u32,
    pub primary: bool,
    pub state: ShardState,
    /// The node holding it; `None` when unassigned.
    pub node: Option<String>,
    /// Target of a relocation in progress.
    pub relocating_node: Option<String>,
    remaining_ticks: u32,
    /// For an unassigned primary whose data exists only on a node that left: that node. Such a
    /// primary can only come back there (CrateDB never invents data for a lost primary).
    pub last_node: Option<String>,
}

/// GREEN / YELLOW / RED with `sys.health.severity` 1 / 2 / 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Health {
    Green,
    Yellow,
    Red,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Green => "GREEN",
            Health::Yellow => "YELLOW",
            Health::Red => "RED",
        }
    }

    pub fn severity(self) -> i64 {
        match self {
            Health::Green => 1,
            Health::Yellow => 2,
            Health::Red => 3,
        }
    }
}

/// One row of `sys.health`. Counts are `-1` when no master is elected, as documented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableHealth {
    pub table: TableName,
    pub health: Health,
    pub missing_shards: i64,
    pub underreplicated_shards: i64,
}

/// Serializes the tables as a list (JSON object keys must be strings, and a [`TableName`] is
/// a pair): the published cluster state and `path.data` carry them this way.
pub(crate) mod as_list {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::{Table, TableName};

    pub fn serialize<S: Serializer>(
        tables: &BTreeMap<TableName, Table>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let list: Vec<&Table> = tables.values().collect();
        list.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<TableName, Table>, D::Error> {
        let list = Vec::<Table>::deserialize(d)?;
        Ok(list.into_iter().map(|t| (t.name.clone(), t)).collect())
    }
}

impl Cluster {
    /// `CREATE TABLE`: shard copies start UNASSIGNED and are allocated by the master.
    pub fn create_table(
        &mut self,
        name: TableName,
        number_of_shards: u32,
        number_of_replicas: Replicas,
        columns: Vec<(String, super::DataType)>,
        if_not_exists: bool,
    ) -> Result<bool, ModelError> {
        self.ensure_writable()?;
        if self.tables.contains_key(&name) {
            return if if_not_exists {
                Ok(false)
            } else {
                Err(ModelError::TableAlreadyExists(name))
            };
        }
        if number_of_shards == 0 {
            return Err(ModelError::InvalidArgument(
                "num_shards in CLUSTERED clause must be greater than 0".into(),
            ));
        }
        self.tables.insert(
            name.clone(),
            Table {
                name,
                number_of_shards,
                number_of_replicas,
                columns: columns.iter().map(|(c, _)| c.clone()).collect(),
                types: columns.into_iter().collect(),
                rows: Vec::new(),
            },
        );
        self.reroute();
        Ok(true)
    }

    pub fn drop_table(&mut self, name: &TableName, if_exists: bool) -> Result<bool, ModelError> {
        self.ensure_writable()?;
        if self.tables.remove(name).is_none() {
            return if if_exists {
                Ok(false)
            } else {
                Err(ModelError::TableUnknown(name.clone()))
            };
        }
        self.shards.retain(|s| &s.table != name);
        Ok(true)
    }

    /// `ALTER TABLE … SET (number_of_replicas = …)`.
    pub fn set_replicas(&mut self, name: &TableName, replicas: Replicas) -> Result<(), ModelError> {
        self.ensure_writable()?;
        let table = self
            .tables
            .get_mut(name)
            .ok_or_else(|| ModelError::TableUnknown(name.clone()))?;
        table.number_of_replicas = replicas;
        self.reroute();
        Ok(())
    }

    pub fn tables(&self) -> impl Iterator<Item = &Table> {
        self.tables.values()
    }

    pub fn table(&self, name: &TableName) -> Option<&Table> {
        self.tables.get(name)
    }

    pub fn shards(&self) -> &[ShardCopy] {
        &self.shards
    }

    /// Copies held by `node` (as holder; a relocation target does not hold it yet).
    pub fn shard_count_on(&self, node: &str) -> usize {
        self.shards
            .iter()
            .filter(|s| s.node.as_deref() == Some(node))
            .count()
    }

    /// `sys.health`, one row per table.
    pub fn table_health(&self) -> Vec<TableHealth> {
        let data_nodes = self.data_nodes().count();
        self.tables
            .values()
            .map(|t| {
                if self.master.is_none() {
                    return TableHealth {
                        table: t.name.clone(),
                        health: Health::Red,
                        missing_shards: -1,
                        underreplicated_shards: -1,
                    };
                }
                let wanted = t.number_of_replicas.effective(data_nodes);
                let (mut missing, mut under) = (0, 0);
                for shard in 0..t.number_of_shards {
                    let copies = self
                        .shards
                        .iter()
                        .filter(|s| s.table == t.name && s.shard == shard);
                    let (mut primary_ok, mut replicas) = (false, 0);
                    for c in copies {
                        if c.primary {
                            primary_ok = c.state.is_active();
                        } else if c.state.is_active() {
                            replicas += 1;
                        }
                    }
                    if !primary_ok {
                        missing += 1;
                    }
                    if replicas < wanted {
                        under += 1;
                    }
                }
                let health = if missing > 0 {
                    Health::Red
                } else if under > 0 {
                    Health::Yellow
                } else {
                    Health::Green
                };
                TableHealth {
                    table: t.name.clone(),
                    health,
                    missing_shards: missing,
                    underreplicated_shards: under,
                }
            })
            .collect()
    }

    /// The cluster's health: the worst table health ("the health with the highest severity
    /// defines the health of the query scope"); GREEN without tables, RED without a master.
    pub fn health(&self) -> Health {
        if self.master.is_none() {
            return Health::Red;
        }
        self.table_health()
            .iter()
            .map(|h| h.health)
            .max()
            .unwrap_or(Health::Green)
    }

    /// Copies on a node that left: a lost primary is replaced by an active replica when there
    /// is one; otherwise it waits, unassigned, for that node's data.
    pub(crate) fn shards_lost_on(&mut self, node: &str) {
        for i in 0..self.shards.len() {
            if self.shards[i].relocating_node.as_deref() == Some(node) {
                let s = &mut self.shards[i];
                s.relocating_node = None;
                s.state = ShardState::Started;
                s.remaining_ticks = 0;
            }
            if self.shards[i].node.as_deref() != Some(node) {
                continue;
            }
            let had_data = self.shards[i].state.is_active();
            let (table, shard, primary) = (
                self.shards[i].table.clone(),
                self.shards[i].shard,
                self.shards[i].primary,
            );
            let promoted = primary
                && match self.shards.iter().position(|r| {
                    r.table == table
                        && r.shard == shard
                        && !r.primary
                        && r.state.is_active()
                        && r.node.as_deref() != Some(node)
                }) {
                    Some(r) => {
                        self.shards[r].primary = true;
                        true
                    }
                    None => false,
                };
            let s = &mut self.shards[i];
            s.node = None;
            s.relocating_node = None;
            s.state = ShardState::Unassigned;
            s.remaining_ticks = 0;
            if promoted {
                s.primary = false;
            }
            s.last_node = (s.primary && had_data).then(|| node.to_owned());
        }
    }

    /// Recoveries and relocations in flight advance by one tick.
    pub(crate) fn advance_shards(&mut self) {
        for s in &mut self.shards {
            match s.state {
                ShardState::Initializing => {
                    s.remaining_ticks = s.remaining_ticks.saturating_sub(1);
                    if s.remaining_ticks == 0 {
                        s.state = ShardState::Started;
                    }
                }
                ShardState::Relocating => {
                    s.remaining_ticks = s.remaining_ticks.saturating_sub(1);
                    if s.remaining_ticks == 0 {
                        s.node = s.relocating_node.take();
                        s.state = ShardState::Started;
                    }
                }
                ShardState::Unassigned | ShardState::Started => {}
            }
        }
    }

    /// The master's allocation pass: copies per shard follow `number_of_replicas`, unassigned
    /// copies are allocated, and started copies leave excluded nodes.
    pub(crate) fn reroute(&mut self) {
        if self.master.is_none() {
            return;
        }
        self.adjust_copy_counts();
        for i in 0..self.shards.len() {
            if self.shards[i].state != ShardState::Unassigned {
                continue;
            }
            let s = &self.shards[i];
            let target = if s.primary {
                match &s.last_node {
                    Some(n) => self
                        .nodes
                        .get(n)
                        .filter(|n| n.spec.data)
                        .map(|n| n.spec.name.clone()),
                    None => self.pick_node(&s.table, s.shard),
                }
            } else if self.primary_active(&s.table, s.shard) {
                self.pick_node(&s.table, s.shard)
            } else {
                None
            };
            if let Some(node) = target {
                let ticks = self.config.init_ticks;
                let s = &mut self.shards[i];
                s.node = Some(node);
                s.last_node = None;
                s.remaining_ticks = ticks;
                s.state = if ticks == 0 {
                    ShardState::Started
                } else {
                    ShardState::Initializing
                };
            }
        }
        for i in 0..self.shards.len() {
            let s = &self.shards[i];
            if s.state != ShardState::Started
                || !s.node.as_deref().is_some_and(|n| self.is_excluded(n))
            {
                continue;
            }
            if let Some(target) = self.pick_node(&s.table, s.shard) {
                let ticks = self.config.relocation_ticks;
                let s = &mut self.shards[i];
                if ticks == 0 {
                    s.node = Some(target);
                } else {
                    s.state = ShardState::Relocating;
                    s.relocating_node = Some(target);
                    s.remaining_ticks = ticks;
                }
            }
        }
    }

    fn primary_active(&self, table: &TableName, shard: u32) -> bool {
        self.shards
            .iter()
            .any(|s| &s.table == table && s.shard == shard && s.primary && s.state.is_active())
    }

    /// Adds or removes replica copies so each shard has `1 + replicas` copies; removes
    /// unassigned copies first, then the most recently started (highest node name).
    fn adjust_copy_counts(&mut self) {
        let data_nodes = self.data_nodes().count();
        let mut wanted: Vec<(TableName, u32, usize)> = Vec::new();
        for t in self.tables.values() {
            let copies = 1 + t.number_of_replicas.effective(data_nodes) as usize;
            for shard in 0..t.number_of_shards {
                wanted.push((t.name.clone(), shard, copies));
            }
        }
        for (table, shard, copies) in wanted {
            let have = self
                .shards
                .iter()
                .filter(|s| s.table == table && s.shard == shard)
                .count();
            for extra in 0..copies.saturating_sub(have) {
                let primary = have == 0 && extra == 0;
                self.shards.push(ShardCopy {
                    table: table.clone(),
                    shard,
                    primary,
                    state: ShardState::Unassigned,
                    node: None,
                    relocating_node: None,
                    remaining_ticks: 0,
                    last_node: None,
                });
            }
            for _ in 0..have.saturating_sub(copies) {
                let rank = |s: &ShardCopy| match s.state {
                    ShardState::Unassigned => 0,
                    ShardState::Initializing => 1,
                    ShardState::Started | ShardState::Relocating => 2,
                };
                let victim = self
                    .shards
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.table == table && s.shard == shard && !s.primary)
                    .min_by(|(_, a), (_, b)| {
                        rank(a).cmp(&rank(b)).then_with(|| b.node.cmp(&a.node))
                    })
                    .map(|(i, _)| i);
                if let Some(i) = victim {
                    self.shards.remove(i);
                }
            }
        }
        self.shards.sort_by(|a, b| {
            (&a.table, a.shard, !a.primary, &a.node).cmp(&(&b.table, b.shard, !b.primary, &b.node))
        });
    }

    /// The allowed data node holding the fewest copies that holds no copy of this shard.
    fn pick_node(&self, table: &TableName, shard: u32) -> Option<String> {
        let mut load: BTreeMap<&str, usize> = BTreeMap::new();
        for s in &self.shards {
            for n in s.node.iter().chain(s.relocating_node.iter()) {
                *load.entry(n.as_str()).or_default() += 1;
            }
        }
        self.data_nodes()
            .filter(|n| !self.is_excluded(&n.spec.name))
            .filter(|n| {
                !self.shards.iter().any(|s| {
                    &s.table == table
                        && s.shard == shard
                        && (s.node.as_ref() == Some(&n.spec.name)
                            || s.relocating_node.as_ref() == Some(&n.spec.name))
                })
            })
            .min_by_key(|n| {
                (
                    load.get(n.spec.name.as_str()).copied().unwrap_or(0),
                    n.spec.name.clone(),
                )
            })
            .map(|n| n.spec.name.clone())
    }
}

#[cfg(test)]
#[path = "tables_tests.rs"]
mod tests;
