//! A CrateDB stand-in: a small, deterministic model of a CrateDB cluster ([`model`]) behind
//! CrateDB's SQL dialect ([`sql`]), its HTTP `/_sql` endpoint ([`http`]) and its PostgreSQL wire
//! protocol endpoint ([`mod@pgwire`]); several stand-in processes form one cluster over the
//! stand-in's own transport ([`cluster`]).
//!
//! It exists because CrateDB cannot run on Steward's machines; it is never CrateDB. What it
//! models, what it does not, and the CrateDB documentation each rule follows are listed in
//! `docs/cratedb-standin.md`.

pub mod cluster;
pub mod config;
pub mod crash;
pub mod http;
pub mod model;
pub mod pgtypes;
pub mod pgwire;
pub mod sql;

pub use config::NodeConfig;
pub use http::{run, spawn};
