//! (pure) The children of a `CrateCluster`, built from the validated spec.

pub mod pdb;
pub mod service;
pub mod statefulset;
