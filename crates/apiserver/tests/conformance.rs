//! Conformance suite for the local control plane: every test talks only HTTP through
//! `kube::Client`, so the same suite runs against a real cluster when `STEWARD_E2E_KUBECONFIG`
//! names a kubeconfig (each test then works in a fresh namespace and cleans up after itself).
//! Without it, each test starts its own embedded server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "conformance/support.rs"]
mod support;

#[path = "conformance/cel.rs"]
mod cel;
#[path = "conformance/crd.rs"]
mod crd;
#[path = "conformance/crud.rs"]
mod crud;
#[path = "conformance/discovery.rs"]
mod discovery;
#[path = "conformance/disruption.rs"]
mod disruption;
#[path = "conformance/gc.rs"]
mod gc;
#[path = "conformance/metrics.rs"]
mod metrics;
#[path = "conformance/openapi.rs"]
mod openapi;
#[path = "conformance/patch.rs"]
mod patch;
#[path = "conformance/pods.rs"]
mod pods;
#[path = "conformance/protobuf.rs"]
mod protobuf;
#[path = "conformance/rbac.rs"]
mod rbac;
#[path = "conformance/selectors.rs"]
mod selectors;
#[path = "conformance/services.rs"]
mod services;
#[path = "conformance/ssa.rs"]
mod ssa;
#[path = "conformance/watch.rs"]
mod watch;
#[path = "conformance/workloads.rs"]
mod workloads;
