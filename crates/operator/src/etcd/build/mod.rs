//! (pure) Desired children of an etcd cluster.

pub mod member;
pub mod pdb;
pub mod service;
pub mod snapshot;
