//! The list of engines: the one place that names every engine (style.md §11). The runtime
//! runs what is listed here ([`crate::runtime::engine::Engine`]); a new engine adds one line.

use crate::runtime::engine::Engine;

/// Every engine Steward runs, in the order their controllers start.
pub fn all() -> Vec<Box<dyn Engine>> {
    vec![
        Box::new(crate::etcd::engine::Etcd),
        Box::new(crate::cratedb::engine::CrateDb),
        Box::new(crate::postgres::engine::Postgres),
    ]
}
