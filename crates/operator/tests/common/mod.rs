//! Helpers shared by the integration tests.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

/// Reads a file relative to the repository root.
pub fn repo_file(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// kube's and reqwest's rustls need a process-wide crypto provider.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
pub mod counting;
pub mod e2e;
pub mod hooks;
