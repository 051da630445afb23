//! The etcd pipeline's steps, one per file, in pipeline order.

pub mod apply_services;
pub mod manage_members;
pub mod sweep_orphans;
pub mod update_status;
pub mod validate_spec;
