//! (pure) Desired children of an etcd cluster.

pub mod service;
