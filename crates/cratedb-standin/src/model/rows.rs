//! A user table's rows: `INSERT` appends them, `UPDATE` and `DELETE` replace them, under the rules `INSERT` follows
//! (a master, every primary active). Rows live in the cluster state, not per shard (see
//! `docs/cratedb-standin.md`, "What is not modelled").

use serde_json::{Map, Value};

use super::{Cluster, ModelError, TableName};

impl Cluster {
    /// Appends rows; every primary must be active (CrateDB fails with unavailable shards).
    pub fn insert_rows(
        &mut self,
        name: &TableName,
        rows: Vec<serde_json::Map<String, serde_json::Value>>,
    ) -> Result<usize, ModelError> {
        self.ensure_writable()?;
        if !self.tables.contains_key(name) {
            return Err(ModelError::TableUnknown(name.clone()));
        }
        self.ensure_primaries_active(name)?;
        let table = self
            .tables
            .get_mut(name)
            .ok_or_else(|| ModelError::TableUnknown(name.clone()))?;
        let n = rows.len();
        table.rows.extend(rows);
        Ok(n)
    }

    /// Fails with unavailable shards unless every primary of the table is active.
    pub(super) fn ensure_primaries_active(&self, name: &TableName) -> Result<(), ModelError> {
        if self.primaries_active(name) {
            Ok(())
        } else {
            Err(ModelError::ShardsUnavailable(name.clone()))
        }
    }

    /// Whether every primary of the table is active (STARTED or RELOCATING).
    pub fn primaries_active(&self, name: &TableName) -> bool {
        !self
            .shards
            .iter()
            .any(|s| &s.table == name && s.primary && !s.state.is_active())
    }

    /// Replaces the rows of a table (the result of an `UPDATE` or a `DELETE` the SQL front
    /// computed on the current rows). Needs a master and every primary active, as a write in
    /// CrateDB does.
    pub fn replace_rows(
        &mut self,
        name: &TableName,
        rows: Vec<Map<String, Value>>,
    ) -> Result<(), ModelError> {
        self.ensure_writable()?;
        self.ensure_primaries_active(name)?;
        let table = self
            .tables
            .get_mut(name)
            .ok_or_else(|| ModelError::TableUnknown(name.clone()))?;
        table.rows = rows;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::{ClusterConfig, NodeSpec, Replicas};

    #[test]
    fn rows_are_replaced_only_with_active_primaries() {
        let mut c = Cluster::new(ClusterConfig::default());
        c.join(NodeSpec::new("a"));
        let t = TableName::new("doc", "t");
        c.create_table(t.clone(), 1, Replicas::Fixed(0), vec![], false)
            .ok();
        let row = |v: i64| json!({"v": v}).as_object().cloned().unwrap_or_default();
        assert_eq!(
            c.replace_rows(&t, vec![row(1)]),
            Err(ModelError::ShardsUnavailable(t.clone()))
        );
        c.tick_until(5, |c| c.primaries_active(&TableName::new("doc", "t")));
        assert_eq!(c.replace_rows(&t, vec![row(2)]), Ok(()));
        assert_eq!(c.table(&t).map(|t| t.rows.clone()), Some(vec![row(2)]));
        assert_eq!(
            c.replace_rows(&TableName::new("doc", "x"), vec![]),
            Err(ModelError::TableUnknown(TableName::new("doc", "x")))
        );
    }
}
