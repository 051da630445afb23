#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! End-to-end tests of the node agent: an embedded API server, the agent, and real processes
//! (busybox-style shell pods, etcd, PostgreSQL). They need root (mount namespaces).

#[path = "node_e2e/common.rs"]
mod common;
#[path = "node_e2e/databases.rs"]
mod databases;
#[path = "node_e2e/identity.rs"]
mod identity;
#[path = "node_e2e/metrics.rs"]
mod metrics;
#[path = "node_e2e/pods.rs"]
mod pods;
#[path = "node_e2e/spdy.rs"]
mod spdy;
