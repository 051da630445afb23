//! The list of engines: the one place that names every engine (style.md §11). The runtime
//! runs what is listed here ([`Engine`]) and the REST API serves it ([`ClusterApi`]); a new
//! engine implements both in its own folder and adds one line below.

use crate::api::engine::ClusterApi;
use crate::runtime::engine::Engine;

/// An engine, as the runtime and the REST API both see it.
pub trait Registered: Engine + ClusterApi {}

impl<T: Engine + ClusterApi> Registered for T {}

static ALL: &[&dyn Registered] = &[
    &crate::etcd::engine::Etcd,
    &crate::postgres::engine::Postgres,
    &crate::cratedb::engine::CrateDb,
    &crate::foundationdb::engine::FoundationDb,
];

/// Every engine Steward runs, in this order (the API lists clusters and names engines in it).
pub fn all() -> &'static [&'static dyn Registered] {
    ALL
}
