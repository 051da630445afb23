//! Steward: one Kubernetes operator for etcd, PostgreSQL, CrateDB and FoundationDB.
//!
//! The reconcile core (pipeline, operations, status, server-side apply, webhooks) and the
//! runtime that drives it; engines live in their own modules on top of it.
#![forbid(unsafe_code)]

pub mod api;
pub mod cli;
pub mod clock;
pub mod conditions;
pub mod config;
pub mod cratedb;
pub mod crd;
pub mod dev;
pub mod dev_identity;
pub mod embedded;
pub mod engines;
pub mod error;
pub mod etcd;
pub mod foundationdb;
pub mod metrics;
pub mod operation;
pub mod pipeline;
pub mod postgres;
pub mod resources;
pub mod runtime;
pub mod schedule;
pub mod webhook;
